"""Learning or sharpening: two splits of the held-out problems, from the start policy to a run's
final checkpoint, on per-problem tables (`evaluate.per_problem_path`: benchmark, id, p, greedy);
a gain in mean@k alone may be sharpening onto the start's mode.

- The **slip-template split** (world 2.0, `tasks.worked`): greedy accuracy on the problems whose
  template is a slip template and on the others. A hash of the template chooses the slip templates
  (`worked.is_slip_template`), not the start policy's answers, so the split is free of selection:
  a gain on slip templates is the corpus's taught slip unlearned, the primary reading of
  "learning vs sharpening". World 1 has no slip templates; the split then says so.
- The **greedy-wrong split** with its complement: of the problems the start policy answers wrong
  greedily, how many the final checkpoint answers right (wrong -> right), and of those it answered
  right, how many it now answers wrong (right -> wrong). The first count alone is chosen by the
  start's own answers, so any change of the policy raises it; the net (the difference over all
  held-out problems) is what greedy accuracy moved.

Accuracies here are pooled over problems (a benchmark may hold few of one kind), not the mean over
benchmarks of the RL summary's `eval_greedy`.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from sparserl.core.artifacts import read_table
from sparserl.core.paths import Paths
from sparserl.tasks import worked

NO_SLIP = "no slip templates (world 1)"
KEY = ["benchmark", "id"]


def slip_labels(P: Paths) -> pd.DataFrame | None:
    """(benchmark, id, slip) of every benchmark problem of the layout's config, `slip` whether its
    template is a slip template; None in a world without them (`tasks.world` unset: world 1)."""
    w = worked.settings(P.cfg.get("tasks") or {})
    if w is None:
        return None
    parts = []
    for b in P.benchmark_names():
        df = read_table(P.benchmark(b))
        slip = [worked.is_slip_template(worked.template(q), w["slip_share"], w["salt"]) for q in df["problem"]]
        parts.append(pd.DataFrame({"benchmark": b, "id": df["id"].to_numpy(), "slip": slip}))
    return pd.concat(parts, ignore_index=True)


def slip_inputs(P: Paths) -> list:
    """The tables `slip_labels` reads (every benchmark; none in world 1): an input of the rules whose
    command calls it (rl_summary, head_to_head), so that a DAG of those rules alone has them."""
    if worked.settings(P.cfg.get("tasks") or {}) is None:
        return []
    return [P.benchmark(b) for b in P.benchmark_names()]


def _joined(start: pd.DataFrame, final: pd.DataFrame, where: str) -> pd.DataFrame:
    """start and final greedy scores side by side, one row per held-out problem."""
    for name, t in (("start", start), ("final", final)):
        missing = [c for c in KEY + ["greedy"] if c not in t]
        if missing:
            raise ValueError(f"{where}: the {name} per-problem table has no column(s) {missing}; rerun its "
                             "evaluation with evaluation.greedy: true")
    d = start[KEY + ["greedy"]].merge(final[KEY + ["greedy"]], on=KEY, how="outer", suffixes=("_start", "_final"),
                                      validate="one_to_one", indicator=True)
    if (d["_merge"] != "both").any():
        raise ValueError(f"{where}: {int((d['_merge'] != 'both').sum())} problems are in only one of the start and "
                         "final per-problem tables; they were evaluated on other benchmarks: rerun the run's evaluation")
    return d.drop(columns="_merge")


def greedy_flips(start: pd.DataFrame, final: pd.DataFrame, where: str = "per-problem tables") -> dict:
    """The greedy-wrong split with its complement: wrong -> right and right -> wrong counts (a greedy
    answer is right when its score is >= 0.5), the problems on each side, and the net change of
    greedy accuracy pooled over the held-out problems, (wrong -> right - right -> wrong) / problems."""
    d = _joined(start, final, where)
    right0, right1 = d["greedy_start"] >= 0.5, d["greedy_final"] >= 0.5
    w2r, r2w = int((~right0 & right1).sum()), int((right0 & ~right1).sum())
    return {"greedy_wrong_to_right": w2r, "greedy_right_to_wrong": r2w,
            "greedy_wrong_problems": int((~right0).sum()), "greedy_right_problems": int(right0.sum()),
            "greedy_flip_net": (w2r - r2w) / len(d) if len(d) else np.nan}


def slip_split(start: pd.DataFrame, final: pd.DataFrame, labels: pd.DataFrame | None,
               where: str = "per-problem tables") -> dict:
    """Greedy accuracy on slip-template problems and on the others, start, final and change, with
    the problem counts and `slip_split` saying what was split (NO_SLIP, and NaN, without labels)."""
    keys = ("slip_greedy", "other_greedy")
    if labels is None:
        return {"slip_split": NO_SLIP, **{f"{p}{k}{s}": np.nan for k in keys
                                          for p, s in (("start_eval_", ""), ("eval_", "_final"), ("eval_", "_gain"))}}
    d = _joined(start, final, where).merge(labels, on=KEY, how="left", validate="one_to_one")
    if d["slip"].isna().any():
        raise ValueError(f"{where}: {int(d['slip'].isna().sum())} problems are in no benchmark of the config; the "
                         "tables come from another task split: rerun their evaluations")
    slip = d["slip"].astype(bool).to_numpy()
    out = {"slip_split": f"{int(slip.sum())} slip-template / {int((~slip).sum())} other problems",
           "slip_problems": int(slip.sum()), "other_problems": int((~slip).sum())}
    for k, sel in (("slip_greedy", slip), ("other_greedy", ~slip)):
        s0 = float(d.loc[sel, "greedy_start"].mean()) if sel.any() else np.nan
        s1 = float(d.loc[sel, "greedy_final"].mean()) if sel.any() else np.nan
        out.update({f"start_eval_{k}": s0, f"eval_{k}_final": s1, f"eval_{k}_gain": s1 - s0})
    return out
