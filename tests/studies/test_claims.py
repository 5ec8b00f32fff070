"""The claims table (sparserl.studies.claims, `sparserl claims`): the status rule, the intervals,
measures on small synthetic artifacts, and the CLI on a synthetic tree."""
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from sparserl.core.artifacts import write_json, write_table
from sparserl.core.paths import Paths
from sparserl.core.stats import t_interval
from sparserl.studies import claims as C
from sparserl.studies.claims import rl as CR

BENCH = {"add_sub_2x1digit": 20, "add_sub_3x1digit": 30}


# --------------------------------------------------------------------------- the status rule

@pytest.mark.parametrize("lo,hi,rel,t,status", [
    (0.01, 0.05, ">", 0.0, C.REPRODUCED),        # above the threshold
    (-0.05, -0.01, ">", 0.0, C.CONTRADICTED),    # below it
    (-0.01, 0.05, ">", 0.0, C.INCONCLUSIVE),     # contains it
    (0.70, 0.80, ">", 0.85, C.CONTRADICTED),     # a paper's bound: Intra-AUC > .85
    (0.86, 0.90, ">", 0.85, C.REPRODUCED),
    (-0.015, 0.02, ">", -0.021, C.REPRODUCED),   # "matches" = above -tolerance
    (-0.60, -0.50, "<", 0.0, C.REPRODUCED),      # "reduces the MSE"
    (0.10, 0.20, "<", 0.0, C.CONTRADICTED),
    (-0.10, 0.20, "<", 0.0, C.INCONCLUSIVE),
    (np.nan, np.nan, ">", 0.0, C.UNTESTABLE),    # no interval: a single run cannot test it
])
def test_decide(lo, hi, rel, t, status):
    assert C.decide(lo, hi, rel, t) == status


def test_decide_refuses_bad_input():
    with pytest.raises(ValueError):
        C.decide(0.0, 1.0, ">=", 0.0)
    with pytest.raises(ValueError):
        C.decide(1.0, 0.0, ">", 0.0)


@pytest.mark.parametrize("value,lo,hi,paper,free,label", [
    (0.12, 0.08, 0.16, 0.10, False, C.IN_CI),                  # the paper's number inside our interval
    (0.06, 0.055, 0.065, 0.10, True, C.WITHIN),                # scale-free, outside it, 0.6x
    (0.06, 0.055, 0.065, 0.10, False, "off by 1.7x"),          # accuracy points: no factor across scales
    (0.02, 0.01, 0.03, 0.10, True, "off by 5.0x"),             # right sign, a fifth of the paper's gap
    (0.50, 0.45, 0.55, 0.10, True, "off by 5.0x"),             # 5x too large
    (-0.02, -0.03, -0.01, 0.15, True, C.OPPOSITE),
    (0.05, np.nan, np.nan, 0.08, True, C.WITHIN),              # no interval: the factor alone
    (-42.0, -45.0, -39.0, (-59.0, -55.0), True, C.WITHIN),     # a range: its nearest end, -55
    (-57.0, -60.0, -50.0, (-59.0, -55.0), True, C.IN_CI),
    (0.02, 0.01, 0.03, None, False, C.NO_PAPER),
    (np.nan, np.nan, np.nan, 0.10, False, C.NOT_MEASURED),
])
def test_magnitude(value, lo, hi, paper, free, label):
    assert C.magnitude(value, lo, hi, paper, free)[0] == label


def test_magnitude_ratio_and_bad_paper_value():
    assert C.magnitude(0.02, 0.01, 0.03, 0.10)[1] == pytest.approx(0.2)
    assert C.magnitude(-42.0, -45.0, -39.0, (-59.0, -55.0))[1] == pytest.approx(42 / 55)
    assert C.MAGNITUDE_FACTOR < 5  # a 5x gap never counts as agreeing
    with pytest.raises(ValueError, match="lo <= hi"):
        C.magnitude(1.0, 0.0, 2.0, (3.0, 1.0))


@pytest.mark.parametrize("direction,mag,premise,status", [
    (C.REPRODUCED, C.IN_CI, "", C.REPRODUCED),
    (C.REPRODUCED, C.WITHIN, C.PRESENT, C.REPRODUCED),
    (C.REPRODUCED, C.NO_PAPER, "", C.DIRECTION_ONLY),          # no paper number: at best its direction
    (C.REPRODUCED, "off by 5.0x", "", C.DIRECTION_ONLY),       # only the sign agrees
    (C.REPRODUCED, C.OPPOSITE, C.UNCLEAR, C.DIRECTION_ONLY),
    (C.INCONCLUSIVE, C.IN_CI, "", C.INCONCLUSIVE),
    (C.UNTESTABLE, C.NO_PAPER, "", C.UNTESTABLE),
    (C.CONTRADICTED, C.NO_PAPER, "", C.CONTRADICTED),
    (C.CONTRADICTED, C.NO_PAPER, C.ABSENT, C.PREMISE_ABSENT),  # the mechanism does not occur here
    (C.REPRODUCED, C.IN_CI, C.ABSENT, C.PREMISE_ABSENT),
    (C.NOT_RUN, C.NOT_MEASURED, C.ABSENT, C.NOT_RUN),
])
def test_overall(direction, mag, premise, status):
    assert C.overall(direction, mag, premise) == status


def test_detectable_effect_of_an_interval():
    # half-width 1.96 s.e.: s.e. 0.01, so (1.96 + 0.84) x 0.01
    assert C.detectable(-0.0196, 0.0196) == pytest.approx(0.028, abs=2e-4)
    assert np.isnan(C.detectable(np.nan, np.nan))


def _claim(measure, **kw):
    return C.Claim(**{**dict(id="t.x", paper="V0.5", claim="c", paper_number="n", quantity="q", relation=">",
                             threshold=0.0, target="v05/f1", inputs=lambda cfg: [], measure=measure), **kw})


def test_a_premise_absent_overrides_the_direction_and_is_shown():
    prem = C.Premise(text="vanilla collapses", quantity="gain(vanilla)", relation="<", threshold=0.0,
                     inputs=lambda cfg: [], measure=lambda ctx: C.Interval(0.03, 0.01, 0.05, "m"))
    df = C.build_rows(Paths({"scale": "smoke"}), {}, [_claim(lambda ctx: C.Interval(-0.05, -0.08, -0.02, "m"), premise=prem)])
    r = df.iloc[0]
    assert r.direction_status == C.CONTRADICTED and r.premise_status == C.ABSENT and r.status == C.PREMISE_ABSENT
    assert "vanilla collapses" in r.premise and "+0.030 [+0.010, +0.050]" in r.premise


def test_a_non_inferiority_margin_is_a_share_of_the_compared_gain():
    gain = lambda v: C.Margin(of="B's gain", inputs=lambda cfg: [], gain=lambda ctx: C.Interval(v, v - 0.01, v + 0.01, "m"))  # noqa: E731
    iv = lambda ctx: C.Interval(-0.005, -0.015, 0.006, "m")  # noqa: E731
    rows = C.build_rows(Paths({"scale": "smoke"}), {}, [_claim(iv, id="a", threshold=np.nan, margin=gain(0.04)),
                                                 _claim(iv, id="b", threshold=np.nan, margin=gain(0.08)),
                                                 _claim(iv, id="c", threshold=np.nan, margin=gain(-0.02))])
    a, b, c = rows.itertuples()
    assert a.threshold == pytest.approx(-0.01) and a.status == C.INCONCLUSIVE and np.isfinite(a.detectable)
    assert b.threshold == pytest.approx(-0.02) and b.status == C.DIRECTION_ONLY  # excludes -0.02
    assert np.isnan(c.threshold) and c.status == C.PREMISE_ABSENT and "no gain" in c.premise


def test_right_sign_wrong_magnitude_is_not_reproduced():
    """A gap of +0.02 [0.01, 0.03] where the paper reports +0.10: direction reproduced, magnitude off
    by 5x, so the row says "direction only"; the paper's +0.025 inside the CI: reproduced; no paper
    number: direction only."""
    def claim(paper_value):
        return C.Claim(id=f"t.{paper_value}", paper="V0.5", claim="c", paper_number="+10 points", quantity="q",
                       relation=">", threshold=0.0, target="v05/f1", inputs=lambda cfg: [],
                       measure=lambda ctx: C.Interval(0.02, 0.01, 0.03, "m"), paper_value=paper_value)
    df = C.build_rows(Paths({"scale": "smoke"}), {}, [claim(0.10), claim(0.025), claim(None)]).set_index("paper_lo",
                                                                                                  drop=False)
    assert df["direction_status"].tolist() == [C.REPRODUCED] * 3
    assert df["magnitude_status"].tolist() == ["off by 5.0x", C.IN_CI, C.NO_PAPER]
    assert df["status"].tolist() == [C.DIRECTION_ONLY, C.REPRODUCED, C.DIRECTION_ONLY]
    assert df["measured_over_paper"].iloc[0] == pytest.approx(0.2) and np.isnan(df["paper_hi"].iloc[2])
    md = C.to_markdown(df.reset_index(drop=True).assign(fmt="{:.3f}"), scale="smoke", config_name="x",
                       config_hash="h", commit="c")
    assert "| — | reproduced | off by 5.0x | **direction only** |" in md and "+10 points (ours: 0.100)" in md


def test_not_run_is_a_status_of_build_rows():
    def inputs(P):
        raise C.NotRun("rl.methods of this config lacks x")
    claim = C.Claim(id="t.x", paper="V0", claim="c", paper_number="1", quantity="q", relation=">", threshold=0.0,
                    target="v0/t1", inputs=inputs, measure=lambda ctx: C.Interval(1, 1, 1, "m"))
    df = C.build_rows(Paths({"scale": "smoke"}), {}, [claim])
    assert df["status"].tolist() == [C.NOT_RUN] and "lacks x" in df["reason"].iloc[0]
    assert df["direction_status"].tolist() == [C.NOT_RUN] and df["magnitude_status"].tolist() == [C.NO_PAPER]


# --------------------------------------------------------------------------- intervals

def test_seed_interval_paired_welch_and_degenerate():
    a, b = pd.Series([0.5, 0.6, 0.7], index=[0, 1, 2]), pd.Series([0.4, 0.5, 0.7], index=[0, 1, 2])
    iv = C.seed_interval(a, b)
    d = (a - b).to_numpy()
    h = 0.95 * np.sqrt(2 / (1 - 0.95 ** 2)) * d.std(ddof=1) / np.sqrt(3)  # t_{0.975, 2}, closed form
    assert iv.method.startswith("paired t over 3") and iv.value == pytest.approx(d.mean())
    assert (iv.lo, iv.hi) == pytest.approx((d.mean() - h, d.mean() + h))
    assert C.seed_interval(a, b.set_axis([3, 4, 5])).method.startswith("Welch")
    one = C.seed_interval(a, b.iloc[:1].set_axis([7]))  # Welch with 1 seed in an arm
    assert np.isnan(one.lo) and "1 seed in an arm" in one.method
    same = C.seed_interval(pd.Series([0.3, 0.4]), pd.Series([0.2, 0.3]))  # equal differences: no spread
    assert np.isnan(same.lo) and "no spread" in same.method
    assert np.isnan(C.seed_interval(pd.Series([0.3])).lo)


def _per_problem(rng, shift=0.0):
    rows = [{"benchmark": b, "id": f"{b}/{i}", "p": float(np.clip(rng.random() + shift, 0, 1))}
            for b, n in BENCH.items() for i in range(n)]
    return pd.DataFrame(rows)


def test_stratified_bootstrap_is_paired_deterministic_and_checks_problems():
    rng = np.random.default_rng(0)
    a = _per_problem(rng)
    b = a.assign(p=a["p"] - 0.1)
    m, lo, hi = C.stratified_bootstrap_diff(a, b)
    assert m == pytest.approx(0.1) and lo == pytest.approx(0.1) and hi == pytest.approx(0.1)  # paired: no noise
    noisy = b.assign(p=b["p"] + rng.normal(0, 0.05, len(b)))
    first, again = C.stratified_bootstrap_diff(a, noisy), C.stratified_bootstrap_diff(a, noisy)
    assert first == again and first[1] < first[0] < first[2]
    # the point is the mean over benchmarks of per-benchmark means (runs.parquet's accuracy)
    per = a.groupby("benchmark")["p"].mean().mean()
    assert C.stratified_bootstrap_diff(a, None)[0] == pytest.approx(per)
    with pytest.raises(ValueError, match="different problems"):
        C.stratified_bootstrap_diff(a, b.iloc[1:])


# --------------------------------------------------------------------------- synthetic artifacts

def _cfg(repo, methods=("grpo_g16", "v05_osla", "v05_k4"), seeds=(0,), critique=True):
    cfg = yaml.safe_load((repo / "configs/smoke.yaml").read_text())
    tiny = yaml.safe_load((repo / "configs/tiny.yaml").read_text())
    cfg.pop("v0", None)  # V0's claims: not run in this tree
    cfg["rl"] = dict(tiny["rl"], methods=list(methods), seeds=list(seeds))
    if critique:
        cfg["critique"] = dict(tiny["critique"], experiments={
            "sudoku_k4": {"env": "sudoku", "k": 4, "methods": ["lc_mean", "lc_vf", "lc_pvf_answer", "lc_tether"]}})
    return cfg


def _write_rl(cfg, better=("v05_osla",), shift=0.2):
    from sparserl.methods.run import method_run
    P = Paths(cfg)
    rows = []
    for m in cfg["rl"]["methods"]:
        for s in cfg["rl"]["seeds"]:
            rng = np.random.default_rng(7 + s)  # the same problems' difficulty for every method
            pp = _per_problem(rng)
            if m in better:
                pp = pp.assign(p=(pp["p"] + shift).clip(0, 1))
            run = method_run(cfg, m, s)
            write_table(pp, run.eval_dir / "final_per_problem.parquet")
            acc = pp.groupby("benchmark")["p"].mean()
            write_table(pd.DataFrame({"benchmark": acc.index, "accuracy": acc.values, "checkpoint": "final"}), run.eval)
            rows.append({"method": m, "seed": s, "eval_accuracy_final": float(acc.mean()), "rollouts_total": 1024})
    # the start policy: 0.05 below the methods' common level on every problem
    from sparserl.evaluation.evaluate import per_problem_path
    start = _per_problem(np.random.default_rng(7 + cfg["rl"]["seeds"][0]))
    start = start.assign(p=(start["p"] - 0.05).clip(0, 1))
    eval_path = P.eval_table(cfg["rl"]["policy"])
    acc = start.groupby("benchmark")["p"].mean()
    write_table(pd.DataFrame({"benchmark": acc.index, "accuracy": acc.values}), eval_path)
    write_table(start, per_problem_path(eval_path))
    runs = pd.DataFrame(rows)
    write_table(runs.assign(eval_gain=runs["eval_accuracy_final"] - float(acc.mean())), P.rl_runs())


def _write_basis(cfg):
    SP = Paths(cfg).studies
    head = {"basis_vs_reinforce_pp_pct": {"pct_change": -60.0, "ci95": [-62.0, -58.0], "n_batches": 12},
            "basis_vs_grpo_g8_pct": {"pct_change": 5.0, "ci95": [-1.0, 11.0], "n_batches": 12}}
    write_json({"headline": head}, SP.summary("basis"))
    write_table(pd.DataFrame({"param": "n", "value": [8.0, 16.0, 64.0], "skipped": ["", "", ""],
                              "mse": [0.03, 0.02, 0.012], "mse_se": [0.001, 0.001, 0.0005]}),
                SP.table("basis", "sensitivity_n"))
    write_table(pd.DataFrame({"method": ["basis_unb", "reinforce_pp"], "mse": [0.01, 0.03], "mse_se": [0.001, 0.001]}),
                SP.table("basis", "mse_by_method"))


def _write_critique(cfg):
    CP = Paths(cfg).critique
    rows, steps = [], []
    for s in (0, 1, 2):
        for m, ev, rew, rho in (("lc_mean", np.nan, 0.40, np.nan), ("lc_vf", 0.05, 0.30, np.nan),
                                ("lc_pvf_answer", 0.20 + 0.01 * s, 0.35, np.nan), ("lc_tether", 0.06, 0.38 + 0.01 * s, 0.4 + 0.05 * s)):
            rows.append({"experiment": "sudoku_k4", "method": m, "seed": s, "ev_final": ev,
                         "final_reward": rew + 0.002 * s * (m == "lc_vf"), "rho_final": rho})
            steps += [{"experiment": "sudoku_k4", "method": m, "seed": s, "step": t,
                       "est_tether_rho": (0.1 * t if m == "lc_tether" else np.nan)} for t in (1, 2)]
    write_table(pd.DataFrame(rows), CP.final_table())
    write_table(pd.DataFrame(steps), CP.runs_table())


def _write_v0(cfg, protocol="sequential"):
    P = Paths(cfg)
    rng = np.random.default_rng(3)
    rows = []
    for model in ("s", "m"):
        for step in range(4):
            v = rng.random(20)
            for method, p in (("v0", v), ("vanilla_value_model", rng.random(20))):  # v0 ranks perfectly
                rows += [{"model": model, "step": step, "value": float(x), "p": float(q), "method": method}
                         for x, q in zip(v, p)]
    pred = pd.DataFrame(rows)
    from sparserl.values.v0.metrics import intra_context_auc
    table = pd.DataFrame([{"method": m, "model": "all", "seed": 0, "intra_auc": intra_context_auc(pred[pred.method == m])}
                          for m in ("v0", "vanilla_value_model")])
    write_table(pred, P.value_eval(f"v0_{protocol}_predictions"))
    write_table(table, P.value_eval(f"v0_{protocol}"))


def test_rl_measure_one_seed_bootstrap_and_seeds_t(repo, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = _cfg(repo)
    _write_rl(cfg)
    iv = C.rl_accuracy(C.Context(Paths(cfg)), "v05_osla", "grpo_g16")
    # the hierarchical bootstrap, naming its levels; one start and one seed: problems only
    assert iv.method.startswith("hierarchical bootstrap") and iv.lo > 0 and iv.value < 0.2 + 1e-9
    assert "1 start x 1 seed x 50 problems (2 benchmarks); resampled: problems" in iv.method
    # the gain over the start: its own per-problem table, paired by problem (runs.parquet's eval_gain)
    g = C.rl_gain(C.Context(Paths(cfg)), "grpo_g16")
    want = pd.read_parquet(Paths(cfg).rl_runs()).set_index("method").loc["grpo_g16", "eval_gain"]
    assert g.method.startswith("hierarchical bootstrap (2000x, paired with the start): 1 start x 1 seed")
    assert g.value == pytest.approx(want) and g.lo < g.value < g.hi and g.lo > 0
    assert C.rl_accuracy(C.Context(Paths(cfg)), "v05_k4", "grpo_g16").value == pytest.approx(0.0)  # same problems' p
    cfg2 = _cfg(repo, seeds=(0, 1, 2))
    _write_rl(cfg2, shift=0.1)
    iv2 = C.rl_accuracy(C.Context(Paths(cfg2)), "v05_osla", "grpo_g16")
    assert "1 start x 3 seeds x 50 problems (2 benchmarks); resampled: seeds, problems" in iv2.method
    assert iv2.lo > 0
    # never narrower than t over the 3 seeds
    runs = pd.read_parquet(Paths(cfg2).rl_runs()).set_index(["method", "seed"])["eval_accuracy_final"]
    t = C.seed_interval(runs.loc["v05_osla"], runs.loc["grpo_g16"])
    assert iv2.lo <= t.lo + 1e-12 and iv2.hi >= t.hi - 1e-12
    with pytest.raises(C.NotRun, match="grpo_budget_v0"):
        C.rl_accuracy(C.Context(Paths(cfg)), "grpo_budget_v0", "grpo_g8")


def test_v0_measure_bootstraps_contexts(repo, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = dict(_cfg(repo), v0={"harvest": {}})
    _write_v0(cfg)
    ctx = C.Context(Paths(cfg))
    auc = C.v0_auc_interval(ctx, "sequential", "v0")
    assert auc.value == pytest.approx(1.0) and "8 checkpoint contexts" in auc.method
    diff = C.v0_auc_interval(ctx, "sequential", "v0", "vanilla_value_model")
    table = ctx.table(Paths(cfg).value_eval("v0_sequential")).set_index("method")["intra_auc"]
    assert diff.value == pytest.approx(table["v0"] - table["vanilla_value_model"]) and diff.lo > 0


def test_basis_and_critique_measures(repo, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = _cfg(repo)
    _write_basis(cfg)
    _write_critique(cfg)
    ctx = C.Context(Paths(cfg))
    n = C.basis_sensitivity_n(ctx)
    assert n.value == pytest.approx(-60.0) and n.lo < -60 < n.hi  # n=8 -> n=64: 0.03 -> 0.012
    r = C.basis_headline("basis_vs_grpo_g8_pct")["measure"](ctx)
    assert (r.value, r.lo, r.hi) == (5.0, -1.0, 11.0)
    # Figure 2 reads the RL-checkpoint study's table at the middle checkpoint, mean over the beta grid
    f2 = pd.DataFrame([{"stage": st, "estimator": est, "beta": b, "mse": m, "mse_se": 0.001}
                       for st, scale in (("early", 1.0), ("middle", 2.0), ("late", 3.0))
                       for est, ms in (("initial", (0.02, 0.10)), ("refined", (0.03, 0.03)))
                       for b, m in zip((1.0, 10.0), (scale * x for x in ms))])
    write_table(f2, Paths(cfg).studies.table("basis", "stage_initial_vs_refined"), cfg=cfg)
    f2c = C.basis_refined_vs_initial(ctx)
    assert f2c.value == pytest.approx(100 * (0.06 / 0.12 - 1)) and f2c.hi < 0  # middle: 0.06 vs 0.12
    assert "best beta: initial 0.0400, refined 0.0600" in f2c.detail
    write_table(f2[f2["estimator"] == "initial"], Paths(cfg).studies.table("basis", "stage_initial_vs_refined"), cfg=cfg)
    with pytest.raises(C.BadArtifact, match="no 'refined' rows at stage middle"):
        C.basis_refined_vs_initial(C.Context(Paths(cfg)))
    ev = C.critique_diff("sudoku_k4", "ev_final", "pvf", "vf")["measure"](ctx)
    assert ev.value == pytest.approx(0.16) and ev.lo > 0 and "lc_pvf_answer" in ev.detail
    rho = C.tether_rho("sudoku_k4")["measure"](ctx)
    assert rho.value == pytest.approx(0.45) and rho.lo > 0 and "after the first step 0.100" in rho.detail
    with pytest.raises(C.NotRun, match="rg_k8"):
        C.critique_diff("rg_k8", "ev_final", "pvf", "vf")["inputs"](Paths(cfg))
    # the paper's n = 8 -> 64: a table without n = 64 is not run; a table without a column is an error
    path = Paths(cfg).studies.table("basis", "sensitivity_n")
    write_table(pd.DataFrame({"value": [8.0, 16.0], "skipped": ["", ""], "mse": [0.03, 0.02], "mse_se": [0.001] * 2}), path)
    with pytest.raises(C.NotRun, match="n=64"):
        C.basis_sensitivity_n(C.Context(Paths(cfg)))
    write_table(pd.DataFrame({"value": [8.0, 64.0], "mse": [0.03, 0.02]}), path)
    with pytest.raises(C.BadArtifact, match=r"sensitivity_n.parquet: no column\(s\) \['skipped', 'mse_se'\]"):
        C.basis_sensitivity_n(C.Context(Paths(cfg)))


def test_claims_are_data():
    ids = [c.id for c in C.CLAIMS]
    assert len(ids) == len(set(ids)) >= 12
    assert {c.paper for c in C.CLAIMS} == set(C.PAPERS)
    assert all(c.relation in (">", "<") for c in C.CLAIMS)
    # the papers' stated numbers, on our scale (accuracy as a fraction, MSE changes in %)
    paper = {c.id: c.paper_value for c in C.CLAIMS}
    assert paper["v05.osla_vs_grpo16"] == 0.10 and paper["basis.rl_vs_vanilla"] == 0.281
    assert paper["basis.mse_vs_reinforce_pp"] == -69.0 and paper["lc.pvf_ev.rg_k1"] is None


def test_resolve_target_by_prefix():
    figs = {"basis/f3a_mse_by_method": "paper_figures/x/basis/f3a_mse_by_method.png", "basis/f3b_x": "b.png"}
    assert C.resolve_target("basis/f3a", figs) == figs["basis/f3a_mse_by_method"]
    assert "no figure registered" in C.resolve_target("basis/t1", figs)


# --------------------------------------------------------------------------- the CLI

def test_cli_writes_both_files_and_names_missing_artifacts(repo, tmp_path, monkeypatch):
    from sparserl.cli import main
    monkeypatch.chdir(tmp_path)
    cfg = _cfg(repo)
    cfg_path = tmp_path / "cfg.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    _write_rl(cfg)
    _write_basis(cfg)
    _write_critique(cfg)
    inputs = C.claim_inputs(Paths(cfg))
    assert str(Paths(cfg).rl_runs()) in inputs and not any("values/eval" in p for p in inputs)
    assert main(["claims", "--config", str(cfg_path), "--config-name", "smoke+claims.yaml"]) == 0
    P = Paths(cfg)
    md, csv = P.claims_md(), P.claims_csv()
    assert (md, csv) == (Path("paper_figures/smoke/CLAIMS.md"), Path("paper_figures/smoke/CLAIMS.csv"))
    df = pd.read_csv(csv, keep_default_na=False)
    assert len(df) == len(C.CLAIMS) and set(df["status"]) <= set(C.STATUSES)
    assert set(df["direction_status"]) <= set(C.DIRECTION_STATUSES)
    status = df.set_index("id")["status"]
    k4 = df.set_index("id").loc["v05.k4_vs_grpo16"]
    # 'matches': above a quarter of GRPO G=16's own gain (+0.05 over the start), below zero
    assert float(k4["threshold"]) == pytest.approx(-0.25 * 0.05, abs=0.003) and "GRPO G=16's gain" in k4["premise"]
    assert k4["status"] == C.DIRECTION_ONLY  # equal arms lie above the margin; the paper gives no number
    # osla's problems are +0.2 each (less where clipped at 1): accuracy points are never "within 2x"
    # across scales, and the paper's +0.10 is outside our interval
    assert status["v05.osla_vs_grpo16"] == C.DIRECTION_ONLY
    assert df.set_index("id").loc["v05.osla_vs_grpo16", "magnitude_status"].startswith("off by")
    assert status["v05.osla_vs_dapo16"] == C.NOT_RUN               # dapo_g16 not in rl.methods
    assert status["v0.sequential_auc"] == C.NOT_RUN                # no v0.harvest
    assert status["basis.mse_vs_reinforce_pp"] == C.REPRODUCED
    assert status["basis.mse_vs_grpo8"] == C.INCONCLUSIVE          # CI [-1, 11] contains 0
    assert status["lc.pvf_ev.sudoku_k4"] == C.DIRECTION_ONLY       # no paper number: at best its direction
    assert status["lc.vf_vs_mean.sudoku_k4"] == C.DIRECTION_ONLY   # VF 0.30 < Mean 0.40
    vf = df.set_index("id").loc["lc.vf_vs_mean.sudoku_k4"]  # EV(VF) 0.05 at every seed: no interval
    assert vf["premise_status"] == C.UNCLEAR and "the critic learns" in vf["premise"]
    assert status["lc.pvf_ev.rg_k1"] == C.NOT_RUN
    row = df.set_index("id").loc["basis.mse_vs_reinforce_pp"]  # -60 [-62, -58] against the paper's -69
    assert row["magnitude_status"] == C.WITHIN and row["ci_method"].startswith("the study's paired bootstrap")
    assert float(row["paper_lo"]) == float(row["paper_hi"]) == -69.0
    assert float(row["measured_over_paper"]) == pytest.approx(60 / 69)
    text = md.read_text()
    assert "scale `smoke`" in text and "SMOKE SCALE: not paper numbers" in text and "smoke+claims.yaml" in text
    assert "| premise | direction | magnitude | status |" in text and f"within {C.MAGNITUDE_FACTOR:g}x" in text
    page = C.html_path(md).read_text()  # the report's rendering: the same rows, escaped, with the legend
    assert page.count("<tr>") == len(C.CLAIMS) + 1 and "SMOKE SCALE: not paper numbers" in page
    assert 'class="status-reproduced">reproduced</td>' in page and "magnitude (magnitude)" in page
    assert "MSE(BASIS G=1) &lt; MSE(GRPO G=8)" in page
    from sparserl.core.artifacts import git_commit
    assert f"commit `{git_commit()}`" in text and text.count("\n| ") == len(C.CLAIMS) + 1
    # same artifacts, same bytes
    before = (md.read_bytes(), csv.read_bytes(), C.html_path(md).read_bytes())
    assert main(["claims", "--config", str(cfg_path), "--config-name", "smoke+claims.yaml"]) == 0
    assert (md.read_bytes(), csv.read_bytes(), C.html_path(md).read_bytes()) == before
    # an artifact the config makes but that is missing: an error naming it, not a status
    from sparserl.methods.run import method_run
    gone = method_run(cfg, "v05_k4", 0).eval_dir / "final_per_problem.parquet"
    gone.unlink()
    with pytest.raises(SystemExit, match="v05_k4/seed0/eval/final_per_problem.parquet"):
        main(["claims", "--config", str(cfg_path)])


def test_rl_rows_carry_greedy_pass_and_the_splits_as_context(repo, tmp_path, monkeypatch):
    """An RL row's detail gives each arm's greedy accuracy, pass@k, the slip-template
    split's changes and the greedy-wrong split's flips both ways (never its gain alone) from
    runs.parquet; the status still reads mean@k alone (no paper reports the others)."""
    monkeypatch.chdir(tmp_path)
    cfg = _cfg(repo, critique=False)
    _write_rl(cfg)
    runs = pd.read_parquet(Paths(cfg).rl_runs())
    before = C.rl_accuracy(C.Context(Paths(cfg)), "v05_osla", "grpo_g16")
    assert "greedy" not in before.detail  # runs evaluated without them
    extra = {"eval_greedy_final": {"v05_osla": 0.61, "grpo_g16": 0.58},
             "eval_pass_final": {"v05_osla": 0.8, "grpo_g16": 0.9},
             "eval_greedy_wrong_greedy_gain": {"v05_osla": 0.3, "grpo_g16": 0.25},
             "eval_slip_greedy_gain": {"v05_osla": 0.12, "grpo_g16": -0.01},
             "greedy_wrong_to_right": {"v05_osla": 30, "grpo_g16": 25},
             "greedy_right_to_wrong": {"v05_osla": 28, "grpo_g16": 26},
             "eval_other_greedy_gain": {"v05_osla": 0.01, "grpo_g16": np.nan}}
    for col, by in extra.items():
        runs[col] = runs["method"].map(by)
    runs["pass_metric"] = "pass@16"
    write_table(runs, Paths(cfg).rl_runs())
    iv = C.rl_accuracy(C.Context(Paths(cfg)), "v05_osla", "grpo_g16")
    assert ("; greedy 0.610 vs 0.580; pass@16 0.800 vs 0.900; slip-template greedy change +0.120 vs -0.010; "
            "greedy wrong -> right 30.0 vs 25.0; right -> wrong 28.0 vs 26.0") in iv.detail
    assert "other-template" not in iv.detail  # an arm without it
    assert "greedy-wrong" not in iv.detail  # the selected split's gain is never shown without its complement
    assert (iv.value, iv.lo, iv.hi) == (before.value, before.lo, before.hi)


def test_bootstrap_intervals_are_widened_to_t_over_few_seeds():
    """A percentile bootstrap over 3 seeds is narrower than t over them: the claims keep the wider."""
    boot = C.Interval(0.05, 0.03, 0.07, "hierarchical bootstrap (2000x): 1 start x 3 seeds x 50 problems")
    t = C.Interval(0.05, -0.01, 0.11, "paired t over 3 seeds")
    wide = CR._no_narrower_than_t(boot, t)
    assert (wide.lo, wide.hi, wide.value) == (-0.01, 0.11, 0.05)
    assert wide.method.endswith("widened to paired t over 3 seeds")
    assert CR._no_narrower_than_t(boot, C.Interval(0.05, 0.04, 0.06, "t")) is boot  # t inside: unchanged
    assert CR._no_narrower_than_t(boot, None) is boot
    assert CR._no_narrower_than_t(boot, C.Interval(0.05, np.nan, np.nan, "1 seed: no interval")) is boot


# --------------------------------------------------------------------------- two start policies

LIFTS = {0: {"grpo_g16": 0.03, "v05_osla": 0.08, "v05_k4": 0.04}, 1: {"grpo_g16": 0.08, "v05_osla": 0.23}}


def _write_tree(cfg, start: int, shift: float):
    """A tree whose runs descend from start policy `start` (its per-problem tables say so): the
    start scores base + shift on each problem, a run base + shift + LIFTS[start][method] + noise
    of (start, method, seed); runs.parquet as `sparserl rl-summary` writes it."""
    from sparserl.evaluation.evaluate import per_problem_path
    from sparserl.methods.run import method_run
    P = Paths(cfg)
    probs = _per_problem(np.random.default_rng(7))
    base = 0.1 + 0.3 * probs["p"].to_numpy()
    start_pp = probs.assign(p=base + shift, start=start)
    acc0 = start_pp.groupby("benchmark")["p"].mean()
    eval_path = P.eval_table(cfg["rl"]["policy"])
    write_table(pd.DataFrame({"benchmark": acc0.index, "accuracy": acc0.values}), eval_path)
    write_table(start_pp, per_problem_path(eval_path))
    rows = []
    for i, m in enumerate(cfg["rl"]["methods"]):
        for s in cfg["rl"]["seeds"]:
            noise = np.random.default_rng([start, i, s]).uniform(-0.04, 0.04, len(base))
            pp = probs.assign(p=base + shift + LIFTS[start][m] + noise, start=start)
            run = method_run(cfg, m, s)
            write_table(pp, run.eval_dir / "final_per_problem.parquet")
            acc = pp.groupby("benchmark")["p"].mean()
            write_table(pd.DataFrame({"benchmark": acc.index, "accuracy": acc.values, "checkpoint": "final"}), run.eval)
            rows.append({"method": m, "seed": s, "eval_accuracy_final": float(acc.mean()), "rollouts_total": 1024,
                         "eval_gain": float(acc.mean() - acc0.mean())})
    write_table(pd.DataFrame(rows), P.rl_runs())


def _two_trees(repo, tmp_path, seeds=(0,)):
    """As configs/overlays/start1.yaml and pool_start1.yaml make them: the first tree (start 0) ran
    GRPO G=16, V0.5 OSLA and k=4, the second (start 1, results_start1, a start 0.2 better) the first
    two. OSLA - GRPO G=16 is +0.05 on start 0 and +0.15 on start 1; GRPO's gain +0.03 and +0.08.
    Returns the first tree's config, the second's and the pooled one."""
    first = _cfg(repo, methods=("grpo_g16", "v05_osla", "v05_k4"), seeds=seeds, critique=False)
    overlay = tmp_path / "start1.yaml"
    layer = {"results_dir": "results_start1", "pretrain": {"start_seed": 1},
             "rl": {"methods": ["grpo_g16", "v05_osla"]}}
    overlay.write_text(yaml.safe_dump(layer))
    second = {**first, "results_dir": "results_start1", "pretrain": {**first.get("pretrain", {}), "start_seed": 1},
              "rl": {**first["rl"], "methods": ["grpo_g16", "v05_osla"]}}
    _write_tree(first, 0, 0.0)
    _write_tree(second, 1, 0.2)
    return first, second, {**first, "head_to_head": {"pool": [str(overlay)]}}


def test_pooled_trees_are_starts_of_the_rl_rows(repo, tmp_path, monkeypatch):
    """With head_to_head.pool the claims' RL rows pool the trees by start, as the
    head-to-head does: the interval of a difference holds both starts' (+0.05 and +0.15) and is
    wider than either tree's alone; each start's gain is over its own start policy; a method a
    pooled tree did not run stays on this tree's start and its row says so. Fails on code that
    reads the first tree alone (1 start)."""
    monkeypatch.chdir(tmp_path)
    first, second, pooled = _two_trees(repo, tmp_path)
    alone = [C.rl_accuracy(C.Context(Paths(c)), "v05_osla", "grpo_g16") for c in (first, second)]
    assert [round(a.value, 6) for a in alone] == pytest.approx([0.05, 0.15], abs=0.02)
    iv = C.rl_accuracy(C.Context(Paths(pooled)), "v05_osla", "grpo_g16")
    assert iv.method == ("hierarchical bootstrap (2000x, paired with b by start and problem): 2 starts x 1 seed x "
                         "50 problems (2 benchmarks); resampled: starts, problems")
    assert iv.value == pytest.approx(np.mean([a.value for a in alone]))
    assert iv.lo < alone[0].value < alone[1].value < iv.hi
    assert all(iv.hi - iv.lo > 2 * (a.hi - a.lo) for a in alone)
    assert iv.detail.endswith(f"; per start 0, 1: {alone[0].value:+.3f}, {alone[1].value:+.3f}")
    # gains: each start's runs against their own start policy (0.2 apart), not against start 0's
    g_alone = [C.rl_gain(C.Context(Paths(c)), "grpo_g16") for c in (first, second)]
    g = C.rl_gain(C.Context(Paths(pooled)), "grpo_g16")
    assert "paired with the start): 2 starts x 1 seed x 50 problems" in g.method
    assert g.value == pytest.approx(np.mean([a.value for a in g_alone]))
    assert g.lo < g_alone[0].value < g_alone[1].value < g.hi and g.hi < 0.15
    # V0.5 k=4: start 1's tree did not run it, so the row stays on start 0 alone, unchanged, and says so
    k4 = C.rl_accuracy(C.Context(Paths(pooled)), "v05_k4", "grpo_g16")
    k4_alone = C.rl_accuracy(C.Context(Paths(first)), "v05_k4", "grpo_g16")
    assert (k4.value, k4.lo, k4.hi) == (k4_alone.value, k4_alone.lo, k4_alone.hi)
    assert k4.method == k4_alone.method + (f"; not pooled: start 1 ({pooled['head_to_head']['pool'][0]}) did not "
                                           "run v05_k4, so this tree's start 0 alone")
    # the table and the rule's inputs: the pooled tree's runs and start evaluation where a row pools it
    rows = C.build_rows(Paths(pooled), claims=[c for c in C.CLAIMS if c.id in ("v05.osla_vs_grpo16", "v05.k4_vs_grpo16")])
    rows = rows.set_index("id")
    assert "2 starts x 1 seed x 50 problems" in rows.loc["v05.osla_vs_grpo16", "ci_method"]
    assert "1 start x 1 seed" in rows.loc["v05.k4_vs_grpo16", "ci_method"]
    assert f"GRPO G=16's gain over the start policy {g.value:+.3f}" in rows.loc["v05.k4_vs_grpo16", "premise"]
    inputs = C.claim_inputs(Paths(pooled), [c for c in C.CLAIMS if c.id == "v05.k4_vs_grpo16"])
    assert [i for i in inputs if i.startswith("results_start1")] == [
        "results_start1/smoke/eval/s/eval.parquet", "results_start1/smoke/rl/grpo_g16/seed0/eval.parquet"]
    assert "results_start1/smoke/rl/v05_osla/seed0/eval.parquet" in C.claim_inputs(
        Paths(pooled), [c for c in C.CLAIMS if c.id == "v05.osla_vs_grpo16"])
    # a pooled tree whose tables name another start: one line naming the table
    from sparserl.methods.run import method_run
    path = method_run(second, "grpo_g16", 0).eval_dir / "final_per_problem.parquet"
    write_table(pd.read_parquet(path).assign(start=0), path)
    with pytest.raises(C.BadArtifact, match="start \\[0\\], but its tree's pretrain.start_seed is 1"):
        C.rl_accuracy(C.Context(Paths(pooled)), "v05_osla", "grpo_g16")


def test_pooled_seeds_widen_to_t_over_the_runs(repo, tmp_path, monkeypatch):
    """Pooled with 2 seeds a start, the bootstrap interval is never narrower than the
    paired t over the 4 (start, seed) runs, and its text names both."""
    monkeypatch.chdir(tmp_path)
    _, _, pooled = _two_trees(repo, tmp_path, seeds=(0, 1))
    ctx = C.Context(Paths(pooled))
    iv = C.rl_accuracy(ctx, "v05_osla", "grpo_g16")
    assert "2 starts x 2 seeds x 50 problems (2 benchmarks); resampled: starts, seeds, problems" in iv.method
    arm = {m: CR._runs_array(ctx, m, ctx.trees())[0] for m in ("v05_osla", "grpo_g16")}
    bench = CR._runs_array(ctx, "grpo_g16", ctx.trees())[1]["benchmark"].to_numpy()
    diffs = CR._run_accuracies(arm["v05_osla"], bench) - CR._run_accuracies(arm["grpo_g16"], bench)
    _, tlo, thi = t_interval(diffs.to_numpy())
    assert iv.lo <= tlo + 1e-12 and iv.hi >= thi - 1e-12
    assert iv.method.endswith("widened to paired t over 4 runs (starts x seeds)")
