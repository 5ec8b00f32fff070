"""The side data an estimator needs, built by one function for both engines, and the advantage
call itself.

Each estimator declares its needs where it is registered (`sparserl.estimators.get_spec(name).needs`,
vocabulary `SIDE_DATA`): prior, reference, beta, calibration, support, values. An engine collects
what it has into `SideData` (the local trainer from the reference cache and its prior; the
OpenRLHF experience maker from the dataset labels or a live prior) and calls `advantages`, which

  1. builds the `EstimatorContext` from the needs (`build_context`), failing with a message that
     names the method and the missing piece;
  2. calls the registry estimator with the method's options;
  3. multiplies GPG's B/B_valid into the advantages when the loss is GPG but the estimator is not
     (the `gpg` estimator folds it in itself);
  4. carries calibration state to the next step (`CalibrationState`: BASIS's preceding batch).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from sparserl.estimators import EstimatorContext, get_estimator, gpg_valid_scale
from sparserl.methods.spec import MethodSpec


@dataclass
class SideData:
    """What an engine knows about this step's prompts. Per-prompt fields take a mapping
    {prompt_id: value} or one value per rollout."""
    prior: Mapping | np.ndarray | None = None  # V0.5 prior p in [0, 1]
    phat: Mapping | np.ndarray | None = None  # BASIS reference pass rate
    vhat: Mapping | np.ndarray | None = None  # BASIS initial values (override phat + beta)
    values: np.ndarray | None = None  # per-token critic values (N, T), token-level estimators
    mask: np.ndarray | None = None  # response mask (N, T) for `values`


@dataclass
class CalibrationState:
    """State an estimator carries from one step to the next (saved with the run's checkpoints)."""
    prev_basis: tuple | None = None  # BASIS calibrate_on=previous: (phat per rollout, rewards)
    extra: dict = field(default_factory=dict)  # e.g. Tether's EMA rho

    def to_json(self) -> dict:
        """A JSON-able copy that `from_json` restores exactly (arrays keep their dtype)."""
        return {"prev_basis": None if self.prev_basis is None else [_to_json(a) for a in self.prev_basis],
                "extra": {k: _to_json(v) for k, v in self.extra.items()}}

    @classmethod
    def from_json(cls, d: Mapping) -> "CalibrationState":
        prev = d.get("prev_basis")
        return cls(prev_basis=None if prev is None else tuple(_from_json(a) for a in prev),
                   extra={k: _from_json(v) for k, v in (d.get("extra") or {}).items()})


def _to_json(v):
    if isinstance(v, np.ndarray):
        return {"array": v.tolist(), "dtype": str(v.dtype)}
    return v.item() if isinstance(v, np.generic) else v


def _from_json(v):
    return np.asarray(v["array"], dtype=v["dtype"]) if isinstance(v, dict) and "array" in v else v


class MissingSideData(ValueError):
    pass


def _need(value, what: str, method: MethodSpec):
    if value is None:
        raise MissingSideData(f"method {method.name}: estimator {method.estimator!r} needs {what}, "
                              "which the engine did not provide")
    return value


def build_context(method: MethodSpec, side: SideData, state: CalibrationState | None = None) -> EstimatorContext:
    """The estimator's context from the method spec, the step's side data and the carried state,
    reading exactly the side data the estimator declared."""
    needs = method.needs
    ctx = EstimatorContext()
    if "prior" in needs:
        ctx.prior = _need(side.prior, "a prior p per prompt", method)
    if "reference" in needs:
        if side.vhat is not None:
            ctx.vhat = side.vhat
        else:
            ctx.phat = _need(side.phat, "reference pass rates (phat) per prompt", method)
    if "beta" in needs:
        ctx.beta = method.basis.fixed_beta()
    if "calibration" in needs:
        ctx.calibrate_on = method.basis.calibrate_on
        if ctx.calibrate_on == "previous" and state is not None and state.prev_basis is not None:
            ctx.prev_phat, ctx.prev_rewards = state.prev_basis
        if state is not None:
            for k, v in state.extra.items():
                setattr(ctx, k, v)
    return ctx


def advantages(method: MethodSpec, rewards: np.ndarray, prompt_ids, side: SideData,
               state: CalibrationState | None = None, info: dict | None = None,
               response_length: int | None = None) -> np.ndarray:
    """Advantages of one step (float64, one per rollout; (N, T) for token-level estimators).
    `response_length`: the run's max new tokens (GAE's lambda "auto", Tether's buckets)."""
    ctx = build_context(method, side, state)
    info = {} if info is None else info
    kw: dict[str, Any] = dict(method.estimator_options(response_length))
    if "values" in method.needs:
        kw.update(values=_need(side.values, "per-token values", method),
                  mask=_need(side.mask, "a response mask", method))
    adv = np.asarray(get_estimator(method.estimator)(rewards, prompt_ids, ctx=ctx, info=info, **kw),
                     dtype=np.float64)
    if method.loss.type == "gpg" and method.estimator != "gpg":
        adv = adv * gpg_valid_scale(rewards, prompt_ids)
    if state is not None and "calibration" in method.needs:
        if "reference" in method.needs and ctx.phat is not None:
            phat = ctx.phat
            if isinstance(phat, Mapping):
                phat = np.array([phat[p] for p in np.asarray(prompt_ids).tolist()])
            state.prev_basis = (np.asarray(phat, dtype=np.float64).copy(), np.asarray(rewards).copy())
        for k in ("tether_rho",):
            if k in info:
                state.extra[k] = info[k]
    return adv


def flatten_info(est_info: dict, prefix: str = "est_") -> dict:
    """Estimator diagnostics as scalar metrics: scalars as they are, arrays as mean and p90."""
    out: dict = {}
    for k, v in est_info.items():
        if isinstance(v, str):
            continue
        if np.isscalar(v):
            out[f"{prefix}{k}"] = float(v)
            continue
        a = np.asarray(v)
        if a.dtype.kind not in "fiub" or not a.size:
            continue
        a = a.astype(float)
        out[f"{prefix}{k}_mean"] = float(np.nanmean(a))
        out[f"{prefix}{k}_p90"] = float(np.nanpercentile(a, 90))
    return out
