"""`SparseRLExperienceMaker`: OpenRLHF's `RemoteExperienceMaker` with our estimator registry.

OpenRLHF 0.11.2 computes group baselines by reshaping the rollout rewards to
``(-1, n_samples_per_prompt)``: position, not prompt identity, defines a group, and every prompt
must have exactly ``n_samples_per_prompt`` rollouts. OSLA (V0.5) gives prompts different rollout
counts, and the rollouts of one step may arrive in any order, so this subclass groups rollouts by
a STABLE PROMPT UID instead and hands them to `sparserl.estimators.get_estimator(name)`.

Dispatch (`compute_advantages_and_returns`):
  * the estimator name (``--algo.advantage.estimator``) is one of ours
    (`sparserl.estimators.list_estimators()`: grpo, dr_grpo, rloo, vanilla, reinforce_pp, gpg,
    v05_*, basis_*) -> registry path below;
  * any other name (OpenRLHF's gae, reinforce, reinforce_baseline, group_norm, flash_reinforce)
    -> ``super()``, untouched. rloo and dr_grpo exist in both; ours wins (same formula on equal
    groups, and it also handles uneven groups and any order).

Registry path, per step (all rollouts of the step at once, as OpenRLHF does):
  1. rewards promoted to >= fp32 and OpenRLHF's own `apply_length_penalties` (DAPO overlong,
     ProRL stop-properly) applied, as in the parent;
  2. ``--reward.clip_range`` clamps the REWARDS (the parent clamps the shaped reward; here the
     shaped value is the advantage, which must not be clipped: GPG's B/B_valid can exceed 10);
  3. A = estimator(rewards, uids, ctx=EstimatorContext(...)) with side data from the labels;
     for the GPG loss with a non-GPG estimator the B/B_valid factor is multiplied in
     (`gpg_valid_scale`; the `gpg` estimator folds it in itself);
  4. per token exactly as the parent does for its REINFORCE-family estimators: OpenRLHF's
     `compute_reward` puts A on the last action token and adds -kl_coef * kl per token (KL in
     the reward, when not used as a loss), then `get_cumulative_returns` with gamma = 1;
     advantages = returns. No batch whitening afterwards (REINFORCE++'s normalisation is inside
     the `reinforce_pp` estimator, per rollout).

How side data travels: THROUGH THE DATASET'S LABEL FIELD. The launcher writes the prompt
dataset with ``label`` = a JSON object (`encode_label`):
    {"uid": "<pool prompt id>", "answer": "<gold answer>", "phat": <BASIS reference pass rate>,
     "prior": <V0.5 prior p>}
OpenRLHF carries the label string untouched from the dataloader through vLLM (where our
`reward_func` decodes it to score against "answer") into ``Experience.labels``, one per rollout,
so the experience maker and the OSLA sampler read uid, phat and prior from it. No cache,
nothing to keep in sync across Ray actors. A label that is not JSON is taken as the bare
answer; its uid is then the prompt text (stable within a step).
"""
from __future__ import annotations

import itertools
import json
from typing import Any, Sequence

import numpy as np
import torch
from openrlhf.models.utils import compute_reward
from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker
from openrlhf.trainer.ppo_utils.length_penalty import apply_length_penalties

from sparserl.estimators import EstimatorContext, get_estimator, gpg_valid_scale, list_estimators
from sparserl.methods.spec import estimator_options

# --------------------------------------------------------------------------- labels

LABEL_FIELDS = ("uid", "answer", "phat", "prior")


def encode_label(uid: Any, answer: Any, **side: Any) -> str:
    """The dataset label of one prompt: JSON with uid, answer and optional side data (phat, prior,
    task metadata). None values are dropped."""
    d = {"uid": str(uid), "answer": None if answer is None else str(answer)}
    d.update({k: (float(v) if isinstance(v, (np.floating, np.integer)) else v)
              for k, v in side.items() if v is not None})
    return json.dumps(d, sort_keys=True)


def decode_label(label: Any) -> dict:
    """Inverse of `encode_label`; a non-JSON label (plain answer) gives {"answer": label}."""
    if isinstance(label, dict):
        return label
    if isinstance(label, (bytes, bytearray)):
        label = label.decode()
    if isinstance(label, str) and label.startswith("{"):
        try:
            d = json.loads(label)
        except json.JSONDecodeError:
            d = None
        if isinstance(d, dict):
            return d
    return {"answer": label}


def experience_uids(experiences: Sequence) -> list[str]:
    """One uid per rollout, in concatenation order: the label's uid, else the prompt text."""
    out = []
    for e in experiences:
        n = len(e.rewards) if e.rewards is not None else len(e.labels)
        labels = list(e.labels) if e.labels else [None] * n
        prompts = list(e.prompts) if e.prompts else [None] * n
        if len(labels) != n or len(prompts) != n:
            raise ValueError(f"experience has {n} rewards but {len(labels)} labels / {len(prompts)} prompts")
        for lab, prm in zip(labels, prompts):
            uid = decode_label(lab).get("uid") if lab is not None else None
            if uid is None:
                if prm is None:
                    raise ValueError("a rollout has neither a JSON label with 'uid' nor a prompt to group by")
                uid = "prompt:" + str(prm)
            out.append(str(uid))
    return out


def method_spec(args) -> dict:
    """The method spec the launcher put in ``--sparserl.spec`` (JSON), or {} when absent."""
    ns = getattr(args, "sparserl", None)
    raw = getattr(ns, "spec", None) if ns is not None else None
    if not raw:
        return {}
    return json.loads(raw) if isinstance(raw, str) else dict(raw)


def is_registry_estimator(name: str) -> bool:
    return name in list_estimators()


def _side(labels: list[dict], key: str, what: str) -> np.ndarray:
    vals = []
    for i, d in enumerate(labels):
        v = d.get(key)
        if v is None:
            raise ValueError(f"rollout {i} (uid {d.get('uid')!r}): the dataset label has no {key!r}, "
                             f"needed by {what}; rebuild the prompt dataset with the launcher")
        vals.append(float(v))
    return np.asarray(vals, dtype=np.float64)


def _beta(value) -> float | None:
    if value is None or (isinstance(value, str) and value.lower() in ("calibrate", "auto", "")):
        return None
    return float(value)  # "inf" -> inf


def build_context(name: str, spec: dict, labels: list[dict], rewards: np.ndarray,
                  prev: tuple | None = None) -> EstimatorContext:
    """EstimatorContext for one step from the method spec and the decoded labels (one per rollout)."""
    ctx = EstimatorContext()
    if name.startswith("v05"):
        prior = spec.get("prior") or {}
        if prior.get("kind") == "constant":
            ctx.prior = np.full(len(labels), float(prior.get("p", 0.5)))
        else:
            ctx.prior = _side(labels, "prior", f"{name} (prior kind {prior.get('kind')!r})")
    if name.startswith("basis"):
        b = spec.get("basis") or {}
        if all(d.get("vhat") is not None for d in labels) and labels:
            ctx.vhat = _side(labels, "vhat", name)
        else:
            ctx.phat = _side(labels, "phat", name)
        ctx.beta = _beta(b.get("beta"))
        ctx.calibrate_on = b.get("calibrate_on", "current")
        if ctx.calibrate_on == "previous" and prev is not None:
            ctx.prev_phat, ctx.prev_rewards = prev
    return ctx


# --------------------------------------------------------------------------- the maker


class SparseRLExperienceMaker(RemoteExperienceMaker):
    """RemoteExperienceMaker whose advantages come from `sparserl.estimators` (see module doc)."""

    @torch.no_grad()
    def compute_advantages_and_returns(self, experiences):
        args = self.strategy.args
        name = args.algo.advantage.estimator
        if not is_registry_estimator(name):
            return super().compute_advantages_and_returns(experiences)
        if not experiences:
            return experiences
        spec = method_spec(args)

        for e in experiences:
            e.rewards = e.rewards.to(torch.promote_types(e.rewards.dtype, torch.float32))
        apply_length_penalties(experiences, args)

        exp_len = [len(e.rewards) for e in experiences]
        raw = torch.cat([e.rewards.reshape(-1) for e in experiences]).double()
        clip = getattr(args.reward, "clip_range", None)
        if clip:
            raw = raw.clamp(min=clip[0], max=clip[1])
        r = raw.numpy()
        uids = np.asarray(experience_uids(experiences))
        labels = [decode_label(lab) for lab in itertools.chain.from_iterable(
            (e.labels if e.labels else [None] * n) for e, n in zip(experiences, exp_len))]

        ctx = build_context(name, spec, labels, r, getattr(self, "_basis_prev", None))
        info: dict = {}
        adv = np.asarray(get_estimator(name)(r, uids, ctx=ctx, info=info,
                                             **estimator_options({**spec, "estimator": name})),
                         dtype=np.float64)
        if (spec.get("loss") or {}).get("type") == "gpg" and name != "gpg":
            adv = adv * gpg_valid_scale(r, uids)
        if ctx.calibrate_on == "previous" and name.startswith("basis") and ctx.phat is not None:
            self._basis_prev = (np.asarray(ctx.phat, dtype=np.float64).copy(), r.copy())
        self.last_estimator_info = info

        # per-rollout diagnostics (group size and reward std of the rollout's uid group)
        _, inv, counts = np.unique(uids, return_inverse=True, return_counts=True)
        inv = inv.reshape(-1)
        mean = np.bincount(inv, weights=r) / counts
        ss = np.bincount(inv, weights=(r - mean[inv]) ** 2)
        std = np.sqrt(np.divide(ss, counts - 1, out=np.zeros_like(ss), where=counts > 1))

        adv_t = torch.from_numpy(adv)
        for e, a, gstd, gsize in zip(experiences, adv_t.split(exp_len),
                                     torch.from_numpy(std[inv]).split(exp_len),
                                     torch.from_numpy(counts[inv].astype(np.float64)).split(exp_len)):
            kl = e.kl if e.kl is not None else torch.zeros_like(e.action_mask, dtype=torch.float32)
            a = a.to(kl.dtype)
            shaped = compute_reward(a, self.kl_ctl.value, kl, action_mask=e.action_mask, reward_clip_range=None)
            e.returns = self.get_cumulative_returns(shaped, e.action_mask, 1.0)
            e.advantages = e.returns.clone()
            e.info["return"] = shaped.sum(dim=-1)
            e.info["group_reward_std"] = gstd.float()
            e.info["group_size"] = gsize.float()
            e.kl = None
        return experiences


__all__ = ["LABEL_FIELDS", "SparseRLExperienceMaker", "build_context", "decode_label", "encode_label",
           "experience_uids", "is_registry_estimator", "method_spec"]
