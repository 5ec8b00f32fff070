"""Le Critique's critic in OpenRLHF 0.11.2's own critic path, without a fork.

Paper: Le Critique: Privileged Value Functions for LLM Reinforcement Learning (arXiv 2608.16739),
Sections 3-5 (value baseline Eq. 8, privileged value function Eq. 12) and Appendix B.
OpenRLHF already has a critic (`CriticModelActor` in
`trainer/ray/ppo_critic.py`: the policy's body with a fresh scalar head, `get_llm_for_sequence_regression`),
evaluated in the experience maker and trained after each step. Its pieces we replace or add:

  layout      the critic reads  prompt + privileged context + response  (`values.critic_inputs`),
              the policy  prompt + response. In OpenRLHF's layout a sample is [prompt][response]
              right-padded; action index j (the log-prob of token j+1) is read from position j, so
              the first action index a0 = P - 1. The critic's row splices the Z context tokens in
              at position P: sequences/attention at P, action-aligned tensors (action mask,
              values, returns) at a0, so the critic's value of action j >= a0 sits at j + Z
              (`critic_row`, `values_to_actor`). The actor's tensors are never touched.
  context     which tokens (`privileged_contexts`): none; answer = `answer_context` of the label's
              "privileged" (else "answer") field; loo_group = `loo_group_context` of the other
              responses of the rollout's uid group and their rewards, in step order. The ids
              travel to the critic workers in the rollout's label JSON (key `CONTEXT_KEY`): labels
              are the only per-sample channel OpenRLHF carries to both actor and critic, and the
              actor reads nothing of them (its forward sees `Experience.sequences` only).
  values      p = sigmoid(head) in [0, 1] on action tokens (`critic_probs`): what the estimators read.
  loss        `BCEValueLoss`: binary cross-entropy on p against the returns (B.4), OpenRLHF's
              token-level aggregation; replaces the clipped-MSE `ValueLoss` for our methods.
  replay      `FifoReplay`: evaluated trajectories enter after their values were read (B.1: the
              experience maker evaluates, OpenRLHF appends to the critic afterwards); value batches
              are drawn uniformly without replacement; a trajectory leaves once used
              `replay_reuse` (N = 2) times (B.2); a FIFO bound of `REPLAY_CAPACITY_BATCHES`
              batches drops the oldest when updates lag pushes [our choice, as the local critic].
  warm-up     `warmup_updates` (20) value updates before the first policy update (B.3) through
              OpenRLHF's ``--critic.freezing_steps F``: `PPOTrainer.ppo_train` trains the actor only
              when ``global_steps > F`` (global_steps counts the steps before this one, from 0), so
              F + 1 steps are critic-only. Each warm-up step uses its fresh batch the most it may
              (N updates), so W = ceil(warmup_updates / N) steps, F = W - 1 (`critic_warmup`);
              afterwards `updates_per_step` updates per step. A value update is one critic
              optimiser step on ``--train.batch_size`` trajectories (the rollout batch with one
              mini-batch, the paper's "same rollout batch size").
              OpenRLHF appends every step's experiences to the actor too and clears the actor's
              buffer only in its fit, which frozen steps skip: the first policy fit would train on
              all warm-up rollouts. The experience maker tags warm-up rollouts' labels
              (`WARMUP_KEY`) and `SparseRLActorTrainer` drops them before the policy trains.
  trainers    `SparseRLCriticTrainer(CriticPPOTrainer)` and `SparseRLActorTrainer(ActorPPOTrainer)`,
              put where `CriticModelActor` / `PolicyModelActor` look them up by the worker hook
              (`patches`). The critic's: OpenRLHF's `training_step` (forward, loss, backward,
              optimiser step) on micro-batches we draw from the FIFO. Without our critic spec
              both are OpenRLHF's trainers unchanged.

  resume      the trainer's fit counter (warm-up) and FIFO (items, uses, RNG) are saved with each
              DeepSpeed checkpoint of the critic, in its tag folder (`sparserl_state`,
              `checkpoints.save_ckpt`), and restored from the folder DeepSpeed loaded on a resume
              (`checkpoints.load_critic_state`); the experience maker's step counter resumes from
              the actor's checkpoint (`experience.resume_step`).
``--train.dynamic_batch_enable`` is refused with a critic.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from sparserl.engines.openrlhf import checkpoints
from sparserl.engines.openrlhf.critic_warmup import updates_at, warmup_steps
from sparserl.engines.openrlhf.labels import decode_label, experience_uids, method_spec
from sparserl.values.critic_inputs import answer_context, loo_group_context

CONTEXT_KEY = "critic_ctx"  # label key: the critic's privileged token ids of the rollout
WARMUP_KEY = "critic_warmup"  # label key: a warm-up step's rollout (value training only)
REPLAY_CAPACITY_BATCHES = 4  # FIFO bound in value batches [our choice; as values.critic.Critic]
REPLAY_SEED = 0xC817


# --------------------------------------------------------------------------- spec


def critic_method(args):
    """The run's method spec when it trains our critic (a token-level estimator with a critic
    mapping), else None: OpenRLHF's own gae and every sequence estimator keep its paths."""
    from sparserl.methods.spec import MethodSpec

    spec = method_spec(args)
    name = args.algo.advantage.estimator
    if spec is None or spec.estimator != name:
        from sparserl.estimators import list_estimators
        if name == "gae" or name not in list_estimators("token"):
            return None  # OpenRLHF's own GAE (its MSE critic), or not a token-level estimator
        spec = MethodSpec.from_dict({"name": name, "estimator": name, "critic": {},
                                     "loss": {"type": "ppo_clip"},
                                     "group_size": int(getattr(args.rollout, "n_samples_per_prompt", 1) or 1)})
    return spec if spec.critic is not None and spec.needs_critic else None


# --------------------------------------------------------------------------- labels


def with_context(label: Any, ids: Sequence[int]) -> str:
    """The label with the critic's context ids added (a plain label becomes {"answer": ...})."""
    d = dict(decode_label(label))
    d[CONTEXT_KEY] = [int(x) for x in ids]
    return json.dumps(d, sort_keys=True)


def with_warmup_tag(label: Any) -> str:
    """The label marked as a warm-up rollout: the critic trains on it, the policy never does."""
    d = dict(decode_label(label))
    d[WARMUP_KEY] = 1
    return json.dumps(d, sort_keys=True)


def is_warmup(item) -> bool:
    """A replay item (its labels) from a critic warm-up step."""
    return any(bool(decode_label(lab).get(WARMUP_KEY)) for lab in (item.labels or []) if lab is not None)


def label_context(label: Any) -> list[int]:
    """The critic's context ids a label carries ([] when none)."""
    if label is None:
        return []
    return [int(x) for x in decode_label(label).get(CONTEXT_KEY) or []]


# --------------------------------------------------------------------------- layout


def action_start(action_mask_row: torch.Tensor) -> int | None:
    """First action index a0 of a row (= prompt length - 1), None for a row without actions."""
    nz = torch.nonzero(action_mask_row.reshape(-1), as_tuple=False)
    return int(nz[0, 0]) if len(nz) else None


def _splice(t: torch.Tensor, at: int, block: torch.Tensor) -> torch.Tensor:
    return torch.cat([t[:at], block.to(dtype=t.dtype, device=t.device), t[at:]])


def critic_row(sequences: torch.Tensor, attention_mask: torch.Tensor, action_mask: torch.Tensor,
               context: Sequence[int], *action_aligned: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """One unpadded sample in the critic's layout: (sequences, attention_mask, action_mask,
    *action_aligned) with `context` after the prompt. Sequence tensors get the ids (attention 1)
    at P = a0 + 1; action-aligned ones (action mask, values, returns: length L - 1) get zeros at a0,
    so the critic's value of action j >= a0 is at j + Z. No context or no actions: unchanged."""
    a0 = action_start(action_mask)
    z = torch.as_tensor(list(context), dtype=torch.long)
    if a0 is None or len(z) == 0:
        return (sequences, attention_mask, action_mask, *action_aligned)
    Z = len(z)
    out = [_splice(sequences, a0 + 1, z), _splice(attention_mask, a0 + 1, torch.ones(Z)),
           _splice(action_mask, a0, torch.zeros(Z))]
    out += [None if t is None else _splice(t, a0, torch.zeros(Z)) for t in action_aligned]
    return tuple(out)


def _pad_rows(rows: list[torch.Tensor], value) -> torch.Tensor:
    L = max(len(r) for r in rows)
    out = torch.full((len(rows), L), value, dtype=rows[0].dtype)
    for i, r in enumerate(rows):
        out[i, :len(r)] = r
    return out


def critic_batch(sequences: torch.Tensor, attention_mask: torch.Tensor, action_mask: torch.Tensor,
                 contexts: Sequence[Sequence[int]], pad_token_id: int) -> dict:
    """The critic's forward inputs of one right-padded micro-batch (sequences, attention_mask,
    action_mask), each row `critic_row` of the unpadded actor row (L = its attention sum)."""
    seqs, attns, acts = [], [], []
    for i, ctx in enumerate(contexts):
        L = int(attention_mask[i].sum())
        s, a, m = critic_row(sequences[i, :L], attention_mask[i, :L], action_mask[i, :L - 1], ctx)
        seqs.append(s), attns.append(a), acts.append(m)
    return {"sequences": _pad_rows(seqs, pad_token_id), "attention_mask": _pad_rows(attns, 0),
            "action_mask": _pad_rows(acts, 0).to(action_mask.dtype)}


def values_to_actor(values: torch.Tensor, action_mask: torch.Tensor, context_lengths: Sequence[int]) -> torch.Tensor:
    """The critic's values (critic layout, (B, Ac)) at the actor's action positions (B, A): action
    j >= a0 of row i reads j + Z_i; 0 off the action mask."""
    B, A = action_mask.shape
    j = torch.arange(A)[None, :].expand(B, A)
    shift = torch.zeros(B, A, dtype=torch.long)
    for i, Z in enumerate(context_lengths):
        a0 = action_start(action_mask[i])
        if Z and a0 is not None:
            shift[i, a0:] = int(Z)
    idx = (j + shift).clamp(max=values.shape[1] - 1)
    if values.shape[1] < A:  # the critic's rows are at least as long: only a batch without context
        values = torch.nn.functional.pad(values, (0, A - values.shape[1]))
    return values.gather(1, idx) * action_mask.to(values.dtype)


def critic_probs(values: torch.Tensor, action_mask: torch.Tensor) -> torch.Tensor:
    """p = sigmoid(critic head) on action tokens, 0 elsewhere: the values the estimators read."""
    return torch.sigmoid(values.float()) * action_mask.float()


def critic_item(item):
    """A single-sample actor-layout Experience (from OpenRLHF's replay buffer) in the critic's
    layout: its label's context ids spliced in (`critic_row`); what the critic trains on."""
    from openrlhf.trainer.ppo_utils.experience import Experience
    ctx = label_context(item.labels[0]) if item.labels else []
    seq, attn, act, values, returns = critic_row(item.sequences, item.attention_mask, item.action_mask,
                                                 ctx, item.values, item.returns)
    total = item.total_length
    if total is not None and ctx:
        total = total + len(ctx)
    return Experience(sequences=seq, attention_mask=attn, action_mask=act, values=values, returns=returns,
                      rewards=item.rewards, response_length=item.response_length, total_length=total,
                      labels=[], prompts=[], info={})


# --------------------------------------------------------------------------- privileged contexts


def _encode(tokenizer, text: str) -> list[int]:
    return [int(x) for x in tokenizer.encode(text, add_special_tokens=False)] if text else []


def _response_text(tokenizer, sequences_row, attention_row, action_row) -> str:
    L = int(attention_row.sum())
    a0 = action_start(action_row[:L - 1])
    if a0 is None:
        return ""
    return tokenizer.decode(sequences_row[a0 + 1:L].tolist(), skip_special_tokens=True)


def privileged_contexts(kind: str, samples_list: Sequence, tokenizer) -> list[list[list[int]]]:
    """The critic's context ids of every rollout, one list per micro-batch (`values.critic_inputs`):
    none -> []; answer -> the label's "privileged" (else "answer") as `answer_context`;
    loo_group -> the other responses of the rollout's uid group with their rewards, step order."""
    sizes = [len(s.sequences) for s in samples_list]
    if kind == "none":
        return [[[] for _ in range(n)] for n in sizes]
    flat: list[list[int]] = []
    if kind == "answer":
        for s in samples_list:
            for i, lab in enumerate(s.labels):
                d = decode_label(lab)
                ref = d.get("privileged") or d.get("answer")
                if ref is None or str(ref).strip() == "":
                    raise ValueError(f"critic.privileged 'answer': rollout with uid {d.get('uid')!r} has no "
                                     "'privileged' nor 'answer' in its dataset label; rebuild the prompt "
                                     "dataset with the launcher (labels carry the answer)")
                flat.append(_encode(tokenizer, answer_context(str(ref))))
    elif kind == "loo_group":
        if any(s.rewards is None for s in samples_list):
            raise ValueError("critic.privileged 'loo_group' needs each rollout's reward when the critic "
                             "evaluates (a remote reward, --reward.remote_url); a reward model scores too late")
        uids = experience_uids(samples_list)
        texts = [_response_text(tokenizer, s.sequences[i], s.attention_mask[i], s.action_mask[i])
                 for s in samples_list for i in range(len(s.sequences))]
        rewards = [float(r) for s in samples_list for r in s.rewards.reshape(-1).tolist()]
        members: dict[str, list[int]] = {}
        for k, u in enumerate(uids):
            members.setdefault(u, []).append(k)
        for k, u in enumerate(uids):
            grp = members[u]
            flat.append(_encode(tokenizer, loo_group_context([texts[m] for m in grp], [rewards[m] for m in grp],
                                                             grp.index(k))))
    else:
        raise ValueError(f"critic.privileged: unknown kind {kind!r}; known: none, answer, loo_group")
    out, a = [], 0
    for n in sizes:
        out.append(flat[a:a + n])
        a += n
    return out


# --------------------------------------------------------------------------- loss


class BCEValueLoss(torch.nn.Module):
    """Le Critique's value loss (B.4): binary cross-entropy on p = sigmoid(values) against the
    returns in [0, 1], aggregated as OpenRLHF aggregates ValueLoss (token-level: masked sum /
    the optimiser step's global token count x dp_size). Same call signature as `ValueLoss`;
    `old_values` is unused (no value clipping)."""

    def __init__(self, token_level_loss: bool = True):
        super().__init__()
        self.token_level_loss = token_level_loss

    def forward(self, values: torch.Tensor, old_values: torch.Tensor | None, returns: torch.Tensor,
                action_mask: torch.Tensor | None = None, dp_size: int = 1, batch_num_tokens=None,
                global_batch_size=None) -> torch.Tensor:
        from openrlhf.models.loss import aggregate_loss
        mask = torch.ones_like(values, dtype=torch.bool) if action_mask is None else action_mask.bool()
        tgt = returns.to(values.dtype)
        bad = mask & ((tgt < 0) | (tgt > 1))
        if bad.any():
            raise ValueError(f"BCE value loss: critic returns must lie in [0, 1], got {float(tgt[bad][0])}; "
                             "rewards are binary in Le Critique (drop reward shaping such as overlong penalties)")
        loss = torch.nn.functional.binary_cross_entropy_with_logits(values, torch.where(mask, tgt, 0.0),
                                                                    reduction="none")
        return aggregate_loss(loss, mask.to(values.dtype), token_level_loss=self.token_level_loss,
                              dp_size=dp_size, batch_num_tokens=batch_num_tokens,
                              global_batch_size=global_batch_size)


# --------------------------------------------------------------------------- replay


@dataclass
class _Entry:
    item: Any
    uses: int = 0


class FifoReplay:
    """B.2's replay: push evaluated trajectories; `draw(k)` takes k uniformly without replacement,
    counts a use on each and evicts those used `reuse` times; beyond `capacity` the oldest leave."""

    def __init__(self, reuse: int, capacity: int | None = None, seed: int = 0):
        if int(reuse) < 1:
            raise ValueError(f"critic.replay_reuse must be >= 1, got {reuse!r}")
        self.reuse, self.capacity = int(reuse), (None if capacity is None else int(capacity))
        self.entries: list[_Entry] = []
        self.rng = np.random.default_rng((int(seed), REPLAY_SEED))
        self.evicted_unused = 0  # dropped by the FIFO bound before their N-th use (diagnostic)

    def __len__(self) -> int:
        return len(self.entries)

    def push(self, items: Sequence) -> None:
        self.entries += [_Entry(it) for it in items]
        if self.capacity is not None and len(self.entries) > self.capacity:
            self.evicted_unused += len(self.entries) - self.capacity
            del self.entries[:len(self.entries) - self.capacity]

    def state_dict(self, item_state=lambda it: it) -> dict:
        """The replay as it stands (items through `item_state`, uses, RNG, counters): a resume
        draws what an uninterrupted run would."""
        return {"reuse": self.reuse, "capacity": self.capacity, "evicted_unused": self.evicted_unused,
                "rng": self.rng.bit_generator.state,
                "entries": [{"item": item_state(e.item), "uses": e.uses} for e in self.entries]}

    def load_state_dict(self, st: dict, item=lambda x: x) -> None:
        if (int(st["reuse"]), st["capacity"]) != (self.reuse, self.capacity):
            raise ValueError(f"critic replay state: saved with reuse {st['reuse']} and capacity {st['capacity']}, "
                             f"this run has {self.reuse} and {self.capacity} (critic.replay_reuse or the value "
                             "batch changed); resume with the saved settings or start the run over")
        self.entries = [_Entry(item(e["item"]), int(e["uses"])) for e in st["entries"]]
        self.rng.bit_generator.state = st["rng"]
        self.evicted_unused = int(st["evicted_unused"])

    def draw(self, k: int) -> list:
        k = min(int(k), len(self.entries))
        pick = np.sort(self.rng.choice(len(self.entries), size=k, replace=False)) if k else []
        out = []
        for i in pick:
            e = self.entries[int(i)]
            e.uses += 1
            out.append(e.item)
        self.entries = [e for e in self.entries if e.uses < self.reuse]
        return out


# --------------------------------------------------------------------------- the critic trainer


def _device():
    return torch.cuda.current_device() if torch.cuda.is_available() else "cpu"


def _experience_fields(item) -> dict:
    """A replay item's dataclass fields (tensors, lists): saved without pickling OpenRLHF's class."""
    import dataclasses
    return {f.name: getattr(item, f.name) for f in dataclasses.fields(item)}


def _make_trainer_class():
    from openrlhf.trainer.ppo_utils.experience import make_experience_batch
    from openrlhf.trainer.ray import ppo_critic
    from openrlhf.utils.loss_utils import iter_grad_accum_global_norm

    base = ppo_critic.CriticPPOTrainer
    while getattr(base, "_sparserl_critic", False):  # already patched: subclass OpenRLHF's own
        base = base.__bases__[0]

    class SparseRLCriticTrainer(base):
        """OpenRLHF's CriticPPOTrainer with Le Critique's loss, replay and warm-up (module doc).
        Without our critic spec (OpenRLHF's own gae) everything is the parent's."""

        _sparserl_critic = True

        def __init__(self, strategy, *args, **kwargs):
            super().__init__(strategy, *args, **kwargs)
            self.sparserl_setup()

        def sparserl_setup(self) -> None:
            """Loss, FIFO and counters from the run's spec (None: OpenRLHF's critic as it is)."""
            self.method = critic_method(self.args)
            if self.method is None:
                return
            if self.args.train.dynamic_batch_enable:
                raise ValueError("--train.dynamic_batch_enable is not supported with Le Critique's critic "
                                 "(value batches are drawn from the FIFO replay); drop the flag")
            self.critic_loss_fn = BCEValueLoss()
            self.value_batch = int(self.micro_train_batch_size) * max(1, int(self.strategy.accumulated_gradient))
            self.fifo = FifoReplay(self.method.critic.replay_reuse, REPLAY_CAPACITY_BATCHES * self.value_batch,
                                   seed=int(getattr(self.args.train, "seed", 0) or 0))
            self.fits = 0
            self.value_updates = 0
            # saved beside each DeepSpeed checkpoint of the critic, restored from the one it loaded
            checkpoints.attach_state(self.critic, self.sparserl_state)
            st = checkpoints.load_critic_state(self.args, checkpoints.rank_of(self.strategy))
            if st is not None:
                self.sparserl_load(st)

        def sparserl_state(self) -> dict:
            """Fit counter (the warm-up's progress), value updates and FIFO replay (module doc: resume)."""
            return {"fits": self.fits, "value_updates": self.value_updates,
                    "fifo": self.fifo.state_dict(_experience_fields)}

        def sparserl_load(self, st: dict) -> None:
            from openrlhf.trainer.ppo_utils.experience import Experience
            self.fits, self.value_updates = int(st["fits"]), int(st["value_updates"])
            self.fifo.load_state_dict(st["fifo"], lambda d: Experience(**d))

        def _min_over_ranks(self, n: int) -> int:
            return int(round(-float(self.strategy.all_reduce(-float(n), op="max"))))

        def ppo_train(self):
            if getattr(self, "method", None) is None:
                return super().ppo_train()
            # the step's evaluated trajectories (OpenRLHF appended them after make_experience): FIFO
            self.fifo.push([critic_item(it) for it in self.replay_buffer.items])
            self.replay_buffer.items.clear()
            planned = updates_at(self.method.critic, self.fits)
            warm = self.fits < warmup_steps(self.method.critic)
            self.fits += 1
            device, m = _device(), int(self.micro_train_batch_size)
            gas = max(1, int(self.strategy.accumulated_gradient))
            status_list, done = [], 0
            for _ in range(planned):
                # every rank takes the same number of full value batches (DeepSpeed accumulation)
                if self._min_over_ranks(len(self.fifo)) < self.value_batch:
                    break
                batch = self.fifo.draw(self.value_batch)
                micro = [make_experience_batch(batch[a:a + m]) for a in range(0, len(batch), m)]
                for step, (exp, info) in enumerate(iter_grad_accum_global_norm(
                        micro, self.strategy, gas, lambda e: e.action_mask)):
                    exp.to_device(device)
                    status_list.append(self.strategy.all_reduce(self.training_step(exp, step, info)))
                done += 1
            self.value_updates += done
            out = {}
            if status_list:
                out = {k: sum(s[k] for s in status_list) / len(status_list) for k in status_list[0]}
            out.update({"critic_updates": float(done), "critic_updates_total": float(self.value_updates),
                        "critic_replay_size": float(len(self.fifo)), "critic_warmup": float(warm)})
            return out

    SparseRLCriticTrainer.__module__ = __name__
    SparseRLCriticTrainer.__qualname__ = "SparseRLCriticTrainer"
    return SparseRLCriticTrainer


def _make_actor_trainer_class():
    from openrlhf.trainer.ray import ppo_actor

    base = ppo_actor.ActorPPOTrainer
    while getattr(base, "_sparserl_actor", False):
        base = base.__bases__[0]

    class SparseRLActorTrainer(base):
        """OpenRLHF's ActorPPOTrainer that never trains on a critic warm-up step's rollouts
        (`WARMUP_KEY` in their labels; module doc). Untagged runs: the parent, unchanged."""

        _sparserl_actor = True

        def ppo_train(self, kl_ctl: float):
            items = self.replay_buffer.items
            keep = [it for it in items if not is_warmup(it)]
            self.dropped_warmup = len(items) - len(keep)
            if self.dropped_warmup:
                items[:] = keep
            if not items:
                return {}
            return super().ppo_train(kl_ctl)

    SparseRLActorTrainer.__module__ = __name__
    SparseRLActorTrainer.__qualname__ = "SparseRLActorTrainer"
    return SparseRLActorTrainer


_LAZY: dict = {}
_FACTORIES = {"SparseRLCriticTrainer": _make_trainer_class, "SparseRLActorTrainer": _make_actor_trainer_class}


def __getattr__(name: str):
    """The trainer subclasses are built on first use: importing OpenRLHF's ppo_critic/ppo_actor
    here at import time would cycle with the worker hook, which resolves these classes right after
    those modules load."""
    if name in _FACTORIES:
        if name not in _LAZY:
            _LAZY[name] = _FACTORIES[name]()
        return _LAZY[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["BCEValueLoss", "CONTEXT_KEY", "FifoReplay", "SparseRLActorTrainer", "SparseRLCriticTrainer",
           "WARMUP_KEY", "action_start", "critic_batch", "critic_item", "critic_method", "critic_probs",
           "critic_row", "is_warmup", "label_context", "privileged_contexts", "values_to_actor", "with_context",
           "with_warmup_tag"]
