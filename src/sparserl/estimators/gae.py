"""Generalised advantage estimation over token values (Schulman et al. 2016; Le Critique Section 2).

delta_t = r_t + gamma V(h_{t+1}) - V(h_t);  A_t = sum_l (gamma lambda)^l delta_{t+l};
returns = A + V. Past the last real token V = 0. With gamma = lambda = 1 and a single terminal
reward R, A_t = R - V(h_t). `gae_advantage` is the registered token-level estimator "gae".
"""
from __future__ import annotations

import numpy as np

from .group import as_float_array, token_inputs
from .registry import register_estimator

PAPER = "le_critique"  # its VF and Pvf critics; shown by `sparserl methods`


def gae(token_rewards, values, mask=None, gamma: float = 1.0, lam: float = 1.0):
    """GAE for right-padded batches, shape (N, T) (or (T,)). Returns (advantages, returns).

    `mask` (bool, same shape) marks real tokens; padded positions get A = 0 and return 0.
    Vectorised over the batch; one backward pass over T.
    """
    if not (0.0 <= gamma <= 1.0 and 0.0 <= lam <= 1.0):
        raise ValueError(f"gamma and lam must lie in [0, 1], got {gamma!r}, {lam!r}")
    r = as_float_array(token_rewards, "token_rewards", ndim=None)
    v = as_float_array(values, "values", ndim=None)
    if r.shape != v.shape or r.ndim not in (1, 2):
        raise ValueError(f"token_rewards {r.shape} and values {v.shape} must share a 1-D or 2-D shape")
    squeeze = r.ndim == 1
    r, v = np.atleast_2d(r), np.atleast_2d(v)
    m = np.ones(r.shape, bool) if mask is None else np.atleast_2d(np.asarray(mask, dtype=bool))
    if m.shape != r.shape:
        raise ValueError(f"mask shape {m.shape} does not match {r.shape}")
    r, v = r * m, v * m  # padding contributes nothing
    adv = np.zeros_like(r)
    last = np.zeros(r.shape[0])
    for t in range(r.shape[1] - 1, -1, -1):
        next_v = v[:, t + 1] if t + 1 < r.shape[1] else 0.0
        delta = r[:, t] + gamma * next_v - v[:, t]
        last = delta + gamma * lam * last
        adv[:, t] = last
    adv *= m
    ret = adv + v
    return (adv[0], ret[0]) if squeeze else (adv, ret)


def terminal_rewards(returns, mask) -> np.ndarray:
    """Token rewards with each sequence's return R_i on its last real token (right padding), else 0."""
    R = as_float_array(returns, "returns")
    m = np.asarray(mask, dtype=bool)
    if m.ndim != 2 or m.shape[0] != len(R):
        raise ValueError(f"mask must be (N, T) with N = {len(R)}, got {m.shape}")
    out = np.zeros(m.shape)
    lengths = m.sum(axis=1)
    has = lengths > 0
    out[np.flatnonzero(has), lengths[has] - 1] = R[has]
    return out


@register_estimator("gae", needs=("values",), level="token")
def gae_advantage(rewards, prompt_ids, *, values, mask, ctx=None, info=None, gamma: float = 1.0,
                  lam: float = 1.0, **_):
    """GAE advantages (N, T) with the sequence reward R_i on the last real token (Le Critique Section 2.3).

    gamma = lam = 1 (the paper's main setting) gives A_{i,t} = R_i - V(h_{i,t}) on real tokens;
    padding gets 0. prompt_ids only go through validation (GAE does not group).
    info (if a dict) receives "returns" (N, T) = A + V, the critic's regression targets.
    """
    r, _g, v, m = token_inputs(rewards, prompt_ids, values, mask)
    adv, ret = gae(terminal_rewards(r, m), v, m, gamma, lam)
    if info is not None:
        info["returns"] = ret
    return adv
