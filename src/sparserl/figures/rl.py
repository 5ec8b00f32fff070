"""The RL figures, drawn from the cached tables of the runs only (never a checkpoint, never training):
learning curves from each run's metrics.parquet, final accuracy from the runs table of
`sparserl rl-summary`. Methods keep the config's order (`rl.methods`)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from sparserl.core.artifacts import read_table
from sparserl.core.paths import Paths
from sparserl.methods.spec import method_run
from sparserl.figures.registry import FigureError, pyplot, read_single, register_figure

LINESTYLES = ("-", "--", ":", "-.")


def _no_rl(cfg: dict) -> str:
    return "" if cfg.get("rl") else "RL figures need an `rl` section in the config"


def _runs(cfg: dict) -> list[tuple[str, int]]:
    return [(m, s) for m in cfg["rl"]["methods"] for s in cfg["rl"]["seeds"]]


def _metrics_tables(cfg: dict) -> list[Path]:
    return [method_run(cfg, m, s).metrics for m, s in _runs(cfg)]


def _style(i: int) -> dict:
    """Ten colours, then the next line style: the tiny config has 26 methods."""
    return {"color": f"C{i % 10}", "ls": LINESTYLES[(i // 10) % len(LINESTYLES)]}


def metric_curves(runs: list[tuple[str, int]], tables: list[Path], columns=("reward_mean",)) -> pd.DataFrame:
    """`columns` of each run's metrics.parquet per step (columns method, seed, step, *columns);
    `tables[i]` is the metrics table of `runs[i]` = (method, seed). The V0.5 and BASIS curves use it too."""
    frames = []
    for (method, seed), path in zip(runs, tables, strict=True):
        df = read_table(path)
        missing = [c for c in ("step", *columns) if c not in df]
        if missing:
            raise FigureError(f"{path} has no {', '.join(missing)} column (columns: {list(df.columns)}); "
                              f"rerun the run's rl_train job to rewrite its metrics")
        frames.append(df[["step", *columns]].assign(method=method, seed=seed))
    return pd.concat(frames, ignore_index=True)


def _read_curves(cfg: dict, tables: list[Path]) -> pd.DataFrame:
    """Train reward per step of every run (columns method, seed, step, reward_mean); the tables come
    in the order of `_runs`."""
    return metric_curves(_runs(cfg), tables)


def _read_runs(cfg: dict, tables: list[Path]) -> pd.DataFrame:
    """The runs table, restricted to the config's methods in the config's order."""
    df = read_single(cfg, tables)
    methods = [m for m in cfg["rl"]["methods"] if m in set(df["method"])]
    return df.set_index("method").loc[methods].reset_index()


def _curves_layout(df):
    """The curves, and beside them an empty axes for the legend: a legend hung outside the curves'
    axes is clipped by the single tight_layout pass of `make_figure` (26 methods at tiny scale)."""
    return pyplot().subplots(1, 2, figsize=(12, 5), gridspec_kw={"width_ratios": [2.1, 1]})


@register_figure("head_to_head/learning_curves", tables=_metrics_tables, read=_read_curves, layout=_curves_layout,
                 built_by="rule rl_train or rl_cluster (`sparserl rl-train` / `sparserl openrlhf-launch`)",
                 unavailable=_no_rl,
                 caption="Train reward (mean over the step's rollouts) vs RL step: one line per method, "
                         "the mean over seeds, the band spanning the seeds' minimum to maximum.")
def _learning_curves(df, axes):
    ax, legend_ax = axes
    for i, (method, d) in enumerate(df.groupby("method", sort=False)):
        by_step = d.groupby("step")["reward_mean"]
        mean, lo, hi = by_step.mean(), by_step.min(), by_step.max()
        style = _style(i)
        ax.plot(mean.index, mean.to_numpy(), lw=1.2, label=method, **style)
        ax.fill_between(mean.index, lo.to_numpy(), hi.to_numpy(), color=style["color"], alpha=0.15, lw=0)
    ax.set_xlabel("RL step")
    ax.set_ylabel("train reward (mean over rollouts)")
    ax.set_title(f"Learning curves: mean over {df['seed'].nunique()} seeds, band min–max")
    legend_ax.axis("off")
    legend_ax.legend(*ax.get_legend_handles_labels(), loc="center left", fontsize=6, frameon=False,
                     ncol=1 + df["method"].nunique() // 14)


def _accuracy_layout(df):
    """Wider for many methods: about a third of an inch a bar."""
    return pyplot().subplots(figsize=(max(7.0, 2 + 0.32 * df["method"].nunique()), 4.6))


def seed_bars(ax, df: pd.DataFrame, methods: list[str], *, err: str = "sd", color="C0", dots="C1",
              label: str | None = None):
    """Final accuracy per method, in `methods`' order: bar = mean over seeds, error bar = the seeds'
    sd or the mean's s.e. (`err`), dots = single seeds. Returns the bars' x and the seeds a method."""
    acc = df.groupby("method", sort=False)["eval_accuracy_final"]
    mean, n = acc.mean().reindex(methods), acc.size().reindex(methods)
    spread = acc.std(ddof=1).reindex(methods)
    if err == "se":
        spread = spread / np.sqrt(n)
    spread = spread.fillna(0.0)  # one seed: no spread to show
    x = np.arange(len(methods))
    ax.bar(x, mean.to_numpy(), yerr=spread.to_numpy(), color=color, alpha=0.7, capsize=3)
    pos = {m: i for i, m in enumerate(methods)}
    ax.plot(df["method"].map(pos).to_numpy(), df["eval_accuracy_final"].to_numpy(), ".", color=dots, ms=5, label=label)
    return x, n


@register_figure("head_to_head/final_accuracy", tables=lambda cfg: [Paths(cfg).rl_runs()], read=_read_runs,
                 layout=_accuracy_layout, built_by="rule rl_summary (`sparserl rl-summary`)", unavailable=_no_rl,
                 caption="Final-checkpoint eval accuracy (mean over benchmarks) per method: bar = mean over "
                         "seeds, error bar = standard deviation across seeds, dots = single seeds.")
def _final_accuracy(df, ax):
    methods = list(dict.fromkeys(df["method"]))
    x, _ = seed_bars(ax, df, methods, label="one seed")
    ax.set_xticks(x, methods, rotation=45, ha="right", fontsize=7)
    ax.set_ylabel("final eval accuracy")
    ax.set_title("Final accuracy by method (mean ± sd over seeds)")
    ax.legend(fontsize=7)
