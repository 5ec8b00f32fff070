"""Pluggable V0.5 priors: oracle + known offset (V = 2p - 1 scale), constants, the registry."""
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparserl.values.priors import ConstantPrior, OraclePrior, make_prior, register_prior, stable_sign


def test_offset_is_on_the_v_scale_and_signs():
    vals = {"a": 0.5, "b": 0.2}
    assert OraclePrior(vals, 0.3, sign="+")(["a", "b"]).tolist() == pytest.approx([0.65, 0.35])
    assert OraclePrior(vals, 0.3, sign="-")(["a", "b"]).tolist() == pytest.approx([0.35, 0.05])
    # inward: towards p = 0.5 (V = 0); at V = 0 it goes up
    assert OraclePrior({"x": 0.9, "y": 0.1, "z": 0.5}, 0.4, sign="inward")(["x", "y", "z"]).tolist() == \
        pytest.approx([0.7, 0.3, 0.7])


def test_offset_zero_returns_the_oracle_and_series_input_works():
    s = pd.Series({"a": 0.1, "b": 0.95})
    assert OraclePrior(s)(["b", "a"]).tolist() == [0.95, 0.1]


def test_clipping_and_realized_offset():
    pr = OraclePrior({"hi": 0.9, "mid": 0.5}, 0.3, sign="+")
    assert pr(["hi"])[0] == 1.0  # V = 0.8 + 0.3 clipped to 1
    assert pr.realized_offset(["hi", "mid"]).tolist() == pytest.approx([0.2, 0.3])


def test_random_signs_are_fixed_per_prompt_and_balanced():
    ids = [f"p{i}" for i in range(2000)]
    vals = dict.fromkeys(ids, 0.5)
    a = OraclePrior(vals, 0.2, seed=3)
    b = OraclePrior(vals, 0.2, seed=3)
    assert np.array_equal(a(ids), b(ids)) and np.array_equal(a(ids), a(ids))
    assert np.array_equal(a(ids[:5]), a(ids)[:5])  # a prompt's value does not depend on the call
    s = a.signs(ids)
    assert set(np.unique(s)) == {-1.0, 1.0} and abs(s.mean()) < 0.1
    assert not np.array_equal(s, OraclePrior(vals, 0.2, seed=4).signs(ids))
    assert stable_sign(3, "p0") == s[0]


def test_constant_and_registry():
    assert ConstantPrior(0.25)(["a", "b", "c"]).tolist() == [0.25] * 3
    assert make_prior("constant", p=0.5)(["a"]).tolist() == [0.5]
    assert make_prior("oracle", values={"a": 0.2}, offset=0.2, sign="+")(["a"]).tolist() == pytest.approx([0.3])
    with pytest.raises(ValueError, match="unknown prior kind"):
        make_prior("v9")
    register_prior("test_const", ConstantPrior)
    assert make_prior("test_const", p=0.1)(["a"]).tolist() == [0.1]
    with pytest.raises(ValueError, match="already registered"):
        register_prior("constant", OraclePrior)


def test_bad_inputs():
    with pytest.raises(KeyError, match="no value for prompt id 'zz'"):
        OraclePrior({"a": 0.5})(["zz"])
    with pytest.raises(ValueError, match="sign"):
        OraclePrior({"a": 0.5}, sign="up")
    with pytest.raises(ValueError, match="offset"):
        OraclePrior({"a": 0.5}, offset=-0.1)
    with pytest.raises(ValueError, match="probabilities"):
        OraclePrior({"a": 1.5})
    with pytest.raises(ValueError):
        ConstantPrior(-0.1)


@settings(max_examples=60, deadline=None)
@given(p=st.lists(st.floats(0, 1), min_size=1, max_size=20), delta=st.floats(0, 1.5),
       sign=st.sampled_from(["random", "+", "-", "inward"]), seed=st.integers(0, 5))
def test_offset_properties(p, delta, sign, seed):
    ids = list(range(len(p)))
    pr = OraclePrior(dict(zip(ids, p)), delta, sign=sign, seed=seed)
    out = pr(ids)
    assert ((out >= 0) & (out <= 1)).all()
    real = pr.realized_offset(ids)
    assert (np.abs(real) <= delta + 1e-12).all()
    v = 2 * np.asarray(p) - 1
    unclipped = np.abs(v + pr.signs(ids) * delta) <= 1
    assert np.allclose(np.abs(real[unclipped]), delta)
    if sign == "inward" and delta <= 1:
        assert np.allclose(np.abs(real), delta)


def test_oracle_prior_from_the_reference_cache_smooths_certain_rates():
    """0/64 reference successes gives p = 0.5/65 with the Jeffreys pseudo-count, so V0.5's
    sigma = sqrt(1 - mu^2) stays away from 0 and a surprising reward gets a bounded advantage."""
    from sparserl.estimators import EstimatorContext, get_estimator
    from sparserl.values.priors import prior_for_method, reference_values
    ref = pd.DataFrame({"prompt_id": ["a", "b", "c"], "successes": [0, 64, 16], "n": [64, 64, 64],
                        "phat": [0.0, 1.0, 0.25]})
    assert reference_values(ref) == {"a": 0.0, "b": 1.0, "c": 0.25}
    with pytest.raises(ValueError, match="pseudo_count"):
        reference_values(ref, -1.0)
    smooth = prior_for_method({"kind": "oracle", "pseudo_count": 0.5}, ref, seed=0)(["a", "b", "c"])
    assert smooth.tolist() == pytest.approx([0.5 / 65, 64.5 / 65, 16.5 / 65])
    # prompt a: prior 0, rewards 1,0,0,0 (vbar = -0.5 on the +-1 scale: Delta2 truncates to 0, w = 0)
    r, ids = np.array([1.0, 0, 0, 0]), np.array(["a"] * 4)
    for pseudo, bound in ((0.0, 1e3), (0.5, 12.0)):
        p = prior_for_method({"kind": "oracle", "pseudo_count": pseudo}, ref, seed=0)(["a"])
        adv = get_estimator("v05_fusion")(r, ids, ctx=EstimatorContext(prior={"a": p[0]}))
        assert (np.abs(adv).max() > bound) == (pseudo == 0.0)
    with pytest.raises(ValueError, match="reference cache"):
        prior_for_method({"kind": "oracle"}, None, seed=0)
