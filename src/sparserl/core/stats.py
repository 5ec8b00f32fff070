"""The interval statistics the studies and the RL summary share (claims table, head-to-head, the
summary's gain intervals), on scipy.stats.

- `t_quantile(q, df)`: Student's t quantile, any real df > 0 (Welch's df is fractional).
- `normal_quantile(q)`: the standard normal quantile (delta-method intervals).
- `t_interval(x)`: (mean, lo, hi), mean +- t_{(1+level)/2, n-1} * sd(ddof 1) / sqrt(n).
- `welch_interval(a, b)`: (d, lo, hi) for d = mean(a) - mean(b), d +- t_{(1+level)/2, df} * se with
  se^2 = var_a/n_a + var_b/n_b and the Welch-Satterthwaite df (`welch_df`), not rounded.

One module, in core so that engines and studies alike read the same t quantile and Welch df.
"""
from __future__ import annotations

import math

import numpy as np
# the kernels behind scipy.stats' norm.ppf and t.ppf (equal values): scipy.stats takes 0.6 s to
# import, a third of a short job
from scipy.special import ndtri, stdtrit

LEVEL = 0.95


def t_quantile(q: float, df: float) -> float:
    """The q quantile of Student's t with df degrees of freedom (real df > 0)."""
    if not 0.0 < q < 1.0 or not df > 0:
        raise ValueError(f"t_quantile needs 0 < q < 1 and df > 0, got q={q}, df={df}")
    return float(stdtrit(df, q))


def normal_quantile(q: float) -> float:
    """The q quantile of the standard normal."""
    if not 0.0 < q < 1.0:
        raise ValueError(f"normal_quantile needs 0 < q < 1, got q={q}")
    return float(ndtri(q))


def _values(x, what: str) -> np.ndarray:
    x = np.asarray(x, dtype=float)
    if x.ndim != 1 or len(x) < 2:
        raise ValueError(f"{what} needs a 1-d array of at least 2 values, got shape {x.shape}")
    return x


def t_interval(x, level: float = LEVEL) -> tuple[float, float, float]:
    """(mean, lo, hi): the t-interval of the mean of x (at least 2 values)."""
    x = _values(x, "a t interval")
    m, se = float(x.mean()), float(x.std(ddof=1) / math.sqrt(len(x)))
    h = t_quantile(0.5 + level / 2, len(x) - 1) * se
    return m, m - h, m + h


def welch_df(va: float, vb: float, na: int, nb: int) -> float:
    """Welch-Satterthwaite df of var_a/n_a + var_b/n_b, given va = var_a/n_a and vb = var_b/n_b."""
    return (va + vb) ** 2 / (va ** 2 / (na - 1) + vb ** 2 / (nb - 1))


def welch_interval(a, b, level: float = LEVEL) -> tuple[float, float, float]:
    """(d, lo, hi): the Welch t-interval of d = mean(a) - mean(b) (at least 2 values each) at the
    unrounded Welch-Satterthwaite df. Both variances 0: the difference itself, a point."""
    a, b = _values(a, "a Welch interval (first sample)"), _values(b, "a Welch interval (second sample)")
    va, vb = float(a.var(ddof=1)) / len(a), float(b.var(ddof=1)) / len(b)
    d = float(a.mean() - b.mean())
    if va + vb == 0:
        return d, d, d
    h = t_quantile(0.5 + level / 2, welch_df(va, vb, len(a), len(b))) * math.sqrt(va + vb)
    return d, d - h, d + h
