"""Advantage estimators and baselines: pure numpy, arrays in and out.

Registry in the style of verl's core_algos.py (`registry.py`): every estimator is registered at
its definition, in any module of this package (discovered; docs/extending.md) or of a package with
a `sparserl.estimators` entry point, with

    @register_estimator(name, *, baseline=None, needs=(), level="sequence")

and described by an `EstimatorSpec` (name, fn, baseline, needs, level; `get_spec(name)`).
`needs` is the side data the estimator reads, from `SIDE_DATA`:

    prior        V0.5 prior p per prompt (ctx.prior)
    reference    BASIS reference pass rates (ctx.phat / ctx.vhat)
    beta         BASIS fixed beta (ctx.beta; optional, calibrated when absent)
    calibration  state carried from the previous step (BASIS ctx.prev_phat / prev_rewards,
                 Tether ctx.tether_rho <- info["tether_rho"])
    support      (prompt, reward) context pairs for a live value model
    values       per-token critic values V(h_t)

Two levels. Sequence-level estimators (`list_estimators()`, default level "sequence"; level=None
lists both) have the signature

    fn(rewards, prompt_ids, *, ctx: EstimatorContext | None = None, info: dict | None = None, **kw)
        -> np.ndarray  # advantages, shape (M,)

with `rewards` (M,) as stored ({0,1}) and `prompt_ids` (M,) of any hashable values; rollouts are
grouped by prompt id (group sizes may differ and may be 1). The matching baseline (b per rollout,
on the {0,1} reward scale) is `get_baseline(name)` with the same signature. `info`, when a dict,
receives diagnostics (GPG scale, BASIS beta and active-set size, V0.5 weights).
Token-level estimators (`list_estimators("token")`: gae, tether, tether_bucketed, evpo) have

    fn(rewards, prompt_ids, *, values, mask, ctx=None, info=None, **kw) -> np.ndarray  # (N, T)

with sequence rewards (N,), critic values (N, T) and a right-padded bool mask (N, T); padding
gets advantage 0. `broadcast_sequence_advantages(adv, mask)` turns a sequence-level result into
token advantages, so an engine can treat every estimator as token-level.

    >>> import numpy as np
    >>> from sparserl.estimators import broadcast_sequence_advantages, get_estimator, get_spec
    >>> get_estimator("rloo")([1, 0, 0, 1], ["a", "a", "a", "b"]).tolist()  # "b" alone: b = 0
    [1.0, -0.5, -0.5, 1.0]
    >>> sorted(get_spec("basis_unb").needs), get_spec("tether").level
    (['beta', 'calibration', 'reference'], 'token')
    >>> mask = np.array([[True, True, False], [True, False, False]])
    >>> get_estimator("gae")([1, 0], ["a", "a"], values=[[0.5, 0.75, 0.0], [0.25, 0.0, 0.0]], mask=mask).tolist()
    [[0.5, 0.25, 0.0], [-0.25, 0.0, 0.0]]
    >>> broadcast_sequence_advantages([1.0, -0.5], mask).tolist()
    [[1.0, 1.0, 0.0], [-0.5, 0.0, 0.0]]
"""
from __future__ import annotations

# re-exports only: the registry imports every module of this package at its first lookup
# (registry.discover), so a new estimator module is never added here
from . import batchwise, group, shrinkage  # noqa: F401
from .batchwise import (PrecedingBatchCalibrator, basis_advantage, basis_baseline, basis_calibrate,
                        basis_refine, basis_value, default_beta_grid)
from .budget import allocate_budget, budget_utility
from .gae import gae, gae_advantage, terminal_rewards
from .group import (EstimatorContext, Groups, broadcast_sequence_advantages, dr_grpo_advantage,
                    gpg_advantage, gpg_valid_scale, group_by, grpo_advantage, grpo_baseline,
                    reinforce_pp_advantage, reinforce_pp_baseline, rloo_advantage, rloo_baseline,
                    vanilla_advantage, vanilla_baseline)
from .osla import (OslaRound, osla_k_max, osla_risk, osla_round, osla_should_continue, osla_target,
                   pad_to_multiple)
from .registry import (BASELINE_REGISTRY, ESTIMATOR_REGISTRY, LEVELS, SIDE_DATA, Estimator, EstimatorSpec,
                       get_baseline, get_estimator, get_spec, list_estimators, register_estimator)
from .shrinkage import shrinkage_fusion, v05_advantage, v05_baseline
from .tether import (DEFAULT_BUCKET_EDGES, evpo_advantage, evpo_baseline, evpo_use_critic,
                     explained_variance, tether_advantage, tether_baseline, tether_bucketed_advantage,
                     tether_rho, tether_rho_bucketed, tether_rho_update, token_buckets)

__all__ = [
    "ESTIMATOR_REGISTRY", "BASELINE_REGISTRY", "DEFAULT_BUCKET_EDGES", "LEVELS", "SIDE_DATA",
    "Estimator", "EstimatorContext", "EstimatorSpec", "Groups", "OslaRound",
    "PrecedingBatchCalibrator", "allocate_budget", "basis_advantage", "basis_baseline",
    "basis_calibrate", "basis_refine", "basis_value", "broadcast_sequence_advantages",
    "budget_utility", "default_beta_grid", "dr_grpo_advantage", "evpo_advantage", "evpo_baseline",
    "evpo_use_critic", "explained_variance", "gae", "gae_advantage", "get_baseline",
    "get_estimator", "get_spec", "gpg_advantage", "gpg_valid_scale", "group_by", "grpo_advantage",
    "grpo_baseline", "list_estimators", "osla_k_max", "osla_risk", "osla_round",
    "osla_should_continue", "osla_target", "pad_to_multiple", "register_estimator",
    "reinforce_pp_advantage", "reinforce_pp_baseline", "rloo_advantage", "rloo_baseline",
    "shrinkage_fusion", "terminal_rewards", "tether_advantage", "tether_baseline",
    "tether_bucketed_advantage", "tether_rho", "tether_rho_bucketed", "tether_rho_update",
    "token_buckets", "v05_advantage", "v05_baseline", "vanilla_advantage", "vanilla_baseline",
]
