"""Rollout backends: prompts and n per prompt in; token ids, log-probs, texts (and rewards) out.

`HFBackend` runs on CPU with transformers (batched sampling, KV cache); `VLLMBackend` is the
cluster path. Both return a `RolloutBatch`, so samplers, caches and trainers never see which
backend made it.
"""
from sparserl.rollout.backends import make_backend
from sparserl.rollout.base import RolloutBackend, RolloutBatch, SamplingParams, rollout

__all__ = ["RolloutBackend", "RolloutBatch", "SamplingParams", "make_backend", "rollout"]
