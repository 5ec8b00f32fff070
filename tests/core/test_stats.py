"""The shared interval statistics (sparserl.core.stats): t quantiles against table values
computed independently (40-digit incomplete-beta root finding), the t and Welch intervals against
hand computations, and that the claims table and the head-to-head use these same functions."""
import math

import numpy as np
import pytest

from sparserl.core import stats as S
from sparserl.studies import head_to_head
from sparserl.studies.claims import rule as claims

# t_{0.975, df}, solved to 40 digits on the regularised incomplete beta (mpmath)
T975 = {1: 12.706204736174705, 2: 4.302652729749464, 10: 2.228138851986275, 32 / 19: 5.176231628546520}


@pytest.mark.parametrize("df", list(T975))
def test_t_quantile_table(df):
    assert S.t_quantile(0.975, df) == pytest.approx(T975[df], rel=1e-12)
    assert S.t_quantile(0.025, df) == pytest.approx(-T975[df], rel=1e-12)


def test_t_quantile_closed_forms_and_limit():
    # df = 2: t_q = (2q - 1) sqrt(2 / (1 - (2q - 1)^2)); df = 1 (Cauchy): tan(pi (q - 1/2))
    for q in (0.6, 0.9, 0.975, 0.995):
        u = 2 * q - 1
        assert S.t_quantile(q, 2) == pytest.approx(u * math.sqrt(2 / (1 - u * u)), rel=1e-12)
        assert S.t_quantile(q, 1) == pytest.approx(math.tan(math.pi * (q - 0.5)), rel=1e-12)
    assert S.t_quantile(0.975, 1e9) == pytest.approx(S.normal_quantile(0.975), rel=1e-8)
    assert S.normal_quantile(0.975) == pytest.approx(1.959963984540054, rel=1e-14)


@pytest.mark.parametrize("q,df", [(0.0, 3), (1.0, 3), (0.975, 0), (0.975, -1), (0.975, float("nan"))])
def test_t_quantile_refuses_bad_input(q, df):
    with pytest.raises(ValueError, match="t_quantile"):
        S.t_quantile(q, df)


def test_t_interval():
    m, lo, hi = S.t_interval([0.40, 0.42, 0.44])
    assert m == pytest.approx(0.42) and hi - m == pytest.approx(T975[2] * 0.02 / math.sqrt(3), rel=1e-12)
    assert m - lo == pytest.approx(hi - m, rel=1e-12)
    with pytest.raises(ValueError, match="at least 2"):
        S.t_interval([0.4])


def test_welch_interval_at_fractional_df():
    # a: var 2, n 2 -> va = 1; b: var 1, n 3 -> vb = 1/3; se^2 = 4/3;
    # df = (4/3)^2 / (1^2 / 1 + (1/3)^2 / 2) = 32/19 = 1.684 (the floor, 1, would give t = 12.71)
    a, b = [0.0, 2.0], [-1.0, 0.0, 1.0]
    assert S.welch_df(1.0, 1 / 3, 2, 3) == pytest.approx(32 / 19, rel=1e-14)
    d, lo, hi = S.welch_interval(a, b)
    h = T975[32 / 19] * math.sqrt(4 / 3)
    assert d == pytest.approx(1.0) and (lo, hi) == pytest.approx((1.0 - h, 1.0 + h), rel=1e-12)
    # the order of the arms flips the sign only
    d2, lo2, hi2 = S.welch_interval(b, a)
    assert (d2, lo2, hi2) == pytest.approx((-d, -hi, -lo), rel=1e-12)


def test_welch_interval_equal_variances_is_pooled_t():
    # equal n and variances: df = 2n - 2 and se = the pooled one, the two-sample t-interval
    rng = np.random.default_rng(0)
    a = rng.normal(size=5)
    b = a[::-1] + 0.7  # same variance, shifted
    d, lo, hi = S.welch_interval(a, b)
    se = math.sqrt(2 * a.var(ddof=1) / 5)
    assert hi - d == pytest.approx(S.t_quantile(0.975, 8) * se, rel=1e-9)


def test_welch_interval_degenerate_and_bad_input():
    assert S.welch_interval([0.3, 0.3], [0.1, 0.1, 0.1]) == pytest.approx((0.2, 0.2, 0.2))
    with pytest.raises(ValueError, match="second sample"):
        S.welch_interval([0.1, 0.2], [0.3])


def test_claims_and_head_to_head_share_the_statistics():
    for mod in (claims, head_to_head):
        assert mod.welch_interval is S.welch_interval
        assert mod.t_interval is S.t_interval
        assert mod.LEVEL == S.LEVEL == 0.95
    # and head_to_head's pair table reads the Welch interval at the fractional df
    seed_acc = {"x": np.array([0.0, 2.0]), "y": np.array([-1.0, 0.0, 1.0])}
    pairs = head_to_head.pair_table({"x": 1.0, "y": 0.0}, {"x": np.zeros(4), "y": np.zeros(4)}, ["x", "y"],
                                    seed_acc=seed_acc)
    _, lo, hi = S.welch_interval(seed_acc["x"], seed_acc["y"])
    assert (pairs.loc[0, "welch_ci_lo"], pairs.loc[0, "welch_ci_hi"]) == (lo, hi)
    assert hi - 1.0 == pytest.approx(T975[32 / 19] * math.sqrt(4 / 3), rel=1e-12)
