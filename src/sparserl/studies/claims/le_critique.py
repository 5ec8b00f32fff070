"""Claim measures of Le Critique (arXiv 2608.16739): final rewards of its runs, the critic's
explained variance, Tether's rho.
"""
from __future__ import annotations

import pandas as pd

from .context import Context, MissingArtifact, NotRun
from .rule import Interval, Premise, seed_interval


def _critique_kind(method: str) -> str:
    """mean / vf / pvf / tether / other, from the method's role (lambda_GAE = 1 only)."""
    from sparserl.studies.le_critique import role
    return {"Mean": "mean", "VF": "vf", "Pvf": "pvf", "Tether": "tether"}.get(role(method), "other")


def _critique_exp(cfg: dict, exp: str):
    from sparserl.envs.world import experiments
    if not (cfg.get("critique") or {}).get("experiments"):
        raise NotRun("no critique.experiments in this config")
    for e in experiments(cfg):
        if e.name == exp:
            return e
    raise NotRun(f"critique.experiments of this config has no {exp}")


def _critique_method(cfg: dict, exp: str, kind: str) -> str:
    e = _critique_exp(cfg, exp)
    found = [m for m in e.methods if _critique_kind(m) == kind]
    if not found:
        raise NotRun(f"experiment {exp} runs no {kind.upper() if kind != 'tether' else 'Tether'} method")
    return found[0]


def _critique_inputs(exp: str, *kinds: str, runs: bool = False):
    def inputs(P):
        for k in kinds:
            _critique_method(P.cfg, exp, k)
        CP = P.critique
        return [CP.final_table()] + ([CP.runs_table()] if runs else [])
    return inputs


def _critique_col(ctx: Context, exp: str, method: str, col: str) -> pd.Series:
    path = ctx.P.critique.final_table()
    f = ctx.table(path, need=("experiment", "method", "seed", col))
    r = f[(f["experiment"] == exp) & (f["method"] == method)].set_index("seed")[col]
    if r.empty:
        raise MissingArtifact(f"{path}: no run of {method} in {exp}; rerun `sparserl critique-summary`")
    return r


def critique_diff(exp: str, col: str, a: str, b: str):
    """Per-seed `col` of final.parquet, kind a minus kind b in experiment exp."""
    def measure(ctx):
        ma, mb = _critique_method(ctx.cfg, exp, a), _critique_method(ctx.cfg, exp, b)
        ra, rb = _critique_col(ctx, exp, ma, col), _critique_col(ctx, exp, mb, col)
        iv = seed_interval(ra, rb)  # one seed: no interval (final.parquet has no per-unit data)
        return Interval(iv.value, iv.lo, iv.hi, iv.method, f"{ma} {ra.mean():.3f} vs {mb} {rb.mean():.3f}")
    return dict(inputs=_critique_inputs(exp, a, b), measure=measure)


def critic_learns(exp: str) -> Premise:
    """Le Critique's value baselines rest on a critic that explains some return variance: EV(VF) > 0
    at the end of the run (t over seeds; one seed gives no interval, so unclear)."""
    def measure(ctx):
        m = _critique_method(ctx.cfg, exp, "vf")
        iv = seed_interval(_critique_col(ctx, exp, m, "ev_final"))
        return Interval(iv.value, iv.lo, iv.hi, iv.method)
    return Premise(text="the critic learns", quantity=f"EV(VF), final, {exp}", relation=">", threshold=0.0,
                   inputs=_critique_inputs(exp, "vf"), measure=measure)


def tether_rho(exp: str):
    """Tether's final rho (t over seeds), with its first-step value from runs.parquet."""
    def measure(ctx):
        m = _critique_method(ctx.cfg, exp, "tether")
        r = _critique_col(ctx, exp, m, "rho_final")
        runs = ctx.table(ctx.P.critique.runs_table(), need=("experiment", "method", "step"))
        d = runs[(runs["experiment"] == exp) & (runs["method"] == m)]
        first = d[d["step"] == d["step"].min()]["est_tether_rho"].mean() if "est_tether_rho" in d else float("nan")
        iv = seed_interval(r)
        return Interval(iv.value, iv.lo, iv.hi, iv.method, f"rho after the first step {first:.3f}, final {r.mean():.3f}")
    return dict(inputs=_critique_inputs(exp, "tether", runs=True), measure=measure)
