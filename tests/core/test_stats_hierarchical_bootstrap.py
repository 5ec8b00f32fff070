"""The hierarchical bootstrap (sparserl.core.hierarchical_bootstrap): start policies, seeds
within each, problems within each benchmark; on synthetic data with known variance components."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sparserl.core import hierarchical_bootstrap as hb

BENCH = np.repeat(["a", "b"], 60)


def _data(rng, starts, seeds, start_sd, seed_sd=0.02, problem_sd=0.15, noise_sd=0.05, mu=0.5):
    """x[s, r, j] = mu + start effect + seed effect + problem effect + noise: problems crossed with
    runs, seeds nested in starts; the true mean is mu (every effect has mean 0)."""
    J = len(BENCH)
    u = rng.normal(0, start_sd, size=(starts, 1, 1))
    v = rng.normal(0, seed_sd, size=(starts, seeds, 1))
    e = rng.normal(0, problem_sd, size=(1, 1, J))
    return mu + u + v + e + rng.normal(0, noise_sd, size=(starts, seeds, J))


def _flat_interval(x, seed, n_boot):
    """The flat bootstrap: every run's problems pooled, problems resampled within benchmarks only."""
    w = hb.problem_weights(BENCH, n_boot, np.random.default_rng(seed))
    return hb.percentile(w @ x.reshape(-1, x.shape[-1]).mean(axis=0))


def test_start_variance_widens_the_interval_and_keeps_coverage_the_flat_one_loses():
    """With start-level variance the nested interval is wider than the flat (problems-only) one and
    covers the true mean where the flat one mostly does not; without it the two cover alike."""
    rng = np.random.default_rng(11)
    n_sets, n_boot = 150, 300
    cover = {(sd, k): 0 for sd in (0.0, 0.1) for k in ("nested", "flat")}
    width = {sd: [] for sd in (0.0, 0.1)}
    for i in range(n_sets):
        for sd in (0.0, 0.1):
            x = _data(rng, starts=6, seeds=3, start_sd=sd)
            _, lo, hi, _ = hb.interval(x, BENCH, n_boot=n_boot, seed=[7, i])
            flo, fhi = _flat_interval(x, [8, i], n_boot)
            cover[(sd, "nested")] += lo <= 0.5 <= hi
            cover[(sd, "flat")] += flo <= 0.5 <= fhi
            width[sd].append((hi - lo) / (fhi - flo))
    rate = {k: v / n_sets for k, v in cover.items()}
    # start sd 0.1 / sqrt(6) starts against a problem-mean s.e. of ~0.014: about 3 times wider
    assert np.median(width[0.1]) > 2
    assert rate[(0.1, "flat")] < 0.5 and rate[(0.1, "nested")] > 0.75
    # no start variance: the same coverage, roughly, and widths of one order
    assert abs(rate[(0.0, "nested")] - rate[(0.0, "flat")]) < 0.1 and rate[(0.0, "nested")] > 0.85
    assert 0.8 < np.median(width[0.0]) < 1.6


def test_one_start_one_seed_is_the_stratified_problem_bootstrap():
    rng = np.random.default_rng(0)
    x = _data(rng, 1, 1, 0.0)
    reps, design = hb.replicates({"m": x}, BENCH, 500, 5)
    w = hb.problem_weights(BENCH, 500, np.random.default_rng(5))
    np.testing.assert_allclose(reps["m"], w @ x[0, 0], rtol=0, atol=1e-12)
    assert design.resampled() == ["problem"]
    assert design.text() == "1 start x 1 seed x 120 problems (2 benchmarks); resampled: problems"


def test_one_start_gives_the_two_level_draws_of_the_head_to_head_before_it():
    """With one start the replicates are those of the (seeds, problems) bootstrap the head-to-head
    draws without start policies (problems first, then each owner's seeds), so a one-start
    tree's pairs keep their bytes."""
    rng = np.random.default_rng(1)
    arms = {m: _data(rng, 1, 3, 0.0) for m in ("x", "y", "x_alias")}
    arms["x_alias"] = arms["x"]
    owners = {"x_alias": "x"}
    reps, design = hb.replicates(arms, BENCH, 400, [1414, 0], owners)
    old = np.random.default_rng([1414, 0])
    w = hb.problem_weights(BENCH, 400, old)
    draws = {}
    for m, x in arms.items():
        o = owners.get(m, m)
        if o not in draws:
            draws[o] = old.integers(0, 3, size=(400, 3))
        want = np.take_along_axis(w @ x[0].T, draws[o], axis=1).mean(axis=1)
        np.testing.assert_allclose(reps[m], want, rtol=0, atol=1e-12)
    assert design.text() == "1 start x 3 seeds x 120 problems (2 benchmarks); resampled: seeds, problems"


def test_the_gain_is_paired_with_its_start_and_arms_by_start_and_problem():
    """A gain over the start policy subtracts the drawn start's own score: a run that adds exactly
    0.1 to its start on every problem has a gain interval of width 0, whatever the start spread."""
    rng = np.random.default_rng(2)
    base = rng.uniform(0.2, 0.8, size=(4, len(BENCH))) + rng.normal(0, 0.2, size=(4, 1))
    arm = np.repeat(base[:, None, :] + 0.1, 2, axis=1)
    est, lo, hi, design = hb.interval(arm, BENCH, baseline=base, n_boot=300, seed=3)
    assert est == pytest.approx(0.1) and lo == pytest.approx(0.1) and hi == pytest.approx(0.1)
    assert design.resampled() == ["start", "seed", "problem"]
    # a - b for two arms 0.05 apart on every run: the start and problem draws are shared
    d = hb.interval(arm, BENCH, b=arm - 0.05, n_boot=300, seed=3)
    assert d[0] == pytest.approx(0.05) and d[1] == pytest.approx(0.05) and d[2] == pytest.approx(0.05)
    with pytest.raises(ValueError, match="one row per start"):
        hb.interval(arm, BENCH, baseline=base[:2], n_boot=10)


def test_deterministic_to_the_byte_and_seed_dependent():
    rng = np.random.default_rng(4)
    x = _data(rng, 2, 3, 0.1)
    a = hb.replicates({"m": x}, BENCH, 300, [9, 1])[0]["m"]
    b = hb.replicates({"m": x}, BENCH, 300, [9, 1])[0]["m"]
    assert a.tobytes() == b.tobytes()
    assert not np.array_equal(a, hb.replicates({"m": x}, BENCH, 300, [9, 2])[0]["m"])


def test_arm_array_reads_starts_and_checks_the_design():
    problems = pd.DataFrame({"benchmark": BENCH, "id": np.arange(len(BENCH))})
    rows = [problems.assign(seed=r, start=s, p=float(10 * s + r)) for s in (0, 1) for r in (0, 1)]
    arr = hb.arm_array(pd.concat(rows), problems.iloc[::-1], "p", "t")  # the problems' order is the caller's
    assert arr.shape == (2, 2, len(BENCH)) and arr[1, 1, 0] == 11.0
    # a table written before the start column is start 0
    old = pd.concat(rows[:2]).drop(columns="start")
    assert hb.arm_array(old, problems, "p", "t").shape == (1, 2, len(BENCH))
    with pytest.raises(ValueError, match="different numbers of seeds"):
        hb.arm_array(pd.concat(rows[:3]), problems, "p", "t")
    with pytest.raises(ValueError, match="other problems"):
        hb.arm_array(pd.concat([rows[0].iloc[1:]]), problems, "p", "t")
