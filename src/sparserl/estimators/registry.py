"""Estimator registry: one `EstimatorSpec` per name, registered by a decorator at the definition.

In the style of verl's `register_adv_est` (core_algos.py). A spec records the advantage function,
its optional baseline, the side data it reads (`needs`, from `SIDE_DATA`) and its `level`:

- "sequence": fn(rewards, prompt_ids, *, ctx=None, info=None, **kw) -> (M,)
- "token":    fn(rewards, prompt_ids, *, values, mask, ctx=None, info=None, **kw) -> (N, T)

Every advantage function the registry hands out (the decorator's return value, `get_estimator`,
`spec.fn`) checks its output at this boundary: a float array, one entry
per rollout ((M,)) or the mask's shape ((N, T)) for token-level ones, all finite. A NaN or an
overflow (rewards of 1e308) is a ValueError naming the estimator, never an advantage that trains.

Estimators are discovered, never listed by hand: the first lookup (`get_spec`, `list_estimators`,
the registry views) imports every module of this package (pkgutil), so a new `estimators/<name>.py`
registers by existing, and then loads the entry points of group `sparserl.estimators`, so a
third-party package adds estimators by declaring, in its pyproject.toml,

    [project.entry-points."sparserl.estimators"]
    my_estimators = "my_package.my_estimators"   # a module whose import registers them

This module imports nothing from the estimator modules at import time (they import it), so there
is no cycle.
`ESTIMATOR_REGISTRY` and `BASELINE_REGISTRY` are live name -> function views of the specs, so a
name deleted from either stays consistent with `get_spec` and `list_estimators`.
"""
from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.metadata
import pkgutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Callable

import numpy as np

Estimator = Callable[..., "np.ndarray"]  # noqa: F821 (signatures documented above)

# Side data an estimator may read (besides rewards and prompt ids):
SIDE_DATA = (
    "prior",  # V0.5: V0 success probability p per prompt (ctx.prior)
    "reference",  # BASIS: reference pass rates of cached rollouts (ctx.phat / ctx.vhat)
    "beta",  # BASIS: a fixed beta (ctx.beta; optional, calibrated when absent)
    "calibration",  # state carried from the previous step (BASIS ctx.prev_*, Tether ctx.tether_rho)
    "support",  # (prompt, reward) context pairs for a live value model (V0)
    "values",  # per-token critic values V(h_t) (the `values=` argument of token-level estimators)
)
LEVELS = ("sequence", "token")


@dataclass(frozen=True)
class EstimatorSpec:
    """What the registry knows about one estimator."""

    name: str
    fn: Estimator
    baseline: Estimator | None
    needs: frozenset
    level: str


_SPECS: dict[str, EstimatorSpec] = {}

ENTRY_POINT_GROUP = "sparserl.estimators"
_discovered = False


def discover() -> None:
    """Import every module of this package and load every `sparserl.estimators` entry point, once;
    their `@register_estimator` decorators fill the registry. A module that fails to import is an
    error naming it: an estimator that silently vanished would only show as 'unknown estimator'."""
    global _discovered
    if _discovered:
        return
    _discovered = True  # set first: a discovered module that looks a name up must not recurse
    package = __name__.rpartition(".")[0]
    for mod in pkgutil.iter_modules(importlib.import_module(package).__path__):
        if not mod.name.startswith("_"):
            importlib.import_module(f"{package}.{mod.name}")
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            ep.load()
        except Exception as e:  # noqa: BLE001 - re-raised with the entry point named
            dist = getattr(ep.dist, "name", "?")
            raise ImportError(f"estimator entry point {ep.name!r} = {ep.value!r} (group {ENTRY_POINT_GROUP!r}, "
                              f"package {dist}) failed to load: {type(e).__name__}: {e}; fix that package "
                              "or uninstall it") from e


def estimator_paper(name: str) -> str | None:
    """The paper an estimator comes from: the `PAPER` string of the module that defines it (None
    when that module declares none)."""
    import sys
    module = sys.modules.get(getattr(_raw(get_spec(name).fn), "__module__", ""), None)
    return getattr(module, "PAPER", None)


def _check_needs(name: str, needs) -> frozenset:
    if isinstance(needs, str):  # a bare string would be read letter by letter
        raise ValueError(f"estimator {name!r}: needs must be a tuple of names, got the string {needs!r}")
    out = frozenset(needs)
    unknown = sorted(out - set(SIDE_DATA))
    if unknown:
        raise ValueError(f"estimator {name!r}: unknown side data {unknown}; known: {list(SIDE_DATA)}")
    return out


def check_output(name: str, what: str, out, rewards, mask=None):
    """`out` unchanged if it is a finite float array of the expected shape: (M,) for M rewards, the
    mask's shape for a token-level result (`mask` given); ValueError naming the estimator if not."""
    a = np.asarray(out)
    if a.dtype.kind != "f":
        raise ValueError(f"estimator {name!r}: its {what} has dtype {a.dtype}, not float; "
                         "return a float array")
    want = tuple(np.shape(mask)) if mask is not None else (len(rewards),)
    if a.shape != want:
        per = "the mask's shape (one per token)" if mask is not None else "one per rollout"
        raise ValueError(f"estimator {name!r}: its {what} has shape {a.shape}, expected {want} ({per})")
    bad = ~np.isfinite(a)
    if bad.any():
        at = np.unravel_index(int(np.flatnonzero(bad.ravel())[0]), a.shape)
        at = at[0] if len(at) == 1 else tuple(int(i) for i in at)
        raise ValueError(f"estimator {name!r}: its {what} hold {float(a[at])} at index {at} ({int(bad.sum())} "
                         f"of {a.size} non-finite); its inputs (rewards, values or side data) are non-finite "
                         "or so large that float64 overflows: rescale them")
    return out


def _raw(fn):
    """The estimator function itself under a `_checked` wrapper."""
    return fn.__wrapped__ if getattr(fn, "_checked_as", None) else fn


def _checked(name: str, fn: Estimator) -> Estimator:
    """`fn` whose every result passes `check_output`; its raw function is `__wrapped__`."""
    raw = _raw(fn)

    @functools.wraps(raw)
    def checked(rewards, prompt_ids, *args, **kw):
        return check_output(name, "advantages", raw(rewards, prompt_ids, *args, **kw), rewards, kw.get("mask"))

    checked._checked_as = name
    return checked


def register_estimator(name: str, *, baseline: Estimator | None = None, needs=(), level: str = "sequence"):
    """Decorator registering an advantage estimator under `name` (see the module docstring).

    `needs`: side data it reads, a subset of `SIDE_DATA` (ValueError otherwise); token-level
    estimators must declare "values". Returns the checked function the registry hands out (its
    `__wrapped__` is `fn`). Registering again with an identical spec is a no-op (a re-import);
    a different function or spec under a taken name raises ValueError.
    """
    if level not in LEVELS:
        raise ValueError(f"estimator {name!r}: level must be one of {LEVELS}, got {level!r}")
    need_set = _check_needs(name, needs)
    if level == "token" and "values" not in need_set:
        raise ValueError(f"estimator {name!r}: a token-level estimator must declare needs=('values', ...)")

    def decorator(fn: Estimator) -> Estimator:
        old = _SPECS.get(name)
        if old is not None:
            if _raw(old.fn) is not _raw(fn):
                raise ValueError(f"estimator {name!r} is already registered to {_raw(old.fn)}")
            if (old.baseline, old.needs, old.level) != (baseline, need_set, level):
                raise ValueError(f"estimator {name!r} is already registered with a different spec ({old})")
            return old.fn
        # baselines (b on the reward scale, read by the value studies) are handed out as given
        spec = EstimatorSpec(name=name, fn=_checked(name, fn), baseline=baseline,
                             needs=need_set, level=level)
        _SPECS[name] = spec
        return spec.fn

    return decorator


def get_spec(name: str) -> EstimatorSpec:
    """The `EstimatorSpec` registered under `name`; ValueError listing the known names otherwise."""
    discover()
    try:
        return _SPECS[name]
    except KeyError:
        raise ValueError(f"unknown estimator {name!r}; known: {list_estimators(None)}") from None


def get_estimator(name: str) -> Estimator:
    """The advantage function registered under `name`."""
    return get_spec(name).fn


def get_baseline(name: str) -> Estimator:
    """The baseline function (b per rollout, {0,1} reward scale) registered under `name`."""
    try:
        return BASELINE_REGISTRY[name]
    except KeyError:
        raise ValueError(f"no baseline registered for {name!r}; known: {sorted(BASELINE_REGISTRY)}") from None


def list_estimators(level: str | None = "sequence") -> list[str]:
    """Registered names of one level, sorted; level=None lists every level.

    The default is "sequence" because callers that predate token-level estimators (method specs,
    the OpenRLHF launcher's choices, the property tests) call every listed name with the
    sequence-level signature.
    """
    if level is not None and level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS} or None, got {level!r}")
    discover()
    return sorted(n for n, s in _SPECS.items() if level is None or s.level == level)


class _FunctionView(Mapping):
    """name -> fn (or baseline) over the specs; `del view[name]` unregisters (the fn) or drops the baseline."""

    def __init__(self, attr: str):
        self._attr = attr

    def __getitem__(self, name: str) -> Estimator:
        discover()
        fn = getattr(_SPECS[name], self._attr)
        if fn is None:
            raise KeyError(name)
        return fn

    def __iter__(self) -> Iterator[str]:
        discover()
        return iter([n for n, s in _SPECS.items() if getattr(s, self._attr) is not None])

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __delitem__(self, name: str) -> None:
        self[name]  # KeyError when absent, as a dict
        if self._attr == "fn":
            del _SPECS[name]
        else:
            _SPECS[name] = dataclasses.replace(_SPECS[name], **{self._attr: None})

    def __repr__(self) -> str:
        return repr(dict(self))


ESTIMATOR_REGISTRY: Mapping[str, Estimator] = _FunctionView("fn")
BASELINE_REGISTRY: Mapping[str, Estimator] = _FunctionView("baseline")
