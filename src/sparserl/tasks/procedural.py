"""Procedural math tasks for the tiny scale, generated offline with reasoning-gym.

Distinct problems are split three ways by a hash of the problem text (`tasks.split`): the
benchmarks' side (`eval`), the RL pool's side (`rl`) and pre-training's (the rest). So no
benchmark problem and no RL-pool problem is in the pre-training corpus, as DAPO-Math-17k is not a
policy's SFT data: RL has to move the policy on problems it never rehearsed. With `rl: 0` the pool
shares pre-training's side (the first tiny world, where RL rehearsed memorised problems). Levels
with few distinct problems give smaller sets than asked; the row counts are in the manifests.

`tasks.pretrain_noise` makes a share of the corpus targets wrong in one systematic way (`off_by_one`:
the answer +-1), a stand-in for the wrong solutions of real pre-training data: the policy learns to
put that share of its mass on a wrong answer, and RL with a verifier can take it back (the room of
RL's sharpening under the evaluation's top-p; `sparserl world-report` measures it).

`tasks.world` (world 2.0, sparserl.tasks.worked) replaces that noise: worked solutions with
systematic slips on a hash-chosen share of problem templates, and gold answers by the usual
operator precedence. Without the key every artifact is world 1's.
"""
from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd

from sparserl.core.config import ConfigError, section_setting
from sparserl.tasks import worked
from sparserl.tasks.prompts import format_target

SIDES = ("eval", "rl", "pretrain")


def split_of(problem: str, split: dict) -> str:
    """'eval', 'rl' or 'pretrain': the problem text alone decides (generators share expressions,
    chain_sum and basic_arithmetic both make "4 - 1", and the split must hold across them)."""
    h = int(hashlib.sha1(problem.encode()).hexdigest()[:8], 16) % 10_000
    if h < split["eval"] * 10_000:
        return "eval"
    if h < (split["eval"] + split["rl"]) * 10_000:
        return "rl"
    return "pretrain"


def task_split(t: dict) -> dict:
    """`tasks.split`, or the two-way split of `tasks.heldout_fraction` (pool on pre-training's side)."""
    if "split" in t:
        return {"eval": float(t["split"]["eval"]), "rl": float(section_setting(t["split"], "tasks", "split", "rl"))}
    return {"eval": float(section_setting(t, "tasks", "heldout_fraction")), "rl": 0.0}


def pool_side(split: dict) -> str:
    return "rl" if split["rl"] > 0 else "pretrain"


def _generate(level: dict, n: int, seed: int, where: str = "tasks level") -> list[tuple[str, str]]:
    """(problem, answer) pairs of a reasoning-gym level. The problem is its metadata's
    `expression` (else the question), or the metadata key `field` names (BASIS Table 2's OOD
    families: simple_equations' `equation`). `where` names the config list in errors."""
    import reasoning_gym as rg  # 2 s to import: only the jobs that make tasks pay for it
    params = dict(level.get("params") or {})
    if "operators" in params:
        params["operators"] = tuple(params["operators"])
    try:
        ds = rg.create_dataset(level["generator"], size=n, seed=seed, **params)
    except Exception as e:  # rg raises bare asserts/TypeErrors on bad params
        raise ConfigError(f"{where} '{level['name']}': reasoning-gym could not build "
                          f"'{level['generator']}' with params {params}: {e}") from e
    field = level.get("field")
    out = []
    for e in ds:
        if field is None:
            expr = e["metadata"].get("expression") or e["question"]
        elif field in e["metadata"]:
            expr = e["metadata"][field]
        else:
            raise ConfigError(f"{where} '{level['name']}': {level['generator']} has no metadata field "
                              f"{field!r} (has {sorted(e['metadata'])}); fix `field`")
        out.append((str(expr), str(e["answer"]).strip()))
    return out


def distinct_problems(level: dict, want: int, seed: int, side: str, split: dict,
                      exclude: set[str] = frozenset(), max_tries: int = 8,
                      where: str = "tasks level") -> list[tuple[str, str]]:
    """Up to `want` distinct (problem, answer) pairs on one side of the split."""
    seen: dict[str, str] = {}
    n = max(256, 4 * want)
    for t in range(max_tries):
        for prob, ans in _generate(level, n, seed + 7919 * t, where):
            if prob not in seen and prob not in exclude and split_of(prob, split) == side:
                seen[prob] = ans
                if len(seen) >= want:
                    return list(seen.items())
        n *= 2
    return list(seen.items())


def _gold(pairs, t: dict) -> list[tuple[str, str]]:
    """World 2.0's answers are the usual-precedence value (reasoning-gym's basic_arithmetic
    evaluates left to right once the expression lost its parentheses); world 1 keeps rg's."""
    if worked.settings(t) is None:
        return pairs
    return [(p, str(worked.value(p))) for p, _ in pairs]


def _records(pairs, level: dict, level_idx: int, prefix: str) -> list[dict]:
    return [{"id": f"{prefix}/{level['name']}/{i}", "problem": p, "answer": a,
             "source": level["name"], "level": level_idx, "generator": level["generator"]}
            for i, (p, a) in enumerate(pairs)]


def make_train_pool(cfg: dict) -> pd.DataFrame:
    t = cfg["tasks"]
    split = task_split(t)
    levels = t["train_pool"]["levels"]
    rows: list[dict] = []
    for li, lv in enumerate(levels):
        # a level with few distinct problems hands its shortfall to the levels after it
        per = -(-(t["train_pool"]["size"] - len(rows)) // (len(levels) - li))
        taken = {r["problem"] for r in rows}
        pairs = distinct_problems(lv, per, cfg["seed"] * 1000 + li, pool_side(split), split,
                                  exclude=taken)
        rows += _records(_gold(pairs, t), lv, li, "train")
    return pd.DataFrame(rows)


def corrupt(answer: str, kind: str, rng: np.random.Generator) -> str:
    """A wrong target of the given kind: `off_by_one` adds or subtracts 1 (a fair coin)."""
    if kind != "off_by_one":
        raise ValueError(f"tasks.pretrain_noise.kind: unknown kind {kind!r}; use 'off_by_one'")
    try:
        value = int(answer)
    except ValueError:
        raise ValueError(f"tasks.pretrain_noise: answer {answer!r} is not an integer; "
                         "off_by_one needs integer answers") from None
    return str(value + (1 if rng.random() < 0.5 else -1))


def make_pretrain_corpus(cfg: dict) -> pd.DataFrame:
    """Samples with repetition from pre-training's side of every training level (and of the
    `tasks.pretrain_extra` levels), a share `pretrain_noise.rate` of them with a wrong target.
    Columns add `clean_answer` and `noisy` to the pool's."""
    t = cfg["tasks"]
    split = task_split(t)
    levels = list(t["train_pool"]["levels"]) + list(t.get("pretrain_extra", []))
    per = -(-t["pretrain_corpus_size"] // len(levels))
    rows = []
    for li, lv in enumerate(levels):
        pairs: list[tuple[str, str]] = []
        seed = cfg["seed"] * 1000 + 500 + li
        while len(pairs) < per:
            pairs += [(p, a) for p, a in _generate(lv, 2 * per, seed) if split_of(p, split) == "pretrain"]
            seed += 7919
        rows += _records(_gold(pairs[:per], t), lv, li, "corpus")
    df = pd.DataFrame(rows).sample(frac=1.0, random_state=cfg["seed"]).reset_index(drop=True)
    df["clean_answer"] = df["answer"]
    w = worked.settings(t)
    if w is not None:
        return _worked_corpus(cfg, df, w)
    noise = t.get("pretrain_noise") or {}
    rate = float(section_setting(noise, "tasks", "pretrain_noise", "rate"))
    rng = np.random.default_rng([cfg["seed"], 4_099])
    noisy = rng.random(len(df)) < rate
    df["noisy"] = noisy
    kind = section_setting(noise, "tasks", "pretrain_noise", "kind")
    df.loc[noisy, "answer"] = [corrupt(a, kind, rng) for a in df.loc[noisy, "clean_answer"]]
    return df


def _worked_corpus(cfg: dict, df: pd.DataFrame, w: dict) -> pd.DataFrame:
    """World 2.0's targets: `target` the worked text, `answer` its final (taught) answer, `slip`
    whether the row carries its template's slip, `slip_template`, `template`, `noisy`."""
    rng = np.random.default_rng([cfg["seed"], 4_099, 2])
    sols = [worked.corpus_solution(p, w, rng, lambda a: format_target(cfg, a)) for p in df["problem"]]
    df["target"] = [s[0] for s in sols]
    df["answer"] = [s[1] for s in sols]
    df["slip"] = [s[2] for s in sols]
    df["slip_template"] = [s[3] for s in sols]
    df["template"] = [s[4] for s in sols]
    df["noisy"] = df["answer"] != df["clean_answer"]
    return df


def make_benchmarks(cfg: dict) -> dict[str, pd.DataFrame]:
    t = cfg["tasks"]
    split = task_split(t)
    out: dict[str, pd.DataFrame] = {}
    taken: set[str] = set()
    for bi, b in enumerate(t["benchmarks"]):
        pairs = distinct_problems(b, section_setting(b, "$defs", "level", "size"), cfg["seed"] * 1000 + 900 + bi,
                                  "eval",
                                  split, exclude=taken)
        pairs = _gold(pairs, t)
        taken |= {p for p, _ in pairs}
        if not pairs:
            raise ValueError(f"tasks.benchmarks '{b['name']}': no held-out problems could be "
                             "generated; raise tasks.split.eval or change its params")
        out[b["name"]] = pd.DataFrame(_records(pairs, b, bi, b["name"]))
    return out


def in_distribution(cfg: dict) -> dict[str, bool]:
    """Benchmark name -> whether it draws from a level of the RL pool (same generator and params):
    its held-out problems are the pool's distribution, the others are harder or other tasks."""
    t = cfg.get("tasks") or {}
    pool = [(lv["generator"], lv.get("params", {})) for lv in t.get("train_pool", {}).get("levels", [])]
    return {b["name"]: (b["generator"], b.get("params", {})) in pool
            for b in t.get("benchmarks", []) if isinstance(b, dict)}
