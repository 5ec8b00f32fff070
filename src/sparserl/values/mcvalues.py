"""Monte Carlo values of the training pool: n rollouts per prompt of one policy, cached.

Two uses, one code path:
- BASIS reference-rollout cache: n = 64 rollouts of the reference policy per prompt (BASIS §3),
  the phat behind V*_beta. Every BASIS run reads it; Snakemake rebuilds it only when the policy
  checkpoint or the pool changes.
- Oracle values for the value studies: 256 rollouts of a checkpoint (BASIS §5.1).

Prompts are processed in shards with their own seeds; finished shards are kept beside the output,
so a killed job resumes where it stopped and gives the same table as an uninterrupted one.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd

from sparserl.core.artifacts import atomic_write_text, config_hash, read_table, write_table
from sparserl.grading.verifier import open_verifier
from sparserl.core.config import rollout_max_new_tokens
from sparserl.core.logs import get_logger
from sparserl.core.paths import Paths
from sparserl.evaluation.progress import rollout_progress
from sparserl.rollout import SamplingParams, make_backend, rollout
from sparserl.tasks import format_prompt

COLUMNS = ["prompt_id", "n", "successes", "phat", "rewards", "lengths"]
_log = get_logger(__name__)


def mc_values(cfg: dict, ref: str, n: int, out: str | Path, *, shard_size: int = 128,
              threads: int = 1, seed_offset: int = 0, log=_log.info, policy_path: str | Path | None = None,
              prompt_ids=None) -> pd.DataFrame:
    """`ref` names the policy (`Paths.policy`), or only labels it when `policy_path` is given (an
    RL checkpoint directory); `prompt_ids` restricts the pool to those prompts (pool order kept)."""
    P = Paths(cfg)
    out = Path(out)
    pool = read_table(P.train_pool())
    if prompt_ids is not None:
        want = set(prompt_ids)
        missing = want - set(pool["id"])
        if missing:
            raise ValueError(f"{P.train_pool()}: {len(missing)} requested prompt ids are not in the pool "
                             f"(e.g. {sorted(missing)[:3]})")
        pool = pool[pool["id"].isin(want)].reset_index(drop=True)
    pr = cfg.get("passrate", {})
    params = SamplingParams(temperature=pr.get("temperature", 1.0), top_p=pr.get("top_p", 1.0),
                            max_new_tokens=rollout_max_new_tokens(cfg))
    key = {"policy": ref, "n": n, "params": params.__dict__, "pool": len(pool),
           "seed": cfg["seed"] + seed_offset, "shard_size": shard_size, "columns": COLUMNS,
           "backend": cfg["rollout"]["backend"]}
    if policy_path is not None or prompt_ids is not None:  # the pool-wide caches keep their key
        key.update(policy_path=str(policy_path), prompt_ids=list(pool["id"]))
    parts = out.with_name(out.name + ".parts")
    stamp = parts / "key.json"
    if parts.exists() and (not stamp.exists() or json.loads(stamp.read_text()) != key):
        shutil.rmtree(parts)  # shards of another setting must not mix in
    parts.mkdir(parents=True, exist_ok=True)
    atomic_write_text(stamp, json.dumps(key, sort_keys=True))  # a torn key.json would fail every rerun

    backend = make_backend(cfg, str(P.policy(ref) if policy_path is None else policy_path), threads=threads)
    shards = range(0, len(pool), shard_size)
    # a resumed job's finished shards count as done, so the ETA covers only what is left
    done = sum(min(shard_size, len(pool) - start) * n for si, start in enumerate(shards)
               if (parts / f"{si:05d}.parquet").exists())
    with open_verifier(cfg) as ver, rollout_progress(
            backend, len(pool) * n, f"mc-values {ref}", _log, initial=done):
        for si, start in enumerate(shards):
            f = parts / f"{si:05d}.parquet"
            if f.exists():
                continue
            sub = pool.iloc[start:start + shard_size]
            prompts = [format_prompt(cfg, p, getattr(backend, "tokenizer", None))
                       for p in sub["problem"]]
            b = rollout(backend, prompts, list(sub["answer"]), n, params,
                        cfg["seed"] + seed_offset + 7919 * si, ver)
            rewards = [b.rewards[b.prompt_index == i].astype(np.uint8) for i in range(len(sub))]
            lengths = b.response_lengths()
            df = pd.DataFrame({"prompt_id": sub["id"].to_numpy(), "n": n,
                               "successes": [int(r.sum()) for r in rewards],
                               "rewards": [r.tolist() for r in rewards],
                               "lengths": [lengths[b.prompt_index == i].tolist()
                                           for i in range(len(sub))]})
            df["phat"] = df["successes"] / n
            write_table(df[COLUMNS], f)
    table = pd.concat([read_table(parts / f"{si:05d}.parquet") for si in range(len(shards))],
                      ignore_index=True)
    write_table(table, out, cfg=cfg, extra={
        "policy": ref, "rollouts_per_prompt": n, "mean_phat": float(table["phat"].mean()),
        "frac_mixed": float(((table["phat"] > 0) & (table["phat"] < 1)).mean()),
        "key_hash": config_hash(key), "verifier": ver.timeout_counts()})
    shutil.rmtree(parts)
    log(f"mc-values {ref}: {len(table)} prompts x {n} rollouts, mean phat "
        f"{table['phat'].mean():.3f} -> {out}")
    return table
