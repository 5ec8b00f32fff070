"""World 2.0's report as a figure: from `sparserl world-report`'s JSON of the RL start
policy, its greedy and sampled pass rate per level, the share of held-out problems it answers
wrong when greedy (all, slip templates, other templates) and the answer lengths in tokens."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from sparserl.core.paths import benchmark_names, pretrained_policies, world_policies
from sparserl.figures.registry import FigureError, row, register_figure


def _unavailable(cfg: dict) -> str:
    if not (cfg.get("tasks") or {}).get("world"):
        return "world 2.0 only (tasks.world; world 1 is configs/overlays/world1.yaml)"
    if not pretrained_policies(cfg):
        return "no pre-trained policy, so no world report"
    return ""


def _read(cfg: dict, tables: list[Path]) -> dict:
    report = json.loads(Path(tables[0]).read_text())
    ref = world_policies(cfg)[0]
    pol = (report.get("policies") or {}).get(ref)
    if pol is None or "greedy_wrong" not in pol:
        raise FigureError(f"{tables[0]}: no greedy_wrong for policy {ref} (written by an older "
                          "`sparserl world-report`); delete it and rerun rule world_report")
    k = pol["samples"]
    corpus = report.get("corpus_answer_tokens") or {}
    rows = []
    order = ["rl_pool"] + [b for b in benchmark_names(cfg) if b in pol["sets"]]
    for name in order + sorted(set(pol["sets"]) - set(order)):
        r = pol["sets"][name]
        rows.append({"set": name, "problems": r["problems"], "greedy": r["greedy"],
                     "sampled": r[f"sampled_t1_k{k}"], "greedy_wrong": r.get("greedy_wrong"),
                     "response_tokens": r["mean_response_tokens"],
                     "corpus_tokens": (corpus.get(name) or {}).get("mean")})
    gw = pol["greedy_wrong"]
    return {"df": pd.DataFrame(rows), "greedy_wrong": gw, "policy": ref, "k": k}


def _draw(data, axes):
    df, gw, k = data["df"], data["greedy_wrong"], data["k"]
    x = np.arange(len(df))
    a = axes[0]
    a.bar(x - 0.2, df["greedy"], 0.4, label="greedy")
    a.bar(x + 0.2, df["sampled"], 0.4, label=f"mean@{k}, T=1")
    a.set_xticks(x, df["set"], rotation=45, ha="right")
    a.set_ylim(0, 1)
    a.set_ylabel("pass rate")
    a.set_title(f"start policy {data['policy']} per level")
    a.legend()
    b = axes[1]
    labels = ["held-out", "slip templates", "other templates"]
    vals = [gw.get("heldout"), gw.get("slip_templates"), gw.get("other_templates")]
    b.bar(labels, [v if v is not None else 0.0 for v in vals], color=["C2", "C3", "C0"])
    b.axhline(0.25, color="gray", ls="--", lw=1)
    b.set_ylim(0, 1)
    b.set_ylabel("share with a wrong greedy answer")
    b.set_title(f"greedy-wrong ({gw['problems']} held-out problems)")
    c = axes[2]
    c.bar(x - 0.2, df["corpus_tokens"].fillna(0.0), 0.4, label="corpus targets")
    c.bar(x + 0.2, df["response_tokens"], 0.4, label="sampled responses")
    c.set_xticks(x, df["set"], rotation=45, ha="right")
    c.set_ylabel("tokens (EOS included)")
    c.set_title("answer length")
    c.legend()


register_figure(
    "world/start_policy", tables=lambda P: [P.world_report()], read=_read,
    layout=row(3, (14.0, 4.2)), unavailable=_unavailable,
    built_by="rule world_report (`sparserl world-report`)",
    caption="World 2.0 as the RL start policy sees it (sparserl.evaluation.world): left, its greedy "
            "pass rate and its mean pass rate over the report's samples at T=1, top-p 1, on the RL "
            "pool and every benchmark level; middle, the share of held-out problems whose greedy "
            "answer is wrong, over all of them, over those of slip templates (where the corpus "
            "taught a systematic slip) and over the others, the dashed line at 25%, the greedy-wrong share world 2.0 was built to exceed so that RL must move the mode; right, "
            "the mean answer length in tokens of the corpus targets and of the sampled responses.",
)(_draw)
