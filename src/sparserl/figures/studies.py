"""The study figures (BASIS value study, V0.5 statistics): one PNG per cached study table.

Each drawing function registers itself (`sparserl.figures.registry`); the tables come from
`sparserl.studies.StudyPaths` and are written by the rules of workflow/rules/studies.smk.
"""
from __future__ import annotations

import numpy as np

from sparserl.figures.registry import pyplot, register_figure, row, single
from sparserl.figures.style import method_color
from sparserl.studies import study_refs

LABELS = {"basis_unb": "BASIS UNB", "basis_vop": "BASIS VOP", "basis_rvg": "BASIS RVG",
          "basis_unb_prev": "BASIS UNB (prev. batch β)", "basis_unb_inf": "BASIS UNB (β=∞)",
          "basis_unb_vhat": "BASIS UNB (inactive keep V̂)", "reinforce_pp": "REINFORCE++ (G=1)",
          "grpo": "GRPO (G=8)", "rloo": "RLOO (G=8)"}

SINGLE = single((7, 4.6))
DOUBLE = row(2, (11, 4.4))
SENSITIVITY = single((6, 4.2))


# which caches the BASIS F3 / F5 tables read (sparserl.studies.basis_checkpoints.study_variants)
BASIS_DATA = (" Data: the middle checkpoint of the RL run that basis.study_checkpoints names, oracle = "
              "basis.oracle_n held-out rollouts per prompt, reference = the start policy rl.policy (the paper's "
              "protocol, §5.1); configs without that key (smoke) use the stress test: pre-training snapshots "
              "s@p50 → s@p75, a larger drift than an RL run's.")
STRESS_DATA = (" Stress test: pre-training snapshots s@p50 → s@p75 (basis.study_reference → basis.study_oracle), "
               "a larger drift than an RL run's; the paper's protocol is the figure without the stress_ prefix.")


def _no_study(cfg: dict) -> str:
    return "" if study_refs(cfg) else "study figures need basis.study_reference and basis.study_oracle"


MSE_SE = "±1 s.e. of the mean MSE over the study's batches"
BUDGET_SE = "±1 s.e. of the mean OSLA budget over the study's batches"


def study_figure(fig_id: str, table: str, built_by: str, caption: str, layout=SINGLE, bars: str = ""):
    """`register_figure` for a figure drawn from one study table `table` of its paper's figure dir."""
    paper = fig_id.partition("/")[0]
    return register_figure(fig_id, tables=lambda P: [P.studies.table(paper, table)],
                           caption=caption + (f" Error bars: {bars}." if bars else ""),
                           layout=layout, built_by=built_by, unavailable=_no_study, bars=bars)


def _basis_table(name: str) -> str:
    return f"rule study_basis_table (`sparserl study-basis-table --table {name}`)"


def _sensitivity_table(param: str) -> str:
    return f"rule study_basis_sensitivity (`sparserl study-basis-sensitivity --param {param}`)"


def _v05_table(name: str) -> str:
    return f"rule study_v05_table (`sparserl study-v05-table --table {name}`)"


V05_BIAS = "rule study_v05_bias (`sparserl study-v05-bias`)"


def _label(m: str) -> str:
    return LABELS.get(m, m)


# --------------------------------------------------------------------------- BASIS


@study_figure("basis/f3a_mse_by_method", "mse_by_method", _basis_table("mse_by_method"),
              "Baseline MSE against the oracle value per method, with the % change vs REINFORCE++ (G=1)." + BASIS_DATA, bars=MSE_SE)
def _mse_by_method(df, ax):
    x = np.arange(len(df))
    ax.bar(x, df["mse"], yerr=df["mse_se"], color=[method_color(m) for m in df["method"]], capsize=3)
    ax.set_xticks(x, [_label(m) for m in df["method"]], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("MSE vs oracle value")
    if "pct_vs_reinforce_pp" in df:
        for xi, (v, pct) in enumerate(zip(df["mse"], df["pct_vs_reinforce_pp"])):
            if np.isfinite(pct) and df["method"].iloc[xi] != "reinforce_pp":
                ax.annotate(f"{pct:+.0f}%", (xi, v), textcoords="offset points", xytext=(0, 4), ha="center", fontsize=7)
    ax.set_title("Baseline MSE by method (labels: % vs REINFORCE++)")


@study_figure("basis/f3b_mse_by_heterogeneity", "mse_by_heterogeneity", _basis_table("mse_by_heterogeneity"),
              "Baseline MSE per method binned by batch heterogeneity (std of the oracle values in a batch)." + BASIS_DATA, bars=MSE_SE)
def _mse_by_heterogeneity(df, ax):
    for m, d in df.groupby("method", sort=False):
        ax.errorbar(d["center"], d["mse"], yerr=d["mse_se"], marker="o", ms=3, capsize=2, label=_label(m),
                    color=method_color(m))
    ax.set_xlabel("batch heterogeneity (std of oracle values in the batch)")
    ax.set_ylabel("MSE")
    ax.set_title("MSE by batch heterogeneity")
    ax.legend(fontsize=7)


@study_figure("basis/f3c_mse_by_difficulty", "mse_by_difficulty", _basis_table("mse_by_difficulty"),
              "Baseline MSE per method binned by prompt difficulty (oracle pass rate)." + BASIS_DATA, bars=MSE_SE)
def _mse_by_difficulty(df, ax):
    labs = list(dict.fromkeys(df.sort_values("p_bin")["p_bin_label"]))
    for m, d in df.groupby("method", sort=False):
        d = d.set_index("p_bin_label").reindex(labs)
        ax.errorbar(np.arange(len(labs)), d["mse"], yerr=d["mse_se"], marker="o", ms=3, capsize=2, label=_label(m),
                    color=method_color(m))
    ax.set_xticks(np.arange(len(labs)), labs)
    ax.set_xlabel("oracle value bin")
    ax.set_ylabel("MSE")
    ax.set_title("MSE by prompt difficulty")
    ax.legend(fontsize=7)


@study_figure("basis/f3d_zero_one_rate", "zero_one_rate", _basis_table("zero_one_rate"),
              "Rate of baselines exactly 0 or 1 (zero advantage) per method and difficulty bin." + BASIS_DATA)
def _zero_one_rate(df, ax):
    d = df[df["p_bin"] >= 0]
    labs = list(dict.fromkeys(d.sort_values("p_bin")["p_bin_label"])) + ["all"]
    methods = list(dict.fromkeys(df["method"]))
    w = 0.8 / max(len(methods), 1)
    for i, m in enumerate(methods):
        dm = df[df["method"] == m].set_index("p_bin_label").reindex(labs)
        ax.bar(np.arange(len(labs)) + (i - len(methods) / 2 + 0.5) * w, dm["rate"], width=w, label=_label(m))
    ax.set_xticks(np.arange(len(labs)), labs)
    ax.set_xlabel("oracle value bin")
    ax.set_ylabel("rate of baselines exactly 0 or 1")
    ax.set_title("Uninformative baselines (zero advantage)")
    ax.legend(fontsize=6, ncol=2)


# decorators register bottom-up: eps first, as the sensitivity tables are listed
@study_figure("basis/f5d_sensitivity_grid", "sensitivity_grid", _sensitivity_table("grid"),
              "BASIS (UNB) MSE vs the size of the beta grid, with REINFORCE++ on the same batches." + BASIS_DATA, SENSITIVITY,
              bars=MSE_SE)
@study_figure("basis/f5c_sensitivity_B", "sensitivity_B", _sensitivity_table("B"),
              "BASIS (UNB) MSE vs the batch size B, with REINFORCE++ on the same batches." + BASIS_DATA, SENSITIVITY,
              bars=MSE_SE)
@study_figure("basis/f5b_sensitivity_n", "sensitivity_n", _sensitivity_table("n"),
              "BASIS (UNB) MSE vs the number of reference rollouts n, with REINFORCE++ on the same batches." + BASIS_DATA, SENSITIVITY,
              bars=MSE_SE)
@study_figure("basis/f5a_sensitivity_eps", "sensitivity_eps", _sensitivity_table("eps"),
              "BASIS (UNB) MSE vs the active-set threshold eps, with REINFORCE++ on the same batches." + BASIS_DATA, SENSITIVITY,
              bars=MSE_SE)
def _sensitivity(df, ax):
    d = df[df["skipped"].fillna("") == ""] if "skipped" in df else df
    param = df["param"].iloc[0]
    ax.errorbar(d["value"], d["mse"], yerr=d["mse_se"], marker="o", capsize=3, label="BASIS UNB",
                color=method_color("basis_unb"))
    ax.plot(d["value"], d["mse_reinforce_pp"], "--", color=method_color("reinforce_pp"), label="REINFORCE++ (same batches)")
    if param in ("eps", "B", "n", "grid"):
        ax.set_xscale("log")
    names = {"eps": "active-set threshold ε", "n": "reference rollouts n", "B": "batch size B",
             "grid": "β-grid size (1 = β=∞ only)"}
    ax.set_xlabel(names.get(param, param))
    ax.set_ylabel("MSE")
    skipped = df[df["skipped"].fillna("") != ""] if "skipped" in df else df.iloc[:0]
    title = f"BASIS sensitivity to {names.get(param, param)}"
    if len(skipped):
        title += f"\n(skipped: {'; '.join(skipped['skipped'])})"
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)


# --------------------------------------------------------------------------- V0.5


@study_figure("v05/stat_bias_by_k", "bias_mse_by_k", V05_BIAS,
              "Exact bias of the fused V0.5 baseline per prior against the 1/sqrt(k) bound (Theorem 3.4).")
def _bias_by_k(df, ax):
    d = df[(df["p_bin"] == -1) & (df["estimator"] == "fusion")]
    ks = np.array(sorted(d["k"].unique()), dtype=float)
    ax.plot(ks, 1 / np.sqrt(ks), "k--", label="bound 1/√k")
    for pr, dp in d.groupby("prior", sort=False):
        ax.plot(dp["k"], dp["abs_bias_max"], marker="o", ms=3, label=f"{pr} (max over prompts)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(ks, [str(int(k)) for k in ks])
    ax.set_xlabel("rollouts k")
    ax.set_ylabel("|E[μ̂] − μ_true| (exact)")
    ax.set_title("Fused-baseline bias vs the 1/√k bound (Theorem 3.4)")
    ax.legend(fontsize=6)


@study_figure("v05/stat_mse_by_k", "bias_mse_by_k", V05_BIAS,
              "Exact MSE of the fused V0.5 baseline per prior against the empirical-only estimate.")
def _mse_by_k(df, ax):
    d = df[df["p_bin"] == -1]
    ks = sorted(d["k"].unique())
    for pr, dp in d[d["estimator"] == "fusion"].groupby("prior", sort=False):
        ax.plot(dp["k"], dp["mse"], marker="o", ms=3, label=f"fusion, {pr}")
    emp = d[d["estimator"] == "empirical_only"].drop_duplicates("k")
    ax.plot(emp["k"], emp["mse"], "k--", lw=2, label="empirical only (w=1)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(ks, [str(int(k)) for k in ks])
    ax.set_xlabel("rollouts k")
    ax.set_ylabel("MSE of μ̂ vs μ_true (V scale, exact)")
    ax.set_title("Fused baseline MSE (prior-only MSE = offset² per prompt)")
    ax.legend(fontsize=6)


@study_figure("v05/stat_budget_by_offset", "budget_by_offset", _v05_table("budget_by_offset"),
              "Hypothesis-test rejection rate and OSLA rollout budget vs the prior's offset.", DOUBLE,
              bars=BUDGET_SE)
def _budget_by_offset(df, axes):
    a1, a2 = axes
    orc = df[df["prior_kind"] == "oracle"].sort_values("offset")
    a1.plot(orc["offset"], orc["reject_rate_init_exact"], "o-", label="P(Δ̂² > 0) at k_init (exact)")
    a1.plot(orc["offset"], orc["reject_rate_init"], "x", label="observed in OSLA runs")
    a2.errorbar(orc["offset"], orc["mean_budget"], yerr=orc["budget_se"], marker="o", capsize=3, label="mean rollouts / prompt")
    if np.isfinite(orc["dispatched_per_prompt"]).all():
        a2.plot(orc["offset"], orc["dispatched_per_prompt"], "s--", ms=3, label="padded dispatch / prompt")
    for i, (_, r) in enumerate(df[df["prior_kind"] != "oracle"].iterrows()):
        a1.axhline(r["reject_rate_init_exact"], ls=":", color=f"C{i + 3}", label=r["prior"])
        a2.axhline(r["mean_budget"], ls=":", color=f"C{i + 3}", label=r["prior"])
    for a in axes:
        a.set_xlabel("prior offset δ (V = 2p−1 scale)")
        a.legend(fontsize=6)
    a1.set_ylabel("rejection rate")
    a1.set_title("Hypothesis-test rejections vs prior offset")
    a2.set_ylabel("rollouts per prompt")
    a2.set_title(f"OSLA budget vs prior offset (c={df['c'].iloc[0]:g})")


@study_figure("v05/stat_c_sweep", "c_sweep", _v05_table("c_sweep"),
              "OSLA budget and regret vs the cost per rollout c, per prior.", DOUBLE, bars=BUDGET_SE)
def _c_sweep(df, axes):
    a1, a2 = axes
    for pr, d in df.groupby("prior", sort=False):
        d = d.sort_values("c")
        a1.errorbar(d["c"], d["mean_budget"], yerr=d["budget_se"], marker="o", ms=3, capsize=2, label=pr)
        a2.plot(d["c"], d["regret_over_c"], marker="o", ms=3, label=pr)
    for a in axes:
        a.set_xscale("log")
        a.set_xlabel("cost per rollout c")
        a.legend(fontsize=6)
    a1.set_ylabel("mean rollouts per prompt")
    a1.set_title("OSLA budget vs c")
    a2.set_ylabel("regret / c (extra rollouts' worth)")
    a2.set_title("Regret vs the true-Δ² oracle")


def _stopping_grid(df):
    """Up to four panels a row, one per prior."""
    n = df["prior"].nunique()
    cols = min(4, n)
    rows = -(-n // cols)
    fig, axes = pyplot().subplots(rows, cols, figsize=(3 * cols, 2.6 * rows + 0.6), sharey=True, squeeze=False)
    return fig, axes.ravel()


@study_figure("v05/stat_stopping_hist", "stopping_hist", _v05_table("stopping_hist"),
              "Distribution of OSLA stopping times per prior and cost c.", _stopping_grid)
def _stopping_hist(df, axes):
    priors = list(dict.fromkeys(df["prior"]))
    cs = sorted(df["c"].unique(), reverse=True)
    for ax, pr in zip(axes, priors):
        d = df[df["prior"] == pr]
        for c in cs:
            dc = d[d["c"] == c].sort_values("k")
            ax.plot(dc["k"], dc["frac"], marker="o", ms=3, drawstyle="steps-mid", label=f"c={c:g}")
        ax.set_title(pr, fontsize=8)
        ax.set_xlabel("stopping k", fontsize=7)
        ax.tick_params(labelsize=7)
    axes[0].set_ylabel("fraction of prompts")
    axes[0].legend(fontsize=6)
    for ax in axes[len(priors):]:
        ax.set_visible(False)
    axes[0].figure.suptitle("OSLA stopping-time distribution by prior and cost c", fontsize=10)
