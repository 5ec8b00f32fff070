"""The head-to-head figures (issue 14), drawn from the tables of `sparserl head-to-head` only
(`results/{scale}/head_to_head/{ranking,pairs,curves}.parquet`; rules and CIs in
`sparserl.studies.head_to_head`): accuracy against rollouts consumed and against training wall
time, the ranking with its tie groups, and GRPO at G = 4, 8 beside V0.5 at k = 4, 8, the
comparison the V0.5 analysis lists as missing (its Figure 5 sets k = 4, 8 against GRPO G = 16 only).
Every method of `rl.methods` is drawn, in its colour (`style.method_color`)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from sparserl.core.artifacts import read_table
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
    return lambda cfg: [Paths(cfg).head_to_head(n) for n in names]


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


@register_figure("head_to_head/ranking", tables=_tables("ranking"), read=_read_ranking, layout=_ranking_layout,
                 built_by=BUILT_BY, unavailable=_no_rl,
                 bars="95% CI: t-interval over seeds (>= 2 seeds), else a stratified bootstrap over the eval problems",
                 caption="Every method ranked by final eval accuracy: bar = mean over seeds, whisker = 95% CI "
                         "(t-interval over seeds with >= 2 seeds; with 1 seed a stratified bootstrap over the eval "
                         "problems, which holds the run fixed and so carries no seed noise). Letters = tie groups: "
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
    ax.set_title(f"Head-to-head ranking (95% CI: {df['ci_method'].iloc[0]})\n"
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
