"""sparserl.engines.openrlhf against OpenRLHF 0.11.2's REAL classes, on CPU.

Needs: pip install -e ".[test]" && pip install --no-deps openrlhf==0.11.2
(vllm and flash_attn are CUDA-only: tests/openrlhf_stubs.py puts import-only placeholders in
sys.modules for the duration of this module).
"""
from __future__ import annotations

import copy
import importlib
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from helpers import openrlhf_stubs
from helpers.v0_toys import toy_v0

openrlhf_stubs.skip_without_openrlhf()
pytestmark = pytest.mark.usefixtures("orl")  # tests/engines/openrlhf/conftest.py

import torch  # noqa: E402

from sparserl.estimators import EstimatorContext, get_estimator, gpg_valid_scale  # noqa: E402
from sparserl.methods.spec import MethodSpec  # noqa: E402


def estimator_options(spec: dict) -> dict:
    return MethodSpec.from_dict({"group_size": 1, "loss": {"type": "ppo_clip"}, **spec}).estimator_options()

REPO = Path(__file__).resolve().parents[3]


# --------------------------------------------------------------------------- helpers

def _args(estimator, n=4, spec=None, clip=(-10, 10), **reward):
    return SimpleNamespace(
        rollout=SimpleNamespace(n_samples_per_prompt=n, max_new_tokens=16, batch_size=4, micro_batch_size=2),
        reward=SimpleNamespace(clip_range=clip, **reward),
        data=SimpleNamespace(max_len=64),
        algo=SimpleNamespace(advantage=SimpleNamespace(estimator=estimator, gamma=1.0, lambd=1.0,
                                                       no_std_norm=False, is_correction_level="off")),
        sparserl=SimpleNamespace(spec=json.dumps(spec) if spec is not None else None),
        vllm=SimpleNamespace(enable_sleep=False),
    )


def _maker(cls, estimator, n=4, spec=None, kl_coef=0.0, **kw):
    """The way OpenRLHF's own tests build it: __new__ plus an args namespace."""
    m = cls.__new__(cls)
    m.advantage_estimator = estimator
    m.kl_ctl = SimpleNamespace(value=kl_coef)
    m.strategy = SimpleNamespace(args=_args(estimator, n, spec, **kw))
    return m


def _batch(orl, rewards, uids, *, side=None, order=None, micro=3, T=5, seed=0, kl=0.0):
    """Experiences as OpenRLHF's make_experience_batch hands them on: micro-batches in rollout
    order, each with index = rollout positions, JSON labels (uid + side data), kl per token."""
    from sparserl.engines.openrlhf.labels import encode_label
    rng = np.random.default_rng(seed)
    M = len(rewards)
    order = np.arange(M) if order is None else np.asarray(order)
    lengths = rng.integers(1, T + 1, size=M)
    exps = []
    for s in range(0, M, micro):
        sel = order[s:s + micro]
        mask = torch.zeros(len(sel), T, dtype=torch.bool)
        for j, i in enumerate(sel):
            mask[j, :lengths[i]] = True
        labels = [encode_label(uids[i], "1", **{k: v[uids[i]] for k, v in (side or {}).items()}) for i in sel]
        exps.append(orl.exp.Experience(
            index=list(range(s, s + len(sel))),
            rewards=torch.tensor([float(rewards[i]) for i in sel]),
            action_mask=mask,
            kl=torch.full((len(sel), T), float(kl)) * mask,
            values=torch.zeros(len(sel), T),
            prompts=[f"prompt {uids[i]}" for i in sel],
            labels=labels,
            response_length=torch.tensor([float(lengths[i]) for i in sel]),
            info={"reward": torch.tensor([float(rewards[i]) for i in sel]), "sid": torch.tensor(sel.tolist())},
        ))
    return exps


def _per_rollout(exps):
    """(rollout id, advantage at the first action token, returns) in the original rollout ids."""
    ids = torch.cat([e.info["sid"] for e in exps]).numpy()
    adv = torch.cat([e.advantages[:, 0] for e in exps]).numpy()
    return ids, adv


def _by_id(exps):
    ids, adv = _per_rollout(exps)
    out = np.empty(len(ids))
    out[ids] = adv
    return out


# --------------------------------------------------------------------------- advantages

REWARDS_EQ = [1, 0, 0, 1, 0, 0, 0, 0, 1, 1, 1, 0]
UIDS_EQ = ["a"] * 4 + ["b"] * 4 + ["c"] * 4


@pytest.mark.parametrize("ours,theirs", [("grpo", "group_norm"), ("rloo", "rloo"), ("dr_grpo", "dr_grpo")])
@pytest.mark.parametrize("kl", [0.0, 0.3])
def test_group_estimators_match_openrlhf_builtins(orl, ours, theirs, kl):
    from sparserl.engines.openrlhf.experience import SparseRLExperienceMaker
    base_exps = _batch(orl, REWARDS_EQ, UIDS_EQ, kl=kl)
    our_exps = copy.deepcopy(base_exps)
    base = _maker(orl.em.RemoteExperienceMaker, theirs, kl_coef=0.1).compute_advantages_and_returns(base_exps)
    mine = _maker(SparseRLExperienceMaker, ours, kl_coef=0.1).compute_advantages_and_returns(our_exps)
    for b, m in zip(base, mine):
        # group_norm divides by std + 1e-9, the registry by std + 1e-6: |diff| < 3e-6 here
        torch.testing.assert_close(m.advantages, b.advantages, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(m.returns, b.returns, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(m.info["return"], b.info["return"], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(m.info["group_reward_std"], b.info["group_reward_std"])
        assert m.kl is None


def test_openrlhf_names_fall_through_to_super(orl):
    from sparserl.engines.openrlhf.experience import SparseRLExperienceMaker
    for name in ["group_norm", "reinforce", "reinforce_baseline", "flash_reinforce"]:
        a = _maker(orl.em.RemoteExperienceMaker, name).compute_advantages_and_returns(_batch(orl, REWARDS_EQ, UIDS_EQ))
        b = _maker(SparseRLExperienceMaker, name).compute_advantages_and_returns(_batch(orl, REWARDS_EQ, UIDS_EQ))
        for x, y in zip(a, b):
            torch.testing.assert_close(x.advantages, y.advantages, atol=0, rtol=0)


def test_control_switch_negates_every_path(orl, monkeypatch):
    """The end-to-end control run's switch (experience.NEGATE_ENV) flips the advantages of our
    estimators and of OpenRLHF's alike, and is off unless set to 1."""
    from sparserl.engines.openrlhf.experience import NEGATE_ENV, SparseRLExperienceMaker
    assert NEGATE_ENV == "SPARSERL_CONTROL_NEGATE_ADVANTAGES"  # tests/test_openrlhf_cpu.py sets it by name
    for name in ["grpo", "reinforce_baseline"]:
        monkeypatch.delenv(NEGATE_ENV, raising=False)
        plain = _maker(SparseRLExperienceMaker, name).compute_advantages_and_returns(_batch(orl, REWARDS_EQ, UIDS_EQ))
        monkeypatch.setenv(NEGATE_ENV, "1")
        flipped = _maker(SparseRLExperienceMaker, name).compute_advantages_and_returns(_batch(orl, REWARDS_EQ, UIDS_EQ))
        assert any(bool(x.advantages.abs().sum() > 0) for x in plain)
        for x, y in zip(plain, flipped):
            torch.testing.assert_close(y.advantages, -x.advantages, atol=0, rtol=0)


def _registry(name, rewards, uids, ctx, **kw):
    return get_estimator(name)(np.asarray(rewards, float), np.asarray(uids), ctx=ctx, **kw)


def test_uid_grouping_not_position(orl):
    """Rollouts interleaved across prompts (as OSLA rounds append them): OpenRLHF's positional
    reshape mixes prompts, ours groups by uid and equals the registry."""
    from sparserl.engines.openrlhf.experience import SparseRLExperienceMaker
    order = np.random.default_rng(3).permutation(len(REWARDS_EQ))
    want = _registry("grpo", REWARDS_EQ, UIDS_EQ, None)
    mine = _by_id(_maker(SparseRLExperienceMaker, "grpo").compute_advantages_and_returns(
        _batch(orl, REWARDS_EQ, UIDS_EQ, order=order)))
    np.testing.assert_allclose(mine, want, atol=1e-6)
    theirs = _by_id(_maker(orl.em.RemoteExperienceMaker, "group_norm").compute_advantages_and_returns(
        _batch(orl, REWARDS_EQ, UIDS_EQ, order=order)))
    assert not np.allclose(theirs, want, atol=1e-3)  # position-based groups are the wrong groups


# uneven groups (OSLA: k = 4, 6, 8, 5, 1), in a shuffled order
K = [4, 6, 8, 5, 1]
UIDS_OSLA = [f"p{i}" for i, k in enumerate(K) for _ in range(k)]
REWARDS_OSLA = list(np.random.default_rng(7).integers(0, 2, size=sum(K)))
PRIOR = {f"p{i}": p for i, p in enumerate([0.2, 0.5, 0.9, 0.35, 0.6])}
PHAT = {f"p{i}": p for i, p in enumerate([0.1, 0.45, 0.8, 0.3, 0.0])}


@pytest.mark.parametrize("name,spec,ctx", [
    ("grpo", {}, EstimatorContext()),
    ("rloo", {}, EstimatorContext()),
    ("gpg", {"loss": {"type": "gpg"}}, EstimatorContext()),
    ("reinforce_pp", {}, EstimatorContext()),
    ("v05_fusion", {"prior": {"kind": "oracle"}}, EstimatorContext(prior=PRIOR)),
    ("v05_prior_only", {"prior": {"kind": "oracle"}}, EstimatorContext(prior=PRIOR)),
    ("v05_empirical_only", {"prior": {"kind": "oracle"}}, EstimatorContext(prior=PRIOR)),
    ("v05_fusion", {"prior": {"kind": "constant", "p": 0.5}},
     EstimatorContext(prior={u: 0.5 for u in PRIOR})),
    ("basis_unb", {"basis": {"kind": "unb", "calibrate_on": "current"}}, EstimatorContext(phat=PHAT)),
    ("basis_vop", {"basis": {"kind": "vop", "beta": 2.0}}, EstimatorContext(phat=PHAT, beta=2.0)),
    ("basis_rvg", {"basis": {"kind": "rvg", "beta": "inf"}}, EstimatorContext(phat=PHAT, beta=np.inf)),
])
def test_registry_estimators_uneven_groups_shuffled(orl, name, spec, ctx):
    from sparserl.engines.openrlhf.experience import SparseRLExperienceMaker
    order = np.random.default_rng(11).permutation(len(REWARDS_OSLA))
    exps = _batch(orl, REWARDS_OSLA, UIDS_OSLA, side={"prior": PRIOR, "phat": PHAT}, order=order, micro=4)
    got = _by_id(_maker(SparseRLExperienceMaker, name, spec=spec).compute_advantages_and_returns(exps))
    want = _registry(name, REWARDS_OSLA, UIDS_OSLA, ctx, **estimator_options({**spec, "estimator": name}))
    np.testing.assert_allclose(got, want, atol=1e-5)
    # same answer in the unshuffled order
    exps2 = _batch(orl, REWARDS_OSLA, UIDS_OSLA, side={"prior": PRIOR, "phat": PHAT}, micro=5)
    got2 = _by_id(_maker(SparseRLExperienceMaker, name, spec=spec).compute_advantages_and_returns(exps2))
    np.testing.assert_allclose(got2, got, atol=1e-6)


def test_basis_inactive_option_reaches_the_registry(orl):
    """The method's `basis.inactive` travels to the estimator: a prompt whose reference rate is 1
    gets baseline 1 with "vhat" and 0 with the default "zero", as in the CPU trainer."""
    from sparserl.engines.openrlhf.experience import SparseRLExperienceMaker
    phat = {**PHAT, "p2": 1.0}
    got = {}
    for inactive in ("zero", "vhat"):
        spec = {"basis": {"kind": "unb", "inactive": inactive}}
        exps = _batch(orl, REWARDS_OSLA, UIDS_OSLA, side={"phat": phat}, micro=4)
        got[inactive] = _by_id(_maker(SparseRLExperienceMaker, "basis_unb", spec=spec)
                               .compute_advantages_and_returns(exps))
        want = _registry("basis_unb", REWARDS_OSLA, UIDS_OSLA, EstimatorContext(phat=phat),
                         **estimator_options({**spec, "estimator": "basis_unb"}))
        np.testing.assert_allclose(got[inactive], want, atol=1e-5)
    on_p2 = np.asarray(UIDS_OSLA) == "p2"
    np.testing.assert_allclose(got["zero"][on_p2] - got["vhat"][on_p2], 1.0, atol=1e-5)


def test_advantage_is_constant_over_the_response_and_zero_after(orl):
    from sparserl.engines.openrlhf.experience import SparseRLExperienceMaker
    exps = _maker(SparseRLExperienceMaker, "v05_fusion", spec={"prior": {"kind": "oracle"}}) \
        .compute_advantages_and_returns(_batch(orl, REWARDS_OSLA, UIDS_OSLA, side={"prior": PRIOR}))
    for e in exps:
        m = e.action_mask
        a0 = e.advantages[:, :1].expand_as(e.advantages)
        assert torch.equal(e.advantages * m, a0 * m)
        assert torch.all(e.advantages[~m] == 0)
        assert torch.equal(e.info["group_size"], torch.tensor([float(K[int(u.split('p')[1])])
                                                                for u in [json.loads(l)["uid"] for l in e.labels]]))


def test_basis_previous_calibration_uses_the_preceding_batch(orl):
    from sparserl.engines.openrlhf.experience import SparseRLExperienceMaker
    spec = {"basis": {"kind": "unb", "calibrate_on": "previous"}}
    maker = _maker(SparseRLExperienceMaker, "basis_unb", spec=spec)
    r1, r2 = REWARDS_OSLA, list(1 - np.asarray(REWARDS_OSLA))
    first = _by_id(maker.compute_advantages_and_returns(_batch(orl, r1, UIDS_OSLA, side={"phat": PHAT})))
    np.testing.assert_allclose(first, _registry("basis_unb", r1, UIDS_OSLA,
                                                EstimatorContext(phat=PHAT, calibrate_on="previous")), atol=1e-6)
    second = _by_id(maker.compute_advantages_and_returns(_batch(orl, r2, UIDS_OSLA, side={"phat": PHAT})))
    prev_phat = np.array([PHAT[u] for u in UIDS_OSLA])
    ctx = EstimatorContext(phat=PHAT, calibrate_on="previous", prev_phat=prev_phat,
                           prev_rewards=np.asarray(r1, float))
    np.testing.assert_allclose(second, _registry("basis_unb", r2, UIDS_OSLA, ctx), atol=1e-6)


def test_gpg_loss_with_another_estimator_folds_b_over_bvalid(orl):
    from sparserl.engines.openrlhf.experience import SparseRLExperienceMaker
    spec = {"loss": {"type": "gpg"}}
    got = _by_id(_maker(SparseRLExperienceMaker, "dr_grpo", spec=spec).compute_advantages_and_returns(
        _batch(orl, REWARDS_OSLA, UIDS_OSLA)))
    want = _registry("dr_grpo", REWARDS_OSLA, UIDS_OSLA, None) * gpg_valid_scale(REWARDS_OSLA, UIDS_OSLA)
    assert gpg_valid_scale(REWARDS_OSLA, UIDS_OSLA) > 1
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_overlong_penalty_is_applied_before_the_estimator(orl):
    """DAPO's overlong shaping is OpenRLHF's own apply_length_penalties, then the registry."""
    from sparserl.engines.openrlhf.experience import SparseRLExperienceMaker
    exps = _batch(orl, REWARDS_EQ, UIDS_EQ, T=5)
    lengths = torch.cat([e.response_length for e in exps]).numpy()
    maker = _maker(SparseRLExperienceMaker, "grpo", overlong_buffer_len=8.0, overlong_penalty_factor=1.0)
    maker.strategy.args.rollout.max_new_tokens = 12  # expected length 4: length 5 loses 1/8
    got = _by_id(maker.compute_advantages_and_returns(exps))
    shaped = np.asarray(REWARDS_EQ, float) - np.clip(lengths - 4, 0, None) / 8.0
    np.testing.assert_allclose(got, _registry("grpo", shaped, UIDS_EQ, None), atol=1e-5)


def test_missing_side_data_names_the_label_field(orl):
    from sparserl.engines.openrlhf.experience import SparseRLExperienceMaker
    with pytest.raises(ValueError, match="'prior'"):
        _maker(SparseRLExperienceMaker, "v05_fusion", spec={"prior": {"kind": "oracle"}}) \
            .compute_advantages_and_returns(_batch(orl, REWARDS_EQ, UIDS_EQ))


def test_labels_roundtrip_and_plain_labels(orl):
    from sparserl.engines.openrlhf.labels import decode_label, encode_label, experience_uids
    lab = encode_label("train/x/1", 42, phat=np.float64(0.25), prior=None)
    assert decode_label(lab) == {"uid": "train/x/1", "answer": "42", "phat": 0.25}
    assert decode_label("17") == {"answer": "17"}
    e = orl.exp.Experience(rewards=torch.zeros(2), labels=["17", lab], prompts=["q1", "q2"])
    assert experience_uids([e]) == ["prompt:q1", "train/x/1"]


# --------------------------------------------------------------------------- losses

def _loss_inputs(seed=0, B=4, T=6):
    g = torch.Generator().manual_seed(seed)
    logp = (-torch.rand(B, T, generator=g) * 3).requires_grad_(True)
    old = logp.detach() + 0.1 * torch.randn(B, T, generator=g)
    adv = torch.tensor([1.5, -0.5, 0.0, 2.0])[:, None].expand(B, T).clone()
    mask = torch.zeros(B, T)
    for i, n in enumerate([6, 3, 1, 4]):
        mask[i, :n] = 1
    return logp, old, adv, mask


@pytest.mark.parametrize("token_level", [True, False])
def test_gpg_loss_matches_hand_computation(orl, token_level):
    from sparserl.engines.openrlhf.losses import SparseRLPolicyLoss, gpg_policy_loss
    logp, old, adv, mask = _loss_inputs()
    fn = SparseRLPolicyLoss(policy_loss_type="gpg", token_level_loss=token_level)
    loss, clip_ratio, ppo_kl, vllm_kl, filt = fn(logp, old, adv, action_mask=mask)
    terms = -adv * logp.detach() * mask
    if token_level:
        hand = terms.sum() / mask.sum()
    else:
        hand = (terms.sum(-1) / mask.sum(-1)).mean()
    torch.testing.assert_close(loss, hand)
    assert float(clip_ratio) == 0 and vllm_kl is None and filt is None
    # plain policy gradient: no ratio, no clip; d loss / d logp = -A m / N
    loss.backward()
    denom = mask.sum() if token_level else mask.sum(-1, keepdim=True) * mask.shape[0]
    torch.testing.assert_close(logp.grad, -adv * mask / denom)
    # B/B_valid scale multiplies the loss
    torch.testing.assert_close(gpg_policy_loss(logp.detach(), adv, mask, token_level_loss=token_level, scale=2.5),
                               2.5 * hand)


def test_gpg_differs_from_ppo_only_by_the_ratio(orl):
    """At ratio 1 (on-policy) GPG's gradient equals PPO's; ppo/gspo still go to OpenRLHF's code."""
    from sparserl.engines.openrlhf.losses import SparseRLPolicyLoss
    logp, _old, adv, mask = _loss_inputs()
    old = logp.detach().clone()
    grads = []
    for kind in ["gpg", "ppo"]:
        x = logp.detach().clone().requires_grad_(True)
        SparseRLPolicyLoss(policy_loss_type=kind)(x, old, adv, action_mask=mask)[0].backward()
        grads.append(x.grad)
    torch.testing.assert_close(grads[0], grads[1])
    a = SparseRLPolicyLoss(policy_loss_type="gspo", clip_eps_low=3e-4, clip_eps_high=4e-4)(logp, _old, adv, action_mask=mask)
    b = orl.loss.PolicyLoss(policy_loss_type="gspo", clip_eps_low=3e-4, clip_eps_high=4e-4)(logp, _old, adv, action_mask=mask)
    torch.testing.assert_close(a[0], b[0])
    with pytest.raises(ValueError, match="policy_loss_type"):
        SparseRLPolicyLoss(policy_loss_type="nope")


def test_reward_func_scores_the_response_not_the_prompt(orl):
    from sparserl.engines.openrlhf.labels import encode_label
    from sparserl.engines.openrlhf.losses import reward_func
    prompt = "What is 3+4? Put the answer in \\boxed{}."
    lab = encode_label("u1", "7")
    assert reward_func([prompt + " so \\boxed{7}"], [prompt], [lab])["rewards"] == 1.0
    assert reward_func([prompt + " so \\boxed{8}"], [prompt], [lab])["rewards"] == 0.0
    assert reward_func([prompt + " no answer"], [prompt], [lab])["rewards"] == 0.0
    out = reward_func([prompt + "\\boxed{7}", prompt + "\\boxed{1}"], [prompt] * 2, [lab, "1"])
    assert out["rewards"].tolist() == [1.0, 1.0]


# --------------------------------------------------------------------------- worker hook

def test_install_patches_sets_the_module_attributes(orl, monkeypatch):
    from sparserl.engines.openrlhf import patches as launcher
    from sparserl.engines.openrlhf import syncwatch
    from sparserl.engines.openrlhf.experience import SparseRLExperienceMaker
    from sparserl.engines.openrlhf.losses import SparseRLPolicyLoss
    from sparserl.engines.openrlhf.samples import OslaSamplesGenerator
    openrlhf_stubs.restore_patches_after(monkeypatch)
    assert orl.ppo_trainer.RemoteExperienceMaker is orl.em.RemoteExperienceMaker
    launcher.worker_process_setup()  # what Ray runs in each worker
    assert orl.ppo_trainer.RemoteExperienceMaker is SparseRLExperienceMaker
    assert orl.ppo_trainer.SamplesGenerator is OslaSamplesGenerator
    assert orl.ppo_trainer_async.SamplesGenerator is OslaSamplesGenerator
    assert orl.ppo_actor.PolicyLoss is SparseRLPolicyLoss
    assert orl.sg.SamplingParams is syncwatch.sampling_params  # vLLM log-probs at every correction level
    assert orl.train_ppo_ray.create_vllm_engines is syncwatch.create_vllm_engines
    assert issubclass(SparseRLExperienceMaker, orl.em.RemoteExperienceMaker)
    assert issubclass(OslaSamplesGenerator, orl.sg.SamplesGenerator)
    assert issubclass(SparseRLPolicyLoss, orl.loss.PolicyLoss)


def test_patches_apply_on_first_import(orl, monkeypatch):
    """A worker that imports the trainer module after the hook ran still gets our classes."""
    from sparserl.engines.openrlhf import patches as launcher
    from sparserl.engines.openrlhf.samples import OslaSamplesGenerator
    monkeypatch.delitem(sys.modules, "openrlhf.trainer.ppo_trainer_async")  # restored after the test
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    launcher.install_patches()
    fresh = importlib.import_module("openrlhf.trainer.ppo_trainer_async")
    assert fresh is not orl.ppo_trainer_async
    assert fresh.SamplesGenerator is OslaSamplesGenerator
    assert fresh.__spec__.loader.get_source("openrlhf.trainer.ppo_trainer_async")  # loader still delegates


# --------------------------------------------------------------------------- the weight sync's watch


def _synced(orl, gaps, T=4):
    """Experiences after the actor's forward pass: vLLM's log-probs = the trainer's + gap[i] on
    rollout i's action tokens (3 of T), junk after the mask."""
    exps = []
    for k in range(0, len(gaps), 2):
        g = torch.tensor(gaps[k:k + 2], dtype=torch.float32)
        mask = torch.zeros(len(g), T, dtype=torch.bool)
        mask[:, :3] = True
        train = -torch.rand(len(g), T, generator=torch.Generator().manual_seed(k))
        exps.append(orl.exp.Experience(action_mask=mask, action_log_probs=train,
                                       rollout_log_probs=torch.where(mask, train + g[:, None], torch.full_like(train, 9.0)),
                                       info={}))
    return exps


def test_vllm_kl_is_logged_every_step_and_bounded(orl, monkeypatch):
    """Each rollout's token-mean gap goes into its info (train/vllm_kl) with the correction off; a
    step whose mean passes --sparserl.vllm_kl_max fails naming the step, the value and the bound."""
    from sparserl.engines.openrlhf.experience import SparseRLExperienceMaker
    m = _maker(SparseRLExperienceMaker, "grpo")
    m.strategy.args.sparserl.vllm_kl_max = 0.05
    steps = iter([_synced(orl, [0.001, -0.002, 0.0, 0.003]), _synced(orl, [0.04, 0.08, 0.05, 0.07])])
    monkeypatch.setattr(m, "_make_experience", lambda _samples: next(steps))
    exps = m.make_experience(["samples"])
    got = torch.cat([e.info["vllm_kl"] for e in exps])
    torch.testing.assert_close(got, torch.tensor([0.001, -0.002, 0.0, 0.003]), atol=1e-6, rtol=0)
    with pytest.raises(RuntimeError, match=r"^step 2: vllm_kl 0\.06 is past --sparserl\.vllm_kl_max 0\.05: "
                                           r"vLLM samples from other weights .*stale or broken weight sync"):
        m.make_experience(["samples"])
    m.strategy.args.sparserl.vllm_kl_max = 0.0  # off
    monkeypatch.setattr(m, "_make_experience", lambda _samples: _synced(orl, [1.0, 1.0]))
    assert float(m.make_experience(["samples"])[0].info["vllm_kl"][0]) == pytest.approx(1.0)


def test_vllm_logprobs_are_asked_at_every_correction_level(orl, monkeypatch):
    """The samples generator's SamplingParams always asks for the sampled token's log-prob, and the
    engines return them after temperature (the trainer's logits / T), whatever the correction."""
    import inspect
    from sparserl.engines.openrlhf import syncwatch
    assert syncwatch.sampling_params(temperature=0.7, logprobs=None).logprobs == 0
    assert syncwatch.sampling_params(temperature=0.7, logprobs=1).logprobs == 1
    vllm_engine = importlib.import_module("openrlhf.trainer.ray.vllm_engine")
    seen = {}

    def fake(*a, **k):
        seen.update(inspect.signature(vllm_engine.create_vllm_engines).bind(*a, **k).arguments)
    fake.__signature__ = inspect.signature(vllm_engine.create_vllm_engines)
    monkeypatch.setattr(vllm_engine, "create_vllm_engines", fake)
    # train_ppo_ray's call with the correction off: 11 positional arguments, then logprobs_mode None
    syncwatch.create_vllm_engines(1, 1, "m", 0, False, True, True, 64, None, 0.1, False, None, agent_func_path=None)
    assert seen["logprobs_mode"] == "processed_logprobs" and seen["max_model_len"] == 64


def test_vllm_kl_bound_defaults_and_overrides(orl, tmp_path):
    from sparserl.engines.openrlhf.launcher import openrlhf_argv
    from sparserl.engines.openrlhf.parser import parse_args
    from sparserl.methods.spec import load_method
    m = load_method("grpo_g8")
    assert parse_args(openrlhf_argv(_cfg(tmp_path), m, 0, openrlhf_stubs.openrlhf_run(tmp_path / "final"), policy_path="p")).sparserl.vllm_kl_max == 0.05
    off = openrlhf_argv(_cfg(tmp_path, openrlhf={"sparserl.vllm_kl_max": 0.2}), m, 0, openrlhf_stubs.openrlhf_run(tmp_path / "final"), policy_path="p")
    assert parse_args(off).sparserl.vllm_kl_max == 0.2


def test_init_ray_passes_the_setup_hook(orl, monkeypatch):
    import ray

    from sparserl.engines.openrlhf import patches as launcher
    calls = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: calls.append(kw))
    launcher.init_ray(address="192.0.2.10:6379")
    (kw,) = calls
    assert kw["address"] == "192.0.2.10:6379"
    hook = kw["runtime_env"]["worker_process_setup_hook"]
    assert hook == "sparserl.engines.openrlhf.patches.worker_process_setup"
    mod, _, fn = hook.rpartition(".")
    assert getattr(importlib.import_module(mod), fn) is launcher.worker_process_setup
    assert kw["runtime_env"]["env_vars"]["RAY_ENABLE_ZERO_COPY_TORCH_TENSORS"] == "1"
    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    with pytest.raises(RuntimeError, match="setup hook"):
        launcher.init_ray()


# --------------------------------------------------------------------------- launcher

def _cfg(tmp_path, **rl):
    return {
        "scale": "paper", "seed": 0, "results_dir": str(tmp_path / "results"),
        "tasks": {"source": "hub", "chat_template": True, "prompt_template": "{problem}\n\n{instruction}"},
        "policies": {"qwen3_4b": {"source": "hub", "hf_name": "Qwen/Qwen3-4B-Instruct-2507"}},
        "rollout": {"backend": "vllm", "max_new_tokens": 8192, "vllm": {"max_model_len": 10240}},
        "rl": {"policy": "qwen3_4b", "methods": ["grpo_g16"], "seeds": [0], "steps": 100,
               "rollouts_per_step": 512, "lr": 1e-6, "temperature": 1.0, **rl},
    }


_flags = openrlhf_stubs.argv_flags


def test_rebuilt_parser_accepts_our_names_and_rejects_unknown(orl, capsys):
    from sparserl.estimators import list_estimators
    from sparserl.engines.openrlhf.parser import build_parser
    p = build_parser()
    for name in list_estimators() + ["gae", "group_norm", "reinforce"]:
        assert vars(p.parse_args(["--algo.advantage.estimator", name]))["algo.advantage.estimator"] == name
    with pytest.raises(SystemExit):
        p.parse_args(["--algo.advantage.estimator", "not_an_estimator"])
    assert "invalid choice" in capsys.readouterr().err
    assert vars(p.parse_args(["--actor.policy_loss_type", "gpg"]))["actor.policy_loss_type"] == "gpg"
    with pytest.raises(SystemExit):
        p.parse_args(["--actor.policy_loss_type", "xyz"])
    # the rebuilt parser is OpenRLHF's: its defaults come through untouched
    d = vars(p.parse_args([]))
    assert d["algo.advantage.estimator"] == "gae" and d["actor.eps_clip"] == 0.2


EXPECT = {
    "grpo_g16": {"algo.advantage.estimator": "grpo", "rollout.n_samples_per_prompt": "16",
                 "rollout.batch_size": "32", "train.batch_size": "512", "actor.policy_loss_type": "ppo",
                 "actor.eps_clip_low_high": ["0.2", "0.2"], "actor.loss_agg_mode": "seq-mean-token-mean",
                 "algo.kl.init_coef": "0.0"},
    "dapo_g16": {"algo.advantage.estimator": "grpo", "actor.eps_clip_low_high": ["0.2", "0.28"],
                 "actor.loss_agg_mode": "token-mean", "algo.dynamic_filtering_enable": True,
                 "algo.dynamic_filtering_range": ["0.0", "1.0"], "reward.overlong_buffer_len": "2048.0",
                 "reward.overlong_penalty_factor": "1.0", "algo.kl.init_coef": "0.0"},
    "gpg_g8": {"algo.advantage.estimator": "gpg", "actor.policy_loss_type": "gpg",
               "rollout.n_samples_per_prompt": "8", "rollout.batch_size": "64"},
    "gspo_g8": {"algo.advantage.estimator": "grpo", "actor.policy_loss_type": "gspo",
                "actor.eps_clip_low_high": ["0.0003", "0.0004"]},
    "v05_osla": {"algo.advantage.estimator": "v05_fusion", "rollout.n_samples_per_prompt": "4",
                 "rollout.batch_size": "128", "train.batch_size": "32"},
    "basis_grid_grpo_g1_basis": {"algo.advantage.estimator": "basis_unb", "rollout.n_samples_per_prompt": "1",
                                 "rollout.batch_size": "512", "data.max_samples": str(50 * 512)},
}


@pytest.mark.parametrize("name", sorted(EXPECT))
def test_method_argument_lists(orl, tmp_path, name):
    from sparserl.engines.openrlhf.launcher import openrlhf_argv
    from sparserl.engines.openrlhf.parser import parse_args
    from sparserl.methods.spec import load_method
    method = load_method(name)
    argv = openrlhf_argv(_cfg(tmp_path), method, 3, openrlhf_stubs.openrlhf_run(tmp_path / "run" / "final"), policy_path="/models/q")
    f = _flags(argv)
    for k, v in EXPECT[name].items():
        assert f.get(k) == v, (k, f.get(k), v)
    assert f["train.seed"] == "3" and f["actor.model_name_or_path"] == "/models/q"
    assert f["reward.remote_url"].endswith("engines/openrlhf/losses.py")
    assert f["data.label_key"] == "label" and f["data.apply_chat_template"] is True
    assert json.loads(f["sparserl.spec"])["estimator"] == method.estimator
    assert f["ckpt.output_dir"] == str(tmp_path / "run" / "final")
    args = parse_args(argv)  # OpenRLHF's own post-parse validation accepts it
    assert args.algo.advantage.estimator == method.estimator
    assert args.rollout.n_samples_per_prompt == method.group_size
    assert args.sparserl.method == name
    assert args.critic.model_name_or_path is None  # no critic for our estimators
    if "eps_clip_low_high" in str(EXPECT[name]):
        assert list(args.actor.eps_clip_low_high) == [float(x) for x in EXPECT[name]["actor.eps_clip_low_high"]]


def test_overrides_from_the_config(orl, tmp_path):
    from sparserl.core.config import ConfigError
    from sparserl.engines.openrlhf.flags import openrlhf_flags
    from sparserl.methods.spec import load_method
    m = load_method("grpo_g8")
    f = openrlhf_flags(_cfg(tmp_path, openrlhf={"nodes": 2, "vllm.tensor_parallel_size": 2,
                                                "train.micro_batch_size": 2, "ds.packing_samples": False}),
                       m, 0, openrlhf_stubs.openrlhf_run(tmp_path / "final"), policy_path="p")
    assert f["actor.num_nodes"] == 2 and f["ref.num_nodes"] == 2 and f["vllm.num_engines"] == 8
    assert f["train.micro_batch_size"] == 2 and f["ds.packing_samples"] is False
    with pytest.raises(ConfigError, match="rl.openrlhf.bogus"):
        openrlhf_flags(_cfg(tmp_path, openrlhf={"bogus": 1}), m, 0, openrlhf_stubs.openrlhf_run(tmp_path / "final"), policy_path="p")


def test_entropy_is_logged_unless_the_config_drops_it(orl, tmp_path):
    """Coefficient 0 makes OpenRLHF compute and log the entropy without a loss term; null omits it."""
    from sparserl.engines.openrlhf.launcher import openrlhf_argv
    from sparserl.engines.openrlhf.parser import parse_args
    from sparserl.methods.spec import load_method
    m = load_method("grpo_g8")
    on = openrlhf_argv(_cfg(tmp_path), m, 0, openrlhf_stubs.openrlhf_run(tmp_path / "final"), policy_path="p")
    assert _flags(on)["actor.entropy_coef"] == "0.0" and parse_args(on).actor.entropy_coef == 0.0
    off = openrlhf_argv(_cfg(tmp_path, openrlhf={"actor.entropy_coef": None}), m, 0, openrlhf_stubs.openrlhf_run(tmp_path / "final"),
                        policy_path="p")
    assert "actor.entropy_coef" not in _flags(off) and parse_args(off).actor.entropy_coef is None


def test_launch_calls_train_with_the_parsed_args(orl, tmp_path, monkeypatch):
    import ray

    from sparserl.engines.openrlhf import launcher
    from sparserl.engines.openrlhf.launcher import openrlhf_argv
    from sparserl.engines.openrlhf.patches import HOOK
    from sparserl.methods.spec import load_method
    for mod, attrs in [(orl.ppo_trainer, ["RemoteExperienceMaker", "SamplesGenerator"]),
                       (orl.ppo_trainer_async, ["SamplesGenerator"]), (orl.ppo_actor, ["PolicyLoss"])]:
        for a in attrs:
            monkeypatch.setattr(mod, a, getattr(mod, a))
    inits, trained = [], []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: inits.append(kw))
    monkeypatch.setattr(orl.train_ppo_ray, "train", lambda args: trained.append(args))
    argv = openrlhf_argv(_cfg(tmp_path), load_method("v05_osla"), 0, openrlhf_stubs.openrlhf_run(tmp_path / "final"), policy_path="p")
    launcher.launch(argv, address="head:6379")
    (args,) = trained
    assert args.algo.advantage.estimator == "v05_fusion"
    assert json.loads(args.sparserl.spec)["osla"]["k_step"] == 2
    assert inits[0]["runtime_env"]["worker_process_setup_hook"] == HOOK
    assert orl.ppo_trainer.RemoteExperienceMaker.__name__ == "SparseRLExperienceMaker"


def test_prompt_dataset_carries_side_data_in_labels(orl, tmp_path):
    import pandas as pd

    from sparserl.engines.openrlhf.dataset import build_prompt_dataset
    from sparserl.core.paths import Paths
    from sparserl.methods.spec import load_method
    cfg = _cfg(tmp_path, steps=3, rollouts_per_step=8)
    cfg["tasks"]["chat_template"] = False
    cfg["tasks"]["prompt_template"] = "Q: {problem} =\nA:"
    P = Paths(cfg)
    ids = [f"train/x/{i}" for i in range(5)]
    P.train_pool().parent.mkdir(parents=True)
    pd.DataFrame({"id": ids, "problem": [f"{i}+1" for i in range(5)], "answer": [str(i + 1) for i in range(5)]}) \
        .to_parquet(P.train_pool())
    P.reference_cache("qwen3_4b").parent.mkdir(parents=True)
    pd.DataFrame({"prompt_id": ids, "phat": [0.0, 0.25, 0.5, 0.75, 1.0], "successes": range(5), "n": 4}) \
        .to_parquet(P.reference_cache("qwen3_4b"))
    for name, key in [("basis_grid_grpo_g1_basis", "phat"), ("v05_osla", "prior"), ("v05_osla_constant_prior", "prior")]:
        m = load_method(name)
        out = build_prompt_dataset(cfg, m, 0, tmp_path / f"{name}.jsonl", pool=P.train_pool(),
                                   reference_cache=P.reference_cache("qwen3_4b") if m.needs_reference_cache else None)
        rows = [json.loads(x) for x in Path(out).read_text().splitlines()]
        m = load_method(name)
        n = round(3 * m.steps_factor) * (8 // m.group_size)  # BASIS rows: half the steps
        assert len(rows) == n
        for r in rows:
            lab = json.loads(r["label"])
            i = ids.index(lab["uid"])
            assert r["input"] == f"Q: {i}+1 =\nA:" and lab["answer"] == str(i + 1)
            a = m.prior.pseudo_count if key == "prior" else 0.0
            want = 0.5 if name == "v05_osla_constant_prior" else (i + a) / (4 + 2 * a)
            assert lab[key] == pytest.approx(want)
    # OpenRLHF's own loading path: datasets' json builder, then PromptDataset's preprocess_data
    import datasets

    from openrlhf.datasets.prompts_dataset import preprocess_data
    data = datasets.load_dataset("json", data_files=str(out), cache_dir=str(tmp_path / "hf"))["train"]
    prompt, label = preprocess_data(data[0], None, "input", "label", None)
    assert label == rows[0]["label"] and prompt == rows[0]["input"]


def test_cli_register_prints_the_argument_list(orl, tmp_path, monkeypatch, capsys):
    import argparse

    import yaml

    from sparserl.cli.openrlhf import register
    over = tmp_path / "rl.yaml"
    over.write_text(yaml.safe_dump({"rl": {"policy": "qwen3_4b", "methods": ["gpg_g8"], "seeds": [0],
                                           "steps": 10, "rollouts_per_step": 256,
                                           # 4 engines of 2 GPUs: the colocated job's 8 GPUs
                                           "openrlhf": {"vllm.num_engines": 4, "vllm.tensor_parallel_size": 2}}}))
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="command", required=True)

    def add(name, fn, help):  # the helper of sparserl.cli.build_parser
        p = sub.add_parser(name, help=help)
        p.add_argument("--config", nargs="+", default=["configs/tiny.yaml"])
        p.set_defaults(fn=fn)
        return p

    register(sub, add)
    monkeypatch.chdir(REPO)
    a = ap.parse_args(["openrlhf-args", "--config", "configs/paper.yaml", str(over), "--method", "gpg_g8",
                       "--seed", "1", "--out", str(tmp_path / "final"), "--check"])
    a.fn(a)
    f = _flags(capsys.readouterr().out.split())
    assert f["algo.advantage.estimator"] == "gpg" and f["vllm.num_engines"] == "4"
    assert f["rollout.batch_size"] == "32" and f["train.seed"] == "1"
    a = ap.parse_args(["openrlhf-launch", "--config", "configs/paper.yaml", str(over), "--method", "gpg_g8",
                       "--out", str(tmp_path / "final"), "--dry-run"])
    a.fn(a)
    assert "--actor.policy_loss_type gpg" in capsys.readouterr().out


# --------------------------------------------------------------------------- OSLA sampler

class _Remote:
    def __init__(self, fn):
        self.remote = fn


class FakeEngine:
    """A vLLM engine actor stand-in: scripted rewards per prompt, in draw order."""

    def __init__(self, script):
        self.script = script  # prompt -> list of rewards
        self.drawn = {}
        self.calls = []
        self.get_num_unfinished_requests = _Remote(lambda: 0)
        self.generate_responses = _Remote(self._generate)

    def _generate(self, prompt, label, sampling_params, max_length, hf_tokenizer, num_samples=1, images=None):
        self.calls.append((prompt, num_samples))
        out = []
        for _ in range(num_samples):
            j = self.drawn.get(prompt, 0)
            self.drawn[prompt] = j + 1
            r = float(self.script[prompt][j % len(self.script[prompt])])
            out.append({"prompt": prompt, "label": label, "observation_tokens": [5, 6, 7, 8, 9],
                        "action_ranges": [(3, 5)], "rollout_log_probs": None, "truncated": False,
                        "reward": r, "scores": r, "extra_logs": {}})
        return out


OSLA_SPEC = {"estimator": "v05_fusion", "group_size": 4, "prior": {"kind": "oracle"},
             "osla": {"k_init": 4, "k_step": 2, "c": 0.0039, "k_max": 16, "global_stop": 0.25, "pad_multiple": 32},
             "loss": {"type": "ppo_clip"}}
# p, scripted rewards: p0 agrees with its prior (Delta2 = 0: stops at k_init), p1/p2 contradict it
# strongly (k_target > 15: run to k_max), p3 is all-pass against p = 0.5 (target 14.7 at k = 4).
OSLA_SCRIPT = {"q0": (0.5, [1, 0]), "q1": (0.9, [0]), "q2": (0.1, [1]), "q3": (0.5, [1])}


def _generator(orl, script, spec, monkeypatch, batch_size=4):
    import ray

    from sparserl.engines.openrlhf.labels import encode_label
    from sparserl.engines.openrlhf.samples import OslaSamplesGenerator
    monkeypatch.setattr(ray, "get", lambda refs: refs)  # fake engines return values, not refs
    engine = FakeEngine({q: r for q, (_p, r) in script.items()})
    gen = OslaSamplesGenerator.__new__(OslaSamplesGenerator)
    gen.args = _args("v05_fusion", n=spec["group_size"], spec=spec)
    gen.args.rollout.batch_size = batch_size
    gen.strategy = SimpleNamespace(args=gen.args)
    gen.vllm_engines = [engine]
    gen.tokenizer = None
    labels = [encode_label(q, "1", prior=p) for q, (p, _r) in script.items()]
    gen.prompts_dataloader = [(["ds"], [q], [lab], [None]) for q, lab in zip(script, labels)]
    return gen, engine


def test_osla_rounds_and_dispatch_padding(orl, monkeypatch):
    from sparserl.methods.osla_sampler import run_osla
    gen, engine = _generator(orl, OSLA_SCRIPT, OSLA_SPEC, monkeypatch)
    exps, pass_rate, consumed, exhausted = gen.generate_samples(max_len=64)
    assert consumed == 4 and not exhausted and pass_rate is None
    assert gen.generate_samples(max_len=64) == ([], None, 0, True)  # the loader is drained

    # the stopping rule sees exactly the rewards it asked for: same decisions as run_osla alone
    def plain(idx, counts):
        return [np.resize(np.asarray(OSLA_SCRIPT[f"q{i}"][1], float), n) for i, n in zip(idx, counts)]
    ref = run_osla(plain, [0.5, 0.9, 0.1, 0.5], k_init=4, k_step=2, c=0.0039, k_max=16)
    np.testing.assert_array_equal(gen.last_osla.k, ref.k)
    assert gen.last_osla.k.tolist() == [4, 16, 16, 16]  # by hand from V0.5's Theorem 3.6 (see OSLA_SCRIPT)
    assert gen.last_osla.stop_reason.tolist() == ["test", "target", "target", "target"]
    # round 0: 4 x 4 = 16 requested -> 32 dispatched; rounds 1..6: 3 x 2 = 6 -> 32
    assert [d["requested"] for d in gen.last_dispatches] == [16] + [6] * 6
    assert all(d["dispatched"] % 32 == 0 for d in gen.last_dispatches)
    assert [d["dispatched"] for d in gen.last_dispatches] == [32] * 7
    assert len(exps) == 7 * 32 and len(exps) % 32 == 0
    # padding went to the dispatched prompts: q0 only in round 0 (4 + 4 padding)
    per_prompt = {q: sum(1 for e in exps if e.prompts[0] == q) for q in OSLA_SCRIPT}
    assert per_prompt["q0"] == 8 and sum(per_prompt.values()) == 224
    assert engine.drawn == per_prompt
    # every dispatch asks vLLM for n_samples_per_prompt = the per-prompt count of that dispatch
    assert {n for _q, n in engine.calls} <= {8, 10, 11}


def test_osla_global_stop(orl, monkeypatch):
    """Only 1 of 5 prompts wants more after k_init (20% < 25%): the batch stops at once."""
    script = {"q0": (0.9, [0]), **{f"q{i}": (0.5, [1, 0]) for i in range(1, 5)}}
    gen, engine = _generator(orl, script, OSLA_SPEC, monkeypatch, batch_size=5)
    exps, *_ = gen.generate_samples(max_len=64)
    assert gen.last_osla.k.tolist() == [4] * 5
    assert gen.last_osla.stop_reason.tolist() == ["global"] + ["test"] * 4
    assert [d["dispatched"] for d in gen.last_dispatches] == [32]  # 20 requested, padded to 32
    assert len(exps) == 32


def test_osla_batch_trains_with_uneven_groups(orl, monkeypatch):
    """OSLA's experiences (padding included) through the experience maker = the registry."""
    from sparserl.engines.openrlhf.experience import SparseRLExperienceMaker
    gen, _ = _generator(orl, OSLA_SCRIPT, OSLA_SPEC, monkeypatch)
    exps, *_ = gen.generate_samples(max_len=64)
    rewards = [float(e.rewards[0]) for e in exps]
    uids = [json.loads(e.labels[0])["uid"] for e in exps]
    micro = [orl.exp.Experience.concat_experiences(exps[i:i + 8], 0) for i in range(0, len(exps), 8)]
    for m in micro:
        m.kl = torch.zeros_like(m.action_mask, dtype=torch.float32)
    out = _maker(SparseRLExperienceMaker, "v05_fusion", spec=OSLA_SPEC).compute_advantages_and_returns(micro)
    got = torch.cat([e.advantages[:, -1] for e in out]).numpy()
    prior = {q: p for q, (p, _r) in OSLA_SCRIPT.items()}
    want = get_estimator("v05_fusion")(rewards, uids, ctx=EstimatorContext(prior=prior))
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert sorted(set(torch.cat([e.info["group_size"] for e in out]).tolist())) == [8.0, 68.0, 74.0]  # q0: 4 + 4 pad; q3: 8 + 6 x 10; q1, q2: 8 + 6 x 11


def test_osla_dispatches_split_evenly_over_8_ranks(orl, monkeypatch):
    """On 8 actor ranks (rollout micro-batch 8, train micro-batch 4) no step may hold 224
    rollouts: OpenRLHF's chunking (async_run_method_batch) would give rank 7 no micro-batch."""
    from sparserl.engines.openrlhf.samples import dispatch_multiple
    gen, _ = _generator(orl, OSLA_SCRIPT, OSLA_SPEC, monkeypatch)
    gen.args.actor = SimpleNamespace(num_nodes=1, num_gpus_per_node=8)
    gen.args.rollout.micro_batch_size = 8
    gen.args.train = SimpleNamespace(micro_batch_size=4, batch_size=32)
    assert dispatch_multiple(gen.args, 32) == 64
    exps, *_ = gen.generate_samples(max_len=64)
    assert len(exps) != 224 and len(exps) % 64 == 0
    assert all(d["dispatched"] % 64 == 0 for d in gen.last_dispatches)
    np.testing.assert_array_equal(gen.last_osla.k, [4, 16, 16, 16])  # padding never changes decisions
    chunks = -(-len(exps) // 8)  # OpenRLHF: chunks of rollout.micro_batch_size, ceil(chunks / ranks) each
    per_rank = [min(-(-chunks // 8), max(0, chunks - r * -(-chunks // 8))) for r in range(8)]
    assert len(set(per_rank)) == 1 and per_rank[0] > 0, per_rank
    # ring attention and tensor parallelism share a chunk between ranks: fewer data-parallel ranks
    gen.args.ds = SimpleNamespace(ring_attn_size=2, tensor_parallel_size=1)
    assert dispatch_multiple(gen.args, 32) == 32


def test_pad_allocation():
    from sparserl.engines.openrlhf.samples import pad_allocation
    assert pad_allocation([2, 2, 2], 32).tolist() == [9, 9, 8]
    assert pad_allocation([16, 16], 32).tolist() == [0, 0]
    assert pad_allocation([3], None).tolist() == [0]


# --------------------------------------------------------------------------- SLURM

def _fake_run(calls):
    def run(cmd, **kw):
        calls.append(cmd)
        if cmd[:3] == ["scontrol", "show", "hostnames"]:
            assert cmd[3] == "gpu[01-02]"
            return SimpleNamespace(stdout="gpu01\ngpu02\n", returncode=0)
        if cmd[-2:] == ["hostname", "--ip-address"]:
            return SimpleNamespace(stdout="192.0.2.10 fe80::1\n", returncode=0)
        raise AssertionError(cmd)
    return run


def test_slurm_commands_for_two_nodes(monkeypatch):
    from sparserl.engines.openrlhf import slurm
    # the rule's cpus_per_task (64) and the node's GPUs; SLURM_CPUS_ON_NODE counts hyperthreads here
    env = {"SLURM_JOB_NODELIST": "gpu[01-02]", "SLURM_GPUS_ON_NODE": "8", "SLURM_CPUS_PER_TASK": "64",
           "SLURM_CPUS_ON_NODE": "128"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    calls = []
    c = slurm.plan_from_env(run=_fake_run(calls), port=6380)
    assert calls[0] == ["scontrol", "show", "hostnames", "gpu[01-02]"]
    assert calls[1] == ["srun", "--nodes=1", "--ntasks=1", "--overlap", "-w", "gpu01", "hostname", "--ip-address"]
    assert c.nodes == ["gpu01", "gpu02"] and c.head == "gpu01" and c.address == "192.0.2.10:6380"
    # a step without -c/--gpus gets one CPU under task/cgroup: the raylet would be pinned to it
    step = ["srun", "--nodes=1", "--ntasks=1", "--overlap", "--cpus-per-task=64", "--gpus=8"]
    assert c.head_command == step + ["-w", "gpu01", "ray", "start", "--head", "--node-ip-address=192.0.2.10",
                                     "--port=6380", "--num-gpus=8", "--num-cpus=64", "--block"]
    assert c.worker_commands == [step + ["-w", "gpu02", "ray", "start", "--address=192.0.2.10:6380",
                                         "--num-gpus=8", "--num-cpus=64", "--block"]]
    # a CPU-only allocation: no --gpus on the step, --num-gpus=0 for Ray
    head, _ = slurm.ray_start_commands(["cpu01"], "192.0.2.11", gpus_per_node=0, cpus_per_node=16)
    assert head[:6] == ["srun", "--nodes=1", "--ntasks=1", "--overlap", "--cpus-per-task=16", "-w"]
    assert "--num-gpus=0" in head and "--num-cpus=16" in head
    started, waits = [], []

    class Proc:
        def __init__(self, cmd):
            started.append(cmd)
            self.done = False

        def poll(self):
            return 0 if self.done else None

        def terminate(self):
            self.done = True

        def wait(self, timeout=None):
            return 0

    procs = slurm.start_ray(c, popen=Proc, wait=lambda addr, n: waits.append((addr, n)), log=lambda *_: None)
    assert started == [c.head_command] + c.worker_commands
    assert waits == [("192.0.2.10:6380", 1), ("192.0.2.10:6380", 2)]
    slurm.stop(procs)
    assert all(p.done for p in procs)
    script = slurm.shell_script(c, ["python", "-m", "sparserl", "openrlhf-launch"])
    assert "RAY_ADDRESS=192.0.2.10:6380 python -m sparserl openrlhf-launch" in script


def test_slurm_outside_an_allocation(monkeypatch):
    from sparserl.engines.openrlhf import slurm
    monkeypatch.delenv("SLURM_JOB_NODELIST", raising=False)
    monkeypatch.delenv("SLURM_NODELIST", raising=False)
    assert slurm.plan_from_env(run=lambda *a, **k: pytest.fail("must not run scontrol")) is None


@pytest.mark.e2e  # real Ray workers
def test_setup_hook_reaches_real_ray_workers(orl):
    """A real local Ray: a task's worker, which never saw the driver's patches, builds OpenRLHF's
    trainer module with our classes because ray.init ran worker_process_setup in it."""
    import os

    import ray

    from sparserl.engines.openrlhf import patches as launcher
    if ray.is_initialized():
        pytest.skip("Ray already initialised by another test")
    src = str(REPO / "src")
    path = os.pathsep.join([str(Path(__file__).parents[2]), src, os.environ.get("PYTHONPATH", "")])  # tests/: helpers
    launcher.init_ray(extra_env={"PYTHONPATH": path}, num_cpus=1, include_dashboard=False,
                      log_to_driver=False)
    try:
        @ray.remote
        def probe():
            import importlib
            import sys

            from helpers import openrlhf_stubs
            hooked = any(type(f).__name__ == "PostImportFinder" for f in sys.meta_path)
            fresh = "openrlhf.trainer.ppo_trainer" not in sys.modules
            openrlhf_stubs.install()
            pt = importlib.import_module("openrlhf.trainer.ppo_trainer")
            pa = importlib.import_module("openrlhf.trainer.ray.ppo_actor")
            return hooked, fresh, pt.RemoteExperienceMaker.__name__, pt.SamplesGenerator.__name__, \
                pa.PolicyLoss.__name__

        assert ray.get(probe.remote(), timeout=240) == (
            True, True, "SparseRLExperienceMaker", "OslaSamplesGenerator", "SparseRLPolicyLoss")
    finally:
        ray.shutdown()


def test_mini_batches_set_the_train_batch(orl, tmp_path):
    """rl.mini_batches optimiser steps per rollout step, as in the local trainer."""
    from sparserl.engines.openrlhf.flags import openrlhf_flags
    from sparserl.methods.spec import load_method
    cfg = _cfg(tmp_path)
    cfg["rl"]["mini_batches"] = 4
    f = openrlhf_flags(cfg, load_method("grpo_g16"), 0, openrlhf_stubs.openrlhf_run(tmp_path / "final"), policy_path="p")
    assert f["rollout.batch_size"] * f["rollout.n_samples_per_prompt"] == cfg["rl"]["rollouts_per_step"]
    assert f["train.batch_size"] == cfg["rl"]["rollouts_per_step"] // 4


# --------------------------------------------------------------------------- live (non-static) priors

class _ContextPrior:
    """A scripted prior whose p depends on its context: the mean reward the support buffer holds
    for the prompt (every pair of it: context = the whole buffer here), else 0.5."""

    def __call__(self, prompt_ids, context=None):
        seen: dict = {}
        for uid, r in context or []:
            seen.setdefault(uid, []).append(r)
        return np.array([np.clip(np.mean(seen[u]), 0.05, 0.95) if u in seen else 0.5 for u in prompt_ids])


@pytest.fixture()
def context_prior():
    from sparserl.values import priors
    priors.register_prior("test_context", lambda spec, seed, **kw: _ContextPrior())
    from sparserl.engines.openrlhf import experience
    experience._LIVE_PRIORS.clear()
    yield {"prior": {"kind": "test_context"}, "support_buffer": {"size": 512, "context": 512}}
    priors.PRIOR_REGISTRY.pop("test_context")
    experience._LIVE_PRIORS.clear()


def test_experience_maker_queries_a_context_dependent_prior(orl, context_prior):
    """V0.5 with a prior that changes during training: the experience maker queries it with the
    recent (uid, reward) pairs as context, so step 2's prior is step 1's observed pass rate."""
    from sparserl.engines.openrlhf.experience import SparseRLExperienceMaker
    maker = _maker(SparseRLExperienceMaker, "v05_fusion", spec=context_prior)
    r1 = REWARDS_OSLA
    first = _by_id(maker.compute_advantages_and_returns(_batch(orl, r1, UIDS_OSLA)))  # no label priors
    np.testing.assert_allclose(first, _registry("v05_fusion", r1, UIDS_OSLA,
                                                EstimatorContext(prior={u: 0.5 for u in PRIOR})), atol=1e-5)
    seen = {u: float(np.clip(np.mean([r for r, v in zip(r1, UIDS_OSLA) if v == u]), 0.05, 0.95)) for u in PRIOR}
    assert len(set(seen.values())) > 1
    r2 = list(1 - np.asarray(r1))
    second = _by_id(maker.compute_advantages_and_returns(_batch(orl, r2, UIDS_OSLA)))
    np.testing.assert_allclose(second, _registry("v05_fusion", r2, UIDS_OSLA, EstimatorContext(prior=seen)),
                               atol=1e-5)
    assert not np.allclose(second, _registry("v05_fusion", r2, UIDS_OSLA,
                                             EstimatorContext(prior={u: 0.5 for u in PRIOR})), atol=1e-3)


def test_osla_generator_reads_the_same_live_prior(orl, context_prior):
    """The OSLA samples generator and the experience maker share one live prior per process."""
    from sparserl.engines.openrlhf.experience import SparseRLExperienceMaker, live_prior
    from sparserl.engines.openrlhf.labels import encode_label, method_spec
    from sparserl.engines.openrlhf.samples import osla_priors
    spec = {**context_prior, "osla": {"k_init": 4}, "group_size": 4}
    maker = _maker(SparseRLExperienceMaker, "v05_fusion", spec=spec)
    labels = [encode_label(u, "1") for u in PRIOR]
    np.testing.assert_allclose(osla_priors(labels, method_spec(maker.strategy.args), maker.strategy.args), 0.5)
    maker.compute_advantages_and_returns(_batch(orl, REWARDS_OSLA, UIDS_OSLA))
    p = osla_priors(labels, method_spec(maker.strategy.args), maker.strategy.args)
    want = [np.clip(np.mean([r for r, v in zip(REWARDS_OSLA, UIDS_OSLA) if v == u]), 0.05, 0.95) for u in PRIOR]
    np.testing.assert_allclose(p, want)
    assert len(live_prior(maker.strategy.args, method_spec(maker.strategy.args)).support) == len(REWARDS_OSLA)


def test_prompt_dataset_accepts_a_non_static_prior(orl, tmp_path, context_prior):
    """The launcher used to refuse any prior that is not oracle or constant."""
    import dataclasses

    import pandas as pd

    from sparserl.core.paths import Paths
    from sparserl.engines.openrlhf.dataset import build_prompt_dataset
    from sparserl.methods.spec import load_method
    cfg = _cfg(tmp_path, steps=2, rollouts_per_step=8)
    P = Paths(cfg)
    ids = [f"train/x/{i}" for i in range(5)]
    P.train_pool().parent.mkdir(parents=True)
    pd.DataFrame({"id": ids, "problem": ["1+1"] * 5, "answer": ["2"] * 5}).to_parquet(P.train_pool())
    m = load_method("v05_osla_constant_prior")
    m = dataclasses.replace(m, prior=dataclasses.replace(m.prior, kind="test_context"))
    rows = [json.loads(x) for x in Path(build_prompt_dataset(cfg, m, 0, tmp_path / "d.jsonl", pool=P.train_pool())).read_text().splitlines()]
    assert rows and all("prior" not in json.loads(r["label"]) for r in rows)


def test_harvested_rollouts_reach_the_run_dir(orl, tmp_path):
    from sparserl.engines.openrlhf.experience import SparseRLExperienceMaker
    from sparserl.engines.openrlhf.metrics import harvested_rollouts
    maker = _maker(SparseRLExperienceMaker, "grpo")
    maker.strategy.args.sparserl.run_dir = str(tmp_path)
    for _ in range(2):
        maker.compute_advantages_and_returns(_batch(orl, REWARDS_EQ, UIDS_EQ))
    df = harvested_rollouts(tmp_path / "openrlhf")
    assert len(df) == 2 * len(REWARDS_EQ) and sorted(df["step"].unique()) == [1, 2]
    assert sorted(df["prompt_id"].unique()) == ["a", "b", "c"] and df["length"].min() >= 1


# --------------------------------------------------------------------------- checkpoints for evaluation

def test_paper_scale_evaluation_finds_openrlhf_checkpoints(orl, tmp_path):
    """OpenRLHF saves HF checkpoints as <ckpt.path>/global_step<N>_hf; the RL evaluation looked for
    the local trainer's checkpoints/stepNNNNN and failed on every paper-scale run."""
    from sparserl.core.paths import Paths
    from sparserl.engines.openrlhf.flags import openrlhf_flags
    from sparserl.engines.report import run_checkpoints
    from sparserl.methods.run import resolve_run
    from sparserl.methods.spec import load_method, snapshot_steps
    cfg = _cfg(tmp_path, steps=100, eval_fractions=[0.25, 0.5], checkpoint_every=20)
    m = load_method("grpo_g16")
    run = Paths(cfg).run("grpo_g16", 0)
    f = openrlhf_flags(cfg, m, 0, openrlhf_stubs.openrlhf_run(run.final), policy_path="p")
    save_every = f["ckpt.save_steps"]
    steps = snapshot_steps(cfg["rl"], m)
    assert steps == [25, 50] and all(s % save_every == 0 for s in steps)
    for s in range(save_every, 101, save_every):  # what OpenRLHF's save_checkpoint writes
        (Path(f["ckpt.path"]) / f"global_step{s}_hf").mkdir(parents=True)
    run.final.mkdir(parents=True)
    got = run_checkpoints(resolve_run(cfg, "grpo_g16", 0, read_choice=False))
    assert [label for label, _ in got] == ["step00025", "step00050", "final"]
    assert got[0][1] == Path(f["ckpt.path"]) / "global_step25_hf" and got[-1][1] == run.final


class _Saves:
    """A RayActorGroup stand-in recording the tags `save_checkpoint` is asked for."""

    def __init__(self):
        self.tags = []

    def async_run_method(self, method_name, **kw):
        if method_name == "save_checkpoint":
            self.tags.append(kw["tag"])
        return []


@pytest.mark.parametrize("name", ["grpo_g16", "lc_math_vf_g8"])
def test_paper_runs_save_at_the_evaluated_steps_and_a_resume_cadence(orl, no_ray, repo, tmp_path, monkeypatch, name):
    """A retried 48 h job resumes from its DeepSpeed checkpoint (--ckpt.load_enable, two kept).
    OpenRLHF's save_logs_and_checkpoints, patched by the worker hook, saves at the evaluated steps
    (400 steps, eval_fractions 0.25/0.5/0.75: policy step s is global step s + W, W = 10 for a
    critic) and every --ckpt.save_steps; HF copies only at the evaluated steps (`final/` is the
    last). Every paper run has a resume point at most a few hours of estimated work back (sizing):
    grpo_g16 saved only at its evaluated steps, 100 steps (about 19 h) apart, and the lc_math runs
    every 10 steps (the gcd of 110, 210, 310 and 400 + 10): 41 HF copies."""
    from sparserl.core.config import load_config
    from sparserl.core.paths import Paths
    from sparserl.engines import sizing as S
    from sparserl.engines.openrlhf.critic_warmup import critic_warmup_steps
    from sparserl.engines.openrlhf.launcher import openrlhf_argv
    from sparserl.engines.openrlhf.parser import parse_args
    from sparserl.methods.spec import load_method, total_steps
    from openrlhf.utils.deepspeed.deepspeed import DeepspeedStrategy
    cfg = load_config(repo / "configs/paper.yaml")
    cfg["results_dir"] = str(tmp_path / "results")
    m = load_method(name)
    W = critic_warmup_steps(m)
    args = parse_args(openrlhf_argv(cfg, m, 0, openrlhf_stubs.openrlhf_run(tmp_path / "final"), policy_path="p"))
    assert args.ckpt.load_enable is True and args.ckpt.max_num == 2 and args.ckpt.save_hf is True
    every = args.ckpt.save_steps
    evaluated = {"grpo_g16": [100, 200, 300], "lc_math_vf_g8": [110, 210, 310]}[name]
    assert args.sparserl.hf_steps == evaluated and W == {"grpo_g16": 0, "lc_math_vf_g8": 10}[name]
    # a resume point at most RESUME_EVERY_S of estimated work back
    step_s = S.estimate(Paths(cfg), "rl_cluster", {"method": name, "seed": "0"}).extra["step_s"]
    assert every == S.rl_resume_save_steps(cfg, m, "p") and every * step_s <= S.RESUME_EVERY_S < (every + 1) * step_s
    assert every < 100

    # the class a Ray worker runs for PPOTrainer (ray.remote copied BasePPOTrainer's methods into it)
    base, strat = orl.ppo_trainer.PPOTrainer.__ray_metadata__.modified_class, DeepspeedStrategy
    hf_written = []
    openrlhf_stubs.restore_patches_after(monkeypatch)
    monkeypatch.setattr(strat, "save_model", lambda self, model, tok, out, **kw: hf_written.append(Path(out).name))
    orl.patches.install_patches()  # the worker hook's wrappers
    ppo = base.__new__(base)
    ppo.args, ppo.wandb_logger, ppo.tensorboard_logger = args, None, None
    ppo.best_eval_metric_key, ppo.best_eval_metric_value, ppo._latest_eval_metric_value = None, float("-inf"), None
    ppo.actor_model_group, ppo.critic_model_group = _Saves(), (_Saves() if W else None)
    n = total_steps(cfg["rl"], m) + W
    for g in range(1, n + 1):
        ppo.save_logs_and_checkpoints(g, {}, {"global_step": g})
    want = sorted(set(evaluated) | set(range(every, n + 1, every)))
    assert ppo.actor_model_group.tags == [f"global_step{g}" for g in want]
    assert args.ckpt.save_steps == every  # put back after each call
    if W:
        assert ppo.critic_model_group.tags == ppo.actor_model_group.tags
        assert len(want) < n // 10 and 20 not in want  # not every 10 steps (41 saves)
    # PolicyModelActor.save_checkpoint's HF copy, <ckpt.path>/<tag>_hf: the evaluated steps' only
    s = strat.__new__(strat)
    s.args = args
    for tag in ppo.actor_model_group.tags:
        s.save_model(None, None, str(Path(args.ckpt.path) / f"{tag}_hf"))
    s.save_model(None, None, str(args.ckpt.output_dir))  # final/: always
    assert hf_written == [f"global_step{g}_hf" for g in evaluated] + [Path(args.ckpt.output_dir).name]


# --------------------------------------------------------------------------- V0 as the live prior



def test_v0_method_flags_name_the_model_the_config_and_the_runs_files(orl, tmp_path):
    from sparserl.engines.openrlhf.launcher import openrlhf_argv
    from sparserl.engines.openrlhf.parser import parse_args
    from sparserl.methods.run import resolve_run
    from sparserl.methods.spec import load_method
    cfgfile = tmp_path / "c.json"
    cfg = _cfg(tmp_path, openrlhf={"v0_gpus": 0.25})
    run = openrlhf_stubs.openrlhf_run(tmp_path / "run" / "final")
    reads = resolve_run(cfg, "v05_osla_v0", 0).reads
    argv = openrlhf_argv(cfg, load_method("v05_osla_v0"), 0, run, policy_path="/models/q", v0_model=reads.v0_model,
                         v0_pool=reads.pool, v0_embeddings=reads.v0_embeddings, config_paths=[str(cfgfile)])
    f = _flags(argv)
    assert f["sparserl.v0_model"].endswith("values/models/v0/v0.sequential.seed0.pt")
    # the V0 actor reads the run's files, never the layout of its config (the launcher resolves them once)
    assert (f["sparserl.v0_pool"], f["sparserl.v0_embeddings"]) == (str(reads.pool.absolute()),
                                                                   str(reads.v0_embeddings.absolute()))
    assert json.loads(f["sparserl.config"]) == [str(cfgfile.absolute())] and f["sparserl.v0_gpus"] == "0.25"
    args = parse_args(argv)
    assert args.sparserl.v0_model == f["sparserl.v0_model"] and args.sparserl.v0_gpus == 0.25
    plain = _flags(openrlhf_argv(_cfg(tmp_path), load_method("v05_osla"), 0, openrlhf_stubs.openrlhf_run(tmp_path / "f"), policy_path="p"))
    assert "sparserl.v0_model" not in plain
    with pytest.raises(ValueError, match="pass it as v0_model"):  # never a V0 actor without its model
        openrlhf_argv(cfg, load_method("v05_osla_v0"), 0, run, policy_path="/models/q")
    with pytest.raises(ValueError, match="pass v0_embeddings"):  # nor without the files it reads
        openrlhf_argv(cfg, load_method("v05_osla_v0"), 0, run, policy_path="/models/q", v0_model=reads.v0_model,
                      v0_pool=reads.pool)
    from sparserl.core.config import ConfigError
    with pytest.raises(ConfigError, match="local trainer only"):
        openrlhf_argv(_cfg(tmp_path), load_method("grpo_budget_v0"), 0, openrlhf_stubs.openrlhf_run(tmp_path / "f"), policy_path="p")


def test_v0_prior_server_with_the_config_builds_the_prior_from_the_files_it_is_given(orl, tmp_path, monkeypatch):
    from sparserl.engines.openrlhf.v0_server import V0PriorServer
    from sparserl.values.v0 import prior
    from sparserl.values.v0.embedder import EmbeddingTable
    from sparserl.values.v0.model import load_v0
    model, emb = toy_v0(tmp_path)
    cfgfile = Path(__file__).resolve().parents[3] / "configs" / "tiny.yaml"  # its layout has neither file
    got = {}

    def built(spec, seed, cfg, *, pool, embeddings):
        got.update(model=spec["model"], pool=pool, embeddings=embeddings)
        return prior.V0Prior(load_v0(model), EmbeddingTable.load(emb))
    monkeypatch.setattr(prior, "make_v0_prior", built)
    V0PriorServer(model, [str(cfgfile)], embeddings=str(tmp_path / "e.pt"), pool=str(tmp_path / "pool.parquet"))
    assert got == {"model": model, "pool": tmp_path / "pool.parquet", "embeddings": tmp_path / "e.pt"}
    with pytest.raises(ValueError, match="--sparserl.v0_pool"):
        V0PriorServer(model, [str(cfgfile)], embeddings=emb)


def test_v0_prior_server_answers_like_the_in_process_prior(orl, tmp_path):
    from sparserl.engines.openrlhf.v0_server import V0PriorServer
    from sparserl.values.v0.embedder import EmbeddingTable
    from sparserl.values.v0.model import load_v0
    from sparserl.values.v0.prior import V0Prior
    model, emb = toy_v0(tmp_path)
    server = V0PriorServer(model, embeddings=emb)
    ctx = [["a", 1.0], ["b", 0.0], ["a", 1.0], ["b", 0.0]]
    local = V0Prior(load_v0(model), EmbeddingTable.load(emb))
    np.testing.assert_allclose(server.predict(["c", "b"], ctx), local(["c", "b"], [tuple(c) for c in ctx]))
    assert server.predict(["a"], []) == [0.5]


def test_live_prior_of_a_v0_method_is_the_remote_client(orl, monkeypatch, tmp_path):
    from sparserl.engines.openrlhf import experience, v0_server
    calls = []

    class FakeHandle:  # stands in for the Ray actor handle: .predict.remote(...) -> the server's answer
        def __init__(self, server):
            self.predict = SimpleNamespace(remote=lambda ids, ctx: calls.append((ids, ctx)) or server.predict(ids, ctx))
            self.describe = SimpleNamespace(remote=server.describe)
    model, emb = toy_v0(tmp_path)
    shares = []
    monkeypatch.setattr(v0_server, "v0_server", lambda m, c, share, threads, embeddings, pool: shares.append(share) or
                        FakeHandle(v0_server.V0PriorServer(m, embeddings=embeddings, threads=threads)))
    import ray
    monkeypatch.setattr(ray, "get", lambda x, timeout: x)
    experience._LIVE_PRIORS.clear()
    spec = {"estimator": "v05_fusion", "group_size": 4, "prior": {"kind": "v0"},
            "support_buffer": {"size": 512, "context": 256}}
    maker = _maker(experience.SparseRLExperienceMaker, "v05_fusion", spec=spec)
    maker.strategy.args.sparserl.v0_model = model
    maker.strategy.args.sparserl.v0_embeddings = emb
    # what the parser sets: the cluster shape the placement plan reads, the V0 actor's settings
    from sparserl.core.config import v0_actor_settings
    a = maker.strategy.args
    vars(a.sparserl).update(v0_actor_settings({}))
    a.actor, a.critic = SimpleNamespace(num_nodes=1, num_gpus_per_node=1), SimpleNamespace(model_name_or_path=None)
    a.vllm.num_engines, a.vllm.tensor_parallel_size = 1, 1
    a.train = SimpleNamespace(colocate_all=True, colocate_actor_ref=False, async_enable=False)
    a.algo.kl = SimpleNamespace(init_coef=0.0)
    from sparserl.engines.openrlhf.labels import method_spec
    lp = experience.live_prior(maker.strategy.args, method_spec(maker.strategy.args))
    assert isinstance(lp.prior, v0_server.RemoteV0Prior) and lp.prior.timeout_s == 600
    assert shares[0].role == "v0 prior" and shares[0].gpus == 0.1  # the plan's share, the schema's default
    lp.observe(["a", "b"], [1.0, 0.0])
    p = lp(["c", "a"])
    assert p.shape == (2,) and calls and calls[-1][0] == ["c", "a"] and len(calls[-1][1]) == 2
    experience._LIVE_PRIORS.clear()
    maker.strategy.args.sparserl.v0_model = None
    with pytest.raises(ValueError, match="--sparserl.v0_model"):
        experience.live_prior(maker.strategy.args, method_spec(maker.strategy.args))
    experience._LIVE_PRIORS.clear()


@pytest.mark.e2e  # a real Ray actor
@pytest.mark.two_cores
def test_v0_prior_server_as_a_real_ray_actor(orl, tmp_path):
    import ray
    from sparserl.engines.openrlhf.v0_server import RemoteV0Prior, V0PriorServer, v0_server
    if ray.is_initialized():
        pytest.skip("Ray already initialised by another test")
    import os
    model, emb = toy_v0(tmp_path)
    path = os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": {"PYTHONPATH": path}})
    try:
        a = RemoteV0Prior(v0_server(model, [], embeddings=emb))
        b = RemoteV0Prior(v0_server(model, [], embeddings=emb))  # found by name, not a second actor
        ctx = [("a", 1.0), ("b", 0.0)]
        want = V0PriorServer(model, embeddings=emb).predict(["c"], [list(c) for c in ctx])
        np.testing.assert_allclose(a(["c"], ctx), want)
        np.testing.assert_allclose(b(["c"], ctx), want)
        assert ray.get(a.handle.describe.remote()) == ray.get(b.handle.describe.remote())
        assert len([x for x in ray.util.list_named_actors() if x == "sparserl_v0_prior"]) == 1
    finally:
        ray.shutdown()
