"""The head-to-head of every RL method (sparserl.studies.head_to_head): the CI and tie rules on
synthetic per-problem scores whose answer is known, the 1-seed and 3-seed paths, bad input, the
rule, the CLI, and its figures drawn from synthetic tables."""
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import scipy.stats
import yaml

from helpers.head_to_head_tables import (
    METHODS, make_cfg, problems, two_start_trees, write_head_to_head_tables, write_runs,
)
from sparserl.cli.figures import draw_figure
from sparserl.core.paths import Paths
from sparserl.figures import FigureError, get_figure, list_figures
from sparserl.figures.registry import pyplot
from sparserl.studies import head_to_head as h2h

@pytest.fixture
def cfg(repo, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return make_cfg(repo)


# --- the statistics on arrays --------------------------------------------------------------------

def test_t_interval_of_three_seeds():
    m, lo, hi = h2h.t_interval([0.40, 0.42, 0.44])
    assert m == pytest.approx(0.42) and hi - m == pytest.approx(4.302653 * 0.02 / np.sqrt(3), rel=1e-6)
    with pytest.raises(ValueError):
        h2h.t_interval([0.4])


def _per_problem(rng, n=(40, 60)):
    bench = np.repeat(["b1", "b2"], n)
    base = rng.uniform(0.1, 0.7, len(bench))
    return bench, base


def test_clearly_separated_methods_are_not_tied_identical_ones_are():
    rng = np.random.default_rng(0)
    bench, base = _per_problem(rng)
    pp = {"hi": (base + 0.2)[None], "lo": base[None], "same": base.copy()[None]}
    reps = h2h.bootstrap_replicates(pp, {}, bench, n_boot=500, seed=0)
    means = {m: h2h.accuracy(p[0], bench) for m, p in pp.items()}
    order = h2h.rank_methods(means, list(pp))
    assert order == ["hi", "lo", "same"]  # equal means keep the given order
    pairs = h2h.pair_table(means, reps, order).set_index(["a", "b"])
    assert pairs.loc[("hi", "lo"), "separated"] and pairs.loc[("hi", "lo"), "diff"] == pytest.approx(0.2)
    # a constant gap on every problem: every replicate sees exactly it
    assert pairs.loc[("hi", "lo"), "ci_lo"] == pytest.approx(0.2) == pairs.loc[("hi", "lo"), "ci_hi"]
    same = pairs.loc[("lo", "same")]
    assert not same["separated"] and same["diff"] == 0 and same["ci_lo"] == 0 == same["ci_hi"]
    labels, ties = h2h.tie_groups(order, pairs.reset_index())
    assert labels == {"hi": "a", "lo": "b", "same": "b"} and ties == {"hi": [], "lo": ["same"], "same": ["lo"]}


def test_noisy_small_gap_is_a_tie_and_the_paired_ci_is_narrower():
    """Two methods 0.005 apart with independent per-problem noise of sd 0.05: not separated by 100
    problems; a shift of 0.1 with the same noise is."""
    rng = np.random.default_rng(1)
    bench, base = _per_problem(rng)
    noise = lambda: rng.normal(0, 0.05, len(base))  # noqa: E731
    pp = {"a": (base + 0.005 + noise())[None], "b": (base + noise())[None], "c": (base - 0.1 + noise())[None]}
    reps = h2h.bootstrap_replicates(pp, {}, bench, n_boot=2000, seed=0)
    means = {m: h2h.accuracy(p[0], bench) for m, p in pp.items()}
    pairs = h2h.pair_table(means, reps, ["a", "b", "c"]).set_index(["a", "b"])
    assert not pairs.loc[("a", "b"), "separated"]
    assert pairs.loc[("a", "c"), "separated"] and pairs.loc[("b", "c"), "separated"]
    # pairing removes the problems' shared difficulty: the paired CI is far narrower than one method's
    q = np.quantile(reps["a"], [0.025, 0.975])
    assert pairs.loc[("a", "b"), "ci_hi"] - pairs.loc[("a", "b"), "ci_lo"] < 0.5 * (q[1] - q[0])


def test_one_seed_bootstrap_ci_matches_the_stratified_standard_error():
    """The problem bootstrap's 95% interval is mean +- 1.96 s.e. of a mean of benchmark means."""
    rng = np.random.default_rng(2)
    bench, _ = _per_problem(rng, (200, 300))
    p = rng.integers(0, 17, len(bench)) / 16
    reps = h2h.bootstrap_replicates({"m": p[None]}, {}, bench, n_boot=4000, seed=3)["m"]
    se = np.sqrt(sum(p[bench == b].var(ddof=0) / (bench == b).sum() for b in ("b1", "b2")) / 4)
    lo, hi = np.quantile(reps, [0.025, 0.975])
    assert (hi - lo) / 2 == pytest.approx(1.96 * se, rel=0.08)
    assert reps.mean() == pytest.approx(h2h.accuracy(p, bench), abs=se / 5)


def test_seeds_are_resampled_and_aliases_share_their_draw():
    rng = np.random.default_rng(4)
    bench, base = _per_problem(rng)
    seeds = np.stack([base + d for d in (0.0, 0.05, 0.10)])
    pp = {"x": seeds, "x_alias": seeds.copy(), "y": seeds.copy()}
    reps = h2h.bootstrap_replicates(pp, {"x_alias": "x"}, bench, n_boot=1000, seed=0)
    np.testing.assert_array_equal(reps["x"], reps["x_alias"])  # one run, one draw: difference 0
    assert np.std(reps["x"] - reps["y"]) > 0.005                # independent seed draws of two runs
    # the same inputs and seed give the same replicates; another seed other ones
    again = h2h.bootstrap_replicates(pp, {"x_alias": "x"}, bench, n_boot=1000, seed=0)
    np.testing.assert_array_equal(reps["y"], again["y"])
    assert not np.array_equal(reps["y"], h2h.bootstrap_replicates(pp, {}, bench, n_boot=1000, seed=1)["y"])


def test_tie_groups_are_the_maximal_cliques_of_a_non_transitive_relation():
    """a ~ b, b ~ c, but a and c separated: b shares a letter with each, a and c none."""
    order = ["a", "b", "c", "d"]
    sep = {("a", "c"), ("a", "d"), ("b", "d"), ("c", "d")}
    pairs = pd.DataFrame([{"a": x, "b": y, "separated": (x, y) in sep} for i, x in enumerate(order) for y in order[i + 1:]])
    labels, ties = h2h.tie_groups(order, pairs)
    assert labels == {"a": "a", "b": "ab", "c": "b", "d": "c"}
    assert ties["b"] == ["a", "c"] and ties["d"] == []
    # every tied pair shares a letter, every separated pair none
    for r in pairs.itertuples():
        assert bool(set(labels[r.a]) & set(labels[r.b])) == (not r.separated)


# --- the study on synthetic run tables -------------------------------------------------------------

def test_one_seed_study_ranks_bootstraps_and_writes_three_tables(cfg, tmp_path):
    t = write_head_to_head_tables(cfg, n_boot=300)
    r = t["ranking"]
    # default_lift: methods apart by 0.05 in config order; the alias repeats vanilla_g1's run
    assert list(r["method"]) == METHODS
    alias = r.set_index("method").loc[["vanilla_g1", "basis_grid_grpo_g1_vanilla"]]
    assert alias["rank"].tolist() == [6, 6] and alias["accuracy"].nunique() == 1
    assert (alias["run"] == "vanilla_g1").all() and alias["tie_group"].nunique() == 1
    assert (r["ci_method"] == "bootstrap over 100 problems (1 seed: no seed noise)").all()
    assert ((r["ci_lo"] < r["accuracy"]) & (r["accuracy"] < r["ci_hi"])).all()
    assert r["rank"].tolist() == [1, 2, 3, 4, 5, 6, 6]
    row = r.set_index("method").loc["grpo_g8"]
    assert row["family"] == "grpo" and row["group_size"] == 8 and row["seeds"] == 1
    assert row["rollouts_total"] == 4 * 64 and row["rollouts_per_step"] == 64
    assert row["wall_time_s"] == pytest.approx(4 * 0.25 * 3)  # 4 steps x 0.25 s x (index 2 + 1)
    assert r.set_index("method").loc["v05_k4", "family"] == "v05_fusion"
    # a 0.05 lift apart on 100 problems with the same per-problem start: every pair separated but the alias
    p = t["pairs"]
    assert len(p) == 7 * 6 // 2 and "welch_separated" not in p  # 1 seed: no t over seeds
    assert p.loc[~p["separated"], ["a", "b"]].values.tolist() == [["vanilla_g1", "basis_grid_grpo_g1_vanilla"]]
    # gains over the start, with the hierarchical bootstrap's interval and its levels
    pr = problems()
    start_acc = h2h.accuracy(pr["p0"].to_numpy(), pr["benchmark"].to_numpy())
    start_pass = h2h.accuracy((pr["p0"] > 0).to_numpy(float), pr["benchmark"].to_numpy())
    assert r["gain"].to_numpy() == pytest.approx(r["accuracy"].to_numpy() - start_acc)
    assert r["pass_gain"].to_numpy() == pytest.approx(r["pass_at_k"].to_numpy() - start_pass)
    assert ((r["gain_ci_lo"] < r["gain"]) & (r["gain"] < r["gain_ci_hi"])).all()
    levels = "1 start x 1 seed x 100 problems (2 benchmarks); resampled: problems"
    assert (r["ci_levels"] == levels).all() and (t["pairs"]["bootstrap_levels"] == levels).all()
    # curves: the start policy at 0, the half-way checkpoint, the final one
    c = t["curves"]
    g = c[(c["method"] == "grpo_g8") & (c["seed"] == 0)]
    assert g["checkpoint"].tolist() == ["start", "step00002", "final"]
    assert g["rollouts"].tolist() == [0, 128, 256] and g["wall_time_s"].tolist() == pytest.approx([0, 1.5, 3.0])
    assert g["accuracy"].iloc[0] == pytest.approx(h2h.accuracy(problems()["p0"], problems()["benchmark"]))
    assert list(dict.fromkeys(c["method"])) == METHODS
    # the same tables give the same bytes
    P = Paths(cfg)
    first = {n: P.head_to_head(n).read_bytes() for n in h2h.TABLES}
    h2h.write_head_to_head(Paths(cfg), n_boot=300)
    assert {n: P.head_to_head(n).read_bytes() for n in h2h.TABLES} == first
    assert (tmp_path / "results/smoke/head_to_head/ranking.parquet.manifest.json").exists()


def test_three_seeds_give_t_intervals_over_seeds(repo, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = make_cfg(repo, ["grpo_g8", "rloo_g8", "v05_k4"], seeds=(0, 1, 2))
    # final per-problem score p0 / 2 + 0.3 + a known lift per (method, seed), within [0, 1]
    lifts = {"grpo_g8": (0.00, 0.01, 0.02), "rloo_g8": (0.005, 0.015, 0.013), "v05_k4": (-0.3, -0.31, -0.29)}
    t = write_head_to_head_tables(cfg, n_boot=400, scores=lambda m, s, p0: p0 * 0.5 + 0.3 + lifts[m][s])
    r = t["ranking"].set_index("method")
    p0 = problems()
    base = h2h.accuracy(p0["p0"].to_numpy() * 0.5 + 0.3, p0["benchmark"].to_numpy())
    for m, ls in lifts.items():
        m_, lo, hi = h2h.t_interval(base + np.array(ls))
        assert r.loc[m, "accuracy"] == pytest.approx(m_) and r.loc[m, "seeds"] == 3
        assert (r.loc[m, "ci_lo"], r.loc[m, "ci_hi"]) == pytest.approx((lo, hi))
        assert r.loc[m, "ci_method"] == "t over 3 seeds"
        assert r.loc[m, "accuracy_sd"] == pytest.approx(np.std(ls, ddof=1))
    assert (r["ci_levels"] == "1 start x 3 seeds x 100 problems (2 benchmarks); resampled: seeds, problems").all()
    assert r.loc["v05_k4", "gain_ci_hi"] < 0 < r.loc["grpo_g8", "gain_ci_lo"]
    pairs = t["pairs"].set_index(["a", "b"])
    assert list(t["ranking"]["method"]) == ["rloo_g8", "grpo_g8", "v05_k4"]
    assert not pairs.loc[("rloo_g8", "grpo_g8"), "separated"]   # .001 apart on average, seeds overlap
    assert pairs.loc[("grpo_g8", "v05_k4"), "separated"]        # 0.3 apart, every seed
    assert r.loc["v05_k4", "tie_group"] != r.loc["grpo_g8", "tie_group"] == r.loc["rloo_g8", "tie_group"]
    # beside the rule, the Welch t-interval over seeds (at the unrounded Welch-Satterthwaite df)
    # (rloo_g8's seeds spread less than v05_k4's: df = 3.04, where the floor would give 3)
    a, b = base + np.array(lifts["rloo_g8"]), base + np.array(lifts["v05_k4"])
    va, vb = a.var(ddof=1) / 3, b.var(ddof=1) / 3
    df = (va + vb) ** 2 / (va ** 2 / 2 + vb ** 2 / 2)
    assert df == pytest.approx(3.0386, abs=1e-4)
    h = scipy.stats.t.ppf(0.975, df) * np.sqrt(va + vb)
    w = pairs.loc[("rloo_g8", "v05_k4")]
    assert (w["welch_ci_lo"], w["welch_ci_hi"]) == pytest.approx((a.mean() - b.mean() - h, a.mean() - b.mean() + h))
    assert w["welch_separated"] and not pairs.loc[("rloo_g8", "grpo_g8"), "welch_separated"]
    # curves: the band of a 3-seed checkpoint is the t-interval over its seeds
    s = h2h.curve_summary(t["curves"])
    fin = s[(s["method"] == "grpo_g8") & (s["checkpoint"] == "final")].iloc[0]
    assert fin["seeds"] == 3 and (fin["ci_lo"], fin["ci_hi"]) == pytest.approx(h2h.t_interval(base + np.array(lifts["grpo_g8"]))[1:])


def test_a_second_start_policy_plugs_in_and_each_gain_is_over_its_own_start(repo, tmp_path, monkeypatch):
    """Runs carry the pre-training seed of their start policy (`start`); seeds 2, 3 come
    from a start 0.2 better whose runs are 0.2 better too. Each run's gain is over its own start, so
    the gain interval holds the seeds' spread only, while the accuracy's holds the start's."""
    from sparserl.core.artifacts import read_table, write_table
    from sparserl.methods.run import method_run
    monkeypatch.chdir(tmp_path)
    cfg = make_cfg(repo, ["grpo_g8", "v05_k4"], seeds=(0, 1, 2, 3))
    lifts = {"grpo_g8": (0.00, 0.01, 0.02, 0.005), "v05_k4": (0.03, 0.04, 0.035, 0.045)}
    probs = write_runs(cfg, scores=lambda m, s, p0: p0 * 0.5 + 0.3 + 0.2 * (s >= 2) + lifts[m][s])
    for m in lifts:
        for s in (0, 1, 2, 3):
            path = method_run(cfg, m, s).eval_dir / "final_per_problem.parquet"
            write_table(read_table(path).assign(start=int(s >= 2)), path, cfg=cfg)
    P = Paths(cfg)
    base = probs[["benchmark", "id"]].assign(p=probs["p0"] * 0.5 + 0.2)
    base = pd.concat([base.assign(start=0), base.assign(start=1, p=base["p"] + 0.2)], ignore_index=True)
    write_table(base.assign(**{"pass": 1.0}), P.stage("eval", "s", "eval_per_problem.parquet"), cfg=cfg)
    r = h2h.head_to_head(Paths(cfg), n_boot=400)["ranking"].set_index("method")
    assert (r["ci_levels"] == "2 starts x 2 seeds x 100 problems (2 benchmarks); resampled: starts, seeds, "
                              "problems").all()
    for m, ls in lifts.items():
        assert r.loc[m, "gain"] == pytest.approx(0.1 + np.mean(ls))
        assert 0.1 + min(ls) - 1e-9 <= r.loc[m, "gain_ci_lo"] < r.loc[m, "gain_ci_hi"] <= 0.1 + max(ls) + 1e-9
    # a start policy too few for the runs: an error naming the table
    write_table(base[base["start"] == 0].assign(**{"pass": 1.0}), P.stage("eval", "s", "eval_per_problem.parquet"),
                cfg=cfg)
    with pytest.raises(h2h.HeadToHeadError, match="1 start policies but the runs descend from"):
        h2h.head_to_head(Paths(cfg), n_boot=50)


def test_pooled_trees_are_starts_whose_intervals_hold_both_start_policies(repo, tmp_path, monkeypatch):
    """head_to_head.pool adds another start's tree; the bootstrap resamples starts, then
    seeds, then problems, so a method's interval holds both starts' means (0.2 apart) and is wider
    than the first tree's alone; each start's gain is over its own start policy, so the gain's
    interval stays narrow. The ranking holds the methods both trees ran."""
    first, pooled, lifts = two_start_trees(repo, tmp_path, monkeypatch)
    alone_t = h2h.head_to_head(Paths(first), n_boot=600)
    alone = alone_t["ranking"].set_index("method")
    t = h2h.head_to_head(Paths(pooled), n_boot=600)
    r = t["ranking"].set_index("method")
    assert list(r.index) == ["v05_k4", "grpo_g8"] and (r["starts"] == 2).all() and (alone["starts"] == 1).all()
    levels = "2 starts x 1 seed x 100 problems (2 benchmarks); resampled: starts, problems"
    assert (r["ci_levels"] == levels).all() and (r["ci_method"] == f"hierarchical bootstrap over {levels}").all()
    assert (t["pairs"]["bootstrap_levels"] == levels).all() and "welch_separated" not in t["pairs"]
    p0 = problems()
    bench = p0["benchmark"].to_numpy()
    for m in r.index:
        per_start = [h2h.accuracy(p0["p0"].to_numpy() * 0.5 + 0.3 + shift + lifts[m][0], bench) for shift in (0.0, 0.2)]
        assert r.loc[m, "accuracy"] == pytest.approx(np.mean(per_start))
        assert r.loc[m, "ci_lo"] < per_start[0] < per_start[1] < r.loc[m, "ci_hi"], m
        assert r.loc[m, "ci_hi"] - r.loc[m, "ci_lo"] > 3 * (alone.loc[m, "ci_hi"] - alone.loc[m, "ci_lo"]), m
        # the gain over its own start: 0.1 + the lift on both starts, whatever the start's shift
        assert r.loc[m, "gain"] == pytest.approx(0.1 + lifts[m][0])
        assert r.loc[m, "gain_ci_hi"] - r.loc[m, "gain_ci_lo"] < 1e-9
    # the manifest says what was pooled; the curves stay the first tree's runs
    h2h.write_head_to_head(Paths(pooled), n_boot=100)
    from sparserl.core.artifacts import read_manifest
    man = read_manifest(Paths(first).head_to_head("ranking"))
    assert man["starts"] == {"results/smoke": 0, "results_start1/smoke": 1} and man["ci_levels"] == levels
    # the ranking figure draws these whiskers; its footer names the levels and the pooled tree
    f = get_figure("head_to_head/ranking")
    assert f.note(pooled, f.tables(Paths(pooled))) == f"bootstrap levels: {levels} (start policies pooled from this tree and " \
                             f"{pooled['head_to_head']['pool'][0]})"
    data = f.read(pooled, f.tables(Paths(pooled)))
    fig, ax = f.layout(data)
    f.draw(data, ax)
    from matplotlib.container import ErrorbarContainer
    (eb,) = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    whiskers = eb.lines[2][0].get_segments()
    np.testing.assert_allclose([[w[0][0], w[1][0]] for w in whiskers],
                               data[["ci_lo", "ci_hi"]].to_numpy())
    assert "2 start policies" in ax.get_title()
    pyplot().close(fig)
    assert draw_figure("head_to_head/ranking", pooled, Paths(pooled)).read_bytes()[:4] == b"\x89PNG"
    mine = alone_t["curves"][alone_t["curves"]["method"].isin(r.index)].reset_index(drop=True)
    pd.testing.assert_frame_equal(t["curves"].sort_values(["method", "step"]).reset_index(drop=True),
                                  mine.sort_values(["method", "step"]).reset_index(drop=True))


def test_a_missing_or_mislabelled_pooled_tree_is_one_line_naming_it_and_its_command(repo, tmp_path, monkeypatch):
    """A pooled tree that is not built is a one-line error naming the missing file and
    the command that builds it (study, CLI and the DAG alike), not a KeyError; a tree whose runs
    were evaluated under another start is refused."""
    from sparserl.cli import main
    from sparserl.core.artifacts import read_table, write_table
    from sparserl.methods.run import method_run
    first, pooled, _ = two_start_trees(repo, tmp_path, monkeypatch)
    second = {**first, "results_dir": "results_start1", "rl": {**first["rl"], "methods": ["grpo_g8", "v05_k4"]}}
    gone = method_run(second, "v05_k4", 0).eval_dir / "final_per_problem.parquet"
    saved = gone.read_bytes()
    gone.unlink()
    overlay = pooled["head_to_head"]["pool"][0]
    want = (f"head_to_head.pool: {gone} is missing: build the pooled tree first with `snakemake --cores 2 "
            f"head_to_head --configfile configs/smoke.yaml {overlay}`")
    assert h2h.missing_pool(Paths(pooled)) == want
    with pytest.raises(h2h.HeadToHeadError) as e:
        h2h.head_to_head(Paths(pooled), n_boot=50)
    assert str(e.value) == want and "\n" not in want
    cfg_file = tmp_path / "pooled.yaml"
    cfg_file.write_text(yaml.safe_dump(pooled))
    with pytest.raises(SystemExit, match="head-to-head: head_to_head.pool: .*final_per_problem.parquet is missing"):
        main(["head-to-head", "--config", str(cfg_file)])
    gone.write_bytes(saved)
    # runs of the pooled tree that record start 0: not the start its config names
    path = method_run(second, "grpo_g8", 0).eval_dir / "final_per_problem.parquet"
    write_table(read_table(path).assign(start=0), path, cfg=second)
    with pytest.raises(h2h.HeadToHeadError, match="start 0, but its tree's pretrain.start_seed is 1"):
        h2h.head_to_head(Paths(pooled), n_boot=50)
    # an overlay that is no file, or one that gives the first tree's results
    with pytest.raises(h2h.HeadToHeadError, match="nowhere.yaml is no file"):
        h2h.pool_trees(Paths({**first, "head_to_head": {"pool": ["nowhere.yaml"]}}))
    same = tmp_path / "same.yaml"
    same.write_text(yaml.safe_dump({"pretrain": {"start_seed": 1}}))
    with pytest.raises(h2h.HeadToHeadError, match="needs its own results_dir and start_seed"):
        h2h.pool_trees(Paths({**first, "head_to_head": {"pool": [str(same)]}}))


def test_ranking_and_curves_carry_greedy_pass_and_the_greedy_wrong_split(repo, tmp_path, monkeypatch):
    """Greedy accuracy and pass@k beside mean@k, and mean@k and greedy on the problems the
    start policy answers wrong greedily (the helper's greedy is right when p > 1/2, pass when p > 0)."""
    monkeypatch.chdir(tmp_path)
    cfg = make_cfg(repo, ["grpo_g8", "rloo_g8"], seeds=(0, 1))
    final = {"grpo_g8": lambda p0: np.where(p0 <= 0.5, 0.75, 0.0), "rloo_g8": lambda p0: np.full_like(p0, 0.25)}
    t = write_head_to_head_tables(cfg, n_boot=200, scores=lambda m, s, p0: final[m](p0))
    p0 = problems()
    bench, start = p0["benchmark"].to_numpy(), p0["p0"].to_numpy()
    wrong = start <= 0.5                        # the start's greedy is wrong there
    r = t["ranking"].set_index("method")
    assert r.loc["grpo_g8", "greedy_wrong_share"] == pytest.approx(wrong.mean())
    # grpo_g8 learns exactly the start's greedy-wrong problems and forgets the others
    g = final["grpo_g8"](start)
    assert r.loc["grpo_g8", "greedy_accuracy"] == pytest.approx(h2h.accuracy(g > 0.5, bench))
    assert r.loc["grpo_g8", "pass_at_k"] == pytest.approx(h2h.accuracy(g > 0, bench))
    assert r.loc["grpo_g8", "greedy_wrong_accuracy"] == 0.75 and r.loc["grpo_g8", "greedy_wrong_greedy"] == 1.0
    # rloo_g8 sharpens nothing and answers no problem greedily, but every one at least once in k
    assert r.loc["rloo_g8", "greedy_accuracy"] == 0.0 and r.loc["rloo_g8", "pass_at_k"] == 1.0
    assert r.loc["rloo_g8", "greedy_wrong_accuracy"] == 0.25 and r.loc["rloo_g8", "greedy_wrong_greedy"] == 0.0
    assert (r["pass_metric"] == "pass@16").all()
    assert (r["pass_at_k"] >= r["accuracy"]).all() and (r["accuracy"] >= 0).all()
    c = t["curves"]
    c0 = c[c["checkpoint"] == "start"].iloc[0]
    assert c0["greedy_accuracy"] == pytest.approx(h2h.accuracy(start > 0.5, bench))
    assert c0["pass_at_k"] == pytest.approx(h2h.accuracy(start > 0, bench))
    s = h2h.curve_summary(c).set_index(["method", "checkpoint"])
    assert s.loc[("rloo_g8", "final"), "greedy_accuracy"] == 0.0
    # a band over the 2 seeds (equal here: zero width)
    assert s.loc[("rloo_g8", "final"), ["greedy_accuracy_ci_lo", "greedy_accuracy_ci_hi"]].tolist() == [0.0, 0.0]
    assert {"pass_at_k_ci_lo", "pass_at_k_ci_hi"} <= set(s.columns)


def test_runs_on_other_problems_or_inconsistent_tables_are_refused(cfg):
    write_runs(cfg)
    run = Paths(cfg).run("rloo_g8", 0)
    pp = pd.read_parquet(run.eval_dir / "final_per_problem.parquet")
    pp.iloc[:-1].to_parquet(run.eval_dir / "final_per_problem.parquet")
    with pytest.raises(h2h.HeadToHeadError, match=r"rl/rloo_g8/seed0/eval/final_per_problem\.parquet.*disagrees"):
        h2h.head_to_head(Paths(cfg), n_boot=50)
    # same accuracy, other problem ids: not the same benchmark items
    pp.assign(id=pp["id"] + "x").to_parquet(run.eval_dir / "final_per_problem.parquet")
    with pytest.raises(h2h.HeadToHeadError, match=r"rloo_g8/seed0/eval/final_per_problem\.parquet: evaluated on other "
                                                  r"problems.*sparserl rl-eval --method rloo_g8 --seed 0"):
        h2h.head_to_head(Paths(cfg), n_boot=50)
    (run.eval_dir / "final_per_problem.parquet").unlink()
    with pytest.raises(h2h.HeadToHeadError, match=r"final_per_problem\.parquet is missing.*rl-eval --method rloo_g8"):
        h2h.head_to_head(Paths(cfg), n_boot=50)
    write_runs(cfg)
    met = pd.read_parquet(run.metrics).drop(columns="wall_time_s")
    met.to_parquet(run.metrics)
    with pytest.raises(h2h.HeadToHeadError, match=r"rloo_g8/seed0/metrics\.parquet: no column\(s\) \['wall_time_s'\]"):
        h2h.head_to_head(Paths(cfg), n_boot=50)


def test_cli_writes_the_tables_and_refuses_a_config_without_rl(cfg, tmp_path, capsys):
    from sparserl.cli import main
    write_runs(cfg)
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert main(["head-to-head", "--config", str(path), "--bootstrap", "100"]) == 0
    out = capsys.readouterr().out
    for name in h2h.TABLES:
        assert f"results/smoke/head_to_head/{name}.parquet" in out
    bad = tmp_path / "norl.yaml"
    bad.write_text(yaml.safe_dump({k: v for k, v in cfg.items() if k != "rl"}))
    with pytest.raises(SystemExit, match="no `rl` section"):
        main(["head-to-head", "--config", str(bad)])


def test_cli_writes_and_renders_the_tables_the_rule_names(cfg, tmp_path):
    """Rule head_to_head passes its outputs: `head-to-head --out` writes there and nowhere else, and
    `ranking-html --ranking` renders that table (on main the flags did not exist: the commands
    rebuilt the results tree's paths)."""
    from sparserl.cli import main
    from sparserl.core.artifacts import read_manifest
    write_runs(cfg)
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    outs = [tmp_path / "o" / f"{n}.parquet" for n in h2h.TABLES]
    assert main(["head-to-head", "--config", str(path), "--bootstrap", "50", "--out", *map(str, outs)]) == 0
    assert all(p.exists() for p in outs) and not Paths(cfg).head_to_head("ranking").exists()
    page = tmp_path / "o" / "ranking.html"
    assert main(["ranking-html", "--config", str(path), "--ranking", str(outs[0]), "--out", str(page)]) == 0
    assert str(outs[0]) in page.read_text() and read_manifest(page)["source"] == str(outs[0])


@pytest.mark.e2e  # DAG dry run
def test_rule_reads_every_run_once_and_the_start_evaluation(repo, tmp_path):
    """A dry run of the tiny DAG's head-to-head table: its inputs are the runs' metrics and eval
    tables (an alias reads its owner's), the start policy's evaluation and the benchmarks."""
    cmd = [sys.executable, "-m", "snakemake", "-s", str(repo / "Snakefile"), "-d", str(tmp_path), "-n",
           "results/tiny/head_to_head/ranking.parquet"]
    out = subprocess.run(cmd, cwd=repo, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    block = out.stdout.split("rule head_to_head:\n")[1].split("\n\n")[0]
    from sparserl.core.config import load_config
    from sparserl.methods.spec import run_owners
    tiny = load_config([str(repo / "configs/tiny.yaml")])
    inputs = [i.strip() for i in block.split("input: ")[1].split("\n")[0].split(",")]
    owners = set(run_owners(tiny["rl"]["methods"]).values())
    from sparserl.evaluation.splits import slip_inputs
    benchmarks = [str(b) for b in slip_inputs(Paths(tiny))]  # the slip-template split reads them (world 2.0)
    assert benchmarks and set(benchmarks) <= set(inputs)
    assert len(inputs) == 2 * len(owners) * len(tiny["rl"]["seeds"]) + 1 + len(benchmarks)
    assert "results/tiny/eval/s/eval.parquet" in inputs and "results/tiny/rl/vanilla_g1/seed0/eval.parquet" in inputs
    assert not any("basis_grid_grpo_g1_vanilla" in i for i in inputs)
    assert "results/tiny/head_to_head/pairs.parquet" in block and "results/tiny/head_to_head/curves.parquet" in block


# --- figures ----------------------------------------------------------------------------------------

H2H = ["head_to_head/accuracy_vs_rollouts", "head_to_head/accuracy_vs_wall_time", "head_to_head/ranking",
       "head_to_head/grpo_vs_v05_k"]


def test_figures_follow_the_config(cfg):
    ids = {f.id for f in list_figures(cfg)}
    assert set(H2H) <= ids
    assert not set(H2H) & {f.id for f in list_figures({k: v for k, v in cfg.items() if k != "rl"})}
    no_v05 = {**cfg, "rl": {**cfg["rl"], "methods": ["grpo_g4", "grpo_g8", "rloo_g8"]}}
    assert set(H2H[:3]) <= {f.id for f in list_figures(no_v05)} and H2H[3] not in {f.id for f in list_figures(no_v05)}
    with pytest.raises(FigureError, match="missing: v05_k4, v05_k8"):
        draw_figure("head_to_head/grpo_vs_v05_k", no_v05, Paths(no_v05))
    assert get_figure(H2H[0]).tables(Paths(cfg)) == [Paths(cfg).head_to_head("curves")]


@pytest.mark.e2e  # the study, then its figures
def test_figures_draw_the_study_tables(repo, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = make_cfg(repo, METHODS[:4] + ["v05_k4_v0"], seeds=(0, 1, 2))
    t = write_head_to_head_tables(cfg, n_boot=200)
    for fig_id in H2H:
        out = draw_figure(fig_id, cfg, Paths(cfg))
        assert out.read_bytes()[:4] == b"\x89PNG" and out.stat().st_size > 5000, fig_id
    # ranking: bars in rank order, whiskers = the CIs, the tie letters beside them; CSV = the table
    f = get_figure("head_to_head/ranking")
    data = f.read(cfg, f.tables(Paths(cfg)))
    fig, ax = f.layout(data)
    f.draw(data, ax)
    r = t["ranking"]
    widths = [p.get_width() for p in ax.patches]
    np.testing.assert_allclose(widths, r["accuracy"].to_numpy())
    assert [tx.get_text() for tx in ax.texts] == r["tie_group"].tolist()
    pyplot().close(fig)
    csv = pd.read_csv(tmp_path / "paper_figures/smoke/head_to_head/ranking.csv")
    assert csv["method"].tolist() == r["method"].tolist()
    np.testing.assert_allclose(csv["ci_hi"], r["ci_hi"])
    # curves: one line per method through the seeds' means, a band per method (3 seeds)
    f = get_figure("head_to_head/accuracy_vs_rollouts")
    data = f.read(cfg, f.tables(Paths(cfg)))
    fig, (ax, legend_ax) = f.layout(data)
    f.draw(data, (ax, legend_ax))
    lines = {ln.get_label(): ln for ln in ax.lines}
    assert list(lines) == cfg["rl"]["methods"]
    c = t["curves"]
    g = c[c["method"] == "v05_k4"].groupby("step")[["rollouts", "accuracy"]].mean()
    np.testing.assert_allclose(lines["v05_k4"].get_xdata(), g["rollouts"])
    np.testing.assert_allclose(lines["v05_k4"].get_ydata(), g["accuracy"])
    assert len([p for p in ax.collections if p.get_paths()]) == len(cfg["rl"]["methods"])
    from sparserl.figures.style import method_color
    assert lines["grpo_g8"].get_color() == method_color("grpo_g8")
    pyplot().close(fig)
    # the matched comparison: V0.5 - GRPO at the same k from the pairs table, V0's prior included
    f = get_figure("head_to_head/grpo_vs_v05_k")
    data = f.read(cfg, f.tables(Paths(cfg)))
    bars = data["df"].set_index("method")
    assert list(bars.index) == ["grpo_g4", "v05_k4", "v05_k4_v0", "grpo_g8", "v05_k8"]
    p = t["pairs"].set_index(["a", "b"])
    want = p.loc[("grpo_g4", "v05_k4")]  # default_lift ranks grpo_g4 above v05_k4
    assert bars.loc["v05_k4", "vs_grpo_diff"] == pytest.approx(-want["diff"])
    assert (bars.loc["v05_k4", "vs_grpo_ci_lo"], bars.loc["v05_k4", "vs_grpo_ci_hi"]) == \
        pytest.approx((-want["ci_hi"], -want["ci_lo"]))
    assert np.isnan(bars.loc["grpo_g8", "vs_grpo_diff"])


@pytest.mark.e2e  # the study, then its figures
def test_sharpening_curves_draw_entropy_greedy_and_pass_from_cached_tables(repo, tmp_path, monkeypatch):
    """Sharpening or learning, per method: entropy per training step (metrics.parquet) and greedy
    accuracy and pass@k at every evaluated checkpoint, the start policy at step 0; a scale without
    entropy in its metrics still draws the other two."""
    monkeypatch.chdir(tmp_path)
    cfg = make_cfg(repo, ["grpo_g8", "rloo_g8"], seeds=(0, 1))
    t = write_head_to_head_tables(cfg, n_boot=200)
    f = get_figure("head_to_head/sharpening_curves")
    assert f.id in {x.id for x in list_figures(cfg)} and f.bars
    tables = f.tables(Paths(cfg))
    assert tables[0] == Paths(cfg).head_to_head("curves") and len(tables) == 1 + 2 * 2
    data = f.read(cfg, tables)
    fig, axes = f.layout(data)
    f.draw(data, axes)
    ent_ax, g_ax, p_ax, _ = axes
    c = t["curves"]
    for ax, col in ((g_ax, "greedy_accuracy"), (p_ax, "pass_at_k")):
        line = {ln.get_label(): ln for ln in ax.lines}["rloo_g8"]
        want = c[c["method"] == "rloo_g8"].groupby("step")[col].mean()
        np.testing.assert_allclose(line.get_xdata(), want.index)
        np.testing.assert_allclose(line.get_ydata(), want.to_numpy())
        assert line.get_xdata()[0] == 0  # the start policy
    assert len(ent_ax.lines) == 2 and len(ent_ax.lines[0].get_xdata()) == 4  # every training step
    pyplot().close(fig)
    out = draw_figure(f.id, cfg, Paths(cfg))
    assert out.read_bytes()[:4] == b"\x89PNG" and out.stat().st_size > 5000
    csv = pd.read_csv(out.with_suffix(".csv"))
    assert set(csv["part"]) == {"checkpoints", "entropy per step"}
    # OpenRLHF's metrics log no entropy: the panel says so, the others are drawn
    for m in ("grpo_g8", "rloo_g8"):
        for s in (0, 1):
            p = Paths(cfg).run(m, s).metrics
            pd.read_parquet(p).drop(columns="entropy").to_parquet(p)
    data = f.read(cfg, tables)
    assert data["entropy"] is None
    assert draw_figure(f.id, cfg, Paths(cfg)).exists()


@pytest.mark.e2e  # two dry runs of the tiny DAG
def test_the_rule_declares_the_pooled_trees_files_and_stops_in_one_line_without_them(repo, tmp_path):
    """A dry run of the tiny head-to-head with head_to_head.pool: without the pooled tree
    one line names its first missing file and the command that builds it (the pool overlay left
    out of it); with the tree there, the rule's inputs are both trees' runs and start evaluations."""
    from sparserl.core.config import load_config
    s1, pool = tmp_path / "s1.yaml", tmp_path / "pool.yaml"
    s1.write_text(yaml.safe_dump({"results_dir": "results_start1", "pretrain": {"start_seed": 1},
                                  "rl": {"methods": ["grpo_g8", "v05_k4"]}}))
    pool.write_text(yaml.safe_dump({"head_to_head": {"pool": [str(s1)]}}))
    tiny = str(repo / "configs/tiny.yaml")
    cmd = [sys.executable, "-m", "snakemake", "-s", str(repo / "Snakefile"), "-d", str(tmp_path), "-n",
           "results/tiny/head_to_head/ranking.parquet", "--configfile", tiny, str(pool)]
    out = subprocess.run(cmd, cwd=repo, capture_output=True, text=True, timeout=300)
    assert out.returncode != 0
    line = ("head_to_head.pool: results_start1/tiny/rl/grpo_g8/seed0/eval.parquet is missing: build the pooled tree "
            f"first with `snakemake --cores 2 head_to_head --configfile {tiny} {s1}`")
    said = out.stdout + out.stderr
    assert line in said.splitlines(), said[-2000:]
    assert "KeyError" not in said and "Traceback" not in said
    # the tree built (its files stand in): the rule reads both trees
    import os
    os.chdir(tmp_path)  # the study resolves the trees' relative results_dir here, as the DAG does
    try:
        cfg = load_config([tiny, str(pool)])
        for f in h2h.input_tables(Paths(cfg)) + [
                p for m in ("grpo_g8", "v05_k4") for p in
                (tmp_path / f"results_start1/tiny/rl/{m}/seed0/eval/final_per_problem.parquet",)] + [
                tmp_path / "results_start1/tiny/eval/s/eval_per_problem.parquet"]:
            if "results_start1" in str(f):
                (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
                (tmp_path / f).touch()
    finally:
        os.chdir(repo)
    # the aggregates and the claims read the pooled tree too (the claims: where a row's methods ran)
    at = cmd.index("--configfile")
    cmd[at:at] = ["results/tiny/head_to_head/iqm.parquet", "paper_figures/tiny/CLAIMS.md"]
    out = subprocess.run(cmd, cwd=repo, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]

    def rule_inputs(rule):
        block = out.stdout.split(f"rule {rule}:\n")[1].split("\n\n")[0]
        return [i.strip() for i in block.split("input: ")[1].split("\n")[0].split(",")]

    agg_inputs = rule_inputs("head_to_head_aggregates")
    assert sorted(i for i in agg_inputs if i.startswith("results_start1/")) == sorted(
        [f"results_start1/tiny/rl/{m}/seed0/{t}.parquet" for m in ("grpo_g8", "v05_k4") for t in ("metrics", "eval")]
        + ["results_start1/tiny/eval/s/eval.parquet"])
    # GRPO G=8's gain (BASIS's non-inferiority margin) pools; no claim row pairs v05_k4 with grpo_g8
    claim_inputs = rule_inputs("claims")
    assert sorted(i for i in claim_inputs if i.startswith("results_start1/")) == [
        "results_start1/tiny/eval/s/eval.parquet", "results_start1/tiny/rl/grpo_g8/seed0/eval.parquet"]
    block = out.stdout.split("rule head_to_head:\n")[1].split("\n\n")[0]
    inputs = [i.strip() for i in block.split("input: ")[1].split("\n")[0].split(",")]
    pooled = [i for i in inputs if i.startswith("results_start1/")]
    assert sorted(pooled) == sorted([f"results_start1/tiny/rl/{m}/seed0/{t}.parquet" for m in ("grpo_g8", "v05_k4")
                                     for t in ("metrics", "eval")] + ["results_start1/tiny/eval/s/eval.parquet"])
    assert "results/tiny/rl/grpo_g8/seed0/eval.parquet" in inputs and "results/tiny/eval/s/eval.parquet" in inputs
    assert not any("rloo_g8" in i for i in inputs)  # the methods both trees ran
