"""The BASIS value study on RL checkpoints (BASIS Section 5.1 / Appendix A, the paper's protocol):
Figure 2 (initial vs refined estimator over the beta grid) and the MSE by method at each stage,
from the tables of `sparserl study-basis-stages` (sparserl.studies.basis_checkpoints).

With basis.study_checkpoints the F3 / F5 figures of `figures.studies` draw the middle checkpoint;
the snapshot pair they drew before is the stress test, `basis/stress_f3*` here: the same drawing
functions on the `stress_` tables (F5's sensitivity is not redrawn for it: tiny's DAG time).
"""
from __future__ import annotations

import numpy as np

from sparserl.figures.registry import get_figure, pyplot, register_figure
from sparserl.figures.studies import BASIS_DATA, LABELS, STRESS_DATA
from sparserl.figures.style import method_color
from sparserl.studies import study_refs
from sparserl.studies.basis_checkpoints import STRESS, checkpoint_settings

BUILT_BY = "rule study_basis_stages (`sparserl study-basis-stages`)"
PROTOCOL = ("BASIS protocol (§5.1, App. A): checkpoints of one GRPO run at early / middle / late stages "
            "(basis.study_checkpoints), oracle = basis.oracle_n held-out rollouts per prompt of each checkpoint, "
            "reference = the start policy rl.policy (its cached reference rollouts).")
# Figure 2's two estimators: V^_beta the initial (offline) estimate, V~_beta the refined one
# (colour: a hex colour, or a method name that method_color resolves at drawing)
ESTIMATORS = {"initial": ("V̂_β  initial (no refinement)", "#7f7f7f", "--", "s"),
              "refined": ("Ṽ_β  refined (BASIS UNB)", "basis_unb", "-", "o")}


def _no_checkpoints(cfg: dict) -> str:
    try:
        return "" if checkpoint_settings(cfg) else "needs basis.study_checkpoints and an rl section"
    except ValueError as e:  # a malformed key: say so rather than drop the figure
        return str(e)


def _tables(name: str):
    return lambda P: [P.studies.table("basis", name)]


def _stages(df) -> list[str]:
    return list(dict.fromkeys(df.sort_values("fraction")["stage"]))


def _stage_title(d) -> str:
    r = d.iloc[0]
    return f"{r['stage']} ({r['checkpoint']}, {r['fraction']:.0%} of training), oracle p̄ = {r['mean_oracle_p']:.2f}"


def _beta_label(b: float) -> str:
    return "∞" if np.isinf(b) else f"{b:.2g}"


def _stage_panels(df):
    n = max(1, df["stage"].nunique())
    fig, axes = pyplot().subplots(1, n, figsize=(4.2 * n, 3.8), sharey=True, squeeze=False)
    return fig, axes.ravel()


@register_figure("basis/f2_initial_vs_refined", tables=_tables("stage_initial_vs_refined"), layout=_stage_panels,
                 built_by=BUILT_BY, unavailable=_no_checkpoints,
                 bars="±1 s.e. of the mean MSE over the study's repeated batches",
                 caption="BASIS Figure 2: MSE against the oracle value of the initial estimate V̂_β = V*_β(p̂) "
                         "(Eq. 4, no batchwise refinement) and of the refined estimate Ṽ_β (UNB, one rollout per "
                         "prompt) for each β of the calibration grid, at three checkpoints; bars: how often the "
                         "batch's calibration picks that β; error bars ±1 s.e. of the mean MSE over the repeated "
                         "batches. " + PROTOCOL)
def _f2(df, axes):
    for ax, stage in zip(axes, _stages(df)):
        d = df[df["stage"] == stage]
        betas = d[d["estimator"] == "refined"].sort_values("beta_index")
        x = betas["beta_index"].to_numpy()
        for est, (label, color, ls, marker) in ESTIMATORS.items():
            color = color if color.startswith("#") else method_color(color)
            e = d[d["estimator"] == est].sort_values("beta_index")
            ax.errorbar(e["beta_index"], e["mse"], yerr=e["mse_se"], color=color, ls=ls, marker=marker, ms=3,
                        capsize=2, label=label)
        ax.set_yscale("log")
        tw = ax.twinx()  # where the calibration lands, on its own 0-1 scale
        tw.bar(x, betas["frac_chosen"], width=0.7, color=method_color("basis_unb"), alpha=0.15)
        tw.set_ylim(0, 1)
        tw.set_yticks([])
        tw.grid(False)
        step = max(1, len(x) // 6)
        ticks = list(x[::step]) + ([x[-1]] if x[-1] not in x[::step] else [])
        ax.set_xticks(ticks, [_beta_label(b) for b in betas.set_index("beta_index").loc[ticks, "beta"]])
        ax.set_xlabel("β (calibration grid)")
        ax.set_title(_stage_title(d), fontsize=8)
    axes[0].set_ylabel("MSE vs oracle value")
    axes[0].legend(fontsize=7, loc="upper right")
    axes[0].figure.suptitle("Initial vs refined BASIS estimator over β (Figure 2)", fontsize=10)


def _mse_layout(df):
    fig, ax = pyplot().subplots(figsize=(max(7.0, 0.75 * df["method"].nunique() * df["stage"].nunique() / 2), 4.6))
    return fig, ax


@register_figure("basis/a1_mse_by_stage", tables=_tables("stage_mse_by_method"), layout=_mse_layout,
                 built_by=BUILT_BY, unavailable=_no_checkpoints,
                 bars="±1 s.e. of the mean MSE over the study's batches",
                 caption="Baseline MSE against the oracle value per method at each RL stage (Figure 3(a) at the "
                         "early, middle and late checkpoints; labels: BASIS UNB vs REINFORCE++ (G=1) and vs GRPO "
                         "(G=8), paired over the same batches); error bars ±1 s.e. of the mean MSE over the batches. "
                         + PROTOCOL)
def _mse_by_stage(df, ax):
    stages = _stages(df)
    methods = list(dict.fromkeys(df["method"]))
    w = 0.8 / max(len(methods), 1)
    for i, m in enumerate(methods):
        d = df[df["method"] == m].set_index("stage").reindex(stages)
        ax.bar(np.arange(len(stages)) + (i - len(methods) / 2 + 0.5) * w, d["mse"], yerr=d["mse_se"], width=w,
               color=method_color(m), capsize=2, label=LABELS.get(m, m))
    for j, stage in enumerate(stages):
        b = df[(df["stage"] == stage) & (df["method"] == "basis_unb")]
        if len(b) and {"pct_vs_reinforce_pp", "pct_vs_grpo"} <= set(b.columns):
            r = b.iloc[0]
            ax.annotate(f"BASIS vs R++ {r['pct_vs_reinforce_pp']:+.0f}%\nvs GRPO G=8 {r['pct_vs_grpo']:+.0f}%",
                        (j, 1.0), xycoords=("data", "axes fraction"), xytext=(0, -4), textcoords="offset points",
                        ha="center", va="top", fontsize=7)
    labels = []
    for s in stages:
        r = df[df["stage"] == s].iloc[0]
        labels.append(f"{s}\n{r['checkpoint']} ({r['fraction']:.0%})")
    ax.set_xticks(np.arange(len(stages)), labels)
    ax.set_ylabel("MSE vs oracle value")
    ax.set_ylim(0, float(np.nanmax(df["mse"] + df["mse_se"].fillna(0))) * 1.75)  # room for labels and legend
    ax.set_title("Baseline MSE by method at each RL stage (reference: the start policy)")
    ax.legend(fontsize=6, ncol=3, loc="upper right", bbox_to_anchor=(1.0, 0.86))


# --------------------------------------------------------------------------- the stress test


def _no_stress(cfg: dict) -> str:
    why = _no_checkpoints(cfg)
    if why:
        return f"the stress-test figures sit beside the RL-checkpoint study: it {why}"
    # study_variants(cfg) has STRESS exactly then (without resolving the checkpoints: list_figures asks often)
    return "" if study_refs(cfg) else "needs basis.study_reference and basis.study_oracle"


def _register_stress(fig_id: str, table: str, built_by: str) -> None:
    """`basis/stress_<name>`: figure `fig_id` (figures.studies) drawn from its table's stress_ twin."""
    base = get_figure(fig_id)
    register_figure(f"basis/{STRESS}{base.name}", tables=_tables(STRESS + table),
                    caption=base.caption.replace(BASIS_DATA, STRESS_DATA), layout=base.layout,
                    built_by=built_by, unavailable=_no_stress, read=base.read, frame=base.frame,
                    bars=base.bars)(base.draw)


for _id, _table in (("f3a_mse_by_method", "mse_by_method"), ("f3b_mse_by_heterogeneity", "mse_by_heterogeneity"),
                    ("f3c_mse_by_difficulty", "mse_by_difficulty"), ("f3d_zero_one_rate", "zero_one_rate")):
    _register_stress(f"basis/{_id}", _table,
                     f"rule study_basis_{STRESS}table (`sparserl study-basis-table --table {_table}`)")
# every figure this module registers (tests compare the registry against such lists)
FIGURES = ("basis/f2_initial_vs_refined", "basis/a1_mse_by_stage") + tuple(
    f"basis/{STRESS}{n}" for n in ("f3a_mse_by_method", "f3b_mse_by_heterogeneity", "f3c_mse_by_difficulty",
                                   "f3d_zero_one_rate"))
