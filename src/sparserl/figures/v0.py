"""V0's figures, from the cached tables of `sparserl v0-table` only (never a model, never training):
Tables 1 and 2 (every method's intra-context AUC and calibration MSE, per policy), Figure 3
(tracking: intra-AUC at each checkpoint of the sequential protocol) and Figure 4 (robustness:
early vs late steps, weak vs strong policy, in-domain vs harder benchmarks). Each names its head
(`gp` at tiny scale is not TabPFN) in the title. Figure 5: routing (from `sparserl v0-routing`)
and budget allocation (from the RL summary's runs table, when rl.methods has the budget runs)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from sparserl.core.config import setting
from sparserl.figures.curves import seed_bars
from sparserl.figures.registry import pyplot, read_single, register_figure, row, single
from sparserl.figures.style import method_color
from sparserl.values.v0.metrics import auc
from sparserl.values.v0.references import REFERENCES

# the reference rows (values.v0.references) last: the ceiling and a difficulty-only guess
ORDER = ["v0", "v0_untrained", "knn_contextual", "vanilla_value_model", "stepwise_retrain",
         "outcome_model", "context_mean", "head_only"] + list(REFERENCES)


def _label(method: str) -> str:
    return REFERENCES.get(method, method)


def head_note(cfg: dict, tables: list) -> str:
    """The footer line naming V0's head: at tiny and small scale an offline GP stands in for
    TabPFN-v2.5, whose weights cannot be had here, and every V0 figure says so."""
    kind = setting(cfg, "v0", "head", "kind")
    return ("V0 head: TabPFN" if kind == "tabpfn" else
            "V0 head: offline GP in-context head (a stand-in: no TabPFN-v2.5 weights at this scale)")


def _no_v0(cfg: dict) -> str:
    return "" if (cfg.get("v0") or {}).get("harvest") is not None else "V0 figures need v0.harvest in the config"


def _methods(df: pd.DataFrame) -> list[str]:
    have = list(dict.fromkeys(df["method"]))
    return [m for m in ORDER if m in have] + [m for m in have if m not in ORDER]


def _head(df: pd.DataFrame) -> str:
    h = sorted(set(df["head"])) if "head" in df else ["?"]
    e = sorted(set(df["embedder"])) if "embedder" in df else ["?"]
    return f"head {'/'.join(h)}, embedder {'/'.join(e)}"


def _table_figure(df: pd.DataFrame, axes, title: str) -> None:
    methods = _methods(df)
    models = [m for m in dict.fromkeys(df["model"]) if m != "all"] + ["all"]
    w = 0.8 / len(models)
    for ax, metric, label in zip(axes, ("intra_auc", "calibration_mse"), ("intra-context AUC", "calibration MSE")):
        for j, model in enumerate(models):
            d = df[df["model"] == model].set_index("method").reindex(methods)
            bars = ax.bar(np.arange(len(methods)) + (j - (len(models) - 1) / 2) * w, d[metric].to_numpy(), w,
                          label=f"policy {model}" if model != "all" else "all policies", color=f"C{j}",
                          alpha=0.9 if model == "all" else 0.6)
            for b, m in zip(bars, methods):
                if m in REFERENCES:
                    b.set_hatch("//")
        ax.set_xticks(np.arange(len(methods)), [_label(m) for m in methods], rotation=40, ha="right", fontsize=7)
        ax.set_ylabel(label)
        if metric == "intra_auc":
            ax.axhline(0.5, color="0.5", lw=0.8, ls=":")
    axes[0].legend(fontsize=7)
    axes[0].set_title(f"{title} ({_head(df)})", fontsize=9, loc="left")


for _protocol, _name, _title in (("sequential", "t1_sequential", "Table 1: sequential alignment"),
                                 ("strict", "t2_strict", "Table 2: strict generalisation")):
    def _draw(df, axes, _t=_title):
        _table_figure(df, axes, _t)

    register_figure(
        f"v0/{_name}", tables=lambda P, _p=_protocol: [P.value_eval(f"v0_{_p}")],
        layout=row(2, (12, 4.6)), built_by=f"rule v0_table (`sparserl v0-table --protocol {_protocol}`)",
        unavailable=_no_v0, note=head_note,
        caption=f"{_title}: intra-context AUC (label = value >= 0.5, per checkpoint, averaged) and "
                "calibration MSE against avg@k, per method and policy. Hatched: reference rows on the same "
                "test rows: oracle p (the label itself: the metrics' ceiling), oracle p vs a resampled "
                "Binomial(n, p) label (the ceiling of a predictor of the true pass rate under n-sample "
                "labels), level only (the level's mean label at the latest checkpoint so far).")(_draw)


def _auc_by(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Intra-context AUC of each method within each checkpoint, then averaged over `keys` groups."""
    cols = ["method", "model", "step"] + [c for c in keys if c not in ("model", "step")]
    rows = []
    for k, g in df.groupby(cols, sort=True, dropna=False):
        a = auc(g["value"] >= 0.5, g["p"])
        if np.isfinite(a):
            rows.append(dict(zip(cols, k), auc=a))
    return pd.DataFrame(rows, columns=cols + ["auc"])


def _nothing(ax, what: str) -> None:
    """A panel with no AUC to show: every checkpoint's queries have one label (e.g. smoke scale)."""
    ax.text(0.5, 0.5, f"no {what} has queries of both labels:\nintra-context AUC is undefined",
            ha="center", va="center", fontsize=8, transform=ax.transAxes)


@register_figure("v0/f3_tracking", tables=lambda P: [P.value_eval("v0_sequential_predictions")],
                 layout=lambda df: pyplot().subplots(1, df["model"].nunique(), figsize=(4.2 * df["model"].nunique(), 4),
                                                     squeeze=False),
                 built_by="rule v0_table (`sparserl v0-table --protocol sequential`)", unavailable=_no_v0, note=head_note,
                 caption="Figure 3: intra-context AUC of the on-policy rollouts at each checkpoint of the "
                         "harvest runs (sequential alignment), one panel per policy.")
def _tracking(df, axes):
    a = _auc_by(df, ["model", "step"])
    for ax, model in zip(axes[0], sorted(df["model"].unique())):
        g = a[a["model"] == model]
        if g.empty:
            _nothing(ax, f"checkpoint of policy {model}")
            continue
        for i, m in enumerate(_methods(g)):
            d = g[g["method"] == m].sort_values("step")
            ax.plot(d["step"], d["auc"], marker=".", lw=1.2 if m == "v0" else 0.8, color=f"C{i}", label=_label(m),
                    ls="--" if m in REFERENCES else "-")
        ax.axhline(0.5, color="0.5", lw=0.8, ls=":")
        ax.set_title(f"policy {model}", fontsize=9)
        ax.set_xlabel("RL step of the checkpoint")
    axes[0][0].set_ylabel("intra-context AUC")
    axes[0][0].legend(fontsize=6)


@register_figure("v0/f4_robustness",
                 tables=lambda P: [P.value_eval("v0_sequential_predictions"),
                                   P.value_eval("v0_strict_predictions")],
                 read=lambda cfg, tables: tuple(read_single(cfg, [t]) for t in tables),
                 layout=row(3, (13, 4.2)), built_by="rule v0_table (`sparserl v0-table`)", unavailable=_no_v0, note=head_note,
                 caption="Figure 4: intra-context AUC by early vs late checkpoints (first and second half of "
                         "the steps) and weak vs strong policy (sequential alignment), and in-domain vs "
                         "harder benchmarks (strict generalisation, the held-out queries).")
def _robustness(data, axes):
    seq, strict = data
    a = _auc_by(seq, ["model", "step"])
    mid = a.groupby("model")["step"].transform(lambda s: s.max() / 2)
    a["phase"] = np.where(a["step"] <= mid, "early", "late")
    # weak and strong: the policies with the lowest and highest held-out value at the start
    # the resampled oracle's rows carry a redrawn label: the others' values are the harvest's
    own = strict[strict["method"] != "oracle_p_resampled"]
    start = own[own["step"] == own["step"].min()].groupby("model")["value"].mean()
    weak, strong = (start.idxmin(), start.idxmax()) if len(start) else ("?", "?")
    ws = a[a["model"].isin([weak, strong])].assign(
        model=lambda d: d["model"].map({weak: f"weak ({weak})", strong: f"strong ({strong})"}))
    panels = [(a.groupby(["method", "phase"])["auc"].mean().unstack(), "early vs late steps"),
              (ws.groupby(["method", "model"])["auc"].mean().unstack(), "weak vs strong policy")]
    b = _auc_by(strict, ["model", "step", "domain"])
    panels.append((b.groupby(["method", "domain"])["auc"].mean().unstack(), "in-domain vs harder"))
    for ax, (t, title) in zip(axes, panels):
        if t.empty:
            _nothing(ax, "checkpoint")
            ax.set_title(title, fontsize=9)
            continue
        t = t.reindex([m for m in _methods(t.reset_index()) if m in t.index])
        w = 0.8 / max(1, t.shape[1])
        for j, col in enumerate(t.columns):
            ax.bar(np.arange(len(t)) + (j - (t.shape[1] - 1) / 2) * w, t[col].to_numpy(), w, label=str(col), color=f"C{j}")
        ax.set_xticks(np.arange(len(t)), [_label(m) for m in t.index], rotation=40, ha="right", fontsize=7)
        ax.axhline(0.5, color="0.5", lw=0.8, ls=":")
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7)
    axes[0].set_ylabel("intra-context AUC")



@register_figure("v0/t6_ablations", tables=lambda P: [P.value_eval("v0_ablations")],
                 layout=row(2, (11, 4.4)), built_by="rule v0_ablations (`sparserl v0-ablations`)",
                 unavailable=_no_v0, note=head_note,
                 caption="Table 6: V0 with one piece changed at a time (connector, loss, frozen vs tuned "
                         "head), strict generalisation: intra-context AUC and calibration MSE.")
def _ablations(df, axes):
    y = np.arange(len(df))
    for ax, metric, label in zip(axes, ("intra_auc", "calibration_mse"), ("intra-context AUC", "calibration MSE")):
        ax.barh(y, df[metric].to_numpy(), color=["C3"] + ["C0"] * (len(df) - 1))
        ax.set_yticks(y, df["variant"], fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel(label)
    axes[0].axvline(0.5, color="0.5", lw=0.8, ls=":")
    axes[1].set_yticks(y, [""] * len(df))
    axes[0].set_title(f"Table 6 ({_head(df)})", fontsize=9, loc="left")


@register_figure("v0/f5_routing", tables=lambda P: [P.value_eval("v0_routing")],
                 layout=single((6.5, 4.6)), built_by="rule v0_routing (`sparserl v0-routing`)", unavailable=_no_v0, note=head_note,
                 caption="Figure 5 (right): routing each held-out query to the cheapest policy whose predicted "
                         "success clears a threshold (swept): mean accuracy vs mean cost (parameters) for V0, a "
                         "matrix-factorisation router, the oracle, and each single policy.")
def _routing(df, ax):
    curves = df[df["tau"].notna()]
    for i, (router, d) in enumerate(curves.groupby("router", sort=False)):
        d = d.sort_values("cost")
        ax.plot(d["cost"], d["accuracy"], marker=".", lw=1.4 if router == "v0" else 0.9, color=f"C{i}",
                ls="--" if router == "oracle" else "-", label=router)
    single_ = df[df["tau"].isna()]
    ax.scatter(single_["cost"], single_["accuracy"], color="k", marker="s", s=22, zorder=3)
    ax.set_xscale("log")
    # labels of the right half point leftwards: the largest policy's (always_l) ran off the axes
    lc = np.log10(df["cost"].astype(float).to_numpy())
    mid = (lc.min() + lc.max()) / 2
    for _, r in single_.iterrows():
        right = np.log10(float(r["cost"])) > mid
        ax.annotate(r["router"], (r["cost"], r["accuracy"]), fontsize=7, xytext=(-5 if right else 5, -9),
                    textcoords="offset points", ha="right" if right else "left",
                    annotation_clip=False)
    ax.margins(x=0.08, y=0.08)
    ax.set_xlabel("mean cost per query (parameters of the chosen policy)")
    ax.set_ylabel("accuracy (avg@k of the chosen policy)")
    ax.set_title("Routing across the policy fleet", fontsize=9)
    ax.legend(fontsize=7)


# Figure 5 (left): V0's budget allocation against uniform GRPO at the same step total
BUDGET = {"grpo_g8": "uniform, G = 8", "grpo_budget_oracle": "allocation on cached\npass rates (no V0)",
          "grpo_budget_v0": "allocation on V0"}


def _no_budget(cfg: dict) -> str:
    missing = [m for m in BUDGET if m not in set((cfg.get("rl") or {}).get("methods") or [])]
    return f"Figure 5 (left) needs {', '.join(missing)} in rl.methods" if missing else ""


def _read_budget(cfg: dict, tables) -> pd.DataFrame:
    df = read_single(cfg, tables)
    return df[df["method"].isin(list(BUDGET))]


@register_figure("v0/f5_budget", tables=lambda P: [P.rl_runs()], read=_read_budget,
                 layout=row(2, (11, 4.4)), built_by="rule rl_summary (`sparserl rl-summary`)",
                 unavailable=_no_budget, note=head_note, bars="±1 s.e. of the final accuracy over seeds",
                 caption="Figure 5 (left): GRPO whose rollouts per prompt maximise sum_i U(B_i, p_i) under G=8's "
                         "step total, p_i from V0 or from the start policy's cached pass rates, against uniform "
                         "G=8: final held-out accuracy (bar: mean over seeds, error bar: s.e., dots: seeds) and "
                         "its gain over the start policy, in-distribution and on the harder benchmarks.")
def _budget(df, axes):
    ax, ax2 = axes
    methods = [m for m in BUDGET if m in set(df["method"])]
    x, n = seed_bars(ax, df, methods, err="se", color=[method_color(m) for m in methods], dots="k")
    if "start_eval_accuracy" in df:
        ax.axhline(df["start_eval_accuracy"].iloc[0], color="0.5", lw=0.8, ls="--", label="start policy")
        ax.legend(fontsize=7)
    lo = min(df["eval_accuracy_final"].min(), df.get("start_eval_accuracy", df["eval_accuracy_final"]).min())
    ax.set_ylim(max(0.0, lo - 0.05), min(1.0, df["eval_accuracy_final"].max() + 0.05))
    ax.set_xticks(x, [BUDGET[m] for m in methods], fontsize=7)
    ax.set_ylabel("final held-out accuracy")
    seeds = f"{int(n.min())}" if n.min() == n.max() else f"{int(n.min())}-{int(n.max())}"
    ax.set_title(f"the same rollouts per step; {seeds} seeds a method", fontsize=9, loc="left")
    cols = [c for c in ("eval_gain_in_distribution", "eval_gain_harder") if c in df]
    if not cols:
        ax2.text(0.5, 0.5, "the runs table has no gains over the start policy", ha="center", va="center",
                 fontsize=8, transform=ax2.transAxes)
        return
    w = 0.8 / len(cols)
    for j, c in enumerate(cols):
        g = df.groupby("method")[c].mean().reindex(methods)
        ax2.bar(x + (j - (len(cols) - 1) / 2) * w, g.to_numpy(), w, label=c.replace("eval_gain_", "").replace("_", "-"))
    ax2.axhline(0, color="0.3", lw=0.8)
    ax2.set_xticks(x, [BUDGET[m] for m in methods], fontsize=7)
    ax2.set_ylabel("gain over the start policy")
    ax2.legend(fontsize=7)
