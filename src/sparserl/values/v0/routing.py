"""V0 for inference routing (V0 §5, Figure 5 right): send each query to the cheapest policy of a
fleet that V0 predicts will solve it, and trace accuracy against cost.

Fleet: the harvest's policies at their start checkpoint (step 0); a policy's cost is its number
of parameters (read from the checkpoint's safetensors header). Queries: the strict protocol's test
ids (never trained on); truth: each policy's avg@k on them. For a threshold tau, a router sends a
query to the cheapest policy whose predicted success is >= tau, else to the policy it predicts
best; sweeping tau traces its frontier. Routers:
- v0: V0's p(x | C_policy), C_policy a context from that policy's own pool (the strict table);
- matrix factorisation (EmbedLLM-style): logit v(x, m) = u_m . (W e_x) + b_m on the prompt
  embedding e_x, fitted on the train ids' values of every policy;
- oracle: the true avg@k (the ceiling); and the single policies (always-smallest, ..., always-largest).
"""
from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from sparserl.core.logs import get_logger

_log = get_logger(__name__)

TAUS = np.round(np.linspace(0.05, 0.95, 19), 3)


def parameter_count(checkpoint: str | Path) -> int:
    """Parameters of an HF checkpoint directory, from its safetensors headers (no weights loaded)."""
    files = sorted(Path(checkpoint).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{checkpoint}: no *.safetensors to count parameters from")
    n = 0
    for f in files:
        with open(f, "rb") as fh:
            size = struct.unpack("<Q", fh.read(8))[0]
            header = json.loads(fh.read(size))
        for k, v in header.items():
            if k != "__metadata__":
                n += int(np.prod(v["shape"]))
    return n


def route(pred: pd.DataFrame, truth: pd.DataFrame, cost: dict, taus=TAUS) -> pd.DataFrame:
    """pred / truth: (query_id x model) tables of predicted / true success. One row per tau:
    mean cost per query and accuracy (mean true avg@k of the chosen policies)."""
    models = sorted(cost, key=cost.get)
    P = pred.reindex(columns=models).to_numpy(float)
    Y = truth.reindex(index=pred.index, columns=models).to_numpy(float)
    c = np.array([cost[m] for m in models], float)
    rows = []
    for tau in taus:
        ok = P >= tau
        first = np.where(ok.any(1), ok.argmax(1), P.argmax(1))
        rows.append({"tau": float(tau), "cost": float(c[first].mean()),
                     "accuracy": float(Y[np.arange(len(Y)), first].mean()),
                     **{f"share_{m}": float(np.mean(first == i)) for i, m in enumerate(models)}})
    return pd.DataFrame(rows)


def fit_mf(x: np.ndarray, rows: pd.DataFrame, models: list, rank: int = 8, steps: int = 300,
           seed: int = 0) -> callable:
    """The matrix-factorisation router's predictor, fitted on rows (query index `qi`, model, value)."""
    torch.manual_seed(seed)
    X = torch.tensor((x - x.mean(0)) / (x.std(0) + 1e-6), dtype=torch.float32)
    W = torch.nn.Linear(X.shape[1], rank)
    U = torch.nn.Embedding(len(models), rank)
    b = torch.nn.Embedding(len(models), 1)
    mi = torch.tensor(rows["model"].map({m: i for i, m in enumerate(models)}).to_numpy())
    qi = torch.tensor(rows["qi"].to_numpy())
    y = torch.tensor(rows["value"].to_numpy(), dtype=torch.float32)
    opt = torch.optim.Adam([*W.parameters(), *U.parameters(), *b.parameters()], lr=1e-2, weight_decay=1e-4)
    for _ in range(steps):
        logit = (W(X[qi]) * U(mi)).sum(1) + b(mi)[:, 0]
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logit, y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    @torch.no_grad()
    def predict(q: np.ndarray) -> np.ndarray:
        z = W(X[torch.tensor(q)])
        return torch.sigmoid(z @ U.weight.T + b.weight[:, 0]).numpy()
    return predict


def run_routing(cfg: dict, *, harvest, embeddings, predictions, policies: dict, out, seed: int = 0,
                log=_log.info) -> pd.DataFrame:
    """Route over the fleet of the `harvest` table (token states at `embeddings`) with V0's strict
    `predictions`; each policy's cost is the parameter count of its checkpoint (`policies`:
    {name: dir}). Writes `out`."""
    from sparserl.core.artifacts import read_table, write_table
    from sparserl.values.v0.experiments import harvest_embeddings, harvest_texts
    from sparserl.values.v0.protocols import strict_generalisation
    from sparserl.values.v0.settings import v0_settings
    s = v0_settings(cfg)
    out_path, harvest_path, harvest = Path(out), harvest, read_table(harvest)
    start = harvest[(harvest["split"] == "heldout") & (harvest["step"] == 0)]
    models = sorted(start["model"].unique())
    missing = sorted(set(models) - set(policies))
    if missing:
        raise ValueError(f"v0-routing: no checkpoint dir for harvested policies {missing} (--policies with --labels)")
    cost = {m: parameter_count(policies[m]) for m in models}
    preds = read_table(predictions)
    v0 = preds[(preds["method"] == "v0") & (preds["step"] == 0)].pivot_table(index="query_id", columns="model", values="p")
    truth = start.pivot_table(index="query_id", columns="model", values="value")
    v0 = v0.dropna()
    table = harvest_embeddings(cfg, harvest_path, embeddings, s, harvest_texts(cfg, harvest), log=log)
    pooled = table.pooled("mean")
    tl = strict_generalisation(harvest, seed=seed)
    train_ids = sorted(set(tl.loc[(tl["role"] != "test") & (tl["step"] == 0), "query_id"]))
    fit_rows = start[start["query_id"].isin(train_ids)].assign(qi=lambda d: table.rows(d["query_id"].tolist()))
    mf = fit_mf(pooled, fit_rows, models, seed=seed)
    mf_pred = pd.DataFrame(mf(table.rows(list(v0.index))), index=v0.index, columns=models)
    out = [route(v0, truth, cost).assign(router="v0"), route(mf_pred, truth, cost).assign(router="matrix_factorisation"),
           route(truth.loc[v0.index], truth, cost).assign(router="oracle")]
    for m in models:
        y = truth.loc[v0.index, m]
        out.append(pd.DataFrame([{"tau": np.nan, "cost": float(cost[m]), "accuracy": float(y.mean()),
                                  "router": f"always_{m}"}]))
    res = pd.concat(out, ignore_index=True)
    write_table(res, out_path, cfg=cfg,
                extra={"queries": int(len(v0)), "cost": cost, "head": s["head"]["kind"], "embedder": table.embedder})
    log(f"routing over {len(v0)} test queries, fleet {cost}")
    return res
