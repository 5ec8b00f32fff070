"""V0's harvest settings (V0 §4.1): which policies, method, steps and checkpoints, and the config
of each harvest run. Apart from `engines.harvest` (which runs the harvest through either engine),
so that sizing and the OpenRLHF engine can read them without importing the local engine."""
from __future__ import annotations

import copy
from pathlib import Path

from sparserl.core.config import ConfigError, with_defaults
from sparserl.core.paths import RunPaths
from sparserl.methods.run import Run


def harvest_settings(cfg: dict) -> dict:
    """`v0.harvest` over its schema defaults; policies default to every policy of the config, steps and
    rollouts per step to the RL section's."""
    h = with_defaults((cfg.get("v0") or {}).get("harvest"), "v0", "harvest")
    rl = cfg.get("rl") or {}
    h["policies"] = list(h["policies"] or cfg["policies"])
    h["steps"] = int(h["steps"] or rl.get("steps") or 0)
    h["rollouts_per_step"] = int(h["rollouts_per_step"] or rl.get("rollouts_per_step") or 0)
    if not h["steps"] or not h["rollouts_per_step"]:
        raise ConfigError("v0.harvest needs steps and rollouts_per_step (or an rl section to take them from)")
    unknown = [p for p in h["policies"] if p not in cfg["policies"]]
    if unknown:
        raise ConfigError(f"v0.harvest.policies names {unknown}, not policies of the config "
                          f"({sorted(cfg['policies'])})")
    if h["checkpoint_samples"] % h["rollouts_per_step"]:
        raise ConfigError(f"v0.harvest.checkpoint_samples ({h['checkpoint_samples']}) must be a multiple "
                          f"of rollouts_per_step ({h['rollouts_per_step']}): a checkpoint falls between steps")
    h["shards"] = int(h["shards"])
    if h["shards"] > len(checkpoint_steps(h)) + 1:
        raise ConfigError(f"v0.harvest.shards is {h['shards']} but the harvest has "
                          f"{len(checkpoint_steps(h)) + 1} checkpoints (the start policy included); "
                          "use at most one shard per checkpoint")
    return h


def checkpoint_steps(h: dict) -> list[int]:
    """Steps with a checkpoint, every checkpoint_samples / rollouts_per_step steps, the last included."""
    every = h["checkpoint_samples"] // h["rollouts_per_step"]
    return sorted(set(range(every, h["steps"] + 1, every)) | {h["steps"]})


def harvest_config(cfg: dict, policy: str) -> dict:
    """The config of policy's harvest run: the RL section with that start policy, the harvest's
    steps and batch, every checkpoint step kept (eval_fractions), and avg@k as the evaluation."""
    h = harvest_settings(cfg)
    out = copy.deepcopy(cfg)
    rl = dict(out.get("rl") or {})
    n = h["steps"]
    rl.update(policy=policy, methods=[h["method"]], seeds=[h["seed"]], steps=n,
              rollouts_per_step=h["rollouts_per_step"],
              eval_fractions=[s / n for s in checkpoint_steps(h) if s < n])
    out["rl"] = rl
    # avg@k only: V0's labels need no greedy pass (`evaluation.greedy`), which would add a rollout per query
    out["evaluation"] = {"policies": [policy], "overrides": {}, "greedy": False,
                         "default": {"protocol": "avg_at_k", "k": int(h["k"]),
                                     "temperature": float(h["temperature"]), "top_p": float(h["top_p"])}}
    return out


def harvest_run(cfg: dict, policy: str, root) -> Run:
    """Policy's harvest run: v0.harvest's method and seed under `harvest_config`, in `root` (the
    DAG's values/harvest/runs/<policy>, `Paths.harvest_run`), at that config's rl.lr (no tuned rate)."""
    from sparserl.methods.run import resolve_run
    h = harvest_settings(cfg)
    return resolve_run(harvest_config(cfg, policy), h["method"], h["seed"], root=Path(root))


def harvest_run_paths(cfg: dict, policy: str, root) -> RunPaths:
    return harvest_run(cfg, policy, root).paths
