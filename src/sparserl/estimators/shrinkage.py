"""V0.5 Empirical Shrinkage Fusion: blend a frozen V0 prior with k sparse rollouts.

Paper: V_0.5: Generalist Value Model as a Prior for Sparse RL Rollouts (arXiv 2603.10848),
Eqs. 6-9 and Theorem 3.4. The paper's rewards are in {-1,+1}; the library stores {0,1}, so
s = 2r - 1 and a V0 probability p becomes the prior V = 2p - 1 (Section 4.1.3, step 1).
"""
from __future__ import annotations

import numpy as np

from .group import EstimatorContext, _eps, _prep, as_float_array, check_in_range, per_group
from .registry import register_estimator

PAPER = "v05"  # shown by `sparserl methods` (registry.estimator_paper)

MODES = ("fusion", "prior_only", "empirical_only")


def shrinkage_fusion(vbar, k, prior):
    """V0.5 Eqs. 6-9, vectorised over prompts. Returns (mu, w, delta2).

    vbar: mean of k rollouts in {-1,+1}; k >= 1 (scalar or array); prior: V in [-1,1].
      sigma2 = 1/k                                  (Eq. 6, conservative bound)
      delta2 = max(0, (vbar - V)^2 - 1/k)           (Eq. 7; truncation = test of H0: Delta2 = 0)
      w      = delta2 / (delta2 + 1/k)              (Eq. 8)
      mu     = w vbar + (1 - w) V                   (Eq. 9)
    """
    vbar = as_float_array(vbar, "vbar", ndim=None)
    k = as_float_array(k, "k", ndim=None)
    v = as_float_array(prior, "prior", ndim=None)
    check_in_range(vbar, "vbar", -1.0, 1.0)
    check_in_range(v, "prior", -1.0, 1.0)
    if (k < 1).any():
        raise ValueError(f"k must be >= 1, got {k.ravel()[np.flatnonzero(k.ravel() < 1)[0]]!r}")
    sigma2 = 1.0 / k
    delta2 = np.maximum(0.0, (vbar - v) ** 2 - sigma2)
    w = delta2 / (delta2 + sigma2)  # denominator >= 1/k > 0
    mu = w * vbar + (1.0 - w) * v
    return mu, w, delta2


def _fuse(rewards, prompt_ids, ctx, mode, info):
    """Shared V0.5 path: per-prompt mu (in [-1,1]) plus grouping and s = 2r - 1."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    r, g = _prep(rewards, prompt_ids)
    check_in_range(r, "rewards", 0.0, 1.0)
    ctx = ctx if ctx is not None else EstimatorContext()
    p = per_group(ctx.prior, g, "prior")
    check_in_range(p, "ctx.prior", 0.0, 1.0)
    s = 2.0 * r - 1.0
    vbar = g.mean(s) if g.n_groups else np.zeros(0)
    mu, w, delta2 = shrinkage_fusion(vbar, g.counts, 2.0 * p - 1.0)
    if mode == "prior_only":  # ablation endpoint: w = 0 always
        w = np.zeros_like(w)
        mu = 2.0 * p - 1.0
    elif mode == "empirical_only":  # ablation endpoint: w = 1 always
        w = np.ones_like(w)
        mu = vbar
    if info is not None:
        info.update(prompt_ids=g.keys, k=g.counts, mu=mu, w=w, delta2=delta2)
    return s, g, mu


def v05_baseline(rewards, prompt_ids, *, ctx=None, info=None, mode="fusion", **_):
    """V0.5 fused baseline on the stored {0,1} reward scale: b = (mu + 1) / 2 per rollout."""
    _s, g, mu = _fuse(rewards, prompt_ids, ctx, mode, info)
    return ((mu + 1.0) / 2.0)[g.inverse]


def v05_prior_only_baseline(rewards, prompt_ids, *, ctx=None, info=None, **_):
    return v05_baseline(rewards, prompt_ids, ctx=ctx, info=info, mode="prior_only")


def v05_empirical_only_baseline(rewards, prompt_ids, *, ctx=None, info=None, **_):
    return v05_baseline(rewards, prompt_ids, ctx=ctx, info=info, mode="empirical_only")


@register_estimator("v05_fusion", baseline=v05_baseline, needs=("prior",))
def v05_advantage(rewards, prompt_ids, *, ctx=None, info=None, mode="fusion", eps=None, **_):
    """V0.5 advantage: A_i = (s_i - mu) / sqrt(max(1 - mu^2, eps)), s = 2r - 1 (paper's {-1,+1} scale).

    ctx.prior holds the V0 probability p per prompt (V = 2p - 1); k is the prompt's group size,
    which may differ between prompts (OSLA). eps (default ctx.eps = 1e-6) guards mu = +-1.
    mode: "fusion" (Eqs. 6-9), "prior_only" (w = 0), "empirical_only" (w = 1).
    """
    s, g, mu = _fuse(rewards, prompt_ids, ctx, mode, info)
    sigma = np.sqrt(np.maximum(1.0 - mu * mu, _eps(ctx, eps)))
    return (s - mu[g.inverse]) / sigma[g.inverse]


@register_estimator("v05_prior_only", baseline=v05_prior_only_baseline, needs=("prior",))
def v05_prior_only_advantage(rewards, prompt_ids, *, ctx=None, info=None, **kw):
    """V0.5 ablation: prior only (w = 0, mu = V)."""
    kw.pop("mode", None)
    return v05_advantage(rewards, prompt_ids, ctx=ctx, info=info, mode="prior_only", **kw)


# needs the prior although mu = vbar: _fuse reads and validates ctx.prior in every mode (and
# reports the fusion weights in info), so a caller must still supply it.
@register_estimator("v05_empirical_only", baseline=v05_empirical_only_baseline, needs=("prior",))
def v05_empirical_only_advantage(rewards, prompt_ids, *, ctx=None, info=None, **kw):
    """V0.5 ablation: empirical only (w = 1, mu = vbar)."""
    kw.pop("mode", None)
    return v05_advantage(rewards, prompt_ids, ctx=ctx, info=info, mode="empirical_only", **kw)

