"""Median-baseline GRPO: A = (r - median of the group's rewards) / (std of the group + eps).

The worked example of docs/extending.md: the registry discovers this module, so adding it edits
no other file. With {0,1} rewards the median is the group's majority reward (0.5 on a tie), so
only the minority of a group gets a non-zero advantage.
"""
from __future__ import annotations

import numpy as np

from .group import as_float_array, group_by, group_std
from .registry import register_estimator

PAPER = "baselines"  # shown by `sparserl methods`


def median_baseline(rewards, prompt_ids, *, ctx=None, info=None, **_) -> np.ndarray:
    """b = the median reward of the rollout's group (rollouts sharing its prompt id)."""
    r = as_float_array(rewards, "rewards")
    g = group_by(prompt_ids, len(r))
    s = r[np.lexsort((r, g.inverse))]  # sorted by group, then by reward
    start = np.cumsum(g.counts) - g.counts  # each group's first position in s
    median = (s[start + (g.counts - 1) // 2] + s[start + g.counts // 2]) / 2
    return median[g.inverse]


@register_estimator("grpo_median", baseline=median_baseline)
def median_advantage(rewards, prompt_ids, *, ctx=None, info=None, eps=None, **_) -> np.ndarray:
    """GRPO with the group median as its baseline; a group of one has A = 0."""
    r = as_float_array(rewards, "rewards")
    eps = eps if eps is not None else (ctx.eps if ctx is not None else 1e-6)
    b = median_baseline(r, prompt_ids)
    return (r - b) / (group_std(r, group_by(prompt_ids, len(r))) + eps)
