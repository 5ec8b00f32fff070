"""The start policy's pass@k curve: the unbiased pass@k of Chen et al. 2021
(arXiv:2107.03374, Sec. 2.1) at k = 1, 2, 4, ... up to the `evaluation.start_k` samples a problem it
was evaluated with, per benchmark and over all, from `Paths.pass_at_k_curve` (rule evaluate)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from sparserl.core.config import setting
from sparserl.core.paths import Paths
from sparserl.figures.registry import FigureError, pyplot, read_single, register_figure


def _no_start(cfg: dict) -> str:
    policy = (cfg.get("rl") or {}).get("policy")
    if not policy:
        return "the start policy's pass@k curve needs an `rl` section with rl.policy"
    policies = (cfg.get("evaluation") or {}).get("policies", list(cfg.get("policies", {})))
    return "" if policy in policies else f"the DAG does not evaluate the start policy {policy} (evaluation.policies)"


def _tables(P: Paths) -> list:
    return [P.pass_at_k_curve(P.cfg["rl"]["policy"])]


def _read(cfg: dict, tables) -> dict:
    df = read_single(cfg, tables)
    missing = [c for c in ("benchmark", "k", "pass_at_k", "problems", "samples") if c not in df]
    if missing:
        raise FigureError(f"{tables[0]} has no {', '.join(missing)} column; rerun rule evaluate "
                          f"(`sparserl evaluate --policy {cfg['rl']['policy']}`)")
    from sparserl.evaluation.pass_at_k import OVERALL
    k = int(setting(cfg, "evaluation", "default", "k"))
    return {"df": df, "policy": cfg["rl"]["policy"], "overall": OVERALL, "protocol_k": k}


@register_figure("head_to_head/start_pass_at_k", tables=_tables, read=_read, unavailable=_no_start,
                 layout=lambda data: pyplot().subplots(figsize=(6.8, 4.4)),
                 built_by="rule evaluate (`sparserl evaluate --policy <rl.policy>`)",
                 caption="The RL start policy's pass@k against k (log2 axis), k = 1, 2, 4, ... up to the samples a "
                         "problem it was evaluated with (evaluation.start_k): the unbiased estimator of Chen et al. "
                         "2021 (1 - C(n-c,k)/C(n,k), averaged over problems), per benchmark (thin) and over all "
                         "(bold: the mean of the benchmarks' means, as every accuracy here). The dotted line marks "
                         "the protocol's k: every RL gain in pass@k and mean@k is measured against the start's "
                         "estimate from these samples, not a k-sample one.")
def _start_pass_at_k(data, ax):
    df, overall = data["df"], data["overall"]
    if df.empty:
        raise FigureError("the pass@k curve table is empty")
    for bench, d in df[df["benchmark"] != overall].groupby("benchmark", sort=False):
        ax.plot(d["k"], d["pass_at_k"], marker=".", lw=1, alpha=0.7, label=f"{bench} ({int(d['problems'].iloc[0])})")
    o = df[df["benchmark"] == overall]
    ax.plot(o["k"], o["pass_at_k"], "k-", marker="o", lw=2.4, label=f"overall ({int(o['problems'].iloc[0])} problems)")
    ks = np.sort(df["k"].unique())
    ax.set_xscale("log", base=2)
    ax.set_xticks(ks, [str(int(k)) for k in ks])
    if data["protocol_k"] in set(ks.tolist()):
        ax.axvline(data["protocol_k"], color="0.4", ls=":", lw=1)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("k (samples a problem, of n drawn)")
    ax.set_ylabel("pass@k (unbiased)")
    n = int(pd.to_numeric(df["samples"]).min())
    ax.set_title(f"Start policy {data['policy']}: pass@k from n = {n} samples a problem", fontsize=9.5)
    ax.legend(fontsize=6.5, loc="lower right")
