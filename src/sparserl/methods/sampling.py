"""How a step samples its rollouts, chosen once per run from the method spec (`spec.sampler`):

  plain             draw rollouts_per_step / G prompts (or the method's prompts_per_step), G rollouts each;
  dynamic_sampling  DAPO: draw gen_batch_factor x the prompts, keep groups whose rewards differ,
                    repeat until the batch is full (at most 8 draws; a short batch trains as is);
  osla              V0.5: the prior before any rollout, then OSLA rounds (`osla_sampler.run_osla`).
  budget            V0's allocation: rollouts_per_step / G prompts, B_i rollouts each with
                    sum B_i = rollouts_per_step maximising sum U(B_i, p_i) (`estimators.budget`).

A sampler is engine-agnostic: it gets `generate(prompt_indices, n, salt) -> RolloutBatch` (scored
rollouts, `n` an int or one count per prompt, `salt` makes each call's seed distinct), the run's
numpy Generator, and for OSLA `prior_fn(prompt_ids) -> p`. The local trainer supplies these; the
OpenRLHF engine runs OSLA through its own samples generator on the same `run_osla`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from sparserl.methods.osla_sampler import BUDGET, REASONS, run_osla
from sparserl.methods.spec import MethodSpec
from sparserl.rollout.base import RolloutBatch

Generate = Callable[[np.ndarray, "int | np.ndarray", int], RolloutBatch]
MAX_DYNAMIC_DRAWS = 8


@dataclass
class Sampled:
    """One step's prompts (indices into the pool), their scored rollouts (`prompt_index` into
    `idx`) and, when the sampler queried one, the prior p per prompt id."""
    idx: np.ndarray
    batch: RolloutBatch
    prior: dict | None = None


class Sampler:
    name = ""

    def __init__(self, method: MethodSpec, generate: Generate, rng: np.random.Generator, pool_ids: np.ndarray,
                 prompts: list[str], n_prompts: int, prior_fn: Callable | None = None):
        self.m, self.generate, self.rng = method, generate, rng
        self.pool_ids, self.prompts, self.n_prompts, self.prior_fn = pool_ids, prompts, n_prompts, prior_fn

    def draw(self, n: int) -> np.ndarray:
        return self.rng.choice(len(self.pool_ids), n, replace=False)

    def draw_with_prior(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The step's prompts (pool indices), their ids and the prior's p for them, before any rollout."""
        idx = self.draw(self.n_prompts)
        pids = self.pool_ids[idx]
        return idx, pids, np.asarray(self.prior_fn(list(pids)), dtype=float)

    def sample(self, info: dict) -> Sampled:
        raise NotImplementedError


class PlainSampler(Sampler):
    name = "plain"

    def sample(self, info):
        idx = self.draw(self.n_prompts)
        b = self.generate(idx, self.m.group_size, 0)
        info["rollouts_generated"] = len(b)
        return Sampled(idx, b)


class DynamicSampler(Sampler):
    name = "dynamic_sampling"

    def sample(self, info):
        factor = self.m.dynamic_sampling.gen_batch_factor
        G, kept, generated = self.m.group_size, [], 0
        for draw in range(MAX_DYNAMIC_DRAWS):
            idx = self.draw(int(round(self.n_prompts * factor)))
            b = self.generate(idx, G, 100 + draw)
            generated += len(b)
            r = b.rewards.reshape(len(idx), G)  # rows come out grouped by prompt, G each
            mixed = np.flatnonzero(r.min(1) != r.max(1))
            for j in mixed:
                if len(kept) < self.n_prompts and idx[j] not in {k for k, _ in kept}:
                    kept.append((idx[j], (b, j)))
            if len(kept) >= self.n_prompts:
                break
        info["rollouts_generated"] = generated
        info["dynamic_sampling_draws"] = draw + 1
        info["dynamic_sampling_kept"] = len(kept)
        if not kept:  # nothing to learn from this step
            idx = self.draw(self.n_prompts)
            return Sampled(idx, self.generate(idx, G, 199))
        idx = np.array([k for k, _ in kept])
        parts = [b.take(np.flatnonzero(b.prompt_index == j), new_i) for new_i, (_, (b, j)) in enumerate(kept)]
        merged = RolloutBatch.concat(parts, [self.prompts[i] for i in idx])
        merged.prompt_ids = [p.prompt_ids[0] for p in parts]
        return Sampled(idx, merged)


class OslaSampler(Sampler):
    name = "osla"

    def sample(self, info):
        o = self.m.osla
        idx, pids, p = self.draw_with_prior()
        batches: list[RolloutBatch] = []
        round_no = [0]

        def sample_fn(prompt_indices, counts):
            b = self.generate(idx[prompt_indices], counts, 300 + round_no[0])
            round_no[0] += 1
            pi_arr = np.asarray(prompt_indices)
            b.prompt_index = pi_arr[b.prompt_index]  # back to batch positions
            full = [[] for _ in idx]
            for j, pi in enumerate(pi_arr):
                full[pi] = b.prompt_ids[j]
            b.prompt_ids = full
            batches.append(b)
            return [b.rewards[b.prompt_index == pi] for pi in prompt_indices]

        res = run_osla(sample_fn, p, k_init=o.k_init, k_step=o.k_step, c=o.c, k_max=o.k_max,
                       global_stop=o.global_stop, pad_multiple=o.pad_multiple, max_rollouts=o.max_rollouts_per_step)
        merged = RolloutBatch.concat(batches, [self.prompts[i] for i in idx])
        ks = np.bincount(merged.prompt_index, minlength=len(idx))
        info["rollouts_generated"] = len(merged)
        info["osla_rounds"] = round_no[0]
        info["osla_k_mean"] = float(ks.mean())
        info["osla_k_max_hit"] = float((ks >= o.k_max).mean())
        info["osla_dispatched"] = res.dispatched_rollouts or len(merged)
        info["osla_reject_rate"] = float(np.mean(res.delta2_init > 0))
        info["osla_stop_round_mean"] = float(res.stop_round.mean())
        capped = (BUDGET,) if o.max_rollouts_per_step is not None else ()  # uncapped runs keep their columns
        for r in REASONS + capped:
            info[f"osla_stop_{r}"] = float(np.mean(res.stop_reason == r))
        info["prior_mean"] = float(p.mean())
        return Sampled(idx, merged, dict(zip(pids, p)))


class BudgetSampler(Sampler):
    name = "budget"

    def sample(self, info):
        from sparserl.estimators.budget import allocate_budget, budget_utility
        a = self.m.budget
        idx, pids, p = self.draw_with_prior()
        p = np.clip(p, 0.0, 1.0)
        total = self.n_prompts * self.m.group_size
        B = allocate_budget(p, total, b_min=a.b_min, b_max=a.b_max)
        if B.sum() < total:  # U adds nothing for the rest (all p near 0 or 1): spread it evenly
            B = B + np.bincount(np.arange(total - B.sum()) % len(B), minlength=len(B))
        keep = np.flatnonzero(B >= 1)
        b = self.generate(idx[keep], B[keep], 500)
        info["rollouts_generated"] = len(b)
        info["budget_prompts_dropped"] = int(len(idx) - len(keep))
        info["budget_k_mean"], info["budget_k_max"] = float(B[keep].mean()), int(B.max())
        info["budget_utility"] = float(budget_utility(B, p).sum())
        info["prior_mean"] = float(p.mean())
        return Sampled(idx[keep], b, dict(zip(pids, p)))


SAMPLERS: dict[str, type[Sampler]] = {c.name: c for c in (PlainSampler, DynamicSampler, OslaSampler, BudgetSampler)}


def make_sampler(method: MethodSpec, **kw) -> Sampler:
    """The sampler `method.sampler` names (see the module docstring for the keyword arguments)."""
    return SAMPLERS[method.sampler](method, **kw)
