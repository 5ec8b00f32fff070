"""Advantage estimators and baselines: pure numpy, arrays in and out.

Registry in the style of verl's core_algos.py. Every registered rollout-level estimator has the
call signature

    fn(rewards, prompt_ids, *, ctx: EstimatorContext | None = None, info: dict | None = None, **kw)
        -> np.ndarray  # advantages, shape (M,)

with `rewards` (M,) as stored ({0,1}) and `prompt_ids` (M,) of any hashable values; rollouts are
grouped by prompt id (group sizes may differ and may be 1). The matching baseline (b per rollout,
on the {0,1} reward scale) is `get_baseline(name)` with the same signature. `info`, when a dict,
receives diagnostics (GPG scale, BASIS beta and active-set size, V0.5 weights).

    >>> from sparserl.estimators import get_estimator
    >>> get_estimator("rloo")([1, 0, 0, 1], ["a", "a", "a", "b"]).tolist()  # "b" alone: b = 0
    [1.0, -0.5, -0.5, 1.0]
"""
from __future__ import annotations

from typing import Callable

from . import batchwise, group, shrinkage
from .batchwise import (PrecedingBatchCalibrator, basis_advantage, basis_baseline, basis_calibrate,
                        basis_refine, basis_value, default_beta_grid)
from .budget import allocate_budget, budget_utility
from .gae import gae, terminal_rewards
from .group import (EstimatorContext, Groups, dr_grpo_advantage, gpg_advantage, gpg_valid_scale,
                    group_by, grpo_advantage, grpo_baseline, reinforce_pp_advantage,
                    reinforce_pp_baseline, rloo_advantage, rloo_baseline, vanilla_advantage,
                    vanilla_baseline)
from .osla import (OslaRound, osla_k_max, osla_risk, osla_round, osla_should_continue, osla_target,
                   pad_to_multiple)
from .shrinkage import shrinkage_fusion, v05_advantage, v05_baseline
from .tether import (evpo_baseline, evpo_use_critic, explained_variance, tether_baseline, tether_rho,
                     tether_rho_bucketed, tether_rho_update, token_buckets)

Estimator = Callable[..., "np.ndarray"]  # noqa: F821 (signature documented above)

ESTIMATOR_REGISTRY: dict[str, Estimator] = {}
BASELINE_REGISTRY: dict[str, Estimator] = {}


def register_estimator(name: str, baseline: Estimator | None = None):
    """Decorator registering an advantage estimator (and optionally its baseline) under `name`."""

    def decorator(fn: Estimator) -> Estimator:
        if ESTIMATOR_REGISTRY.get(name, fn) is not fn:
            raise ValueError(f"estimator {name!r} is already registered to {ESTIMATOR_REGISTRY[name]}")
        ESTIMATOR_REGISTRY[name] = fn
        if baseline is not None:
            BASELINE_REGISTRY[name] = baseline
        return fn

    return decorator


def get_estimator(name: str) -> Estimator:
    """The advantage function registered under `name`."""
    try:
        return ESTIMATOR_REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown estimator {name!r}; known: {list_estimators()}") from None


def get_baseline(name: str) -> Estimator:
    """The baseline function (b per rollout, {0,1} reward scale) registered under `name`."""
    try:
        return BASELINE_REGISTRY[name]
    except KeyError:
        raise ValueError(f"no baseline registered for {name!r}; known: {sorted(BASELINE_REGISTRY)}") from None


def list_estimators() -> list[str]:
    return sorted(ESTIMATOR_REGISTRY)


_BUILTIN = {
    "grpo": (group.grpo_advantage, group.grpo_baseline),
    "dr_grpo": (group.dr_grpo_advantage, group.grpo_baseline),
    "rloo": (group.rloo_advantage, group.rloo_baseline),
    "vanilla": (group.vanilla_advantage, group.vanilla_baseline),
    "reinforce_pp": (group.reinforce_pp_advantage, group.reinforce_pp_baseline),
    "gpg": (group.gpg_advantage, group.grpo_baseline),
    "v05_fusion": (shrinkage.v05_advantage, shrinkage.v05_baseline),
    "v05_prior_only": (shrinkage.v05_prior_only_advantage, shrinkage.v05_prior_only_baseline),
    "v05_empirical_only": (shrinkage.v05_empirical_only_advantage, shrinkage.v05_empirical_only_baseline),
    "basis_unb": (batchwise.basis_unb_advantage, batchwise.basis_unb_baseline),
    "basis_vop": (batchwise.basis_vop_advantage, batchwise.basis_vop_baseline),
    "basis_rvg": (batchwise.basis_rvg_advantage, batchwise.basis_rvg_baseline),
}
for _name, (_adv, _base) in _BUILTIN.items():
    register_estimator(_name, baseline=_base)(_adv)
del _name, _adv, _base

__all__ = [
    "ESTIMATOR_REGISTRY", "BASELINE_REGISTRY", "EstimatorContext", "Groups", "OslaRound",
    "PrecedingBatchCalibrator", "allocate_budget", "basis_advantage", "basis_baseline",
    "basis_calibrate", "basis_refine", "basis_value", "budget_utility", "default_beta_grid",
    "dr_grpo_advantage", "evpo_baseline", "evpo_use_critic", "explained_variance", "gae",
    "get_baseline", "get_estimator", "gpg_advantage", "gpg_valid_scale", "group_by",
    "grpo_advantage", "grpo_baseline", "list_estimators", "osla_k_max", "osla_risk", "osla_round",
    "osla_should_continue", "osla_target", "pad_to_multiple", "register_estimator",
    "reinforce_pp_advantage", "reinforce_pp_baseline", "rloo_advantage", "rloo_baseline",
    "shrinkage_fusion", "terminal_rewards", "tether_baseline", "tether_rho", "tether_rho_bucketed",
    "tether_rho_update", "token_buckets", "v05_advantage", "v05_baseline", "vanilla_advantage",
    "vanilla_baseline",
]
