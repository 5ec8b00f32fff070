"""Build the rollout backend a config names (`rollout.backend`). Kept apart from `base`, which the
backends import: base -> backends would be an import circle."""
from __future__ import annotations

from sparserl.core.config import schema_default_by
from sparserl.rollout.base import RolloutBackend


def _batch_size(r: dict) -> int:
    """`rollout.batch_size`, else the schema's default for the backend (its default_by_backend)."""
    return int(r["batch_size"]) if "batch_size" in r else schema_default_by(r["backend"], "rollout", "batch_size")


def make_backend(cfg: dict, policy: str, threads: int | None = None) -> RolloutBackend:
    """The backend named by `rollout.backend` for a checkpoint dir or hub name."""
    r = cfg["rollout"]
    if r["backend"] == "cpu":
        from sparserl.rollout.cpu_engine import CPUEngine
        return CPUEngine(policy, batch_size=_batch_size(r),
                         threads=threads or cfg.get("threads"))
    if r["backend"] == "hf":
        from sparserl.rollout.hf import HFBackend
        return HFBackend(policy, batch_size=_batch_size(r),
                         threads=threads or cfg.get("threads"))
    if r["backend"] == "vllm":
        from sparserl.rollout.vllm_backend import VLLMBackend
        return VLLMBackend(policy, seed=cfg["seed"], **r.get("vllm", {}))
    raise ValueError(f"rollout.backend: unknown backend {r['backend']!r}; use 'cpu', 'hf' or 'vllm'")


def make_live_backend(cfg: dict, model, tokenizer) -> RolloutBackend:
    """The backend for a model in memory that is being trained (the local trainer): it reads the
    model's current weights at every `generate`. vLLM holds its own copy, so it has no live form."""
    r = cfg["rollout"]
    if r["backend"] == "cpu":
        from sparserl.rollout.cpu_engine import CPUEngine
        return CPUEngine(model, tokenizer, batch_size=_batch_size(r))
    if r["backend"] == "hf":
        from sparserl.rollout.hf import HFBackend
        return HFBackend(model, tokenizer, batch_size=_batch_size(r))
    raise ValueError(f"rollout.backend {r['backend']!r} has no in-memory form for the local trainer; "
                     "use 'cpu' or 'hf' (vLLM rollouts run under engine: openrlhf)")
