"""Le Critique's critic methods as RL methods of the math world (`rl.methods`: lc_math_*): the math
trainer trains each for a few steps, the policy never reads the privileged answer, the critic's
values sit at the policy's action positions, the warm-up leaves the policy and the prompt stream
alone, and a killed run resumes to the same metrics."""
import copy
import shutil

import numpy as np
import pandas as pd
import pytest
import torch

from sparserl.core.artifacts import write_table
from sparserl.core.config import ConfigError, load_config
from sparserl.core.paths import Paths
from sparserl.engines.local.trainer import KilledForTest, Trainer, train
from sparserl.methods.run import resolve_run
from sparserl.grading.verifier import open_verifier
from sparserl.methods.spec import load_method
from sparserl.tasks import procedural
from sparserl.values.critic_inputs import answer_context, loo_group_context

CRITIC_METHODS = ["lc_math_vf_g8", "lc_math_pvf_answer_g8", "lc_math_pvf_loo_g8", "lc_math_tether_g8",
                  "lc_math_evpo_g8"]


@pytest.fixture()
def world(tmp_path, tiny_lm, repo):
    """The smoke math world: a pool, policy s (the random tiny LM), 16 rollouts a step (2 prompts x 8)."""
    from sparserl.models.policies import save_hf
    cfg = load_config(repo / "configs/smoke.yaml")
    cfg["results_dir"] = str(tmp_path / "results")
    cfg["rl"] = {"policy": "s", "methods": CRITIC_METHODS, "seeds": [0], "steps": 3,
                 "rollouts_per_step": 16, "lr": 1e-4, "critic_lr": 1e-3, "checkpoint_every": 2,
                 "eval_fractions": [], "mini_batches": 2}
    cfg["rollout"]["max_new_tokens"] = 6
    P = Paths(cfg)
    write_table(procedural.make_train_pool(cfg), P.train_pool())
    model, tok = tiny_lm
    save_hf(model, tok, P.policy("s"), {"test": True})
    return cfg


@pytest.fixture()
def varied_rewards(monkeypatch):
    """The random test policy never answers: reward 1 when the response's token ids sum to an
    even number instead (a function of the rollout alone, so a resumed run sees the same),
    giving the critic returns that vary."""
    import sparserl.engines.local.trainer as trainer_mod
    real = trainer_mod.rollout

    def rollout(*a, **k):
        b = real(*a, **k)
        b.rewards = np.array([sum(r) % 2 == 0 for r in b.response_ids], dtype=np.float32)
        return b
    monkeypatch.setattr(trainer_mod, "rollout", rollout)


def _has(seq, sub):
    return len(sub) > 0 and any(list(seq[i:i + len(sub)]) == list(sub) for i in range(len(seq) - len(sub) + 1))


def test_the_method_files_match_grpo_g8_but_for_the_baseline():
    """Same group size and loss as GRPO G=8: only the advantage's baseline differs."""
    g = load_method("grpo_g8")
    for name in CRITIC_METHODS:
        m = load_method(name)
        assert m.needs_critic and m.group_size == g.group_size and m.loss == g.loss, name
        assert m.sampler == "plain" and m.kl_coef == g.kl_coef
    assert {load_method(n).critic.privileged for n in CRITIC_METHODS} == {"none", "answer", "loo_group"}


@pytest.mark.parametrize("method", CRITIC_METHODS)
def test_each_critic_method_trains_on_the_math_world(world, method, varied_rewards):
    d = train(world, method, 0)
    met = pd.read_parquet(d / "metrics.parquet")
    assert len(met) == 3 and (d / "final" / "config.json").exists()
    # the policy's budget per step is the matched one; the warm-up's is counted beside it
    assert met["rollouts_total"].tolist() == [16, 32, 48]
    assert (met["critic_warmup_updates"] == 20).all()
    assert (met["critic_warmup_rollouts"] == 10 * 16).all()  # 20 updates, each batch used twice
    for col in ("reward_mean", "wall_time_s", "critic_ev", "critic_value_mean", "value_loss", "grad_norm"):
        assert met[col].notna().all(), col
    assert met["critic_value_mean"].between(0, 1).all()
    if load_method(method).estimator == "tether":
        rho, hat = met["est_tether_rho"].to_numpy(), met["est_tether_rhohat"].to_numpy()
        np.testing.assert_allclose(rho, 0.95 * np.r_[0.0, rho[:-1]] + 0.05 * hat, rtol=1e-9, atol=1e-12)


def test_the_scale_critic_lr_replaces_the_methods(world):
    t = Trainer(world, resolve_run(world, "lc_math_vf_g8", 0))
    assert load_method("lc_math_vf_g8").critic.lr == 1e-4 and t.m.critic.lr == 1e-3
    assert all(g["lr"] == 1e-3 for g in t.critic.opt.param_groups)
    cfg = copy.deepcopy(world)
    del cfg["rl"]["critic_lr"]
    assert Trainer(cfg, resolve_run(cfg, "lc_math_vf_g8", 0)).m.critic.lr == 1e-4
    assert Trainer(world, resolve_run(world, "grpo_g8", 0)).critic is None


def test_a_critic_with_another_sampler_is_refused(world, tmp_path, monkeypatch):
    import sparserl.methods.spec as spec_mod
    d = tmp_path / "methods"
    d.mkdir()
    text = (spec_mod.METHODS_DIR / "lc_math_vf_g8.yaml").read_text()
    (d / "vf_dapo.yaml").write_text(text + "dynamic_sampling: {enabled: true}\n")
    monkeypatch.setattr(spec_mod, "METHODS_DIR", d)
    with pytest.raises(ConfigError, match="plain sampler"):
        Trainer(world, resolve_run(world, "vf_dapo", 0))


def _one_step(t):
    """Sample, evaluate (critic read) and update the policy once, capturing every policy and critic
    forward pass's token ids."""
    seen_policy, seen_critic = [], []
    # our Qwen3LM's log-probs read `hidden` (the head runs on response positions only)
    spy = "hidden" if hasattr(t.model, "hidden") else "forward"
    pol_fwd, cri_fwd = getattr(t.model, spy), t.critic.model.forward
    setattr(t.model, spy, lambda input_ids, attention_mask=None: (
        seen_policy.append((input_ids.clone(), attention_mask.clone())), pol_fwd(input_ids, attention_mask))[1])
    t.critic.model.forward = lambda ids, attn: (seen_critic.append((ids.clone(), attn.clone())), cri_fwd(ids, attn))[1]
    with open_verifier(t.cfg) as t._ver:
        sampled = t.sampler.sample({})
    adv, payload = t.critic_advantages(sampled, {})
    t.update(sampled.batch, adv, {})
    rows = lambda seen: [r[m.bool()].tolist() for ids, mask in seen for r, m in zip(ids, mask)]
    return sampled, adv, payload, rows(seen_policy), rows(seen_critic)


def test_the_policy_never_reads_the_reference_answer(world):
    t = Trainer(world, resolve_run(world, "lc_math_pvf_answer_g8", 0))
    sampled, adv, payload, policy_rows, critic_rows = _one_step(t)
    b, idx = sampled.batch, sampled.idx
    answers = t.pool["answer"].iloc[idx].astype(str).tolist()
    priv = [t.tok(answer_context(a), add_special_tokens=False)["input_ids"] for a in answers]
    tag = t.tok(answer_context("1"), add_special_tokens=False)["input_ids"][:2]  # the "\nR:" tokens
    # the prompts the policy generated from are the pool's prompts, without the answer
    for p, ids in enumerate(b.prompt_ids):
        assert ids == t.tok(t.prompts[idx[p]], add_special_tokens=False)["input_ids"]
        assert not _has(ids, priv[p]) and not _has(ids, tag)
    # the policy's update read exactly prompt + response of every rollout, never the context
    expected = [list(b.prompt_ids[b.prompt_index[i]]) + list(b.response_ids[i]) for i in range(len(b))]
    assert sorted(map(tuple, policy_rows)) == sorted(map(tuple, expected))
    assert not any(_has(r, tag) for r in policy_rows)
    # the critic read prompt + "\nR: <answer>" + response, its first value at the context's end
    assert critic_rows and all(_has(r, tag) for r in critic_rows)
    for i, (seq, start) in enumerate(zip(payload[0], payload[1])):
        p = b.prompt_index[i]
        assert seq == list(b.prompt_ids[p]) + priv[p] + list(b.response_ids[i])
        assert start == len(b.prompt_ids[p]) + len(priv[p]) - 1


def test_the_loo_group_context_is_the_other_responses_of_the_prompt(world, varied_rewards):
    t = Trainer(world, resolve_run(world, "lc_math_pvf_loo_g8", 0))
    with open_verifier(t.cfg) as t._ver:
        sampled = t.sampler.sample({})
    b = sampled.batch
    seqs, starts = t.critic_rows(sampled, b.rewards.astype(float))
    for i in (0, 9):
        g = [x for x in range(len(b)) if b.prompt_index[x] == b.prompt_index[i]]
        assert len(g) == 8
        text = loo_group_context([b.texts[x] for x in g], [b.rewards[x] for x in g], g.index(i))
        ctx = t.tok(text, add_special_tokens=False)["input_ids"]
        assert seqs[i] == list(b.prompt_ids[b.prompt_index[i]]) + ctx + list(b.response_ids[i])
        assert starts[i] == len(b.prompt_ids[b.prompt_index[i]]) + len(ctx) - 1


class _TokenValue(torch.nn.Module):
    """hidden(ids) = one-hot of the token: with head weight w_v = v / 10, p at a position is
    sigmoid(token id / 10), so each value names the token the critic read there."""

    def __init__(self, vocab):
        super().__init__()
        self.vocab = vocab

    def hidden(self, ids, attn=None):
        return torch.nn.functional.one_hot(ids, self.vocab).float()


@pytest.mark.parametrize("method", ["lc_math_vf_g8", "lc_math_pvf_answer_g8"])
def test_critic_values_sit_at_the_policys_action_positions(world, method, monkeypatch, varied_rewards):
    """The value of response token t is read at the critic position of the token before it: the
    same state the policy's log-prob of token t is gathered at (prompt position P - 1 + t); the
    VF advantage of token t is R - V_t, on the row of the policy's token t."""
    import sparserl.engines.local.critic_loop as loop
    t = Trainer(world, resolve_run(world, method, 0))
    vocab = t.model.model.embed_tokens.num_embeddings  # the policy's vocabulary
    t.critic.model.body = _TokenValue(vocab)
    t.critic.model.head = torch.nn.Linear(vocab, 1)
    with torch.no_grad():
        t.critic.model.head.weight.copy_(torch.arange(vocab, dtype=torch.float32)[None] / 10)
        t.critic.model.head.bias.zero_()
    seen = {}
    real = loop.advantages
    monkeypatch.setattr(loop, "advantages", lambda m, r, c, side, *a, **k: (
        seen.update(V=side.values, mask=side.mask), real(m, r, c, side, *a, **k))[1])
    with open_verifier(t.cfg) as t._ver:
        sampled = t.sampler.sample({})
    adv, (seqs, starts, targets) = t.critic_advantages(sampled, {})
    b = sampled.batch
    lengths = b.response_lengths()
    V, mask = seen["V"], seen["mask"]
    assert mask.sum() == lengths.sum() and V.shape == adv.shape
    for i in range(len(b)):
        P, L = len(b.prompt_ids[b.prompt_index[i]]), int(lengths[i])
        policy_seq = list(b.prompt_ids[b.prompt_index[i]]) + list(b.response_ids[i])
        critic_tokens = [seqs[i][starts[i] + k] for k in range(L)]
        # the tokens the policy conditions on for response token k (k >= 1: the response's k-1)
        assert critic_tokens[1:] == policy_seq[P:P + L - 1]
        assert critic_tokens[0] == seqs[i][len(seqs[i]) - L - 1]  # the token before the response
        np.testing.assert_allclose(V[i, :L], 1 / (1 + np.exp(-np.array(critic_tokens) / 10)), rtol=1e-6)
        assert not mask[i, L:].any() and np.all(adv[i, L:] == 0)
        np.testing.assert_allclose(adv[i, :L], b.rewards[i] - V[i, :L], rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(targets[i], np.full(L, b.rewards[i]))  # Monte Carlo targets


def test_warmup_leaves_the_policy_and_the_prompt_stream_alone(world):
    """20 value updates before step 1, the policy untouched, and step 1 draws the prompts and
    rollouts GRPO G=8 draws (the warm-up has its own prompt stream)."""
    t = Trainer(world, resolve_run(world, "lc_math_tether_g8", 0))
    g = Trainer(world, resolve_run(world, "grpo_g8", 0))
    before = {k: v.clone() for k, v in t.model.state_dict().items()}
    with open_verifier(t.cfg) as t._ver:
        t.warmup()
        first = t.sampler.sample({})
    assert t.critic.updates == 20 and t.warmup_done == 20 and t.warmup_rollouts == 160
    assert all(torch.equal(before[k], v) for k, v in t.model.state_dict().items())
    with open_verifier(g.cfg) as g._ver:
        other = g.sampler.sample({})
    assert first.idx.tolist() == other.idx.tolist() and first.batch.texts == other.batch.texts


@pytest.mark.e2e  # killed and resumed critic runs
@pytest.mark.parametrize("method", ["lc_math_tether_g8", "lc_math_pvf_loo_g8"])
def test_a_killed_critic_run_resumes_to_the_same_metrics(world, method, varied_rewards):
    cfg = copy.deepcopy(world)
    cfg["rl"]["steps"] = 4
    full = copy.deepcopy(cfg)
    full["results_dir"] = cfg["results_dir"] + "_full"
    P, Pf = Paths(cfg), Paths(full)
    Pf.train_pool().parent.mkdir(parents=True, exist_ok=True)
    Pf.train_pool().write_bytes(P.train_pool().read_bytes())
    shutil.copytree(P.policy("s"), Pf.policy("s"))
    d_full = train(full, method, 0)
    with pytest.raises(KilledForTest, match="stopped after step 3"):
        train(cfg, method, 0, stop_after=3)  # the checkpoint is at step 2 (critic, replay, rho)
    d = train(cfg, method, 0)
    a = pd.read_parquet(d / "metrics.parquet").drop(columns=["wall_time_s"])
    b = pd.read_parquet(d_full / "metrics.parquet").drop(columns=["wall_time_s"])
    pd.testing.assert_frame_equal(a, b)
    assert len(a) == 4 and not (d / "ckpt").exists()
