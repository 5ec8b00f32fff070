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

The curves are drawn with the shared helpers of figures/curves.py.
"""
from __future__ import annotations

import math

from sparserl.figures.curves import (
    EVAL_BUILT_BY,
    MEAN,
    TRAIN_BUILT_BY,
    draw_accuracy,
    draw_smoothed,
    eval_tables,
    metrics_tables,
    needs_methods,
    read_eval_curves,
    read_smoothed,
)
from sparserl.figures.registry import pyplot, register_figure, single

F1_METHODS = ("v05_osla", "grpo_g16", "dapo_g16")
F5_METHODS = ("v05_k1", "v05_k2", "v05_k4", "v05_k8", "grpo_g16")
LABELS = {"v05_osla": "V0.5 (fusion + OSLA, k_init=4)", "grpo_g16": "GRPO (G=16)", "dapo_g16": "DAPO (G=16)",
          **{f"v05_k{k}": f"V0.5 fusion, k={k}" for k in (1, 2, 4, 8)}}
DIFFERS = ("The tiny and small scales differ from the paper: policy s (0.2M parameters, tiny) or m (1M, small) on "
           "procedural arithmetic, 40 (tiny) or 100 (small) steps of 128 (tiny) or 256 (small) rollouts, one seed at "
           "tiny and three at small, the evaluation's metric (mean@8 (tiny) or mean@16 (small) at top-p 1.0; paper: "
           "Qwen3-4B on six math benchmarks, top-p 0.7)")


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
    F1, tables=lambda P: eval_tables(P, F1_METHODS), read=lambda cfg, t: read_eval_curves(cfg, t, F1_METHODS),
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
    F5, tables=lambda P: eval_tables(P, F5_METHODS), read=lambda cfg, t: read_eval_curves(cfg, t, F5_METHODS),
    layout=_panels_layout, built_by=EVAL_BUILT_BY, unavailable=needs_methods(F5_METHODS, "V0.5 Figure 5"),
    bars="band = the seeds' min–max; with one seed, ±1 s.e. over the benchmark's problems",
    caption="V0.5 Fig. 5: V0.5's shrinkage fusion at a fixed k in {1, 2, 4, 8} rollouts per prompt (no OSLA; "
            "prompts per step = rollouts per step / k) against GRPO G=16: held-out accuracy vs RL step per "
            "benchmark and their mean, drawn as Fig. 1 (seed mean, band min–max, or ±1 s.e. over problems "
            "with one seed). " + DIFFERS + "; 3 evaluations a run where the paper evaluates every few steps; "
            "oracle prior.",
)(_accuracy_figure("V0.5 fixed k vs GRPO"))


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
        _id, tables=lambda P: metrics_tables(P.cfg, F1_METHODS),
        read=lambda cfg, t, _c=_col: read_smoothed(cfg, t, F1_METHODS, _c),
        layout=single((6.2, 3.6)), built_by=TRAIN_BUILT_BY,
        unavailable=needs_methods(F1_METHODS, f"V0.5 {_fig}"),
        bars="band = the seeds' min–max of the smoothed curves (none with one seed)",
        caption=f"V0.5 {_fig}: {_caption}, vs RL step: V0.5 (fusion + OSLA) against GRPO G=16 and DAPO G=16. "
                "Lines: a centred rolling mean over about a twelfth of the run (3 steps of tiny's 40), seed mean; "
                "faint: the per-step seed mean; band: the seeds' min–max of the smoothed curves. The paper shows "
                "V0.5 against GRPO only (DAPO added here). " + DIFFERS + ".",
    )(_metric_figure(_ylabel, _title))
