"""Negative-only REINFORCE (src/sparserl/estimators/negative_only.py): A = r - 1, the mirror of
the positive-only arm (vanilla, A = r)."""
import numpy as np
import pytest

from sparserl.estimators import get_baseline, get_estimator, get_spec, list_estimators
from sparserl.methods.spec import load_method, run_owners


def test_values_by_hand():
    r = [1, 0, 0, 1, 1]
    ids = ["a", "a", "b", "c", "c"]
    np.testing.assert_array_equal(get_estimator("negative_only")(r, ids), [0, -1, -1, 0, 0])
    np.testing.assert_array_equal(get_baseline("negative_only")(r, ids), [1, 1, 1, 1, 1])
    # the positive-only arm's mirror: A_neg = A_pos - 1 on every rollout
    np.testing.assert_array_equal(get_estimator("negative_only")(r, ids), get_estimator("vanilla")(r, ids) - 1)
    assert get_estimator("negative_only")(np.zeros(0), []).shape == (0,)


def test_registered_at_definition_and_never_positive():
    spec = get_spec("negative_only")
    assert "negative_only" in list_estimators() and spec.needs == frozenset() and spec.level == "sequence"
    rng = np.random.default_rng(0)
    r = (rng.random(50) < 0.4).astype(float)
    ids = rng.integers(0, 7, 50)
    a = get_estimator("negative_only")(r, ids)
    assert (a <= 0).all() and ((a == 0) == (r == 1)).all()
    perm = rng.permutation(50)
    np.testing.assert_array_equal(get_estimator("negative_only")(r[perm], ids[perm]), a[perm])


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="rewards contains NaN"):
        get_estimator("negative_only")([1.0, np.nan], [0, 1])
    with pytest.raises(ValueError):
        get_estimator("negative_only")([1.0, 0.0], [0])  # one prompt id per reward


def test_method_files_positive_only_is_vanillas_run():
    neg = load_method("negative_only_g1")
    assert (neg.estimator, neg.group_size, neg.loss.type) == ("negative_only", 1, "ppo_clip")
    pos = load_method("positive_only_g1")
    assert {**pos.to_dict(), "name": None} == {**load_method("vanilla_g1").to_dict(), "name": None}
    assert run_owners(["vanilla_g1", "positive_only_g1", "negative_only_g1"]) == {
        "vanilla_g1": "vanilla_g1", "positive_only_g1": "vanilla_g1", "negative_only_g1": "negative_only_g1"}
