"""BASIS: batchwise advantage estimation from single-rollout information sharing.

Paper: BASIS: Batchwise Advantage Estimation from Single-Rollout Information Sharing for LLM
Reasoning, Sections 4-5 and Appendix D.
Rewards in {0,1}, one rollout per prompt (several are allowed: each rollout is then its own
source and only its own reward is left out). Three steps:
  1. offline value V*_beta from n cached reference rollouts (`basis_value`, Eq. 4);
  2. batchwise leave-one-out refinement (`basis_refine`: UNB / VOP / RVG) [reconstructed];
  3. online calibration of beta on the current or the preceding batch [reconstructed].
The refinement formulas are reconstructed: the paper's text lost Eq. 3 (the refined estimator with
Proposition 1's BLUE weights) and the VOP (Proposition 2) and RVG weights.
"""
from __future__ import annotations

import numpy as np

from .group import (EstimatorContext, _prep, as_float_array, check_in_range, check_same_length,
                    per_group, per_rollout)
from .registry import register_estimator

PAPER = "basis"  # shown by `sparserl methods` (registry.estimator_paper)

KINDS = ("unb", "vop", "rvg")
INACTIVE = ("zero", "vhat", "formula")


def basis_value(phat, beta):
    """V*_beta = phat e^{1/beta} / (phat e^{1/beta} + 1 - phat) (BASIS Eq. 4 with binary rewards).

    Computed as phat / (phat + (1 - phat) e^{-1/beta}) so nothing overflows for small beta.
    beta = np.inf gives phat exactly; beta = 0 (or underflow) gives 1{phat > 0}. Broadcasts.
    """
    p = as_float_array(phat, "phat", ndim=None)
    check_in_range(p, "phat", 0.0, 1.0)
    b = as_float_array(beta, "beta", ndim=None, allow_inf=True)
    if (b < 0).any():
        raise ValueError("beta must be >= 0 (np.inf allowed)")
    return _value(p, b)


def _value(p: np.ndarray, b: np.ndarray) -> np.ndarray:
    """`basis_value` on validated arrays."""
    p, b = np.broadcast_arrays(p, b)
    inv_beta = np.divide(1.0, b, out=np.full(b.shape, np.inf), where=b > 0)
    with np.errstate(under="ignore"):  # e^{-1/beta} -> 0 is the intended beta -> 0 limit
        decay = np.exp(-inv_beta)  # in [0, 1]
    v = np.divide(p, p + (1.0 - p) * decay, out=np.zeros(p.shape), where=p > 0)
    return np.where(np.isinf(b), p, v)


def basis_refine(vhat, rewards, eps: float = 1e-6, kind: str = "unb", inactive: str = "zero"):
    """Leave-one-out batchwise refinement of initial values vhat with one reward per prompt.

    [reconstructed; the paper's text lost Eq. 3] sigma2_j = vhat_j (1 - vhat_j) (Section 4);
    active set J = {j: sigma2_j > eps}.
    With sums over j in J, j != i:
      unb (Prop. 1, BLUE): vt_i = vhat_i * sum(vhat_j r_j / sigma2_j) / sum(vhat_j^2 / sigma2_j)
      vop (Prop. 2):       vt_i = vhat_i * sum(vhat_j r_j / sigma2_j) / (1 + sum(vhat_j^2 / sigma2_j))
      rvg:                 vt_i = vhat_i * sum(r_j) / sum(vhat_j)
    (rvg also sums over J only, so the active set means the same thing for all three kinds.)
    O(B): batch sums minus the own term; vhat_j r_j / sigma2_j = r_j / (1 - vhat_j).
    When no other prompt is active (J minus i empty) the baseline is 0.
    Prompts outside J: `inactive="zero"` (default) gives baseline 0; "vhat" keeps vhat_i;
    "formula" applies the formula with sums over all of J.
    """
    _check_opts(kind, inactive, eps)
    v = as_float_array(vhat, "vhat")
    r = as_float_array(rewards, "rewards")
    check_same_length(vhat=v, rewards=r)
    check_in_range(v, "vhat", 0.0, 1.0)
    return _refine(v, r, None, eps, kind, inactive)


def _check_opts(kind, inactive, eps):
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if inactive not in INACTIVE:
        raise ValueError(f"inactive must be one of {INACTIVE}, got {inactive!r}")
    if not (eps >= 0):
        raise ValueError(f"eps must be >= 0, got {eps!r}")


def _refine(v, r, n, eps, kind, inactive):
    """Core of `basis_refine` on validated arrays, along the last axis (leading axes: e.g. a beta
    grid). `n` (None = all 1) counts identical rollouts per entry: every entry stands for n
    rollouts with the same (vhat, r), which share one vt."""
    one_minus = 1.0 - v
    active = v * one_minus > eps  # eps >= 0, so active implies 0 < vhat < 1
    if kind == "rvg":
        a = np.where(active, r, 0.0)
        c = np.where(active, v, 0.0)
    else:
        c = np.divide(1.0, one_minus, out=np.zeros_like(v), where=active)
        a = np.multiply(r, c, out=one_minus)  # vhat r / sigma2 = r / (1 - vhat); reuses the buffer
        c *= v  # vhat^2 / sigma2 = vhat / (1 - vhat)
    # a and c are scratch arrays here, so the leave-one-out sums may overwrite them
    num = _loo_sum(a, n, inplace=True)
    den = _loo_sum(c, n, inplace=True)
    if kind == "vop":
        den += 1.0  # >= 1; num is 0 when no other prompt is active
    # unb/rvg: every active term is > 0, so den > 0 exactly when J \ {i} is non-empty
    vt = np.divide(num, den, out=np.zeros_like(v), where=den > 0)
    vt *= v
    if inactive == "zero":
        vt[~active] = 0.0
    elif inactive == "vhat":
        vt[~active] = v[~active]
    return vt


def _loo_sum(x: np.ndarray, n: np.ndarray | None = None, inplace: bool = False) -> np.ndarray:
    """sum_{j != i} x_j along the last axis in O(B): the total minus the own term (entry i counted
    n_i times). With inplace=True a 1-D unweighted x is overwritten (saves an allocation).

    The term with the largest |x| can dominate the total (vhat near 1 - eps gives 1/(1-vhat) ~ 1e6),
    and subtracting it would cancel catastrophically, so its own sum is taken directly.
    """
    if x.ndim == 1 and n is None:  # the per-rollout path
        out = x if inplace else np.empty_like(x)
        if len(x):
            hi, lo = int(np.argmax(x)), int(np.argmin(x))  # largest |x| without an abs temporary
            k = hi if x[hi] >= -x[lo] else lo
            rest = x[:k].sum() + x[k + 1:].sum()
            np.subtract(x.sum(), x, out=out)
            out[k] = rest
        return out
    # general path (weighted and/or with leading axes), viewed as rows of 2-D arrays
    nx = x if n is None else n * x
    out = nx.sum(axis=-1, keepdims=True) - x
    if x.size:
        x2, nx2, out2 = x.reshape(-1, x.shape[-1]), nx.reshape(-1, x.shape[-1]), out.reshape(-1, x.shape[-1])
        mag = np.abs(x2)
        if n is not None:  # entries standing for no rollout must not take the dominant slot
            mag = np.where(np.broadcast_to(n, x.shape).reshape(x2.shape) > 0, mag, -1.0)
        rows, k = np.arange(len(x2)), mag.argmax(axis=1)
        rest = nx2.copy()
        rest[rows, k] = 0.0
        own = 0.0  # the other n_k - 1 copies of the dominant entry
        if n is not None:
            own = (np.broadcast_to(n, x.shape).reshape(x2.shape)[rows, k] - 1) * x2[rows, k]
        out2[rows, k] = rest.sum(axis=1) + own
    return out


def default_beta_grid(n: int = 16, lo: float = 1e-2, hi: float = 1e2) -> np.ndarray:
    """Calibration grid [reconstructed]: n log-spaced betas in [lo, hi] plus np.inf (paper: 8-64 values)."""
    return np.append(np.logspace(np.log10(lo), np.log10(hi), n), np.inf)


def basis_calibrate(phat, rewards, beta_grid=None, eps: float = 1e-6, kind: str = "unb",
                    inactive: str = "zero"):
    """Pick beta from the grid minimising sum_i (r_i - vt_{i,beta})^2 [reconstructed].

    Returns (beta, losses) with losses aligned to the grid; ties go to the first grid entry.
    Because vt is leave-one-out, this is a leave-one-out fit of beta on (phat, rewards).
    """
    _check_opts(kind, inactive, eps)
    p = as_float_array(phat, "phat")
    r = as_float_array(rewards, "rewards")
    check_same_length(phat=p, rewards=r)
    check_in_range(p, "phat", 0.0, 1.0)
    up, p_idx = np.unique(p, return_inverse=True)
    return _calibrate(up, p_idx.reshape(-1), r, _grid(beta_grid), eps, kind, inactive)


def _grid(beta_grid):
    grid = default_beta_grid() if beta_grid is None else as_float_array(beta_grid, "beta_grid", allow_inf=True)
    if len(grid) == 0:
        raise ValueError("beta_grid is empty")
    if (grid < 0).any():
        raise ValueError("beta_grid must be >= 0 (np.inf allowed)")
    return grid


def _calibrate(up, level, r, grid, eps, kind, inactive, groups=None, group_ones=None):
    """Calibration on distinct (phat, r) pairs: rollouts sharing both share vt for every beta, so
    each grid point costs O(#pairs) (<= 2 (n+1) for binary rewards and n reference rollouts).

    `level[u]` indexes `up` (the distinct phat values) per rollout, or per prompt of `groups`.
    """
    U = len(up)
    if group_ones is not None or _is_binary(r):  # stored {0,1}: no sort
        if groups is None:
            n_all = np.bincount(level, minlength=U)
            n_one = np.bincount(level, weights=r, minlength=U)
        else:
            n_all = np.bincount(level, weights=groups.counts, minlength=U)
            ones = groups.sum(r) if group_ones is None else group_ones
            n_one = np.bincount(level, weights=ones, minlength=U)
        pu, ru = np.concatenate([up, up]), np.repeat([0.0, 1.0], U)
        n = np.concatenate([n_all - n_one, n_one])
        keep = n > 0
        pu, ru, n = pu[keep], ru[keep], n[keep]
    else:
        lvl = level if groups is None else level[groups.inverse]
        r_vals, r_idx = np.unique(r, return_inverse=True)
        key, n = np.unique(lvl * len(r_vals) + r_idx.reshape(-1), return_counts=True)
        pu, ru = up[key // len(r_vals)], r_vals[key % len(r_vals)]
    n = n.astype(np.float64)
    # the whole grid at once: rows are betas, columns the distinct pairs
    d = ru - _refine(_value(pu, grid[:, None]), ru, n, eps, kind, inactive)
    losses = (d * d) @ n
    return float(grid[int(np.argmin(losses))]), losses


class PrecedingBatchCalibrator:
    """Stateful helper for the preceding-batch variant (BASIS Limitations / Appendix D).

    `step(phat, rewards)` returns beta calibrated on the previous call's batch (`beta0` = inf on the
    first step: the initial policy is the reference policy) and then remembers the current batch.
    """

    def __init__(self, beta_grid=None, eps: float = 1e-6, kind: str = "unb", beta0: float = np.inf):
        self.beta_grid, self.eps, self.kind, self.beta0 = beta_grid, eps, kind, beta0
        self.prev: tuple[np.ndarray, np.ndarray] | None = None

    def step(self, phat, rewards) -> float:
        beta = self.beta0 if self.prev is None else basis_calibrate(*self.prev, self.beta_grid, self.eps, self.kind)[0]
        p = as_float_array(phat, "phat")
        r = as_float_array(rewards, "rewards")
        check_same_length(phat=p, rewards=r)
        self.prev = (p.copy(), r.copy())
        return beta


def basis_baseline(rewards, prompt_ids, *, ctx=None, info=None, kind="unb", inactive="zero", **_):
    """BASIS baseline b = vt_{beta_t} per rollout (Algorithm 1).

    Initial values: ctx.vhat if given (no calibration); else V*_beta(ctx.phat) with beta = ctx.beta,
    or calibrated on the current batch (ctx.calibrate_on="current") or on the preceding batch
    ("previous": ctx.prev_phat / ctx.prev_rewards, one per rollout; beta = inf when absent).
    info (if a dict) receives beta (None when vhat was given), active_size |J|, kind, losses.
    """
    r, g = _prep(rewards, prompt_ids)
    ctx = ctx if ctx is not None else EstimatorContext()
    grid = ctx.beta_grid
    beta, losses = None, None
    _check_opts(kind, inactive, ctx.active_eps)
    ones = g.sum(r) if _is_binary(r) else None  # successes per prompt, shared by both steps
    if ctx.vhat is not None:
        vhat = per_group(ctx.vhat, g, "vhat")
        check_in_range(vhat, "ctx.vhat", 0.0, 1.0)
    else:
        phat_g = per_group(ctx.phat, g, "phat")
        check_in_range(phat_g, "ctx.phat", 0.0, 1.0)
        if ctx.beta is not None:
            beta = float(ctx.beta)
        elif ctx.calibrate_on == "current":
            up, idx = np.unique(phat_g, return_inverse=True)  # sorts prompts, not rollouts
            beta, losses = _calibrate(up, idx.reshape(-1), r, _grid(grid), ctx.active_eps, kind, inactive, g,
                                      ones)
        elif ctx.calibrate_on == "previous":
            if ctx.prev_phat is None or ctx.prev_rewards is None:
                beta = np.inf
            else:
                beta, losses = basis_calibrate(ctx.prev_phat, ctx.prev_rewards, grid, ctx.active_eps, kind, inactive)
        else:
            raise ValueError(f"ctx.calibrate_on must be 'current' or 'previous', got {ctx.calibrate_on!r}")
        vhat = basis_value(phat_g, beta)  # per prompt
    vt = _refine_grouped(vhat, r, g, ctx.active_eps, kind, inactive, ones)
    if info is not None:
        info.update(beta=beta, active_size=int(g.counts[vhat * (1.0 - vhat) > ctx.active_eps].sum()),
                    kind=kind, losses=losses)
    return vt


def _is_binary(r: np.ndarray) -> bool:
    return np.count_nonzero(r == 0.0) + np.count_nonzero(r == 1.0) == len(r)


def _refine_grouped(vhat_p, r, g, eps, kind, inactive, n_one=None):
    """`basis_refine` per rollout from per-prompt vhat. With {0,1} rewards, rollouts that share
    (prompt, reward) share vt, so the refinement runs on at most 2 entries per prompt, weighted by
    their counts (the same sums, fewer terms), and is gathered back to the rollouts."""
    P = len(vhat_p)
    if n_one is None or 2 * P >= len(r):  # non-binary rewards, or pairs would not be fewer
        return _refine(vhat_p[g.inverse], r, None, eps, kind, inactive)
    vt2 = _refine(np.concatenate([vhat_p, vhat_p]), np.repeat([0.0, 1.0], P),
                  np.concatenate([g.counts - n_one, n_one]), eps, kind, inactive)
    return vt2[g.inverse + P * r.astype(np.intp)]


def basis_advantage(rewards, prompt_ids, *, ctx=None, info=None, kind="unb", inactive="zero", **_):
    """BASIS advantage A = r - vt_{beta_t} (see `basis_baseline`)."""
    r = as_float_array(rewards, "rewards")
    return r - basis_baseline(r, prompt_ids, ctx=ctx, info=info, kind=kind, inactive=inactive)


def _kind(kind):
    def adv(rewards, prompt_ids, *, ctx=None, info=None, **kw):
        kw.pop("kind", None)
        return basis_advantage(rewards, prompt_ids, ctx=ctx, info=info, kind=kind, **kw)

    def base(rewards, prompt_ids, *, ctx=None, info=None, **kw):
        kw.pop("kind", None)
        return basis_baseline(rewards, prompt_ids, ctx=ctx, info=info, kind=kind, **kw)

    adv.__name__, base.__name__ = f"basis_{kind}_advantage", f"basis_{kind}_baseline"
    adv.__doc__ = f"BASIS advantage with the {kind.upper()} refinement (see `basis_advantage`)."
    base.__doc__ = f"BASIS baseline with the {kind.upper()} refinement (see `basis_baseline`)."
    # reads ctx.phat/vhat (reference), ctx.beta when fixed, ctx.prev_* when calibrate_on="previous"
    # the registry's checked function: an overflow (rewards of 1e308) is an error naming basis_<kind>
    adv = register_estimator(f"basis_{kind}", baseline=base, needs=("reference", "beta", "calibration"))(adv)
    return adv, base


basis_unb_advantage, basis_unb_baseline = _kind("unb")
basis_vop_advantage, basis_vop_baseline = _kind("vop")
basis_rvg_advantage, basis_rvg_baseline = _kind("rvg")
