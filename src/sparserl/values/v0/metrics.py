"""V0's metrics. Pure numpy/pandas on a predictions table.

Paper: "V_0: A Generalist Value Model for Any Policy at State Zero": the three metrics of its
experimental setup (mapped to information terms in its Appendix D.3) and the two residuals of
its Eqs. 26-27.

- `auc`: ROC AUC with ties counted half (Mann-Whitney); NaN when only one class is present.
- `intra_context_auc`: AUC of p against the label v >= 0.5 within each checkpoint (group), then
  averaged over the groups that have both classes.
- `calibration_mse`: mean (p - v)^2 against the avg@10 value.
- `pairwise_calibration`: pairs of the same query at two checkpoints with different values; the
  fraction whose predicted order matches the true one (ties in p count half).
- `residual_spearman`: Spearman(p - v, z), for z = the context's mean label mu(C) (context
  residual) or the query's mean value over the whole history D_x (query residual). Near 0 means
  the errors do not follow the context's base rate or the query's difficulty.
"""
from __future__ import annotations

import numpy as np
import pandas as pd


def _rank(x: np.ndarray) -> np.ndarray:
    return pd.Series(x).rank(method="average").to_numpy()


def auc(labels, scores) -> float:
    y = np.asarray(labels, dtype=bool)
    s = np.asarray(scores, dtype=np.float64)
    n1, n0 = int(y.sum()), int((~y).sum())
    if n1 == 0 or n0 == 0:
        return float("nan")
    r = _rank(s)
    return float((r[y].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def intra_context_auc(df: pd.DataFrame, group=("model", "step"), p="p", v="value") -> float:
    a = [auc(g[v] >= 0.5, g[p]) for _, g in df.groupby(list(group), sort=True)]
    a = [x for x in a if np.isfinite(x)]
    return float(np.mean(a)) if a else float("nan")


def calibration_mse(df: pd.DataFrame, p="p", v="value") -> float:
    return float(np.mean((df[p].to_numpy(float) - df[v].to_numpy(float)) ** 2))


def cross_checkpoint_pairs(df: pd.DataFrame, query="query_id", policy="model",
                           step="step", v="value") -> pd.DataFrame:
    """Every pair of rows of the same query and policy at two different steps with different values."""
    m = df.reset_index(drop=True).reset_index().merge(
        df.reset_index(drop=True).reset_index(), on=[query, policy], suffixes=("_a", "_b"))
    m = m[(m[f"{step}_a"] < m[f"{step}_b"]) & (m[f"{v}_a"] != m[f"{v}_b"])]
    return m


def pairwise_calibration(df: pd.DataFrame, p="p", v="value", **kw) -> tuple[float, int]:
    """(accuracy, number of pairs) over `cross_checkpoint_pairs`."""
    m = cross_checkpoint_pairs(df, v=v, **kw)
    if m.empty:
        return float("nan"), 0
    dt = np.sign(m[f"{v}_b"].to_numpy(float) - m[f"{v}_a"].to_numpy(float))
    dp = np.sign(m[f"{p}_b"].to_numpy(float) - m[f"{p}_a"].to_numpy(float))
    return float(np.mean(np.where(dp == 0, 0.5, dp == dt))), int(len(m))


def spearman(x, y) -> float:
    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    return float(np.corrcoef(_rank(x), _rank(y))[0, 1])


def residual_spearman(df: pd.DataFrame, z: str, p="p", v="value") -> float:
    return spearman(df[p].to_numpy(float) - df[v].to_numpy(float), df[z].to_numpy(float))


def score_table(df: pd.DataFrame, **kw) -> dict:
    """Every metric of one method's predictions (columns p, value, model, step, query_id and,
    where known, context_mean and query_mean)."""
    acc, n_pairs = pairwise_calibration(df)
    out = {"intra_auc": intra_context_auc(df), "calibration_mse": calibration_mse(df),
           "pairwise_acc": acc, "pairs": n_pairs, "rows": int(len(df))}
    for z, name in (("context_mean", "context_residual_rho"), ("query_mean", "query_residual_rho")):
        if z in df:
            out[name] = residual_spearman(df, z)
    return out


def score_against_history(pred: pd.DataFrame, history_mean: pd.Series) -> dict:
    """`score_table` with each query's mean value over the whole history (query_id -> D_x)."""
    return score_table(pred.assign(query_mean=pred["query_id"].map(history_mean)))
