"""V0 on the paper's released data sample (`../shared/data/v0_official_sample/`), with its baselines.

The sample: two policies (Qwen3-4B-Instruct, DeepSeek-R1-Distill-Qwen-1.5B) at steps 16, 64 and
256; per checkpoint 512 context rows, 32 train and 32 test queries; 27 'validity' queries (test
queries of one checkpoint whose value changed by `improvement_delta` at another); prompt texts in
`prompt_dict.json` (id -> text, keys '<dataset>_<id>'). Scores are avg@10 on the +-1 scale, so
value = (score + 1) / 2.

Evaluated rows: test.jsonl plus the validity rows (one row per (model, step, id)). Every method
sees, per checkpoint, one context of 256 pairs drawn from that checkpoint's 512 context rows:
- v0 (adapter trained on train.jsonl, head `v0.head.kind`), and v0 with its adapter untrained;
- head-only: the same head on the embedder's mean-pooled states (no adapter);
- kNN-contextual (k = 64 over the checkpoint's context rows, a FIFO of 2048 holds them all);
- outcome model: prompt-only logistic regression fitted to the train and context rows of every
  checkpoint (no context at prediction time);
- context mean: the context's success rate for every query (AUC 0.5 by construction).
Pairwise calibration uses every pair of evaluated rows of the same query and policy at two steps
with different values; the sample has few (counted in the table).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from sparserl.values.v0 import metrics
from sparserl.values.v0.baselines import KNNContextual, OutcomeModel
from sparserl.values.v0.embedder import EmbeddingTable, embed_texts
from sparserl.values.v0.model import V0, save_v0
from sparserl.values.v0.settings import make_embedder, v0_device
from sparserl.values.v0.train import GROUP, draw_context, fit_v0, predict_v0
from sparserl.core.logs import get_logger

_log = get_logger(__name__)

FILES = {"context": "context.jsonl", "train": "train.jsonl", "test": "test.jsonl",
         "validity": "validity.jsonl"}
FIELDS = ("id", "score", "model", "step", "dataset")


def load_sample(folder: str | Path) -> tuple[pd.DataFrame, dict]:
    """(timeline with role context/train/test, prompts {query_id: text}). Errors name file and field."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"V0 official sample folder {folder} does not exist (set "
                                "v0.official_sample or pass --sample)")
    prompts_file = folder / "prompt_dict.json"
    if not prompts_file.is_file():
        raise FileNotFoundError(f"{prompts_file} is missing: the sample's id -> problem text map")
    prompts = json.loads(prompts_file.read_text())
    frames = []
    for role, name in FILES.items():
        f = folder / name
        if not f.is_file():
            raise FileNotFoundError(f"{f} is missing from the V0 sample")
        df = pd.read_json(f, lines=True)
        missing = [c for c in FIELDS if c not in df]
        if missing:
            raise ValueError(f"{f}: rows lack the field(s) {missing}; every row needs {list(FIELDS)}")
        bad = ~df["score"].between(-1, 1)
        if bad.any():
            raise ValueError(f"{f}: field 'score' must be avg@10 on the +-1 scale; row "
                             f"{int(np.flatnonzero(bad)[0])} has {df['score'][bad].iloc[0]!r}")
        df["query_id"] = df["dataset"].astype(str) + "_" + df["id"].astype(str)
        unknown = ~df["query_id"].isin(prompts)
        if unknown.any():
            raise ValueError(f"{f}: id {df['query_id'][unknown].iloc[0]!r} has no text in {prompts_file}")
        df["value"] = ((df["score"] + 1) / 2).round(6)
        df["role"] = "test" if role == "validity" else role
        df["validity"] = role == "validity"
        frames.append(df[["model", "step", "query_id", "value", "role", "validity"]])
    tl = pd.concat(frames, ignore_index=True)
    test = tl[tl.role == "test"]
    key = pd.Series(list(zip(test["model"], test["step"], test["query_id"])), index=test.index)
    first = ~key.duplicated()  # validity rows that test.jsonl also lists are evaluated once
    test = test[first].assign(validity=key[first].isin(set(key[test["validity"]])))
    tl = pd.concat([tl[tl.role != "test"], test], ignore_index=True)
    return tl, prompts


def _baselines(tl, table, s, seed) -> dict:
    rng = np.random.default_rng([seed, 7])  # the same context draw as predict_v0 with this seed
    pooled = table.pooled("mean")
    pools = {k: g for k, g in tl[tl.role == "context"].groupby(GROUP, sort=True)}
    test = tl[tl.role == "test"]
    out = {n: [] for n in ("knn_contextual", "context_mean")}
    for key, g in test.groupby(GROUP, sort=True):
        c = draw_context(pools[key], int(s["train"]["context"]), rng)
        cm = float((c["value"] >= 0.5).mean())
        knn = KNNContextual(k=64, window=2048)
        knn.observe(pooled[table.rows(pools[key]["query_id"].tolist())], pools[key]["value"].to_numpy())
        out["knn_contextual"].append(g.assign(p=knn.predict(pooled[table.rows(g["query_id"].tolist())]), context_mean=cm))
        out["context_mean"].append(g.assign(p=float(c["value"].mean()), context_mean=cm))
    fit = tl[tl.role != "test"]
    om = OutcomeModel().fit(pooled[table.rows(fit["query_id"].tolist())], fit["value"].to_numpy())
    out = {k: pd.concat(v).loc[test.index] for k, v in out.items()}
    cm = out["knn_contextual"]["context_mean"]
    out["outcome_model"] = test.assign(p=om.predict(pooled[table.rows(test["query_id"].tolist())]), context_mean=cm)
    return out


class _Pooled:
    """An EmbeddingTable seen as one token per prompt (its mean-pooled state): the head-only baseline."""

    def __init__(self, table: EmbeddingTable):
        self.t, self.p = table, torch.from_numpy(table.pooled("mean"))

    def get(self, ids, device=None):
        r = torch.from_numpy(self.t.rows(ids))
        return self.p[r][:, None, :].to(device), torch.ones((len(r), 1), dtype=torch.bool, device=device)


class _Identity(torch.nn.Module):
    def forward(self, states, mask):
        return states[:, 0]


def run_official(sample: str | Path, out_dir: str | Path, s: dict, *, seeds=(0, 1, 2),
                 threads: int = 2, log=_log.info) -> pd.DataFrame:
    """Every method on the sample; writes embeddings, predictions, metrics and the trained V0
    models under out_dir and returns the metrics table (one row per method and seed)."""
    from sparserl.core.artifacts import write_table
    torch.set_num_threads(threads)
    dev = v0_device(s)
    out_dir = Path(out_dir)
    tl, prompts = load_sample(sample)
    emb_file = out_dir / f"embeddings.{s['embedder']['kind']}.pt"
    ids = sorted(tl["query_id"].unique())
    if emb_file.is_file():
        table = EmbeddingTable.load(emb_file)
        if set(table.ids) != set(ids):
            raise ValueError(f"{emb_file} embeds other prompts than the sample; delete it to re-embed")
    else:
        emb = make_embedder(s)
        table = embed_texts(emb, ids, [prompts[i] for i in ids], log=log)
        table.save(emb_file)
    log(f"{len(ids)} prompts embedded by {table.embedder}: states {tuple(table.states.shape)}")
    test = tl[tl.role == "test"]
    query_mean = tl.groupby("query_id")["value"].mean()
    preds, rows = [], []

    def add(method, seed, pred):
        preds.append(pred.assign(method=method, seed=seed))
        rows.append({"method": method, "head": s["head"]["kind"], "embedder": table.embedder,
                     "seed": seed, **metrics.score_against_history(pred, query_mean)})
        log(f"{method} seed {seed}: " + ", ".join(f"{k} {v:.3f}" for k, v in rows[-1].items()
                                                   if isinstance(v, float)))

    for seed in seeds:
        torch.manual_seed(seed)
        model = V0(table.states.shape[-1], s["adapter"], s["head"], table.embedder).to(dev)
        add("v0_untrained", seed, predict_v0(model, table, tl, test, s, seed))
        hist = fit_v0(model, table, tl, s, seed, log=log)
        save_v0(model, out_dir / f"v0.seed{seed}.pt", extra={"sample": str(sample), "history": hist.to_dict("records")})
        add("v0", seed, predict_v0(model, table, tl, test, s, seed))
        head_only = V0(table.states.shape[-1], s["adapter"], s["head"], table.embedder).to(dev)
        head_only.adapter = _Identity()
        add("head_only", seed, predict_v0(head_only, _Pooled(table), tl, test, s, seed))
        for name, pred in _baselines(tl, table, s, seed).items():
            add(name, seed, pred)
    pred = pd.concat(preds, ignore_index=True)
    write_table(pred, out_dir / "predictions.parquet", cfg=s)
    table_m = pd.DataFrame(rows)
    write_table(table_m, out_dir / "metrics.parquet", cfg=s,
                extra={"sample": str(sample), "head": s["head"]["kind"], "embedder": table.embedder,
                       "evaluated_rows": int(len(test)), "validity_rows": int(test["validity"].sum())})
    return table_m


def summarize(metrics_table: pd.DataFrame) -> pd.DataFrame:
    cols = ["intra_auc", "calibration_mse", "pairwise_acc", "context_residual_rho", "query_residual_rho"]
    g = metrics_table.groupby("method", sort=False)
    out = g[cols].mean().add_suffix("")
    sd = g[cols].std(ddof=1).add_suffix("_sd")
    return out.join(sd).join(g["pairs"].first()).join(g["seed"].count().rename("seeds"))
