"""Claim measures of BASIS's value study: MSE changes against oracle values.
"""
from __future__ import annotations

import math

import pandas as pd

from sparserl.core.stats import LEVEL, normal_quantile

from .context import BadArtifact, Context, MissingArtifact, NotRun
from .rule import Interval


def basis_inputs(*names: str):
    def inputs(P):
        from sparserl.studies import study_refs
        if not study_refs(P.cfg):
            raise NotRun("no basis.study_reference/study_oracle in this config: the value study does not run")
        SP = P.studies
        return [SP.summary("basis") if n == "summary" else SP.table("basis", n) for n in names]
    return inputs


def checkpoint_inputs(*names: str):
    """The RL-checkpoint study's tables (basis.study_checkpoints), or not run without it."""
    def inputs(P):
        from sparserl.studies.basis_checkpoints import checkpoint_settings
        if not checkpoint_settings(P.cfg):
            raise NotRun("no basis.study_checkpoints in this config: the RL-checkpoint value study does not run")
        return [P.studies.table("basis", n) for n in names]
    return inputs


def basis_headline(key: str):
    """A paired relative MSE change of the study's summary (its bootstrap over batches)."""
    def measure(ctx):
        path = ctx.P.studies.summary("basis")
        head = ctx.json(path).get("headline", {})
        if key not in head:
            raise MissingArtifact(f"{path}: headline has no {key!r}; rerun `sparserl study-basis-summary`")
        r = head[key]
        lo, hi = (float(v) for v in r["ci95"])
        return Interval(float(r["pct_change"]), lo, hi,
                        f"the study's paired bootstrap over {r['n_batches']} batches")
    return dict(inputs=basis_inputs("summary"), measure=measure)


def basis_sensitivity_n(ctx: Context, small: float = 8, large: float = 64) -> Interval:
    """MSE change from n = 8 to n = 64 cached reference rollouts (BASIS Figure 5): 100 (mse_64 /
    mse_8 - 1) from the n-sensitivity table, normal interval from its s.e. (delta method, the two
    settings' s.e. combined as independent: each setting draws its own batches)."""
    t = ctx.table(ctx.P.studies.table("basis", "sensitivity_n"), need=("value", "skipped", "mse", "mse_se"))
    ran = t[(t["skipped"].fillna("") == "") & t["mse"].notna()].set_index("value")
    if small not in ran.index or large not in ran.index:
        raise NotRun(f"the n-sensitivity table has no run at n={small:g} and n={large:g} "
                     f"(ran: {', '.join(f'{v:g}' for v in ran.index) or 'none'}; the cache holds basis.reference_n)")
    a, b = ran.loc[small], ran.loc[large]
    return _pct_change(a, b, f"n={small:g}: {a['mse']:.4f}, n={large:g}: {b['mse']:.4f}")


# the estimator of BASIS Figure 2 before batchwise refinement, if the study ever reports it


def basis_refined_vs_initial(ctx: Context) -> Interval:
    """BASIS Figure 2, from the RL-checkpoint study's `stage_initial_vs_refined` table at the middle
    checkpoint: the MSE of the refined estimator against the initial one, each averaged over the
    beta calibration grid (the paper's axis: "much less sensitive to a calibration
    hyperparameter"), as a % change with a normal interval from the rows' s.e. The detail names
    both estimators' best beta, which the average does not show."""
    t = ctx.table(ctx.P.studies.table("basis", "stage_initial_vs_refined"),
                  need=("stage", "estimator", "beta", "mse", "mse_se"))
    stage = "middle" if "middle" in set(t["stage"]) else sorted(set(t["stage"]))[len(set(t["stage"])) // 2]
    t = t[t["stage"] == stage]
    rows = {}
    for est in ("initial", "refined"):
        e = t[t["estimator"] == est]
        if e.empty:
            raise BadArtifact(f"{ctx.P.studies.table('basis', 'stage_initial_vs_refined')}: no "
                                  f"'{est}' rows at stage {stage}; rerun `sparserl study-basis-stages`")
        rows[est] = pd.Series({"mse": e["mse"].mean(), "mse_se": math.sqrt((e["mse_se"] ** 2).sum()) / len(e),
                               "best": e["mse"].min()})
    a, b = rows["initial"], rows["refined"]
    return _pct_change(a, b, f"{stage} checkpoint, mean over the beta grid: initial {a['mse']:.4f}, refined "
                             f"{b['mse']:.4f}; best beta: initial {a['best']:.4f}, refined {b['best']:.4f}")


def _pct_change(a: pd.Series, b: pd.Series, detail: str) -> Interval:
    """100 (mse_b / mse_a - 1) with a normal interval from the two rows' s.e. (delta method,
    combined as independent)."""
    r = b["mse"] / a["mse"]
    se = 100 * r * math.sqrt((b["mse_se"] / b["mse"]) ** 2 + (a["mse_se"] / a["mse"]) ** 2)
    pct, z = 100 * (r - 1), normal_quantile(0.5 + LEVEL / 2)
    return Interval(float(pct), float(pct - z * se), float(pct + z * se),
                    "normal from the table's s.e. (delta method)", detail)
