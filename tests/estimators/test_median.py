"""Median-baseline GRPO (src/sparserl/estimators/median.py), the example of docs/extending.md."""
import numpy as np

from sparserl.estimators import get_baseline, get_estimator, get_spec
from sparserl.methods.spec import load_method


def test_median_baseline_by_hand():
    r = [1, 0, 0, 1, 1, 0, 1]
    ids = ["a", "a", "a", "b", "b", "c", "c"]  # medians: a 0, b 1, c 0.5 (a tie)
    np.testing.assert_allclose(get_baseline("grpo_median")(r, ids), [0, 0, 0, 1, 1, 0.5, 0.5])
    s_a, s_c = np.sqrt(1 / 3) + 1e-6, np.sqrt(1 / 2) + 1e-6  # std with ddof=1, plus eps
    np.testing.assert_allclose(get_estimator("grpo_median")(r, ids), [1 / s_a, 0, 0, 0, 0, -0.5 / s_c, 0.5 / s_c])


def test_median_is_registered_and_permutation_equivariant():
    assert get_spec("grpo_median").needs == frozenset() and get_spec("grpo_median").level == "sequence"
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 5, 40)
    r = (rng.random(40) < 0.4).astype(float)
    perm = rng.permutation(40)
    a = get_estimator("grpo_median")(r, ids)
    np.testing.assert_allclose(get_estimator("grpo_median")(r[perm], ids[perm]), a[perm])


def test_method_file_loads():
    m = load_method("grpo_median_g8")
    assert (m.estimator, m.group_size, m.loss.type) == ("grpo_median", 8, "ppo_clip")
