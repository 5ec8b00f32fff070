"""The figure registry: every figure draws from small synthetic cached tables, the study figures
keep their ids and paths, RL learning curves and final accuracy, clear errors, generated rules."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import matplotlib
import matplotlib.container
import numpy as np
import pandas as pd
import pytest
import yaml

from helpers.head_to_head_tables import write_head_to_head_tables
from sparserl.cli.figures import draw_figure
from sparserl.core.artifacts import write_table
from sparserl.core.paths import Paths
from sparserl.figures import FigureError, MissingTableError, get_figure, list_figures, registered
from sparserl.figures import basis_checkpoints
from sparserl.figures.registry import footer, pyplot
from sparserl.figures.style import method_color
from helpers.figure_checks import assert_error_bars_stated

# every study figure before the registry (id -> the table it draws, in the same paper's dir)
STUDY_FIGURES = {
    "basis/f3a_mse_by_method": "mse_by_method", "basis/f3b_mse_by_heterogeneity": "mse_by_heterogeneity",
    "basis/f3c_mse_by_difficulty": "mse_by_difficulty", "basis/f3d_zero_one_rate": "zero_one_rate",
    "basis/f5a_sensitivity_eps": "sensitivity_eps", "basis/f5b_sensitivity_n": "sensitivity_n",
    "basis/f5c_sensitivity_B": "sensitivity_B", "basis/f5d_sensitivity_grid": "sensitivity_grid",
    "v05/stat_bias_by_k": "bias_mse_by_k", "v05/stat_mse_by_k": "bias_mse_by_k", "v05/stat_budget_by_offset": "budget_by_offset",
    "v05/stat_c_sweep": "c_sweep", "v05/stat_stopping_hist": "stopping_hist",
}
RL_FIGURES = ["head_to_head/learning_curves", "head_to_head/final_accuracy"] + ["head_to_head/" + n for n in (
    "accuracy_vs_rollouts", "accuracy_vs_wall_time", "ranking", "sharpening_curves", "aggregates_iqm",
    "aggregates_improvement", "aggregates_profile", "start_pass_at_k")]
V0_FIGURES = ["v0/t1_sequential", "v0/t2_strict", "v0/f3_tracking", "v0/f4_robustness",
              "v0/t6_ablations", "v0/f5_routing"]  # smoke and tiny have v0.harvest
LE_CRITIQUE_FIGURES = ["le_critique/" + n for n in ("f3_pvf_rewards", "f5_tether_rewards", "f6_tether_rho",
                                                    "f8_lambda_sweep", "f4_explained_variance", "f7_final_rewards")]
METHODS, SEEDS = ["grpo_g8", "rloo_g8", "reinforce_pp_g1"], [0, 1]
# figures whose methods, RL checkpoints or OOD benchmarks the tiny config has and the smoke one
# (with its test RL section) lacks
TINY_ONLY = ({"head_to_head/grpo_vs_v05_k", "basis/t2_ood", "basis/t1_policy_optimization",
              "basis/f6_training_curves", "basis/f8_beta_t"}
             | {f"v05/{n}" for n in ("f1_accuracy_curves", "f3_grad_norm", "f4_entropy", "f5_fixed_k")}
             | set(basis_checkpoints.FIGURES))
WORLD2_ONLY = {"world/start_policy"}  # world 2.0 only (tasks.world: tiny's, not smoke's; tests/tasks/test_world2.py)


@pytest.fixture
def cfg(repo, tmp_path, monkeypatch):
    """The smoke config with a small `rl` section, run from an empty directory."""
    c = yaml.safe_load((repo / "configs/smoke.yaml").read_text())
    rl = yaml.safe_load((repo / "configs/tiny.yaml").read_text())["rl"]
    c["rl"] = {**rl, "methods": METHODS, "seeds": SEEDS, "steps": 4}
    monkeypatch.chdir(tmp_path)
    return c


def _study_tables() -> dict[str, pd.DataFrame]:
    """One small table of each study table name, with the columns its figures draw."""
    methods = ["basis_unb", "reinforce_pp", "grpo"]
    bins = [(0, "[0,0.5)"), (1, "[0.5,1]")]
    out = {
        "mse_by_method": pd.DataFrame({"method": methods, "mse": [0.02, 0.06, 0.03], "mse_se": [0.002] * 3,
                                       "pct_vs_reinforce_pp": [-66.0, 0.0, -50.0]}),
        "mse_by_heterogeneity": pd.DataFrame([{"method": m, "center": c, "mse": 0.01 * (i + 1) + c, "mse_se": 0.001}
                                              for i, m in enumerate(methods) for c in (0.1, 0.3)]),
        "mse_by_difficulty": pd.DataFrame([{"method": m, "p_bin": b, "p_bin_label": lab, "mse": 0.01 * (i + b + 1),
                                            "mse_se": 0.001} for i, m in enumerate(methods) for b, lab in bins]),
        "zero_one_rate": pd.DataFrame([{"method": m, "p_bin": b, "p_bin_label": lab, "rate": 0.1 * (i + 1)}
                                       for i, m in enumerate(methods) for b, lab in bins + [(-1, "all")]]),
        "bias_mse_by_k": pd.DataFrame([{"p_bin": -1, "estimator": e, "prior": pr, "k": k,
                                        "abs_bias_max": 0.5 / np.sqrt(k), "mse": 0.1 / k}
                                       for e, prs in (("fusion", ("oracle+0", "constant_0.5")),
                                                      ("empirical_only", ("oracle+0",)))
                                       for pr in prs for k in (1, 2, 4)]),
        "budget_by_offset": pd.DataFrame([{"prior": f"oracle+{o:g}", "prior_kind": "oracle", "offset": o, "c": 0.0039,
                                           "reject_rate_init_exact": o, "reject_rate_init": o, "mean_budget": 4 + 4 * o,
                                           "budget_se": 0.1, "dispatched_per_prompt": 5 + 4 * o}
                                          for o in (0.0, 0.3, 0.7)]
                                         + [{"prior": "constant_0.5", "prior_kind": "constant", "offset": np.nan,
                                             "c": 0.0039, "reject_rate_init_exact": 0.4, "reject_rate_init": 0.4,
                                             "mean_budget": 6.0, "budget_se": 0.1, "dispatched_per_prompt": 7.0}]),
        "c_sweep": pd.DataFrame([{"prior": pr, "c": c, "mean_budget": 4 / c ** 0.2, "budget_se": 0.1,
                                  "regret_over_c": 1.0 + c} for pr in ("oracle+0", "constant_0.5") for c in (0.01, 0.002)]),
        "stopping_hist": pd.DataFrame([{"prior": pr, "c": c, "k": k, "frac": f}
                                       for pr in ("oracle+0", "constant_0.5", "pool_mean") for c in (0.01, 0.002)
                                       for k, f in ((4, 0.6), (6, 0.3), (8, 0.1))]),
    }
    for p in ("eps", "n", "B", "grid"):
        out[f"sensitivity_{p}"] = pd.DataFrame({"param": p, "value": [1.0, 4.0, 16.0], "mse": [0.03, 0.02, 0.02],
                                                "mse_se": 0.002, "mse_reinforce_pp": 0.06,
                                                "skipped": ["", "", "n > cached rollouts"]})
    return out


def _rewards(method: str, seed: int, steps=np.arange(1, 5)) -> np.ndarray:
    """Train reward of a synthetic run: rises with the step, offset by method and seed."""
    return 0.1 * METHODS.index(method) + 0.05 * steps + 0.02 * seed


def write_rl_tables(cfg) -> pd.DataFrame:
    """Each run's metrics.parquet and the runs table `sparserl rl-summary` writes."""
    P = Paths(cfg)
    rows = []
    for m in METHODS:
        for s in SEEDS:
            steps = np.arange(1, 5)
            write_table(pd.DataFrame({"step": steps, "reward_mean": _rewards(m, s), "rollouts_total": 8 * steps}),
                        P.run(m, s).metrics, cfg=cfg)
            rows.append({"method": m, "seed": s, "eval_accuracy_final": 0.2 + 0.1 * METHODS.index(m) + 0.04 * s})
    runs = pd.DataFrame(rows)
    write_table(runs, P.rl_runs(), cfg=cfg)
    return runs


def write_v0_tables(cfg) -> None:
    """V0's metrics and predictions tables (`sparserl v0-table`), two policies, three checkpoints."""
    P = Paths(cfg)
    rng = np.random.default_rng(0)
    methods = ["v0", "knn_contextual", "outcome_model", "oracle_p", "level_only"]  # references drawn hatched
    for protocol in ("sequential", "strict"):
        metrics = pd.DataFrame([{"protocol": protocol, "method": m, "model": pol, "intra_auc": 0.6 + 0.05 * i,
                                 "calibration_mse": 0.1, "head": "gp", "embedder": "toy"}
                                for i, m in enumerate(methods) for pol in ("s", "m", "all")])
        write_table(metrics, P.value_eval(f"v0_{protocol}"), cfg=cfg)
        rows = []
        for m in methods:
            for pol, base in (("s", 0.2), ("m", 0.4)):
                for step in (0, 4, 8):
                    v = rng.uniform(size=24)
                    rows += [{"method": m, "model": pol, "step": step, "value": x, "p": x + rng.normal(0, 0.3),
                              "split": "onpolicy" if protocol == "sequential" else "heldout",
                              "domain": "harder" if j % 3 == 0 else "in-domain"} for j, x in enumerate(v * 0 + base + v / 2)]
        write_table(pd.DataFrame(rows), P.value_eval(f"v0_{protocol}_predictions"), cfg=cfg)
    write_table(pd.DataFrame({"variant": ["v0", "static queries", "rank only"], "intra_auc": [0.7, 0.65, 0.6],
                              "calibration_mse": [0.1, 0.12, 0.2], "head": "gp", "embedder": "toy"}),
                P.value_eval("v0_ablations"), cfg=cfg)
    routing = [{"router": r, "tau": t, "cost": 1e5 + 1e6 * t, "accuracy": 0.3 + 0.4 * t} for r in ("v0", "oracle")
               for t in (0.2, 0.5, 0.8)]
    routing += [{"router": f"always_{m}", "tau": np.nan, "cost": c, "accuracy": a}
                for m, c, a in (("s", 1e5, 0.3), ("m", 1e6, 0.6))]
    write_table(pd.DataFrame(routing), P.value_eval("v0_routing"), cfg=cfg)


def write_all_tables(cfg) -> None:
    P = Paths(cfg)
    write_v0_tables(cfg)
    for name, df in _study_tables().items():
        paper = "v05" if name in ("bias_mse_by_k", "budget_by_offset", "c_sweep", "stopping_hist") else "basis"
        write_table(df, P.figure_dir(paper) / f"{name}.parquet", cfg=cfg)
    write_head_to_head_tables(cfg)  # the head-to-head study on synthetic runs of METHODS
    write_rl_tables(cfg)


def test_registry_keeps_every_study_figure_with_its_table_and_png(cfg):
    figs = {f.id: f for f in list_figures(cfg)}
    assert list(figs) == list(STUDY_FIGURES) + RL_FIGURES + V0_FIGURES
    for fig_id, table in STUDY_FIGURES.items():
        group, name = fig_id.split("/")
        f = figs[fig_id]
        assert f.output(Paths(cfg)) == Path(f"paper_figures/smoke/{group}/{name}.png")
        assert f.tables(Paths(cfg)) == [Path(f"paper_figures/smoke/{group}/{table}.parquet")]
        assert f.caption and f.rule == f"figure_{group}_{name}"
    assert figs["head_to_head/learning_curves"].output(Paths(cfg)) == Path("paper_figures/smoke/head_to_head/learning_curves.png")
    assert figs["head_to_head/learning_curves"].tables(Paths(cfg)) == [Path(f"results/smoke/rl/{m}/seed{s}/metrics.parquet")
                                                      for m in METHODS for s in SEEDS]
    assert figs["head_to_head/final_accuracy"].tables(Paths(cfg)) == [Path("results/smoke/rl/runs.parquet")]
    # v0/f5_budget needs the budget runs, Le Critique's figures a critique section (smoke has neither)
    assert {f.id for f in registered()} == (set(figs) | {"v0/f5_budget"} | set(LE_CRITIQUE_FIGURES) | TINY_ONLY
                                            | WORLD2_ONLY)


def test_scale_captions_state_the_configs_settings():
    """Captions are registered at import, with no config in reach, so the tiny and small settings
    they state are checked against configs/tiny.yaml and configs/small.yaml here."""
    from sparserl.core.config import load_config
    from sparserl.figures import v05
    from sparserl.figures.registry import registered
    root = Path(__file__).resolve().parents[2]
    t, sm = (load_config([str(root / "configs" / f"{n}.yaml")]) for n in ("tiny", "small"))
    f6 = next(f for f in registered() if f.id == "basis/f6_training_curves").caption
    for text in (" ".join(v05.DIFFERS.split()), " ".join(f6.split())):
        assert f"{t['rl']['steps']} (tiny) or {sm['rl']['steps']} (small) steps" in text
        assert f"policy {t['rl']['policy']} " in text and f" or {sm['rl']['policy']} (" in text
        assert "one seed at tiny" in text and len(t["rl"]["seeds"]) == 1
    per_step = f"{t['rl']['rollouts_per_step']} (tiny) or {sm['rl']['rollouts_per_step']} (small)"
    assert f"steps of {per_step} rollouts" in v05.DIFFERS
    # BASIS Table 1 and Fig. 8: BASIS runs steps_factor of the steps (configs/methods)
    from sparserl.methods.spec import load_method, total_steps
    cap = {f.id: " ".join(f.caption.split()) for f in registered()}
    assert (f"{t['rl']['steps']} (tiny) or {sm['rl']['steps']} (small) steps (BASIS half) of {per_step} rollouts"
            in cap["basis/t1_policy_optimization"])
    half = {c["scale"]: total_steps(c["rl"], load_method("basis_grid_grpo_g1_basis")) for c in (t, sm)}
    assert f"{half['tiny']} (tiny) or {half['small']} (small) BASIS steps" in cap["basis/f8_beta_t"]
    assert f"of {per_step} single-rollout prompts" in cap["basis/f8_beta_t"]
    assert "three at small" in v05.DIFFERS and len(sm["rl"]["seeds"]) == 3
    metric = " or ".join(f"mean@{c['evaluation']['default']['k']} ({c['scale']})" for c in (t, sm))
    assert metric in v05.DIFFERS and metric in cap["basis/t1_policy_optimization"]
    for c in (t, sm):
        ev = c["evaluation"]["default"]
        assert f"{metric} at top-p {ev['top_p']}" in v05.DIFFERS
        assert f"{len(c['rl']['eval_fractions']) + 2} evaluations a run" in " ".join(f6.split())


def test_figures_follow_the_config(cfg):
    no_rl = {k: v for k, v in cfg.items() if k not in ("rl", "v0")}
    assert [f.id for f in list_figures(no_rl)] == list(STUDY_FIGURES)
    no_study = {**cfg, "basis": {k: v for k, v in cfg["basis"].items() if k != "study_oracle"}}
    assert [f.id for f in list_figures(no_study)] == RL_FIGURES + V0_FIGURES
    assert [f.id for f in list_figures({**no_study, "v0": {}})] == RL_FIGURES
    with pytest.raises(FigureError, match="v0.harvest"):
        draw_figure("v0/f3_tracking", no_rl, Paths(no_rl))
    with pytest.raises(FigureError, match="`rl` section"):
        draw_figure("head_to_head/learning_curves", no_rl, Paths(no_rl))


@pytest.mark.e2e  # every figure, ~12 s
def test_every_registered_figure_draws_from_cached_tables(cfg, tmp_path):
    write_all_tables(cfg)
    for f in list_figures(cfg):
        out = draw_figure(f.id, cfg, Paths(cfg))
        assert out == f.output(Paths(cfg)) and out.read_bytes()[:4] == b"\x89PNG" and out.stat().st_size > 5000, f.id
    assert len(list((tmp_path / "paper_figures" / "smoke").rglob("*.png"))) == \
        len(STUDY_FIGURES) + len(RL_FIGURES) + len(V0_FIGURES)
    # --out writes elsewhere; matplotlib stays on Agg (no display needed)
    other = draw_figure("v05/stat_stopping_hist", cfg, Paths(cfg), out=tmp_path / "x" / "h.png")
    assert other.exists() and matplotlib.get_backend().lower() == "agg"


def test_learning_curves_average_seeds_and_band_their_spread(cfg):
    write_rl_tables(cfg)
    f = get_figure("head_to_head/learning_curves")
    data = f.read(cfg, f.tables(Paths(cfg)))
    df = data["df"]
    assert set(df["method"]) == set(METHODS) and len(df) == len(METHODS) * 4 and (df["seeds"] == 2).all()
    assert data["facets"] == [("group baselines", METHODS)]  # one family: one panel
    fig, axes = f.layout(data)
    f.draw(data, axes)
    ax, legend_ax = axes[0]
    lines = {ln.get_label(): ln for ln in ax.lines}
    assert [t.get_text() for t in legend_ax.get_legend().get_texts()] == METHODS
    assert list(lines) == METHODS  # the config's order
    for m in METHODS:
        expected = np.mean([_rewards(m, s) for s in SEEDS], axis=0)  # 4 steps: a window of 1
        np.testing.assert_allclose(lines[m].get_ydata(), expected)
        np.testing.assert_allclose(lines[m].get_xdata(), np.arange(1, 5))
        assert lines[m].get_color() == method_color(m)  # the registry's colour, not a cycle
    bands = [c for c in ax.collections if c.get_paths()]
    assert len(bands) == len(METHODS)
    # the band spans seed 0 (lowest) to seed 1 (highest) of the first method
    verts = bands[0].get_paths()[0].vertices
    assert verts[:, 1].min() == pytest.approx(_rewards(METHODS[0], 0).min())
    assert verts[:, 1].max() == pytest.approx(_rewards(METHODS[0], 1).max())
    assert "band: the seeds' min–max" in fig._suptitle.get_text()
    pyplot().close(fig)
    assert draw_figure("head_to_head/learning_curves", cfg, Paths(cfg)).exists()


@pytest.mark.e2e  # the study, then its figures
def test_learning_curves_are_smoothed_and_faceted_by_family(cfg):
    """30 methods of four families: one panel each, grpo_g8 dashed grey in the others; 60 steps
    smoothed by a centred rolling mean of 5 (each seed, then their mean and min-max)."""
    from sparserl.methods.run import method_run
    from sparserl.methods.spec import method_names
    methods = method_names()[:30]
    cfg = {**cfg, "rl": {**cfg["rl"], "methods": methods}}
    rng, steps = np.random.default_rng(0), np.arange(1, 61)
    noisy = {}
    for m in methods:
        for s in SEEDS:
            path = method_run(cfg, m, s).metrics  # methods of one spec share a run
            noisy[m, s] = noisy.get(path)
            if noisy[m, s] is None:
                noisy[m, s] = noisy[path] = 0.01 * steps + rng.normal(0, 0.1, len(steps))
                write_table(pd.DataFrame({"step": steps, "reward_mean": noisy[m, s]}), path, cfg=cfg)
    f = get_figure("head_to_head/learning_curves")
    data = f.read(cfg, f.tables(Paths(cfg)))
    assert data["window"] == 5
    titles = [t for t, _ in data["facets"]]
    assert titles == ["group baselines", "BASIS", "V0.5 and V0 priors", "Le Critique critics"]
    assert sorted(m for _, ms in data["facets"] for m in ms) == sorted(methods)
    fig, axes = f.layout(data)
    f.draw(data, axes)
    panels = {ax.get_title().split(" (")[0]: ax for ax in axes[:, 0::2].ravel() if ax.get_title()}
    assert list(panels) == titles
    basis = {ln.get_label(): ln for ln in panels["BASIS"].lines}
    assert "grpo_g8 (reference)" in basis and basis["grpo_g8 (reference)"].get_linestyle() == "--"
    m = "basis_grid_gpg_g1_basis"
    smoothed = [pd.Series(noisy[m, s]).rolling(5, center=True, min_periods=1).mean() for s in SEEDS]
    np.testing.assert_allclose(basis[m].get_ydata(), np.mean(smoothed, axis=0))
    pyplot().close(fig)
    out = draw_figure("head_to_head/learning_curves", cfg, Paths(cfg))
    assert out.stat().st_size > 20_000


def test_every_method_has_its_own_clearly_distinct_colour(monkeypatch):
    """Every method of configs/methods (and the study's estimators) a colour at least MIN_DELTA_E
    (CIE76) from every other; a new method gets one as far from all of them, not a GRPO shade."""
    from sparserl.figures import style
    from sparserl.figures.studies import LABELS
    from sparserl.methods.spec import method_names
    names = list(dict.fromkeys(method_names() + list(LABELS)))
    colours = [method_color(m) for m in names]
    assert len(set(colours)) == len(names)
    assert style.min_delta_e(colours) >= style.MIN_DELTA_E
    new = method_color("grpo_median")
    assert style.min_delta_e(colours + [new]) >= style.MIN_DELTA_E
    # two new methods registered in configs/methods: distinct even when their hashes meet
    added = ("grpo_median", "rloo_trimmed", "zz_new")
    monkeypatch.setattr(style, "_registered", lambda: tuple(method_names()) + added)
    style.method_color.cache_clear()
    try:
        got = [style.method_color(m) for m in added]
        assert style.min_delta_e(colours + got) >= style.MIN_DELTA_E
        monkeypatch.setattr(style, "_slot", lambda name: 3)  # every hash the same slot
        style._new_assignment.cache_clear()
        style.method_color.cache_clear()
        new = sorted(n for n in style._registered() if n not in style.METHOD_COLORS)
        assert [style.method_color(m) for m in new] == [style.NEW_COLORS[3 + i] for i in range(len(new))]
    finally:
        style._new_assignment.cache_clear()
        style.method_color.cache_clear()


@pytest.mark.e2e  # every figure
def test_every_figure_that_draws_error_bars_says_what_they_are(cfg):
    write_all_tables(cfg)
    drew = {f.id for f in list_figures(cfg) if assert_error_bars_stated(f, cfg)}
    assert {"head_to_head/learning_curves", "head_to_head/final_accuracy", "head_to_head/ranking",
            "basis/f3a_mse_by_method", "v05/stat_c_sweep"} <= drew
    # the footer carries the statement
    fig = pyplot().figure()
    footer(fig, [Paths(cfg).rl_runs()], cfg, bars=get_figure("head_to_head/final_accuracy").bars)
    assert fig.texts[0].get_text().endswith("error bars / bands: ±1 sd of the final accuracy across seeds")
    pyplot().close(fig)


def test_footer_keeps_the_dirty_mark(cfg):
    from sparserl.core.artifacts import manifest_path
    from sparserl.figures.registry import short_commit
    sha = "0123456789abcdef0123456789abcdef01234567"
    assert short_commit(sha + "-dirty") == "0123456789ab-dirty"
    assert short_commit(sha) == "0123456789ab"
    write_rl_tables(cfg)
    runs = Paths(cfg).rl_runs()
    meta = manifest_path(runs)
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "git_commit": sha + "-dirty"}))
    fig = pyplot().figure()
    footer(fig, [runs], cfg)
    assert "commit 0123456789ab-dirty" in fig.texts[0].get_text()
    pyplot().close(fig)


def test_routing_labels_stay_inside_the_figure(cfg):
    """v0/f5_routing: the most expensive policy's label (always_l) points left, inside the axes."""
    write_v0_tables(cfg)
    f = get_figure("v0/f5_routing")
    data = f.read(cfg, f.tables(Paths(cfg)))
    fig, ax = f.layout(data)
    f.draw(data, ax)
    fig.tight_layout()
    fig.canvas.draw()
    box = fig.bbox
    for t in ax.texts:
        ext = t.get_window_extent()
        assert box.x0 <= ext.x0 and ext.x1 <= box.x1, t.get_text()
    assert {t.get_text(): t.get_ha() for t in ax.texts} == {"always_s": "left", "always_m": "right"}
    pyplot().close(fig)


def test_final_accuracy_bars_are_seed_means_with_sd(cfg):
    runs = write_rl_tables(cfg)
    f = get_figure("head_to_head/final_accuracy")
    data = f.read(cfg, f.tables(Paths(cfg)))
    fig, ax = f.layout(data)
    f.draw(data, ax)
    heights = [p.get_height() for p in ax.patches]
    expected = runs.groupby("method")["eval_accuracy_final"].mean().reindex(METHODS)
    np.testing.assert_allclose(heights, expected.to_numpy())
    assert [t.get_text() for t in ax.get_xticklabels()] == METHODS
    bars = next(c for c in ax.containers if isinstance(c, matplotlib.container.BarContainer))
    err = bars.errorbar.lines[2][0].get_segments()
    sd = runs.groupby("method")["eval_accuracy_final"].std(ddof=1).reindex(METHODS).to_numpy()
    np.testing.assert_allclose([s[1, 1] - s[0, 1] for s in err], 2 * sd)
    pyplot().close(fig)


def test_footer_names_scale_config_commit_and_tables(cfg):
    write_rl_tables(cfg)
    P = Paths(cfg)
    fig = pyplot().figure()
    footer(fig, [P.rl_runs()], cfg)
    footer(fig, [P.run(m, 0).metrics for m in METHODS], cfg)
    one, many = (t.get_text() for t in fig.texts)
    pyplot().close(fig)
    assert "scale=smoke  [SMOKE SCALE: not paper numbers]" in one and one.endswith("table runs.parquet")
    assert "config " in one and " · commit " in one
    assert many.endswith("3 tables: metrics.parquet")


def test_unknown_id_names_the_known_ones(cfg, tmp_path):
    with pytest.raises(FigureError, match="unknown figure 'basis/nope'.*basis/f3a_mse_by_method.*head_to_head/learning_curves"):
        draw_figure("basis/nope", cfg, Paths(cfg))
    from sparserl.cli import main
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    with pytest.raises(SystemExit, match="unknown figure 'x/y'; known: .*v05/stat_c_sweep"):
        main(["figure", "--config", str(path), "--id", "x/y"])


def test_missing_table_names_the_file_and_what_builds_it(cfg, tmp_path):
    with pytest.raises(MissingTableError, match=r"paper_figures/smoke/v05/bias_mse_by_k\.parquet.*"
                                                r"rule study_v05_bias \(`sparserl study-v05-bias`\)"):
        draw_figure("v05/stat_mse_by_k", cfg, Paths(cfg))
    write_rl_tables(cfg)
    Paths(cfg).run("rloo_g8", 1).metrics.unlink()
    with pytest.raises(MissingTableError, match=r"results/smoke/rl/rloo_g8/seed1/metrics\.parquet.*rule rl_train"):
        draw_figure("head_to_head/learning_curves", cfg, Paths(cfg))
    assert not (tmp_path / "paper_figures" / "smoke" / "rl" / "learning_curves.png").exists()


def test_cli_draws_and_lists(cfg, tmp_path, capsys):
    from sparserl.cli import main
    write_rl_tables(cfg)
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert main(["figure", "--config", str(path), "--id", "head_to_head/final_accuracy", "--out", "f.png"]) == 0
    assert (tmp_path / "f.png").read_bytes()[:4] == b"\x89PNG"
    assert main(["figure", "--config", str(path), "--list"]) == 0
    listed = capsys.readouterr().out
    for fig_id in list(STUDY_FIGURES) + RL_FIGURES:
        assert fig_id in listed


@pytest.mark.e2e  # DAG dry run
def test_dry_run_has_one_generated_rule_per_figure(repo, tmp_path):
    """The default (tiny) config has RL runs, the studies and V0: every figure gets its own rule."""
    cmd = [sys.executable, "-m", "snakemake", "figures", "-s", str(repo / "Snakefile"), "-d", str(tmp_path), "-n", "-p"]
    out = subprocess.run(cmd, cwd=repo, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    log = out.stdout + out.stderr
    from sparserl.core.config import load_config
    tiny = load_config([str(repo / "configs/tiny.yaml")])
    figs = list_figures(tiny)
    assert {f.id for f in figs} == (set(STUDY_FIGURES) | set(RL_FIGURES) | set(V0_FIGURES) | set(LE_CRITIQUE_FIGURES)
                                    | TINY_ONLY | WORLD2_ONLY)
    for f in figs:
        block = log.split(f"rule {f.rule}:\n")[1].split("\n\n")[0]
        assert f"output: {f.output(Paths(tiny))}" in block, block
        assert f"input: {', '.join(str(t) for t in f.tables(Paths(tiny)))}" in block, block
        # the command draws exactly the rule's input, in its order, to its output
        assert f"--id {f.id} --tables {' '.join(str(t) for t in f.tables(Paths(tiny)))} --out {f.output(Paths(tiny))}" \
            in log, f.id
    curves = log.split("rule figure_head_to_head_learning_curves:\n    input: ")[1].split("\n")[0]
    assert curves.count("metrics.parquet") == len(tiny["rl"]["methods"]) * len(tiny["rl"]["seeds"])
    # rl_train's jobs show their message: which run trains, its log and its TensorBoard folder
    assert re.search(r"training \w+ seed \d+: tail -f results/tiny/logs/rl_\w+_seed\d+\.log; "
                     r"tensorboard --logdir results/tiny/rl/\w+/seed\d+/tensorboard", log)
    assert "rule rl_summary:" in log


def test_budget_figure_needs_its_runs_and_draws_seed_means(cfg, tmp_path):
    """Figure 5 (left) exists only when rl.methods has the uniform and both allocation runs; its
    bars are the seeds' mean final accuracy."""
    from sparserl.figures.v0 import BUDGET
    assert "v0/f5_budget" not in {f.id for f in list_figures(cfg)}
    with pytest.raises(FigureError, match="grpo_budget_oracle, grpo_budget_v0 in rl.methods"):
        few = {**cfg, "rl": {**cfg["rl"], "methods": ["grpo_g8"]}}
        draw_figure("v0/f5_budget", few, Paths(few))
    cfg = {**cfg, "rl": {**cfg["rl"], "methods": METHODS + list(BUDGET)[1:]}}
    assert "v0/f5_budget" in {f.id for f in list_figures(cfg)}
    rows = [{"method": m, "seed": s, "eval_accuracy_final": 0.3 + 0.05 * i + 0.01 * s, "start_eval_accuracy": 0.25,
             "eval_gain_in_distribution": 0.1 * i, "eval_gain_harder": 0.02}
            for i, m in enumerate(["rloo_g8", *BUDGET]) for s in (0, 1, 2)]
    write_table(pd.DataFrame(rows), Paths(cfg).rl_runs(), cfg=cfg)
    fig = get_figure("v0/f5_budget")
    data = fig.read(cfg, fig.tables(Paths(cfg)))
    assert list(dict.fromkeys(data["method"])) == list(BUDGET)  # the other runs are not drawn
    f, axes = fig.layout(data)
    fig.draw(data, axes)
    bars = [p for p in axes[0].patches]
    assert [round(b.get_height(), 6) for b in bars] == [round(0.3 + 0.05 * i + 0.01, 6) for i in (1, 2, 3)]
    out = draw_figure("v0/f5_budget", cfg, Paths(cfg))
    assert out.read_bytes()[:4] == b"\x89PNG"



@pytest.mark.e2e  # fresh processes, ~5 s
def test_the_cached_theme_draws_what_seaborn_draws_without_importing_it(tmp_path):
    """apply_style reads seaborn's theme from the user's cache after the first figure job: every
    rcParam, colour code ("k" is seaborn's near-black) and the PNG of a figure drawn with the
    default cycle, "k", error bars and bars equal seaborn.set_theme's, and seaborn (0.7 s with
    scipy.stats) is not imported."""
    import subprocess
    import sys
    code = ("import hashlib, io, json, sys, matplotlib as mpl\nmpl.use('Agg')\nimport matplotlib.pyplot as plt\n"
            "from sparserl.figures import style\n"
            "if sys.argv[1] == 'seaborn':\n    import seaborn as sns\n    sns.set_theme(**style.THEME)\n"
            "else:\n    style.apply_style()\n"
            "fig, ax = plt.subplots(figsize=(3, 2))\nax.plot([0, 1, 2], [1, 0, 2])\nax.plot([0, 2], [0, 1], 'k--')\n"
            "ax.bar([0, 1], [1, 2], yerr=[0.2, 0.3], capsize=2)\nax.set_title('t')\nbuf = io.BytesIO()\n"
            "fig.savefig(buf, format='png')\n"
            "print(json.dumps([{k: repr(v) for k, v in mpl.rcParams.items()},\n"
            "                  {c: mpl.colors.to_rgba(c) for c in 'bgrmyck'}, hashlib.sha256(buf.getvalue()).hexdigest(),\n"
            "                  'seaborn' in sys.modules]))")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    runs = [json.loads(subprocess.run([sys.executable, "-c", code, a], env=env, capture_output=True, text=True,
                                      check=True).stdout) for a in ("seaborn", "first", "cached")]
    for i in range(3):
        assert runs[0][i] == runs[1][i] == runs[2][i], i
    assert runs[1][3] and not runs[2][3]  # the first job computes the theme with seaborn, later ones read it
    assert len(list((tmp_path / "sparserl").glob("seaborn-theme-*.json"))) == 1
