"""The validation split the RL learning rates and steps are chosen on (`rl.lr_tuning`, sparserl.engines.lr_tuning).

Distinct problems of the RL pool's levels, drawn from the pool's side of the hash split
(`procedural.split_of`, `procedural.pool_side`), so they come from the distribution RL trains on
but were never trained on: every problem of the training pool is excluded, and so is every
problem of the pre-training corpus and of the benchmarks. The hash keeps the benchmarks' side
apart already; the explicit exclusions also hold when the pool shares pre-training's side
(`tasks.split.rl: 0`), where the corpus may hold pool-side problems. Where rl.lr_tuning is on,
the rates and steps come from this split alone (`engines.lr_tuning.validation_argmax`), and the
scoring rereads the pool, corpus and benchmarks and refuses a split that meets them
(`engines.lr_tuning.guard_validation`). Where it is off (tiny), rl.lr is a fixed, untuned prior.
"""
from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

from sparserl.core.config import ConfigError
from sparserl.tasks.procedural import distinct_problems, pool_side, split_of, task_split

# generator seeds: cfg.seed * 1000 + this + level (the pool's use + level, the corpus's + 500 + level,
# the benchmarks' + 900 + index), so the validation draws its own problems first
SEED_OFFSET = 300


def make_validation(cfg: dict, size: int, pool: pd.DataFrame, corpus: pd.DataFrame | None = None,
                    benchmarks: Iterable[pd.DataFrame] = ()) -> pd.DataFrame:
    """Up to `size` distinct pool-side problems of `tasks.train_pool.levels`, none of them in
    `pool`, `corpus` or `benchmarks`; a level with too few left hands its shortfall to the next
    (as the pool does). Columns: the pool's (id, problem, answer, source, level, generator)."""
    t = cfg["tasks"]
    split = task_split(t)
    side = pool_side(split)
    excluded = set(pool["problem"])
    if corpus is not None:
        excluded |= set(corpus["problem"])
    for b in benchmarks:
        excluded |= set(b["problem"])
    levels = t["train_pool"]["levels"]
    rows: list[dict] = []
    for li, lv in enumerate(levels):
        per = -(-(size - len(rows)) // (len(levels) - li))
        taken = excluded | {r["problem"] for r in rows}
        pairs = distinct_problems(lv, per, cfg["seed"] * 1000 + SEED_OFFSET + li, side, split,
                                  exclude=taken, where="tasks.train_pool level")
        rows += [{"id": f"validation/{lv['name']}/{i}", "problem": p, "answer": a, "source": lv["name"],
                  "level": li, "generator": lv["generator"]} for i, (p, a) in enumerate(pairs)]
    if not rows:
        raise ConfigError(f"rl.lr_tuning.validation_size: no pool-side problem of tasks.train_pool's "
                          f"levels is left outside the pool ({len(pool)} problems); shrink "
                          "tasks.train_pool.size or add levels")
    df = pd.DataFrame(rows)
    check_validation(df, split, excluded)
    return df


def check_validation(df: pd.DataFrame, split: dict, excluded: set[str]) -> None:
    """The split's guarantees, checked on what is written: distinct problems, all on the pool's
    side, none excluded (pool, corpus, benchmarks)."""
    side = pool_side(split)
    dup = df["problem"].duplicated()
    wrong_side = [p for p in df["problem"] if split_of(p, split) != side]
    leaked = sorted(set(df["problem"]) & excluded)
    if dup.any() or wrong_side or leaked:
        raise RuntimeError(f"validation split: {int(dup.sum())} repeated problems, {len(wrong_side)} off "
                             f"the pool's side ({side}), {len(leaked)} in the pool, corpus or benchmarks "
                             f"(e.g. {(leaked or wrong_side or [''])[0]!r})")
