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
  3. A = `sparserl.methods.sidedata.advantages(spec, rewards, uids, side, state)`: the same call
     the local trainer makes, with the side data the estimator declared (static ones from the
     labels, a live prior queried now) and the calibration state carried between steps; it
     multiplies in GPG's B/B_valid for the GPG loss with a non-GPG estimator;
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

A prior that is not static (V0, or any registered kind whose p depends on the policy's recent
outcomes) cannot travel in labels: `live_prior(args)` builds it once per process with a support
buffer (`sparserl.values.support.LivePrior`), the OSLA samples generator and the experience maker
query it with the step's uids, and the experience maker feeds it each step's (uid, reward) pairs.
Each step's rollouts are also appended to ``<run>/openrlhf/rollouts.jsonl`` (uid, step, reward,
length), which the launcher turns into the run's rollouts.parquet.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd
import torch
from openrlhf.models.utils import compute_reward
from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker
from openrlhf.trainer.ppo_utils.length_penalty import apply_length_penalties

from sparserl.estimators import list_estimators
from sparserl.methods.sidedata import CalibrationState, SideData, advantages
from sparserl.methods.spec import MethodSpec
from sparserl.values.priors import prior_for_method
from sparserl.values.support import LivePrior, SupportBuffer

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


def method_spec(args) -> MethodSpec | None:
    """The method spec the launcher put in ``--sparserl.spec`` (JSON), or None when absent. Keys a
    hand-written spec leaves out come from OpenRLHF's own flags (estimator, n_samples_per_prompt)
    and the spec defaults (`sparserl.methods.spec`)."""
    ns = getattr(args, "sparserl", None)
    raw = getattr(ns, "spec", None) if ns is not None else None
    if not raw:
        return None
    d = json.loads(raw) if isinstance(raw, str) else dict(raw)
    d.setdefault("name", getattr(ns, "method", None) or "openrlhf")
    d.setdefault("estimator", args.algo.advantage.estimator)
    d.setdefault("group_size", int(getattr(args.rollout, "n_samples_per_prompt", 1) or 1))
    d.setdefault("loss", {"type": "ppo_clip"})
    return MethodSpec.from_dict(d)


def is_registry_estimator(name: str) -> bool:
    return name in list_estimators(level="sequence")


def _side(labels: list[dict], key: str, what: str) -> np.ndarray:
    vals = []
    for i, d in enumerate(labels):
        v = d.get(key)
        if v is None:
            raise ValueError(f"rollout {i} (uid {d.get('uid')!r}): the dataset label has no {key!r}, "
                             f"needed by {what}; rebuild the prompt dataset with the launcher")
        vals.append(float(v))
    return np.asarray(vals, dtype=np.float64)


_LIVE_PRIORS: dict = {}


def live_prior(args, spec: MethodSpec) -> LivePrior:
    """The process's live prior of this run (built once, shared by the samples generator and the
    experience maker): the spec's prior kind with a support buffer of recent (uid, reward) pairs."""
    key = (spec.name, json.dumps(spec.to_dict(), sort_keys=True))
    if key not in _LIVE_PRIORS:
        seed = int(getattr(getattr(args, "sparserl", None), "seed", 0) or 0)
        if spec.prior.kind == "v0":  # one Ray actor holds V0 for every process (v0_server)
            from sparserl.engines.openrlhf.v0_server import remote_prior_from_args
            prior = remote_prior_from_args(args)
        else:
            prior = prior_for_method(dataclasses.asdict(spec.prior), None, seed)
        rng = np.random.default_rng(seed)
        _LIVE_PRIORS[key] = LivePrior(prior, SupportBuffer(spec.support.size, spec.support.context, rng))
    return _LIVE_PRIORS[key]


def step_prior(args, spec: MethodSpec, labels: list[dict], uids: Sequence[str], what: str) -> np.ndarray:
    """The prior p per rollout (or per prompt): the spec's constant, the labels' static value, or
    the live prior queried with the uids (one query per distinct uid)."""
    if spec.prior is not None and spec.prior.kind == "constant":
        return np.full(len(labels), float(spec.prior.p))
    if spec.prior is None or spec.prior.static:
        return _side(labels, "prior", what)
    uniq, inv = np.unique(np.asarray(uids), return_inverse=True)
    return live_prior(args, spec)(list(uniq))[inv.reshape(-1)]


def side_data(args, spec: MethodSpec, labels: list[dict], uids: Sequence[str]) -> SideData:
    """`SideData` of one step from the labels (one per rollout) and, for a non-static prior, the
    live prior."""
    side = SideData()
    if "prior" in spec.needs:
        side.prior = step_prior(args, spec, labels, uids, f"{spec.estimator} (prior kind {spec.prior.kind!r})")
    if "reference" in spec.needs:
        if labels and all(d.get("vhat") is not None for d in labels):
            side.vhat = _side(labels, "vhat", spec.estimator)
        else:
            side.phat = _side(labels, "phat", spec.estimator)
    return side


def harvest(args, uids: Sequence[str], rewards: np.ndarray, lengths: Sequence[int], step: int) -> None:
    """Append this step's rollouts to ``<run>/openrlhf/rollouts.jsonl`` (when the run dir is known)."""
    run_dir = getattr(getattr(args, "sparserl", None), "run_dir", None)
    if not run_dir:
        return
    from sparserl.engines.openrlhf.metrics import HARVEST_FILE
    path = Path(run_dir) / "openrlhf" / HARVEST_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        for u, r, n in zip(uids, rewards.tolist(), lengths):
            f.write(json.dumps({"prompt_id": str(u), "step": int(step), "reward": float(r), "length": int(n)}) + "\n")


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
        if spec is None or spec.estimator != name:  # launched by hand: the estimator's defaults
            spec = MethodSpec.from_dict({"name": name, "estimator": name, "loss": {"type": "ppo_clip"},
                                         "group_size": int(getattr(args.rollout, "n_samples_per_prompt", 1) or 1)})

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

        if not hasattr(self, "_calibration"):
            self._calibration, self._step = CalibrationState(), 0
        info: dict = {}
        # integer group codes: a hash (factorize), not the sort a string np.unique costs
        codes = pd.factorize(uids)[0]
        adv = advantages(spec, r, codes, side_data(args, spec, labels, uids), self._calibration, info=info)
        self.last_estimator_info = info
        self._step += 1
        if spec.prior is not None and not spec.prior.static:
            live_prior(args, spec).observe(uids.tolist(), r.tolist())
        lengths = [int(x) for e in experiences for x in (e.response_length.reshape(-1).tolist()
                   if getattr(e, "response_length", None) is not None else [0] * len(e.rewards))]
        harvest(args, uids.tolist(), r, lengths, self._step)

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


__all__ = ["LABEL_FIELDS", "SparseRLExperienceMaker", "decode_label", "encode_label", "experience_uids",
           "harvest", "is_registry_estimator", "live_prior", "method_spec", "side_data", "step_prior"]
