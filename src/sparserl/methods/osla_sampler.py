"""The V0.5 sequential OSLA allocation loop, generic over where rewards come from.

V_0.5: Generalist Value Model as a Prior for Sparse RL Rollouts (arXiv 2603.10848): stopping rule
Theorem 3.6 (Eq. 11's risk), workflow Section 4.1.3. For a batch of
prompts with prior probabilities p (V = 2p - 1 on the {-1,+1} scale):

  round 0   draw k_init rewards for every prompt;
  each round, per prompt still active: s = 2r - 1, vbar = mean s, and
            Delta2 = max(0, (vbar - V)^2 - 1/k)            (shrinkage_fusion, Eq. 7)
            wants more  <=>  k < k_max and (k < k_min or k < 1/sqrt(c) - 1/Delta2)
            (Delta2 = 0 gives -inf: stop at once once k >= k_min)      (osla_round)
  if fewer than `global_stop` of the batch's B prompts want more, the whole batch stops;
  else every prompt that wants more draws min(k_step, k_max - k) more, and the loop repeats.
A prompt that stopped never restarts (its rewards, hence its decision, do not change).

The decision rule is `sparserl.estimators.osla_round` (nothing is re-implemented here); this
module only runs the loop and records what happened, so the RL trainer can reuse it with a
rollout backend as `sample_fn`, and the V0.5 study with cached Monte Carlo rewards
(`cached_sample_fn`).

`sample_fn(prompt_indices, counts) -> list of reward arrays`: for each j, `counts[j]` NEW rewards
in {0, 1} for prompt `prompt_indices[j]` (indices into the batch, 0..B-1). It is called once per
round with every prompt that draws in that round (round 0: all prompts), so a backend can
dispatch the round as one generation call; `pad_multiple` (e.g. 32) reports the padded size of
each such dispatch.

Stop reasons, decided at the round a prompt stops (first that applies):
  'test'    Delta2 == 0: the hypothesis test accepted the prior;
  'target'  k >= 1/sqrt(c) - 1/Delta2 (Theorem 3.6);
  'k_max'   the cap k_max = floor(1/sqrt(c)) (or the caller's k_max) was reached first;
  'global'  the prompt still wanted more when the batch's global stop fired;
  'budget'  the prompt still wanted more when the batch's rollout cap (`max_rollouts`) was spent.

`max_rollouts` [our choice, not the paper's]: a cap on the batch's rollouts, round 0 included, so
OSLA can be compared at the fixed-k methods' budget. Counted as dispatched (padded up to
`pad_multiple`, what the OpenRLHF engine trains on) when a pad is given, else as requested. A
round that would pass it draws only what is left, k_step at a time to the prompts furthest below
their target k first (largest k_target - k, then batch order); the prompts it leaves out stop
with 'budget', and so does every prompt still wanting more once nothing is left.
`stop_round[i]` is the round whose decision stopped prompt i (0 = right after the k_init draw);
k[i] = k_init + the rollouts drawn in rounds 1..stop_round[i].
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from sparserl.estimators import osla_k_max, osla_round, pad_to_multiple, shrinkage_fusion
from sparserl.estimators.osla import C_PAPER, GLOBAL_STOP_PAPER, K_STEP_PAPER

SampleFn = Callable[[np.ndarray, np.ndarray], Sequence[np.ndarray]]
REASONS = ("test", "target", "k_max", "global")  # what the V0.5 study reports (no cap there)
BUDGET = "budget"  # the stop reason of the rollout cap (`max_rollouts`)


@dataclass
class OslaResult:
    """Outcome of `run_osla` for one batch (arrays are per prompt, in batch order)."""

    rewards: list  # list of np.ndarray {0,1} rewards per prompt, in draw order
    k: np.ndarray  # final rollouts per prompt
    stop_round: np.ndarray  # round whose decision stopped the prompt (0 = after k_init)
    stop_reason: np.ndarray  # 'test' | 'target' | 'k_max' | 'global' per prompt
    delta2: np.ndarray  # Delta2 at the final k
    delta2_init: np.ndarray  # Delta2 after the k_init draw (the first test; > 0 = rejected)
    mu: np.ndarray  # fused baseline at the final k (V scale, [-1, 1]); shrinkage_fusion Eq. 9
    prior_v: np.ndarray  # V = 2p - 1
    rounds: list = field(default_factory=list)  # per round: dict(round, prompts, rollouts, dispatched, frac_wanting)
    k_max: int = 0
    c: float = 0.0

    @property
    def total_rollouts(self) -> int:
        return int(self.k.sum())

    @property
    def dispatched_rollouts(self) -> int | None:
        """Sum over rounds of the padded dispatch sizes (None when no pad_multiple was given)."""
        if not self.rounds or self.rounds[0]["dispatched"] is None:
            return None
        return int(sum(r["dispatched"] for r in self.rounds))

    @property
    def n_rounds(self) -> int:
        return len(self.rounds)

    @property
    def mean_budget(self) -> float:
        return float(self.k.mean()) if len(self.k) else 0.0

    def to_frame(self) -> pd.DataFrame:
        """One row per prompt: k, stop_round, stop_reason, delta2, delta2_init, mu, prior_v."""
        return pd.DataFrame({"k": self.k, "stop_round": self.stop_round, "stop_reason": self.stop_reason,
                             "delta2": self.delta2, "delta2_init": self.delta2_init, "mu": self.mu,
                             "prior_v": self.prior_v})


def _draw(sample_fn: SampleFn, idx: np.ndarray, counts: np.ndarray) -> list[np.ndarray]:
    out = sample_fn(idx, counts)
    if len(out) != len(idx):
        raise ValueError(f"sample_fn returned {len(out)} reward arrays for {len(idx)} prompts")
    arrs = []
    for j, (i, n, r) in enumerate(zip(idx, counts, out)):
        a = np.asarray(r, dtype=np.float64).reshape(-1)
        if len(a) != n:
            raise ValueError(f"sample_fn returned {len(a)} rewards for prompt {int(i)}, asked for {int(n)}")
        if not np.isin(a, (0.0, 1.0)).all():
            raise ValueError(f"sample_fn must return rewards in {{0, 1}}; prompt {int(i)} got {a.tolist()}")
        arrs.append(a)
    return arrs


def _reasons(delta2, k_target, k, k_max) -> np.ndarray:
    """Why prompts that no longer want more stopped (precedence: test, target, k_max)."""
    return np.where(delta2 == 0, "test", np.where(k >= k_target, "target", "k_max"))


def run_osla(sample_fn: SampleFn, prior_p, *, k_init: int = 4, k_step: int = K_STEP_PAPER, c: float = C_PAPER,
             k_max: int | None = None, global_stop: float = GLOBAL_STOP_PAPER, pad_multiple: int | None = None,
             k_min: int | None = None, max_rounds: int = 10_000, max_rollouts: int | None = None) -> OslaResult:
    """Run the OSLA loop on one batch (see the module docstring).

    prior_p: prior success probabilities p in [0, 1] per prompt (V0.5 uses V = 2p - 1).
    k_init: rollouts of round 0; k_min (default k_init) the smallest k the rule may stop at.
    k_max: cap per prompt, default floor(1/sqrt(c)) (16 for c = 0.0039).
    global_stop: the batch stops when the share of its prompts that want more is < this.
    pad_multiple: if given, each round's dispatch size is padded up to a multiple of it.
    max_rollouts: cap on the batch's rollouts (see the module docstring); ValueError when round 0
    alone passes it.
    """
    p = np.asarray(prior_p, dtype=np.float64).reshape(-1)
    if not np.isfinite(p).all() or (p < 0).any() or (p > 1).any():
        raise ValueError("prior_p must be probabilities in [0, 1]")
    if k_init < 1 or k_step < 1:
        raise ValueError(f"k_init and k_step must be >= 1, got {k_init}, {k_step}")
    k_max = osla_k_max(c) if k_max is None else int(k_max)
    k_min = k_init if k_min is None else int(k_min)
    B = len(p)
    v = 2.0 * p - 1.0

    def dispatched(n):
        return None if pad_multiple is None else pad_to_multiple(n, pad_multiple)

    def spent(n):  # what the cap counts of a round of n requested rollouts
        return n if pad_multiple is None else pad_to_multiple(n, pad_multiple)

    if max_rollouts is not None and B and spent(B * int(k_init)) > max_rollouts:
        raise ValueError(f"max_rollouts {max_rollouts} is below round 0's {spent(B * int(k_init))} rollouts "
                         f"({B} prompts x k_init {k_init}); raise it or draw fewer prompts")
    used = spent(B * int(k_init)) if B else 0
    idx = np.arange(B)
    counts = np.full(B, int(k_init), dtype=np.int64)
    rewards = _draw(sample_fn, idx, counts) if B else []
    k = counts.copy()
    succ = np.array([r.sum() for r in rewards], dtype=np.float64)
    rounds = [dict(round=0, prompts=B, rollouts=int(counts.sum()), dispatched=dispatched(int(counts.sum())),
                   frac_wanting=None)]
    active = np.ones(B, dtype=bool)
    stop_round = np.full(B, -1, dtype=np.int64)
    reason = np.full(B, "", dtype=object)
    delta2_init = None
    r = 0
    while True:
        vbar = np.divide(2.0 * succ, k, out=np.zeros(B), where=k > 0) - 1.0
        dec = osla_round(k, vbar, v, c=c, k_min=k_min, k_max=k_max, step=k_step, stop_frac=global_stop)
        if delta2_init is None:
            delta2_init = dec.delta2.copy()
        want = dec.want_more & active
        done = active & ~want
        reason[done] = _reasons(dec.delta2[done], dec.k_target[done], k[done], k_max)
        stop_round[done] = r
        active &= want
        frac = float(want.sum()) / B if B else 0.0
        rounds[-1]["frac_wanting"] = frac
        if not want.any():
            break
        if frac < global_stop:
            reason[want] = "global"
            stop_round[want] = r
            active[:] = False
            break
        if r + 1 > max_rounds:
            raise RuntimeError(f"OSLA loop exceeded {max_rounds} rounds")
        sel = np.flatnonzero(want)
        n_new = dec.n_new[sel].astype(np.int64)
        if max_rollouts is not None:
            room = max_rollouts - used
            if pad_multiple is not None:  # the largest request whose padded dispatch still fits
                room = room // pad_multiple * pad_multiple
            if n_new.sum() > room:
                sel, n_new = _within(sel, n_new, dec.k_target[sel] - k[sel], room)
                left = want.copy()
                left[sel] = False
                reason[left] = BUDGET
                stop_round[left] = r
                active[left] = False
                if not len(sel):
                    break
            used += spent(int(n_new.sum()))
        new = _draw(sample_fn, sel, n_new)
        for i, a in zip(sel, new):
            rewards[i] = np.concatenate([rewards[i], a])
            succ[i] += a.sum()
        k[sel] += n_new
        r += 1
        rounds.append(dict(round=r, prompts=len(sel), rollouts=int(n_new.sum()),
                           dispatched=dispatched(int(n_new.sum())), frac_wanting=None))
    if B:
        vbar = 2.0 * succ / k - 1.0
        mu, _w, delta2 = shrinkage_fusion(vbar, k, v)
    else:
        mu = delta2 = delta2_init = np.zeros(0)
    return OslaResult(rewards=rewards, k=k, stop_round=stop_round, stop_reason=reason.astype(str),
                      delta2=delta2, delta2_init=delta2_init, mu=mu, prior_v=v, rounds=rounds,
                      k_max=k_max, c=float(c))


def _within(sel: np.ndarray, n_new: np.ndarray, need: np.ndarray, room: int) -> tuple[np.ndarray, np.ndarray]:
    """The prompts of `sel` (and their counts) that draw in a round capped at `room` rollouts:
    whole requests first to the largest `need` (ties: batch order), the last one cut to what is
    left; prompts that get nothing are dropped."""
    order = np.lexsort((sel, -need))
    take = np.zeros(len(sel), dtype=np.int64)
    left = int(max(room, 0))
    for j in order:
        take[j] = min(int(n_new[j]), left)
        left -= take[j]
        if not left:
            break
    keep = take > 0
    return sel[keep], take[keep]


def cached_sample_fn(reward_lists: Sequence[Sequence[int]], rng: np.random.Generator | int | None = None) -> SampleFn:
    """A `sample_fn` drawing WITHOUT replacement from cached rewards (e.g. the 256 oracle rollouts).

    Each prompt's cached rewards are shuffled once; successive calls hand out the next ones.
    Asking for more than a prompt has left raises ValueError. The returned function also has
    `.used` (rewards handed out per prompt).
    """
    rng = np.random.default_rng(rng)
    pools = [np.asarray(r, dtype=np.float64)[rng.permutation(len(r))] for r in reward_lists]
    used = np.zeros(len(pools), dtype=np.int64)

    def sample(prompt_indices, counts):
        out = []
        for i, n in zip(np.asarray(prompt_indices), np.asarray(counts)):
            if used[i] + n > len(pools[i]):
                raise ValueError(f"prompt {int(i)} has {len(pools[i]) - used[i]} cached rewards left, asked for {int(n)}")
            out.append(pools[i][used[i]:used[i] + n])
            used[i] += n
        return out

    sample.used = used
    return sample
