"""Reference rows of V0's Tables 1 and 2: what the world lets any value predictor reach.

Paper: "V_0: A Generalist Value Model for Any Policy at State Zero", Tables 1 (sequential
alignment) and 2 (strict generalisation). The paper has no such rows; we add them so a reader
sees where V0 and its baselines sit between a difficulty-only guess and the ceiling. They score
exactly the test rows, with exactly the metrics (`metrics.score_against_history`), of the others.

A row's label is a Monte Carlo pass rate: `value` = the mean of `n` binary rewards (avg@k of a
held-out query at a checkpoint, k = v0.harvest.k; or the mean reward of one on-policy group of
the harvest run, n = the group size). The per-sample outcomes are not kept, so the best estimate
of the context's true pass rate p is `value` itself.

- `oracle_p` ("oracle p (ceiling)"): predicts `value`, the label itself. Intra-context AUC 1 on
  every checkpoint with both labels (the label is value >= 0.5), calibration MSE 0, pairwise
  accuracy 1: the metrics' own ceiling, reached only by a predictor that also knows the k-sample
  noise of this particular label.
- `oracle_p_resampled` ("oracle p vs resampled label"): the ceiling of a predictor of the true p.
  The exact pass rate is scored against a fresh n-sample label, Binomial(n, p) / n, with p taken
  as `value` (a plug-in: the observed values are slightly more spread than the true p, so this
  ceiling is slightly optimistic). Its MSE is about mean p(1 - p) / n and its AUC falls below 1
  by the share of contexts near p = .5: the most a model of p can reach with labels of n samples.
- `level_only` ("level only"): difficulty alone. For a test row of policy m at checkpoint t, the
  mean label of m's context rows of the same level (the problem's `source`, the generator level
  of the procedural world) at the latest checkpoint <= t that has that level; else the mean of
  m's context rows at the latest checkpoint <= t; else .5. Only rows of the past and of the
  checkpoint itself, never a later one: in the sequential protocol the on-policy rollouts of
  steps t.. are scored after checkpoint t's held-out evaluation, which V0 and kNN see too. The
  context rows, not the train rows: those are balanced 1:1 by label, which would pull every
  level's mean toward .5. In the strict protocol every checkpoint has context rows of the other
  queries, so this is the checkpoint's own level means.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

#: method id -> the name a table or figure shows
REFERENCES = {"oracle_p": "oracle p (ceiling)", "oracle_p_resampled": "oracle p vs resampled label",
              "level_only": "level only"}


def _need(df: pd.DataFrame, cols, what: str) -> None:
    missing = [c for c in cols if c not in df]
    if missing:
        raise ValueError(f"{what} needs columns {missing} in the V0 timeline (the harvest table's "
                         "`n`; `level` from `query_levels`); rebuild it with rule v0_harvest (`sparserl v0-harvest-all`)")


def oracle_predictions(test: pd.DataFrame) -> pd.DataFrame:
    """`oracle_p`: each test row's own Monte Carlo pass rate."""
    return test.assign(p=test["value"].astype(float))


def resampled_oracle_predictions(test: pd.DataFrame, seed: int) -> pd.DataFrame:
    """`oracle_p_resampled`: p = `value`, scored against a fresh label Binomial(n, value) / n."""
    _need(test, ["n"], "the resampled oracle")
    n = test["n"].to_numpy(np.int64)
    if (n < 1).any():
        raise ValueError("the resampled oracle needs n >= 1 samples per label (the harvest's `n` column)")
    p = np.clip(test["value"].to_numpy(float), 0.0, 1.0)
    label = np.random.default_rng([seed, 11]).binomial(n, p) / n
    return test.assign(p=p, value=label)


def level_only_predictions(timeline: pd.DataFrame, test: pd.DataFrame) -> pd.DataFrame:
    """`level_only`: per test row, its level's mean context label of the same policy at the latest
    checkpoint at or before the row's checkpoint (fallbacks in the module's docstring)."""
    _need(timeline, ["level"], "the level-only predictor")
    ctx = timeline[timeline["role"] == "context"]
    out = []
    for (model, step), g in test.groupby(["model", "step"], sort=True):
        past = ctx[(ctx["model"] == model) & (ctx["step"] <= step)]
        if past.empty:
            out.append(g.assign(p=0.5))
            continue
        latest = past[past["step"] == past.groupby("level", dropna=False)["step"].transform("max")]
        by_level = latest.groupby("level")["value"].mean()
        overall = float(past.loc[past["step"] == past["step"].max(), "value"].mean())
        out.append(g.assign(p=g["level"].map(by_level).astype(float).fillna(overall)))
    return pd.concat(out).loc[test.index]


def query_levels(tables, harvest: pd.DataFrame) -> pd.Series:
    """query_id -> level name: the `source` column (else `level`) of the `tables` the harvest drew
    from (the RL pool, then the benchmarks); a held-out query whose benchmark has neither is its benchmark."""
    from pathlib import Path
    from sparserl.core.artifacts import read_table
    parts = []
    for path in map(Path, tables):
        if not path.is_file():
            continue
        t = read_table(path)
        col = next((c for c in ("source", "level") if c in t), None)
        if col is not None:
            parts.append(pd.Series(t[col].astype(str).to_numpy(), index=t["id"].astype(str)))
    levels = pd.concat(parts) if parts else pd.Series(dtype=object)
    levels = levels[~levels.index.duplicated()]
    out = harvest.drop_duplicates("query_id").set_index("query_id")
    fallback = out["benchmark"] if "benchmark" in out else pd.Series(index=out.index, dtype=object)
    return out.index.to_series().map(levels).fillna(fallback)
