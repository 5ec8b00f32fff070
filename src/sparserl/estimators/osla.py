"""V0.5 Sequential OSLA allocation: per-prompt stopping rule for adaptive rollout counts.

Paper: V_0.5: Generalist Value Model as a Prior for Sparse RL Rollouts (arXiv 2603.10848),
Theorems 3.5-3.6. Empirical risk (Eq. 11) R(k) = MSEhat(k) + c k with
MSEhat(k) = Delta2 / (k Delta2 + 1); stop at K* = inf{k >= k_min : k >= 1/sqrt(c) - 1/Delta2}.
Pure functions; the rollout loop lives elsewhere. Paper setting (Section 4.1.3): c = 0.0039
(k_max = 16), k_min = k_init = 4, +2 rollouts per round, global stop when fewer than 25% of the
batch's prompts still want more, dispatch padded to a multiple of 32.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .group import as_float_array
from .shrinkage import shrinkage_fusion

PAPER = "v05"  # shown by `sparserl methods`

C_PAPER = 0.0039
K_STEP_PAPER = 2  # rollouts added per round
GLOBAL_STOP_PAPER = 0.25  # the batch stops once fewer than this share of prompts want more


def _check_c(c: float) -> float:
    if not (np.isfinite(c) and c > 0):
        raise ValueError(f"c must be a finite positive cost, got {c!r}")
    return float(c)


def osla_k_max(c: float = C_PAPER) -> int:
    """k_max = floor(1/sqrt(c)): beyond it the stopping rule holds for any Delta2 (16 for c = 0.0039)."""
    return int(np.floor(1.0 / np.sqrt(_check_c(c))))


def osla_risk(delta2, k, c: float = C_PAPER):
    """Empirical risk R(k) = Delta2 / (k Delta2 + 1) + c k."""
    d = as_float_array(delta2, "delta2", ndim=None)
    k = as_float_array(k, "k", ndim=None)
    return d / (k * d + 1.0) + _check_c(c) * k


def osla_target(delta2, c: float = C_PAPER):
    """k_target = 1/sqrt(c) - 1/Delta2 (Theorem 3.6); -inf where Delta2 == 0 (stop at once)."""
    d = as_float_array(delta2, "delta2", ndim=None)
    if (d < 0).any():
        raise ValueError("delta2 must be >= 0")
    inv = np.divide(1.0, d, out=np.full(d.shape, np.inf), where=d > 0)
    return 1.0 / np.sqrt(_check_c(c)) - inv


def osla_should_continue(delta2, k, c: float = C_PAPER, k_min: int = 4, k_max: int | None = None):
    """True where a prompt wants more rollouts: k < k_max and (k < k_min or k < k_target)."""
    k = as_float_array(k, "k", ndim=None)
    k_max = osla_k_max(c) if k_max is None else k_max
    return (k < k_max) & ((k < k_min) | (k < osla_target(delta2, c)))


@dataclass(frozen=True)
class OslaRound:
    """One OSLA round's decision for a batch (arrays are per prompt)."""

    delta2: np.ndarray  # Eq. 7 bias estimate at the current k
    k_target: np.ndarray  # 1/sqrt(c) - 1/Delta2 (-inf for Delta2 = 0)
    want_more: np.ndarray  # bool: k < k_max and (k < k_min or k < k_target)
    n_new: np.ndarray  # rollouts to request this round: min(step, k_max - k) where want_more
    frac_wanting: float  # share of the batch's prompts that want more
    global_stop: bool  # frac_wanting < stop_frac: the whole batch stops


def osla_round(k, vbar, prior, *, c: float = C_PAPER, k_min: int = 4, k_max: int | None = None,
               step: int = K_STEP_PAPER, stop_frac: float = GLOBAL_STOP_PAPER) -> OslaRound:
    """Decide one OSLA round from per-prompt counts k, means vbar and priors V (both in [-1,1]).

    An empty batch stops. When global_stop is True the caller should request nothing, whatever
    want_more says.
    """
    k = as_float_array(k, "k")
    k_max = osla_k_max(c) if k_max is None else int(k_max)
    _mu, _w, delta2 = shrinkage_fusion(vbar, k, prior)
    want = osla_should_continue(delta2, k, c, k_min, k_max)
    n_new = np.where(want, np.minimum(step, k_max - k), 0).astype(np.int64)
    frac = float(want.mean()) if len(k) else 0.0
    return OslaRound(delta2=delta2, k_target=osla_target(delta2, c), want_more=want, n_new=n_new,
                     frac_wanting=frac, global_stop=frac < stop_frac)


def pad_to_multiple(n: int, multiple: int = 32) -> int:
    """Dispatch size padded up to a multiple (the paper pads cluster dispatch to 32)."""
    return -(-int(n) // multiple) * multiple
