"""V0's Tables 1 and 2 on the harvest: V0 against every baseline, under one protocol.

`run_protocol(cfg, protocol, ...)` reads the harvest table, builds the protocol's timeline
(`protocols`), embeds every prompt once (cached beside the outputs), trains V0 on the train rows
of every policy and checkpoint, and scores the test rows with V0 and the baselines:
v0, v0_untrained, head_only (the head on mean-pooled embeddings), knn_contextual (a FIFO of the
policy's last 2048 context pairs, k = 64), outcome_model (prompt only), context_mean, and the
coupled value models (vanilla, step-wise retrain; `coupled`), then the reference rows
(`references`: oracle_p, oracle_p_resampled, level_only). Writes the predictions and one metrics
row per method (overall and per policy) to the files it is given (`Paths.value_eval`).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import torch

from sparserl.core.config import section_setting
from sparserl.values.v0 import metrics
from sparserl.values.v0.baselines import KNNContextual, OutcomeModel
from sparserl.values.v0.embedder import EmbeddingTable, embed_texts
from sparserl.values.v0.model import V0, save_v0
from sparserl.values.v0.protocols import PROTOCOLS
from sparserl.values.v0.references import (level_only_predictions, oracle_predictions, query_levels,
                                           resampled_oracle_predictions)
from sparserl.values.v0.settings import make_embedder, v0_device, v0_settings
from sparserl.values.v0.train import GROUP, draw_context, fit_v0, predict_v0
from sparserl.core.logs import get_logger

_log = get_logger(__name__)


def embedding_table(cfg: dict, s: dict, texts: dict, path: Path, log=None,
                    embedder_policy: Path | None = None) -> EmbeddingTable:
    """Every prompt's token states, cached at `path` (rebuilt when the prompts differ).
    `embedder_policy`: the policy folder an embedder of kind `policy` reads (its rule's input)."""
    log = log or _log.info
    ids = sorted(texts)
    if path.is_file():
        t = EmbeddingTable.load(path)
        if sorted(t.ids) == ids:
            return t
    if s["embedder"]["kind"] == "policy" and embedder_policy is None:
        raise ValueError(f"{path}: V0's embeddings of these prompts are not cached there, and v0.embedder "
                         f"(kind policy, {s['embedder']['path']}) needs its policy's folder to embed them; "
                         "make them with `sparserl v0-embed --embedder-policy DIR` (rules v0_embeddings, "
                         "v0_pool_embeddings)")
    t = embed_texts(make_embedder(s, embedder_policy), ids, [texts[i] for i in ids], log=log)
    t.save(path)
    return t


def query_text(cfg: dict, problem: str) -> str:
    """What V0's embedder reads for a problem: the prompt without any policy's chat template.

    V0 is policy-agnostic (the policy enters only through its context set C_pi): one query id has
    one embedding, paired with contexts of every harvested policy and, as the prior, with the RL
    policy's. The paper's released sample embeds the bare problem text. Under `tasks.chat_template` each
    policy wraps the prompt in its own template (four different ones at paper scale), so V0 embeds
    the user message they share (the text OpenRLHF's dataset hands to `apply_chat_template`).
    Without a chat template this is `format_prompt`'s text, as before."""
    from sparserl.tasks import format_prompt
    from sparserl.tasks.prompts import PAPER_INSTRUCTION
    t = cfg["tasks"]
    if t.get("chat_template"):
        return t["prompt_template"].format(problem=problem, instruction=PAPER_INSTRUCTION)
    return format_prompt(cfg, problem)


def harvest_texts(cfg: dict, harvest: pd.DataFrame) -> dict:
    """Each harvest query's prompt as V0 reads it (`query_text`), by query id."""
    return {q: query_text(cfg, p) for q, p in zip(harvest["query_id"], harvest["problem"])}


def harvest_embeddings(cfg: dict, harvest, out, s: dict | None = None, texts: dict | None = None,
                       log=None, embedder_policy: Path | None = None) -> EmbeddingTable:
    """The token states of every prompt of the `harvest` table, cached at `out`
    (`Paths.v0_embeddings`; rule v0_embeddings computes them once, so the table, ablation and
    routing jobs that run side by side only load them). `texts`: `harvest_texts` of the harvest
    table, read when not given."""
    from sparserl.core.artifacts import read_table
    s = s or v0_settings(cfg)
    texts = harvest_texts(cfg, read_table(harvest)) if texts is None else texts
    return embedding_table(cfg, s, texts, Path(out), log=log, embedder_policy=embedder_policy)


def knn_predictions(timeline: pd.DataFrame, pooled: np.ndarray, table: EmbeddingTable,
                    window: int = 2048, k: int = 64) -> pd.DataFrame:
    """Per policy, in step order: the FIFO holds the context pairs seen so far; test rows of a
    checkpoint are scored after its context pairs enter the buffer."""
    out = []
    for _, g in timeline.groupby("model", sort=True):
        knn = KNNContextual(k=k, window=window)
        for _, c in g.groupby("step", sort=True):
            ctx = c[c["role"] == "context"]
            knn.observe(pooled[table.rows(ctx["query_id"].tolist())], ctx["value"].to_numpy())
            test = c[c["role"] == "test"]
            out.append(test.assign(p=knn.predict(pooled[table.rows(test["query_id"].tolist())])))
    return pd.concat(out)


def _on_device(table: EmbeddingTable, dev: torch.device, log) -> EmbeddingTable:
    """The table on the GPU when it fits in half of the free memory (paper scale: ~36 GB of
    float16 states on an 80 GB GPU); else it stays in host memory and each episode is copied."""
    if dev.type != "cuda":
        return table
    free, _ = torch.cuda.mem_get_info(dev)
    need = table.states.element_size() * table.states.numel()
    if need > free // 2:
        log(f"V0: token states {need / 2**30:.1f} GiB > half of the {free / 2**30:.1f} GiB free on {dev}; "
            "they stay in host memory (slower episodes)")
        return table
    return table.to(dev)


def _protocol_data(cfg: dict, protocol: str, seed: int, threads: int, log, harvest_path, embeddings):
    """What every V0 experiment on the harvest starts from: settings, harvest (`harvest_path`), the
    protocol's timeline, prompt texts, their embeddings (cached at `embeddings`), each query's mean
    value over the history, the test rows."""
    from sparserl.core.artifacts import read_table
    torch.set_num_threads(threads)
    s = v0_settings(cfg)
    harvest = read_table(harvest_path)
    tl = PROTOCOLS[protocol](harvest, seed=seed).reset_index(drop=True)
    texts = harvest_texts(cfg, harvest)
    table = _on_device(harvest_embeddings(cfg, harvest_path, embeddings, s, texts, log=log), v0_device(s), log)
    hist = harvest.groupby("query_id")["value"].mean()
    return s, harvest, tl, texts, table, hist, tl[tl["role"] == "test"]


def run_protocol(cfg: dict, protocol: str, *, harvest, embeddings, level_tables, out, predictions, model_file,
                 policies: dict | None = None, seed: int = 0, threads: int = 2, log=_log.info,
                 coupled: bool = True) -> pd.DataFrame:
    """V0 and its baselines under `protocol` on the `harvest` table (token states cached at
    `embeddings`; each query's level from `level_tables`, the pool and benchmark files): the
    metrics table `out`, the predictions table `predictions` and V0's weights `model_file`.
    `policies` ({harvested policy: checkpoint dir}) feed the coupled value-model baselines."""
    from sparserl.core.artifacts import write_table
    from sparserl.values.v0.coupled import coupled_predictions
    s, harvest, tl, texts, table, hist, test = _protocol_data(cfg, protocol, seed, threads, log, harvest, embeddings)
    levels = query_levels(level_tables, harvest)
    tl = tl.assign(level=tl["query_id"].map(levels))
    test = tl[tl["role"] == "test"]
    preds = {}
    torch.manual_seed(seed)
    model = V0(table.states.shape[-1], s["adapter"], s["head"], table.embedder).to(v0_device(s))
    preds["v0_untrained"] = predict_v0(model, table, tl, test, s, seed)
    history = fit_v0(model, table, tl, s, seed, log=log)
    save_v0(model, Path(model_file), extra={"protocol": protocol, "history": history.to_dict("records")})
    preds["v0"] = predict_v0(model, table, tl, test, s, seed)
    pooled = table.pooled("mean")
    preds["knn_contextual"] = knn_predictions(tl, pooled, table)
    fit = tl[tl["role"].isin(["context", "train"])]
    om = OutcomeModel().fit(pooled[table.rows(fit["query_id"].tolist())], fit["value"].to_numpy())
    preds["outcome_model"] = test.assign(p=om.predict(pooled[table.rows(test["query_id"].tolist())]))
    rng = np.random.default_rng([seed, 7])
    pools = {k: g for k, g in tl[tl["role"] == "context"].groupby(GROUP, sort=True)}
    preds["context_mean"] = pd.concat(
        g.assign(p=float(draw_context(pools[k], int(s["train"]["context"]), rng)["value"].mean()))
        for k, g in test.groupby(GROUP, sort=True))
    if coupled:
        b = (cfg.get("v0") or {}).get("baselines") or {}
        missing = sorted(set(tl["model"].unique()) - set(policies or {}))
        if missing:
            raise ValueError(f"v0-table: no checkpoint dir for harvested policies {missing} (--policies with "
                             "--labels); the coupled baselines train on each policy's states")
        dirs = {m: str(policies[m]) for m in tl["model"].unique()}
        kw = dict(epochs=int(section_setting(b, "v0", "baselines", "vm_epochs")),
                  lr=float(section_setting(b, "v0", "baselines", "vm_lr")), seed=seed)
        preds["vanilla_value_model"] = coupled_predictions(tl, texts, dirs, **kw)
        preds["stepwise_retrain"] = coupled_predictions(tl, texts, dirs, stepwise=True, **kw)
    # reference rows (`references`): the ceiling and a difficulty-only guess, on the same test rows
    preds["oracle_p"] = oracle_predictions(test)
    preds["oracle_p_resampled"] = resampled_oracle_predictions(test, seed)
    preds["level_only"] = level_only_predictions(tl, test)
    rows = []
    for name, pr in preds.items():
        pr = pr.loc[test.index] if len(pr) == len(test) else pr
        rows.append({"protocol": protocol, "method": name, "model": "all", "seed": seed,
                     "head": s["head"]["kind"], "embedder": table.embedder, **metrics.score_against_history(pr, hist)})
        for m, g in pr.groupby("model", sort=True):
            rows.append({"protocol": protocol, "method": name, "model": m, "seed": seed,
                         "head": s["head"]["kind"], "embedder": table.embedder, **metrics.score_against_history(g, hist)})
    allp = pd.concat([p.assign(method=n) for n, p in preds.items()], ignore_index=True)
    write_table(allp, Path(predictions), cfg=cfg,
                extra={"protocol": protocol, "seed": seed})
    result = pd.DataFrame(rows)
    write_table(result, Path(out), cfg=cfg,
                extra={"protocol": protocol, "head": s["head"]["kind"], "embedder": table.embedder,
                       "rows": {r: int((tl["role"] == r).sum()) for r in ("context", "train", "test")}})
    return result


# Table 6: what each piece of V0 contributes (one setting changed at a time)
ABLATIONS = {
    "v0 (residual queries, both losses, frozen head)": {},
    "connector: static queries": {"adapter": {"connector": "static"}},
    "connector: mean-pool + linear": {"adapter": {"connector": "pool"}},
    "loss: rank only": {"train": {"loss": "rank"}},
    "loss: softCE only": {"train": {"loss": "ce"}},
    "head: tuned with the adapter": {"head": {"tune": True}},
}


def _table_predictions(path: Path, protocol: str, seed: int) -> pd.DataFrame:
    """V0's test predictions from `run_protocol`'s predictions table, checked to be the same
    protocol and seed (its manifest says which)."""
    from sparserl.core.artifacts import read_manifest, read_table
    m = read_manifest(path) or {}
    if (m.get("protocol"), m.get("seed")) != (protocol, seed):
        raise ValueError(f"{path}: predictions of protocol {m.get('protocol')!r}, seed "
                         f"{m.get('seed')!r} (its manifest), but Table 6 runs protocol "
                         f"{protocol!r}, seed {seed}; rerun rule v0_table (`snakemake --cores 2 {path}`) "
                         "or leave out --base-predictions to retrain the base variant")
    pred = read_table(path)
    return pred[pred["method"] == "v0"].drop(columns="method").reset_index(drop=True)


def run_ablations(cfg: dict, protocol: str = "strict", *, harvest, embeddings, out, seed: int = 0,
                  threads: int = 2, log=_log.info, base_predictions: Path | None = None) -> pd.DataFrame:
    """Table 6 under one protocol (the paper's is zero-shot): V0 retrained per variant, same data.
    The unchanged variant is the V0 of `run_protocol`: with `base_predictions` (that run's
    predictions table) its row is scored from them instead of training the same model again."""
    from sparserl.core.artifacts import write_table
    _, _, tl, _, table, hist, test = _protocol_data(cfg, protocol, seed, threads, log, harvest, embeddings)
    rows = []
    for name, over in ABLATIONS.items():
        s = v0_settings(cfg, **over)
        if not over and base_predictions is not None:
            pred = _table_predictions(Path(base_predictions), protocol, seed)
        else:
            torch.manual_seed(seed)
            model = V0(table.states.shape[-1], s["adapter"], s["head"], table.embedder).to(v0_device(s))
            fit_v0(model, table, tl, s, seed, log=log)
            pred = predict_v0(model, table, tl, test, s, seed)
        rows.append({"protocol": protocol, "variant": name, "seed": seed, "head": s["head"]["kind"],
                     "embedder": table.embedder, **metrics.score_against_history(pred, hist)})
        log(f"ablation {name}: intra AUC {rows[-1]['intra_auc']:.3f}, MSE {rows[-1]['calibration_mse']:.3f}")
    result = pd.DataFrame(rows)
    write_table(result, Path(out), cfg=cfg, extra={"protocol": protocol})
    return result
