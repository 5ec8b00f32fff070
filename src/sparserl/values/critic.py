"""Le Critique's critic for the local trainer: value model, FIFO replay, BCE training.

Paper: Le Critique: Privileged Value Functions for LLM Reinforcement Learning (arXiv 2608.16739),
Appendix B.
  B.1 evaluate before train: a batch's values (for its advantages) come from the critic as it is
      before the batch enters the replay, so no advantage uses a critic fitted to its own returns;
  B.2 FIFO replay: evaluated trajectories are pushed, value batches drawn uniformly without
      replacement, a trajectory is evicted once used `replay_reuse` (N = 2) times;
  B.3 the value model is a copy of the policy with a new scalar head; 20 warm-up updates run
      before the first policy update (the trainer drives them);
  B.4 binary cross-entropy on p = sigmoid(head) in [0, 1]; p is the value the estimators read.
Sequences are laid out by `values.critic_inputs` (prompt + privileged + response); the value of
response token t is read at `start + t`.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np
import torch



class ValueModel(torch.nn.Module):
    """The policy's body (a deep copy, `hidden` states) and a new scalar head (B.3)."""

    def __init__(self, policy: torch.nn.Module, seed: int):
        super().__init__()
        self.body = copy.deepcopy(policy)
        d = self.body.hidden(torch.zeros((1, 1), dtype=torch.long)).shape[-1]
        self.head = torch.nn.Linear(d, 1)
        g = torch.Generator().manual_seed(int(seed))
        with torch.no_grad():  # small random head, zero bias: p = 0.5 +- a little at the start
            self.head.weight.copy_(torch.randn(1, d, generator=g) / (10 * math.sqrt(d)))
            self.head.bias.zero_()

    def parameters_to_train(self):
        # the LM head is not read (tied to the embeddings in the tiny policies: those train
        # through the body), so it stays out of the optimiser
        return [p for n, p in self.named_parameters() if not n.startswith("body.lm_head")]

    def forward(self, ids: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
        """Logits of p at every position, (B, L)."""
        return self.head(self.body.hidden(ids, attn)).squeeze(-1)


def _pad(seqs, pad_id: int):
    L = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), L), pad_id, dtype=torch.long)
    attn = torch.zeros((len(seqs), L), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.as_tensor(s, dtype=torch.long)
        attn[i, :len(s)] = 1
    return ids, attn


def _gather(logits: torch.Tensor, starts, lengths, T: int):
    """(N, T) of logits at start_i + t for t < length_i (0 elsewhere) and the bool mask."""
    st = torch.as_tensor(list(starts), dtype=torch.long)
    ln = torch.as_tensor(list(lengths), dtype=torch.long)
    t = torch.arange(T)
    mask = t[None] < ln[:, None]
    pos = torch.where(mask, st[:, None] + t[None], 0)
    return torch.where(mask, logits.gather(1, pos), torch.zeros((), dtype=logits.dtype)), mask


@dataclass
class Entry:
    seq: list  # critic token ids
    start: int  # position of the value of response token 0
    target: np.ndarray  # one target per response token (lambda_target = 1: the return R)
    uses: int = 0


class Critic:
    """Value model + optimiser + FIFO replay (module docstring)."""

    def __init__(self, policy: torch.nn.Module, spec, pad_id: int, seed: int, batch_size: int,
                 micro_batch: int = 256, capacity_batches: int = 4, optimizer=None,
                 length_chunks: int = 1, share_prompts: bool = False):
        """`optimizer(params, lr)`: the engine's optimiser (the local trainer's AdamW); default
        torch.optim.AdamW without weight decay. `length_chunks`: each micro-batch's forward (and
        backward) in that many length-sorted chunks, each padded to its own longest sequence: the
        same values and gradient, to float rounding, for less compute (`rl.length_chunks`).
        `share_prompts`: rows with the same prompt and privileged context run it once
        (`Qwen3LM.hidden_shared`, `rl.share_prompts`): a group's G rows at one prefix's cost."""
        self.spec, self.pad_id = spec, int(pad_id)
        self.model = ValueModel(policy, seed).eval()
        make = optimizer or (lambda params, lr: torch.optim.AdamW(params, lr=lr, weight_decay=0.0))
        self.opt = make(self.model.parameters_to_train(), spec.lr)
        self.batch_size, self.micro_batch = int(batch_size), int(micro_batch)
        self.length_chunks = max(1, int(length_chunks))
        self.share_prompts = bool(share_prompts) and hasattr(self.model.body, "hidden_shared")
        # bounded FIFO: with reuse N = 2 it never fills at one update per step; the bound only
        # matters when updates lag pushes (warm-up, updates_per_step = 0 at a scale)
        self.capacity = int(capacity_batches) * self.batch_size
        self.replay: list[Entry] = []
        self.rng = np.random.default_rng((int(seed), 0xC817))
        self.updates = 0

    # evaluation ----------------------------------------------------------------------------
    @torch.no_grad()
    def values(self, seqs: list, starts: list, lengths: list) -> np.ndarray:
        """p in [0, 1] for every response token, (N, max length); 0 past a row's length."""
        T = max(1, max(lengths))
        out = np.zeros((len(seqs), T))
        self.model.eval()
        for a in range(0, len(seqs), self.micro_batch):
            for sl in self._chunks(seqs, range(a, min(a + self.micro_batch, len(seqs)))):
                v, m = self._logits([seqs[i] for i in sl], [starts[i] for i in sl], [lengths[i] for i in sl], T)
                out[sl] = torch.where(m, torch.sigmoid(v), torch.zeros(())).double().numpy()
        return out

    def _logits(self, seqs: list, starts: list, lengths: list, T: int):
        """(N, T) value logits at start_i + t for t < length_i (0 elsewhere) and the bool mask."""
        if not self.share_prompts:
            ids, attn = _pad(seqs, self.pad_id)
            return _gather(self.model(ids, attn), starts, lengths, T)
        # the prefix through the value of response token 0, run once per distinct prefix; the
        # hidden state at index t is the value of response token t (start + t in the full row)
        first: dict = {}
        row_prefix = torch.tensor([first.setdefault(tuple(s[:st + 1]), len(first)) for s, st in zip(seqs, starts)])
        pids, pmask = _pad([list(k) for k in first], self.pad_id)
        ln = torch.as_tensor(list(lengths), dtype=torch.long)
        Tc = max(1, int(ln.max()))
        resp, _ = _pad([s[st + 1:st + Tc] or [self.pad_id] for s, st in zip(seqs, starts)], self.pad_id)
        h = self.model.body.hidden_shared(pids, pmask.sum(1), resp, row_prefix)[:, :Tc]
        logits = self.model.head(h).squeeze(-1)
        mask = torch.arange(T)[None] < ln[:, None]
        out = torch.where(mask[:, :Tc], logits, torch.zeros((), dtype=logits.dtype))
        return torch.nn.functional.pad(out, (0, T - Tc)), mask

    def _chunks(self, seqs: list, rows) -> list[list[int]]:
        """`rows` (indices into seqs) in `length_chunks` length-sorted chunks; one keeps the order."""
        rows = list(rows)
        if self.length_chunks <= 1 or len(rows) <= 1:
            return [rows]
        rows.sort(key=lambda i: len(seqs[i]))
        return [c.tolist() for c in np.array_split(np.asarray(rows), min(self.length_chunks, len(rows)))]

    # replay --------------------------------------------------------------------------------
    def push(self, seqs: list, starts: list, targets: list) -> None:
        """Evaluated trajectories enter the FIFO (after their values were read: B.1)."""
        for s, st, tg in zip(seqs, starts, targets):
            self.replay.append(Entry(list(s), int(st), np.asarray(tg, dtype=np.float64)))
        if len(self.replay) > self.capacity:
            del self.replay[:len(self.replay) - self.capacity]

    def update(self) -> dict | None:
        """One value update on a batch drawn uniformly without replacement from the replay;
        entries used `replay_reuse` times leave it. None when the replay is empty."""
        if not self.replay:
            return None
        k = min(self.batch_size, len(self.replay))
        pick = np.sort(self.rng.choice(len(self.replay), size=k, replace=False))
        batch = [self.replay[i] for i in pick]
        tokens = sum(len(e.target) for e in batch)
        self.model.train()
        self.opt.zero_grad(set_to_none=True)
        total = 0.0
        seqs = [e.seq for e in batch]
        for a in range(0, k, self.micro_batch):
            for sl in self._chunks(seqs, range(a, min(a + self.micro_batch, k))):
                mb = [batch[i] for i in sl]
                T = max(1, max(len(e.target) for e in mb))
                logit, m = self._logits([e.seq for e in mb], [e.start for e in mb], [len(e.target) for e in mb], T)
                tgt = torch.zeros((len(mb), T), dtype=logit.dtype)
                for j, e in enumerate(mb):
                    tgt[j, :len(e.target)] = torch.as_tensor(e.target, dtype=logit.dtype)
                # token mean over the value batch (B.4: BCE on p; targets R in [0, 1])
                bce = torch.nn.functional.binary_cross_entropy_with_logits(logit, tgt, reduction="none")
                loss = (bce * m).sum() / max(tokens, 1)
                loss.backward()
                total += float(loss.detach())
        torch.nn.utils.clip_grad_norm_(self.model.parameters_to_train(), 1.0)
        self.opt.step()
        self.model.eval()
        for e in batch:
            e.uses += 1
        self.replay = [e for e in self.replay if e.uses < self.spec.replay_reuse]
        self.updates += 1
        return {"value_loss": total, "value_batch": k, "replay_size": len(self.replay)}

    # checkpoints ---------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"model": self.model.state_dict(), "opt": self.opt.state_dict(),
                "replay": [(e.seq, e.start, e.target, e.uses) for e in self.replay],
                "rng": self.rng.bit_generator.state, "updates": self.updates}

    def load_state_dict(self, st: dict) -> None:
        self.model.load_state_dict(st["model"])
        self.opt.load_state_dict(st["opt"])
        self.replay = [Entry(list(s), int(a), np.asarray(t), int(u)) for s, a, t, u in st["replay"]]
        self.rng.bit_generator.state = st["rng"]
        self.updates = int(st["updates"])
