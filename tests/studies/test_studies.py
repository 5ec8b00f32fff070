"""Value-estimation studies on synthetic caches where the truth is known, the CLI, the figures and
the Snakemake targets."""
import json
import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import yaml

from helpers.reference_caches import cache_frame
from sparserl.core.artifacts import read_manifest, write_table
from sparserl.estimators import shrinkage_fusion
from sparserl.studies import load_study_data, settings, table_targets
from sparserl.studies import basis_value as bv
from sparserl.studies import v05_stats as vs


def write_caches(ref_path, oracle_path, p, n_ref=64, n_oracle=256, seed=0, cfg=None):
    """Caches whose reference pass rate equals the oracle's exactly (p on the 1/64 grid)."""
    rng = np.random.default_rng(seed)
    ids = [f"t/{i}" for i in range(len(p))]
    p = np.asarray(p)
    write_table(cache_frame(ids, np.round(p * n_ref).astype(int), n_ref, rng), ref_path, cfg=cfg)
    write_table(cache_frame(ids, np.round(p * n_oracle).astype(int), n_oracle, rng), oracle_path, cfg=cfg)


def hetero_p(P=256, seed=1):
    """Heterogeneous values on the 1/64 grid, strictly inside (0, 1)."""
    return np.random.default_rng(seed).integers(1, 64, size=P) / 64


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("caches")
    write_caches(d / "ref.parquet", d / "oracle.parquet", hetero_p())
    return load_study_data(d / "ref.parquet", d / "oracle.parquet")


@pytest.fixture(scope="module")
def raw(data):
    s = settings({})["value"]
    return bv.simulate(data, B=64, repeats=300, G=8, eps=1e-6, grid=bv.beta_grid(16), inactive="zero", n_ref=None,
                       seed=0, difficulty_edges=s["difficulty_edges"])


def test_load_keeps_common_prompts_and_checks_lengths(tmp_path):
    write_caches(tmp_path / "r.parquet", tmp_path / "o.parquet", [0.5, 0.25, 0.75])
    o = pd.read_parquet(tmp_path / "o.parquet").iloc[1:]  # drop t/0 from the oracle
    o.to_parquet(tmp_path / "o2.parquet")
    d = load_study_data(tmp_path / "r.parquet", tmp_path / "o2.parquet")
    assert d.ids.tolist() == ["t/1", "t/2"] and d.p.tolist() == [0.25, 0.75] and d.oracle.shape == (2, 256)
    rewards = list(o["rewards"])
    rewards[0] = [1, 0]  # one cell holds a list: assign the column (pandas 2 and 3 agree on this)
    o = o.assign(rewards=rewards)
    o.to_parquet(tmp_path / "o3.parquet")
    with pytest.raises(ValueError, match="different numbers"):
        load_study_data(tmp_path / "r.parquet", tmp_path / "o3.parquet")


def test_basis_beats_reinforce_pp_with_exact_references(raw):
    t = bv.mse_by_method(raw, n_boot=200).set_index("method")
    assert t.loc["basis_unb", "mse"] < 0.3 * t.loc["reinforce_pp", "mse"]
    assert t.loc["basis_unb", "pct_vs_reinforce_pp"] < -70
    # REINFORCE++'s MSE is dominated by the spread of values in the batch (~ var of p = 0.08)
    assert 0.06 < t.loc["reinforce_pp", "mse"] < 0.11
    assert t.loc["reinforce_pp", "zero_one_rate"] == 0.0


def test_group_baselines_match_binomial_theory(data, raw):
    """GRPO's MSE = p(1-p)/8 and RLOO's = p(1-p)/7, times the finite-population factor of drawing
    without replacement from N = 256 cached rollouts; both unbiased."""
    N = data.oracle.shape[1]
    pq = (data.p * (1 - data.p)).mean()
    pb = bv.per_batch(raw)
    for m, g in (("grpo", 8), ("rloo", 7)):
        x = pb[pb["method"] == m]["mse"]
        expect = pq / g * (N - g) / (N - 1)
        se = x.std(ddof=1) / math.sqrt(len(x)) + pq / g * 0.02  # + the spread of pq over batches
        assert abs(x.mean() - expect) < 4 * se, (m, x.mean(), expect)
        assert abs(pb[pb["method"] == m]["bias"].mean()) < 0.01


def test_tables_bins_and_zero_one(raw, data):
    h = bv.mse_by_heterogeneity(raw, 5)
    assert h["h_bin"].nunique() == 5 and h.groupby("method")["n_batches"].sum().eq(300).all()
    d = bv.mse_by_difficulty(raw)
    assert set(d["p_bin_label"]) == {"[0,0.2)", "[0.2,0.4)", "[0.4,0.6)", "[0.6,0.8)", "[0.8,1]"}
    # pooled over bins, the squared errors add up to the overall MSE
    g = d[d["method"] == "grpo"]
    assert (g["mse"] * g["n"]).sum() / g["n"].sum() == pytest.approx(raw[raw.method == "grpo"]["sum_sq"].sum()
                                                                       / raw[raw.method == "grpo"]["n"].sum())
    z = bv.zero_one_rate(raw).set_index(["method", "p_bin_label"])["rate"]
    assert z[("basis_unb", "all")] == 0.0  # every exact reference value is strictly inside (0, 1)
    assert z[("grpo", "[0,0.2)")] > z[("grpo", "[0.4,0.6)")]


def test_all_solved_or_failed_prompts_give_grpo_zero_advantage(tmp_path):
    write_caches(tmp_path / "r.parquet", tmp_path / "o.parquet", [0.0, 1.0] * 40)
    d = load_study_data(tmp_path / "r.parquet", tmp_path / "o.parquet")
    r = bv.simulate(d, B=16, repeats=5, G=8, eps=1e-6, grid=bv.beta_grid(4), inactive="vhat", n_ref=None, seed=0,
                    difficulty_edges=[0, 0.5, 1])
    z = bv.zero_one_rate(r).set_index(["method", "p_bin_label"])["rate"]
    assert z[("grpo", "all")] == 1.0 and z[("rloo", "all")] == 1.0
    t = bv.mse_by_method(r, 0).set_index("method")
    assert t.loc["grpo", "mse"] == 0.0 and t.loc["basis_unb_vhat", "mse"] == 0.0


def test_sensitivity_rows_and_skips(data):
    s = settings({"basis": {"study": {"value": {"sensitivity_repeats": 5,
                                                "sensitivity": {"B": [16, 1000], "n": [8, 128], "grid": [1, 4]}}}}})["value"]
    b = bv.sensitivity(data, "B", s, 0)
    assert b["value"].tolist() == [16, 1000] and b["skipped"].tolist()[0] == "" and "prompts" in b["skipped"][1]
    n = bv.sensitivity(data, "n", s, 0)
    assert np.isfinite(n["mse"][0]) and "cached reference" in n["skipped"][1]
    g = bv.sensitivity(data, "grid", s, 0)
    assert np.isnan(g["mean_beta"][0])  # grid size 1 is beta = inf only
    assert bv.beta_grid(1).tolist() == [np.inf] and len(bv.beta_grid(8)) == 9


def test_summary_headline(raw):
    out = bv.summary(raw, settings({})["value"] | {"bootstrap": 100}, 0)
    h = out["headline"]
    assert h["basis_vs_reinforce_pp_pct"]["pct_change"] < -70 and h["basis_vs_reinforce_pp_pct"]["se"] > 0
    assert "basis_vs_grpo_g8_pct" in h and h["paper_claim_vs_reinforce_pp_pct"] == -69.0


def test_paired_relative_change():
    rc = bv.paired_relative_change(np.array([1.0, 2, 3]), np.array([2.0, 4, 6]), 50, 0)
    assert rc["pct_change"] == pytest.approx(-50) and rc["se"] == pytest.approx(0)


# --------------------------------------------------------------------------- V0.5


def test_hypergeometric_pmf():
    pmf = vs.hypergeom_pmf(20, np.array([0, 7, 20]), 5)
    assert np.allclose(pmf.sum(axis=1), 1)
    assert np.allclose(pmf @ np.arange(6), 5 * np.array([0, 7, 20]) / 20)
    assert pmf[0, 0] == 1 and pmf[2, 5] == pytest.approx(1)
    assert pmf[1, 2] == pytest.approx(math.comb(7, 2) * math.comb(13, 3) / math.comb(20, 5))


@pytest.mark.parametrize("k", [1, 2, 4, 8, 16])
def test_fusion_bias_bound_over_a_grid(k):
    """Theorem 3.4 checked exactly for every truth S/N and prior V on a grid: |bias| <= 1/sqrt(k)."""
    N = 64
    S = np.repeat(np.arange(N + 1), 41)
    V = np.tile(np.linspace(-1, 1, 41), N + 1)
    m = vs.fixed_k_moments(N, S, k, V)
    assert np.abs(m["fusion"]["bias"]).max() <= 1 / math.sqrt(k) + 1e-12
    assert np.allclose(m["empirical_only"]["bias"], 0)
    assert np.allclose(m["prior_only"]["bias"], V - (2 * S / N - 1))
    assert np.allclose(m["prior_only"]["mse"], (V - (2 * S / N - 1)) ** 2)


def test_exact_moments_match_monte_carlo():
    rng = np.random.default_rng(0)
    N, S, k, V = 256, 180, 4, 0.1
    pool = np.r_[np.ones(S), np.zeros(N - S)]
    draws = np.array([rng.choice(pool, k, replace=False) for _ in range(20000)])
    mu, _w, d2 = shrinkage_fusion(2 * draws.mean(1) - 1, k, np.full(len(draws), V))
    m = vs.fixed_k_moments(N, np.array([S]), k, np.array([V]))
    truth = 2 * S / N - 1
    assert m["fusion"]["bias"][0] == pytest.approx(mu.mean() - truth, abs=0.01)
    assert m["fusion"]["mse"][0] == pytest.approx(((mu - truth) ** 2).mean(), rel=0.05)
    assert m["fusion"]["p_reject"][0] == pytest.approx((d2 > 0).mean(), abs=0.01)


@pytest.fixture(scope="module")
def v05_settings():
    return settings({"basis": {"study": {"v05": {"repeats": 6, "B": 32, "offset_sign": "inward",
                                                 "cs": [0.01, 0.0039]}}}})["v05"]


def test_bias_table(data, v05_settings):
    t = vs.bias_table(data, v05_settings, 0)
    allb = t[t["p_bin"] == -1]
    po = allb[(allb["estimator"] == "prior_only") & (allb["prior"] == "oracle+0.3")]
    assert np.allclose(po["abs_bias_mean"], 0.3) and np.allclose(po["mse"], 0.09)
    assert allb[allb["estimator"] == "empirical_only"]["abs_bias_max"].max() < 1e-12
    assert allb[allb["estimator"] == "fusion"]["within_bound"].all()
    r = allb[(allb["estimator"] == "fusion") & (allb["k"] == 4)].set_index("prior")["reject_rate"]
    assert r["oracle+0"] < r["oracle+0.3"] < r["oracle+0.7"]
    assert {"constant 0.5", "pool mean", "reference"} <= set(t["prior"])


def test_osla_runs_tables_and_summary(data, v05_settings):
    runs = vs.osla_runs(data, v05_settings, 0)
    assert len(runs) == 6 * 32 * 2 * (5 + 3)
    assert (runs["regret"] > -1e-12).all()
    z = runs[runs["prior"] == "oracle+0"]
    assert (z["k_oracle_grid"] == 4).all() and (z["true_delta2"] == 0).all()
    bo = vs.budget_by_offset(runs, v05_settings).set_index("prior")
    assert bo.loc["oracle+0.7", "mean_budget"] > bo.loc["oracle+0", "mean_budget"] >= 4
    assert abs(bo.loc["oracle+0.7", "reject_rate_init"] - bo.loc["oracle+0.7", "reject_rate_init_exact"]) < 0.1
    cs = vs.c_sweep(runs, v05_settings)
    assert len(cs) == 8 * 2 and set(cs["k_max"]) == {10, 16}
    h = vs.stopping_hist(runs, v05_settings)
    assert np.allclose(h.groupby(["prior", "c"])["frac"].sum(), 1)
    bias = vs.bias_table(data, v05_settings, 0)
    s = vs.summary(bias, runs, v05_settings)
    assert s["fused_bias_within_bound"] is True and s["osla_mean_budget"]["oracle+0"]["mean"] >= 4
    assert set(s["fused_bias_max_ratio_by_k"]) == {1, 2, 4, 8, 16}


def test_oracle_k_and_regret_definition():
    d2 = np.array([0.0, 0.2, 4.0])
    k_cont, k_grid, r_star = vs.oracle_k(d2, 0.0039, 4, 2, 16)
    assert k_cont[0] == 4 and k_cont[2] == pytest.approx(1 / math.sqrt(0.0039) - 0.25)
    assert k_grid.tolist()[0] == 4 and k_grid[2] == 16
    grid = vs.budget_grid(4, 2, 16)
    assert r_star[1] == pytest.approx(vs.oracle_risk(0.2, grid, 0.0039).min())
    assert vs.budget_grid(4, 2, 15).tolist()[-2:] == [14, 15]


# --------------------------------------------------------------------------- CLI, figures, DAG


def _config(repo, tmp_path, study):
    cfg = yaml.safe_load((repo / "configs/smoke.yaml").read_text())
    cfg["basis"]["study"] = study
    cfg.pop("v0", None)  # the studies alone (smoke's V0 stage has its own tests)
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path, cfg


@pytest.mark.e2e  # every study figure, ~10 s
def test_cli_tables_summaries_and_every_figure(repo, tmp_path, monkeypatch):
    from sparserl.cli import main
    from sparserl.core.paths import Paths
    study = {"value": {"repeats": 12, "sensitivity_repeats": 3, "bootstrap": 50,
                       "sensitivity": {"eps": [1e-6, 1e-2], "n": [8, 16], "B": [16, 32], "grid": [1, 4]}},
             "v05": {"repeats": 2, "B": 16, "cs": [0.01, 0.0039], "ks": [1, 4, 8]}}
    cfg_path, cfg = _config(repo, tmp_path, study)
    monkeypatch.chdir(tmp_path)
    cfg["results_dir"], cfg["figures_dir"] = "results", "paper_figures"
    P = Paths(cfg)
    write_caches(P.reference_cache("s@p50"), P.oracle("s"), hetero_p(80), n_ref=8, n_oracle=16, cfg=cfg)
    c = ["--config", str(cfg_path)]
    assert main(["study-basis-batches", *c]) == 0
    for t in ("mse_by_method", "mse_by_heterogeneity", "mse_by_difficulty", "zero_one_rate"):
        assert main(["study-basis-table", *c, "--table", t]) == 0
    for s in ("eps", "n", "B", "grid"):
        assert main(["study-basis-sensitivity", *c, "--param", s]) == 0
    assert main(["study-basis-summary", *c]) == 0
    assert main(["study-v05-bias", *c]) == 0
    assert main(["study-v05-osla", *c]) == 0
    for t in ("budget_by_offset", "c_sweep", "stopping_hist"):
        assert main(["study-v05-table", *c, "--table", t]) == 0
    assert main(["study-v05-summary", *c]) == 0
    SP = P.studies
    from sparserl.figures import list_figures
    figs = list_figures(cfg)
    assert len(figs) == 13  # smoke has no `rl` section: the study figures only
    for fig in figs:
        assert main(["figure", *c, "--id", fig.id]) == 0
        f = fig.output(Paths(cfg))
        assert f.exists() and f.stat().st_size > 5000 and f.read_bytes()[:4] == b"\x89PNG"
    assert all(p.exists() for p in table_targets(SP))
    summ = json.loads(SP.summary("basis").read_text())
    assert summ["data"]["oracle_n"] == 16 and "basis_vs_reinforce_pp_pct" in summ["headline"]
    v = json.loads(SP.summary("v05").read_text())
    assert "oracle+0" in v["osla_mean_budget"] and v["osla_mean_budget"]["oracle+0"]["mean"] >= 4
    # k_max is capped by the 16 cached oracle rollouts; tables carry the provenance figures print
    assert read_manifest(SP.table("basis", "mse_by_method"))["scale"] == "smoke"
    assert pd.read_csv(SP.csv("v05", "c_sweep"))["k_max"].max() <= 16
    from sparserl.figures.registry import provenance
    assert provenance(SP.table("v05", "c_sweep"))["config_hash"] == read_manifest(SP.table("v05", "c_sweep"))["config_hash"]


@pytest.mark.e2e  # DAG dry run
def test_snakemake_dry_run_lists_study_targets(repo, tmp_path):
    # `all` includes every study target when basis.study_reference/study_oracle are set (smoke sets them)
    cmd = [sys.executable, "-m", "snakemake", "all", "-s", str(repo / "Snakefile"), "-d", str(tmp_path),
           "-n", "--configfile", str(repo / "configs/smoke.yaml")]
    out = subprocess.run(cmd, cwd=repo, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    log = out.stdout + out.stderr
    for rule in ("study_basis_batches", "study_basis_table", "study_basis_sensitivity", "study_basis_summary",
                 "study_v05_bias", "study_v05_osla", "study_v05_table", "study_v05_summary"):
        assert f"rule {rule}:" in log, rule
    for f in ("paper_figures/smoke/basis/f3a_mse_by_method.png", "paper_figures/smoke/basis/f5d_sensitivity_grid.png",
              "paper_figures/smoke/v05/stat_c_sweep.png", "paper_figures/smoke/v05/summary.json"):
        assert f in log
    # one generated rule per figure, each reading a cached table only (never the rollout caches)
    blocks = [b for b in log.split("\nrule figure_")[1:] if b.split("_")[0] in ("basis", "v05")]
    assert len(blocks) == 13
    assert {b.split(":")[0].split("_")[0] for b in blocks} == {"basis", "v05"}
    for b in blocks:
        inp = b.split("input:")[1].split("\n")[0].strip()
        assert inp.startswith("paper_figures/smoke/") and inp.endswith(".parquet") and "," not in inp
