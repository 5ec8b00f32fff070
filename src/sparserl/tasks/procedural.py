"""Procedural math tasks for the tiny scale, generated offline with reasoning-gym.

Distinct problems are split between training and held-out benchmarks by a hash of the problem
text, so a benchmark problem never appears in the training pool or the pre-training corpus, even
for levels with only ~200 distinct problems (those benchmarks are then smaller than asked; the
row count is in each artifact's manifest).
"""
from __future__ import annotations

import hashlib

import pandas as pd
import reasoning_gym as rg


def _is_heldout(problem: str, fraction: float) -> bool:
    # the problem text alone decides: generators share expressions (chain_sum and
    # basic_arithmetic both make "4 - 1"), and the split must hold across them
    h = int(hashlib.sha1(problem.encode()).hexdigest()[:8], 16)
    return (h % 10_000) < fraction * 10_000


def _generate(level: dict, n: int, seed: int) -> list[tuple[str, str]]:
    params = dict(level.get("params", {}))
    if "operators" in params:
        params["operators"] = tuple(params["operators"])
    try:
        ds = rg.create_dataset(level["generator"], size=n, seed=seed, **params)
    except Exception as e:  # rg raises bare asserts/TypeErrors on bad params
        raise ValueError(f"tasks level '{level['name']}': reasoning-gym could not build "
                         f"'{level['generator']}' with params {params}: {e}") from e
    out = []
    for e in ds:
        expr = e["metadata"].get("expression") or e["question"]
        out.append((str(expr), str(e["answer"]).strip()))
    return out


def distinct_problems(level: dict, want: int, seed: int, heldout: bool, fraction: float,
                      exclude: set[str] = frozenset(), max_tries: int = 8) -> list[tuple[str, str]]:
    """Up to `want` distinct (problem, answer) pairs on one side of the hash split."""
    seen: dict[str, str] = {}
    n = max(256, 4 * want)
    for t in range(max_tries):
        for prob, ans in _generate(level, n, seed + 7919 * t):
            if prob not in seen and prob not in exclude and _is_heldout(prob, fraction) == heldout:
                seen[prob] = ans
                if len(seen) >= want:
                    return list(seen.items())
        n *= 2
    return list(seen.items())


def _records(pairs, level: dict, level_idx: int, prefix: str) -> list[dict]:
    return [{"id": f"{prefix}/{level['name']}/{i}", "problem": p, "answer": a,
             "source": level["name"], "level": level_idx, "generator": level["generator"]}
            for i, (p, a) in enumerate(pairs)]


def make_train_pool(cfg: dict) -> pd.DataFrame:
    t = cfg["tasks"]
    levels = t["train_pool"]["levels"]
    rows: list[dict] = []
    for li, lv in enumerate(levels):
        # a level with few distinct problems hands its shortfall to the levels after it
        per = -(-(t["train_pool"]["size"] - len(rows)) // (len(levels) - li))
        taken = {r["problem"] for r in rows}
        pairs = distinct_problems(lv, per, cfg["seed"] * 1000 + li, False, t["heldout_fraction"],
                                  exclude=taken)
        rows += _records(pairs, lv, li, "train")
    return pd.DataFrame(rows)


def make_pretrain_corpus(cfg: dict) -> pd.DataFrame:
    """Samples with repetition from the training side of every training level."""
    t = cfg["tasks"]
    levels = t["train_pool"]["levels"]
    per = -(-t["pretrain_corpus_size"] // len(levels))
    rows = []
    for li, lv in enumerate(levels):
        pairs: list[tuple[str, str]] = []
        seed = cfg["seed"] * 1000 + 500 + li
        while len(pairs) < per:
            pairs += [(p, a) for p, a in _generate(lv, 2 * per, seed)
                      if not _is_heldout(p, t["heldout_fraction"])]
            seed += 7919
        rows += _records(pairs[:per], lv, li, "corpus")
    return pd.DataFrame(rows).sample(frac=1.0, random_state=cfg["seed"]).reset_index(drop=True)


def make_benchmarks(cfg: dict) -> dict[str, pd.DataFrame]:
    t = cfg["tasks"]
    out: dict[str, pd.DataFrame] = {}
    taken: set[str] = set()
    for bi, b in enumerate(t["benchmarks"]):
        pairs = distinct_problems(b, b.get("size", 128), cfg["seed"] * 1000 + 900 + bi, True,
                                  t["heldout_fraction"], exclude=taken)
        taken |= {p for p, _ in pairs}
        if not pairs:
            raise ValueError(f"tasks.benchmarks '{b['name']}': no held-out problems could be "
                             "generated; raise tasks.heldout_fraction or change its params")
        out[b["name"]] = pd.DataFrame(_records(pairs, b, bi, b["name"]))
    return out
