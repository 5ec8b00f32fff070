"""Can an embedder tell a policy's easy prompts from its hard ones? (V0 issue: 'if MiniLM cannot
tell tiny arithmetic prompts apart, say so with numbers'.)

For each embedder, on the mean-pooled states of the prompts of a value table (prompt_id -> p):
- `nn_cos_median`, `nn_cos_over_0.99`: the cosine similarity of each prompt to its nearest other
  prompt (median; share above 0.99). Near 1 everywhere: the embedder sees one prompt.
- `distinct_share`: share of prompts whose pooled vector differs from every other's (atol 1e-4).
- `knn_spearman`, `knn_auc`: a kNN (k = 64, Euclidean, 5 folds) predicting p from the embedding,
  scored by Spearman's rho and by AUC for p >= 0.5. This is the kNN-contextual baseline's ceiling
  and a floor for what the adapter can extract; `knn_spearman_within_group` is the same within
  each level of the pool, averaged (what the embedding knows beyond a level's base rate).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from sparserl.values.v0 import metrics
from sparserl.values.v0.baselines import KNNContextual


def check_embedding(x: np.ndarray, p: np.ndarray, *, k: int = 64, folds: int = 5, seed: int = 0,
                    groups: np.ndarray | None = None) -> dict:
    x = np.asarray(x, np.float64)
    p = np.asarray(p, np.float64)
    u = x / np.linalg.norm(x, axis=1, keepdims=True).clip(1e-12)
    cos = u @ u.T
    np.fill_diagonal(cos, -np.inf)
    nn = cos.max(1)
    d = np.abs(x[:, None, :] - x[None]).max(-1)
    np.fill_diagonal(d, np.inf)
    pred = np.empty_like(p)
    fold = np.random.default_rng(seed).permutation(len(p)) % folds
    for f in range(folds):
        knn = KNNContextual(k=k, window=len(p))
        knn.observe(x[fold != f], p[fold != f])
        pred[fold == f] = knn.predict(x[fold == f])
    out = {"prompts": int(len(p)), "nn_cos_median": float(np.median(nn)),
           "nn_cos_over_0.99": float(np.mean(nn > 0.99)), "distinct_share": float(np.mean(d.min(1) > 1e-4)),
           "knn_spearman": metrics.spearman(pred, p), "knn_auc": metrics.auc(p >= 0.5, pred)}
    if groups is not None:  # within a level: what the embedding knows beyond the level's base rate
        g = np.asarray(groups)
        rho = [metrics.spearman(pred[g == v], p[g == v]) for v in np.unique(g)]
        out["knn_spearman_within_group"] = float(np.nanmean(rho)) if np.isfinite(rho).any() else float("nan")
    return out


def compare_embedders(tables: dict, values: pd.Series, groups: pd.Series | None = None, **kw) -> pd.DataFrame:
    """tables: name -> EmbeddingTable; values: prompt_id -> p; groups: prompt_id -> level. One row
    per embedder."""
    rows = []
    for name, t in tables.items():
        ids = [i for i in t.ids if i in values.index]
        x = t.pooled("mean")[t.rows(ids)]
        g = None if groups is None else groups.loc[ids].to_numpy()
        rows.append({"embedder": name, **check_embedding(x, values.loc[ids].to_numpy(), groups=g, **kw)})
    return pd.DataFrame(rows)
