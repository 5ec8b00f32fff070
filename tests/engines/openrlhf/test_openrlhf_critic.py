"""Le Critique's critic inside OpenRLHF 0.11.2's critic path, against OpenRLHF's REAL classes on CPU.

The critic is OpenRLHF's own `CriticModel` (its slicing of values to action positions included)
on a tiny body whose hidden state is a learnt scalar per token, so the value read at a position
is a known function of the token there: a value read one position off is another token's.

Needs the OpenRLHF CPU install (see tests/test_openrlhf_plugin.py); vllm/flash_attn placeholders
from tests/openrlhf_stubs.py for the duration of this module.
"""
from __future__ import annotations

import copy
import json
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from sparserl.estimators.tether import explained_variance

from helpers import openrlhf_stubs

openrlhf_stubs.skip_without_openrlhf()
pytestmark = pytest.mark.usefixtures("orl")  # tests/engines/openrlhf/conftest.py

import torch  # noqa: E402

from sparserl.estimators import EstimatorContext, get_estimator  # noqa: E402
from sparserl.methods.spec import MethodSpec, bucket_edges  # noqa: E402
from sparserl.values.critic_inputs import answer_context, critic_sequence, loo_group_context  # noqa: E402

Z_BASE = 1000  # the fake tokenizer's ids for context text: disjoint from prompt/response ids (< 100)
VOCAB = 1200
MAX_NEW = 16


# --------------------------------------------------------------------------- tiny models


def f_logit(tok):
    """The tiny critic's head logit at a position holding token `tok` (distinct per token)."""
    return ((np.asarray(tok) * 37) % 101) / 25.0 - 2.0


def tiny_critic(orl):
    """OpenRLHF's CriticModel class (`_get_critic_model`) on a one-number-per-token body."""
    from transformers import PretrainedConfig, PreTrainedModel

    class TinyConfig(PretrainedConfig):
        model_type = "sparserl_tiny_critic"

        def __init__(self, vocab_size=VOCAB, hidden_size=1, **kw):
            super().__init__(**kw)
            self.vocab_size, self.hidden_size, self.normalize_reward = vocab_size, hidden_size, False

    class TinyPre(PreTrainedModel):
        config_class = TinyConfig
        base_model_prefix = "model"

        def _init_weights(self, module):
            pass

    class TinyBody(TinyPre):
        def __init__(self, config):
            super().__init__(config)
            self.emb = torch.nn.Embedding(config.vocab_size, config.hidden_size)

        def forward(self, input_ids, attention_mask=None, position_ids=None):
            return {"last_hidden_state": self.emb(input_ids)}

    model = orl.model._get_critic_model(TinyPre, TinyBody)(TinyConfig())
    with torch.no_grad():
        model.model.emb.weight.copy_(torch.from_numpy(f_logit(np.arange(VOCAB))).float()[:, None])
        model.score.weight.fill_(1.0)
    return model


class CharTokenizer:
    """Context text -> one id per character (>= Z_BASE); response ids decode to letters."""
    pad_token_id = 0

    def encode(self, text, add_special_tokens=False):
        return [Z_BASE + (ord(c) % 128) for c in text]

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(97 + int(i) % 26) for i in ids)


class Group:
    """A RayActorGroup stand-in: runs `fn` on each micro-batch, records what it was given."""

    def __init__(self, fn):
        self.fn, self.calls = fn, []

    def async_run_method_batch(self, method_name, **kw):
        n = len(next(iter(kw.values())))
        out = []
        for i in range(n):
            one = {k: v[i] for k, v in kw.items()}
            self.calls.append((method_name, one))
            out.append(self.fn(**one))
        return [out]

    def async_run_method(self, method_name, **kw):
        self.calls.append((method_name, kw))
        return [self.fn(**kw)] if method_name == "fit" else [None]


def critic_group(model):
    def forward(sequences, action_mask, attention_mask):  # CriticModelActor.forward, on CPU
        with torch.no_grad():
            return model.eval()(sequences, action_mask, attention_mask)
    return Group(forward)


def actor_group():
    return Group(lambda sequences, action_mask, attention_mask: torch.zeros(action_mask.shape))


# --------------------------------------------------------------------------- samples


def _args(spec: dict, estimator=None, n=4, **over):
    a = SimpleNamespace(
        rollout=SimpleNamespace(n_samples_per_prompt=n, max_new_tokens=MAX_NEW, micro_batch_size=3),
        reward=SimpleNamespace(clip_range=(-10, 10)),
        data=SimpleNamespace(max_len=64),
        algo=SimpleNamespace(advantage=SimpleNamespace(estimator=estimator or spec["estimator"], gamma=1.0,
                                                       lambd=1.0, no_std_norm=False),
                             kl=SimpleNamespace(use_loss=False, estimator="k1")),
        ds=SimpleNamespace(ring_attn_size=1, tensor_parallel_size=1, packing_samples=False, enable_sleep=False),
        train=SimpleNamespace(colocate_all=False, colocate_actor_ref=False, colocate_critic_reward=False,
                              dynamic_batch_enable=False, max_epochs=1, seed=0),
        actor=SimpleNamespace(aux_loss_coef=0.0),
        critic=SimpleNamespace(freezing_steps=-1),
        sparserl=SimpleNamespace(spec=json.dumps({"group_size": n, "loss": {"type": "ppo_clip"}, **spec})),
        vllm=SimpleNamespace(enable_sleep=False),
    )
    for k, v in over.items():
        setattr(a, k, v)
    return a


def _rollouts(seed=0, n_prompts=3, k=4, order=None):
    """(prompt ids, response ids, uid, answer, reward) per rollout; prompts of different lengths."""
    rng = np.random.default_rng(seed)
    prompts = [list(rng.integers(1, 100, size=int(rng.integers(2, 6)))) for _ in range(n_prompts)]
    out = []
    for p in range(n_prompts):
        for _ in range(k):
            resp = list(rng.integers(1, 100, size=int(rng.integers(1, 7))))
            out.append((prompts[p], resp, f"u{p}", f"{p * 7 + 3}", float(rng.integers(0, 2))))
    if order is not None:
        out = [out[i] for i in order]
    return out


def _samples(orl, rollouts, micro=3):
    """Micro-batches as OpenRLHF's samples generator + split_rollout_samples build them:
    [prompt][response] per sample, action_mask = mask[1:], right-padded concat (pad 0)."""
    from sparserl.engines.openrlhf.labels import encode_label
    singles = []
    for j, (p, y, uid, ans, r) in enumerate(rollouts):
        seq = torch.tensor(p + y, dtype=torch.long)
        act = torch.zeros(len(seq), dtype=torch.long)
        act[len(p):] = 1
        singles.append(orl.exp.Experience(
            sequences=seq[None], attention_mask=torch.ones(1, len(seq), dtype=torch.long),
            action_mask=act[1:][None].bool(), prompts=[f"prompt {uid}"], labels=[encode_label(uid, ans)],
            rewards=torch.tensor([r]), response_length=torch.tensor([float(len(y))]),
            total_length=torch.tensor([float(len(seq))]),
            info={"reward": torch.tensor([r]), "sid": torch.tensor([j])}))
    return [orl.exp.Experience.concat_experiences(singles[a:a + micro], 0) for a in range(0, len(singles), micro)]


def _maker(orl, args, model=None):
    m = orl.plugin_exp.SparseRLExperienceMaker.__new__(orl.plugin_exp.SparseRLExperienceMaker)
    m.strategy, m.args = SimpleNamespace(args=args), args
    m.advantage_estimator = args.algo.advantage.estimator
    m.actor_model_group, m.critic_model_group = actor_group(), critic_group(model or tiny_critic(orl))
    m.reward_model_group = m.initial_model_group = None
    m.tokenizer = CharTokenizer()
    m.kl_ctl = SimpleNamespace(value=0.0)
    return m


def _contexts(kind, rollouts):
    tok = CharTokenizer()
    out = []
    for i, (p, y, uid, ans, r) in enumerate(rollouts):
        if kind == "none":
            out.append([])
        elif kind == "answer":
            out.append(tok.encode(answer_context(ans)))
        else:
            grp = [j for j, x in enumerate(rollouts) if x[2] == uid]
            out.append(tok.encode(loo_group_context([tok.decode(rollouts[j][1]) for j in grp],
                                                    [rollouts[j][4] for j in grp], grp.index(i))))
    return out


def _rows(exps, field):
    """Per rollout (in rollout order, via info['sid']): the field's action-token entries."""
    out = {}
    for e in exps:
        for i, sid in enumerate(e.info["sid"].tolist()):
            out[sid] = getattr(e, field)[i][e.action_mask[i]].double().numpy()
    return [out[k] for k in sorted(out)]


# --------------------------------------------------------------------------- alignment, privacy


@pytest.mark.parametrize("kind", ["none", "answer", "loo_group"])
def test_critic_values_align_with_action_positions(orl, no_ray, kind):
    """Values at the actor's action positions are the critic's at start + t of its own sequence
    prompt + context + response (`critic_inputs.critic_sequence`), for every prompt length."""
    order = np.random.default_rng(5).permutation(12)
    ro = _rollouts(order=order)
    maker = _maker(orl, _args({"estimator": "gae", "critic": {"privileged": kind}}))
    exps = maker.make_experience(_samples(orl, ro))
    ctx = _contexts(kind, ro)
    assert any(ctx) == (kind != "none")
    got = _rows(exps, "values")
    for i, (p, y, *_r) in enumerate(ro):
        ids, start = critic_sequence(p, ctx[i], y)
        want = 1 / (1 + np.exp(-f_logit([ids[start + t] for t in range(len(y))])))
        np.testing.assert_allclose(got[i], want, rtol=1e-6, atol=1e-7)
    for e in exps:  # 0 off the action mask
        assert torch.all(e.values[~e.action_mask] == 0)
    # the critic's forward got exactly prompt + context + response per row
    crit_rows = []
    for _m, call in maker.critic_model_group.calls:
        for s, a in zip(call["sequences"], call["attention_mask"]):
            crit_rows.append(s[:int(a.sum())].tolist())
    assert crit_rows == [critic_sequence(p, c, y)[0] for (p, y, *_r), c in zip(ro, ctx)]


@pytest.mark.parametrize("kind", ["answer", "loo_group"])
def test_actor_never_sees_the_privileged_context(orl, no_ray, kind):
    """The token ids that reach the actor's forward, and the Experience sequences the actor
    trains on, are prompt + response exactly: no context token (ids >= Z_BASE) anywhere."""
    from sparserl.engines.openrlhf.critic import CONTEXT_KEY, label_context
    ro = _rollouts(seed=2)
    samples = _samples(orl, ro)
    want = [torch.tensor(p + y) for p, y, *_r in ro]
    maker = _maker(orl, _args({"estimator": "tether", "critic": {"privileged": kind}}))
    exps = maker.compute_advantages_and_returns(maker.make_experience(samples))
    actor_rows = []
    for _m, call in maker.actor_model_group.calls:
        assert int(call["sequences"].max()) < Z_BASE
        for s, a in zip(call["sequences"], call["attention_mask"]):
            actor_rows.append(s[:int(a.sum())])
    assert len(actor_rows) == len(want) and all(torch.equal(a, w) for a, w in zip(actor_rows, want))
    exp_rows = [s[:int(a.sum())] for e in exps for s, a in zip(e.sequences, e.attention_mask)]
    assert all(torch.equal(a, w) for a, w in zip(exp_rows, want))
    assert all(int(e.sequences.max()) < Z_BASE for e in exps)
    # the critic saw the context: it travels in the label (metadata the actor never feeds a model)
    crit = [c["sequences"] for _m, c in maker.critic_model_group.calls]
    assert all(int(s.max()) >= Z_BASE for s in crit)
    labels = [lab for e in exps for lab in e.labels]
    assert [label_context(lab) for lab in labels] == _contexts(kind, ro)
    assert all(CONTEXT_KEY in json.loads(lab) for lab in labels)


def test_critic_items_train_on_the_critic_layout(orl, no_ray):
    """What the critic worker trains on (OpenRLHF's replay items -> `critic_item`): the critic's
    sequence, returns R at start + t, the action mask on the response only."""
    from openrlhf.trainer.ppo_utils.experience import remove_padding_in_sequences, split_experience_batch
    from sparserl.engines.openrlhf.critic import critic_item
    ro = _rollouts(seed=4)
    maker = _maker(orl, _args({"estimator": "gae", "critic": {"privileged": "answer"}}))
    exps = maker.compute_advantages_and_returns(maker.make_experience(_samples(orl, ro)))
    items = [it for e in exps for it in remove_padding_in_sequences(split_experience_batch(copy.deepcopy(e)))]
    ctx = _contexts("answer", ro)
    for it in items:
        j = int(it.info["sid"])
        p, y, _u, _a, r = ro[j]
        c = critic_item(it)
        ids, start = critic_sequence(p, ctx[j], y)
        assert c.sequences.tolist() == ids and int(c.attention_mask.sum()) == len(ids)
        assert torch.nonzero(c.action_mask).reshape(-1).tolist() == [start + t for t in range(len(y))]
        np.testing.assert_allclose(c.returns[c.action_mask].numpy(), r)
        assert torch.all(c.returns[~c.action_mask] == 0)


# --------------------------------------------------------------------------- advantages = registry


def _registry(name, r, uids, V, M, ctx=None, **kw):
    return get_estimator(name)(np.asarray(r, float), np.asarray(uids), values=V, mask=M, ctx=ctx, **kw)


def _compact(ro, values):
    T = max(len(y) for _p, y, *_r in ro)
    V, M = np.zeros((len(ro), T)), np.zeros((len(ro), T), bool)
    for i, v in enumerate(values):
        V[i, :len(v)], M[i, :len(v)] = v, True
    return V, M


@pytest.mark.parametrize("name,critic,opts", [
    ("gae", {"privileged": "answer"}, {"gamma": 1.0, "lam": 1.0}),
    ("gae", {"privileged": "none", "lam_gae": "auto"}, {"gamma": 1.0, "lam": 0.4 ** (1 / MAX_NEW)}),
    ("evpo", {"privileged": "loo_group"}, {}),
    ("tether_bucketed", {"privileged": "none"}, {"edges": bucket_edges(MAX_NEW)}),
])
def test_token_estimators_equal_the_registry(orl, no_ray, name, critic, opts):
    order = np.random.default_rng(9).permutation(12)
    ro = _rollouts(seed=1, order=order)
    maker = _maker(orl, _args({"estimator": name, "critic": critic}))
    exps = maker.make_experience(_samples(orl, ro))
    values = _rows(exps, "values")
    exps = maker.compute_advantages_and_returns(exps)
    V, M = _compact(ro, values)
    r, uids = [x[4] for x in ro], [x[2] for x in ro]
    spec = MethodSpec.from_dict({"name": "m", "estimator": name, "group_size": 4, "loss": {"type": "ppo_clip"},
                                 "critic": critic})
    assert spec.estimator_options(MAX_NEW) == opts
    want = _registry(name, r, uids, V, M, EstimatorContext(), **opts)
    got = _rows(exps, "advantages")
    for i in range(len(ro)):
        np.testing.assert_allclose(got[i], want[i][M[i]], atol=1e-6)
    for e in exps:
        assert torch.all(e.advantages[~e.action_mask] == 0) and torch.all(e.returns[~e.action_mask] == 0)
    # Monte Carlo targets (lambda_target = 1): every action token's return is R_i
    for ret, rr in zip(_rows(exps, "returns"), r):
        np.testing.assert_allclose(ret, rr)


def test_tether_rho_carries_between_steps(orl, no_ray):
    """Step 2's Tether uses rho_1 of step 1 (EMA 0.95 from rho_0 = 0) through the CalibrationState."""
    ro = _rollouts(seed=3)
    maker = _maker(orl, _args({"estimator": "tether", "critic": {"privileged": "none"}}))
    r, uids = [x[4] for x in ro], [x[2] for x in ro]
    rhos = []
    for step in range(2):
        exps = maker.make_experience(_samples(orl, ro))
        V, M = _compact(ro, _rows(exps, "values"))
        exps = maker.compute_advantages_and_returns(exps)
        info = {}
        want = _registry("tether", r, uids, V, M, EstimatorContext(tether_rho=rhos[-1] if rhos else None), info=info)
        np.testing.assert_allclose(np.concatenate(_rows(exps, "advantages")), want[M], atol=1e-6)
        assert maker.last_estimator_info["tether_rho"] == pytest.approx(info["tether_rho"])
        assert info["tether_rho"] == pytest.approx(0.95 * (rhos[-1] if rhos else 0.0) + 0.05 * info["tether_rhohat"])
        rhos.append(info["tether_rho"])
        # rho and the batch's EV reach OpenRLHF's logged info (train/est_tether_rho, train/critic_ev)
        e0 = exps[0]
        assert float(e0.info["est_tether_rho"][0]) == pytest.approx(info["tether_rho"], rel=1e-6)
        ev = explained_variance(np.asarray(r, float)[:, None], V, M)
        assert float(e0.info["critic_ev"][0]) == pytest.approx(ev, rel=1e-5, abs=1e-6)
    assert rhos[0] > 0 and maker._calibration.extra["tether_rho"] == pytest.approx(rhos[1])


def test_critic_method_dispatch(orl):
    """Our token path only for a spec with a critic; OpenRLHF's own gae otherwise."""
    from sparserl.engines.openrlhf.critic import critic_method
    assert critic_method(_args({"estimator": "gae", "critic": {}})).critic.privileged == "none"
    a = _args({"estimator": "grpo"}, estimator="gae")
    a.sparserl.spec = None
    assert critic_method(a) is None  # OpenRLHF's GAE, its MSE critic
    assert critic_method(_args({"estimator": "grpo"})) is None
    a.algo.advantage.estimator = "tether"  # by hand, no spec: the spec defaults
    assert critic_method(a).critic.warmup_updates == 20


# --------------------------------------------------------------------------- loss


def test_bce_value_loss_matches_hand_computation(orl):
    from openrlhf.models.loss import ValueLoss
    from sparserl.engines.openrlhf.critic import BCEValueLoss
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, generator=g).requires_grad_(True)
    mask = torch.tensor([[1, 1, 1, 0, 0], [0, 1, 1, 1, 1], [0, 0, 0, 1, 0]], dtype=torch.bool)
    R = torch.tensor([1.0, 0.0, 1.0])[:, None].expand(3, 5) * mask
    loss = BCEValueLoss()(logits, None, R, action_mask=mask)
    p = torch.sigmoid(logits.detach())
    hand = -(R * p.log() + (1 - R) * (1 - p).log())[mask].mean()
    torch.testing.assert_close(loss, hand)
    loss.backward()  # d/dlogit = (p - R) / n on real tokens
    torch.testing.assert_close(logits.grad, (p - R) * mask / mask.sum())
    # OpenRLHF's step normalisers: masked sum / global tokens x dp_size
    torch.testing.assert_close(BCEValueLoss()(logits.detach(), None, R, action_mask=mask, dp_size=2,
                                              batch_num_tokens=20.0),
                               hand * mask.sum() / 20.0 * 2)
    assert not torch.allclose(loss.detach(), ValueLoss(0.5)(p, p, R, action_mask=mask))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        BCEValueLoss()(logits.detach(), None, R - 0.5, action_mask=mask)


# --------------------------------------------------------------------------- replay and warm-up


def test_fifo_replay_reuse_limit_and_bound(orl):
    from sparserl.engines.openrlhf.critic import FifoReplay
    rep = FifoReplay(reuse=2, capacity=10, seed=0)
    uses: dict = {}
    for step in range(6):
        rep.push([(step, i) for i in range(4)])
        for it in rep.draw(3):
            uses[it] = uses.get(it, 0) + 1
        assert all(e.uses < 2 for e in rep.entries) and len(rep) <= 10
    assert max(uses.values()) == 2 and set(uses.values()) <= {1, 2}
    rep = FifoReplay(reuse=2, capacity=6)
    rep.push(list(range(10)))
    assert [e.item for e in rep.entries] == [4, 5, 6, 7, 8, 9] and rep.evicted_unused == 4
    batch = rep.draw(6)
    assert sorted(batch) == [4, 5, 6, 7, 8, 9]  # without replacement
    assert sorted(rep.draw(6)) == [4, 5, 6, 7, 8, 9] and len(rep) == 0  # second use: evicted
    with pytest.raises(ValueError, match="replay_reuse"):
        FifoReplay(reuse=0)


def test_warmup_schedule(orl):
    from sparserl.engines.openrlhf.critic_warmup import freezing_steps, updates_at, warmup_schedule, warmup_steps
    from sparserl.methods.spec import CriticSpec
    c = CriticSpec()  # the paper: 20 updates, N = 2
    assert warmup_schedule(c) == [2] * 10 and warmup_steps(c) == 10 and freezing_steps(c) == 9
    assert [updates_at(c, k) for k in (0, 9, 10, 50)] == [2, 2, 1, 1]
    assert warmup_schedule(CriticSpec(warmup_updates=5, replay_reuse=2)) == [2, 2, 1]
    assert warmup_schedule(CriticSpec(warmup_updates=0)) == [] and freezing_steps(CriticSpec(warmup_updates=0)) == -1


class FakeStrategy:
    """DeepSpeed strategy stand-in: one rank, `gas` micro-batches per optimiser step."""

    ring_attn_group = None

    def __init__(self, args, gas):
        self.args, self.accumulated_gradient, self._micro = args, gas, 0

    def all_reduce(self, data, op="mean"):
        return data

    def backward(self, loss, model, optim):
        loss.backward()

    def optimizer_step(self, optim, model, scheduler, name="model"):
        self._micro += 1
        if self._micro % self.accumulated_gradient == 0:
            optim.step()
            optim.zero_grad()
            scheduler.step()

    def get_grad_norm(self, model):
        return 0.0

    def is_rank_0(self):
        return True


def _critic_trainer(orl, args, model, monkeypatch, micro=2, gas=2):
    from sparserl.engines.openrlhf import critic as C
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)  # NaiveReplayBuffer names a device
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _s: 1.0)
    t = C.SparseRLCriticTrainer(FakeStrategy(args, gas), critic=model, critic_optim=opt, critic_scheduler=sched,
                                micro_train_batch_size=micro, value_clip=0.5)
    return t


def test_worker_hook_installs_the_critic_trainer(orl, monkeypatch):
    """CriticModelActor looks `CriticPPOTrainer` up in ppo_critic: the hook puts ours there."""
    from sparserl.engines.openrlhf import critic as C
    from sparserl.engines.openrlhf.patches import install_patches
    openrlhf_stubs.restore_patches_after(monkeypatch)
    install_patches()
    assert orl.ppo_critic.CriticPPOTrainer is C.SparseRLCriticTrainer
    assert orl.ppo_actor.ActorPPOTrainer is C.SparseRLActorTrainer
    for cls, flag in [(C.SparseRLCriticTrainer, "_sparserl_critic"), (C.SparseRLActorTrainer, "_sparserl_actor")]:
        assert cls.__bases__[0].__name__ in ("CriticPPOTrainer", "ActorPPOTrainer")
        assert not getattr(cls.__bases__[0], flag, False)  # OpenRLHF's own class, once


def test_plain_openrlhf_critic_is_untouched(orl, monkeypatch):
    """OpenRLHF's own gae (no critic spec): its clipped-MSE ValueLoss and replay, as they are."""
    from openrlhf.models.loss import ValueLoss
    a = _args({"estimator": "grpo"}, estimator="gae")
    a.sparserl.spec = None
    t = _critic_trainer(orl, a, tiny_critic(orl), monkeypatch)
    assert type(t.critic_loss_fn) is ValueLoss and t.method is None


def test_warmup_and_replay_through_openrlhf_ppo_train(orl, no_ray, monkeypatch):
    """OpenRLHF's PPOTrainer.ppo_train with --critic.freezing_steps from the spec: the actor first
    trains after exactly `warmup_updates` value updates; every trajectory is trained on at most
    N = 2 times, in the critic's privileged layout; a step's values come from the critic before
    that step's trajectories reached its replay (evaluate before train)."""
    from sparserl.engines.openrlhf import critic as C
    from sparserl.engines.openrlhf.critic_warmup import freezing_steps
    spec = {"estimator": "gae", "critic": {"privileged": "answer", "warmup_updates": 5, "replay_reuse": 2}}
    args = _args(spec)
    args.ds.enable_sleep = True  # the cluster default: critic fit, then actor fit
    args.critic.freezing_steps = freezing_steps(MethodSpec.from_dict({**json.loads(args.sparserl.spec),
                                                                        "name": "m"}).critic)
    assert args.critic.freezing_steps == 2
    model = tiny_critic(orl)
    trainer = _critic_trainer(orl, args, model, monkeypatch, micro=2, gas=2)  # value batch = 4
    assert isinstance(trainer.critic_loss_fn, C.BCEValueLoss) and trainer.value_batch == 4
    uses: dict = {}
    keep = []  # drawn items stay alive, so id() names one trajectory for the whole test
    draw = trainer.fifo.draw

    def counting_draw(k):
        out = draw(k)
        keep.extend(out)
        for it in out:
            uses[id(it)] = uses.get(id(it), 0) + 1
            assert int(it.sequences.max()) >= Z_BASE  # the critic trains on its privileged rows
        return out
    monkeypatch.setattr(trainer.fifo, "draw", counting_draw)

    def critic_fit():  # CriticModelActor.fit
        st = trainer.ppo_train()
        trainer.replay_buffer.clear()
        return st
    actor_fit_steps, actor_saw, dropped, step_now = [], [], [], [0]
    actor = C.SparseRLActorTrainer.__new__(C.SparseRLActorTrainer)  # OpenRLHF's actor trainer, ours on top
    actor.replay_buffer = orl.ppo_critic.NaiveReplayBuffer(2, 0, True)
    monkeypatch.setattr(C.SparseRLActorTrainer.__bases__[0], "ppo_train",
                        lambda self, kl_ctl: actor_saw.append([int(it.info["sid"]) for it in self.replay_buffer.items])
                        or {"policy_loss": 0.0})

    def actor_fit(kl_ctl=0.0):  # PolicyModelActor.fit
        actor_fit_steps.append(step_now[0])
        st = actor.ppo_train(kl_ctl)
        dropped.append(actor.dropped_warmup)
        actor.replay_buffer.clear()
        return st
    ppo = orl.ppo_trainer.BasePPOTrainer.__new__(orl.ppo_trainer.BasePPOTrainer)
    ppo.args, ppo.kl_ctl = args, SimpleNamespace(value=0.0)
    ppo.critic_model_group = Group(lambda **_: critic_fit())
    ppo.actor_model_group = Group(lambda **kw: actor_fit(**kw))
    maker = _maker(orl, args, model)
    forward = maker.critic_model_group.fn
    seen_at_eval = []

    def evaluating(**kw):  # the batch being evaluated is not in the critic's replay yet
        seen_at_eval.append(len(trainer.replay_buffer.items) + len(trainer.fifo))
        return forward(**kw)
    maker.critic_model_group.fn = evaluating
    per_step, total = [], []
    for step in range(6):
        step_now[0] = step
        samples = _samples(orl, _rollouts(seed=10 + step, n_prompts=2, k=4))
        fifo_before = len(trainer.fifo)
        exps = maker.compute_advantages_and_returns(maker.make_experience(copy.deepcopy(samples)))
        assert seen_at_eval[-1] == fifo_before and not trainer.replay_buffer.items
        used = np.concatenate(_rows(exps, "values"))
        assert all(C.is_warmup(e) == (step < 3) for e in exps)  # tagged: the first 3 steps are critic-only
        for e in exps:  # OpenRLHF's train_step: append to the actor and the critic, then ppo_train
            e.info["sid"] = e.info["sid"] + 100 * step
            actor.replay_buffer.append(copy.deepcopy(e))
            trainer.replay_buffer.append(copy.deepcopy(e))
        status = ppo.ppo_train(step)
        per_step.append(int(status["critic_updates"]))
        total.append(trainer.value_updates)
        after = np.concatenate(_rows(maker.make_experience(copy.deepcopy(samples)), "values"))
        assert not np.allclose(used, after)  # this step's update came after its values were read
    assert per_step == [2, 2, 1, 1, 1, 1]
    assert actor_fit_steps == [3, 4, 5] and total[2] == 5  # the first policy update after 5 value updates
    # OpenRLHF keeps the frozen steps' rollouts in the actor's buffer; the policy trains on its step's only
    assert actor_saw == [[100 * s + j for j in range(8)] for s in (3, 4, 5)] and dropped == [3 * 8, 0, 0]
    assert max(uses.values()) <= 2 and trainer.value_updates == 8


# --------------------------------------------------------------------------- flags


def _cfg(tmp_path):
    return {
        "scale": "paper", "seed": 0, "results_dir": str(tmp_path / "results"),
        "tasks": {"source": "hub", "chat_template": True, "prompt_template": "{problem}\n\n{instruction}"},
        "policies": {"qwen3_4b": {"source": "hub", "hf_name": "Qwen/Qwen3-4B-Instruct-2507"}},
        "rollout": {"backend": "vllm", "max_new_tokens": 8192, "vllm": {"max_model_len": 10240}},
        "rl": {"policy": "qwen3_4b", "methods": ["lc_vf"], "seeds": [0], "steps": 100, "checkpoint_every": 10,
               "eval_fractions": [0.25, 0.5], "rollouts_per_step": 512, "lr": 1e-6, "temperature": 1.0},
    }


_flags = openrlhf_stubs.argv_flags


@pytest.mark.parametrize("name,estimator,privileged", [("lc_vf", "gae", "none"), ("lc_pvf_answer", "gae", "answer"),
                                                       ("lc_tether", "tether", "none")])
def test_critic_method_flags(orl, tmp_path, name, estimator, privileged):
    from sparserl.engines.openrlhf.launcher import openrlhf_argv
    from sparserl.engines.openrlhf.parser import parse_args
    from sparserl.methods.spec import load_method
    m = load_method(name)
    argv = openrlhf_argv(_cfg(tmp_path), m, 0, openrlhf_stubs.openrlhf_run(tmp_path / "run" / "final"), policy_path="/models/q")
    f = _flags(argv)
    assert f["algo.advantage.estimator"] == estimator
    assert f["critic.model_name_or_path"] == "/models/q"  # a copy of the policy, fresh value head
    assert float(f["critic.adam.lr"]) == m.critic.lr
    assert f["critic.freezing_steps"] == "9"  # 10 critic-only steps x 2 updates = 20
    assert f["critic.num_gpus_per_node"] == f["actor.num_gpus_per_node"]
    assert f["data.max_samples"] == str((100 + 10) * 64)  # the policy still gets 100 steps
    # policy step s is global step s + 10: the evaluated 25 and 50 saved there, besides a resume
    # point every few hours of work (not the gcd with 10); a retry resumes, critic state included
    from sparserl.engines.sizing import rl_resume_save_steps
    assert f["sparserl.hf_steps"] == ["35", "60"] and f["ckpt.load_enable"] is True
    assert f["ckpt.save_steps"] == str(rl_resume_save_steps(_cfg(tmp_path), m, "/models/q"))
    assert json.loads(f["sparserl.spec"])["critic"]["privileged"] == privileged
    args = parse_args(argv)  # OpenRLHF's own checks; the critic survives them for tether too
    assert args.critic.model_name_or_path == "/models/q" and args.critic.freezing_steps == 9
    assert args.critic.adam.lr == m.critic.lr and args.algo.advantage.estimator == estimator
    assert args.critic.lr_scheduler == "constant_with_warmup"


def test_a_configured_save_cadence_is_a_critic_runs_resume_cadence(orl, tmp_path):
    """rl.openrlhf's ckpt.save_steps replaces the sized cadence (no model shape needed: a local
    policy not trained yet has none); the evaluated steps are still saved, with HF copies."""
    from sparserl.engines.openrlhf.launcher import openrlhf_argv
    from sparserl.methods.spec import load_method
    cfg = _cfg(tmp_path)
    cfg["policies"] = {"qwen3_4b": {"source": "pretrain"}}
    cfg["rl"]["openrlhf"] = {"ckpt.save_steps": 7}
    f = _flags(openrlhf_argv(cfg, load_method("lc_vf"), 0, openrlhf_stubs.openrlhf_run(tmp_path / "final"), policy_path="/models/q"))
    assert f["ckpt.save_steps"] == "7" and f["sparserl.hf_steps"] == ["35", "60"]


def test_methods_without_a_critic_get_no_critic_flags(orl, tmp_path):
    from sparserl.engines.openrlhf.launcher import openrlhf_argv
    from sparserl.engines.openrlhf.parser import parse_args
    from sparserl.methods.spec import load_method
    argv = openrlhf_argv(_cfg(tmp_path), load_method("lc_mean"), 0, openrlhf_stubs.openrlhf_run(tmp_path / "final"), policy_path="/models/q")
    assert not [a for a in argv if a.startswith("--critic.")]
    assert _flags(argv)["data.max_samples"] == str(100 * 64)
    assert parse_args(argv).critic.model_name_or_path is None


def test_prompt_dataset_adds_warmup_prompts_and_the_privileged_context(orl, tmp_path):
    """The warm-up steps' prompts come on top of the policy's; a pool column "privileged"
    (an env's critic context) reaches the labels of a `privileged: answer` method only."""
    import pandas as pd

    from sparserl.core.paths import Paths
    from sparserl.engines.openrlhf.dataset import build_prompt_dataset
    from sparserl.methods.spec import load_method
    cfg = _cfg(tmp_path)
    cfg["rl"].update(steps=3, rollouts_per_step=16)
    P = Paths(cfg)
    P.train_pool().parent.mkdir(parents=True)
    pd.DataFrame({"id": [f"t/{i}" for i in range(4)], "problem": ["1+1"] * 4, "answer": ["2"] * 4,
                  "privileged": [f"grid {i}" for i in range(4)]}).to_parquet(P.train_pool())
    for name, privileged in [("lc_pvf_answer", True), ("lc_vf", False), ("lc_mean", False)]:
        m = load_method(name)
        rows = [json.loads(x) for x in build_prompt_dataset(cfg, m, 0, tmp_path / f"{name}.jsonl",
                                                                pool=P.train_pool()).read_text().splitlines()]
        warm = 10 if m.critic is not None else 0
        assert len(rows) == (3 + warm) * (16 // m.group_size)
        labs = [json.loads(r["label"]) for r in rows]
        assert all(("privileged" in d) == privileged for d in labs)
        if privileged:
            assert all(d["privileged"] == f"grid {d['uid'].split('/')[1]}" for d in labs)


def test_answer_context_prefers_the_privileged_label_field(orl):
    from sparserl.engines.openrlhf.critic import privileged_contexts
    from sparserl.engines.openrlhf.labels import encode_label
    ro = _rollouts(n_prompts=1, k=2)
    s = _samples(orl, ro, micro=2)
    tok = CharTokenizer()
    s[0].labels = [encode_label("u0", "3", privileged="solved grid"), encode_label("u0", "3")]
    assert privileged_contexts("answer", s, tok) == [[tok.encode(answer_context("solved grid")),
                                                      tok.encode(answer_context("3"))]]
    s[0].labels = [encode_label("u0", None), encode_label("u0", "3")]
    with pytest.raises(ValueError, match="'answer'"):
        privileged_contexts("answer", s, tok)


# --------------------------------------------------------------------------- resume


class Dispatch:
    """A RayActorGroup stand-in answering `async_run_method` by method name (None if unknown)."""

    def __init__(self, **methods):
        self.methods, self.calls = methods, []

    def async_run_method(self, method_name, **kw):
        self.calls.append((method_name, kw))
        fn = self.methods.get(method_name)
        return [fn(**kw) if fn else None]


def _ckpt_strategy(args, gas):
    """FakeStrategy with DeepSpeed's checkpoint layout (<dir>/<tag>/mp_rank_00_model_states.pt: the
    model, optimiser and scheduler; then <dir>/latest) and its `save_ckpt` wrapped as the worker
    hook wraps DeepSpeed's (`patches.METHOD_PATCHES`)."""
    from sparserl.engines.openrlhf import checkpoints

    class CkptStrategy(FakeStrategy):
        optim = sched = None

        def _ds_save_ckpt(self, model, save_dir, tag=None, max_num=3, max_mem=1000, client_state=None,
                          save_latest=True, metric_value=None, metric_key=None):
            (Path(save_dir) / tag).mkdir(parents=True, exist_ok=True)
            torch.save({"model": model.state_dict(), "optim": self.optim.state_dict(),
                        "sched": self.sched.state_dict()}, Path(save_dir) / tag / "mp_rank_00_model_states.pt")
            (Path(save_dir) / "latest").write_text(tag)

        save_ckpt = checkpoints.save_ckpt(_ds_save_ckpt)

        def load_ckpt(self, model, load_dir):
            tag = (Path(load_dir) / "latest").read_text()
            st = torch.load(Path(load_dir) / tag / "mp_rank_00_model_states.pt", weights_only=False)
            model.load_state_dict(st["model"])
            self.optim.load_state_dict(st["optim"])
            self.sched.load_state_dict(st["sched"])

    return CkptStrategy(args, gas)


def _critique_run(orl, monkeypatch, ckpt_path, steps, *, resume=False, save_steps=2):
    """Global steps `steps` of a Le Critique critic (warm-up 5 updates, N = 2: 3 critic-only steps)
    through OpenRLHF's PPO loop: its ppo_train, and its save_logs_and_checkpoints as the worker hook
    patches it, saving through OpenRLHF's own `CriticModelActor.save_checkpoint`. `resume`: a retry,
    which loads the critic's DeepSpeed checkpoint before building the trainer, as `CriticModelActor`
    does. Returns (trainer, {global step: (critic status, critic trainer state)})."""
    from sparserl.engines.openrlhf import critic as C
    from sparserl.engines.openrlhf.patches import install_patches
    spec = {"estimator": "gae", "critic": {"privileged": "answer", "warmup_updates": 5, "replay_reuse": 2}}
    args = _args(spec)
    args.ds.enable_sleep = True
    args.critic.freezing_steps = 2
    args.ckpt = SimpleNamespace(path=str(ckpt_path), load_enable=True, save_steps=save_steps, max_num=2, max_mem=1000)
    args.sparserl.hf_steps = []
    args.logger = SimpleNamespace(logging_steps=1)
    model = tiny_critic(orl)
    strategy = _ckpt_strategy(args, gas=2)
    strategy.optim = torch.optim.SGD(model.parameters(), lr=0.5)
    strategy.sched = torch.optim.lr_scheduler.LambdaLR(strategy.optim, lambda _s: 1.0)
    if resume:  # CriticModelActor.init_model_from_pretrained: load, then build the trainer
        strategy.load_ckpt(model, str(Path(ckpt_path) / "_critic"))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    trainer = C.SparseRLCriticTrainer(strategy, critic=model, critic_optim=strategy.optim,
                                      critic_scheduler=strategy.sched, micro_train_batch_size=2, value_clip=0.5)
    actor_cls = orl.ppo_critic.CriticModelActor.__ray_actor_class__  # OpenRLHF's class under ray.remote
    critic_actor = SimpleNamespace(strategy=strategy, critic=model, disable_ds_ckpt=False)

    def critic_fit():
        st = trainer.ppo_train()
        trainer.replay_buffer.clear()
        return st
    base = orl.ppo_trainer.PPOTrainer.__ray_metadata__.modified_class  # the class a Ray worker runs
    openrlhf_stubs.restore_patches_after(monkeypatch)
    install_patches()  # the worker hook's method patches
    ppo = base.__new__(base)
    ppo.args, ppo.kl_ctl = args, SimpleNamespace(value=0.0)
    ppo.wandb_logger = ppo.tensorboard_logger = None
    ppo.best_eval_metric_key, ppo.best_eval_metric_value, ppo._latest_eval_metric_value = None, float("-inf"), None
    ppo.critic_model_group = Dispatch(fit=critic_fit, save_checkpoint=lambda **kw: actor_cls.save_checkpoint(
        critic_actor, **kw))
    ppo.actor_model_group = Dispatch(fit=lambda **kw: {"policy_loss": 0.0})
    maker = _maker(orl, args, model)
    out = {}
    for g in steps:  # g: the global step this train_step ends (PPOTrainer.fit's counter after it)
        samples = _samples(orl, _rollouts(seed=10 + g, n_prompts=2, k=4))
        exps = maker.compute_advantages_and_returns(maker.make_experience(samples))
        for e in exps:
            trainer.replay_buffer.append(copy.deepcopy(e))
        status = ppo.ppo_train(g - 1)
        ppo.save_logs_and_checkpoints(g, status, {"global_step": g})
        out[g] = (status, copy.deepcopy(trainer.sparserl_state()))
    return trainer, out


def _same_state(a: dict, b: dict) -> None:
    assert (a["fits"], a["value_updates"]) == (b["fits"], b["value_updates"])
    fa, fb = a["fifo"], b["fifo"]
    assert fa["rng"] == fb["rng"] and fa["evicted_unused"] == fb["evicted_unused"]
    assert [e["uses"] for e in fa["entries"]] == [e["uses"] for e in fb["entries"]]
    for ea, eb in zip(fa["entries"], fb["entries"], strict=True):
        for k in ("sequences", "attention_mask", "action_mask", "values", "returns"):
            torch.testing.assert_close(ea["item"][k], eb["item"][k], rtol=0, atol=0)


@pytest.mark.parametrize("saved,killed", [(2, 3), (4, 5)])  # in the warm-up (3 critic-only steps), after it
def test_critic_resumes_its_warmup_and_replay(orl, no_ray, monkeypatch, tmp_path, saved, killed):
    """Killed after global step `killed` with its last save at `saved` and retried: the retry's
    critic has the uninterrupted run's fit count, value updates and FIFO (items, uses, RNG) at
    `saved`, and its next steps log the same critic metrics. A retry that starts the critic's
    trainer over (fits 0, empty FIFO, as before its state was saved) does not."""
    from sparserl.engines.openrlhf.checkpoints import critic_state_file
    _, whole = _critique_run(orl, monkeypatch, tmp_path / "whole", range(1, 7))
    _critique_run(orl, monkeypatch, tmp_path / "retried", range(1, killed + 1))
    critic_dir = tmp_path / "retried" / "_critic"
    assert (critic_dir / "latest").read_text() == f"global_step{saved}"
    assert sorted(p.name for p in critic_dir.glob("global_step*")) == [f"global_step{s}" for s in (2, 4) if s <= killed]
    assert critic_state_file(critic_dir / f"global_step{saved}", 0).is_file()

    retry, after = _critique_run(orl, monkeypatch, tmp_path / "retried", range(saved + 1, 7), resume=True)
    # the restored state is the one step `saved` left (before the retry's first step)...
    saved_state = torch.load(critic_state_file(critic_dir / f"global_step{saved}", 0), weights_only=False)
    assert saved_state["step"] == saved == saved_state["state"]["fits"]
    _same_state(saved_state["state"], whole[saved][1])
    # ... and every later step matches the uninterrupted run: state and logged critic metrics
    for g in range(saved + 1, 7):
        _same_state(after[g][1], whole[g][1])
        assert after[g][0].keys() == whole[g][0].keys()
        for k in after[g][0]:
            assert after[g][0][k] == pytest.approx(whole[g][0][k], rel=1e-6, abs=1e-9), (g, k)
    assert [whole[g][0]["critic_warmup"] for g in range(1, 7)] == [1, 1, 1, 0, 0, 0]

    # control: the critic's weights restored, its trainer started over (what main's code did)
    (tmp_path / "fresh" / "_critic").mkdir(parents=True)
    shutil.copytree(critic_dir / f"global_step{saved}", tmp_path / "fresh" / "_critic" / f"global_step{saved}")
    (tmp_path / "fresh" / "_critic" / "latest").write_text(f"global_step{saved}")
    critic_state_file(tmp_path / "fresh" / "_critic" / f"global_step{saved}", 0).unlink()
    with pytest.raises(RuntimeError, match="has no saved trainer state"):
        _critique_run(orl, monkeypatch, tmp_path / "fresh", range(saved + 1, 7), resume=True)
    monkeypatch.setattr("sparserl.engines.openrlhf.checkpoints.load_critic_state", lambda *a: None)
    _, over = _critique_run(orl, monkeypatch, tmp_path / "fresh", [saved + 1], resume=True)
    assert over[saved + 1][1]["fits"] == 1 != whole[saved + 1][1]["fits"]
    assert over[saved + 1][0] != pytest.approx(whole[saved + 1][0], rel=1e-6)
