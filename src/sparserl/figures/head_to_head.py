"""The head-to-head figures, drawn from the tables of `sparserl head-to-head` only
(`results/{scale}/head_to_head/{ranking,pairs,curves}.parquet`; rules and CIs in
`sparserl.studies.head_to_head`): accuracy against rollouts consumed and against training wall
time, the ranking with its tie groups, GRPO at G = 4, 8 beside V0.5 at k = 4, 8, the
comparison the V0.5 analysis lists as missing (its Figure 5 sets k = 4, 8 against GRPO G = 16 only),
and entropy, greedy accuracy and pass@k against the step (sharpening or learning).
Every method of `rl.methods` is drawn, in its colour (`style.method_color`)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from sparserl.core.artifacts import read_table
from sparserl.core.config import setting
from sparserl.core.paths import Paths
from sparserl.figures.registry import FigureError, pyplot, register_figure
from sparserl.figures.style import family, method_color
from sparserl.studies.head_to_head import curve_summary

BUILT_BY = "rule head_to_head (`sparserl head-to-head`)"
LINESTYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
# the comparison of the V0.5 analysis: (k, GRPO at G = k, V0.5 at k with the oracle prior, with V0's)
MATCHED = ((4, "grpo_g4", "v05_k4", "v05_k4_v0"), (8, "grpo_g8", "v05_k8", "v05_k8_v0"))
MATCHED_NEEDED = [m for _, g, v, _ in MATCHED for m in (g, v)]


CURVE_BARS = "band = 95% t-interval over seeds (none with 1 seed)"


def _no_rl(cfg: dict) -> str:
    return "" if cfg.get("rl") else "the head-to-head needs an `rl` section in the config"


def _no_matched(cfg: dict) -> str:
    if not cfg.get("rl"):
        return _no_rl(cfg)
    missing = [m for m in MATCHED_NEEDED if m not in cfg["rl"]["methods"]]
    return f"needs {', '.join(MATCHED_NEEDED)} in rl.methods (missing: {', '.join(missing)})" if missing else ""


def _tables(*names):
    return lambda P: [P.head_to_head(n) for n in names]


def _need(df: pd.DataFrame, cols, path) -> pd.DataFrame:
    missing = [c for c in cols if c not in df]
    if missing:
        raise FigureError(f"{path} has no column(s) {missing} (columns: {list(df.columns)}); rerun {BUILT_BY}")
    return df


def _read_curves(cfg: dict, tables: list[Path]) -> pd.DataFrame:
    """The seeds' mean per (method, checkpoint), in the config's method order."""
    (path,) = tables
    df = _need(read_table(path), ("method", "seed", "checkpoint", "step", "rollouts", "wall_time_s", "accuracy"), path)
    return curve_summary(df)


def _line_style(methods: list[str]) -> dict[str, dict]:
    """A method's colour, and a line style and marker by its place in its colour family, so that
    the shades of one family stay apart."""
    seen: dict[str | None, int] = {}
    out = {}
    for m in methods:
        i = seen.get(family(m), 0)
        seen[family(m)] = i + 1
        out[m] = {"color": method_color(m), "ls": LINESTYLES[i % len(LINESTYLES)], "marker": MARKERS[i % len(MARKERS)]}
    return out


def _curves_layout(df):
    """The curves, and beside them an axes for the legend (as `figures.rl`: 27+ methods)."""
    return pyplot().subplots(1, 2, figsize=(12, 5.2), gridspec_kw={"width_ratios": [2.1, 1]})


def draw_curves(ax, df: pd.DataFrame, x: str, methods: list[str] | None = None) -> None:
    """Accuracy vs `x` per method, a 95% band where seeds > 1 (the study's t-interval)."""
    methods = methods or list(dict.fromkeys(df["method"]))
    styles = _line_style(list(dict.fromkeys(df["method"])))
    for m in methods:
        d = df[df["method"] == m].sort_values("step")
        if d.empty:
            continue
        st = styles[m]
        ax.plot(d[x].to_numpy(), d["accuracy"].to_numpy(), lw=1.2, ms=3.5, label=m, **st)
        if d["ci_lo"].notna().all():
            ax.fill_between(d[x].to_numpy(), d["ci_lo"].to_numpy(), d["ci_hi"].to_numpy(),
                            color=st["color"], alpha=0.12, lw=0)
    ax.set_ylabel("eval accuracy (mean over benchmarks)")


def _seeds_note(df: pd.DataFrame) -> str:
    n = int(df["seeds"].max())
    return f"mean of {n} seeds, band = 95% t-interval" if n > 1 else "1 seed: no band (see the ranking for CIs)"


def _draw_vs(df, axes, x: str, xlabel: str, title: str) -> None:
    ax, legend_ax = axes
    draw_curves(ax, df, x)
    ax.set_xlabel(xlabel)
    ax.set_title(f"{title} ({_seeds_note(df)})")
    legend_ax.axis("off")
    legend_ax.legend(*ax.get_legend_handles_labels(), loc="center left", fontsize=6, frameon=False,
                     ncol=1 + df["method"].nunique() // 16)


@register_figure("head_to_head/accuracy_vs_rollouts", tables=_tables("curves"), read=_read_curves,
                 layout=_curves_layout, built_by=BUILT_BY, unavailable=_no_rl, bars=CURVE_BARS,
                 caption="Eval accuracy (mean over benchmarks) at every evaluated checkpoint (the start policy "
                         "at 0, the intermediate checkpoints, the final one) against the rollouts the run had "
                         "generated up to that step (metrics' cumulative rollouts_total), one line per method of "
                         "rl.methods at the same rollouts per step; mean over seeds, 95% t-band when seeds > 1.")
def _accuracy_vs_rollouts(df, axes):
    _draw_vs(df, axes, "rollouts", "rollouts consumed (generated, cumulative)", "Accuracy vs rollouts")


@register_figure("head_to_head/accuracy_vs_wall_time", tables=_tables("curves"), read=_read_curves,
                 layout=_curves_layout, built_by=BUILT_BY, unavailable=_no_rl, bars=CURVE_BARS,
                 caption="The same checkpoints against cumulative training wall time: the sum of the run's "
                         "per-step wall_time_s (sampling the step's rollouts, advantages, the update). Evaluation "
                         "time is excluded, as are checkpoint saving and model loading. At tiny and small scale a "
                         "run is one CPU thread on a 2-core machine shared with one other job, so the seconds "
                         "measure that single-thread job under the DAG's load (they drift ~10% with the machine), "
                         "not a GPU's; methods compare by ratio, not by absolute seconds. Mean over seeds, 95% t-band "
                         "when seeds > 1.")
def _accuracy_vs_wall_time(df, axes):
    _draw_vs(df, axes, "wall_time_s", "training wall time (s, cumulative; evaluation excluded)", "Accuracy vs wall time")


RANKING_COLS = ("rank", "method", "accuracy", "ci_lo", "ci_hi", "ci_method", "tie_group", "seeds", "rollouts_total")


def _read_ranking(cfg: dict, tables: list[Path]) -> pd.DataFrame:
    (path,) = tables
    return _need(read_table(path), RANKING_COLS, path).sort_values(["rank", "accuracy"], ascending=[True, False],
                                                                     kind="stable").reset_index(drop=True)


def _ranking_layout(df):
    return pyplot().subplots(figsize=(8.5, 1.2 + 0.24 * len(df)))


def _ranking_note(cfg: dict, tables: list[Path]) -> str:
    """The footer's line: the starts, seeds and problems the intervals resample (from the ranking
    table, `tables`), and the trees pooled as starts (head_to_head.pool)."""
    (path,) = tables
    r = read_table(path) if Path(path).exists() else None
    if r is None or "ci_levels" not in r or r.empty:
        return ""
    pool = (cfg.get("head_to_head") or {}).get("pool", [])
    pooled = f" (start policies pooled from this tree and {', '.join(pool)})" if pool else ""
    return f"bootstrap levels: {r['ci_levels'].iloc[0]}{pooled}"


@register_figure("head_to_head/ranking", tables=_tables("ranking"), read=_read_ranking, layout=_ranking_layout,
                 built_by=BUILT_BY, unavailable=_no_rl, note=_ranking_note,
                 bars="95% CI: >= 2 starts (head_to_head.pool): hierarchical bootstrap (starts, seeds, problems); "
                      ">= 2 seeds: t over seeds; else bootstrap over problems",
                 caption="Every method ranked by final eval accuracy: bar = mean over starts and seeds, whisker = 95% "
                         "CI. With runs from two or more start policies (head_to_head.pool: each pre-trained from its "
                         "own pretrain.start_seed) the whisker is the hierarchical bootstrap that resamples start "
                         "policies, then seeds within each, then the eval problems, so it holds the start policies' "
                         "spread; the footer names the levels and their units. Otherwise a "
                         "t-interval over seeds with >= 2 seeds; with 1 seed a stratified bootstrap over the eval "
                         "problems, which holds the run fixed and so carries no seed noise. Letters = tie groups: "
                         "two methods share a letter exactly when the 95% paired-bootstrap CI of their difference "
                         "(same problems, seeds resampled) contains 0; no correction for the number of pairs. The "
                         "paired CI is narrower than two whiskers suggest, so overlapping whiskers can still be "
                         "separated. The CSV is the ranking table.")
def _ranking(df, ax):
    y = np.arange(len(df))[::-1]
    acc = df["accuracy"].to_numpy()
    err = np.vstack([acc - df["ci_lo"].to_numpy(), df["ci_hi"].to_numpy() - acc])
    ax.barh(y, acc, xerr=err, color=[method_color(m) for m in df["method"]], alpha=0.85, capsize=2,
            error_kw={"lw": 0.8})
    ax.set_yticks(y, [f"{r}. {m}" for r, m in zip(df["rank"], df["method"])], fontsize=7)
    right = float(df["ci_hi"].max())
    lo = float(max(0.0, df["ci_lo"].min() - 0.05))
    for yi, (g, hi) in enumerate(zip(df["tie_group"], df["ci_hi"])):
        ax.text(hi + 0.004, y[yi], g, va="center", fontsize=6.5, family="monospace")
    ax.set_xlim(lo, right + 0.02 + 0.006 * int(df["tie_group"].str.len().max()))
    ax.set_xlabel("final eval accuracy (mean over benchmarks), 95% CI")
    how = df["ci_method"].iloc[0]
    if "starts" in df and int(df["starts"].max()) > 1:  # the levels and units are in the footer
        how = f"hierarchical bootstrap over {int(df['starts'].max())} start policies, seeds, problems"
    ax.set_title(f"Head-to-head ranking (95% CI: {how})\n"
                 "shared letter = not separated by the data (paired bootstrap)")


def pair_diff(pairs: pd.DataFrame, x: str, y: str) -> dict:
    """diff = acc_x - acc_y with its CI and `separated`, whichever way round the pair is stored."""
    row, sign = pairs[(pairs["a"] == x) & (pairs["b"] == y)], 1.0
    if not len(row):
        row, sign = pairs[(pairs["a"] == y) & (pairs["b"] == x)], -1.0
    if not len(row):
        raise FigureError(f"pairs.parquet has no pair {x} / {y}; rerun {BUILT_BY}")
    r = row.iloc[0]
    lo, hi = sorted((sign * float(r["ci_lo"]), sign * float(r["ci_hi"])))
    out = {"diff": sign * float(r["diff"]), "ci_lo": lo, "ci_hi": hi, "separated": bool(r["separated"])}
    if "welch_separated" in r.index:  # >= 2 seeds: the Welch t-interval over seeds too
        out["welch_separated"] = bool(r["welch_separated"])
    return out


def _read_matched(cfg: dict, tables: list[Path]) -> dict:
    """The bars (GRPO at G = k, V0.5 at k, V0.5 at k with V0's prior when run) with each V0.5
    entry's paired difference to GRPO at the same k, and their curves."""
    ranking_path, pairs_path, curves_path = tables
    ranking = _need(read_table(ranking_path), RANKING_COLS, ranking_path).set_index("method")
    pairs = _need(read_table(pairs_path), ("a", "b", "diff", "ci_lo", "ci_hi", "separated"), pairs_path)
    curves = _need(read_table(curves_path), ("method", "seed", "checkpoint", "step", "rollouts", "accuracy"), curves_path)
    rows = []
    for k, grpo, v05, v05_v0 in MATCHED:
        for m, kind in ((grpo, "GRPO"), (v05, "V0.5 (oracle prior)"), (v05_v0, "V0.5 (V0 prior)")):
            if m not in ranking.index:
                if m == v05_v0:
                    continue  # V0's prior is optional (needs v0.harvest)
                raise FigureError(f"{ranking_path} has no row for {m}; rerun {BUILT_BY} with {m} in rl.methods")
            r = ranking.loc[m]
            row = {"k": k, "method": m, "kind": kind, "accuracy": float(r["accuracy"]), "ci_lo": float(r["ci_lo"]),
                   "ci_hi": float(r["ci_hi"]), "seeds": int(r["seeds"]), "rollouts_total": float(r["rollouts_total"]),
                   "tie_group": r["tie_group"], "vs_grpo_diff": np.nan, "vs_grpo_ci_lo": np.nan,
                   "vs_grpo_ci_hi": np.nan, "vs_grpo_separated": None, "vs_grpo_welch_separated": None}
            if m != grpo:
                d = pair_diff(pairs, m, grpo)
                row.update(vs_grpo_diff=d["diff"], vs_grpo_ci_lo=d["ci_lo"], vs_grpo_ci_hi=d["ci_hi"],
                           vs_grpo_separated=d["separated"], vs_grpo_welch_separated=d.get("welch_separated"))
            rows.append(row)
    bars = pd.DataFrame(rows)
    curves = curve_summary(curves[curves["method"].isin(bars["method"])])
    return {"df": bars, "curves": curves}


@register_figure("head_to_head/grpo_vs_v05_k", tables=_tables("ranking", "pairs", "curves"), read=_read_matched,
                 layout=lambda data: pyplot().subplots(1, 2, figsize=(11, 4.6)), built_by=BUILT_BY,
                 unavailable=_no_matched,
                 bars="left: 95% CI of the final accuracy (as the ranking); right: 95% t-band over seeds when seeds > 1",
                 caption="GRPO at G = 4 and 8 beside V0.5 fixed-k at k = 4 and 8 (oracle prior; V0's prior too when "
                         "run), the comparison the V0.5 analysis lists as missing (its Figure 5 has k = 4, 8 against "
                         "GRPO G = 16 only): same rollouts per step, same rollouts per prompt. Left: final accuracy "
                         "with 95% CI, and V0.5 - GRPO at the same k with its 95% paired-bootstrap CI ('tied' when it "
                         "contains 0; with 1 seed these intervals hold the runs fixed and carry no seed noise; with "
                         ">= 2 seeds the Welch t-interval's verdict is given too). Right: "
                         "accuracy vs rollouts consumed.")
def _grpo_vs_v05_k(data, axes):
    bars, curves = data["df"], data["curves"]
    ax, cax = axes
    x, ticks, labels = 0.0, [], []
    for k, d in bars.groupby("k", sort=True):
        for _, r in d.iterrows():
            err = [[r["accuracy"] - r["ci_lo"]], [r["ci_hi"] - r["accuracy"]]]
            ax.bar(x, r["accuracy"], yerr=err, color=method_color(r["method"]), alpha=0.85, capsize=3, width=0.8)
            if pd.notna(r["vs_grpo_diff"]):
                tag = "separated" if r["vs_grpo_separated"] else "tied"
                if r["vs_grpo_welch_separated"] is not None:
                    tag += f"\n(Welch over seeds: {'separated' if r['vs_grpo_welch_separated'] else 'tied'})"
                ax.text(x, r["ci_hi"] + 0.004, f"{r['vs_grpo_diff']:+.3f}\n[{r['vs_grpo_ci_lo']:+.3f}, "
                        f"{r['vs_grpo_ci_hi']:+.3f}]\n{tag}", ha="center", va="bottom", fontsize=6)
            ticks.append(x)
            labels.append(r["method"])
            x += 1
        x += 0.6
    ax.set_xticks(ticks, labels, rotation=30, ha="right", fontsize=7.5)
    lo = float(bars["ci_lo"].min())
    ax.set_ylim(max(0.0, lo - 0.05), float(bars["ci_hi"].max()) + 0.05)
    ax.set_ylabel("final eval accuracy, 95% CI")
    ax.set_title("Matched rollouts per prompt: V0.5 - GRPO at the same k (paired 95% CI)")
    draw_curves(cax, curves, "rollouts", list(bars["method"]))
    cax.set_xlabel("rollouts consumed (generated, cumulative)")
    cax.set_title(f"Accuracy vs rollouts ({_seeds_note(curves)})")
    cax.legend(fontsize=7)


# --- sharpening or learning: entropy, greedy and pass@k per step ---------------------------------

SHARPENING_COLS = ("method", "seed", "checkpoint", "step", "rollouts", "wall_time_s", "accuracy",
                   "greedy_accuracy", "pass_at_k")


def _sharpening_tables(P: Paths) -> list[Path]:
    """The curves table, then each (method, seed)'s metrics.parquet (its owner's for an alias)."""
    from sparserl.methods.run import method_run
    rl = P.cfg["rl"]
    return [P.head_to_head("curves")] + [method_run(P.cfg, m, s).metrics
                                         for m in dict.fromkeys(rl["methods"]) for s in rl["seeds"]]


def _read_sharpening(cfg: dict, tables: list[Path]) -> dict:
    """Greedy accuracy and pass@k per evaluated checkpoint (the curves' seed means, t-bands), and the
    policy entropy per training step, smoothed as the V0.5 entropy figure (None where a run's
    metrics do not log it: OpenRLHF's do not)."""
    from sparserl.figures.curves import read_smoothed
    curves_path, *metrics = tables
    df = _need(read_table(curves_path), SHARPENING_COLS, curves_path)
    if df["greedy_accuracy"].isna().all():
        raise FigureError(f"{curves_path}: greedy_accuracy is NaN everywhere: the runs were evaluated without the "
                          "greedy pass (evaluation.greedy: false, or before it existed); rerun `sparserl rl-eval`, "
                          f"then {BUILT_BY}")
    methods = list(dict.fromkeys(cfg["rl"]["methods"]))
    try:
        ent = read_smoothed(cfg, metrics, methods, "entropy")
    except FigureError:
        ent = None
    return {"df": curve_summary(df), "entropy": None if ent is None else ent["df"],
            "window": None if ent is None else ent["window"], "methods": methods,
            "pass_metric": _pass_name(cfg)}


def _pass_name(cfg: dict) -> str:
    """pass@k's name from the evaluation protocol's k (mean@16 -> pass@16)."""
    return f"pass@{int(setting(cfg, 'evaluation', 'default', 'k'))}"


def _sharpening_frame(data) -> pd.DataFrame:
    parts = [data["df"].assign(part="checkpoints")]
    if data["entropy"] is not None:
        parts.append(data["entropy"].assign(part="entropy per step"))
    return pd.concat(parts, ignore_index=True)


def _draw_checkpoints(ax, df: pd.DataFrame, col: str, styles: dict, methods: list[str]) -> None:
    for m in methods:
        d = df[df["method"] == m].sort_values("step")
        if d.empty:
            continue
        ax.plot(d["step"].to_numpy(), d[col].to_numpy(), lw=1.2, ms=3.5, label=m, **styles[m])
        lo, hi = d[f"{col}_ci_lo"].to_numpy(float), d[f"{col}_ci_hi"].to_numpy(float)
        if np.isfinite(lo).all() and np.isfinite(hi).all():
            ax.fill_between(d["step"].to_numpy(), lo, hi, color=styles[m]["color"], alpha=0.12, lw=0)


@register_figure("head_to_head/sharpening_curves", tables=_sharpening_tables, read=_read_sharpening,
                 layout=lambda data: pyplot().subplots(1, 4, figsize=(15, 4.6),
                                                       gridspec_kw={"width_ratios": [1, 1, 1, 0.75]}),
                 frame=_sharpening_frame, built_by=BUILT_BY + " and rule rl_train (metrics.parquet)",
                 unavailable=_no_rl,
                 bars="greedy and pass@k: 95% t-band over seeds (none with 1 seed); entropy: the seeds' min–max of "
                      "the smoothed curves",
                 caption="Sharpening or learning, per method of rl.methods: the policy's mean per-token entropy on "
                         "each step's sampled responses (metrics.parquet, a centred rolling mean over about a twelfth "
                         "of the run, seed mean), and at every evaluated checkpoint (the start policy at step 0, "
                         "rl.eval_fractions, the final one) the greedy accuracy (one greedy rollout per held-out "
                         "problem) and pass@k (share of problems with at least one correct of the k samples), each "
                         "the mean over benchmarks. Sharpening lowers the entropy and raises mean@k while greedy stays "
                         "flat and pass@k falls; learning raises greedy accuracy.")
def _sharpening_curves(data, axes):
    ent_ax, g_ax, p_ax, legend_ax = axes
    df, methods = data["df"], data["methods"]
    styles = _line_style(methods)
    if data["entropy"] is not None:
        e = data["entropy"]
        for m in methods:
            d = e[e["method"] == m].sort_values("step")
            if d.empty:
                continue
            st = styles[m]
            ent_ax.plot(d["step"].to_numpy(), d["smoothed"].to_numpy(), color=st["color"], ls=st["ls"], lw=1.2)
            if (d["seeds"] > 1).any():
                ent_ax.fill_between(d["step"].to_numpy(), d["lo"].to_numpy(), d["hi"].to_numpy(),
                                    color=st["color"], alpha=0.12, lw=0)
        ent_ax.set_title(f"Policy entropy (rolling mean over {data['window']} steps)")
    else:
        ent_ax.text(0.5, 0.5, "entropy not logged by these runs' metrics", ha="center", va="center",
                    transform=ent_ax.transAxes, fontsize=8)
        ent_ax.set_title("Policy entropy")
    ent_ax.set_ylabel("entropy (nats per token)")
    _draw_checkpoints(g_ax, df, "greedy_accuracy", styles, methods)
    g_ax.set_ylabel("greedy accuracy (mean over benchmarks)")
    g_ax.set_title(f"Greedy accuracy ({_seeds_note(df)})")
    _draw_checkpoints(p_ax, df, "pass_at_k", styles, methods)
    p_ax.set_ylabel(f"{data['pass_metric']} (mean over benchmarks)")
    p_ax.set_title(data["pass_metric"])
    for ax in (ent_ax, g_ax, p_ax):
        ax.set_xlabel("RL step")
    legend_ax.axis("off")
    legend_ax.legend(*g_ax.get_legend_handles_labels(), loc="center left", fontsize=6, frameon=False,
                     ncol=1 + len(methods) // 16)


# --- aggregates over benchmarks x seeds through rliable (sparserl.studies.aggregates) ----------------

AGG_BUILT_BY = "rule head_to_head_aggregates (`sparserl head-to-head-aggregates`)"
AGG_BARS = ("95% stratified-bootstrap percentile interval (as rliable: runs resampled within each benchmark; "
            "with head_to_head.pool a run is a (start, seed) pair); none with 1 run")
IQM_COLS = ("rank", "method", "metric", "runs", "tasks", "iqm", "ci_lo", "ci_hi")
IMPROVEMENT_COLS = ("x", "y", "against", "p_improvement", "ci_lo", "ci_hi", "runs_x", "tasks")
PROFILE_COLS = ("method", "tau", "fraction", "ci_lo", "ci_hi")


def _agg_note(cfg: dict, tables: list[Path]) -> str:
    """The footer's line with head_to_head.pool: the runs are (start, seed) pairs."""
    pool = (cfg.get("head_to_head") or {}).get("pool", [])
    return (f"runs: (start policy, seed) pairs, start policies pooled from this tree and {', '.join(pool)}"
            if pool else "")


def _read_agg(cols):
    def read(cfg: dict, tables: list[Path]) -> pd.DataFrame:
        (path,) = tables
        return _need(read_table(path), cols, path)
    return read


def _scores_note(df: pd.DataFrame, runs: str = "runs") -> str:
    """'3 seeds x 7 benchmarks', or with pooled start policies (head_to_head.pool) '2 starts x 1 seed
    = 2 runs x 7 benchmarks'."""
    n, t = int(df[runs].max()), int(df["tasks"].max())
    if "starts" in df and int(df["starts"].max()) > 1:
        from sparserl.studies.aggregates import design_text
        return design_text({"starts": int(df["starts"].max()), "seeds": int(df["seeds"].max())}, t)
    return f"{n} seed{'s' if n > 1 else ''} x {t} benchmarks" + ("" if n > 1 else ", 1 seed: no interval")


def _iqm_layout(df):
    n = df["method"].nunique()
    return pyplot().subplots(1, 2, figsize=(10, 1.4 + 0.22 * n), sharey=True)


@register_figure("head_to_head/aggregates_iqm", tables=_tables("iqm"), read=_read_agg(IQM_COLS), layout=_iqm_layout,
                 built_by=AGG_BUILT_BY, unavailable=_no_rl, bars=AGG_BARS, note=_agg_note,
                 caption="Interquartile mean (IQM: the mean of the middle half of the scores, rliable's aggregate_iqm) "
                         "of every method's seeds x benchmarks scores (with head_to_head.pool: its (start, seed) runs "
                         "x benchmarks): left, final accuracy per benchmark (mean@k over its held-out problems); "
                         "right, its gain over the start policy on the same benchmark. "
                         "Whisker = 95% stratified-bootstrap interval (rliable's get_interval_estimates: each "
                         "benchmark's runs resampled). Methods in order of accuracy IQM. The IQM is less swayed by "
                         "one outlying run or benchmark than the mean and less noisy than the median.")
def _aggregates_iqm(df, axes):
    acc = df[df["metric"] == "accuracy"].sort_values(["rank", "method"], kind="stable")
    order = list(acc["method"])
    y = {m: i for i, m in enumerate(order[::-1])}
    for ax, metric, label in zip(axes, ("accuracy", "gain"), ("final accuracy", "gain over the start policy")):
        d = df[df["metric"] == metric]
        if d.empty:
            ax.text(0.5, 0.5, "no gain: the start policy is not evaluated by this config", ha="center",
                    va="center", transform=ax.transAxes, fontsize=8)
            ax.set_title(f"IQM of {label}")
            continue
        for _, r in d.iterrows():
            lo, hi = float(r["ci_lo"]), float(r["ci_hi"])
            xerr = [[r["iqm"] - lo], [hi - r["iqm"]]] if np.isfinite(lo) and np.isfinite(hi) else None
            ax.errorbar(r["iqm"], y[r["method"]], xerr=xerr, fmt="o", ms=4, color=method_color(r["method"]),
                        capsize=2, lw=1)
        if metric == "gain":
            ax.axvline(0, color="0.4", lw=0.8, ls="--")
        ax.set_xlabel(f"IQM of {label} (benchmark scores, mean@k)")
        ax.set_title(f"IQM of {label}\n({_scores_note(d)})")
    axes[0].set_yticks(list(y.values()), list(y), fontsize=7)


def _improvement_layout(df):
    n = int(df.groupby("against").size().max()) if len(df) else 1
    return pyplot().subplots(1, 2, figsize=(12, 1.4 + 0.24 * n))


@register_figure("head_to_head/aggregates_improvement", tables=_tables("improvement"),
                 read=_read_agg(IMPROVEMENT_COLS), layout=_improvement_layout, built_by=AGG_BUILT_BY,
                 unavailable=_no_rl, note=_agg_note,
                 bars="95% stratified-bootstrap percentile interval of P(X > Y) (rliable: X's and Y's runs resampled "
                      "independently within each benchmark; with head_to_head.pool a run is a (start, seed) pair); none with 1 run",
                 caption="Probability of improvement P(X > Y) (rliable's probability_of_improvement): the chance that "
                         "a run of X scores a higher final accuracy than a run of Y on a benchmark (ties count one "
                         "half), averaged over benchmarks; left, every method X against GRPO G=8; right, against the "
                         "method with the highest accuracy IQM. Tick = the estimate, bar = its 95% interval; 0.5 = no "
                         "preference, an interval that excludes 0.5 says the data order the two. Drawn with rliable's "
                         "plot_probability_of_improvement.")
def _aggregates_improvement(df, axes):
    from rliable import plot_utils
    for ax, against in zip(axes, ("reference", "best")):
        d = df[df["against"] == against]
        if d.empty:
            ax.axis("off")
            why = ("GRPO G=8 (grpo_g8) is not in rl.methods" if against == "reference"
                   else "GRPO G=8 has the highest IQM: the left panel is against the best")
            ax.text(0.5, 0.5, why, ha="center", va="center", transform=ax.transAxes, fontsize=8)
            continue
        d = d.sort_values("p_improvement", ascending=True, kind="stable")
        keys = [f"{x},{y}" for x, y in zip(d["x"], d["y"])]
        plot_utils.plot_probability_of_improvement(
            dict(zip(keys, d["p_improvement"])), {k: np.array([lo, hi]) for k, lo, hi in zip(keys, d["ci_lo"], d["ci_hi"])},
            ax=ax, colors=[method_color(x) for x in d["x"]], xticks=[0, 0.25, 0.5, 0.75, 1.0], xlabel="P(X > Y)",
            ticklabelsize=6.5, labelsize=8, wrect=2, interval_height=0.6)
        ax.axvline(0.5, color="0.4", lw=0.8, ls="--")
        ax.set_xlim(0, 1)
        ax.set_title(f"P(X > {d['y'].iloc[0]}) ({'GRPO G=8' if against == 'reference' else 'best IQM'}; "
                     f"{_scores_note(d, 'runs_x')})", fontsize=8)


def _read_profiles(cfg: dict, tables: list[Path]) -> pd.DataFrame:
    df = _read_agg(PROFILE_COLS)(cfg, tables)
    return df.assign(method=pd.Categorical(df["method"], list(dict.fromkeys(df["method"])))).sort_values(
        ["method", "tau"], kind="stable").assign(method=lambda d: d["method"].astype(str))


@register_figure("head_to_head/aggregates_profile", tables=_tables("profiles"), read=_read_profiles,
                 layout=_curves_layout, built_by=AGG_BUILT_BY, unavailable=_no_rl, bars=AGG_BARS, note=_agg_note,
                 caption="Performance profiles (rliable's score distributions, as create_performance_profile): for "
                         "every accuracy threshold tau, the fraction of a method's seeds x benchmarks final "
                         "accuracies above tau, with a 95% stratified-bootstrap band. A curve that lies above another "
                         "everywhere dominates it (stochastic dominance); crossing curves mean the ranking depends on "
                         "the threshold. The area under a profile is the mean score. Drawn with rliable's "
                         "plot_performance_profiles.")
def _aggregates_profile(df, axes):
    from rliable import plot_utils
    ax, legend_ax = axes
    methods = list(dict.fromkeys(df["method"]))
    taus = np.sort(df["tau"].unique())
    prof = {m: df[df["method"] == m]["fraction"].to_numpy() for m in methods}
    cis = {m: (df[df["method"] == m]["ci_lo"].to_numpy(), df[df["method"] == m]["ci_hi"].to_numpy()) for m in methods}
    styles = _line_style(methods)
    plot_utils.plot_performance_profiles(
        prof, taus, performance_profile_cis=cis, ax=ax, colors={m: method_color(m) for m in methods},
        linestyles={m: styles[m]["ls"] for m in methods}, xticks=[0, 0.25, 0.5, 0.75, 1.0],
        xlabel=r"final accuracy on a benchmark ($\tau$)", ylabel=r"fraction of seeds x benchmarks with accuracy > $\tau$",
        labelsize=8, ticklabelsize=7, wrect=2, hrect=2)
    ax.set_title("Performance profiles of final accuracy")
    legend_ax.axis("off")
    legend_ax.legend(*ax.get_legend_handles_labels(), loc="center left", fontsize=6, frameon=False,
                     ncol=1 + len(methods) // 16)
