"""V0 budget utility and rollout allocation (V0 paper, Eq. 10 and its appendix derivation).

U(B, p) = B (1 - p) (1 - (1 - p)^(B - 1))   [reconstructed from the appendix derivation]
is the expected number of failures in a group of B rollouts with success probability p that is
not all-equal (the all-fail group carries no gradient). Allocation maximises sum_i U(B_i, p_i)
subject to sum_i B_i <= total.
"""
from __future__ import annotations

import heapq

import numpy as np

from .group import as_float_array, check_in_range

PAPER = "v0"  # shown by `sparserl methods`


def budget_utility(B, p):
    """U(B, p) = B (1 - p) (1 - (1 - p)^(B - 1)) [reconstructed]; 0 for B <= 1. Broadcasts.

    Expected failures B (1-p) minus those in the all-fail group B (1-p)^B.
    """
    B = as_float_array(B, "B", ndim=None)
    p = as_float_array(p, "p", ndim=None)
    check_in_range(p, "p", 0.0, 1.0)
    if (B < 0).any():
        raise ValueError("B must be >= 0")
    q = 1.0 - p
    Bs = np.maximum(B, 1.0)  # U(0) = U(1) = 0; avoids 0 ** -1
    return np.where(B >= 1, Bs * q * (1.0 - q ** (Bs - 1.0)), 0.0)


def _table(p: np.ndarray, b_max: int) -> np.ndarray:
    """U(b, p_i) for b = 0..b_max, shape (n, b_max + 1)."""
    return budget_utility(np.arange(b_max + 1)[None, :], p[:, None])


def allocate_budget(p, total: int, *, b_min: int = 0, b_max: int = 64, method: str = "greedy") -> np.ndarray:
    """Integer rollouts B_i per prompt maximising sum_i U(B_i, p_i), sum B_i <= total, b_min <= B_i <= b_max.

    method="greedy": start at b_min, repeatedly give the prompt with the best *average* marginal
    gain max_j (U(j) - U(b)) / (j - b) its best jump j (this lookahead is needed because U is not
    concave: U(0) = U(1) = 0); stops when no jump adds utility or fits the budget.
    method="dp": exact dynamic programme, O(n total b_max); for checks and small batches.
    """
    p = as_float_array(p, "p")
    check_in_range(p, "p", 0.0, 1.0)
    n, total = len(p), int(total)
    if not 0 <= b_min <= b_max:
        raise ValueError(f"need 0 <= b_min <= b_max, got {b_min}, {b_max}")
    if n * b_min > total:
        raise ValueError(f"total budget {total} is below n * b_min = {n * b_min}")
    U = _table(p, b_max)
    if method == "dp":
        return _dp(U, total, b_min, b_max)
    if method != "greedy":
        raise ValueError(f"method must be 'greedy' or 'dp', got {method!r}")

    alloc = np.full(n, b_min, dtype=np.int64)
    left = total - n * b_min

    def best_jump(i: int) -> tuple[float, int]:
        b = alloc[i]
        hi = min(b_max, b + left)
        if hi <= b:
            return 0.0, 0
        js = np.arange(b + 1, hi + 1)
        rate = (U[i, js] - U[i, b]) / (js - b)
        k = int(np.argmax(rate))
        return float(rate[k]), int(js[k] - b)

    heap = []
    for i in range(n):
        rate, jump = best_jump(i)
        if rate > 0:
            heap.append((-rate, i, jump))
    heapq.heapify(heap)
    while heap and left > 0:
        _neg, i, jump = heapq.heappop(heap)
        if jump > left:  # stale: the budget shrank since this entry was pushed
            rate, jump = best_jump(i)
            if rate > 0:
                heapq.heappush(heap, (-rate, i, jump))
            continue
        alloc[i] += jump
        left -= jump
        rate, jump = best_jump(i)
        if rate > 0:
            heapq.heappush(heap, (-rate, i, jump))
    return alloc


def _dp(U: np.ndarray, total: int, b_min: int, b_max: int) -> np.ndarray:
    n = U.shape[0]
    cap = min(total, n * b_max)
    best = np.full(cap + 1, -np.inf)
    best[0] = 0.0
    choice = np.zeros((n, cap + 1), dtype=np.int64)
    for i in range(n):
        new = np.full(cap + 1, -np.inf)
        for b in range(b_min, min(b_max, cap) + 1):
            cand = np.full(cap + 1, -np.inf)
            cand[b:] = best[: cap + 1 - b] + U[i, b]
            better = cand > new
            new[better] = cand[better]
            choice[i, better] = b
        best = new
    s = int(np.argmax(best))
    alloc = np.zeros(n, dtype=np.int64)
    for i in range(n - 1, -1, -1):
        alloc[i] = choice[i, s]
        s -= alloc[i]
    return alloc
