"""Le Critique's critic warm-up on OpenRLHF 0.11.2: value updates before the first policy update.

Paper: Le Critique: Privileged Value Functions for LLM Reinforcement Learning (arXiv 2608.16739),
Appendix B.3 (`warmup_updates` value updates first) and B.2 (each trajectory used at most
`replay_reuse` = N times). OpenRLHF's ``--critic.freezing_steps F`` trains the actor only when
``global_steps > F`` (counted from 0), so F + 1 steps are critic-only. Each warm-up step uses its
fresh batch the most it may (N updates): W = ceil(warmup_updates / N) steps, F = W - 1;
afterwards `updates_per_step` updates per step. Pure arithmetic on the spec's ``critic`` mapping:
the flags, the dataset, sizing and the critic trainer all read the schedule here (no OpenRLHF, no torch)."""
from __future__ import annotations


def warmup_schedule(critic) -> list[int]:
    """Value updates of each critic-only step: N = replay_reuse per step (each fresh batch used the
    most it may), the last step the remainder; sum = warmup_updates. [] without warm-up."""
    w, n = int(critic.warmup_updates), max(1, int(critic.replay_reuse))
    return [n] * (w // n) + ([w % n] if w % n else [])


def warmup_steps(critic) -> int:
    """Critic-only RL steps before the first policy update (each consumes a rollout batch)."""
    return len(warmup_schedule(critic))


def freezing_steps(critic) -> int:
    """OpenRLHF's --critic.freezing_steps for the warm-up: the actor trains when global_steps > F."""
    return warmup_steps(critic) - 1


def updates_at(critic, fit_index: int) -> int:
    """Value updates of the critic's `fit_index`-th fit (0-based): warm-up, then updates_per_step."""
    sched = warmup_schedule(critic)
    return sched[fit_index] if fit_index < len(sched) else int(critic.updates_per_step)


def critic_warmup_steps(method) -> int:
    """Critic-only RL steps of a method before its first policy update (0 without a critic)."""
    return 0 if method.critic is None else warmup_steps(method.critic)


__all__ = ["critic_warmup_steps", "freezing_steps", "updates_at", "warmup_schedule", "warmup_steps"]
