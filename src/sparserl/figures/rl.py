"""The RL figures, drawn from the cached tables of the runs only (never a checkpoint, never training):
learning curves from each run's metrics.parquet, final accuracy from the runs table of
`sparserl rl-summary`. Methods keep the config's order (`rl.methods`)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from sparserl.core.paths import Paths
from sparserl.figures.curves import LINESTYLES, read_smoothed, seed_bars
from sparserl.figures.registry import pyplot, read_single, register_figure
from sparserl.figures.style import FACETS, facet, method_color
from sparserl.methods.run import method_run


def _no_rl(cfg: dict) -> str:
    return "" if cfg.get("rl") else "RL figures need an `rl` section in the config"


def _runs(cfg: dict) -> list[tuple[str, int]]:
    return [(m, s) for m in cfg["rl"]["methods"] for s in cfg["rl"]["seeds"]]


def _metrics_tables(P: Paths) -> list[Path]:
    return [method_run(P.cfg, m, s).metrics for m, s in _runs(P.cfg)]


def _read_curves(cfg: dict, tables: list[Path]) -> dict:
    """Train reward per step of every run, each seed smoothed by a centred rolling mean of about
    a twelfth of the run (`curves.read_smoothed`: its df has the seed mean of the smoothed curves and
    their min-max per method and step); the tables come in the order of `_runs`."""
    data = read_smoothed(cfg, tables, cfg["rl"]["methods"], "reward_mean")
    data["facets"] = _facets(data["methods"])
    return data


def _read_runs(cfg: dict, tables: list[Path]) -> pd.DataFrame:
    """The runs table, restricted to the config's methods in the config's order."""
    df = read_single(cfg, tables)
    methods = [m for m in cfg["rl"]["methods"] if m in set(df["method"])]
    return df.set_index("method").loc[methods].reset_index()


REFERENCE = "grpo_g8"  # drawn faintly in every other facet, to read the facets against one line


def _facets(methods: list[str]) -> list[tuple[str, list[str]]]:
    """(facet title, its methods in the config's order), facets in the order of `style.FACETS`."""
    by = {t: [m for m in methods if facet(m) == t] for t in FACETS}
    return [(t, ms) for t, ms in by.items() if ms]


def _curves_layout(data):
    """Per facet the curves and beside them an axes for its legend (a legend hung outside the
    curves' axes is clipped by the single tight_layout pass of `make_figure`); two facets a row."""
    n = len(data["facets"])
    cols = min(2, n)
    rows = -(-n // cols)
    fig, axes = pyplot().subplots(rows, 2 * cols, figsize=(7.4 * cols, 3.5 * rows + 0.5), squeeze=False,
                                  gridspec_kw={"width_ratios": [2.3, 1] * cols})
    return fig, axes


def _band_note(df: pd.DataFrame, window: int) -> str:
    seeds = int(df["seeds"].max())
    smooth = f"each seed a centred rolling mean over {window} step{'s' if window > 1 else ''}"
    return (f"line: mean over {seeds} seeds, band: the seeds' min–max; {smooth}" if seeds > 1 else
            f"1 seed: no band; {smooth}")


@register_figure("head_to_head/learning_curves", tables=_metrics_tables, read=_read_curves, layout=_curves_layout,
                 built_by="rule rl_train or rl_cluster (`sparserl rl-train` / `sparserl openrlhf-launch`)",
                 unavailable=_no_rl, bars="band = the seeds' min–max of the smoothed train reward (none with 1 seed)",
                 caption="Train reward (mean over the step's rollouts) vs RL step, one panel per method family "
                         "(group baselines, BASIS, V0.5 and V0's priors, Le Critique's critics), each method in "
                         "its colour of every figure (figures.style). Each seed's curve is smoothed by a centred "
                         "rolling mean over about a twelfth of the run; line: the mean over seeds of the smoothed "
                         "curves, band: their min–max across seeds (no band with one seed). grpo_g8, when run, "
                         "is drawn dashed grey in the other panels as a common reference.")
def _learning_curves(data, axes):
    df, window = data["df"], data["window"]
    pairs = [(axes[r][2 * c], axes[r][2 * c + 1]) for r in range(axes.shape[0]) for c in range(axes.shape[1] // 2)]
    ref = df[df["method"] == REFERENCE].sort_values("step")
    for (ax, legend_ax), (title, methods) in zip(pairs, data["facets"]):
        if len(ref) and REFERENCE not in methods:
            ax.plot(ref["step"].to_numpy(), ref["smoothed"].to_numpy(), color="0.55", ls="--", lw=1.0,
                    label=f"{REFERENCE} (reference)", zorder=1)
        for i, m in enumerate(methods):
            d = df[df["method"] == m].sort_values("step")
            c = method_color(m)
            x = d["step"].to_numpy()
            ax.plot(x, d["smoothed"].to_numpy(), color=c, lw=1.4, ls=LINESTYLES[i % len(LINESTYLES)], label=m)
            if (d["seeds"] > 1).any():
                ax.fill_between(x, d["lo"].to_numpy(), d["hi"].to_numpy(), color=c, alpha=0.12, lw=0)
        ax.set_title(f"{title} ({len(methods)} method{'s' if len(methods) > 1 else ''})")
        ax.set_xlabel("RL step")
        ax.set_ylabel("train reward (mean over rollouts)")
        legend_ax.axis("off")
        legend_ax.legend(*ax.get_legend_handles_labels(), loc="center left", fontsize=6.5, frameon=False,
                         ncol=1 + len(methods) // 16)
    for ax, legend_ax in pairs[len(data["facets"]):]:
        ax.axis("off")
        legend_ax.axis("off")
    ax0 = pairs[0][0]
    ax0.figure.suptitle(f"Learning curves ({_band_note(df, window)})", fontsize=9.5)


def _accuracy_layout(df):
    """Wider for many methods: about a third of an inch a bar."""
    return pyplot().subplots(figsize=(max(7.0, 2 + 0.32 * df["method"].nunique()), 4.6))


@register_figure("head_to_head/final_accuracy", tables=lambda P: [P.rl_runs()], read=_read_runs,
                 layout=_accuracy_layout, built_by="rule rl_summary (`sparserl rl-summary`)", unavailable=_no_rl,
                 bars="±1 sd of the final accuracy across seeds",
                 caption="Final-checkpoint eval accuracy (mean over benchmarks) per method: bar = mean over "
                         "seeds, error bar = standard deviation across seeds, dots = single seeds.")
def _final_accuracy(df, ax):
    methods = list(dict.fromkeys(df["method"]))
    x, _ = seed_bars(ax, df, methods, color=[method_color(m) for m in methods], dots="k", label="one seed")
    ax.set_xticks(x, methods, rotation=45, ha="right", fontsize=7)
    ax.set_ylabel("final eval accuracy")
    ax.set_title("Final accuracy by method (mean ± sd over seeds)")
    ax.legend(fontsize=7)
