"""Le Critique on the local engine: the critic's alignment, what the policy sees, the replay,
warm-up, the trajectory view of multi-turn episodes, resume, and the rules of the stage."""
import json

import numpy as np
import pandas as pd
import pytest
import torch

from sparserl.core.config import ConfigError, load_config
from sparserl.envs.base import Env, Problem
from sparserl.methods.spec import load_method
from sparserl.values.critic import Critic, ValueModel
from sparserl.values.critic_inputs import (answer_context, critic_sequence, loo_group_context,
                                           privileged_context)


class ToyEnv(Env):
    """Single-turn: 'Q: a + b =' -> the sum; the privileged context is the answer."""
    kind = "toy"

    def problems(self, side, n):
        off = {"rl": 0, "eval": 50, "pretrain": 100}[side]
        out = []
        for i in range(n):
            a, b = (i + off) % 10, (3 * i + off) % 10
            out.append(Problem(f"toy/{side}/{i}", f"Q: {a} + {b} =\nA:", str(a + b), privileged=str(a + b)))
        return out

    def score(self, problems, responses):
        # a random policy never answers: a parity reward gives the critic returns that vary
        return np.array([float(r.strip().startswith(p.answer) or (len(r) + int(p.answer)) % 2 == 0)
                         for p, r in zip(problems, responses)])


class ToyTurns(ToyEnv):
    """Multi-turn: two turns per episode, reward 1 iff both responses start with the answer."""
    kind = "toy_turns"
    multi_turn, max_turns = True, 2

    def reset(self, problem):
        return {"p": problem, "turn": 0, "ok": True}

    def observe(self, st):
        return st["p"].prompt + ("" if st["turn"] == 0 else " again")

    def step(self, st, response):
        st = dict(st, turn=st["turn"] + 1, ok=st["ok"] and response.strip().startswith(st["p"].answer))
        done = st["turn"] == 2 or not st["ok"]
        return st, done, float(done and st["ok"] and st["turn"] == 2)


class IdentityBody(torch.nn.Module):
    """hidden(ids) = one-hot of the token: a head weight per token makes V a known function of it."""
    def __init__(self, vocab):
        super().__init__()
        self.vocab = vocab
        self.lm_head = torch.nn.Linear(vocab, vocab, bias=False)

    def hidden(self, ids, attn=None):
        return torch.nn.functional.one_hot(ids, self.vocab).float()


def test_critic_values_sit_at_the_token_before_each_response_token():
    vocab = 50
    critic = Critic(IdentityBody(vocab), load_method("lc_pvf_answer").critic, pad_id=0, seed=0, batch_size=4)
    with torch.no_grad():  # logit of a position = its token id / 10
        critic.model.head.weight.copy_(torch.arange(vocab, dtype=torch.float32)[None] / 10)
    prompt, priv, resp = [5, 6, 7], [40, 41], [11, 12, 13]
    seq, start = critic_sequence(prompt, priv, resp)
    assert seq == prompt + priv + resp and start == 4
    v = critic.values([seq], [start], [len(resp)])[0]
    # V(h_0, z) reads the last privileged token; V(h_t, z) the response token before t
    want = 1 / (1 + np.exp(-np.array([41, 11, 12]) / 10))
    np.testing.assert_allclose(v, want, rtol=1e-6)
    # without privileged context the first value reads the prompt's last token
    seq0, start0 = critic_sequence(prompt, [], resp)
    v0 = critic.values([seq0], [start0], [3])[0]
    np.testing.assert_allclose(v0[0], 1 / (1 + np.exp(-0.7)), rtol=1e-6)


def test_privileged_contexts():
    assert answer_context("42") == "\nR: 42" and answer_context("") == ""
    assert loo_group_context(["5", " 7", "5"], [1, 0, 1], 1) == "\nG: 5 =1; 5 =1;"
    assert loo_group_context(["5"], [1], 0) == ""
    assert privileged_context("none", "42") == ""
    with pytest.raises(ValueError, match="unknown privileged"):
        privileged_context("oracle")


def test_replay_reuse_limit_fifo_and_bce():
    vocab = 20
    spec = load_method("lc_vf").critic
    critic = Critic(IdentityBody(vocab), spec, pad_id=0, seed=0, batch_size=3, capacity_batches=2)
    seqs = [[1, 2, 3 + i] for i in range(3)]
    critic.push(seqs, [1, 1, 1], [np.ones(2), np.zeros(2), np.ones(2)])
    # a hand BCE on the first batch: p = sigmoid(head(one-hot)) at positions 1, 2
    with torch.no_grad():
        logit = critic.model.head(torch.nn.functional.one_hot(torch.tensor(seqs), vocab).float()).squeeze(-1)
    tgt = torch.tensor([[1.0, 1.0], [0.0, 0.0], [1.0, 1.0]])
    hand = float(torch.nn.functional.binary_cross_entropy_with_logits(logit[:, 1:3], tgt))
    out = critic.update()
    assert out["value_loss"] == pytest.approx(hand, rel=1e-5)
    assert all(e.uses == 1 for e in critic.replay)
    critic.update()
    assert critic.replay == []  # each trajectory used N = 2 times, then evicted
    assert critic.update() is None
    critic.push([[1, 2]] * 7, [0] * 7, [np.ones(2)] * 7)
    assert len(critic.replay) == 6  # FIFO bound: the oldest leave


def test_value_model_is_a_copy_with_a_new_head(tiny_lm):
    model, _ = tiny_lm
    from sparserl.models.qwen3 import Qwen3LM
    import tempfile
    from sparserl.models.policies import save_hf
    with tempfile.TemporaryDirectory() as d:
        save_hf(model, tiny_lm[1], d, {})
        pol = Qwen3LM.from_dir(d)
    vm = ValueModel(pol, seed=0)
    with torch.no_grad():
        vm.body.model.embed_tokens.weight.add_(1.0)
    assert not torch.equal(vm.body.model.embed_tokens.weight, pol.model.embed_tokens.weight)
    assert all(not n.startswith("body.lm_head") for n, _ in vm.named_parameters()
               if any(p is _ for p in vm.parameters_to_train()))


def test_shared_prefixes_and_length_chunks_give_the_plain_critic(tiny_lm):
    """rl.share_prompts and rl.length_chunks change how the critic computes, not what: the same
    values, and one value update moves the weights as the full padded rows do (to float rounding).
    A shared path that read the wrong position, or chunks that lost rows, breaks it."""
    import tempfile
    from sparserl.models.policies import save_hf
    from sparserl.models.qwen3 import Qwen3LM
    model, tok = tiny_lm
    with tempfile.TemporaryDirectory() as d:
        save_hf(model, tok, d, {})
        pol = Qwen3LM.from_dir(d)
    spec = load_method("lc_pvf_answer").critic
    rng = np.random.default_rng(0)
    seqs, starts, targets = [], [], []
    for p in range(3):  # 3 prefixes (prompt + privileged) of different lengths, 4 rows each
        prefix = rng.integers(3, 40, size=5 + 3 * p).tolist()
        for r in range(4):
            resp = rng.integers(3, 40, size=1 + (5 * r + p) % 9).tolist()
            seqs.append(prefix + resp)
            starts.append(len(prefix) - 1)
            targets.append(np.full(len(resp), float(r % 2)))
    lengths = [len(t) for t in targets]
    plain = Critic(pol, spec, pad_id=0, seed=0, batch_size=12)
    fast = Critic(pol, spec, pad_id=0, seed=0, batch_size=12, length_chunks=3, share_prompts=True)
    assert fast.share_prompts
    np.testing.assert_allclose(fast.values(seqs, starts, lengths), plain.values(seqs, starts, lengths),
                               atol=1e-5)
    for c in (plain, fast):
        c.push(seqs, starts, targets)
        c.update()
    for (n, a), b in zip(plain.model.named_parameters(), fast.model.parameters()):
        torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-4, msg=n)
    moved = [n for (n, a), b in zip(plain.model.named_parameters(), pol.parameters()) if n.startswith("body.")
             and not torch.equal(a, b)]
    assert moved  # the update trained the body: the comparison above is not vacuous


def _cfg(tmp_path, tiny_lm, repo, env_kind="toy", methods=("lc_pvf_answer",), k=4):
    from sparserl.core.paths import Paths
    from sparserl.models.policies import save_hf
    cfg = load_config(repo / "configs/smoke.yaml")
    cfg["results_dir"] = str(tmp_path / "results")
    cfg["critique"] = {
        "envs": {"toy": {"kind": env_kind}}, "corpus": {"size": 10, "noise": 0.5},
        "tokenizer": {"vocab_size": 120, "max_length": 24},
        "policy": {"hidden_size": 32, "num_layers": 2, "num_heads": 2, "num_kv_heads": 1, "ffn_size": 64,
                   "lr": 1e-3, "steps": 1},
        "rl": {"seeds": [0], "steps": 4, "rollouts_per_step": 16, "lr": 1e-4, "mini_batches": 2, "pool": 32,
               "max_new_tokens": 4, "checkpoint_every": 2, "eval": {"problems": 8, "samples": 2}},
        "experiments": {"toy_k": {"env": "toy", "k": k, "methods": list(methods)}}}
    model, tok = tiny_lm
    save_hf(model, tok, Paths(cfg).critique.policy(), {"test": True})
    return cfg


@pytest.fixture()
def toy_env(monkeypatch):
    import sparserl.engines.local.critique as crit
    envs = {"toy": ToyEnv, "toy_turns": ToyTurns}
    monkeypatch.setattr(crit, "make_env", lambda kind, spec, seed=0: envs[kind](spec, seed))


def test_policy_never_sees_the_privileged_context(tmp_path, tiny_lm, repo, toy_env):
    from sparserl.engines.local.critique import CritiqueTrainer
    from sparserl.methods.run import resolve_critique_run
    cfg = _cfg(tmp_path, tiny_lm, repo)
    tr = CritiqueTrainer(cfg, resolve_critique_run(cfg, "toy_k", "lc_pvf_answer", 0))
    seen_policy, seen_critic = [], []
    # our Qwen3LM's log-probs read `hidden` (the head runs on response positions only)
    spy = "hidden" if hasattr(tr.model, "hidden") else "forward"
    pol_fwd, cri_fwd = getattr(tr.model, spy), tr.critic.model.forward
    setattr(tr.model, spy, lambda input_ids, attention_mask=None: (
        seen_policy.append((input_ids.clone(), attention_mask.clone())), pol_fwd(input_ids, attention_mask))[1])
    tr.critic.model.forward = lambda ids, attn: (seen_critic.append(ids.clone()), cri_fwd(ids, attn))[1]
    problems, ep = tr._episodes(salt=0)
    adv, payload = tr.evaluate_batch(problems, ep, {})
    tr.update(ep.rows, adv, {})
    tok = tr.tok
    tag = tok(answer_context("7"), add_special_tokens=False)["input_ids"][:2]  # "\nR:" tokens

    def has(seq, sub):
        return any(seq[i:i + len(sub)] == sub for i in range(len(seq) - len(sub) + 1))

    policy_rows = [row[m.bool()].tolist() for ids, mask in seen_policy for row, m in zip(ids, mask)]
    expected = [list(ep.rows.prompt_ids[r]) + list(ep.rows.response_ids[r]) for r in range(len(ep.rows))]
    assert policy_rows and all(not has(r, tag) for r in policy_rows)
    # the policy's update reads exactly prompt + response of every row (the rollouts' own ids)
    assert sorted(map(tuple, policy_rows)) == sorted(tuple(e) for e in expected)
    critic_rows = [row.tolist() for ids in seen_critic for row in ids]
    assert all(has(r, tag) for r in critic_rows)
    # and the critic's rows are prompt + answer context + response
    for r, (seq, start) in enumerate(zip(payload[0], payload[1])):
        priv = tok(answer_context(problems[ep.problem[ep.traj[r]]].privileged), add_special_tokens=False)["input_ids"]
        assert seq == list(ep.rows.prompt_ids[r]) + priv + list(ep.rows.response_ids[r])
        assert start == len(ep.rows.prompt_ids[r]) + len(priv) - 1


def test_loo_group_context_holds_the_other_responses(tmp_path, tiny_lm, repo, toy_env):
    from sparserl.engines.local.critique import CritiqueTrainer
    from sparserl.methods.run import resolve_critique_run
    cfg = _cfg(tmp_path, tiny_lm, repo, methods=("lc_pvf_loo",))
    tr = CritiqueTrainer(cfg, resolve_critique_run(cfg, "toy_k", "lc_pvf_loo", 0))
    problems, ep = tr._episodes(salt=0)
    seqs, starts = tr.critic_rows(problems, ep)
    j = 0
    group = [x for x in range(len(ep.problem)) if ep.problem[x] == ep.problem[j]]
    text = loo_group_context([ep.texts[x] for x in group], [ep.rewards[x] for x in group], group.index(j))
    priv = tr.tok(text, add_special_tokens=False)["input_ids"]
    assert len(group) == 4 and seqs[0] == list(ep.rows.prompt_ids[0]) + priv + list(ep.rows.response_ids[0])


def test_warmup_runs_its_value_updates_before_the_first_policy_update(tmp_path, tiny_lm, repo, toy_env):
    from sparserl.engines.local.critique import CritiqueTrainer
    from sparserl.methods.run import resolve_critique_run
    cfg = _cfg(tmp_path, tiny_lm, repo, methods=("lc_vf",))
    tr = CritiqueTrainer(cfg, resolve_critique_run(cfg, "toy_k", "lc_vf", 0))
    before = {k: v.clone() for k, v in tr.model.state_dict().items()}
    tr.warmup()
    assert tr.critic.updates == 20 and tr.warmup_done == 20
    assert all(torch.equal(before[k], v) for k, v in tr.model.state_dict().items())  # policy untouched


def test_multi_turn_rows_and_trajectories(tmp_path, tiny_lm, repo, toy_env):
    from sparserl.engines.local.critique import CritiqueTrainer, to_rows, to_trajectories
    from sparserl.methods.run import resolve_critique_run
    cfg = _cfg(tmp_path, tiny_lm, repo, env_kind="toy_turns", methods=("lc_tether",))
    tr = CritiqueTrainer(cfg, resolve_critique_run(cfg, "toy_k", "lc_tether", 0))
    problems, ep = tr._episodes(salt=0)
    assert len(ep.rewards) == 16 and np.all(np.diff(ep.traj) >= 0)
    turns = np.bincount(ep.traj, minlength=16)
    assert set(turns.tolist()) <= {1, 2}
    lengths = ep.rows.response_lengths()
    vals = np.arange(len(lengths) * lengths.max(), dtype=float).reshape(len(lengths), -1)
    V, mask, off = to_trajectories(vals, lengths, ep.traj, 16)
    assert mask.sum() == lengths.sum()
    back = to_rows(V, ep.traj, off, lengths)
    for r, L in enumerate(lengths):
        np.testing.assert_array_equal(back[r, :L], vals[r, :L])
    info = {}
    adv, _ = tr.evaluate_batch(problems, ep, info)
    assert adv.shape[0] == len(ep.rows) and np.isfinite(info["critic_ev"]) or np.isnan(info["critic_ev"])


def test_a_killed_run_resumes_to_the_same_metrics(tmp_path, tiny_lm, repo, toy_env):
    from sparserl.engines.local.critique import CritiqueTrainer, KilledForTest
    from sparserl.methods.run import resolve_critique_run
    from sparserl.core.paths import Paths
    cfg = _cfg(tmp_path, tiny_lm, repo, methods=("lc_tether",))
    CritiqueTrainer(cfg, resolve_critique_run(cfg, "toy_k", "lc_tether", 0)).run()
    rp = Paths(cfg).critique.run("toy_k", "lc_tether", 0)
    full = pd.read_parquet(rp.metrics).drop(columns="wall_time_s")
    with pytest.raises(KilledForTest):
        CritiqueTrainer(cfg, resolve_critique_run(cfg, "toy_k", "lc_tether", 0)).run(stop_after=2)
    CritiqueTrainer(cfg, resolve_critique_run(cfg, "toy_k", "lc_tether", 0)).run()
    again = pd.read_parquet(rp.metrics).drop(columns="wall_time_s")
    pd.testing.assert_frame_equal(full, again)
    # Tether's rho follows its EMA from rho_0 = 0: rho_k = .95 rho_{k-1} + .05 rhohat_k
    rho, hat = full["est_tether_rho"].to_numpy(), full["est_tether_rhohat"].to_numpy()
    np.testing.assert_allclose(rho, 0.95 * np.r_[0.0, rho[:-1]] + 0.05 * hat, rtol=1e-9, atol=1e-12)
    s = json.loads((rp.dir / "summary.json").read_text())
    assert s["warmup_updates"] == 20 and 0 <= s["heldout_reward"] <= 1


def test_critique_trainer_is_built_by_trainers_construction(tmp_path, tiny_lm, repo, toy_env, monkeypatch):
    """CritiqueTrainer runs `Trainer.__init__` (a change there reaches both loops) and ends in the
    state its own recipe gave: torch seeded, policy c, AdamW without decay at the run's lr, the
    numpy stream untouched by construction, the critic's head from the run's seed."""
    from sparserl.engines.local.critic_loop import make_critic
    from sparserl.engines.local.critique import CritiqueTrainer
    from sparserl.engines.local.trainer import Trainer, load_policy
    from sparserl.core.paths import Paths
    from sparserl.methods.run import resolve_critique_run
    cfg = _cfg(tmp_path, tiny_lm, repo, env_kind="toy_turns", methods=("lc_vf",))
    run = resolve_critique_run(cfg, "toy_k", "lc_vf", 0)
    built = []
    load_models = Trainer.load_models
    monkeypatch.setattr(Trainer, "load_models", lambda self, *a: (built.append(a), load_models(self, *a))[1])
    tr = CritiqueTrainer(cfg, run)
    assert built == [(str(Paths(cfg).critique.policy()), "cpu")]
    torch.manual_seed(0)
    model, tok = load_policy(str(Paths(cfg).critique.policy()), "cpu")
    critic = make_critic(model, run.spec, tok.pad_token_id, 0, run.settings)
    for (n, a), b in zip(model.state_dict().items(), tr.model.state_dict().values()):
        torch.testing.assert_close(b, a, rtol=0, atol=0, msg=n)
    for (n, a), b in zip(critic.model.state_dict().items(), tr.critic.model.state_dict().values()):
        torch.testing.assert_close(b, a, rtol=0, atol=0, msg=n)
    assert tr.rng.bit_generator.state == np.random.default_rng(0).bit_generator.state
    assert [(g["lr"], g["weight_decay"]) for g in tr.opt.param_groups] == [(1e-4, 0.0)] * len(tr.opt.param_groups)
    assert tr.ref_model is None and tr.response_length == 4 * 2  # max_new_tokens x the env's turns
    assert (tr.steps, tr.n_prompts, tr.step, tr.warmup_done) == (4, 4, 0, 0)


def test_a_critique_method_with_a_kl_coef_trains_against_the_start_policy(tmp_path, tiny_lm, repo, toy_env):
    """`kl_coef` > 0: the KL reference (a frozen copy of policy c) is built as the math trainer
    builds it, and the policy update adds its KL term (main's CritiqueTrainer dropped it)."""
    import dataclasses
    from sparserl.engines.local.critique import CritiqueTrainer
    from sparserl.methods.run import resolve_critique_run
    cfg = _cfg(tmp_path, tiny_lm, repo, methods=("lc_mean",))
    run = resolve_critique_run(cfg, "toy_k", "lc_mean", 0)
    tr = CritiqueTrainer(cfg, dataclasses.replace(run, spec=dataclasses.replace(run.spec, kl_coef=0.1)))
    assert tr.ref_model is not None and not tr.ref_model.training
    for a, b in zip(tr.model.parameters(), tr.ref_model.parameters()):
        assert torch.equal(a, b) and a is not b
    problems, ep = tr._episodes(salt=0)
    adv, _ = tr.evaluate_batch(problems, ep, {})
    info = {}
    tr.update(ep.rows, adv, info)
    # two mini-batches: the second is scored after the first moved the policy off the reference
    assert info["kl"] > 0
    assert any(not torch.equal(a, b) for a, b in zip(tr.model.parameters(), tr.ref_model.parameters()))


def test_critic_spec_errors():
    from sparserl.methods.spec import MethodSpec
    with pytest.raises(ConfigError, match="add a 'critic'"):
        MethodSpec.from_dict({"estimator": "gae", "group_size": 4, "loss": {"type": "ppo_clip"}, "name": "x"})
        from sparserl.methods.spec import check_method
        check_method(MethodSpec.from_dict({"estimator": "gae", "group_size": 4, "loss": {"type": "ppo_clip"}}))
    m = load_method("lc_vf_lam")
    assert m.critic.gae_lambda(8192) == pytest.approx(0.999888, abs=1e-6)
    assert load_method("grpo_g8").to_dict().get("critic", "absent") == "absent"


def test_tiny_config_runs_every_figure_role(repo):
    from sparserl.envs.world import experiments
    from sparserl.figures.le_critique import role
    cfg = load_config(repo / "configs/tiny.yaml")
    exps = {e.name: e for e in experiments(cfg)}
    assert {e.k for e in exps.values()} >= {1, 8}
    roles = {role(m) for e in exps.values() for m in e.methods}
    assert {"Mean", "VF", "Pvf", "Tether", "VF, λ=0.4^(1/L)", "Pvf, λ=0.4^(1/L)"} <= roles
    # tiny trains one seed (its 30-minute budget); small's seeds draw the figures' seed bands
    assert cfg["critique"]["rl"]["seeds"] == [0]
    assert len(load_config(repo / "configs/small.yaml")["critique"]["rl"]["seeds"]) >= 2


def test_first_step_draws_the_same_prompts_for_every_method(tmp_path, tiny_lm, repo, toy_env):
    """The warm-up has its own prompt stream, so step 1 of Mean and of VF see the same batch."""
    from sparserl.engines.local.critique import CritiqueTrainer
    from sparserl.methods.run import resolve_critique_run
    cfg = _cfg(tmp_path, tiny_lm, repo, methods=("lc_mean", "lc_vf"))
    firsts = []
    for m in ("lc_mean", "lc_vf"):
        tr = CritiqueTrainer(cfg, resolve_critique_run(cfg, "toy_k", m, 0))
        if tr.critic is not None:
            tr.warmup()
        problems, ep = tr._episodes(salt=0)
        firsts.append(([p.id for p in problems], ep.rows.texts))
    assert firsts[0] == firsts[1]


@pytest.mark.e2e  # runs, tables and every figure
def test_runs_tables_and_every_le_critique_figure(tmp_path, tiny_lm, repo, toy_env):
    """Four methods on the toy env -> runs.parquet / final.parquet -> every le_critique figure
    draws from those tables alone; F4's EV is the mean over the run's final value batches."""
    from sparserl.core.artifacts import write_json
    from sparserl.engines.local.critique import CritiqueTrainer
    from sparserl.methods.run import resolve_critique_run
    from sparserl.core.paths import Paths
    from sparserl.cli.figures import draw_figure
    from sparserl.figures import list_figures
    from sparserl.studies.le_critique import write_runs_table
    methods = ("lc_mean", "lc_vf", "lc_pvf_answer", "lc_tether", "lc_vf_lam", "lc_pvf_answer_lam")
    cfg = _cfg(tmp_path, tiny_lm, repo, methods=methods)
    cfg["critique"]["rl"]["steps"] = 3
    cfg["figures_dir"] = str(tmp_path / "figs")
    for m in methods:
        CritiqueTrainer(cfg, resolve_critique_run(cfg, "toy_k", m, 0)).run()
    CP = Paths(cfg).critique
    write_json({"env": "toy", "heldout_reward": 0.25}, CP.start_eval("toy"))
    write_runs_table(cfg, [CP.run("toy_k", m, 0).dir / "summary.json" for m in methods], [CP.start_eval("toy")],
                     CP.runs_table(), CP.final_table())
    final = pd.read_parquet(CP.final_table()).set_index("method")
    runs = pd.read_parquet(CP.runs_table())
    vf = runs[runs["method"] == "lc_vf"]
    assert final.loc["lc_vf", "ev_final"] == pytest.approx(vf["critic_ev"].mean())
    assert final.loc["lc_mean", "heldout_gain"] == pytest.approx(final.loc["lc_mean", "heldout_reward"] - 0.25)
    figs = [f for f in list_figures(cfg) if f.group == "le_critique"]
    assert len(figs) == 6
    from helpers.figure_checks import assert_error_bars_stated
    for f in figs:
        out = draw_figure(f.id, cfg, Paths(cfg))
        assert out.stat().st_size > 10_000 and f.caption
    # F4 and F7 draw seed error bars (one seed: zero-length), the curves bands: each says which
    assert {f.id for f in figs if assert_error_bars_stated(f, cfg)} >= {"le_critique/f4_explained_variance",
                                                                        "le_critique/f7_final_rewards"}


def test_critique_runs_log_heldout_reward_and_hyperparameters_to_tensorboard(tmp_path, tiny_lm, repo, toy_env):
    """A critique run (the `critique-train` command's `train`) writes TensorBoard like the math
    runs: the training scalars, the hyperparameters (method, the experiment's RL settings, env, K)
    and the held-out reward, its evaluation, at the last step; a kill and resume logs each step once."""
    pytest.importorskip("tensorboard")
    from helpers.tb_events import hparams, metric_tags, read_events
    from sparserl.engines.local.critique import KilledForTest, train
    from sparserl.core.paths import Paths
    cfg = _cfg(tmp_path, tiny_lm, repo, methods=("lc_vf",))
    with pytest.raises(KilledForTest):
        train(cfg, "toy_k", "lc_vf", 0, stop_after=2)
    d = train(cfg, "toy_k", "lc_vf", 0)
    run = Paths(cfg).critique.run("toy_k", "lc_vf", 0)
    assert run.tensorboard == d / "tensorboard"
    acc = read_events(run.tensorboard)
    summary = json.loads((d / "summary.json").read_text())
    (held,) = acc.Scalars("eval/heldout_reward")
    assert held.step == 4 and held.value == pytest.approx(summary["heldout_reward"])
    assert [e.step for e in acc.Scalars("reward_mean")] == [1, 2, 3, 4]
    hp = hparams(acc)
    assert hp["method.estimator"] == load_method("lc_vf").estimator and hp["k"] == 4
    assert hp["experiment"] == "toy_k" and hp["env"] == "toy" and hp["rl.steps"] == 4
    assert metric_tags(acc) == ["eval/heldout_reward", "reward_mean"]
