"""BASIS Table 2 (out-of-domain evaluation) as a figure, from `results/{scale}/ood/ood.parquet` only.

Rows: the RL start policy and Table 2's methods (GRPO G=8, vanilla G=1, REINFORCE++ G=1, BASIS
G=1; mean over seeds), columns: each OOD benchmark and their unweighted average, then one Δ row
per baseline, BASIS minus it, in points. Cells of a Δ row are green where BASIS is ahead and gray
where it is behind by less than 5 points, as the paper colours its tables. At paper scale the
benchmarks are lm-evaluation-harness's MMLU-Pro, MGSM and IFEval and evalplus's HumanEval+ and
MBPP+; at tiny and small scale reasoning-gym families the policies never trained on.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from sparserl.evaluation.ood import START, ood_settings, t2_table
from sparserl.figures.registry import pyplot, read_single, register_figure
from sparserl.figures.style import method_color

# the role names of Table 1's figure (figures/basis.py), with the family
LABELS = {"grpo_g8": "GRPO G=8 (group mean)", "basis_grid_grpo_g1_vanilla": "GRPO G=1 vanilla (b=0)",
          "basis_grid_grpo_g1_rpp": "GRPO G=1 REINFORCE++", "basis_grid_grpo_g1_basis": "GRPO G=1 BASIS (½ steps)",
          START: "start policy"}


def _unavailable(cfg: dict) -> str:
    if not cfg.get("rl") or not cfg.get("ood"):
        return "BASIS Table 2 needs `ood` and `rl` sections in the config"
    try:
        ood_settings(cfg)
    except Exception as e:  # a bad section is reported by the DAG's parse; here it only hides the figure
        return str(e)
    return ""


def _read(cfg: dict, tables):
    df = read_single(cfg, tables)
    s = ood_settings(cfg)
    t2 = t2_table(df, s["methods"], s["basis_method"])
    suites = sorted(set(df["suite"]))
    metrics = df.groupby("benchmark", sort=False)["metric"].first()
    return {"df": t2, "long": df, "benchmarks": list(dict.fromkeys(df["benchmark"])), "suites": suites,
            "metrics": metrics.to_dict(), "basis": s["basis_method"], "scale": cfg["scale"]}


def _layout(data):
    n = len(data["df"])
    return pyplot().subplots(2, 1, figsize=(max(8.5, 1.5 * (len(data["benchmarks"]) + 1) + 3.5), 3.4 + 0.26 * n),
                             gridspec_kw={"height_ratios": [3, 0.6 + 0.26 * n]})


def _label(m: str) -> str:
    return LABELS.get(m, m)


def _draw(data, axes):
    ax, tab = axes
    t2 = data["df"]
    cols = data["benchmarks"] + ["Avg"]
    methods = t2[t2["kind"] == "method"]
    w = 0.8 / max(1, len(methods))
    x = np.arange(len(cols))
    for j, (_, r) in enumerate(methods.iterrows()):
        vals = np.array([r[c] for c in cols], dtype=float)
        sd = np.array([r.get(f"{c} sd", np.nan) for c in cols], dtype=float)
        ax.bar(x + (j - (len(methods) - 1) / 2) * w, vals, w, color=method_color(r["row"]),
               yerr=None if np.isnan(sd).all() else sd, capsize=2, label=f"{_label(r['row'])} ({r['seeds']} seed"
               f"{'s' if r['seeds'] != 1 else ''})")
    ax.set_xticks(x, [f"{c}\n({data['metrics'].get(c, 'mean of the columns')})" for c in cols], fontsize=7)
    ax.set_ylabel("score")
    ax.set_ylim(0, min(1.0, 1.25 * float(np.nanmax([methods[c].max() for c in cols]))) or 1.0)
    ax.legend(fontsize=6.5, ncol=3, loc="upper left", frameon=False)
    what = ("lm-evaluation-harness (MMLU-Pro, MGSM, IFEval) and evalplus (HumanEval+, MBPP+)"
            if set(data["suites"]) & {"lm_eval", "evalplus"} else
            "reasoning-gym families never trained on (tiny world)")
    ax.set_title(f"BASIS Table 2: out-of-domain evaluation, {what}", fontsize=9, loc="left")
    tab.axis("off")
    cells, colours = [], []
    for _, r in t2.iterrows():
        delta = r["kind"] == "delta"
        cells.append([(f"{100 * r[c]:+.1f}" if delta else f"{100 * r[c]:.1f}") if pd.notna(r[c]) else "–" for c in cols])
        colours.append([("#c7e9c0" if r[c] > 0 else "#e0e0e0" if r[c] > -0.05 else "white")
                        if delta and pd.notna(r[c]) else "white" for c in cols])
    names = [f"{_label(data['basis'])} − {_label(r['row'][5:])}" if r["kind"] == "delta" else _label(r["row"])
             for _, r in t2.iterrows()]
    width = 0.62 / len(cols)
    table = tab.table(cellText=[[nm] + c for nm, c in zip(names, cells)],
                      cellColours=[["white"] + c for c in colours], colLabels=[""] + cols,
                      colWidths=[0.38] + [width] * len(cols), cellLoc="center", bbox=[0, 0, 1, 1])
    for (r, c), cell in table.get_celld().items():
        if c == 0:
            cell.set_text_props(ha="left")
            cell.PAD = 0.02
    table.auto_set_font_size(False)
    table.set_fontsize(6.5)


register_figure(
    "basis/t2_ood", tables=lambda P: [P.ood.table()], read=_read, layout=_layout,
    frame=lambda data: data["df"], unavailable=_unavailable, bars="±1 sd across seeds (none with one seed)",
    built_by="rule ood_eval (`sparserl ood-eval`; paper scale: rule ood_table, `sparserl ood-table`)",
    caption="BASIS Table 2: out-of-domain evaluation of the GRPO variants trained on the math pool: the "
            "start policy, GRPO G=8, vanilla G=1, REINFORCE++ G=1 and BASIS G=1 (half the steps), mean "
            "over seeds (bars: ±1 sd across seeds), on each OOD benchmark and their unweighted average "
            "(scores ×100 in the table), then BASIS minus each baseline in points (green: BASIS ahead; "
            "gray: behind by < 5). Paper scale: lm-evaluation-harness's MMLU-Pro (exact match), MGSM "
            "(mean of the languages' exact match) and IFEval (prompt-level strict accuracy), evalplus's "
            "HumanEval+ and MBPP+ (greedy pass@1, base + extra tests). Tiny and small scale: "
            "reasoning-gym families the policies never trained on (mean@k under the evaluation "
            "protocol; the prompts of some hold tokens never seen in pre-training, the share is in the table).")(_draw)
