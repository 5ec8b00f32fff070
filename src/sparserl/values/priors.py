"""Pluggable priors for V0.5: who says what a prompt's success probability is before any rollout.

A prior is any callable

    prior(prompt_ids, context=None) -> np.ndarray   # p in [0, 1], one per prompt id

`context` is the support set V0 conditions on: a sequence or DataFrame of (prompt, reward)
pairs of the current policy (V0.5's buffer of the 512 most recent pairs, 256 of them sampled per
step). The oracle and constant priors here ignore it; a V0 model registered later reads it.
V0.5 turns p into its prior V = 2p - 1 on the {-1,+1} reward scale (V_0.5: Generalist Value Model
as a Prior for Sparse RL Rollouts, arXiv 2603.10848, Section 4.1.3, step 1).

Priors here:
- `OraclePrior`: known per-prompt values (e.g. Monte Carlo oracle pass rates) shifted by a known
  offset delta, the controlled "hallucinating prior" of the V0.5 study. **delta is applied on
  V0.5's V = 2p - 1 scale** (the scale of Delta in Eqs. 7-9): V' = clip(V + s delta, -1, 1), i.e.
  p' = clip(p + s delta / 2, 0, 1). Unclipped, the true prior bias is then exactly |Delta| = delta.
  The sign s per prompt is '+', '-', 'random' (a fixed +-1 per prompt, from a hash of (seed,
  prompt id), so the same prompt always gets the same corrupted value, as a model's error would)
  or 'inward' (towards the middle, s = -sign(V), +1 at V = 0: never clipped while delta <= 1).
  `realized_offset(prompt_ids)` returns V' - V after clipping.
- `ConstantPrior`: the same p for every prompt (0.5 = "knows nothing"; the pool mean).
- 'v0': the trained V0 model, conditioned on the run's support buffer (`values.v0.prior`).

`make_prior(kind, **kw)` builds one from the registry (`register_prior` adds kinds, e.g. V0).
"""
from __future__ import annotations

import hashlib
from typing import Any, Callable, Mapping, Protocol, Sequence

import numpy as np
import pandas as pd

from sparserl.core.config import section_setting

SIGNS = ("random", "+", "-", "inward")


class Prior(Protocol):
    """prior(prompt_ids, context=None) -> p (np.ndarray in [0, 1], aligned with prompt_ids)."""

    def __call__(self, prompt_ids: Sequence[Any], context: Any = None) -> np.ndarray: ...


def _ids(prompt_ids) -> list:
    if isinstance(prompt_ids, (str, bytes)):
        raise TypeError("prompt_ids must be a sequence of ids, not a single string")
    return list(np.asarray(prompt_ids, dtype=object).reshape(-1))


def _check_p(p: np.ndarray, name: str) -> np.ndarray:
    p = np.asarray(p, dtype=np.float64)
    if not np.isfinite(p).all() or (p < 0).any() or (p > 1).any():
        raise ValueError(f"{name} must be probabilities in [0, 1]")
    return p


def stable_sign(seed: int, prompt_id: Any) -> float:
    """A fixed +1/-1 per (seed, prompt id), identical across processes (no Python hash salt)."""
    h = hashlib.blake2b(f"{int(seed)}\x00{prompt_id}".encode(), digest_size=8).digest()
    return 1.0 if h[0] & 1 else -1.0


class OraclePrior:
    """Oracle values plus a known offset delta on the V = 2p - 1 scale (see the module docstring).

    values: mapping or Series prompt_id -> p in [0, 1]. offset: delta >= 0 (V scale).
    sign: 'random' | '+' | '-' | 'inward'. seed: seeds the per-prompt random signs.
    """

    def __init__(self, values: Mapping | pd.Series, offset: float = 0.0, *, sign: str = "random",
                 seed: int = 0):
        if isinstance(values, pd.Series):
            values = values.to_dict()
        if not isinstance(values, Mapping):
            raise TypeError("values must be a mapping or Series prompt_id -> p")
        if sign not in SIGNS:
            raise ValueError(f"sign must be one of {SIGNS}, got {sign!r}")
        if not (np.isfinite(offset) and offset >= 0):
            raise ValueError(f"offset must be a finite delta >= 0 (apply direction with sign), got {offset!r}")
        self.values = dict(values)
        _check_p(np.fromiter(self.values.values(), float, len(self.values)), "values")
        self.offset, self.sign, self.seed = float(offset), sign, int(seed)

    def _base(self, ids: list) -> np.ndarray:
        try:
            return np.array([self.values[i] for i in ids], dtype=np.float64)
        except KeyError as e:
            raise KeyError(f"OraclePrior has no value for prompt id {e.args[0]!r}") from None

    def signs(self, prompt_ids) -> np.ndarray:
        """The offset direction s per prompt (+1 raises p, -1 lowers it)."""
        ids = _ids(prompt_ids)
        if self.sign == "+":
            return np.ones(len(ids))
        if self.sign == "-":
            return -np.ones(len(ids))
        if self.sign == "inward":
            v = 2.0 * self._base(ids) - 1.0
            return np.where(v > 0, -1.0, 1.0)
        return np.array([stable_sign(self.seed, i) for i in ids])

    def __call__(self, prompt_ids, context=None) -> np.ndarray:
        ids = _ids(prompt_ids)
        p = self._base(ids)
        if not self.offset:
            return p
        # V' = clip(V + s delta, -1, 1)  <=>  p' = clip(p + s delta / 2, 0, 1)
        return np.clip(p + self.signs(ids) * (self.offset / 2.0), 0.0, 1.0)

    def realized_offset(self, prompt_ids) -> np.ndarray:
        """V' - V after clipping, per prompt (V scale); |.| = offset where nothing clipped."""
        ids = _ids(prompt_ids)
        return 2.0 * (self(ids) - self._base(ids))

    def __repr__(self) -> str:
        return f"OraclePrior({len(self.values)} prompts, offset={self.offset}, sign={self.sign!r})"


class ConstantPrior:
    """The same p for every prompt."""

    def __init__(self, p: float = 0.5):
        self.p = float(_check_p(np.asarray(p), "p"))

    def __call__(self, prompt_ids, context=None) -> np.ndarray:
        return np.full(len(_ids(prompt_ids)), self.p)

    def __repr__(self) -> str:
        return f"ConstantPrior(p={self.p:.4g})"


PRIOR_REGISTRY: dict[str, Callable[..., Prior]] = {}
PLANNED_PRIORS: tuple = ()  # kinds method specs may name before their factory is registered


def register_prior(kind: str, factory: Callable[..., Prior]) -> None:
    """Register a prior factory under `kind` (e.g. the V0 model); re-registering another is an error."""
    if PRIOR_REGISTRY.get(kind, factory) is not factory:
        raise ValueError(f"prior kind {kind!r} is already registered")
    PRIOR_REGISTRY[kind] = factory


def make_prior(kind: str, **kw) -> Prior:
    """Build a prior: make_prior('oracle', values=..., offset=.3, sign='random', seed=0),
    make_prior('constant', p=.5)."""
    try:
        factory = PRIOR_REGISTRY[kind]
    except KeyError:
        raise ValueError(f"unknown prior kind {kind!r}; known: {sorted(PRIOR_REGISTRY)}") from None
    return factory(**kw)


def reference_values(reference: pd.DataFrame, pseudo_count: float = 0.0,
                     source: str = "the reference cache") -> dict:
    """prompt_id -> the reference rollouts' pass rate (successes + a) / (n + 2a), the posterior mean
    under a Beta(a, a) prior (a = 0: phat itself).

    Why a > 0 for the RL oracle prior: 0/64 successes is not p = 0, and V0.5's
    sigma = sqrt(1 - mu^2) is 0 at a prior of exactly 0 or 1, so one surprising reward gets an
    advantage of 2 / sqrt(eps) (measured at small scale: mean |A| up to 70 in a step).

    `source` names the cache in errors (its path, where the caller knows it)."""
    if not (np.isfinite(pseudo_count) and pseudo_count >= 0):
        raise ValueError(f"pseudo_count must be >= 0, got {pseudo_count!r}")
    missing = {"prompt_id", "successes", "n"} - set(reference.columns)
    if missing:
        raise ValueError(f"the reference cache lacks columns {sorted(missing)}; rebuild it "
                         "(rule reference_cache / `sparserl mc-values`)")
    n = reference["n"].to_numpy(dtype=np.float64)
    succ = reference["successes"].to_numpy(dtype=np.float64)
    empty = ~(n > 0)  # 0 rollouts: 0/0 would be a NaN prior with no error
    if empty.any():
        i = int(np.flatnonzero(empty)[0])
        raise ValueError(f"{source} has n = {n[i]:g} rollouts for prompt "
                         f"{reference['prompt_id'].iloc[i]!r} (row {i}; {int(empty.sum())} such rows), so "
                         "it has no pass rate; rebuild the cache (basis.reference_n >= 1; rule "
                         "reference_cache / `sparserl mc-values`)")
    return dict(zip(reference["prompt_id"], (succ + pseudo_count) / (n + 2.0 * pseudo_count)))


def prior_for_method(spec: Mapping, reference: pd.DataFrame | None, seed: int,
                     reference_source: str = "the reference cache", **kw) -> Prior:
    """The prior a method spec names (`prior: {kind, offset, pseudo_count, p}`); 'oracle' takes its
    values from the cached reference rollouts (`reference_values`). Other kinds (V0) are built by
    their registered factory with `spec`, `seed` and `kw` (the local trainer passes cfg=...)."""
    if spec["kind"] == "oracle":
        if reference is None:
            raise ValueError("the oracle prior needs the reference cache (prompt_id, successes, n)")
        counts = section_setting(spec, "$defs", "method", "prior", "pseudo_count")
        return make_prior("oracle", values=reference_values(reference, counts, reference_source),
                          offset=section_setting(spec, "$defs", "method", "prior", "offset"), seed=seed)
    if spec["kind"] == "constant":
        return make_prior("constant", p=section_setting(spec, "$defs", "method", "prior", "p"))
    return make_prior(spec["kind"], spec=dict(spec), seed=seed, **kw)


def _v0_prior(**kw) -> Prior:
    """The trained V0 model as a prior (sparserl.values.v0.prior; imports torch when built)."""
    from sparserl.values.v0.prior import make_v0_prior
    return make_v0_prior(**kw)


register_prior("oracle", OraclePrior)
register_prior("constant", ConstantPrior)
register_prior("v0", _v0_prior)
