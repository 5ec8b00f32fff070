"""Group and batch baselines: GRPO, Dr.GRPO, RLOO, vanilla REINFORCE, REINFORCE++, GPG.

Also home of the shared plumbing every estimator module uses: input validation, the O(M)
grouping of rollouts by prompt id (`group_by`), and `EstimatorContext`, the optional per-prompt
side data (V0 priors, BASIS pass rates, ...) passed to registered estimators.

Rewards are stored as {0,1} (any finite float is accepted); the advantage is A = r - b unless a
docstring says otherwise. Sources: GRPO, DeepSeekMath (arXiv 2402.03300); Dr.GRPO, "Understanding
R1-Zero-like Training: A Critical Perspective" (arXiv 2503.20783); RLOO, Ahmadian et al. 2024
("Back to Basics", ACL); REINFORCE++ (arXiv 2501.03262); GPG (arXiv 2504.02546).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from .registry import register_estimator

# the paper (a figures group) that uses these estimators, shown by `sparserl methods`
PAPER = "baselines"  # GRPO, Dr.GRPO, RLOO, REINFORCE++, GPG: the common comparisons

# --------------------------------------------------------------------------- validation


def _where_bad(x: np.ndarray) -> tuple[Any, str]:
    """Index (an int, or a tuple for N-D arrays) and kind of the first non-finite entry."""
    flat = int(np.flatnonzero(~np.isfinite(x.ravel()))[0])
    v = x.ravel()[flat]
    i = flat if x.ndim <= 1 else tuple(int(j) for j in np.unravel_index(flat, x.shape))
    return i, ("NaN" if np.isnan(v) else ("inf" if v > 0 else "-inf"))


def as_float_array(x: Any, name: str, ndim: int | None = 1, allow_inf: bool = False) -> np.ndarray:
    """`x` as a float64 array; ValueError naming `name` on NaN/inf or a wrong number of dims."""
    try:
        a = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name} must be numeric: {e}") from None
    if ndim is not None and a.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {a.shape}")
    if allow_inf:
        if np.isnan(a).any():
            i, _ = _where_bad(np.where(np.isinf(a), 0.0, a))
            raise ValueError(f"{name} contains NaN at index {i}")
    elif not np.isfinite(a).all():
        i, what = _where_bad(a)
        raise ValueError(f"{name} contains {what} at index {i}")
    return a


def check_same_length(**arrays: np.ndarray) -> int:
    """Common length of 1-D arrays; ValueError listing every length when they differ."""
    lens = {k: len(v) for k, v in arrays.items()}
    if len(set(lens.values())) > 1:
        raise ValueError("length mismatch: " + ", ".join(f"{k} has length {n}" for k, n in lens.items()))
    return next(iter(lens.values()))


def check_in_range(a: np.ndarray, name: str, lo: float, hi: float) -> None:
    bad = (a < lo) | (a > hi)
    if bad.any():
        i = int(np.flatnonzero(bad.ravel())[0])
        raise ValueError(f"{name} must lie in [{lo}, {hi}]; got {a.ravel()[i]!r} at index {i}")


# --------------------------------------------------------------------------- grouping


@dataclass(frozen=True)
class Groups:
    """Rollouts grouped by prompt id: `inverse[m]` is the group of rollout m, `keys[g]` its id."""

    keys: np.ndarray  # (G,) unique prompt ids, sorted
    inverse: np.ndarray  # (M,) int group index per rollout
    counts: np.ndarray  # (G,) rollouts per group

    @property
    def n_groups(self) -> int:
        return len(self.keys)

    def sum(self, x: np.ndarray) -> np.ndarray:
        """Per-group sum of a per-rollout array, shape (G,)."""
        # astype: bincount of an empty input returns int64 even with weights
        return np.bincount(self.inverse, weights=x, minlength=self.n_groups).astype(np.float64, copy=False)

    def mean(self, x: np.ndarray) -> np.ndarray:
        """Per-group mean, shape (G,); every group has at least one rollout."""
        return self.sum(x) / self.counts


def group_by(prompt_ids: Any, n: int | None = None) -> Groups:
    """Group rollouts by prompt id: one np.unique (a sort), then O(M) bincount passes, no Python loop.
    Small non-negative integer codes skip the sort (a string np.unique costs ~15x the estimator)."""
    ids = np.asarray(prompt_ids)
    if ids.ndim != 1:
        raise ValueError(f"prompt_ids must be 1-D, got shape {ids.shape}")
    if n is not None and len(ids) != n:
        raise ValueError(f"length mismatch: rewards has length {n}, prompt_ids has length {len(ids)}")
    if ids.dtype.kind == "f" and not np.isfinite(ids).all():
        i, what = _where_bad(ids)
        raise ValueError(f"prompt_ids contains {what} at index {i}")
    if ids.dtype.kind in "iu" and len(ids) and 0 <= ids.min() and ids.max() <= 4 * len(ids) + 1024:
        # integer group codes (the trainers pass their prompt_index): counting, not sorting; the
        # same keys (ascending) and inverse as np.unique
        present = np.bincount(ids)
        keys = np.flatnonzero(present)
        remap = np.cumsum(present > 0) - 1
        inverse = remap[ids]
        return Groups(keys=keys, inverse=inverse, counts=present[keys])
    try:
        keys, inverse = np.unique(ids, return_inverse=True)
    except TypeError as e:  # e.g. a mix of ints and strings cannot be sorted
        raise ValueError(f"prompt_ids must be mutually comparable: {e}") from None
    inverse = inverse.reshape(-1)
    counts = np.bincount(inverse, minlength=len(keys))
    return Groups(keys=keys, inverse=inverse, counts=counts)


def _prep(rewards: Any, prompt_ids: Any) -> tuple[np.ndarray, Groups]:
    r = as_float_array(rewards, "rewards")
    return r, group_by(prompt_ids, len(r))


_SQRT_MAX = float(np.sqrt(np.finfo(np.float64).max))  # ~1.3e154


def _overflow_shift(r: np.ndarray, group: np.ndarray) -> np.ndarray | None:
    """None when sums and squared deviations of `r` cannot overflow (every ordinary reward: the
    arithmetic stays as it is). Else, per rollout, the power of two k that brings its group's
    max|r| into [1, 2) (`group`: a group index per rollout): estimators then work on r * 2**-k,
    an exact scaling that leaves every group's values in range, and scale back with `_unscale`."""
    if len(r) == 0:
        return None
    top = float(np.abs(r).max())
    if top < _SQRT_MAX / (4.0 * np.sqrt(len(r))):  # sum(dev^2) <= M (2 top)^2 < float max
        return None
    group_top = np.zeros(int(group.max()) + 1)
    np.maximum.at(group_top, group, np.abs(r))
    return (np.frexp(group_top)[1] - 1)[group]


def _unscale(a: np.ndarray, k: np.ndarray, r: np.ndarray, what: str) -> np.ndarray:
    """a * 2**k, checked: a value beyond float64 is refused, naming its reward's index."""
    with np.errstate(over="ignore"):
        out = np.ldexp(a, k)
    if not np.isfinite(out).all():
        i = int(np.flatnonzero(~np.isfinite(out))[0])
        raise ValueError(f"{what} of rewards[{i}] = {float(r[i])!r} exceeds float64 (the rewards' range "
                         "is too wide); rescale the rewards")
    return out


# --------------------------------------------------------------------------- side data


@dataclass
class EstimatorContext:
    """Optional side data for registered estimators (all fields default to None / paper values).

    Per-prompt fields accept either a mapping {prompt_id: value} or an array aligned with the
    rollouts (shape (M,), one value per rollout; rollouts of a prompt repeat the value).
    """

    prior: Mapping | np.ndarray | None = None  # V0 success probability p in [0,1] (V0.5; V = 2p-1)
    phat: Mapping | np.ndarray | None = None  # BASIS reference pass rate over n cached rollouts
    vhat: Mapping | np.ndarray | None = None  # BASIS initial values; overrides phat/beta calibration
    beta: float | None = None  # BASIS fixed beta (skips calibration); np.inf gives vhat = phat
    beta_grid: np.ndarray | None = None  # BASIS calibration grid; None -> default_beta_grid()
    calibrate_on: str = "current"  # BASIS: "current" batch or "previous" batch (Limitations variant)
    prev_phat: np.ndarray | None = None  # BASIS "previous": preceding batch's phat, one per rollout
    prev_rewards: np.ndarray | None = None  # BASIS "previous": preceding batch's rewards
    eps: float = 1e-6  # numerical guard: GRPO/REINFORCE++ std, V0.5 sigma floor
    active_eps: float = 1e-6  # BASIS active-set threshold on vhat (1 - vhat)
    tether_rho: float | np.ndarray = 0.0  # Tether: previous step's rho (per bucket: a vector), rho_0 = 0


def per_group(values: Mapping | np.ndarray | None, groups: Groups, name: str) -> np.ndarray:
    """Per-prompt side data as one float per group, shape (G,), in the order of `groups.keys`.

    A mapping is looked up by prompt id; a rollout-aligned array (M,) must repeat the same value
    within a prompt (checked). NaN/inf are rejected.
    """
    if values is None:
        raise ValueError(f"ctx.{name} is required by this estimator")
    if isinstance(values, Mapping):
        try:
            out = np.array([values[k] for k in groups.keys.tolist()], dtype=np.float64)
        except KeyError as e:
            raise ValueError(f"ctx.{name} has no entry for prompt id {e.args[0]!r}") from None
        return as_float_array(out, f"ctx.{name}")
    a = as_float_array(values, f"ctx.{name}")
    if len(a) != len(groups.inverse):
        raise ValueError(
            f"length mismatch: ctx.{name} has length {len(a)}, rewards has length {len(groups.inverse)} "
            f"(pass a mapping {{prompt_id: value}} or one value per rollout)"
        )
    out = np.empty(groups.n_groups)
    out[groups.inverse] = a  # any rollout's value represents its prompt ...
    differ = a != out[groups.inverse]  # ... provided they all agree
    if differ.any():
        i = int(np.flatnonzero(differ)[0])
        raise ValueError(f"ctx.{name} differs between rollouts of prompt {groups.keys[groups.inverse[i]]!r}")
    return out


def per_rollout(values: Mapping | np.ndarray | None, groups: Groups, name: str) -> np.ndarray:
    """Per-prompt side data expanded to one float per rollout, shape (M,)."""
    return per_group(values, groups, name)[groups.inverse]


# --------------------------------------------------------------------------- token level


def _check_mask(mask: Any, n: int, right_padded: bool = True) -> np.ndarray:
    """`mask` as an (n, T) bool array (0/1 accepted); ValueError naming `mask` otherwise."""
    m = np.asarray(mask)
    if m.ndim != 2:
        raise ValueError(f"mask must be 2-D (N, T), got shape {m.shape}")
    if m.shape[0] != n:
        raise ValueError(f"mask must have one row per rollout: rewards has length {n}, mask has shape {m.shape}")
    if m.dtype != bool:
        if not np.isin(m, (0, 1)).all():
            raise ValueError(f"mask must be boolean (or 0/1), got dtype {m.dtype} with other values")
        m = m.astype(bool)
    if right_padded:
        late = m[:, 1:] & ~m[:, :-1]  # a real token right after padding
        if late.any():
            i, t = (int(j[0]) for j in np.nonzero(late))
            raise ValueError(f"mask must be right-padded: row {i} has a real token at {t + 1} after padding")
    return m


def token_inputs(rewards: Any, prompt_ids: Any, values: Any, mask: Any):
    """Validated inputs of a token-level estimator: (r (N,), groups, V (N, T), mask (N, T) bool).

    `mask` marks the real tokens (right padding). `values` must be finite on real tokens; padding
    entries are ignored (NaN allowed there) and returned as 0.
    """
    r, g = _prep(rewards, prompt_ids)
    m = _check_mask(mask, len(r))
    try:
        v = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ValueError(f"values must be numeric: {e}") from None
    if v.shape != m.shape:
        raise ValueError(f"values must have the shape of mask {m.shape}, got {v.shape}")
    bad = m & ~np.isfinite(v)
    if bad.any():
        i, what = _where_bad(np.where(bad, v, 0.0))
        raise ValueError(f"values contains {what} at index {i} (a real token)")
    return r, g, np.where(m, v, 0.0), m


def broadcast_sequence_advantages(adv: Any, mask: Any) -> np.ndarray:
    """Sequence advantages (N,) as token advantages (N, T): A_i on every real token, 0 on padding.

    Lets an engine treat every estimator as token-level (any mask; no right padding needed).
    """
    a = as_float_array(adv, "adv")
    m = _check_mask(mask, len(a), right_padded=False)
    return np.where(m, a[:, None], 0.0)


# --------------------------------------------------------------------------- baselines
# Each public function validates and groups once, then calls a core `_name(r, g)`.


def _grpo_b(r: np.ndarray, g: Groups) -> np.ndarray:
    return g.mean(r)[g.inverse]


def _rloo_b(r: np.ndarray, g: Groups) -> np.ndarray:
    n = g.counts[g.inverse]
    loo = g.sum(r)[g.inverse] - r
    return np.divide(loo, n - 1, out=np.zeros_like(r), where=n > 1)


def group_std(r: np.ndarray, g: Groups, ddof: int = 1) -> np.ndarray:
    """Per-rollout std of its group; ddof=1 as torch.std in verl/OpenRLHF; 0 for groups of size <= ddof."""
    dev = r - g.mean(r)[g.inverse]
    ss = g.sum(dev * dev)
    dof = g.counts - ddof
    var = np.divide(ss, dof, out=np.zeros_like(ss), where=dof > 0)
    return np.sqrt(var)[g.inverse]


def grpo_baseline(rewards, prompt_ids, *, ctx=None, info=None, **_) -> np.ndarray:
    """GRPO / Dr.GRPO / GPG baseline: the group mean b_i = mean_k r_{i,k} (Shao et al. 2024)."""
    r, g = _prep(rewards, prompt_ids)
    k = _overflow_shift(r, g.inverse)
    if k is not None:  # huge rewards: a group sum would overflow
        return _unscale(_grpo_b(np.ldexp(r, -k), g), k, r, "the baseline")
    return _grpo_b(r, g)


def rloo_baseline(rewards, prompt_ids, *, ctx=None, info=None, **_) -> np.ndarray:
    """RLOO: b_{i,k} = sum_{l != k} r_{i,l} / (K-1) (Ahmadian et al. 2024).

    Groups of size 1 have no other rollout: b = 0 there (vanilla REINFORCE).
    """
    r, g = _prep(rewards, prompt_ids)
    k = _overflow_shift(r, g.inverse)
    if k is not None:  # huge rewards: a group sum would overflow
        return _unscale(_rloo_b(np.ldexp(r, -k), g), k, r, "the baseline")
    return _rloo_b(r, g)


def vanilla_baseline(rewards, prompt_ids, *, ctx=None, info=None, **_) -> np.ndarray:
    """Vanilla single-rollout REINFORCE: b = 0."""
    r, _g = _prep(rewards, prompt_ids)
    return np.zeros_like(r)


def reinforce_pp_baseline(rewards, prompt_ids, *, ctx=None, info=None, **_) -> np.ndarray:
    """REINFORCE++ (G=1): b = mean of all rewards in the batch, ignoring prompt ids."""
    r, _g = _prep(rewards, prompt_ids)
    k = _overflow_shift(r, np.zeros(len(r), dtype=np.int64))  # one group: the batch
    if k is not None:  # huge rewards: the batch sum would overflow
        return _unscale(np.full_like(r, np.ldexp(r, -k).mean()), k, r, "the baseline")
    return np.full_like(r, r.mean() if len(r) else 0.0)


# --------------------------------------------------------------------------- advantages


@register_estimator("grpo", baseline=grpo_baseline)
def grpo_advantage(rewards, prompt_ids, *, ctx=None, info=None, eps=None, ddof=1, scale_by_std=True, **_):
    """GRPO: A = (r - mean_group) / (std_group + eps); Dr.GRPO when scale_by_std=False.

    std uses ddof=1 (torch.std, as verl/OpenRLHF); a group of size 1 has A = 0 (b = r).
    eps defaults to ctx.eps (1e-6, verl's value).
    """
    r, g = _prep(rewards, prompt_ids)
    eps = _eps(ctx, eps) if scale_by_std else None
    k = _overflow_shift(r, g.inverse)
    if k is not None:  # huge rewards: work on r * 2**-k (exact); the std ratio is scale-free, r - b is not
        rs = np.ldexp(r, -k)
        a = rs - _grpo_b(rs, g)
        if not scale_by_std:
            return _unscale(a, k, r, "the advantage")
        den = group_std(rs, g, ddof) + np.ldexp(eps, -k)
        return np.divide(a, den, out=np.zeros_like(a), where=den > 0)  # den 0: eps underflowed, a = 0
    a = r - _grpo_b(r, g)
    if scale_by_std:
        a = a / (group_std(r, g, ddof) + eps)
    return a


@register_estimator("dr_grpo", baseline=grpo_baseline)
def dr_grpo_advantage(rewards, prompt_ids, *, ctx=None, info=None, **kw):
    """Dr.GRPO (Liu et al. 2025): GRPO without the std division, A = r - mean_group."""
    kw.pop("scale_by_std", None)
    return grpo_advantage(rewards, prompt_ids, ctx=ctx, info=info, scale_by_std=False, **kw)


@register_estimator("rloo", baseline=rloo_baseline)
def rloo_advantage(rewards, prompt_ids, *, ctx=None, info=None, **_):
    """RLOO: A = r - b_LOO (see `rloo_baseline`)."""
    r, g = _prep(rewards, prompt_ids)
    k = _overflow_shift(r, g.inverse)
    if k is not None:  # huge rewards: a group sum would overflow
        rs = np.ldexp(r, -k)
        return _unscale(rs - _rloo_b(rs, g), k, r, "the advantage")
    return r - _rloo_b(r, g)


@register_estimator("vanilla", baseline=vanilla_baseline)
def vanilla_advantage(rewards, prompt_ids, *, ctx=None, info=None, **_):
    """Vanilla REINFORCE (b = 0): A = r."""
    r, _g = _prep(rewards, prompt_ids)
    return r.copy()


@register_estimator("reinforce_pp", baseline=reinforce_pp_baseline)
def reinforce_pp_advantage(rewards, prompt_ids, *, ctx=None, info=None, eps=None, **_):
    """REINFORCE++ (Hu et al. 2025), G=1: A = r - mean(r), then (A - mean A) / (std A + eps) over the batch.

    std is the population std (ddof=0), as OpenRLHF's batch whitening; here per rollout, the
    token-weighted whitening belongs to the trainer. eps defaults to ctx.eps.
    """
    r, _g = _prep(rewards, prompt_ids)
    eps = _eps(ctx, eps)
    if len(r) == 0:
        return r.copy()
    k = _overflow_shift(r, np.zeros(len(r), dtype=np.int64))  # one group: the batch
    if k is not None:  # huge rewards: whiten r * 2**-k (exact); the ratio is scale-free
        rs = np.ldexp(r, -k)
        a = rs - rs.mean()
        a = a - a.mean()
        den = a.std() + np.ldexp(eps, -k)
        return np.divide(a, den, out=np.zeros_like(a), where=den > 0)
    a = r - r.mean()
    a = a - a.mean()
    return a / (a.std() + eps)


def _valid_scale(r: np.ndarray, g: Groups) -> float:
    if g.n_groups == 0:
        return 1.0
    # A group is all-equal iff every reward equals one representative of it; any write wins.
    rep = np.empty(g.n_groups)
    rep[g.inverse] = r
    n_diff = np.bincount(g.inverse, weights=(r != rep[g.inverse]), minlength=g.n_groups)
    valid = int(np.count_nonzero(n_diff))
    return g.n_groups / valid if valid else 1.0


def gpg_valid_scale(rewards, prompt_ids) -> float:
    """GPG's loss factor B / B_valid (Chu et al. 2025): B prompts, B_valid = prompts whose rewards are
    not all equal (a group of size 1 is all-equal). Returns 1.0 when B_valid = 0 (all A are 0 then)."""
    return _valid_scale(*_prep(rewards, prompt_ids))


@register_estimator("gpg", baseline=grpo_baseline)
def gpg_advantage(rewards, prompt_ids, *, ctx=None, info=None, **_):
    """GPG: A = (r - mean_group) * B / B_valid, no std (Chu et al. 2025).

    The B/B_valid loss scale is folded into the returned advantages (the GPG loss is a plain
    policy gradient, so this is equivalent); it is also written to info["gpg_scale"] and
    available from `gpg_valid_scale`.
    """
    r, g = _prep(rewards, prompt_ids)
    scale = _valid_scale(r, g)
    if info is not None:
        info["gpg_scale"] = scale
    k = _overflow_shift(r, g.inverse)
    if k is not None:  # huge rewards: a group sum would overflow
        rs = np.ldexp(r, -k)
        return _unscale((rs - _grpo_b(rs, g)) * scale, k, r, "the advantage")
    return (r - _grpo_b(r, g)) * scale


def _eps(ctx, eps):
    if eps is None:
        eps = ctx.eps if ctx is not None else 1e-6
    # eps = 0 divides 0 by 0 on an all-equal group (the usual case): NaN advantages
    if not (eps > 0 and np.isfinite(eps)):
        raise ValueError(f"eps must be a finite number > 0 (it keeps the std denominator away from 0 "
                         f"on all-equal groups), got {eps!r}; the default is 1e-6")
    return float(eps)
