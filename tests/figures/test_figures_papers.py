"""The V0.5 and BASIS RL figures (figures/v05.py, figures/basis.py) from small synthetic run tables:
the points they draw, the numbers of their CSVs, the runs they read (a shared run through its
owner, a steps_factor run ending early), when a config has no such figure, and bad input."""

import numpy as np
import pandas as pd
import pytest
import yaml
from matplotlib.collections import PolyCollection

from sparserl.cli.figures import draw_figure
from sparserl.core.artifacts import write_table
from sparserl.core.paths import Paths
from sparserl.figures import FigureError, get_figure, list_figures
from sparserl.figures.basis import FAMILIES, ROLES, family_methods
from sparserl.figures.curves import MEAN
from sparserl.figures.registry import pyplot
from sparserl.figures.v05 import F1_METHODS, F5_METHODS
from sparserl.methods.spec import load_method, run_owners, total_steps

GRID = [m for f in FAMILIES for m in family_methods(f).values()]
# vanilla_g1 first: basis_grid_grpo_g1_vanilla has its spec, so it reads vanilla_g1's run
METHODS = list(dict.fromkeys([*F1_METHODS, *F5_METHODS, "vanilla_g1", *GRID]))
STEPS = 8
IDS = ["v05/f1_accuracy_curves", "v05/f5_fixed_k", "v05/f3_grad_norm", "v05/f4_entropy",
       "basis/t1_policy_optimization", "basis/f6_training_curves", "basis/f8_beta_t"]
BETA = [np.inf, 2.0, 0.5, 0.5]  # est_beta of the BASIS runs' 4 steps (inf: the reference pass rate)


def make_cfg(repo, seeds=(0, 1), methods=METHODS) -> dict:
    c = yaml.safe_load((repo / "configs/smoke.yaml").read_text())
    rl = yaml.safe_load((repo / "configs/tiny.yaml").read_text())["rl"]
    c["rl"] = {**rl, "methods": list(methods), "seeds": list(seeds), "steps": STEPS, "eval_fractions": [0.5]}
    return c


@pytest.fixture
def cfg(repo, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return make_cfg(repo)


def start_acc(j: int) -> float:
    return 0.2 + 0.05 * j


def run_acc(i: int, seed: int, step: int, j: int) -> float:
    """Benchmark j's accuracy of the owner run of METHODS[i] at `step`: rises with the step."""
    return start_acc(j) + 0.01 * (i + 1) + 0.002 * step + 0.02 * seed


def stderr(j: int) -> float:
    return 0.01 + 0.002 * j


def metric(name: str, i: int, seed: int, steps: np.ndarray) -> np.ndarray:
    return {"reward_mean": 0.3 + 0.01 * i + 0.02 * steps + 0.01 * seed,
            "grad_norm": 1.0 + 0.1 * i + np.sin(steps) + 0.05 * seed,
            "entropy": 0.5 - 0.01 * steps + 0.01 * i + 0.02 * seed}[name]


def write_tables(cfg) -> pd.DataFrame:
    """The start policy's evaluation, each owner run's metrics and eval tables, and the runs table
    `sparserl rl-summary` writes (one row per listed method, the owner's numbers)."""
    P = Paths(cfg)
    rl = cfg["rl"]
    benches = P.benchmark_names()
    write_table(pd.DataFrame({"policy": rl["policy"], "benchmark": benches, "metric": "mean@16",
                              "accuracy": [start_acc(j) for j in range(len(benches))],
                              "stderr": [stderr(j) for j in range(len(benches))]}), P.eval_table(rl["policy"]), cfg=cfg)
    owners = run_owners(rl["methods"])
    rows = []
    for m in rl["methods"]:
        i = METHODS.index(owners[m])
        n = total_steps(rl, load_method(m))
        for s in rl["seeds"]:
            run = P.run(owners[m], s)
            steps = np.arange(1, n + 1)
            met = pd.DataFrame({"step": steps, "rollouts_total": 256 * steps, "wall_time_s": 1.0 + 0.1 * i,
                                **{c: metric(c, i, s, steps) for c in ("reward_mean", "grad_norm", "entropy")}})
            if m.endswith("_basis"):
                met["est_beta"] = BETA[:n] if s == 0 else BETA[:n][::-1]
            if owners[m] == m:
                write_table(met, run.metrics, cfg=cfg)
                ev = pd.DataFrame([{"checkpoint": c, "benchmark": b, "metric": "mean@16",
                                    "accuracy": run_acc(i, s, t, j), "stderr": stderr(j)}
                                   for c, t in ((f"step{n // 2:05d}", n // 2), ("final", n))
                                   for j, b in enumerate(benches)])
                write_table(ev, run.eval, cfg=cfg)
            fin = {f"eval_{b}": run_acc(i, s, n, j) for j, b in enumerate(benches)}
            rows.append({"method": m, "seed": s, "steps": n, "rollouts_total": 256 * n,
                         "wall_time_s": float(met["wall_time_s"].sum()),
                         "eval_accuracy_final": float(np.mean(list(fin.values()))), **fin})
    runs = pd.DataFrame(rows)
    write_table(runs, P.rl_runs(), cfg=cfg)
    return runs


def _data(fig_id, cfg):
    f = get_figure(fig_id)
    return f, f.read(cfg, f.tables(Paths(cfg)))


def _draw(f, data):
    fig, axes = f.layout(data)
    f.draw(data, axes)
    return fig, axes


def _line(ax, label):
    return next(ln for ln in ax.lines if ln.get_label() == label)


@pytest.mark.e2e  # every figure, ~7 s
def test_every_figure_draws_png_pdf_and_the_csv_of_its_numbers(cfg, tmp_path):
    write_tables(cfg)
    assert [f.id for f in list_figures(cfg) if f.id in IDS] == IDS
    for fig_id in IDS:
        out = draw_figure(fig_id, cfg, Paths(cfg))
        assert out == get_figure(fig_id).output(Paths(cfg)) and out.read_bytes()[:4] == b"\x89PNG", fig_id
        assert out.with_suffix(".pdf").read_bytes()[:4] == b"%PDF"
        f, data = _data(fig_id, cfg)
        csv = pd.read_csv(out.with_suffix(".csv"))
        expected = f.frame(data)
        assert list(csv.columns) == [str(c) for c in expected.columns] and len(csv) == len(expected), fig_id
        num = expected.select_dtypes("number").columns
        np.testing.assert_allclose(csv[num].to_numpy(float), expected[num].to_numpy(float), rtol=1e-9, err_msg=fig_id)
    # every figure that draws error bars or bands says what they are (the footer prints `bars`)
    from helpers.figure_checks import assert_error_bars_stated
    drew = {fig_id for fig_id in IDS if assert_error_bars_stated(get_figure(fig_id), cfg)}
    assert {"v05/f1_accuracy_curves", "v05/f3_grad_norm", "basis/f6_training_curves"} <= drew


@pytest.mark.e2e  # synthetic runs, then the figure
def test_f1_points_are_start_checkpoints_and_final_seed_mean_and_band(cfg):
    write_tables(cfg)
    benches = Paths(cfg).benchmark_names()
    f, data = _data("v05/f1_accuracy_curves", cfg)
    assert data["methods"] == list(F1_METHODS) and data["benchmarks"] == benches and data["metric"] == "mean@16"
    df = data["df"]
    for m in F1_METHODS:
        i = METHODS.index(m)
        for j, b in enumerate(benches):
            d = df[(df["method"] == m) & (df["benchmark"] == b)]
            assert d["step"].tolist() == [0, STEPS // 2, STEPS]
            want = [start_acc(j)] + [np.mean([run_acc(i, s, t, j) for s in (0, 1)]) for t in (STEPS // 2, STEPS)]
            np.testing.assert_allclose(d["accuracy"], want)
            np.testing.assert_allclose(d["hi"] - d["lo"], [0, 0.02, 0.02])  # seed 1 is .02 above seed 0
        mean = df[(df["method"] == m) & (df["benchmark"] == MEAN)]
        np.testing.assert_allclose(mean["accuracy"].iloc[-1], np.mean([run_acc(i, s, STEPS, j) for s in (0, 1)
                                                                       for j in range(len(benches))]))
    fig, axes = _draw(f, data)
    assert [ax.get_title() for ax in axes[:len(benches) + 1]] == benches + [f"mean of {len(benches)} benchmarks"]
    line = _line(axes[0], "GRPO (G=16)")
    np.testing.assert_allclose(line.get_xdata(), [0, STEPS // 2, STEPS])  # two seeds: no dodge
    np.testing.assert_allclose(line.get_ydata(), df[(df["method"] == "grpo_g16") & (df["benchmark"] == benches[0])]["accuracy"])
    assert len([c for c in axes[0].collections if c.get_paths()]) == len(F1_METHODS)  # one band a method
    assert [t.get_text() for t in axes[len(benches) + 1].get_legend().get_texts()] == \
        ["V0.5 (fusion + OSLA, k_init=4)", "GRPO (G=16)", "DAPO (G=16)"]
    pyplot().close(fig)


def test_one_seed_draws_the_evaluations_standard_errors(repo, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = make_cfg(repo, seeds=(0,))
    write_tables(cfg)
    f, data = _data("v05/f5_fixed_k", cfg)
    benches = data["benchmarks"]
    assert data["methods"] == list(F5_METHODS)
    mean = data["df"][(data["df"]["method"] == "v05_k4") & (data["df"]["benchmark"] == MEAN)]
    se = np.sqrt(sum(stderr(j) ** 2 for j in range(len(benches)))) / len(benches)
    np.testing.assert_allclose(mean["stderr"], se)
    fig, axes = _draw(f, data)
    mean_ax = axes[len(benches)]
    bars = [c for c in mean_ax.containers]
    assert len(bars) == len(F5_METHODS)
    segs = bars[0].lines[2][0].get_segments()  # the first method's error bars: ±1 s.e.
    np.testing.assert_allclose([s[1, 1] - s[0, 1] for s in segs], 2 * se)
    assert not [c for c in mean_ax.collections if isinstance(c, PolyCollection)]  # no seed band
    pyplot().close(fig)


def test_grad_norm_and_entropy_are_smoothed_seed_means(cfg):
    write_tables(cfg)
    for fig_id, col in (("v05/f3_grad_norm", "grad_norm"), ("v05/f4_entropy", "entropy")):
        f, data = _data(fig_id, cfg)
        assert data["window"] == 1  # 8 steps: round(8 / 12) = 1
        df = data["df"]
        i = METHODS.index("v05_osla")
        d = df[df["method"] == "v05_osla"]
        steps = np.arange(1, STEPS + 1)
        np.testing.assert_allclose(d["raw"], (metric(col, i, 0, steps) + metric(col, i, 1, steps)) / 2)
        fig, ax = _draw(f, data)
        np.testing.assert_allclose(_line(ax, "V0.5 (fusion + OSLA, k_init=4)").get_ydata(), d["smoothed"])
        pyplot().close(fig)
    from sparserl.figures.curves import smooth, smooth_window
    assert smooth_window(60) == 5 and smooth_window(300) == 25
    np.testing.assert_allclose(smooth(pd.Series([0.0, 3.0, 0.0, 3.0]), 3), [1.5, 1.0, 2.0, 1.5])


@pytest.mark.e2e  # synthetic runs, then the figure
def test_f6_reads_the_owner_run_and_basis_ends_at_its_own_steps(cfg):
    write_tables(cfg)
    f, data = _data("basis/f6_training_curves", cfg)
    assert data["families"] == list(FAMILIES)
    # basis_grid_grpo_g1_vanilla has vanilla_g1's spec: its tables are vanilla_g1's
    tables = {str(t) for t in f.tables(Paths(cfg))}
    assert "results/smoke/rl/vanilla_g1/seed0/eval.parquet" in tables
    assert not any("basis_grid_grpo_g1_vanilla" in t for t in tables)
    ev = data["eval"]
    basis = ev[ev["method"] == "basis_grid_gpg_g1_basis"]
    assert basis["step"].tolist() == [0, STEPS // 4, STEPS // 2]  # steps_factor 0.5: final = its last step
    df = data["df"]
    assert set(df["part"]) == {"train_reward", "eval_accuracy"}
    assert set(df["role"]) == set(ROLES)
    fig, axes = _draw(f, data)
    assert axes.shape == (2, 3) and [ax.get_title() for ax in axes[0]] == list(FAMILIES)
    van = df[(df["method"] == "basis_grid_grpo_g1_vanilla") & (df["part"] == "eval_accuracy")]
    i = METHODS.index("vanilla_g1")
    np.testing.assert_allclose(van["value"].iloc[-1], np.mean([run_acc(i, s, STEPS, j) for s in (0, 1) for j in range(2)]))
    np.testing.assert_allclose(_line(axes[1][0], "G=1 vanilla (b=0)").get_ydata(), van["value"])
    pyplot().close(fig)


@pytest.mark.e2e  # synthetic runs, then the figure
def test_f8_draws_beta_infinity_on_its_own_row(cfg):
    write_tables(cfg)
    f, data = _data("basis/f8_beta_t", cfg)
    assert data["methods"] == [m for m in METHODS if m.endswith("_g1_basis")]
    d = data["median"][data["median"]["method"] == "basis_grid_grpo_g1_basis"]
    # seed 0: inf, 2, .5, .5; seed 1 reversed: the seeds' median per step, then a running median of 1
    np.testing.assert_allclose(d["beta_seed_median"], [np.inf, 1.25, 1.25, np.inf])
    csv = data["df"][data["df"]["method"] == "basis_grid_grpo_g1_basis"]
    assert len(csv) == 2 * 4 and csv[csv["seed"] == 1]["est_beta"].tolist() == BETA[::-1]
    fig, ax = _draw(f, data)
    assert ax.get_yscale() == "log"
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels[-1] == "∞"
    y_inf = ax.get_yticks()[-1]
    ys = np.concatenate([ln.get_ydata() for ln in ax.lines if ln.get_linestyle() == "None"])
    assert np.isfinite(ys).all() and (ys == y_inf).sum() == 2 * 3  # one inf a seed and BASIS run
    pyplot().close(fig)


@pytest.mark.e2e  # synthetic runs, then the table
def test_table1_rows_deltas_and_time_reduction(cfg):
    runs = write_tables(cfg)
    f, data = _data("basis/t1_policy_optimization", cfg)
    df, benches = data["df"], data["benchmarks"]
    assert df["row"].tolist() == [*ROLES, "Δ vs G=8", "Δ vs G=1 vanilla", "Δ vs G=1 REINFORCE++"] * 3
    fam = df[df["family"] == "GPG"].set_index("row")
    mean = runs.groupby("method").mean(numeric_only=True)
    sd = runs.groupby("method").std(ddof=1, numeric_only=True)
    for role, m in family_methods("GPG").items():
        np.testing.assert_allclose(fam.loc[role, benches[0]], 100 * mean.loc[m, f"eval_{benches[0]}"])
        np.testing.assert_allclose(fam.loc[role, "avg_sd"], 100 * sd.loc[m, "eval_accuracy_final"])
        assert fam.loc[role, "steps"] == (STEPS // 2 if role == "G=1 BASIS" else STEPS)
    for role in ROLES[:3]:
        np.testing.assert_allclose(fam.loc[f"Δ vs {role}", "avg"], fam.loc["G=1 BASIS", "avg"] - fam.loc[role, "avg"])
        np.testing.assert_allclose(fam.loc[f"Δ vs {role}", "time_reduction_s"],
                                   fam.loc[role, "wall_time_s"] - fam.loc["G=1 BASIS", "wall_time_s"])
    fig, ax = _draw(f, data)
    cells = ax.tables[0].get_celld()
    header = [cells[0, j].get_text().get_text() for j in range(len(benches) + 6)]
    assert header[-4:] == ["Avg", "steps", "rollouts", "time"]
    gpg_basis = 1 + 7 + 3  # header, GRPO's seven rows, GPG's first three
    assert cells[gpg_basis, 1].get_text().get_text() == "G=1 BASIS (½ steps)"
    assert cells[gpg_basis, 2].get_text().get_text() == \
        f"{fam.loc['G=1 BASIS', benches[0]]:.1f} ± {fam.loc['G=1 BASIS', benches[0] + '_sd']:.1f}"
    delta = cells[gpg_basis + 1, 2 + len(benches)]  # Avg of "Δ vs G=8"
    v = fam.loc["Δ vs G=8", "avg"]
    assert delta.get_text().get_text() == f"{v:+.1f}".replace("-", "−")
    # the synthetic BASIS run (a later method) sits above GPG's G=8: green
    assert v > 0 and delta.get_facecolor()[:3] == pytest.approx((0xc7 / 255, 0xe9 / 255, 0xc0 / 255))
    pyplot().close(fig)


def test_figures_are_unavailable_without_their_methods(repo, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    no_rl = {k: v for k, v in make_cfg(repo).items() if k != "rl"}
    for fig_id in IDS:
        assert "`rl` section" in get_figure(fig_id).unavailable(no_rl), fig_id
    few = make_cfg(repo, methods=["grpo_g16", "v05_k4", "grpo_g8", "basis_grid_grpo_g1_vanilla"])
    why = {fig_id: get_figure(fig_id).unavailable(few) for fig_id in IDS}
    assert why["v05/f1_accuracy_curves"] == "V0.5 Figure 1 needs v05_osla, dapo_g16 in rl.methods"
    assert why["v05/f5_fixed_k"] == "V0.5 Figure 5 needs v05_k1, v05_k2, v05_k8 in rl.methods"
    assert "GRPO lacks basis_grid_grpo_g1_rpp, basis_grid_grpo_g1_basis" in why["basis/t1_policy_optimization"]
    assert "BASIS Figure 8 needs a BASIS method" in why["basis/f8_beta_t"]
    assert not {f.id for f in list_figures(few)} & set(IDS)
    with pytest.raises(FigureError, match="V0.5 Figure 1 needs v05_osla"):
        draw_figure("v05/f1_accuracy_curves", few, Paths(few))
    # one complete family is enough: only it is drawn
    grpo = make_cfg(repo, methods=list(family_methods("GRPO").values()))
    assert {"basis/t1_policy_optimization", "basis/f6_training_curves", "basis/f8_beta_t"} <= \
        {f.id for f in list_figures(grpo)}
    write_tables(grpo)
    f, data = _data("basis/t1_policy_optimization", grpo)
    assert set(data["df"]["family"]) == {"GRPO"}


def test_bad_tables_name_the_file_and_the_fix(cfg):
    write_tables(cfg)
    P = Paths(cfg)
    ev_path = P.run("grpo_g16", 1).eval
    ev = pd.read_parquet(ev_path)
    ev.loc[0, "checkpoint"] = "latest"
    ev.to_parquet(ev_path)
    with pytest.raises(FigureError, match=r"grpo_g16/seed1/eval\.parquet: checkpoint 'latest' is neither"):
        draw_figure("v05/f1_accuracy_curves", cfg, Paths(cfg))
    runs = pd.read_parquet(P.rl_runs()).drop(columns=["wall_time_s"])
    runs.to_parquet(P.rl_runs())
    with pytest.raises(FigureError, match=r"runs\.parquet has no wall_time_s column; rerun rule rl_summary"):
        draw_figure("basis/t1_policy_optimization", cfg, Paths(cfg))
    met = pd.read_parquet(P.run("basis_grid_gspo_g1_basis", 0).metrics).drop(columns=["est_beta"])
    met.to_parquet(P.run("basis_grid_gspo_g1_basis", 0).metrics)
    with pytest.raises(FigureError, match=r"basis_grid_gspo_g1_basis/seed0/metrics\.parquet has no est_beta column"):
        draw_figure("basis/f8_beta_t", cfg, Paths(cfg))


def test_grid_methods_are_the_roles_their_names_say():
    """The hard-coded grid matches configs/methods: G=8 group mean, then G=1 vanilla / REINFORCE++ /
    calibrated BASIS at half the steps, one loss a family."""
    for fam in FAMILIES:
        specs = {r: load_method(m) for r, m in family_methods(fam).items()}
        assert [specs[r].group_size for r in ROLES] == [8, 1, 1, 1]
        assert [specs[r].estimator for r in ROLES[1:]] == ["vanilla", "reinforce_pp", "basis_unb"]
        assert specs["G=1 BASIS"].steps_factor == 0.5 and specs["G=1 BASIS"].basis.fixed_beta() is None
        assert len({s.loss.type for s in specs.values()}) == 1
    for m, k in zip(F5_METHODS[:4], (1, 2, 4, 8)):
        spec = load_method(m)
        assert spec.group_size == k and spec.osla is None and spec.estimator == "v05_fusion"
    assert load_method("v05_osla").osla.k_init == 4 and load_method("grpo_g16").group_size == 16


def test_figures_draw_the_tables_they_are_given(cfg, tmp_path):
    """make_figure reads the tables its caller gives (the rule's {input}), not the config's layout:
    with the start policy's evaluation moved out of the results tree, V0.5 Fig. 1 draws the same
    bytes from the moved table, and the command draws it from `--tables`. Fails if a reader
    re-derives a table from the config (read_eval_curves once did for the start evaluation)."""
    import shutil

    from sparserl.cli import main
    from sparserl.core.artifacts import manifest_path
    from sparserl.figures import MissingTableError, make_figure
    write_tables(cfg)
    fig_id = "v05/f1_accuracy_curves"
    f, P = get_figure(fig_id), Paths(cfg)
    before = draw_figure(fig_id, cfg, P, out=tmp_path / "before" / "f1.png")
    start = P.eval_table(cfg["rl"]["policy"])
    tables = f.tables(P)
    assert tables[0] == start
    moved = tmp_path / "elsewhere" / start.name
    moved.parent.mkdir()
    shutil.move(start, moved)
    shutil.move(manifest_path(start), manifest_path(moved))
    with pytest.raises(MissingTableError, match=str(start)):
        draw_figure(fig_id, cfg, P)
    after = make_figure(fig_id, cfg, [moved, *tables[1:]], tmp_path / "after" / "f1.png")
    for suffix in (".csv", ".png", ".pdf"):
        assert after.with_suffix(suffix).read_bytes() == before.with_suffix(suffix).read_bytes(), suffix
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert main(["figure", "--config", str(path), "--id", fig_id, "--tables", str(moved), *map(str, tables[1:]),
                 "--out", str(tmp_path / "cli" / "f1.png")]) == 0
    assert (tmp_path / "cli" / "f1.csv").read_bytes() == before.with_suffix(".csv").read_bytes()
