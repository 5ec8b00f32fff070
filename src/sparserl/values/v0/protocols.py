"""V0's two evaluation protocols (V0 §4.1), as timelines for `train.fit_v0` / `train.predict_v0`.

Input: the harvest's long table (`engines.harvest`): model, step, query_id, value, split
('heldout' avg@k rows of each checkpoint, 'onpolicy' rows of training) and benchmark.
A checkpoint is a (model, step) with held-out rows. Output rows get a `role`:

- **Sequential alignment** (the RL setting; Table 1, Figure 3). Test: the on-policy rollouts of
  training, each scored against the checkpoint that generated it (the latest checkpoint at or
  before its step; `policy_step` keeps its own step). Context pool: about half of each
  checkpoint's held-out rows, in their natural (possibly imbalanced) distribution. Train: the
  rest of the held-out rows, balanced 1:1 by label (value >= 0.5) by dropping the larger side.
- **Strict generalisation** (zero-shot; Table 2). The held-out query ids are split once into
  test ids and the others, across the whole timeline: a test query is never trained on, at any
  step. Test: the test ids' rows at every checkpoint. Context pool: about half of the other rows
  per checkpoint (natural distribution). Train: the rest, balanced 1:1.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

GROUP = ["model", "step"]


def _balanced(df: pd.DataFrame, rng: np.random.Generator) -> pd.DataFrame:
    pos, neg = df[df["value"] >= 0.5], df[df["value"] < 0.5]
    n = min(len(pos), len(neg))
    pick = lambda d: d.iloc[np.sort(rng.choice(len(d), n, replace=False))] if len(d) > n else d  # noqa: E731
    return pd.concat([pick(pos), pick(neg)]).sort_index()


def _context_and_train(held: pd.DataFrame, rng: np.random.Generator, context_share: float) -> pd.DataFrame:
    out = []
    for _, g in held.groupby(GROUP, sort=True):
        idx = rng.permutation(len(g))
        n_ctx = int(round(context_share * len(g)))
        ctx = g.iloc[np.sort(idx[:n_ctx])].assign(role="context")
        out += [ctx, _balanced(g.iloc[np.sort(idx[n_ctx:])], rng).assign(role="train")]
    return pd.concat(out)


def latest_checkpoint(steps: np.ndarray, checkpoints: np.ndarray) -> np.ndarray:
    """For each step, the largest checkpoint step <= it (-1 where none)."""
    c = np.sort(np.asarray(checkpoints))
    i = np.searchsorted(c, np.asarray(steps), side="right") - 1
    return np.where(i >= 0, c[np.clip(i, 0, None)], -1)


def sequential_alignment(harvest: pd.DataFrame, seed: int = 0, context_share: float = 0.5) -> pd.DataFrame:
    rng = np.random.default_rng([seed, 1])
    held = harvest[harvest["split"] == "heldout"]
    parts = [_context_and_train(held, rng, context_share)]
    for model, g in harvest[harvest["split"] == "onpolicy"].groupby("model", sort=True):
        ckpts = held.loc[held["model"] == model, "step"].unique()
        at = latest_checkpoint(g["step"].to_numpy(), ckpts)
        parts.append(g.assign(policy_step=g["step"], step=at, role="test")[at >= 0])
    tl = pd.concat(parts, ignore_index=True)
    tl["policy_step"] = tl["policy_step"].fillna(tl["step"]).astype(np.int64)
    return tl


def strict_generalisation(harvest: pd.DataFrame, seed: int = 0, test_share: float = 0.3,
                          context_share: float = 0.5) -> pd.DataFrame:
    rng = np.random.default_rng([seed, 2])
    held = harvest[harvest["split"] == "heldout"]
    ids = np.sort(held["query_id"].unique())
    test_ids = set(rng.permutation(ids)[:int(round(test_share * len(ids)))])
    is_test = held["query_id"].isin(test_ids)
    tl = pd.concat([held[is_test].assign(role="test"),
                    _context_and_train(held[~is_test], rng, context_share)], ignore_index=True)
    tl["policy_step"] = tl["step"]
    return tl


PROTOCOLS = {"sequential": sequential_alignment, "strict": strict_generalisation}
