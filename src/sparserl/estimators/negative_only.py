"""Negative-only REINFORCE: A = r - 1 (baseline b = 1), a diagnostic arm.

The mirror of vanilla REINFORCE (A = r, the positive-only arm, `vanilla_g1`): with {0,1} rewards
a correct rollout gets A = 0 and a wrong one A = -1, so every update only pushes probability away
from wrong answers and never toward the right one. Beside the positive-only arm it shows whether a
method's gain comes from sharpening onto answers already sampled (positive-only) or from
unlearning wrong ones (negative-only). Registered here by existing (docs/extending.md).
"""
from __future__ import annotations

import numpy as np

from .group import as_float_array, group_by
from .registry import register_estimator

PAPER = "baselines"  # shown by `sparserl methods`


def negative_only_baseline(rewards, prompt_ids, *, ctx=None, info=None, **_) -> np.ndarray:
    """b = 1 for every rollout: the largest reward of a {0,1} verifier."""
    r = as_float_array(rewards, "rewards")
    group_by(prompt_ids, len(r))  # one prompt id per reward, checked as every estimator does
    return np.ones_like(r)


@register_estimator("negative_only", baseline=negative_only_baseline)
def negative_only_advantage(rewards, prompt_ids, *, ctx=None, info=None, **_) -> np.ndarray:
    """A = r - 1: 0 for a correct rollout, -1 for a wrong one (per rollout, prompt ids unused)."""
    return as_float_array(rewards, "rewards") - negative_only_baseline(rewards, prompt_ids)
