"""Le Critique: Tether (adaptive group/value baseline), EVPO switch and explained variance.

Paper: Le Critique: Privileged Value Functions for LLM Reinforcement Learning (arXiv 2608.16739),
Sections 5 and 7.3, Appendix C.
Token-level arrays: any shape (e.g. (N, T)); per-sequence arrays broadcast against per-token ones,
and an optional boolean `mask` selects the real tokens.
  b_{i,t} = (1 - rho) b_i^LOO + rho V_{i,t}                          (Eq. 15)
  rhohat  = argmin_rho sum (R - b(rho))^2 = sum(a d) / sum(d^2), clipped to [0,1],
            a = R - b^LOO, d = V - b^LOO                             [reconstructed from the LS definition]
  rho_k   = d_ema rho_{k-1} + (1 - d_ema) rhohat_k, rho_0 = 0, d_ema = 0.95
Registered token-level estimators (A_{i,t} = R_i - b_{i,t} on real tokens, 0 on padding):
"tether", "tether_bucketed" (Section 7.3) and "evpo" (Appendix C).
"""
from __future__ import annotations

import numpy as np

from .group import _grpo_b, _rloo_b, as_float_array, check_in_range, token_inputs
from .registry import register_estimator

PAPER = "le_critique"  # shown by `sparserl methods` (registry.estimator_paper)

D_EMA = 0.95  # Le Critique Section 6.1
# [our choice: the paper gives no edges] doubling bucket widths up to its 8192-token responses
# (Section 7.2): buckets [0,256), [256,512), ..., [4096, inf) of 0-based response positions.
DEFAULT_BUCKET_EDGES = (256, 512, 1024, 2048, 4096)


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


# --------------------------------------------------------------------------- registered estimators


def _rho_prev(ctx, n_buckets: int | None) -> np.ndarray:
    """rho_{k-1} from ctx.tether_rho (None or absent ctx: rho_0 = 0); a vector of n_buckets when bucketed."""
    raw = 0.0 if ctx is None or ctx.tether_rho is None else ctx.tether_rho
    rho = as_float_array(raw, "ctx.tether_rho", ndim=None)
    if n_buckets is None and rho.ndim != 0:
        raise ValueError(f"ctx.tether_rho must be a scalar for tether, got shape {rho.shape} "
                         f"(one rho per bucket is tether_bucketed)")
    if n_buckets is not None:
        if rho.ndim == 0:
            rho = np.full(n_buckets, float(rho))
        elif rho.shape != (n_buckets,):
            raise ValueError(f"ctx.tether_rho must be a scalar or have one entry per bucket ({n_buckets}), "
                             f"got shape {rho.shape}")
    check_in_range(rho, "ctx.tether_rho", 0.0, 1.0)
    return rho


def _edges(edges) -> np.ndarray:
    e = as_float_array(edges, "edges")
    if (e <= 0).any() or (np.diff(e) <= 0).any():
        raise ValueError(f"edges must be strictly increasing positive token positions, got {e.tolist()}")
    return e


def _tether(rewards, prompt_ids, values, mask, ctx, info, d_ema, edges):
    """Shared Tether path; `edges` None gives one rho for all tokens."""
    r, g, v, m = token_inputs(rewards, prompt_ids, values, mask)
    R, b_loo = r[:, None], _rloo_b(r, g)[:, None]
    if edges is None:
        buckets = None
        rhohat = tether_rho(R, b_loo, v, m)
        rho = float(tether_rho_update(_rho_prev(ctx, None), rhohat, d_ema))
    else:
        e = _edges(edges)
        n = len(e) + 1
        buckets = token_buckets(np.arange(m.shape[1]), e)[None, :]
        rho_prev = _rho_prev(ctx, n)
        rhohat = tether_rho_bucketed(R, b_loo, v, buckets, n, m)
        # a bucket no response reached this step has no observation: it keeps its rho [our choice]
        seen = np.bincount(np.broadcast_to(buckets, m.shape)[m], minlength=n) > 0
        rho = np.where(seen, tether_rho_update(rho_prev, rhohat, d_ema), rho_prev)
    adv = np.where(m, R - tether_baseline(b_loo, v, rho, buckets), 0.0)
    if info is not None:
        info.update(tether_rho=rho, tether_rhohat=rhohat)
    return adv


@register_estimator("tether", needs=("values", "calibration"), level="token")
def tether_advantage(rewards, prompt_ids, *, values, mask, ctx=None, info=None, d_ema: float = D_EMA, **_):
    """Tether (Le Critique Eq. 15): A_{i,t} = R_i - ((1 - rho) b_i^LOO + rho V_{i,t}) on real tokens.

    b^LOO is RLOO's leave-one-out group mean of the sequence rewards (0 for a group of size 1).
    rho = d_ema ctx.tether_rho + (1 - d_ema) rhohat, rhohat the least-squares fit on this batch's
    real tokens (`tether_rho`, [reconstructed closed form]); ctx.tether_rho defaults to rho_0 = 0.
    The new rho goes to info["tether_rho"] (also info["tether_rhohat"]): carry it to the next
    step's ctx.tether_rho.
    """
    return _tether(rewards, prompt_ids, values, mask, ctx, info, d_ema, None)


@register_estimator("tether_bucketed", needs=("values", "calibration"), level="token")
def tether_bucketed_advantage(rewards, prompt_ids, *, values, mask, ctx=None, info=None,
                              d_ema: float = D_EMA, edges=DEFAULT_BUCKET_EDGES, **_):
    """Token-bucketed Tether (Le Critique Section 7.3): rho_{m(t)} per bucket of response positions.

    Bucket j holds positions edges[j-1] <= t < edges[j] (len(edges) + 1 buckets, `token_buckets`).
    Each bucket's rho follows the EMA of `tether` with its own rhohat (`tether_rho_bucketed`);
    ctx.tether_rho is a scalar (all buckets) or one value per bucket, and the new vector goes to
    info["tether_rho"]. A bucket without a real token in this batch keeps its rho [our choice].
    """
    return _tether(rewards, prompt_ids, values, mask, ctx, info, d_ema, edges)


@register_estimator("evpo", needs=("values",), level="token")
def evpo_advantage(rewards, prompt_ids, *, values, mask, ctx=None, info=None, **_):
    """EVPO (Pan et al. 2026, as Le Critique Appendix C describes it): A_{i,t} = R_i - b_{i,t}.

    b = V_{i,t} when the batch EV = 1 - Var(R - V) / Var(R) over real tokens is > 0, else the
    group mean of the sequence rewards (GRPO's b). info receives "evpo_use_critic" and
    "explained_variance" (NaN when all returns are equal; then the group mean is used).
    """
    r, g, v, m = token_inputs(rewards, prompt_ids, values, mask)
    R = r[:, None]
    ev = explained_variance(R, v, m)
    adv = np.where(m, R - evpo_baseline(v, _grpo_b(r, g)[:, None], ev), 0.0)
    if info is not None:
        info.update(evpo_use_critic=evpo_use_critic(ev), explained_variance=ev)
    return adv
