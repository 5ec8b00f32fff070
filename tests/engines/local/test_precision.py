"""The local trainer's speed levers keep its arithmetic: the response-only LM head, length-sorted
micro-batches (`rl.length_chunks`) and bf16 matmuls (`rl.precision`) with pi_old recomputed."""
import copy

import numpy as np
import pytest
import torch

from helpers.rl_worlds import rl_world
from sparserl.core.config import ConfigError
from sparserl.engines.local.losses import token_logprobs
from sparserl.engines.local.trainer import Trainer, set_precision
from sparserl.methods.run import resolve_run
from sparserl.grading.verifier import open_verifier
from sparserl.models.qwen3 import Qwen3LM



@pytest.fixture(autouse=True)
def bf16_cpu(monkeypatch):
    """bf16 matmuls as on an AVX-512 BF16 CPU, wherever the tests run (an AVX2 CPU would keep
    float32: core.machine.matmul_precision)."""
    from sparserl.core import machine
    monkeypatch.setattr(machine, "native_bf16", lambda: True)

def _ours(hf_model) -> Qwen3LM:
    m = Qwen3LM(hf_model.config.to_dict())
    m.load_state_dict(hf_model.state_dict(), strict=False)
    return m.eval()


def _batch(tok, n=6):
    rng = np.random.default_rng(0)
    seqs, plens = [], []
    for i in range(n):
        p = tok(f"Q: {i} + {i % 4} {'- 2 ' * (i % 3)}=\nA:", add_special_tokens=False)["input_ids"]
        seqs.append(p + rng.integers(0, len(tok), rng.integers(1, 7)).tolist())
        plens.append(len(p))
    return seqs, plens


def test_our_qwen3_reads_the_head_at_response_positions_only_and_gets_transformers_log_probs(tiny_lm):
    hf, tok = tiny_lm
    seqs, plens = _batch(tok)
    ref, mask, ref_ent = token_logprobs(hf, seqs, plens, tok.pad_token_id, with_entropy=True)
    ours = _ours(hf)
    calls = []
    ours.lm_head.register_forward_hook(lambda mod, inp, out: calls.append(inp[0].shape))
    lp, mask2, ent = token_logprobs(ours, seqs, plens, tok.pad_token_id, with_entropy=True)
    assert calls == [(len(seqs), int(mask.sum(1).max()), hf.config.hidden_size)]  # not the prompts
    assert torch.equal(mask, mask2)
    torch.testing.assert_close(lp, ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ent, ref_ent, atol=1e-5, rtol=1e-5)


def test_bf16_matmuls_are_on_and_stay_close_to_float32(tiny_lm):
    hf, tok = tiny_lm
    seqs, plens = _batch(tok)
    ours = _ours(hf)
    fp32, mask = token_logprobs(ours, seqs, plens, tok.pad_token_id)
    set_precision({"precision": "bf16"}, ours)
    assert ours.matmul_dtype is torch.bfloat16
    bf16, _ = token_logprobs(ours, seqs, plens, tok.pad_token_id)
    diff = ((bf16 - fp32).abs() * mask).max()
    assert 0 < diff < 0.05, diff  # bf16 arithmetic, float32 weights: close, not equal


def test_bf16_stays_float32_where_the_cpu_would_emulate_it(tiny_lm, monkeypatch):
    from sparserl.core import machine
    monkeypatch.setattr(machine, "native_bf16", lambda: False)  # an AVX2 CPU: emulated bf16, ~10x slower
    monkeypatch.delenv("SPARSERL_EMULATED_BF16", raising=False)
    ours = _ours(tiny_lm[0])
    said = []
    assert machine.matmul_precision("bf16", "rl.precision", said.append) == "fp32"
    assert "no bf16 matmul kernels" in said[0]
    set_precision({"precision": "bf16"}, ours)
    assert ours.matmul_dtype is None
    monkeypatch.setenv("SPARSERL_EMULATED_BF16", "1")  # asked for anyway
    set_precision({"precision": "bf16"}, ours)
    assert ours.matmul_dtype is torch.bfloat16
    monkeypatch.setattr(machine, "native_bf16", lambda: None)  # flags unknown: as configured
    monkeypatch.delenv("SPARSERL_EMULATED_BF16")
    assert machine.matmul_precision("bf16", "rl.precision") == "bf16"


def test_bf16_is_refused_for_a_model_without_the_switch(tiny_lm):
    with pytest.raises(ConfigError, match="rl.precision: bf16"):
        set_precision({"precision": "bf16"}, tiny_lm[0])


def _trainer(tmp_path, tiny_lm, repo, method="grpo_g4", **rl):
    cfg = rl_world(tmp_path, tiny_lm, repo)
    cfg["rl"].update(rl)
    return cfg, Trainer(cfg, resolve_run(cfg, method, 0))


def _one_update(cfg, t, batch=None):
    """One sampled batch (or `batch`) and one update; the info dict and the batch."""
    info = {}
    with open_verifier(cfg) as t._ver:
        if batch is None:
            batch = t.sampler.sample({}).batch
        adv = np.random.default_rng(0).standard_normal(len(batch)).astype(np.float32)
        t.update(batch, adv, info)
    return info, batch


def test_length_chunks_give_the_one_chunk_update(tmp_path, tiny_lm, repo):
    cfg, one = _trainer(tmp_path, tiny_lm, repo, length_chunks=1)
    four = copy.deepcopy(one)
    four.rl = {**one.rl, "length_chunks": 4}
    with open_verifier(cfg) as one._ver:
        batch = one.sampler.sample({}).batch
    # mixed lengths (a random policy rarely stops early), so the chunks pad differently
    batch.response_ids = [r[:1 + i % len(r)] for i, r in enumerate(batch.response_ids)]
    batch.logprobs = [lp[:len(r)] for lp, r in zip(batch.logprobs, batch.response_ids)]
    _one_update(cfg, one, batch)
    _one_update(cfg, four, batch)
    for (name, a), b in zip(one.model.named_parameters(), four.model.parameters()):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5, msg=name)


@pytest.mark.parametrize("recompute", [True, False])
def test_under_bf16_the_first_mini_batch_is_exactly_on_policy(tmp_path, tiny_lm, repo, monkeypatch, recompute):
    """On the first (on-policy) mini-batch the ratio pi / pi_old must be exactly 1: GSPO clips the
    sequence ratio at 1 +- 3e-4. Against the rollout's float32 log-probs a bf16 forward's ratio
    drifts; with pi_old recomputed by the training forward it does not."""
    import sparserl.engines.local.trainer as tr
    cfg, t = _trainer(tmp_path, tiny_lm, repo, method="gspo_g8", mini_batches=1, length_chunks=2)
    set_precision({"precision": "bf16"}, t.model)  # the smoke config's backend: our Qwen3LM
    drift = []
    loss = tr.LOSSES["gspo"]

    def recording(logp, old, adv, mask, **kw):
        drift.append(float(((logp.detach() - old).abs() * mask).max()))
        return loss(logp, old, adv, mask, **kw)
    monkeypatch.setitem(tr.LOSSES, "gspo", recording)
    if not recompute:
        monkeypatch.setattr(Trainer, "_old_logprobs", lambda self, *a: None)
    _one_update(cfg, t)
    assert len(drift) == 2  # two length chunks
    assert (max(drift) == 0.0) == recompute, drift


@pytest.mark.e2e  # torch.compile, ~18 s
def test_compiled_layers_give_the_eager_log_probs_and_gradients(tiny_lm):
    """`rl.compile`: inductor's fused kernels, the same arithmetic up to float rounding, for the
    gradient forward and the no-grad one (two graphs), at two batch shapes (dynamic)."""
    from sparserl.engines.local.trainer import compile_layers
    hf, tok = tiny_lm
    eager, compiled = _ours(hf), _ours(hf)
    compile_layers(compiled)
    for n in (6, 3):
        seqs, plens = _batch(tok, n)
        grads = []
        for m in (eager, compiled):
            m.zero_grad()
            lp, mask = token_logprobs(m, seqs, plens, tok.pad_token_id)
            (lp * mask).sum().backward()
            grads.append([p.grad.clone() for p in m.parameters()])
            with torch.no_grad():
                grads[-1].append(token_logprobs(m, seqs, plens, tok.pad_token_id)[0])
        for a, b in zip(*grads):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


@pytest.mark.e2e  # torch.compile, ~5 s
def test_a_compiled_critic_runs_its_own_layers(tiny_lm):
    """The trainer compiles the critic's body after copying the policy (rl.compile): each compiled
    forward must stay bound to its own layers. Compiled before the copy, the critic's layers would
    run the policy's weights: training the critic would change nothing it computes."""
    from sparserl.engines.local.trainer import compile_layers
    from sparserl.values.critic import ValueModel
    hf, tok = tiny_lm
    policy = _ours(hf)
    critic = ValueModel(policy, seed=0)
    compile_layers(policy, critic.body)
    ids = torch.tensor([tok("1 + 2 =", add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        before, pol = critic(ids, torch.ones_like(ids)), policy.hidden(ids)
        critic.body.model.layers[0].mlp.down_proj.weight.add_(0.5)
        assert not torch.allclose(critic(ids, torch.ones_like(ids)), before)
        torch.testing.assert_close(policy.hidden(ids), pol, atol=0, rtol=0)


def test_compile_is_refused_for_a_model_without_our_layers(tiny_lm):
    from sparserl.engines.local.trainer import compile_layers
    with pytest.raises(ConfigError, match="rl.compile"):
        compile_layers(tiny_lm[0])


def test_a_transformers_policy_trains_in_float32(tmp_path, tiny_lm, repo):
    """rollout.backend: hf trains transformers' model, which has no bf16 switch: float32 as before."""
    cfg, t = _trainer(tmp_path, tiny_lm, repo, length_chunks=2)
    t.model = copy.deepcopy(tiny_lm[0])
    t.opt = type(t.opt)(t.model.parameters(), lr=t.lr)
    before = [p.detach().clone() for p in t.model.parameters()]
    info, _ = _one_update(cfg, t)
    assert np.isfinite(info["loss"]) and any(not torch.equal(a, b) for a, b in zip(before, t.model.parameters()))


def _grouped_batch(tok, groups=3, rows=4):
    """`rows` responses of different lengths for each of `groups` prompts, prompts interleaved."""
    rng = np.random.default_rng(1)
    prompts = [tok(f"Q: {g} + {g % 4} {'- 2 ' * g}=\nA:", add_special_tokens=False)["input_ids"] for g in range(groups)]
    seqs, plens = [], []
    for i in range(groups * rows):
        p = prompts[i % groups]
        seqs.append(p + rng.integers(0, len(tok), 1 + i % 7).tolist())
        plens.append(len(p))
    return seqs, plens


@pytest.mark.parametrize("compiled", [False, pytest.param(True, marks=pytest.mark.e2e)])  # compiled: ~25 s cold
def test_shared_prompts_give_the_full_rows_log_probs_entropy_and_gradient(tiny_lm, compiled):
    """`rl.share_prompts`: each distinct prompt of a micro-batch runs once and its rows attend to
    its keys; log-probs, entropy and gradient are those of the rows written out in full (eager:
    the reference; compiled, only the shared model compiles, one graph instead of two)."""
    from sparserl.engines.local.trainer import compile_layers
    hf, tok = tiny_lm
    full, shared = _ours(hf), _ours(hf)
    if compiled:
        compile_layers(shared)
    seqs, plens = _grouped_batch(tok)
    calls = []
    if not compiled:  # a hook on a compiled layer guards its graph: a second compile
        shared.model.layers[0].mlp.register_forward_hook(lambda mod, inp, out: calls.append(inp[0].shape[:2]))
    outs = []
    for m, share in ((full, False), (shared, True)):
        m.zero_grad()
        lp, mask, ent = token_logprobs(m, seqs, plens, tok.pad_token_id, with_entropy=True, share_prompts=share)
        ((lp * mask).sum() + (ent * mask).sum()).backward()
        outs.append((lp, mask, ent, [p.grad.clone() for p in m.parameters()]))
    (lp_a, mask_a, ent_a, g_a), (lp_b, mask_b, ent_b, g_b) = outs
    assert torch.equal(mask_a, mask_b)
    torch.testing.assert_close(lp_b, lp_a, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ent_b, ent_a, atol=1e-5, rtol=1e-5)
    for a, b in zip(g_a, g_b):
        torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-4)
    if not compiled:  # the 3 distinct prompts' slots, then the 12 responses': not 12 full rows
        Lp, T = max(plens), max(len(s) - p for s, p in zip(seqs, plens))
        assert calls[0][0] == 3 * Lp + 12 * (T - 1) < 12 * max(map(len, seqs)), calls


def test_share_prompts_is_refused_for_a_model_without_it(tmp_path, tiny_lm, repo):
    cfg = rl_world(tmp_path, tiny_lm, repo)
    cfg["rl"]["share_prompts"] = True
    cfg["rollout"]["backend"] = "hf"
    with pytest.raises(ConfigError, match="rl.share_prompts"):
        Trainer(cfg, resolve_run(cfg, "grpo_g4", 0))
