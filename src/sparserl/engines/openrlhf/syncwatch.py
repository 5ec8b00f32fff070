"""The weight sync, watched every step at every scale: `vllm_kl`.

OpenRLHF 0.11.2 asks vLLM for the sampled tokens' log-probs, and logs `vllm_kl` (their mean gap
to the trainer's log-probs of the same tokens), only with its off-policy correction on
(``--algo.advantage.is_correction_level`` token/seq; off by default). A weight sync that breaks
(a CUDA-IPC handle that loads nothing, a tied lm_head left on the old embedding) then changes no
number anywhere. Here, whatever the correction setting:

  * the samples generator asks vLLM for the sampled token's log-prob (`sampling_params`:
    ``logprobs=0`` when OpenRLHF asks for none) and the engines return them after temperature and
    top-p (`create_vllm_engines`: ``logprobs_mode="processed_logprobs"``), the distribution the
    trainer's forward pass (logits / temperature) gives;
  * the experience maker, which has both log-probs of every action token once the actor's forward
    pass has run, puts the per-rollout gap in ``info["vllm_kl"]`` (logged as ``train/vllm_kl``,
    metrics' `vllm_kl`) and fails the step whose token mean passes ``--sparserl.vllm_kl_max``
    (`check_vllm_kl`).

`vllm_kl` is OpenRLHF's own estimator (`openrlhf.models.loss.PolicyLoss`): the token mean of
log pi_vllm - log pi_train over the action tokens, so its value means one thing whether or not
the correction is on (the actor's loss overwrites it there with the same quantity).
"""
from __future__ import annotations

import inspect
import math

import torch

ENGINE_LOGPROBS_MODE = "processed_logprobs"


def sampling_params(*args, **kwargs):
    """vllm.SamplingParams with the sampled token's log-prob always returned (``logprobs=0``: the
    sampled token only; OpenRLHF's 1 with its correction on is kept)."""
    from vllm import SamplingParams
    if kwargs.get("logprobs") is None:
        kwargs["logprobs"] = 0
    return SamplingParams(*args, **kwargs)


def create_vllm_engines(*args, **kwargs):
    """openrlhf.trainer.ray.create_vllm_engines with the engines' log-probs after temperature and
    top-p (OpenRLHF sets that mode only with its correction on; the default is the raw logits')."""
    from openrlhf.trainer.ray.vllm_engine import create_vllm_engines as create
    bound = inspect.signature(create).bind(*args, **kwargs)
    bound.arguments["logprobs_mode"] = ENGINE_LOGPROBS_MODE
    return create(*bound.args, **bound.kwargs)


def rollout_vllm_kl(experience) -> tuple[torch.Tensor, torch.Tensor]:
    """(per-rollout token mean of log pi_vllm - log pi_train, per-rollout action-token count) of one
    experience after the actor's forward pass."""
    lp_vllm, lp_train, mask = experience.rollout_log_probs, experience.action_log_probs, experience.action_mask
    if lp_vllm is None:
        raise RuntimeError("vllm_kl: the rollouts carry no vLLM log-probs; the samples generator must ask for "
                           "them (patches.PATCHES: samples_generator.SamplingParams -> syncwatch.sampling_params)")
    if lp_vllm.shape != lp_train.shape:
        raise RuntimeError(f"vllm_kl: vLLM log-probs {tuple(lp_vllm.shape)} and the trainer's "
                           f"{tuple(lp_train.shape)} do not align; OpenRLHF's samples layout changed")
    m = mask.to(torch.float64)
    n = m.sum(-1)
    gap = ((lp_vllm.double() - lp_train.double()) * m).sum(-1) / n.clamp(min=1)
    return gap, n


def step_vllm_kl(experiences) -> float:
    """Put each rollout's `vllm_kl` in its experience's info; return the step's token mean."""
    total, tokens = 0.0, 0.0
    for e in experiences:
        gap, n = rollout_vllm_kl(e)
        e.info["vllm_kl"] = gap.float()
        total += float((gap * n).sum())
        tokens += float(n.sum())
    return total / tokens if tokens else 0.0


def check_vllm_kl(value: float, bound: float | None, step: int) -> None:
    """Fail the step whose `vllm_kl` passes the bound (None or <= 0: not checked)."""
    if bound is None or bound <= 0:
        return
    if not math.isfinite(value) or abs(value) > bound:
        raise RuntimeError(
            f"step {step}: vllm_kl {value:.4g} is past --sparserl.vllm_kl_max {bound:g}: vLLM samples from "
            "other weights than the trainer's (a stale or broken weight sync, or a tied lm_head left on the "
            "old embedding); fix the sync, or raise rl.openrlhf['sparserl.vllm_kl_max'] only if the gap is "
            "numeric")


__all__ = ["ENGINE_LOGPROBS_MODE", "check_vllm_kl", "create_vllm_engines", "rollout_vllm_kl", "sampling_params",
           "step_vllm_kl"]
