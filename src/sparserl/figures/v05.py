"""V0.5's RL figures (paper 000: Figures 1, 3, 4 and 5), from the RL runs' cached tables only.

F1: held-out accuracy vs RL step on each benchmark and their mean, V0.5 (fusion + OSLA,
k_init = 4) against GRPO G=16 and DAPO G=16. F3 / F4: the policy's gradient norm and entropy
over training, the same three methods. F5: V0.5 fusion at fixed k in {1, 2, 4, 8} (no OSLA)
against GRPO G=16, curves per benchmark as F1.

An accuracy curve's points are the start policy (step 0: its table `Paths.eval_table(rl.policy)`),
every intermediate checkpoint of the run's eval.parquet (`step00030`) and `final` (the run's last
step in its metrics.parquet, so a method with a `steps_factor` ends where it stopped). The paper
evaluates every few steps; the tiny config evaluates once half-way (`rl.eval_fractions`), so its
curves have three points. Seeds: the line is their mean, the band their min-max; with one seed the
error bars are the evaluation's own standard error over the benchmark's problems.

`read_eval_curves`, `draw_accuracy` and `smooth` are shared with BASIS's Figure 6 (figures/basis.py).
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pandas as pd

from sparserl.core.artifacts import read_table
from sparserl.core.paths import Paths
from sparserl.figures.registry import FigureError, pyplot, register_figure, single
from sparserl.figures.rl import LINESTYLES, metric_curves
from sparserl.figures.style import method_color
from sparserl.methods.spec import method_run

MEAN = "mean"  # the benchmark label of the mean over benchmarks
MARKERS = ("o", "s", "^", "D", "v", "P", "X")
F1_METHODS = ("v05_osla", "grpo_g16", "dapo_g16")
F5_METHODS = ("v05_k1", "v05_k2", "v05_k4", "v05_k8", "grpo_g16")
LABELS = {"v05_osla": "V0.5 (fusion + OSLA, k_init=4)", "grpo_g16": "GRPO (G=16)", "dapo_g16": "DAPO (G=16)",
          **{f"v05_k{k}": f"V0.5 fusion, k={k}" for k in (1, 2, 4, 8)}}
EVAL_BUILT_BY = ("rule rl_eval (`sparserl rl-eval`) and rule evaluate (`sparserl evaluate`) for the start "
                 "policy; rule rl_train for the runs' metrics")
TRAIN_BUILT_BY = "rule rl_train or rl_cluster (`sparserl rl-train` / `sparserl openrlhf-launch`)"
DIFFERS = ("The tiny and small scales differ from the paper: policy s (0.2M parameters, tiny) or m (1M, small) on "
           "procedural arithmetic, 40 (tiny) or 100 (small) steps of 256 rollouts, one seed at tiny and three at "
           "small, the evaluation's metric (mean@16 at top-p 1.0; paper: Qwen3-4B on six math benchmarks, top-p 0.7)")


def needs_methods(methods, what: str):
    """`unavailable` for a figure that draws `methods`: why the config lacks it, or ''."""
    def why(cfg: dict) -> str:
        rl = cfg.get("rl")
        if not rl:
            return f"{what} needs an `rl` section in the config"
        missing = [m for m in methods if m not in set(rl.get("methods") or [])]
        return f"{what} needs {', '.join(missing)} in rl.methods" if missing else ""
    return why


def run_pairs(cfg: dict, methods) -> list[tuple[str, int]]:
    return [(m, s) for m in methods for s in cfg["rl"]["seeds"]]


def metrics_tables(cfg: dict, methods) -> list[Path]:
    """The metrics.parquet of each (method, seed) of `run_pairs`, in that order (a method that
    shares its owner's run reads the owner's table: `method_run`)."""
    return [method_run(cfg, m, s).metrics for m, s in run_pairs(cfg, methods)]


def eval_tables(cfg: dict, methods) -> list[Path]:
    """The start policy's evaluation, then each run's metrics and eval tables (each path once)."""
    paths = [Paths(cfg).eval_table(cfg["rl"]["policy"])]
    for m, s in run_pairs(cfg, methods):
        run = method_run(cfg, m, s)
        paths += [run.metrics, run.eval]
    return list(dict.fromkeys(paths))


def _eval_rows(df: pd.DataFrame, path: Path) -> pd.DataFrame:
    missing = [c for c in ("benchmark", "accuracy") if c not in df]
    if missing:
        raise FigureError(f"{path} has no {', '.join(missing)} column (columns: {list(df.columns)}); "
                          "rerun the evaluation that writes it")
    keys = ["checkpoint", "benchmark"] if "checkpoint" in df else ["benchmark"]
    dup = df.duplicated(keys)
    if dup.any():
        raise FigureError(f"{path}: {int(dup.sum())} duplicate rows of {', '.join(keys)} "
                          f"(e.g. {df.loc[dup, keys].iloc[0].tolist()}); one row per benchmark expected")
    out = df[[*keys, "accuracy"]].copy()
    out["stderr"] = df["stderr"] if "stderr" in df else np.nan
    return out


def checkpoint_step(label: str, final_step: int, path: Path) -> int:
    """`final` -> the run's last step; `step00030` -> 30."""
    if label == "final":
        return int(final_step)
    m = re.fullmatch(r"step(\d+)", str(label))
    if not m:
        raise FigureError(f"{path}: checkpoint {label!r} is neither 'final' nor 'stepNNNNN'")
    return int(m.group(1))


def benchmark_order(cfg: dict, present) -> list[str]:
    """The config's benchmarks that were evaluated, in the config's order, then any others."""
    present = list(dict.fromkeys(present))
    named = [b for b in Paths(cfg).benchmark_names() if b in set(present)]
    return named + [b for b in present if b not in set(named)]


def read_eval_curves(cfg: dict, methods) -> dict:
    """Accuracy per (method, seed, step, benchmark), the mean over benchmarks as benchmark `MEAN`
    (unweighted, as the runs table's eval_accuracy_final), and its seed aggregate:
    {"raw", "df" (method, benchmark, step, seeds, accuracy, lo, hi, stderr), "methods", "benchmarks", "metric"}.
    """
    P = Paths(cfg)
    start_path = P.eval_table(cfg["rl"]["policy"])
    start = read_table(start_path)
    metrics = set(start["metric"].astype(str)) if "metric" in start else set()
    metric = "/".join(sorted(metrics)) or "accuracy"
    start = _eval_rows(start, start_path).drop(columns="checkpoint", errors="ignore")
    frames = []
    for m, s in run_pairs(cfg, methods):
        run = method_run(cfg, m, s)
        met = read_table(run.metrics)
        if "step" not in met or not len(met):
            raise FigureError(f"{run.metrics} has no steps (columns: {list(met.columns)}); rerun its rl_train job")
        ev = read_table(run.eval)
        if "checkpoint" not in ev:
            raise FigureError(f"{run.eval} has no checkpoint column (columns: {list(ev.columns)}); rerun rl_eval")
        if metrics and "metric" in ev and set(ev["metric"].astype(str)) != metrics:
            raise FigureError(f"{run.eval} is {'/'.join(sorted(set(ev['metric'].astype(str))))} but the start "
                              f"policy's {start_path} is {metric}: evaluate both with the same config")
        ev = _eval_rows(ev, run.eval)
        ev["step"] = [checkpoint_step(c, met["step"].max(), run.eval) for c in ev["checkpoint"]]
        frames.append(pd.concat([start.assign(checkpoint="start", step=0), ev], ignore_index=True)
                      .assign(method=m, seed=s))
    raw = pd.concat(frames, ignore_index=True)
    benches = benchmark_order(cfg, raw["benchmark"])
    # mean over benchmarks; its s.e. treats the benchmarks' samples as independent
    mean = raw.groupby(["method", "seed", "step", "checkpoint"], sort=False).agg(
        accuracy=("accuracy", "mean"), stderr=("stderr", lambda x: float(np.sqrt((x ** 2).sum(min_count=len(x)))) / len(x)),
        n=("benchmark", "size")).reset_index()
    if mean["n"].nunique() > 1:
        short = mean[mean["n"] < mean["n"].max()].iloc[0]
        raise FigureError(f"{method_run(cfg, short['method'], short['seed']).eval}: checkpoint {short['checkpoint']} "
                          f"has {short['n']} benchmarks, others {mean['n'].max()}; rerun its rl_eval job")
    raw = pd.concat([raw, mean.drop(columns="n").assign(benchmark=MEAN)], ignore_index=True)
    g = raw.groupby(["method", "benchmark", "step"], sort=False)
    df = g.agg(seeds=("seed", "nunique"), accuracy=("accuracy", "mean"), lo=("accuracy", "min"),
               hi=("accuracy", "max"), stderr=("stderr", "mean")).reset_index()
    order = {b: i for i, b in enumerate(benches + [MEAN])}
    morder = {m: i for i, m in enumerate(methods)}
    df = df.sort_values(["method", "benchmark", "step"], key=lambda c: c.map(morder) if c.name == "method"
                        else c.map(order) if c.name == "benchmark" else c, kind="stable").reset_index(drop=True)
    return {"raw": raw, "df": df, "methods": list(methods), "benchmarks": benches, "metric": metric}


def outlined(color: str, lw: float) -> dict:
    """A thin grey outline for a pale method colour (a family's lightest shades vanish on white)."""
    from matplotlib import colors, patheffects
    r, g, b = colors.to_rgb(color)
    if 0.2126 * r + 0.7152 * g + 0.0722 * b < 0.7:
        return {}
    return {"path_effects": [patheffects.Stroke(linewidth=lw + 0.7, foreground="0.5"), patheffects.Normal()]}


def draw_accuracy(ax, df: pd.DataFrame, methods, labels=None, styles=None) -> None:
    """One benchmark's accuracy curve per method (rows of `read_eval_curves`' df): mean over seeds,
    band = the seeds' min-max, or with one seed error bars = the evaluation's s.e. With one seed
    the methods' points are dodged sideways (1% of the steps apart) so their bars stay apart."""
    labels = labels or {}
    present = [m for m in methods if m in set(df["method"])]
    dodge = 0.01 * float(df["step"].max() or 1) if (df["seeds"] <= 1).all() else 0.0
    for i, m in enumerate(methods):
        d = df[df["method"] == m].sort_values("step")
        if not len(d):
            continue
        c = method_color(m)
        st = {"ls": LINESTYLES[i % len(LINESTYLES)], "marker": MARKERS[i % len(MARKERS)], "lw": 1.3,
              **((styles or {}).get(m, {}))}
        x = d["step"].to_numpy() + (present.index(m) - (len(present) - 1) / 2) * dodge
        y = d["accuracy"].to_numpy()
        ax.plot(x, y, **{"color": c, "ms": 4, "mec": "0.15", "mew": 0.5, "label": labels.get(m, m),
                         **outlined(c, st["lw"]), **st})
        if (d["seeds"] > 1).any():
            ax.fill_between(x, d["lo"].to_numpy(), d["hi"].to_numpy(), color=c, alpha=0.15, lw=0)
        elif d["stderr"].notna().any():
            ax.errorbar(x, y, yerr=d["stderr"].fillna(0).to_numpy(), fmt="none", ecolor=c, elinewidth=0.9, capsize=2)


def _panels_layout(data):
    """One axes per benchmark, one for their mean, one for the legend; four to a row."""
    n = len(data["benchmarks"]) + 2
    cols = min(4, n)
    rows = math.ceil(n / cols)
    fig, axes = pyplot().subplots(rows, cols, figsize=(2.45 * cols, 2.15 * rows + 0.45), squeeze=False)
    return fig, axes.ravel()


def _accuracy_figure(title: str):
    def draw(data, axes):
        df, methods, benches = data["df"], data["methods"], data["benchmarks"]
        panels = benches + [MEAN]
        seeds = int(data["raw"]["seed"].nunique())
        for ax, b in zip(axes, panels):
            draw_accuracy(ax, df[df["benchmark"] == b], methods, LABELS)
            ax.set_title(f"mean of {len(benches)} benchmarks" if b == MEAN else b)
            ax.set_xlabel("RL step")
        for ax in axes[::min(4, len(axes))]:
            ax.set_ylabel(f"{data['metric']} accuracy")
        legend_ax = axes[len(panels)]
        for ax in axes[len(panels):]:
            ax.axis("off")
        spread = "band: seeds' min–max" if seeds > 1 else "one seed; bars: ±1 s.e. over problems"
        legend_ax.legend(*axes[0].get_legend_handles_labels(), loc="center", frameon=False, fontsize=7,
                         title=f"{title}\n({spread})", title_fontsize=7.5)
    return draw


F1 = "v05/f1_accuracy_curves"
F5 = "v05/f5_fixed_k"

register_figure(
    F1, tables=lambda cfg: eval_tables(cfg, F1_METHODS), read=lambda cfg, t: read_eval_curves(cfg, F1_METHODS),
    layout=_panels_layout, built_by=EVAL_BUILT_BY, unavailable=needs_methods(F1_METHODS, "V0.5 Figure 1"),
    bars="band = the seeds' min–max; with one seed, ±1 s.e. over the benchmark's problems",
    caption="V0.5 Fig. 1: held-out accuracy vs RL step per benchmark and their unweighted mean: V0.5 (shrinkage "
            "fusion + OSLA, k_init=4) against GRPO G=16 and DAPO G=16, the same rollouts per step. Points: the "
            "start policy (step 0), the checkpoints of rl.eval_fractions and the final one; line: mean over "
            "seeds, band: their min–max, with one seed error bars of ±1 s.e. over the benchmark's problems (the "
            "methods' points then dodged sideways by 1% of the steps). "
            + DIFFERS + "; 3 evaluations a run (start, half-way, final) where the paper evaluates every few "
            "steps; the prior is the oracle (reference pass rate), not V0 (v05_osla_v0 has V0's).",
)(_accuracy_figure("V0.5 vs GRPO / DAPO"))

register_figure(
    F5, tables=lambda cfg: eval_tables(cfg, F5_METHODS), read=lambda cfg, t: read_eval_curves(cfg, F5_METHODS),
    layout=_panels_layout, built_by=EVAL_BUILT_BY, unavailable=needs_methods(F5_METHODS, "V0.5 Figure 5"),
    bars="band = the seeds' min–max; with one seed, ±1 s.e. over the benchmark's problems",
    caption="V0.5 Fig. 5: V0.5's shrinkage fusion at a fixed k in {1, 2, 4, 8} rollouts per prompt (no OSLA; "
            "prompts per step = rollouts per step / k) against GRPO G=16: held-out accuracy vs RL step per "
            "benchmark and their mean, drawn as Fig. 1 (seed mean, band min–max, or ±1 s.e. over problems "
            "with one seed). " + DIFFERS + "; 3 evaluations a run where the paper evaluates every few steps; "
            "oracle prior.",
)(_accuracy_figure("V0.5 fixed k vs GRPO"))


def smooth_window(n_steps: int) -> int:
    """About a twelfth of the run, odd (3 steps of 40, 9 of 100)."""
    return max(1, round(n_steps / 12)) | 1


def smooth(y: pd.Series, window: int) -> np.ndarray:
    """Centred rolling mean (edges over the steps they have)."""
    return y.rolling(window, center=True, min_periods=1).mean().to_numpy()


def read_smoothed(cfg: dict, tables: list[Path], methods, column: str) -> dict:
    """`column` per step of each method: the seed mean per step (`raw`), a centred rolling mean of
    each seed (`smoothed`: their mean, lo / hi: their min-max), and the window."""
    runs = run_pairs(cfg, methods)
    curves = metric_curves(runs, tables, (column,))
    window = smooth_window(int(curves.groupby(["method", "seed"])["step"].size().max()))
    parts = []
    for (m, s), d in curves.groupby(["method", "seed"], sort=False):
        d = d.sort_values("step")
        parts.append(d.assign(smoothed=smooth(d[column].astype(float), window)))
    per_seed = pd.concat(parts, ignore_index=True)
    df = per_seed.groupby(["method", "step"], sort=False).agg(
        seeds=("seed", "nunique"), raw=(column, "mean"), smoothed=("smoothed", "mean"),
        lo=("smoothed", "min"), hi=("smoothed", "max")).reset_index()
    return {"df": df.assign(metric=column, window=window), "methods": list(methods), "window": window,
            "column": column}


def draw_smoothed(ax, df: pd.DataFrame, methods, labels=None, styles=None) -> None:
    """Per method: the smoothed seed mean, the per-step seed mean faint behind it, the seeds' band."""
    labels = labels or {}
    for i, m in enumerate(methods):
        d = df[df["method"] == m].sort_values("step")
        if not len(d):
            continue
        c = method_color(m)
        st = {"ls": LINESTYLES[i % len(LINESTYLES)], "lw": 1.6, **((styles or {}).get(m, {}))}
        x = d["step"].to_numpy()
        ax.plot(x, d["raw"].to_numpy(), color=c, lw=0.6, alpha=0.35)
        ax.plot(x, d["smoothed"].to_numpy(), **{"color": c, "label": labels.get(m, m), **outlined(c, st["lw"]), **st})
        if (d["seeds"] > 1).any():
            ax.fill_between(x, d["lo"].to_numpy(), d["hi"].to_numpy(), color=c, alpha=0.15, lw=0)


def _metric_figure(ylabel: str, title: str):
    def draw(data, ax):
        draw_smoothed(ax, data["df"], data["methods"], LABELS)
        seeds = int(data["df"]["seeds"].max())
        ax.set_xlabel("RL step")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{title}: rolling mean over {data['window']} steps "
                     f"({'band: seeds’ min–max' if seeds > 1 else 'one seed'}; faint: per step)", fontsize=8.5)
        ax.legend(fontsize=7, frameon=False)
    return draw


for _id, _col, _ylabel, _title, _fig, _caption in (
        ("v05/f3_grad_norm", "grad_norm", "policy gradient norm (before clipping at 1)", "Gradient norm", "Fig. 3",
         "the policy's global gradient norm before clipping at 1.0, the mean over the step's optimiser steps"),
        ("v05/f4_entropy", "entropy", "policy entropy (nats per token)", "Policy entropy", "Fig. 4",
         "the policy's mean per-token entropy on the step's sampled responses (nats)")):
    register_figure(
        _id, tables=lambda cfg: metrics_tables(cfg, F1_METHODS),
        read=lambda cfg, t, _c=_col: read_smoothed(cfg, t, F1_METHODS, _c),
        layout=single((6.2, 3.6)), built_by=TRAIN_BUILT_BY,
        unavailable=needs_methods(F1_METHODS, f"V0.5 {_fig}"),
        bars="band = the seeds' min–max of the smoothed curves (none with one seed)",
        caption=f"V0.5 {_fig}: {_caption}, vs RL step: V0.5 (fusion + OSLA) against GRPO G=16 and DAPO G=16. "
                "Lines: a centred rolling mean over about a twelfth of the run (3 steps of tiny's 40), seed mean; "
                "faint: the per-step seed mean; band: the seeds' min–max of the smoothed curves. The paper shows "
                "V0.5 against GRPO only (DAPO added here). " + DIFFERS + ".",
    )(_metric_figure(_ylabel, _title))
