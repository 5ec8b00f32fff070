"""Train and run V0 on a timeline table: one row per (policy, step, query) with its value.

A timeline table has columns `model` (the policy), `step`, `query_id`, `value` (avg@10 in [0, 1])
and `role`: 'context' (the context pool of that checkpoint), 'train' (queries V0 trains on) or
'test'. A checkpoint is a (model, step) group; a query is only ever scored against a context drawn
from its own checkpoint's pool, as a policy is only ever described by its own results.

Training (V0 §4.1): an episode is `query_batch` train queries of one checkpoint with `context`
pairs drawn from its pool; `batch_size` episodes make one AdamW step. Only the adapter trains.
"""
from __future__ import annotations

import time

import numpy as np
import pandas as pd
import torch

from sparserl.core.config import section_setting
from sparserl.values.v0.loss import v0_loss
from sparserl.values.v0.model import V0

GROUP = ["model", "step"]


def _groups(df: pd.DataFrame) -> dict:
    return {k: g for k, g in df.groupby(GROUP, sort=True)}


def draw_context(pool: pd.DataFrame, n: int, rng: np.random.Generator) -> pd.DataFrame:
    if len(pool) <= n:
        return pool
    return pool.iloc[np.sort(rng.choice(len(pool), n, replace=False))]


def episodes(timeline: pd.DataFrame, role: str, query_batch: int, rng: np.random.Generator) -> list:
    """(checkpoint, rows) batches of `query_batch` rows of `role`, shuffled within and across checkpoints."""
    out = []
    for key, g in _groups(timeline[timeline.role == role]).items():
        idx = rng.permutation(len(g))
        out += [(key, g.iloc[idx[s:s + query_batch]]) for s in range(0, len(g), query_batch)]
    return [out[i] for i in rng.permutation(len(out))]


def split_validation(timeline: pd.DataFrame, fraction: float, seed: int) -> pd.DataFrame:
    """Move `fraction` of the train query ids (all their rows) to role 'val' (V0's epoch selection)."""
    if not fraction:
        return timeline
    ids = np.sort(timeline.loc[timeline.role == "train", "query_id"].unique())
    val = set(np.random.default_rng([seed, 11]).permutation(ids)[:int(round(fraction * len(ids)))])
    out = timeline.copy()
    out.loc[(out.role == "train") & out.query_id.isin(val), "role"] = "val"
    return out


def fit_v0(model: V0, table, timeline: pd.DataFrame, s: dict, seed: int, log=None) -> pd.DataFrame:
    """Train `model.adapter` in place; returns the history (one row per optimiser step).

    With `train.val_fraction` > 0, that share of the train queries is held out; after every epoch
    their loss (one fixed context draw per checkpoint) is measured, the adapter of the best epoch
    is kept, and training stops after `train.patience` epochs without improvement."""
    t = s["train"]
    timeline = split_validation(timeline, float(section_setting(t, "v0", "train", "val_fraction")), seed)
    rng = np.random.default_rng(seed)
    pools = _groups(timeline[timeline.role == "context"])
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=t["lr"], weight_decay=t["weight_decay"])
    hist, step, t0 = [], 0, time.time()
    dev = model.device
    best, best_state, since = float("inf"), None, 0
    val = timeline[timeline.role == "val"]
    if not (timeline.role == "train").any():
        if log:
            log("V0: no train rows (a balanced train set needs both labels at some checkpoint); "
                "the adapter stays at its initialisation")
        model.eval()
        return pd.DataFrame(columns=["epoch", "step", "loss"])
    for epoch in range(int(t["epochs"])):
        model.train()
        eps = episodes(timeline, "train", int(t["query_batch"]), rng)
        for s0 in range(0, len(eps), int(t["batch_size"])):
            opt.zero_grad()
            losses = []
            for key, q in eps[s0:s0 + int(t["batch_size"])]:
                if key not in pools:
                    raise ValueError(f"checkpoint {key} has train queries but no context pool rows")
                c = draw_context(pools[key], int(t["context"]), rng)
                cs, cm = table.get(c["query_id"].tolist(), device=dev)
                qs, qm = table.get(q["query_id"].tolist(), device=dev)
                logits = model(cs, cm, torch.tensor(c["value"].to_numpy(), dtype=torch.float32, device=dev), qs, qm)
                losses.append(v0_loss(logits, torch.tensor(q["value"].to_numpy(), dtype=torch.float32, device=dev),
                                      t["alpha"], t["loss"]))
            loss = torch.stack(losses).mean()
            loss.backward()
            opt.step()
            step += 1
            hist.append({"epoch": epoch, "step": step, "loss": float(loss.detach())})
        msg = f"V0 epoch {epoch + 1}/{t['epochs']}: loss {np.mean([h['loss'] for h in hist if h['epoch'] == epoch]):.4f}"
        if len(val):
            model.eval()
            with torch.no_grad():
                pv = predict_v0(model, table, timeline, val, s, seed)
                vl = float(v0_loss(torch.logit(torch.tensor(pv["p"].to_numpy()), eps=1e-6),
                                   torch.tensor(pv["value"].to_numpy()), t["alpha"], t["loss"]))
            hist[-1]["val_loss"] = vl
            msg += f", val loss {vl:.4f}"
            if vl < best:
                best, since = vl, 0
                best_state = {k: v.detach().clone() for k, v in model.adapter.state_dict().items()}
                hist[-1]["best"] = True
            else:
                since += 1
        if log:
            log(msg + f" [{time.time() - t0:.0f} s]")
        if best_state is not None and since >= int(t.get("patience", 10**9)):
            break
    if best_state is not None:
        model.adapter.load_state_dict(best_state)
    model.eval()
    return pd.DataFrame(hist)


@torch.no_grad()
def predict_v0(model: V0, table, timeline: pd.DataFrame, queries: pd.DataFrame, s: dict,
               seed: int) -> pd.DataFrame:
    """p for every row of `queries`, each against one context drawn (per checkpoint, `seed`) from
    its checkpoint's pool, in query batches of `query_batch`. Adds p and context_mean."""
    t = s["train"]
    rng = np.random.default_rng([seed, 7])
    pools = _groups(timeline[timeline.role == "context"])
    model.eval()
    dev = model.device
    out = []
    for key, g in _groups(queries).items():
        if key not in pools:
            raise ValueError(f"checkpoint {key} has queries but no context pool rows")
        c = draw_context(pools[key], int(t["context"]), rng)
        cf = model.features(*table.get(c["query_id"].tolist(), device=dev))
        cv = torch.tensor(c["value"].to_numpy(), dtype=torch.float32, device=dev)
        p = []
        for s0 in range(0, len(g), int(t["query_batch"])):
            q = g.iloc[s0:s0 + int(t["query_batch"])]
            p.append(torch.sigmoid(model.predict_from_features(
                cf, cv, model.features(*table.get(q["query_id"].tolist(), device=dev)))))
        out.append(g.assign(p=torch.cat(p).cpu().numpy().astype(np.float64),
                            context_mean=float((c["value"] >= 0.5).mean())))
    return pd.concat(out).loc[queries.index]
