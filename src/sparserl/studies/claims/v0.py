"""Claim measures of V0 ("A Generalist Value Model for Any Policy at State Zero"): intra-context
AUC of the value model per protocol.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .context import Context, NotRun
from .rule import BOOT, Interval, Margin, group_bootstrap, seed_interval


def _v0_inputs(protocol: str):
    def inputs(P):
        if (P.cfg.get("v0") or {}).get("harvest") is None:
            raise NotRun("no v0.harvest in this config: V0's tables are not built")
        return [P.value_eval(f"v0_{protocol}"), P.value_eval(f"v0_{protocol}_predictions")]
    return inputs


def _context_aucs(pred: pd.DataFrame, method: str) -> pd.Series:
    from sparserl.values.v0.metrics import auc
    d = pred[pred["method"] == method]
    if d.empty:
        raise NotRun(f"V0's predictions table has no method {method}")
    return d.groupby(["model", "step"], sort=True).apply(lambda g: auc(g["value"] >= 0.5, g["p"]), include_groups=False)


def v0_auc_interval(ctx: Context, protocol: str, a: str, b: str | None = None) -> Interval:
    """Intra-context AUC of method a (or a - b) over every policy ('all' rows of V0's table)."""
    metrics = ctx.table(ctx.P.value_eval(f"v0_{protocol}"), need=("method", "model", "seed", "intra_auc"))
    rows = metrics[metrics["model"] == "all"]

    def by_seed(m):
        r = rows[rows["method"] == m].set_index("seed")["intra_auc"]
        if r.empty:
            raise NotRun(f"V0's {protocol} table has no method {m}")
        return r

    ra, rb = by_seed(a), (by_seed(b) if b else None)
    detail = f"{ra.mean():.3f} vs {rb.mean():.3f}" if b else ""
    if len(ra) >= 2 and (rb is None or len(rb) >= 2):
        iv = seed_interval(ra, rb)
        return Interval(iv.value, iv.lo, iv.hi, iv.method, detail)
    pred = ctx.table(ctx.P.value_eval(f"v0_{protocol}_predictions"), need=("method", "model", "step", "value", "p"))
    # a context whose queries all succeed or all fail has no AUC (intra_context_auc skips it too)
    both = pd.concat([_context_aucs(pred, m).rename(m) for m in (a, b) if m], axis=1).dropna()
    if both.empty:
        return Interval(np.nan, np.nan, np.nan, "no checkpoint context with both outcomes", detail)
    m, lo, hi = group_bootstrap(both[a].to_numpy(), both[b].to_numpy() if b else None)
    return Interval(m, lo, hi, f"bootstrap over {len(both)} checkpoint contexts (1 seed, {BOOT}x"
                    f"{', paired' if b else ''})", detail)


def v0_auc(protocol: str, a: str, b: str | None = None):
    return dict(inputs=_v0_inputs(protocol), measure=lambda ctx: v0_auc_interval(ctx, protocol, a, b))


def auc_margin(protocol: str, method: str, name: str) -> Margin:
    """B's own achievement for an AUC: its intra-context AUC above chance (0.5)."""
    def gain(ctx):
        iv = v0_auc_interval(ctx, protocol, method)
        return Interval(iv.value - 0.5, iv.lo - 0.5, iv.hi - 0.5, iv.method)
    return Margin(of=f"{name}'s AUC above chance (0.5)", inputs=_v0_inputs(protocol), gain=gain)
