"""The head-to-head's aggregates through rliable (sparserl.studies.aggregates): IQM against a hand
computation, its interval, probability of improvement for identical and dominating methods, the
performance profile against rliable's own, the study on a synthetic runs tree (byte-equal on a
rerun), the CLI, the rule and the figures."""
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import yaml

from helpers.head_to_head_tables import problems, write_runs
from sparserl.cli.figures import draw_figure
from sparserl.core.artifacts import read_table
from sparserl.core.paths import Paths
from sparserl.figures import get_figure, list_figures
from sparserl.studies import aggregates as agg

METHODS = ["grpo_g8", "rloo_g8", "grpo_g4", "vanilla_g1", "basis_grid_grpo_g1_vanilla"]
FIGURES = ["head_to_head/aggregates_iqm", "head_to_head/aggregates_improvement", "head_to_head/aggregates_profile"]


def make_cfg(repo, methods=METHODS, seeds=(0, 1, 2)):
    c = yaml.safe_load((repo / "configs/smoke.yaml").read_text())
    rl = yaml.safe_load((repo / "configs/tiny.yaml").read_text())["rl"]
    c["rl"] = {**rl, "methods": list(methods), "seeds": list(seeds), "steps": 4, "rollouts_per_step": 64}
    return c


# --- the statistics on arrays --------------------------------------------------------------------

def test_iqm_is_the_mean_of_the_middle_half_and_its_interval_brackets_it():
    # 2 runs x 4 tasks: the 8 scores 0.1 .. 0.8; the IQM drops the two lowest and two highest
    s = np.array([[0.8, 0.1, 0.5, 0.3], [0.2, 0.6, 0.4, 0.7]])
    t = agg.iqm_table({"m": s}, "accuracy", reps=500).iloc[0]
    assert t["iqm"] == pytest.approx((0.3 + 0.4 + 0.5 + 0.6) / 4)
    assert t["mean"] == pytest.approx(0.45)
    assert t["ci_lo"] < t["iqm"] < t["ci_hi"] and t["mean_ci_lo"] < t["mean"] < t["mean_ci_hi"]
    # a resample only reuses the scores: the interval stays inside their range
    assert 0.1 <= t["ci_lo"] and t["ci_hi"] <= 0.8
    assert (t["runs"], t["tasks"], t["rank"]) == (2, 4, 1)


def test_one_seed_gives_no_interval_rather_than_a_point():
    t = agg.iqm_table({"m": np.array([[0.2, 0.4, 0.6]])}, "accuracy", reps=100).iloc[0]
    assert t["iqm"] == pytest.approx(0.4) and np.isnan(t["ci_lo"]) and np.isnan(t["ci_hi"])
    assert t["ci_method"].startswith("none: 1 seed")


def test_probability_of_improvement_identical_and_dominating():
    rng = np.random.default_rng(0)
    base = rng.uniform(0.1, 0.6, size=(5, 6))
    scores = {"a": base, "same": base.copy(), "top": base + 0.3}
    t = agg.improvement_table(scores, [("same", "a", "best"), ("top", "a", "best"), ("a", "top", "best")],
                              reps=500).set_index("x")
    assert t.loc["same", "p_improvement"] == 0.5
    assert t.loc["same", "ci_lo"] < 0.5 < t.loc["same", "ci_hi"]
    # every run of top beats every run of a on every task only when the shift beats the spread
    hand = np.mean([(base[:, None, j] + 0.3 > base[None, :, j]).mean() for j in range(6)])
    assert t.loc["top", "p_improvement"] == pytest.approx(hand) and hand > 0.9
    assert t.loc["top", "ci_lo"] > 0.5 and t.loc["a", "ci_hi"] < 0.5
    assert t.loc["top", "p_improvement"] + t.loc["a", "p_improvement"] == pytest.approx(1.0)


def test_the_fast_statistic_is_rliables_and_gives_its_intervals():
    from rliable import metrics
    rng = np.random.default_rng(1)
    for _ in range(30):  # scores on the 1/16 grid of mean@16: many ties
        x, y = rng.integers(0, 17, (3, 4)) / 16, rng.integers(0, 17, (2, 4)) / 16
        assert agg.probability_of_improvement(x, y) == pytest.approx(metrics.probability_of_improvement(x, y), abs=1e-12)
    x, y = rng.integers(0, 17, (3, 4)) / 16, rng.integers(0, 17, (3, 4)) / 16
    ours = agg.interval([x, y], agg.probability_of_improvement, "k", reps=60, seed=0)
    theirs = agg.interval([x, y], metrics.probability_of_improvement, "k", reps=60, seed=0)
    np.testing.assert_allclose(ours, theirs, atol=1e-12)


def test_profile_counts_scores_above_tau_reproducibly_and_leaves_numpy_alone():
    rng = np.random.default_rng(2)
    scores = {"a": rng.uniform(size=(3, 5)), "b": rng.uniform(size=(3, 5))}
    np.random.seed(5)
    before = np.random.get_state()[1].copy()
    ours = agg.profile_table(scores, agg.TAUS, reps=50)
    # each method has its own generator: numpy's global one is never drawn from
    np.testing.assert_array_equal(np.random.get_state()[1], before)
    for m, s in scores.items():
        np.testing.assert_allclose(ours[ours["method"] == m]["fraction"], [(s > t).mean() for t in agg.TAUS])
    assert (ours["ci_lo"] <= ours["fraction"] + 1e-12).all() and (ours["fraction"] <= ours["ci_hi"] + 1e-12).all()
    assert (ours["ci_hi"] > ours["ci_lo"]).any()
    pd.testing.assert_frame_equal(agg.profile_table(scores, agg.TAUS, reps=50), ours)
    # one stream per method: dropping b leaves a's band as it was
    pd.testing.assert_frame_equal(agg.profile_table({"a": scores["a"]}, agg.TAUS, reps=50),
                                  ours[ours["method"] == "a"].reset_index(drop=True))


def test_the_study_never_imports_rliables_library_or_arch():
    """rliable.library imports arch, and the arch versions rliable 1.2 allows (< 8) fail to import
    under pandas 3: the aggregates use rliable.metrics and their own stratified bootstrap."""
    code = ("import sys, numpy as np; from sparserl.studies import aggregates as a; "
            "a.iqm_table({'m': np.random.default_rng(0).uniform(size=(3, 4))}, 'accuracy', reps=20); "
            "a.profile_table({'m': np.ones((2, 3))}, a.TAUS, reps=5); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('arch', 'statsmodels') or m == 'rliable.library'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_pairs_are_against_grpo_g8_and_the_best():
    pairs = agg.improvement_pairs(["grpo_g8", "a", "b"], best="b")
    assert pairs == [("a", "grpo_g8", "reference"), ("b", "grpo_g8", "reference"),
                     ("grpo_g8", "b", "best"), ("a", "b", "best")]
    assert agg.improvement_pairs(["a", "b"], best="a") == [("b", "a", "best")]
    assert agg.improvement_pairs(["grpo_g8", "a"], best="grpo_g8") == [("a", "grpo_g8", "reference")]


# --- the study on a synthetic runs tree ----------------------------------------------------------

@pytest.mark.e2e  # the study twice
def test_study_reads_per_benchmark_scores_and_is_byte_identical_on_a_rerun(repo, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = make_cfg(repo)
    probs = write_runs(cfg)
    out = agg.write_aggregates(Paths(cfg), reps=200)
    assert set(out) == set(agg.TABLES) and all(p.parent == Paths(cfg).head_to_head("iqm").parent for p in out.values())
    first = {n: p.read_bytes() for n, p in out.items()}
    assert {n: p.read_bytes() for n, p in agg.write_aggregates(Paths(cfg), reps=200).items()} == first
    iqm = read_table(out["iqm"]).set_index(["metric", "method"])
    assert set(iqm.index.get_level_values(0)) == {"accuracy", "gain"}
    # by hand: rloo_g8's final per-problem scores, averaged per benchmark, trimmed by a quarter each side
    from scipy.stats import trim_mean
    acc = np.stack([read_table(Paths(cfg).run("rloo_g8", s).eval_dir / "final_per_problem.parquet")
                    .groupby("benchmark", sort=False)["p"].mean().to_numpy() for s in (0, 1, 2)])
    start = probs.groupby("benchmark", sort=False)["p0"].mean().to_numpy()
    assert iqm.loc[("accuracy", "rloo_g8"), "iqm"] == pytest.approx(trim_mean(acc, 0.25, axis=None))
    assert iqm.loc[("gain", "rloo_g8"), "iqm"] == pytest.approx(trim_mean(acc - start, 0.25, axis=None))
    assert iqm.loc[("accuracy", "rloo_g8"), "runs"] == 3 and iqm.loc[("accuracy", "rloo_g8"), "tasks"] == 2
    r = iqm.loc["accuracy"]
    assert ((r["ci_lo"] <= r["iqm"]) & (r["iqm"] <= r["ci_hi"])).all()
    # default_lift ranks the config's first method highest; the alias equals its owner
    assert r["rank"].idxmin() == "grpo_g8"
    assert r.loc["basis_grid_grpo_g1_vanilla", "iqm"] == r.loc["vanilla_g1", "iqm"]
    imp = read_table(out["improvement"])
    assert set(imp["against"]) == {"reference"}  # grpo_g8 is the best: one set of pairs, not two
    row = imp.set_index("x").loc["vanilla_g1"]
    assert row["y"] == "grpo_g8" and row["p_improvement"] == 0.0
    prof = read_table(out["profiles"])
    assert len(prof) == len(METHODS) * len(agg.TAUS)


def test_one_seed_study_and_start_policy_reference(repo, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = make_cfg(repo, ["rloo_g8", "grpo_g8", "grpo_g4"], seeds=(0,))
    write_runs(cfg)
    t = agg.aggregates(Paths(cfg), reps=50)
    assert t["iqm"]["ci_lo"].isna().all() and t["improvement"]["ci_lo"].isna().all()
    assert t["profiles"]["ci_hi"].isna().all() and t["profiles"]["fraction"].between(0, 1).all()
    imp = t["improvement"]
    assert set(imp["against"]) == {"reference", "best"}
    assert set(imp[imp["against"] == "reference"]["x"]) == {"rloo_g8", "grpo_g4"}


def test_runs_on_other_benchmarks_are_refused(repo, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = make_cfg(repo, ["grpo_g8", "rloo_g8"], seeds=(0,))
    write_runs(cfg)
    run = Paths(cfg).run("rloo_g8", 0)
    pp = read_table(run.eval_dir / "final_per_problem.parquet")
    ev = read_table(run.eval)
    from sparserl.core.artifacts import write_table
    write_table(pp.assign(benchmark=pp["benchmark"].replace("b2", "b3")), run.eval_dir / "final_per_problem.parquet")
    write_table(ev.assign(benchmark=ev["benchmark"].replace("b2", "b3")), run.eval)
    from sparserl.studies.head_to_head import HeadToHeadError
    with pytest.raises(HeadToHeadError, match=r"rloo_g8/seed0/eval.parquet: benchmarks \['b1', 'b3'\] differ"):
        agg.aggregates(Paths(cfg), reps=20)


def test_cli_writes_where_told(repo, tmp_path, monkeypatch, capsys):
    from sparserl.cli import main
    monkeypatch.chdir(tmp_path)
    cfg = make_cfg(repo, ["grpo_g8", "rloo_g8"], seeds=(0, 1))
    write_runs(cfg)
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    outs = [str(tmp_path / "o" / f"{n}.parquet") for n in agg.TABLES]
    assert main(["head-to-head-aggregates", "--config", str(path), "--bootstrap", "50", "--out", *outs]) == 0
    assert all((tmp_path / "o" / f"{n}.parquet").exists() for n in agg.TABLES)
    assert not Paths(cfg).head_to_head("iqm").exists()


@pytest.mark.e2e  # DAG dry run
def test_rule_writes_the_three_tables_from_the_runs(repo, tmp_path):
    cmd = [sys.executable, "-m", "snakemake", "-s", str(repo / "Snakefile"), "-d", str(tmp_path), "-n",
           "results/tiny/head_to_head/iqm.parquet"]
    out = subprocess.run(cmd, cwd=repo, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    block = out.stdout.split("rule head_to_head_aggregates:\n")[1].split("\n\n")[0]
    assert "results/tiny/rl/vanilla_g1/seed0/eval.parquet" in block and "results/tiny/eval/s/eval.parquet" in block
    for n in agg.TABLES:
        assert f"results/tiny/head_to_head/{n}.parquet" in block


# --- figures ---------------------------------------------------------------------------------------

@pytest.mark.e2e  # the study, then its figures
def test_figures_are_registered_and_drawn_with_the_scale_footer(repo, tmp_path, monkeypatch):
    from sparserl.figures.registry import pyplot
    monkeypatch.chdir(tmp_path)
    cfg = make_cfg(repo)
    write_runs(cfg)
    agg.write_aggregates(Paths(cfg), reps=100)
    assert set(FIGURES) <= {f.id for f in list_figures(cfg)}
    assert not set(FIGURES) & {f.id for f in list_figures({k: v for k, v in cfg.items() if k != "rl"})}
    for fig_id in FIGURES:
        f = get_figure(fig_id)
        assert f.bars and "rliable" in f.caption
        out = draw_figure(fig_id, cfg, Paths(cfg))
        assert out.read_bytes()[:4] == b"\x89PNG" and out.stat().st_size > 5000, fig_id
        assert out.with_suffix(".pdf").exists() and len(pd.read_csv(out.with_suffix(".csv")))
        data = f.read(cfg, f.tables(Paths(cfg)))
        fig, axes = f.layout(data)
        from sparserl.figures.registry import footer
        f.draw(data, axes)
        footer(fig, f.tables(Paths(cfg)), cfg, "smoke.yaml", bars=f.bars)
        text = fig.texts[-1].get_text()
        assert text.startswith("scale=smoke  [SMOKE SCALE") and "smoke.yaml" in text and "rliable" in text
        pyplot().close(fig)
    # the IQM figure: one point per method and metric at the table's IQM
    f = get_figure(FIGURES[0])
    data = f.read(cfg, f.tables(Paths(cfg)))
    fig, axes = f.layout(data)
    f.draw(data, axes)
    xs = sorted(float(c.lines[0].get_xdata()[0]) for c in axes[0].containers)
    np.testing.assert_allclose(xs, sorted(data[data["metric"] == "accuracy"]["iqm"]))
    pyplot().close(fig)


def test_pooled_start_policies_make_start_seed_pairs_the_runs(repo, tmp_path, monkeypatch):
    """With head_to_head.pool a run is a (start, seed) pair: the IQM and its stratified
    bootstrap run over both starts' runs (start 1's 0.2 above start 0's), P(X > Y) compares runs
    across starts (v05_k4 beats grpo_g8 within a start, not across: 3 of 4 pairs), each gain is
    over its own start policy, and the tables say how many starts and seeds. Fails on code that
    reads the first tree alone (1 run, P = 1)."""
    from helpers.head_to_head_tables import two_start_trees
    first, pooled, lifts = two_start_trees(repo, tmp_path, monkeypatch)
    alone, t = agg.aggregates(Paths(first), reps=200), agg.aggregates(Paths(pooled), reps=200)
    assert "starts" not in alone["iqm"] and (alone["iqm"]["runs"] == 1).all()  # one start: as before
    iqm = t["iqm"]
    assert set(iqm["method"]) == {"grpo_g8", "v05_k4"}  # the methods both trees ran
    assert (iqm["runs"] == 2).all() and (iqm["starts"] == 2).all() and (iqm["seeds"] == 1).all()
    assert iqm["ci_method"].str.endswith("; runs = (start, seed) pairs, 2 starts x 1 seed = 2 runs x 2 benchmarks").all()
    p0 = problems()
    for m in ("grpo_g8", "v05_k4"):
        acc = iqm[(iqm["metric"] == "accuracy") & (iqm["method"] == m)].iloc[0]
        per_start = [float((p0["p0"] * 0.5 + 0.3 + shift + lifts[m][0]).groupby(p0["benchmark"]).mean().mean())
                     for shift in (0.0, 0.2)]
        # a resample that draws start 0's run (or start 1's) on both benchmarks has chance 1/16 > 2.5%
        assert (acc["mean"], acc["mean_ci_lo"], acc["mean_ci_hi"]) == pytest.approx(
            (np.mean(per_start), per_start[0], per_start[1]))
        gain = iqm[(iqm["metric"] == "gain") & (iqm["method"] == m)].iloc[0]
        assert (gain["iqm"], gain["ci_lo"], gain["ci_hi"]) == pytest.approx((0.1 + lifts[m][0],) * 3)
    imp = t["improvement"].set_index(["x", "y"])
    assert imp.loc[("v05_k4", "grpo_g8"), "p_improvement"] == pytest.approx(0.75)
    assert alone["improvement"].set_index(["x", "y"]).loc[("v05_k4", "grpo_g8"), "p_improvement"] == 1.0
    assert (t["profiles"]["starts"] == 2).all()
    # the figures' titles and footers name the starts and the pooled tree
    from sparserl.figures.head_to_head import _scores_note
    assert _scores_note(iqm) == "2 starts x 1 seed = 2 runs x 2 benchmarks"
    iqm_fig = get_figure(FIGURES[0])
    assert iqm_fig.note(pooled, iqm_fig.tables(Paths(pooled))) == ("runs: (start policy, seed) pairs, start policies "
                                                                   f"pooled from this tree and {pooled['head_to_head']['pool'][0]}")
    assert iqm_fig.note(first, iqm_fig.tables(Paths(first))) == ""
