"""Monte Carlo values of the training pool: n rollouts per prompt of one policy, cached.

Two uses, one code path:
- BASIS reference-rollout cache: n = 64 rollouts of the reference policy per prompt (BASIS §3),
  the phat behind V*_beta. Every BASIS run reads it; Snakemake rebuilds it only when the policy
  checkpoint or the pool changes.
- Oracle values for the value studies: 256 rollouts of a checkpoint (BASIS §5.1).

Prompts are processed in shards with their own seeds; finished shards are kept beside the output,
so a killed job resumes where it stopped and gives the same table as an uninterrupted one.
At paper scale the shards are spread over jobs (`job_shard` = (k, K): job k rolls out the shards
si with si % K == k, under the same seeds) and `merge_mc_values` joins them: the same rows as
one job (rule reference_cache_shard, then reference_cache).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd

from sparserl.core.artifacts import atomic_write_text, config_hash, read_table, write_table
from sparserl.grading.verifier import open_verifier
from sparserl.core.config import rollout_max_new_tokens, section_setting
from sparserl.core.logs import get_logger
from sparserl.evaluation.progress import rollout_progress
from sparserl.rollout import SamplingParams, make_backend, rollout
from sparserl.tasks import format_prompt

COLUMNS = ["prompt_id", "n", "successes", "phat", "rewards", "lengths"]
_log = get_logger(__name__)


def mc_values(cfg: dict, ref: str, n: int, out: str | Path, *, policy_dir: str | Path, pool: str | Path,
              shard_size: int = 128, threads: int = 1, seed_offset: int = 0, log=_log.info,
              checkpoint: bool = False, prompt_ids=None,
              job_shard: tuple[int, int] | None = None) -> pd.DataFrame:
    """n rollouts of the policy at `policy_dir` on each prompt of the training pool `pool` (the
    rule's inputs). `ref` names the policy; `checkpoint`: it is an RL checkpoint (its folder joins
    the cache's key); `prompt_ids` restricts the pool to those prompts (pool order kept);
    `job_shard` (k, K) writes only job k's part of K (join them with `merge_mc_values`)."""
    k, K = job_shard or (0, 1)
    if not 0 <= k < K:
        raise ValueError(f"mc-values: shard {k} of {K} does not exist (shards are 0..{K - 1})")
    out, pool_path = Path(out), Path(pool)
    pool = read_table(pool_path)
    if prompt_ids is not None:
        want = set(prompt_ids)
        missing = want - set(pool["id"])
        if missing:
            raise ValueError(f"{pool_path}: {len(missing)} requested prompt ids are not in the pool "
                             f"(e.g. {sorted(missing)[:3]})")
        pool = pool[pool["id"].isin(want)].reset_index(drop=True)
    pr = cfg.get("passrate", {})
    params = SamplingParams(temperature=section_setting(pr, "passrate", "temperature"),
                            top_p=section_setting(pr, "passrate", "top_p"),
                            max_new_tokens=rollout_max_new_tokens(cfg))
    key = {"policy": ref, "n": n, "params": params.__dict__, "pool": len(pool),
           "seed": cfg["seed"] + seed_offset, "shard_size": shard_size, "columns": COLUMNS,
           "backend": cfg["rollout"]["backend"]}
    if checkpoint or prompt_ids is not None:  # the pool-wide caches of the start policies keep their key
        key.update(policy_path=str(policy_dir) if checkpoint else "None", prompt_ids=list(pool["id"]))
    parts = out.with_name(out.name + ".parts")
    stamp = parts / "key.json"
    if parts.exists() and (not stamp.exists() or json.loads(stamp.read_text()) != key):
        shutil.rmtree(parts)  # shards of another setting must not mix in
    parts.mkdir(parents=True, exist_ok=True)
    atomic_write_text(stamp, json.dumps(key, sort_keys=True))  # a torn key.json would fail every rerun

    backend = make_backend(cfg, str(policy_dir), threads=threads)
    shards = range(0, len(pool), shard_size)
    mine = [si for si in range(len(shards)) if si % K == k]
    # a resumed job's finished shards count as done, so the ETA covers only what is left
    size = {si: min(shard_size, len(pool) - start) for si, start in enumerate(shards)}
    done = sum(size[si] * n for si in mine if (parts / f"{si:05d}.parquet").exists())
    with open_verifier(cfg) as ver, rollout_progress(
            backend, sum(size[si] for si in mine) * n, f"mc-values {ref}", _log, initial=done):
        for si, start in enumerate(shards):
            f = parts / f"{si:05d}.parquet"
            if si % K != k or f.exists():
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
    table = pd.concat([read_table(parts / f"{si:05d}.parquet") for si in mine], ignore_index=True)
    if K == 1:
        _write(cfg, table, out, ref, n, key, ver.timeout_counts(), log)
    else:
        write_table(table, out, cfg=cfg, extra={"policy": ref, "shard": k, "shards": K,
                                                "key": key, "verifier": ver.timeout_counts()})
        log(f"mc-values {ref}: shard {k} of {K}, {len(table)} prompts x {n} rollouts -> {out}")
    shutil.rmtree(parts)
    return table


def _write(cfg, table, out, ref, n, key, verifier: dict, log) -> None:
    write_table(table, out, cfg=cfg, extra={
        "policy": ref, "rollouts_per_prompt": n, "mean_phat": float(table["phat"].mean()),
        "frac_mixed": float(((table["phat"] > 0) & (table["phat"] < 1)).mean()),
        "key_hash": config_hash(key), "verifier": verifier})
    log(f"mc-values {ref}: {len(table)} prompts x {n} rollouts, mean phat "
        f"{table['phat'].mean():.3f} -> {out}")


def merge_mc_values(cfg: dict, ref: str, n: int, parts, out: str | Path, *, pool: str | Path,
                    log=_log.info) -> pd.DataFrame:
    """The K job shards of `mc_values(..., job_shard=(k, K))` as one table, rows in the order of the
    training pool `pool`: the table and manifest one job writes (verifier counts summed)."""
    from sparserl.core.artifacts import read_manifest
    parts = [Path(p) for p in parts]
    metas = [read_manifest(p) or {} for p in parts]
    got = sorted(int(m.get("shard", -1)) for m in metas)
    if got != list(range(len(parts))) or any(m.get("shards") != len(parts) or m.get("policy") != ref
                                             or (m.get("key") or {}).get("n") != n for m in metas):
        raise ValueError(f"mc-values merge {ref}: {[str(p) for p in parts]} are not shards 0..{len(parts) - 1} "
                         f"of {len(parts)} of policy {ref} with n={n} (got shards {got}); rerun their "
                         "reference_cache_shard jobs")
    keys = {json.dumps(m["key"], sort_keys=True) for m in metas}
    if len(keys) != 1:
        raise ValueError(f"mc-values merge {ref}: the shards were made with different settings; rerun them")
    table = pd.concat([read_table(p) for p in parts], ignore_index=True)
    order = {pid: i for i, pid in enumerate(read_table(pool)["id"])}
    table = table.iloc[np.argsort([order[p] for p in table["prompt_id"]], kind="stable")].reset_index(drop=True)
    verifier: dict = {}
    for m in metas:
        for name, v in (m.get("verifier") or {}).items():
            verifier[name] = verifier.get(name, 0) + v
    _write(cfg, table, out, ref, n, metas[0]["key"], verifier, log)
    return table
