"""The BASIS value study on RL checkpoints (sparserl.studies.basis_checkpoints): which checkpoints a
config studies, the extra snapshot of the studied run (which must change none of its numbers), the
stage tables and Figure 2's table on synthetic caches with a known truth, the CLI, the figures and
the DAG's wiring."""
import copy
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import yaml

from helpers.reference_caches import cache_frame

from sparserl.core.artifacts import read_manifest, read_table, write_table
from sparserl.core.config import load_config
from sparserl.core.paths import Paths
from sparserl.estimators import basis_value
from sparserl.methods.spec import load_method, snapshot_steps, study_snapshot_steps
from sparserl.studies import load_study_data, settings
from sparserl.studies import basis_checkpoints as bc
from sparserl.studies import basis_value as bv


def _cfg(repo, name="tiny", **study):
    cfg = load_config(repo / f"configs/{name}.yaml")
    if study:
        cfg["basis"]["study_checkpoints"] = study
    return cfg


def test_tiny_keeps_step_10_of_grpo_g8_seed0_only(repo):
    cfg = _cfg(repo)
    assert cfg["basis"]["study_checkpoints"]["method"] == "grpo_g8" and cfg["rl"]["steps"] == 40
    g8 = load_method("grpo_g8")
    assert snapshot_steps(cfg["rl"], g8) == [20]  # evaluated, and read by the study as its middle stage
    assert study_snapshot_steps(cfg, g8, 0) == [10]  # kept, not evaluated; final (40) is `final/`
    assert study_snapshot_steps(cfg, g8, 1) == []
    assert study_snapshot_steps(cfg, load_method("grpo_g16"), 0) == []
    cks = bc.study_checkpoints(Paths(cfg))
    assert [(c.stage, c.step, c.label) for c in cks] == [("early", 10, "step00010"), ("middle", 20, "step00020"),
                                                        ("late", 40, "final")]
    run = Paths(cfg).run("grpo_g8", 0)
    assert [c.path for c in cks] == [run.checkpoint(10), run.checkpoint(20), run.final]
    assert cks[0].oracle == Paths(cfg).stage("basis", "oracle", "rl", "grpo_g8", "seed0", "step00010.parquet")
    assert bc.main_checkpoint(Paths(cfg)) == cks[1]
    # small evaluates step 50 of 100 and keeps step 25 for the study
    small = _cfg(repo, "small")
    assert study_snapshot_steps(small, g8, 0) == [25]
    assert [c.label for c in bc.study_checkpoints(Paths(small))] == ["step00025", "step00050", "final"]
    assert bc.study_checkpoints(Paths(_cfg(repo, "smoke"))) == []  # no RL at smoke scale


def test_a_method_that_repeats_another_studies_the_owners_run(repo):
    cfg = _cfg(repo, method="basis_grid_grpo_g1_vanilla", seed=0, fractions=[0.5, 1.0])
    assert bc.study_checkpoints(Paths(cfg))[0].method == "vanilla_g1"
    assert study_snapshot_steps(cfg, load_method("vanilla_g1"), 0) == []  # 20 is evaluated anyway
    cfg["basis"]["study_checkpoints"]["fractions"] = [0.1, 1.0]
    assert study_snapshot_steps(cfg, load_method("vanilla_g1"), 0) == [4]
    cfg["basis"]["study_checkpoints"]["fractions"] = [0.5, 0.25]
    with pytest.raises(ValueError, match="increasing fractions"):
        bc.study_checkpoints(Paths(cfg))


def test_prompt_subset_is_fixed_seeded_and_in_pool_order(repo):
    cfg = _cfg(repo)
    ids = [f"train/level{i // 100}/{i}" for i in range(1000)]
    a, b = bc.study_prompt_ids(cfg, ids), bc.study_prompt_ids(copy.deepcopy(cfg), ids)
    n = cfg["basis"]["study_checkpoints"]["prompts"]
    assert n == 128 and a == b and len(a) == n and len(set(a)) == n
    assert a == [i for i in ids if i in set(a)]  # pool order
    assert len({i.split("/")[1] for i in a}) == 10  # spread over the levels, not the pool's head
    cfg["basis"]["study_checkpoints"]["prompts"] = None
    assert bc.study_prompt_ids(cfg, ids) is None


# --------------------------------------------------------------------------- synthetic caches


def write_pair(ref_path, oracle_path, p_ref, p_oracle, n_ref=64, n_oracle=256, seed=0, cfg=None):
    rng = np.random.default_rng(seed)
    ids = [f"t/{i}" for i in range(len(p_ref))]
    write_table(cache_frame(ids, np.round(np.asarray(p_ref) * n_ref).astype(int), n_ref, rng), ref_path, cfg=cfg)
    write_table(cache_frame(ids, np.round(np.asarray(p_oracle) * n_oracle).astype(int), n_oracle, rng), oracle_path,
                cfg=cfg)


def _settings(**kw):
    s = settings({})["value"]
    s.update({"repeats": 60, "bootstrap": 50, **kw})
    return s


def _ck(stage, fraction, step, label):
    return bc.StudyCheckpoint(method="grpo_g8", seed=0, run_dir=None, stage=stage, fraction=fraction, step=step,
                              label=label, path=None, oracle=None)


def test_stage_tables_are_todays_table_per_checkpoint_with_the_known_truth(tmp_path):
    """Stage 1: every oracle value is 0 or 1, so GRPO's group mean is the truth (MSE exactly 0) and
    REINFORCE++'s batch mean m gives exactly m (1 - m) per batch. Stage 2: values drift from the
    reference; each stage's rows are `mse_by_method` of `simulate` on that stage's caches."""
    rng = np.random.default_rng(3)
    p_ref = rng.integers(1, 64, size=128) / 64
    p1 = (rng.random(128) < 0.4).astype(float)
    p2 = np.clip(p_ref + 0.1, 0, 1)
    stages = []
    for k, p in enumerate((p1, p2)):
        write_pair(tmp_path / f"r{k}.parquet", tmp_path / f"o{k}.parquet", p_ref, p, seed=k)
        stages.append((_ck(("early", "late")[k], (0.5, 1.0)[k], (3, 6)[k], ("step00003", "final")[k]),
                       load_study_data(tmp_path / f"r{k}.parquet", tmp_path / f"o{k}.parquet")))
    s = _settings()
    t = bc.stage_tables(stages, s, seed=7)
    mse = t["stage_mse_by_method"]
    assert list(dict.fromkeys(mse["stage"])) == ["early", "late"]
    assert set(mse.columns) >= {"stage", "fraction", "step", "checkpoint", "method", "mse", "pct_vs_reinforce_pp",
                                "pct_vs_grpo"}
    early = mse[mse["stage"] == "early"].set_index("method")
    assert early.loc["grpo", "mse"] == 0.0 and early.loc["rloo", "mse"] == 0.0
    # REINFORCE++'s exact MSE, batch by batch: b = m, the batch's share of value-1 prompts
    raw = bv.simulate_from_settings(stages[0][1], s, 7)
    rpp = bv.per_batch(raw).set_index(["repeat", "method"]).xs("reinforce_pp", level="method")
    assert np.isclose(early.loc["reinforce_pp", "mse"], rpp["mse"].mean())
    for rep in range(5):
        d = raw[(raw["repeat"] == rep) & (raw["method"] == "reinforce_pp")]
        m = float(d[d["p_bin"] == 4]["n"].sum()) / 64  # bin [0.8, 1] holds the value-1 prompts
        assert np.isclose(rpp.loc[rep, "mse"], m * (1 - m)) and np.isclose(rpp.loc[rep, "bias"], 0.0)
    # each stage is today's table on its caches, not a copy of it
    for ck, data in stages:
        want = bv.mse_by_method(bv.simulate_from_settings(data, s, 7), s["bootstrap"], 7)
        got = mse[mse["stage"] == ck.stage].drop(columns=["stage", "fraction", "step", "checkpoint", "prompts",
                                                          "mean_oracle_p", "mean_reference_phat"])
        pd.testing.assert_frame_equal(got.reset_index(drop=True), want)
    assert mse[mse["stage"] == "late"]["mean_oracle_p"].iloc[0] == pytest.approx(stages[1][1].p.mean())


def test_figure2_initial_estimate_has_its_exact_mse_and_refinement_helps(tmp_path):
    """With B = every prompt, each batch is the whole set, so the initial estimate's MSE at every
    beta is exactly mean (V*_beta(phat) - p)^2; with an exact reference (phat = p) it is 0 at
    beta = inf. With equal values p = 1/2 the refined UNB at beta = inf is the leave-one-out mean
    of the other B - 1 rewards: MSE ~ p (1 - p) / (B - 1)."""
    P = 64
    p_ref = np.random.default_rng(1).integers(1, 64, size=P) / 64
    p = np.clip(p_ref + 0.125, 0, 1)
    write_pair(tmp_path / "r.parquet", tmp_path / "o.parquet", p_ref, p)
    data = load_study_data(tmp_path / "r.parquet", tmp_path / "o.parquet")
    s = _settings(B=P, repeats=40)
    f2 = bc.initial_vs_refined(data, s, seed=0)
    grid = bv.beta_grid(s["beta_grid_size"])
    init = f2[f2["estimator"] == "initial"].sort_values("beta_index")
    assert np.allclose(init["beta"], grid)
    exact = [np.mean((basis_value(data.ref.mean(axis=1), b) - data.p) ** 2) for b in grid]
    assert np.allclose(init["mse"], exact, rtol=1e-12, atol=1e-15)
    ref = f2[f2["estimator"] == "refined"].sort_values("beta_index")
    assert ref["frac_chosen"].sum() == pytest.approx(1.0) and (init["frac_chosen"] == ref["frac_chosen"].values).all()
    # the values drifted up from the reference: the batch corrects the level (Figure 2's reading)
    assert ref["mse"].iloc[-1] < 0.5 * init["mse"].iloc[-1]
    assert ref["mse"].min() < init["mse"].min()
    # at beta -> 0 every V^ is within eps of 1: outside the active set, baseline 0 (`inactive: zero`)
    assert ref["mse"].iloc[0] == pytest.approx(np.mean(data.p ** 2))
    # exact reference, equal values
    write_pair(tmp_path / "r2.parquet", tmp_path / "o2.parquet", [0.5] * P, [0.5] * P)
    d2 = load_study_data(tmp_path / "r2.parquet", tmp_path / "o2.parquet")
    f = bc.initial_vs_refined(d2, _settings(B=P, repeats=400), seed=0).set_index(["estimator", "beta_index"])
    k = len(grid) - 1  # beta = inf
    assert f.loc[("initial", k), "mse"] == 0.0
    assert f.loc[("refined", k), "mse"] == pytest.approx(0.25 / (P - 1), rel=0.2)


# --------------------------------------------------------------------------- the studied run


@pytest.fixture()
def world(tmp_path, tiny_lm, repo):
    from sparserl.models.policies import save_hf
    from sparserl.tasks import procedural
    cfg = load_config(repo / "configs/smoke.yaml")
    cfg["results_dir"] = str(tmp_path / "results")
    cfg["rl"] = {"policy": "s", "methods": ["grpo_g4"], "seeds": [0], "steps": 8,
                 "rollouts_per_step": 16, "lr": 1e-4, "checkpoint_every": 2, "eval_fractions": [0.5],
                 "mini_batches": 2}
    cfg["rollout"]["max_new_tokens"] = 8
    P = Paths(cfg)
    write_table(procedural.make_train_pool(cfg), P.train_pool())
    model, tok = tiny_lm
    save_hf(model, tok, P.policy("s"), {"test": True})
    return cfg


def test_the_extra_snapshot_changes_no_number_of_the_run(world):
    """The study's run with an extra checkpoint (step 2) gives the same metrics, rollouts and final
    weights as without it; the checkpoint is kept but not evaluated; the oracle command then rolls
    out that checkpoint on the study's prompts."""
    import shutil
    from sparserl.cli import main
    from sparserl.engines.local.trainer import train
    from sparserl.engines.report import run_checkpoints
    from sparserl.methods.run import resolve_run
    plain = copy.deepcopy(world)
    plain["results_dir"] = world["results_dir"] + "_plain"
    Pp, P = Paths(plain), Paths(world)
    Pp.train_pool().parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(P.train_pool(), Pp.train_pool())
    shutil.copytree(P.policy("s"), Pp.policy("s"))
    study = copy.deepcopy(world)
    study["basis"]["study_checkpoints"] = {"method": "grpo_g4", "seed": 0, "fractions": [0.25, 0.5, 1.0], "prompts": 8}
    assert study_snapshot_steps(study, load_method("grpo_g4"), 0) == [2]
    a, b = train(plain, "grpo_g4", 0), train(study, "grpo_g4", 0)
    ma, mb = pd.read_parquet(a / "metrics.parquet"), pd.read_parquet(b / "metrics.parquet")
    pd.testing.assert_frame_equal(ma.drop(columns=["wall_time_s"]), mb.drop(columns=["wall_time_s"]))
    assert (a / "rollouts.parquet").read_bytes() == (b / "rollouts.parquet").read_bytes()
    weights = sorted(p.name for p in (a / "final").iterdir() if p.suffix in (".safetensors", ".bin"))
    assert weights and all((a / "final" / w).read_bytes() == (b / "final" / w).read_bytes() for w in weights)
    assert sorted(p.name for p in (a / "checkpoints").iterdir()) == ["step00004"]
    assert sorted(p.name for p in (b / "checkpoints").iterdir()) == ["step00002", "step00004"]
    assert [n for n, _ in run_checkpoints(resolve_run(study, "grpo_g4", 0, read_choice=False))] == ["step00004", "final"]  # not evaluated
    # the oracle of the early checkpoint, on 8 seeded prompts of the pool
    cfg_path = P.results / "study.yaml"
    cfg_path.write_text(yaml.safe_dump(study))
    ck = bc.study_checkpoints(Paths(study))[0]
    assert main(["study-checkpoint-oracle", "--config", str(cfg_path), "--checkpoint", "early", "--n", "3"]) == 0
    orc = read_table(ck.oracle)
    pool_ids = read_table(P.train_pool())["id"].tolist()
    assert orc["prompt_id"].tolist() == bc.study_prompt_ids(study, pool_ids) and (orc["n"] == 3).all()
    assert read_manifest(ck.oracle)["policy"] == "grpo_g4/seed0/step00002"
    # a missing checkpoint names itself and the fix
    shutil.rmtree(ck.path)
    with pytest.raises(SystemExit, match="step00002 is missing.*snakemake --cores 2 -f"):
        main(["study-checkpoint-oracle", "--config", str(cfg_path), "--checkpoint", "step00002"])


# --------------------------------------------------------------------------- CLI, figures, DAG


@pytest.mark.e2e  # CLI, tables and figures
def test_cli_writes_both_stage_tables_and_the_figures_draw_them(repo, tmp_path, monkeypatch):
    from sparserl.cli import main
    from sparserl.cli.figures import draw_figure
    monkeypatch.chdir(tmp_path)
    cfg = load_config(repo / "configs/tiny.yaml")
    cfg["basis"]["study"] = {"value": {"repeats": 20, "bootstrap": 20}}
    cfg_path = tmp_path / "tiny.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    P = Paths(cfg)
    rng = np.random.default_rng(0)
    p_ref = rng.integers(1, 64, size=96) / 64
    for k, ck in enumerate(bc.study_checkpoints(Paths(cfg))):  # values rise over training
        write_pair(P.reference_cache("s"), ck.oracle, p_ref, np.clip(p_ref + 0.05 * k, 0, 1), seed=k, cfg=cfg)
    assert main(["study-basis-stages", "--config", str(cfg_path)]) == 0
    SP = Paths(cfg).studies
    mse = read_table(SP.table("basis", "stage_mse_by_method"))
    f2 = pd.read_csv(SP.csv("basis", "stage_initial_vs_refined"))
    assert list(dict.fromkeys(mse["stage"])) == ["early", "middle", "late"]
    assert list(dict.fromkeys(f2["stage"])) == ["early", "middle", "late"]
    info = read_manifest(SP.table("basis", "stage_mse_by_method"))
    assert info["data"]["reference_policy"] == "s" and len(info["data"]["checkpoints"]) == 3
    for fig_id in ("basis/f2_initial_vs_refined", "basis/a1_mse_by_stage"):
        png = draw_figure(fig_id, cfg, Paths(cfg))
        assert png.read_bytes()[:4] == b"\x89PNG" and png.with_suffix(".csv").exists()
    # F3 / F5 default to the middle checkpoint against the start policy; the pair is the stress test
    v = bc.study_variants(Paths(cfg))
    assert v[""] == (P.reference_cache("s"), bc.study_checkpoints(Paths(cfg))[1].oracle)
    assert v["stress_"] == (P.reference_cache("s@p50"), P.oracle("s@p75"))
    assert bc.study_variants(Paths(load_config(repo / "configs/smoke.yaml"))).keys() == {""}


@pytest.mark.e2e  # DAG dry run
def test_tiny_dry_run_wires_the_checkpoint_oracles_and_the_stress_test(repo, tmp_path):
    cmd = [sys.executable, "-m", "snakemake", "all", "-s", str(repo / "Snakefile"), "-d", str(tmp_path), "-n"]
    out = subprocess.run(cmd, cwd=repo, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    log = out.stdout + out.stderr
    blocks = {}
    for b in log.split("\nrule ")[1:]:
        name = b.split(":")[0]
        blocks.setdefault(name, []).append(b)
    orc = blocks["checkpoint_oracle"]
    assert len(orc) == 3
    for b in orc:  # each waits on the studied run's final checkpoint
        assert "results/tiny/rl/grpo_g8/seed0/final" in b.split("input:")[1].split("\n")[0]
    assert "results/tiny/basis/reference/s.parquet" in blocks["study_basis_stages"][0]
    main = blocks["study_basis_batches"][0].split("input:")[1].split("\n")[0]
    assert "reference/s.parquet" in main and "oracle/rl/grpo_g8/seed0/step00020.parquet" in main
    stress = blocks["study_basis_stress_batches"][0].split("input:")[1].split("\n")[0]
    assert "reference/s@p50.parquet" in stress and "oracle/s@p75.parquet" in stress
    for f in ("basis/f2_initial_vs_refined.png", "basis/a1_mse_by_stage.png", "basis/stress_f3a_mse_by_method.png",
              "basis/stress_f3d_zero_one_rate.png", "basis/stress_summary.json", "basis/f5d_sensitivity_grid.png"):
        assert f"paper_figures/tiny/{f}" in log, f
    assert "study_basis_stress_sensitivity" not in blocks and "stress_sensitivity" not in log
