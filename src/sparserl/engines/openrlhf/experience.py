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
  * the method trains Le Critique's critic (a token-level estimator: gae, tether,
    tether_bucketed, evpo, with a ``critic`` mapping; `critic.critic_method`) -> the token path
    below;
  * any other name (OpenRLHF's gae, reinforce, reinforce_baseline, group_norm, flash_reinforce)
    -> ``super()``, untouched. rloo and dr_grpo exist in both; ours wins (same formula on equal
    groups, and it also handles uneven groups and any order). "gae" without our critic spec is
    OpenRLHF's own GAE with its MSE critic.

Token path (Le Critique; `critic` has the layout, the loss, the replay and the warm-up):
  make_experience  OpenRLHF's, except that the critic group is dispatched the critic's own rows
                   (prompt + privileged context + response; the actor, the reference and the
                   reward model get OpenRLHF's sequences untouched) and its values are mapped
                   back to the actor's action positions as p = sigmoid(head);
  advantages       `advantages(spec, R, uid codes, SideData(values=p, mask), state)` on the
                   rollouts' action tokens compacted into right-padded rows (lambda_GAE and
                   Tether's buckets from `spec.estimator_options(max_new_tokens)`, Tether's rho
                   carried in the CalibrationState); returns = the critic's targets (R_i on every
                   action token for lambda_target = 1); no whitening. The rollouts of a critic
                   warm-up step are tagged in their labels: the policy never trains on them.

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
dataset with ``label`` = a JSON object (`labels.encode_label`):
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

Resume (``--ckpt.load_enable``): the step counter starts at the ``global_step`` of the DeepSpeed
checkpoint the actors loaded (`resume_step`), and the harvest keeps the rows up to that step and
drops later ones, which the resumed run writes again (`keep_harvest`). What an estimator carries
from step to step (`CalibrationState`: BASIS's previous batch, Tether's EMA rho) and the live
prior's context RNG are appended after each step to ``<run>/openrlhf/estimator_state.jsonl``;
a resumed run restores them as its checkpoint's step left them, with the support buffer rebuilt
from the harvest (`restore_support`). The live prior restores when it is first built, which
under OSLA is before the experience maker's first step, so the launcher tells it the step
(``--sparserl.resume_step``).
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import os
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
import torch
from openrlhf.models.utils import compute_reward
from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker
from openrlhf.trainer.ppo_utils.length_penalty import apply_length_penalties

from sparserl.engines.openrlhf.critic import (critic_batch, critic_method, critic_probs, privileged_contexts,
                                              values_to_actor, with_context, with_warmup_tag)
from sparserl.engines.openrlhf.critic_warmup import warmup_steps
from sparserl.engines.openrlhf.labels import decode_label, experience_uids, method_spec
from sparserl.engines.openrlhf.syncwatch import check_vllm_kl, step_vllm_kl
from sparserl.estimators import list_estimators
from sparserl.estimators.gae import gae, terminal_rewards
from sparserl.estimators.tether import explained_variance
from sparserl.methods.sidedata import CalibrationState, SideData, advantages, flatten_info
from sparserl.methods.spec import MethodSpec
from sparserl.values.priors import prior_for_method
from sparserl.values.support import LivePrior, SupportBuffer

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
# a test's control run (tests/engines/openrlhf/test_openrlhf_cpu.py): "1" negates every advantage, so the policy
# unlearns; read in the experience maker's process, which inherits the launcher's environment
NEGATE_ENV = "SPARSERL_CONTROL_NEGATE_ADVANTAGES"
STATE_FILE = "estimator_state.jsonl"  # under <run>/openrlhf/: what each step carries into the next


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
        live = LivePrior(prior, SupportBuffer(spec.support.size, spec.support.context, rng))
        restore_support(args, live, int(getattr(getattr(args, "sparserl", None), "resume_step", 0) or 0))
        _LIVE_PRIORS[key] = live
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


def _run_file(args, name: str) -> Path | None:
    """``<run>/openrlhf/<name>``, or None when the run dir is unknown (launched by hand)."""
    run_dir = getattr(getattr(args, "sparserl", None), "run_dir", None)
    return Path(run_dir) / "openrlhf" / name if run_dir else None


def harvest_path(args) -> Path | None:
    """``<run>/openrlhf/rollouts.jsonl`` (`_run_file`)."""
    from sparserl.engines.openrlhf.metrics import HARVEST_FILE
    return _run_file(args, HARVEST_FILE)


def state_path(args) -> Path | None:
    """``<run>/openrlhf/estimator_state.jsonl`` (`_run_file`)."""
    return _run_file(args, STATE_FILE)


def _append(path: Path | None, rows: Sequence[dict]) -> None:
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write("".join(json.dumps(row) + "\n" for row in rows))


def _rows(path: Path | None) -> list[tuple[str, dict]]:
    """(line, row) of a step-keyed JSONL file. A last line that does not parse is a kill during its
    append and is dropped; any other names the file and the fix."""
    if path is None or not path.exists():
        return []
    lines = [ln for ln in path.read_text().splitlines(keepends=True) if ln.strip()]
    out = []
    for i, line in enumerate(lines):
        try:
            row = json.loads(line)
            int(row["step"])
        except (ValueError, KeyError, TypeError) as e:
            if i == len(lines) - 1:
                break
            raise ValueError(f"{path}: line {i + 1} is not a JSON row with a 'step' ({e}); delete the "
                             "run's openrlhf/ and ckpt/ folders to start it over") from None
        out.append((line, row))
    return out


def _keep_rows(path: Path | None, last_step: int) -> None:
    """Keep the rows of steps <= `last_step` and drop the rest, atomically."""
    if path is None or not path.exists():
        return
    keep = [line for line, row in _rows(path) if int(row["step"]) <= last_step]
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(keep))
    os.replace(tmp, path)  # atomic: a kill here leaves the old file or the new one


def harvest(args, uids: Sequence[str], rewards: np.ndarray, lengths: Sequence[int], step: int) -> None:
    """Append this step's rollouts to ``<run>/openrlhf/rollouts.jsonl`` (when the run dir is known)."""
    _append(harvest_path(args), [{"prompt_id": str(u), "step": int(step), "reward": float(r), "length": int(n)}
                                 for u, r, n in zip(uids, rewards.tolist(), lengths)])


def keep_harvest(args, last_step: int) -> None:
    """Keep the harvested rows of steps <= `last_step` (the checkpoint the run resumes from; 0 on a
    fresh start) and drop the rest: a killed run's rows after its checkpoint are regenerated."""
    _keep_rows(harvest_path(args), last_step)


def save_state(args, step: int, calibration: CalibrationState, live: LivePrior | None) -> None:
    """Append the state step `step` carries into the next: the estimator's calibration and the
    live prior's context RNG (its support pairs are the harvest's last rows)."""
    _append(state_path(args), [{"step": int(step), "calibration": calibration.to_json(),
                                "support_rng": None if live is None else live.support.rng.bit_generator.state}])


def saved_state(args, step: int) -> dict | None:
    """The state saved after `step` (None: step 0, or a run that saved none)."""
    if step <= 0:
        return None
    rows = [row for _line, row in _rows(state_path(args)) if int(row["step"]) == step]
    return rows[-1] if rows else None


def restore_support(args, live: LivePrior, step: int) -> None:
    """A live prior as it was after `step`: the harvest's last `size` (uid, reward) pairs of steps
    <= `step`, in order, and the context RNG saved then."""
    row = saved_state(args, step)
    if row is None:
        return
    pairs = [(r["prompt_id"], float(r["reward"])) for _line, r in _rows(harvest_path(args)) if int(r["step"]) <= step]
    live.support.extend(pairs[-live.support.pairs.maxlen:])
    if row.get("support_rng") is not None:
        live.support.rng.bit_generator.state = row["support_rng"]


def resume_step(maker) -> int:
    """The OpenRLHF global step this trainer process continues after: the ``global_step`` of the
    DeepSpeed checkpoint the actor group loaded, asked exactly as `PPOTrainer.init_checkpoint_states`
    (OpenRLHF 0.11.2) asks it (`PolicyModelActor.get_checkpoint_states`); 0 on a fresh start."""
    ckpt = getattr(maker.strategy.args, "ckpt", None)
    if ckpt is None or not getattr(ckpt, "load_enable", False) \
            or not os.path.exists(os.path.join(ckpt.path, "_actor")):
        return 0
    import ray
    states = ray.get(maker.actor_model_group.async_run_method(method_name="get_checkpoint_states"))[0]
    return int((states or {}).get("global_step", 0))


# --------------------------------------------------------------------------- the maker


class SparseRLExperienceMaker(RemoteExperienceMaker):
    """RemoteExperienceMaker whose advantages come from `sparserl.estimators` (see module doc)."""

    _critic_forward: dict | None = None  # the critic's own inputs while make_experience runs

    # ---------------------------------------------------------------- critic inputs (Le Critique)

    def _dispatch_forward(self, group, sync_condition, **kwargs):
        """OpenRLHF's dispatch; the critic group gets its privileged sequences instead of the
        actor's (every other group, the actor first of all, gets OpenRLHF's kwargs untouched)."""
        if self._critic_forward is not None and group is not None and group is self.critic_model_group:
            kwargs = {**kwargs, **self._critic_forward}
        return super()._dispatch_forward(group, sync_condition, **kwargs)

    @torch.no_grad()
    def make_experience(self, samples_list):
        """`_make_experience`, then the weight sync's check (`syncwatch`): each rollout's vllm_kl
        in its info, and the step failed when their token mean passes --sparserl.vllm_kl_max."""
        exps = self._make_experience(samples_list)
        if not exps:
            return exps
        if not hasattr(self, "_sync_step"):  # OpenRLHF's global step, from the checkpoint on a resume
            self._sync_step = resume_step(self)
        self._sync_step += 1
        bound = getattr(getattr(self.strategy.args, "sparserl", None), "vllm_kl_max", None)
        if bound is None and any(getattr(e, "rollout_log_probs", None) is None for e in exps):
            return exps  # not started by our launcher (it always passes the bound) and no vLLM: nothing to watch
        check_vllm_kl(step_vllm_kl(exps), bound, self._sync_step)
        return exps

    def _make_experience(self, samples_list):
        """OpenRLHF's make_experience; with our critic, the critic evaluates prompt + privileged
        context + response (`critic.critic_batch`), its values come back at the actor's action
        positions (`critic.values_to_actor`) as p = sigmoid(head) (`critic.critic_probs`), and the
        context ids go into the labels for the critic's training (`critic.CONTEXT_KEY`)."""
        spec = critic_method(self.strategy.args)
        if spec is None or self.critic_model_group is None or not samples_list:
            return super().make_experience(samples_list)
        contexts = privileged_contexts(spec.critic.privileged, samples_list, self.tokenizer)
        if any(c for ctx in contexts for c in ctx):
            pad = getattr(self.tokenizer, "pad_token_id", None)
            pad = int(pad if pad is not None else (getattr(self.tokenizer, "eos_token_id", None) or 0))
            batches = [critic_batch(s.sequences, s.attention_mask, s.action_mask, ctx, pad)
                       for s, ctx in zip(samples_list, contexts)]
            self._critic_forward = {k: [b[k] for b in batches] for k in ("sequences", "attention_mask", "action_mask")}
            for s, ctx in zip(samples_list, contexts):
                s.labels = [with_context(lab, c) if c else lab for lab, c in zip(s.labels, ctx)]
        try:
            exps = super().make_experience(samples_list)
        finally:
            self._critic_forward = None
        for e, ctx in zip(exps, contexts):
            e.values = critic_probs(values_to_actor(e.values, e.action_mask, [len(c) for c in ctx]), e.action_mask)
        return exps

    # ---------------------------------------------------------------- advantages

    def _step_rewards(self, experiences):
        """Rewards of the step (>= fp32, OpenRLHF's length penalties, clip range), float64 numpy,
        with the per-experience lengths, the uids and the decoded labels."""
        args = self.strategy.args
        for e in experiences:
            e.rewards = e.rewards.to(torch.promote_types(e.rewards.dtype, torch.float32))
        apply_length_penalties(experiences, args)
        exp_len = [len(e.rewards) for e in experiences]
        raw = torch.cat([e.rewards.reshape(-1) for e in experiences]).double()
        clip = getattr(args.reward, "clip_range", None)
        if clip:
            raw = raw.clamp(min=clip[0], max=clip[1])
        uids = np.asarray(experience_uids(experiences))
        labels = [decode_label(lab) for lab in itertools.chain.from_iterable(
            (e.labels if e.labels else [None] * n) for e, n in zip(experiences, exp_len))]
        return raw.numpy(), exp_len, uids, labels

    def _start(self) -> None:
        """Once per process, before its first step: the step counter from the checkpoint the run
        resumes from (`resume_step`), the harvest and the saved states cut to it, and the
        estimator's calibration as that step left it (fresh on a fresh start)."""
        if hasattr(self, "_calibration"):
            return
        args = self.strategy.args
        self._step = resume_step(self)
        told = getattr(getattr(args, "sparserl", None), "resume_step", None)
        if told is not None and int(told) != self._step:  # the live prior restored from the launcher's step
            raise RuntimeError(f"the launcher resumes after step {told} (--sparserl.resume_step, from "
                               f"{args.ckpt.path}/_actor/latest) but the actors loaded step {self._step}")
        row = saved_state(args, self._step)
        if row is None and self._step > 0:  # said once here, for the live prior's restore too
            print(f"[sparserl] no estimator state of step {self._step} in {state_path(args)}: the "
                  "estimator's carried state and the live prior's support start empty", flush=True)
        self._calibration = CalibrationState.from_json(row["calibration"]) if row else CalibrationState()
        keep_harvest(args, self._step)
        _keep_rows(state_path(args), self._step)

    def _observe(self, args, spec, experiences, uids, r):
        """After the estimator: live prior, harvest, and the per-rollout group diagnostics."""
        self._step += 1
        live = live_prior(args, spec) if spec.prior is not None and not spec.prior.static else None
        if live is not None:
            live.observe(uids.tolist(), r.tolist())
        lengths = [int(x) for e in experiences for x in (e.response_length.reshape(-1).tolist()
                   if getattr(e, "response_length", None) is not None else [0] * len(e.rewards))]
        harvest(args, uids.tolist(), r, lengths, self._step)
        save_state(args, self._step, self._calibration, live)  # after the harvest: a resume reads both
        # per-rollout diagnostics (group size and reward std of the rollout's uid group)
        _, inv, counts = np.unique(uids, return_inverse=True, return_counts=True)
        inv = inv.reshape(-1)
        mean = np.bincount(inv, weights=r) / counts
        ss = np.bincount(inv, weights=(r - mean[inv]) ** 2)
        std = np.sqrt(np.divide(ss, counts - 1, out=np.zeros_like(ss), where=counts > 1))
        return std[inv], counts[inv].astype(np.float64)

    @torch.no_grad()
    def compute_advantages_and_returns(self, experiences):
        """`_advantages_and_returns`; with the test-only control `NEGATE_ENV` = 1, negated."""
        experiences = self._advantages_and_returns(experiences)
        if os.environ.get(NEGATE_ENV) == "1":  # tests/engines/openrlhf/test_openrlhf_cpu.py: reward must fall
            print(f"[sparserl] {NEGATE_ENV}=1: advantages negated (a test's control run, never a result)", flush=True)
            for e in experiences:
                e.advantages = -e.advantages
        return experiences

    def _advantages_and_returns(self, experiences):
        args = self.strategy.args
        name = args.algo.advantage.estimator
        cspec = critic_method(args)
        if cspec is not None:
            return self._token_advantages(experiences, cspec) if experiences else experiences
        if not is_registry_estimator(name):
            return super().compute_advantages_and_returns(experiences)
        if not experiences:
            return experiences
        spec = method_spec(args)
        if spec is None or spec.estimator != name:  # launched by hand: the estimator's defaults
            spec = MethodSpec.from_dict({"name": name, "estimator": name, "loss": {"type": "ppo_clip"},
                                         "group_size": int(getattr(args.rollout, "n_samples_per_prompt", 1) or 1)})

        r, exp_len, uids, labels = self._step_rewards(experiences)
        self._start()
        info: dict = {}
        # integer group codes: a hash (factorize), not the sort a string np.unique costs
        codes = pd.factorize(uids)[0]
        adv = advantages(spec, r, codes, side_data(args, spec, labels, uids), self._calibration, info=info)
        self.last_estimator_info = info
        std, size = self._observe(args, spec, experiences, uids, r)

        adv_t = torch.from_numpy(adv)
        for e, a, gstd, gsize in zip(experiences, adv_t.split(exp_len), torch.from_numpy(std).split(exp_len),
                                     torch.from_numpy(size).split(exp_len)):
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

    def _token_advantages(self, experiences, spec: MethodSpec):
        """Token-level estimators (gae, tether, tether_bucketed, evpo) on the critic's p.

        Each rollout's action tokens, in order, become one row of the estimator's right-padded
        (N, T) arrays (OpenRLHF's rows start at the prompt length, and several action spans are
        possible); advantages and the critic's returns go back to the same positions. Returns:
        lambda_target = 1 (Monte Carlo) gives R_i on every action token, else GAE(lambda_target)
        on p. No whitening. The KL must be a loss (--algo.kl.use_loss), not in the reward."""
        args = self.strategy.args
        r, exp_len, uids, labels = self._step_rewards(experiences)
        if ((r < 0) | (r > 1)).any():
            bad = float(r[(r < 0) | (r > 1)][0])
            raise ValueError(f"method {spec.name}: the critic's BCE targets need rewards in [0, 1], got {bad}; "
                             "drop reward shaping (overlong penalty, --reward.stop_properly_penalty_coef)")
        if self.kl_ctl.value and any(e.kl is not None and bool((e.kl != 0).any()) for e in experiences):
            raise ValueError(f"method {spec.name}: token-level estimators take the KL as a loss; set "
                             "--algo.kl.use_loss (the flags do so for kl_coef > 0), not a KL reward")
        if any(e.values is None for e in experiences):
            raise ValueError(f"method {spec.name}: estimator {spec.estimator!r} needs critic values, but the "
                             "experiences have none; the run needs --critic.model_name_or_path (flags set it)")
        rows = [(e, i, torch.nonzero(e.action_mask[i], as_tuple=False).reshape(-1))
                for e in experiences for i in range(len(e.rewards))]
        T = max([1] + [len(p) for _e, _i, p in rows])
        V = np.zeros((len(rows), T))
        mask = np.zeros((len(rows), T), dtype=bool)
        for k, (e, i, pos) in enumerate(rows):
            V[k, :len(pos)] = e.values[i, pos].double().numpy()
            mask[k, :len(pos)] = True

        self._start()
        side = side_data(args, spec, labels, uids)
        side.values, side.mask = V, mask
        info: dict = {}
        codes = pd.factorize(uids)[0]
        L = getattr(args.rollout, "max_new_tokens", None) or getattr(getattr(args, "data", None), "max_len", None)
        adv = advantages(spec, r, codes, side, self._calibration, info=info, response_length=L)
        lam_t = float(spec.critic.lam_target)
        if lam_t == 1.0:  # Monte Carlo: R_i on every action token
            ret = np.where(mask, r[:, None], 0.0)
        else:
            ret = gae(terminal_rewards(r, mask), V, mask, 1.0, lam_t)[1]
        self.last_estimator_info = info
        batch_scalars = {k: v for k, v in flatten_info(info).items() if np.isfinite(v)}
        ev = explained_variance(r[:, None], V, mask)
        if np.isfinite(ev):
            batch_scalars["critic_ev"] = float(ev)
        if self._step < warmup_steps(spec.critic):  # a critic-only step: the policy must not train on it
            for e in experiences:
                e.labels = [with_warmup_tag(lab) for lab in e.labels]
        std, size = self._observe(args, spec, experiences, uids, r)

        for e in experiences:
            e.advantages = torch.zeros(e.action_mask.shape, dtype=torch.float32)
            e.returns = torch.zeros(e.action_mask.shape, dtype=torch.float32)
        for k, (e, i, pos) in enumerate(rows):
            e.advantages[i, pos] = torch.from_numpy(adv[k, :len(pos)]).float()
            e.returns[i, pos] = torch.from_numpy(ret[k, :len(pos)]).float()
        r_t = torch.from_numpy(r)
        n_tok = mask.sum(axis=1)
        p_mean = torch.from_numpy(np.divide((V * mask).sum(axis=1), n_tok, out=np.zeros(len(rows)), where=n_tok > 0))
        for e, rr, gstd, gsize, pm in zip(experiences, r_t.split(exp_len), torch.from_numpy(std).split(exp_len),
                                          torch.from_numpy(size).split(exp_len), p_mean.split(exp_len)):
            e.info["return"] = rr.float()
            e.info["group_reward_std"] = gstd.float()
            e.info["group_size"] = gsize.float()
            e.info["critic_value_mean"] = pm.float()
            # batch scalars as per-sample constants: OpenRLHF logs info means as train/<key>,
            # the names the local engine's metrics use (Figures 4 and 6 read them)
            for k, v in batch_scalars.items():
                e.info[k] = torch.full((len(rr),), v, dtype=torch.float32)
            e.kl = None
        return experiences


__all__ = ["NEGATE_ENV", "SparseRLExperienceMaker",
           "harvest", "is_registry_estimator", "keep_harvest", "live_prior", "restore_support",
           "resume_step", "save_state", "saved_state", "side_data", "state_path", "step_prior"]
