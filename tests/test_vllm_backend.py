"""vLLM is CUDA-only: test the arguments we build and the output conversion with a fake module."""
import sys
import types

import numpy as np

from sparserl.rollout import SamplingParams
from sparserl.rollout.vllm_backend import batch_from_outputs, llm_kwargs, sampling_kwargs


def test_llm_kwargs():
    kw = llm_kwargs("Qwen/Qwen3-4B-Instruct-2507", seed=3, tensor_parallel_size=2,
                    max_model_len=10240)
    assert kw["model"] == "Qwen/Qwen3-4B-Instruct-2507" and kw["seed"] == 3
    assert kw["tensor_parallel_size"] == 2 and kw["max_model_len"] == 10240
    assert kw["dtype"] == "bfloat16" and kw["logprobs_mode"] == "processed_logprobs"


def test_sampling_kwargs():
    kw = sampling_kwargs(SamplingParams(temperature=1.0, top_p=0.7, max_new_tokens=8192), 16, 5)
    assert kw == {"n": 16, "temperature": 1.0, "top_p": 0.7, "top_k": -1, "max_tokens": 8192,
                  "logprobs": 0, "seed": 5}
    g = sampling_kwargs(SamplingParams(greedy=True, max_new_tokens=10), 1, 0)
    assert g["temperature"] == 0.0 and g["n"] == 1


def _fake_vllm(monkeypatch):
    calls = {}

    class SP:
        def __init__(self, **kw):
            self.kw = kw

    class Lp:
        def __init__(self, v):
            self.logprob = v

    class LLM:
        def __init__(self, **kw):
            calls["llm"] = kw

        def generate(self, prompts, sps, use_tqdm=False):
            calls["generate"] = (prompts, [s.kw for s in sps])
            outs = []
            for p, s in zip(prompts, sps):
                comps = [types.SimpleNamespace(token_ids=[7, j], text=f"{p}-{j}",
                                               logprobs=[{7: Lp(-0.5)}, {j: Lp(-1.0)}],
                                               finish_reason="stop")
                         for j in range(s.kw["n"])]
                outs.append(types.SimpleNamespace(prompt_token_ids=[1, 2], outputs=comps))
            return outs

    mod = types.ModuleType("vllm")
    mod.__spec__ = types.SimpleNamespace(name="vllm")
    mod.LLM, mod.SamplingParams = LLM, SP
    monkeypatch.setitem(sys.modules, "vllm", mod)
    return calls


def test_generate_with_per_prompt_n(monkeypatch):
    calls = _fake_vllm(monkeypatch)
    import transformers
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained",
                        classmethod(lambda cls, *a, **k: object()))
    from sparserl.rollout.vllm_backend import VLLMBackend
    be = VLLMBackend("some/model", seed=1, tensor_parallel_size=1)
    assert calls["llm"]["model"] == "some/model"
    b = be.generate(["a", "b", "c"], [2, 0, 3], SamplingParams(top_p=0.7), seed=4)
    prompts, sps = calls["generate"]
    assert prompts == ["a", "c"], "prompts with n=0 are not sent"
    assert [s["n"] for s in sps] == [2, 3] and all(s["top_p"] == 0.7 for s in sps)
    assert b.prompt_index.tolist() == [0, 0, 2, 2, 2]
    assert b.n_per_prompt.tolist() == [2, 0, 3]
    np.testing.assert_allclose(b.logprobs[1], [-0.5, -1.0])
    assert b.texts[2] == "c-0" and b.prompt_ids[1] == []


def test_batch_from_empty_outputs():
    b = batch_from_outputs(["a"], np.array([], dtype=int), [])
    assert len(b) == 0 and b.n_per_prompt.tolist() == [0]
