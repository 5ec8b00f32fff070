"""The world report: does RL have room in this world, and where?

For each policy it names (`world.policies`, default the RL start policy), on the RL pool and on
every benchmark:
- greedy accuracy (one rollout per problem),
- sampled accuracy at temperature 1.0, top-p 1.0 (`world.samples` rollouts per problem),
- accuracy under the benchmark's evaluation protocol (mean@k, top-p 0.7 by default),
and the overlap between the pre-training corpus, the RL pool and the benchmarks (distinct problems
shared, corpus rows that are pool problems). The gap between greedy and sampled accuracy on the
held-out problems is the room that RL's sharpening has; a pool inside the corpus means RL
rehearses what pre-training already taught.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from sparserl.core.artifacts import read_table, write_json
from sparserl.core.config import rollout_max_new_tokens
from sparserl.core.logs import get_logger
from sparserl.core.paths import Paths
from sparserl.evaluation.evaluate import per_prompt_rates, protocol_for
from sparserl.grading.verifier import open_verifier
from sparserl.rollout import SamplingParams, make_backend, rollout
from sparserl.tasks import format_prompt

log = get_logger(__name__)


def overlap(cfg: dict) -> dict:
    """Distinct problems of the corpus, the pool and each benchmark, and what they share."""
    P = Paths(cfg)
    pool = set(read_table(P.train_pool())["problem"])
    out: dict = {"pool_problems": len(pool)}
    corpus_path = P.pretrain_corpus()
    corpus = read_table(corpus_path)["problem"] if corpus_path.exists() else None
    if corpus is not None:
        cset = set(corpus)
        out.update({
            "corpus_rows": int(len(corpus)), "corpus_problems": len(cset),
            "pool_in_corpus": len(pool & cset),
            "pool_in_corpus_share": len(pool & cset) / max(len(pool), 1),
            "corpus_rows_from_pool_share": float(corpus.isin(pool).mean()),
            "corpus_repeats_per_problem": float(len(corpus) / max(len(cset), 1)),
        })
    benches = {}
    for b in P.benchmark_names():
        probs = set(read_table(P.benchmark(b))["problem"])
        benches[b] = {"problems": len(probs), "in_pool": len(probs & pool),
                      "in_corpus": None if corpus is None else len(probs & cset)}
    out["benchmarks"] = benches
    return out


def _accuracy(backend, cfg, df, params, k, seed, ver) -> tuple[float, float]:
    """(mean reward, mean response tokens) of k rollouts per problem."""
    prompts = [format_prompt(cfg, p, getattr(backend, "tokenizer", None)) for p in df["problem"]]
    batch = rollout(backend, prompts, list(df["answer"]), k, params, seed, ver)
    succ, n = per_prompt_rates(batch, len(df))
    return float((succ / n).mean()), float(batch.response_lengths().mean())


def policy_room(cfg: dict, ref: str, threads: int = 1, model: str | None = None) -> dict:
    """Greedy, sampled (T=1, top-p 1) and evaluation-protocol accuracy of policy `ref` (or of the
    checkpoint dir `model`, labelled `ref`) on the pool and every benchmark; `room` = greedy -
    sampled."""
    P = Paths(cfg)
    w = cfg.get("world", {})
    k = int(w.get("samples", 8))
    pool = read_table(P.train_pool())
    cap = int(w.get("max_pool", 1024))
    if len(pool) > cap:  # paper-scale pools: a fixed random subset
        pool = pool.sample(n=cap, random_state=cfg["seed"]).reset_index(drop=True)
    sets = [("rl_pool", pool, None)] + [(b, read_table(P.benchmark(b)), protocol_for(cfg, b))
                                        for b in P.benchmark_names()]
    backend = make_backend(cfg, model or str(P.policy(ref)), threads=threads)
    T = rollout_max_new_tokens(cfg)
    greedy = SamplingParams(greedy=True, max_new_tokens=T)
    sampled = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=T)
    rows = {}
    with open_verifier(cfg) as ver:
        for si, (name, df, spec) in enumerate(sets):
            seed = cfg["seed"] + 104_729 * (si + 1)
            g, _ = _accuracy(backend, cfg, df, greedy, 1, seed, ver)
            s, tokens = _accuracy(backend, cfg, df, sampled, k, seed + 1, ver)
            row = {"problems": len(df), "greedy": g, f"sampled_t1_k{k}": s, "room": g - s,
                   "mean_response_tokens": tokens}
            if spec is not None and spec.get("protocol") != "greedy":
                ep = SamplingParams(temperature=spec.get("temperature", 1.0),
                                    top_p=spec.get("top_p", 1.0), max_new_tokens=T)
                row["eval_protocol"], _ = _accuracy(backend, cfg, df, ep, k, seed + 2, ver)
                row["eval_protocol_name"] = (f"T={ep.temperature:g}, top-p {ep.top_p:g}, "
                                             f"{k} samples")
            rows[name] = row
        timeouts = ver.timeout_counts()
    held = [r for n, r in rows.items() if n != "rl_pool"]
    out = {"policy": ref, "samples": k, "sets": rows,
           "heldout_mean": {key: float(np.mean([r[key] for r in held]))
                            for key in ("greedy", f"sampled_t1_k{k}", "room")},
           "verifier": timeouts}
    return out


def world_report(cfg: dict, out_path=None, threads: int = 1,
                 checkpoints: dict[str, str] | None = None) -> dict:
    """The report of the config's world policies, or of `checkpoints` ({label: dir}, e.g. an RL
    run's checkpoints) when given."""
    P = Paths(cfg)
    models = checkpoints or {ref: None for ref in P.world_policies()}
    report = {"scale": cfg["scale"], "overlap": overlap(cfg),
              "policies": {ref: policy_room(cfg, ref, threads=threads, model=d)
                           for ref, d in models.items()}}
    path = out_path or P.world_report()
    write_json(report, path, cfg=cfg)
    o = report["overlap"]
    if "pool_in_corpus_share" in o:
        log.info(f"overlap: {o['pool_in_corpus']}/{o['pool_problems']} pool problems are in the "
                 f"pre-training corpus; {o['corpus_rows_from_pool_share']:.1%} of corpus rows")
    for ref, r in report["policies"].items():
        table = pd.DataFrame(r["sets"]).T.drop(columns=["eval_protocol_name"], errors="ignore")
        log.info(f"{ref}:\n{table.round(3).to_string()}")
    log.info(f"world report -> {path}")
    return report
