"""The unbiased pass@k of Chen et al. 2021 (arXiv:2107.03374, Sec. 2.1) and the pass@k curve
(sparserl.evaluation.pass_at_k)."""
from __future__ import annotations

from fractions import Fraction
from math import comb

import numpy as np
import pandas as pd
import pytest

from sparserl.evaluation.pass_at_k import curve_ks, pass_at_k, pass_at_k_curve


def test_pass_at_k_is_one_minus_the_ratio_of_binomials_exactly():
    n = np.array([64] * 65 + [16] * 17 + [5] * 6)
    c = np.concatenate([np.arange(65), np.arange(17), np.arange(6)])
    for k in (1, 2, 4, 5):
        want = [float(1 - Fraction(comb(int(a) - int(b), k), comb(int(a), k))) for a, b in zip(n, c)]
        assert pass_at_k(n, c, k) == pytest.approx(want, rel=1e-12, abs=1e-12)
    # n = k: the share of problems with a correct sample; k = 1: the mean of c / n
    assert pass_at_k(n[65:82], c[65:82], 16).tolist() == [0.0] + [1.0] * 16
    assert pass_at_k(n, c, 1) == pytest.approx(c / n)


def test_pass_at_k_is_stable_where_the_binomials_overflow():
    """C(2000, 1000) overflows a float; the estimate stays in [0, 1] and increases with k."""
    n, c = np.full(4, 2000), np.array([0, 1, 10, 2000])
    ks = [1, 10, 100, 1000]
    vals = np.array([pass_at_k(n, c, k) for k in ks])
    assert np.isfinite(vals).all() and (vals >= 0).all() and (vals <= 1).all()
    assert (np.diff(vals, axis=0) >= 0).all()
    assert vals[:, 0].tolist() == [0.0] * 4 and vals[:, 3].tolist() == [1.0] * 4
    assert vals[2, 1] == pytest.approx(100 / 2000)  # one correct: k / n
    with pytest.raises(ValueError, match="k <= n"):
        pass_at_k([8], [1], 16)


def test_pass_at_k_is_unbiased_for_the_chance_k_fresh_samples_hold_a_correct_one():
    rng = np.random.default_rng(0)
    q = 0.07  # per-sample success: pass@16 = 1 - 0.93^16
    c = rng.binomial(64, q, size=20000)
    assert pass_at_k(np.full_like(c, 64), c, 16).mean() == pytest.approx(1 - (1 - q) ** 16, abs=0.005)


def test_the_curve_runs_to_the_samples_per_benchmark_and_overall():
    assert curve_ks(64) == [1, 2, 4, 8, 16, 32, 64] and curve_ks(12) == [1, 2, 4, 8, 12] and curve_ks(1) == [1]
    pp = pd.DataFrame({"benchmark": ["a"] * 3 + ["b"], "n": 4, "c": [0, 2, 4, 1]})
    curve = pass_at_k_curve(pp).set_index(["benchmark", "k"])
    assert curve.loc[("a", 1), "pass_at_k"] == pytest.approx(0.5)
    assert curve.loc[("a", 2), "pass_at_k"] == pytest.approx((0 + (1 - 1 / 6) + 1) / 3)
    # overall: the mean of the benchmarks' means (b weighs as much as a's three problems)
    assert curve.loc[("overall", 1), "pass_at_k"] == pytest.approx((0.5 + 0.25) / 2)
    assert curve.loc[("overall", 4), "problems"] == 4 and (curve["samples"] == 4).all()
    with pytest.raises(ValueError, match="columns"):
        pass_at_k_curve(pp.drop(columns="c"))
