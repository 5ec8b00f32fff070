"""Cluster rollouts on vLLM (GPU only; vLLM wheels are CUDA builds).

Per-prompt n goes through vLLM's list-of-SamplingParams form, one entry per prompt, so OSLA's
uneven allocations cost one `generate` call. `logprobs=0` asks vLLM for the sampled token's
log-prob only; `logprobs_mode="raw_logprobs"` would skip temperature, so we request the processed
(tempered) values to match `RolloutBatch.logprobs` of the CPU backend.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from sparserl.rollout.base import RolloutBackend, RolloutBatch, SamplingParams, expand_n


def llm_kwargs(model: str, seed: int, tensor_parallel_size: int = 1,
               gpu_memory_utilization: float = 0.85, max_model_len: int | None = None,
               dtype: str = "bfloat16", enable_prefix_caching: bool = True) -> dict:
    kw = {"model": model, "seed": seed, "tensor_parallel_size": tensor_parallel_size,
          "gpu_memory_utilization": gpu_memory_utilization, "dtype": dtype,
          "enable_prefix_caching": enable_prefix_caching, "trust_remote_code": False,
          "logprobs_mode": "processed_logprobs"}
    if max_model_len:
        kw["max_model_len"] = max_model_len
    return kw


def sampling_kwargs(params: SamplingParams, n: int, seed: int) -> dict:
    """vLLM SamplingParams arguments for one prompt. top_k=-1: no hidden truncation."""
    if params.greedy:
        return {"n": n, "temperature": 0.0, "top_p": 1.0, "top_k": -1,
                "max_tokens": params.max_new_tokens, "logprobs": 0, "seed": seed}
    return {"n": n, "temperature": params.temperature, "top_p": params.top_p, "top_k": -1,
            "max_tokens": params.max_new_tokens, "logprobs": 0, "seed": seed}


class VLLMBackend(RolloutBackend):
    def __init__(self, model: str, seed: int = 0, **engine):
        import vllm  # noqa: F401  (CUDA-only; a clear ImportError on CPU machines)
        from transformers import AutoTokenizer
        self.kwargs = llm_kwargs(model, seed, **engine)
        self.llm = vllm.LLM(**self.kwargs)
        self.tokenizer = AutoTokenizer.from_pretrained(model)

    def generate(self, prompts: Sequence[str], n, params: SamplingParams, seed: int) -> RolloutBatch:
        import vllm
        n_arr = expand_n(n, len(prompts))
        keep = np.flatnonzero(n_arr > 0)
        sps = [vllm.SamplingParams(**sampling_kwargs(params, int(n_arr[i]), seed * 100_003 + int(i)))
               for i in keep]
        outs = self.llm.generate([prompts[i] for i in keep], sps, use_tqdm=False) if len(keep) else []
        batch = batch_from_outputs(prompts, keep, outs)
        self._rows_done(len(batch))
        return batch


def batch_from_outputs(prompts: Sequence[str], keep: np.ndarray, outs) -> RolloutBatch:
    """Convert vLLM RequestOutputs (one per kept prompt, in order) into a RolloutBatch."""
    prompt_ids: list[list[int]] = [[] for _ in prompts]
    index, resp, lps, texts, fin = [], [], [], [], []
    for i, out in zip(keep, outs):
        prompt_ids[i] = list(out.prompt_token_ids)
        for c in out.outputs:
            ids = list(c.token_ids)
            lp = np.array([step[t].logprob for step, t in zip(c.logprobs or [], ids)],
                          dtype=np.float32) if c.logprobs else np.zeros(len(ids), np.float32)
            index.append(int(i)); resp.append(ids); lps.append(lp); texts.append(c.text)
            fin.append(c.finish_reason or "stop")
    return RolloutBatch(prompts=list(prompts), prompt_ids=prompt_ids,
                        prompt_index=np.asarray(index, dtype=np.int64), response_ids=resp,
                        logprobs=lps, texts=texts, finish_reason=fin)
