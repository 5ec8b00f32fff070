"""The unbiased pass@k estimator and the pass@k curve of an evaluation.

Chen et al. 2021, "Evaluating Large Language Models Trained on Code" (arXiv:2107.03374), Sec. 2.1,
Eq. 1: from n >= k samples of a problem of which c are correct,

    pass@k = 1 - C(n - c, k) / C(n, k),

the probability that k of the n samples drawn without replacement hold a correct one: an unbiased
estimate of the chance that k fresh samples do. The share of problems with a correct sample among
exactly k (the naive estimate) is its n = k case. The ratio of binomials is computed as a sum of
logarithms (`scipy.special.gammaln`), never as the binomials themselves, which overflow at n ~ 1000
(the paper's numpy code takes the product form for the same reason).
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.special import gammaln

OVERALL = "overall"  # the curve's row over all benchmarks: the mean of the benchmarks' means


def pass_at_k(n, c, k: int) -> np.ndarray:
    """Per problem, the unbiased pass@k of Chen et al. 2021 (Eq. 1) from n samples with c correct
    (arrays of one shape, c <= n, k <= n)."""
    n, c = np.asarray(n, dtype=np.int64), np.asarray(c, dtype=np.int64)
    k = int(k)
    if k < 1 or (n < k).any() or (c < 0).any() or (c > n).any():
        raise ValueError(f"pass@{k} needs 1 <= k <= n and 0 <= c <= n per problem "
                         f"(n in [{n.min()}, {n.max()}], c in [{c.min()}, {c.max()}])")
    fail = n - c
    # log C(n-c, k) - log C(n, k) where n - c >= k; else no k-subset misses every correct sample
    some = fail >= k
    f = np.where(some, fail, k)
    log_ratio = gammaln(f + 1) - gammaln(f - k + 1) - gammaln(n + 1) + gammaln(n - k + 1)
    return np.where(some, 1.0 - np.exp(log_ratio), 1.0)


def curve_ks(n: int) -> list[int]:
    """k = 1, 2, 4, ... up to n (and n itself when it is no power of 2)."""
    ks = [1 << i for i in range(int(n).bit_length()) if 1 << i <= n]
    return ks + ([int(n)] if ks[-1] != n else [])


def pass_at_k_curve(per_problem: pd.DataFrame, ks: list[int] | None = None) -> pd.DataFrame:
    """One row per (benchmark, k) and per k over all benchmarks (`OVERALL`, the mean of the
    benchmarks' means, as an evaluation's accuracy): the mean over problems of the unbiased pass@k,
    from the per-problem `n` (samples) and `c` (correct) columns; k up to the fewest samples."""
    need = [col for col in ("benchmark", "n", "c") if col not in per_problem]
    if need:
        raise ValueError(f"a pass@k curve needs per-problem columns {need}; the table has {list(per_problem.columns)}")
    ks = curve_ks(int(per_problem["n"].min())) if ks is None else [int(k) for k in ks]
    rows = []
    for k in ks:
        v = pd.Series(pass_at_k(per_problem["n"], per_problem["c"], k), index=per_problem.index)
        by = v.groupby(per_problem["benchmark"], sort=False)
        means, counts = by.mean(), by.size()
        rows += [{"benchmark": b, "k": k, "pass_at_k": float(means[b]), "problems": int(counts[b])} for b in means.index]
        rows.append({"benchmark": OVERALL, "k": k, "pass_at_k": float(means.mean()), "problems": int(counts.sum())})
    out = pd.DataFrame(rows)
    out["samples"] = int(per_problem["n"].min())
    return out
