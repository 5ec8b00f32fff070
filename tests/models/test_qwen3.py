"""sparserl.models.qwen3: transformers' Qwen3 in plain torch, for the local trainer."""
import copy

import numpy as np
import pytest
import torch

from sparserl.models.qwen3 import Qwen3LM


@pytest.fixture()
def saved(tiny_lm, tmp_path):
    from sparserl.models.policies import save_hf
    model, tok = tiny_lm
    save_hf(model, tok, tmp_path / "ckpt", {"policy": "test"})
    return tmp_path / "ckpt"


def _batch(tok, n=5, seed=0):
    rng = np.random.default_rng(seed)
    return torch.tensor(rng.integers(0, len(tok), (n, 11)))


def test_logits_and_gradients_equal_transformers(tiny_lm, saved):
    model, tok = tiny_lm
    hf, ours = copy.deepcopy(model).train(), Qwen3LM.from_dir(saved).train()
    ids = _batch(tok)
    a, b = hf(input_ids=ids).logits, ours(input_ids=ids).logits
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    w = torch.randn(a.shape, generator=torch.Generator().manual_seed(0))
    (torch.log_softmax(a, -1) * w).sum().backward()
    (torch.log_softmax(b, -1) * w).sum().backward()
    theirs = dict(hf.named_parameters())
    for name, p in ours.named_parameters():
        torch.testing.assert_close(p.grad, theirs[name].grad, atol=1e-5, rtol=1e-4, msg=name)


def test_right_padding_leaves_real_positions_alone(tiny_lm, saved):
    _, tok = tiny_lm
    m = Qwen3LM.from_dir(saved)
    ids = _batch(tok)
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    out = m(input_ids=ids, attention_mask=mask).logits
    alone = m(input_ids=ids[1:2, :7]).logits
    torch.testing.assert_close(out[1, :7], alone[0], atol=1e-6, rtol=1e-6)
    mask[2, 0] = 0  # left padding: a real position would see a pad token
    with pytest.raises(ValueError, match="right-padded"):
        m(input_ids=ids, attention_mask=mask)


def test_saved_checkpoint_loads_in_transformers_and_the_engine(tiny_lm, saved, tmp_path):
    from transformers import AutoModelForCausalLM
    from sparserl.models.policies import save_hf
    from sparserl.rollout import SamplingParams
    from sparserl.rollout.cpu_engine import CPUEngine, load_tokenizer
    _, tok = tiny_lm
    ours = Qwen3LM.from_dir(saved)
    with torch.no_grad():
        ours.model.layers[0].mlp.up_proj.weight.mul_(1.5)  # trained: not the file it came from
    save_hf(ours, load_tokenizer(saved), tmp_path / "after", {"step": 1})
    ids = _batch(tok, 3)
    back = AutoModelForCausalLM.from_pretrained(str(tmp_path / "after"))
    torch.testing.assert_close(back(input_ids=ids).logits, ours(input_ids=ids).logits, atol=1e-6, rtol=1e-6)
    assert (tmp_path / "after" / "tokenizer.json").is_file()
    params = SamplingParams(max_new_tokens=5, temperature=0.9)
    live = CPUEngine(ours, load_tokenizer(saved)).generate(["Q: 1 + 2 =\nA:"], 4, params, seed=1)
    files = CPUEngine(tmp_path / "after").generate(["Q: 1 + 2 =\nA:"], 4, params, seed=1)
    assert live.response_ids == files.response_ids


def test_trainer_loads_our_qwen3_with_the_cpu_engine_only(saved):
    from transformers import PreTrainedModel
    from sparserl.engines.local.trainer import load_policy
    assert isinstance(load_policy(str(saved), "cpu")[0], Qwen3LM)
    assert isinstance(load_policy(str(saved), "hf")[0], PreTrainedModel)


def test_other_architectures_are_refused(saved):
    import json
    cfg = json.loads((saved / "config.json").read_text())
    for key, val in (("model_type", "llama"), ("hidden_act", "gelu"), ("use_sliding_window", True)):
        with pytest.raises(ValueError, match="load this checkpoint with transformers"):
            Qwen3LM({**cfg, key: val})


def test_a_checkpoint_we_write_names_its_architecture_as_transformers_does(tiny_lm, tmp_path):
    """Pre-training writes through Qwen3LM (`pretrain.compile`). Without `architectures` vLLM
    resolves the folder to the pooling `Qwen3Model` and refuses `generate` (the cluster path and
    perf/rollout_throughput.py on tiny's policies did)."""
    import json
    from sparserl.models.policies import build_model
    _, tok = tiny_lm
    fresh = build_model({"hidden_size": 32, "num_layers": 2, "num_heads": 2, "num_kv_heads": 1, "ffn_size": 64},
                        tok, 24)
    assert fresh.config.architectures is None  # transformers names it only as it saves
    Qwen3LM.from_module(fresh).save_pretrained(tmp_path / "ours")
    fresh.save_pretrained(tmp_path / "theirs")
    ours, theirs = (json.loads((tmp_path / d / "config.json").read_text()) for d in ("ours", "theirs"))
    assert theirs["architectures"] == ["Qwen3ForCausalLM"] and theirs["dtype"] == "float32"
    assert {k: ours[k] for k in ("architectures", "dtype")} == {k: theirs[k] for k in ("architectures", "dtype")}
