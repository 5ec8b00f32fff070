"""Le Critique: Tether (adaptive group/value baseline), EVPO switch and explained variance.

Paper: Le Critique (/work/shared/papers/002_532c6a7b14675594.txt), Sections 5 and 7.3, Appendix C.
Token-level arrays: any shape (e.g. (N, T)); per-sequence arrays broadcast against per-token ones,
and an optional boolean `mask` selects the real tokens.
  b_{i,t} = (1 - rho) b_i^LOO + rho V_{i,t}                          (Eq. 15)
  rhohat  = argmin_rho sum (R - b(rho))^2 = sum(a d) / sum(d^2), clipped to [0,1],
            a = R - b^LOO, d = V - b^LOO                             [reconstructed from the LS definition]
  rho_k   = d_ema rho_{k-1} + (1 - d_ema) rhohat_k, rho_0 = 0, d_ema = 0.95
"""
from __future__ import annotations

import numpy as np

from .group import as_float_array


def _tokens(returns, loo_baseline, values, mask):
    """Broadcast and validate, then flatten to the selected tokens."""
    R = as_float_array(returns, "returns", ndim=None)
    b = as_float_array(loo_baseline, "loo_baseline", ndim=None)
    V = as_float_array(values, "values", ndim=None)
    try:
        R, b, V = np.broadcast_arrays(R, b, V)
    except ValueError:
        raise ValueError(f"shape mismatch: returns {R.shape}, loo_baseline {b.shape}, values {V.shape}") from None
    if mask is None:
        return R.ravel(), b.ravel(), V.ravel(), None
    m = np.broadcast_to(np.asarray(mask, dtype=bool), R.shape)
    return R[m], b[m], V[m], m


def tether_rho(returns, loo_baseline, values, mask=None) -> float:
    """Unsmoothed Tether coefficient rhohat = clip(sum(a d) / sum(d^2), 0, 1), a = R - b^LOO, d = V - b^LOO.

    [reconstructed from the least-squares definition of rhohat_k, Le Critique Section 5]: the minimiser of
    sum (a - rho d)^2 over the batch's (selected) tokens. 0 when all d == 0 (no critic signal).
    """
    R, b, V, _ = _tokens(returns, loo_baseline, values, mask)
    a, d = R - b, V - b
    den = d @ d
    return float(np.clip((a @ d) / den, 0.0, 1.0)) if den > 0 else 0.0


def tether_rho_bucketed(returns, loo_baseline, values, buckets, n_buckets: int, mask=None) -> np.ndarray:
    """Token-bucketed Tether (Section 7.3): one rhohat per bucket m(t); buckets with all d == 0 get 0.

    `buckets` holds the bucket index of every token (same shape as the broadcast token arrays),
    e.g. from `token_buckets`.
    """
    R, b, V, m = _tokens(returns, loo_baseline, values, mask)
    k = np.asarray(buckets)
    k = np.broadcast_to(k, np.broadcast_shapes(k.shape, np.shape(values)))
    k = (k[m] if m is not None else k.ravel()).astype(np.int64)
    if len(k) and (k.min() < 0 or k.max() >= n_buckets):
        raise ValueError(f"buckets must lie in [0, {n_buckets})")
    a, d = R - b, V - b
    num = np.bincount(k, weights=a * d, minlength=n_buckets)
    den = np.bincount(k, weights=d * d, minlength=n_buckets)
    rho = np.divide(num, den, out=np.zeros(n_buckets), where=den > 0)
    return np.clip(rho, 0.0, 1.0)


def token_buckets(positions, edges) -> np.ndarray:
    """Bucket index m(t) of token positions given increasing bucket edges (bucket j: edges[j-1] <= t < edges[j])."""
    return np.searchsorted(np.asarray(edges), np.asarray(positions), side="right")


def tether_rho_update(rho_prev, rhohat, d_ema: float = 0.95):
    """EMA: rho_k = d_ema rho_{k-1} + (1 - d_ema) rhohat_k (start from rho_0 = 0). Works per bucket."""
    if not 0.0 <= d_ema <= 1.0:
        raise ValueError(f"d_ema must lie in [0, 1], got {d_ema!r}")
    return d_ema * np.asarray(rho_prev, dtype=np.float64) + (1.0 - d_ema) * np.asarray(rhohat, dtype=np.float64)


def tether_baseline(loo_baseline, values, rho, buckets=None):
    """b = (1 - rho) b^LOO + rho V; with `buckets`, rho is per bucket and indexed by m(t)."""
    b = as_float_array(loo_baseline, "loo_baseline", ndim=None)
    V = as_float_array(values, "values", ndim=None)
    rho = np.asarray(rho, dtype=np.float64)
    if buckets is not None:
        rho = rho[np.asarray(buckets)]
    return (1.0 - rho) * b + rho * V


def explained_variance(returns, values, mask=None) -> float:
    """EV = 1 - Var(R - V) / Var(R) over all selected tokens; NaN when Var(R) == 0 (as CleanRL)."""
    R, _b, V, _ = _tokens(returns, 0.0, values, mask)
    var_r = R.var() if len(R) else 0.0
    return float(1.0 - (R - V).var() / var_r) if var_r > 0 else float("nan")


def evpo_use_critic(ev: float) -> bool:
    """EVPO (Pan et al. 2026): use the critic when the batch EV > 0 (NaN counts as not > 0)."""
    return bool(ev > 0)


def evpo_baseline(values, group_baseline, ev: float):
    """EVPO hard switch: the critic values when EV > 0, else the group (mean) baseline, broadcast."""
    V = as_float_array(values, "values", ndim=None)
    g = as_float_array(group_baseline, "group_baseline", ndim=None)
    return np.broadcast_to(V if evpo_use_critic(ev) else g, np.broadcast_shapes(V.shape, g.shape)).copy()
