"""What OpenRLHF 0.11.2 lacks: the GPG policy loss, and the verifier-backed reward function.

GPG ("GPG: A Simple and Strong Reinforcement Learning Baseline for Model Reasoning", Chu et al.
2025, arXiv 2504.02546): a plain policy gradient, no importance ratio and no clipping,

    loss = agg_t( -A_i * log pi(a_t | s_t) ) * scale,   scale = B / B_valid,

with OpenRLHF's own `aggregate_loss` for the aggregation (token-mean or seq-mean-token-mean and
its data-parallel/gradient-accumulation normalisers). The B/B_valid factor is a property of the
whole rollout batch, known when advantages are computed and not inside a micro-batch, so the
experience maker multiplies it into the advantages (`gpg` estimator: built in; any other estimator
with ``loss.type: gpg``: `gpg_valid_scale`); the loss takes `scale` = 1 then. The value of the
loss differs from PPO's -ratio*A, its gradient at ratio 1 does not: on-policy, with one epoch,
GPG equals PPO without the clip.

`SparseRLPolicyLoss` is OpenRLHF's `PolicyLoss` plus ``policy_loss_type="gpg"``; the launcher's
rebuilt argument parser accepts ``--actor.policy_loss_type gpg`` and the worker hook puts this
class where `openrlhf.trainer.ray.ppo_actor` looks `PolicyLoss` up.

`reward_func(queries, prompts, labels)` is the function OpenRLHF loads from the file named by
``--reward.remote_url <path>.py`` (this file) inside each vLLM engine: it decodes our JSON label
(`labels.decode_label`) and scores the response against its "answer" with `sparserl.grading.verifier`.
"""
from __future__ import annotations

import json
import threading
from typing import Optional

import torch
from openrlhf.models.loss import PolicyLoss, aggregate_loss
from openrlhf.models.utils import masked_mean

POLICY_LOSS_TYPES = ("ppo", "gspo", "gpg")


def gpg_policy_loss(log_probs: torch.Tensor, advantages: torch.Tensor, action_mask: torch.Tensor, *,
                    token_level_loss: bool = True, scale: float = 1.0, dp_size: int = 1,
                    batch_num_tokens: Optional[float] = None,
                    global_batch_size: Optional[float] = None) -> torch.Tensor:
    """GPG: aggregate(-A * log pi) * scale; A per token (B, T) or per sequence (B,)."""
    if advantages.dim() == 1:
        advantages = advantages[:, None].expand_as(log_probs)
    loss_t = -advantages.detach() * log_probs
    loss = aggregate_loss(loss_t, action_mask, token_level_loss=token_level_loss, dp_size=dp_size,
                          batch_num_tokens=batch_num_tokens, global_batch_size=global_batch_size)
    return loss * scale


class SparseRLPolicyLoss(PolicyLoss):
    """OpenRLHF's PolicyLoss with a third type, "gpg" (plain PG; see the module docstring).

    For "gpg" the train/rollout importance-sampling correction (is_correction_*) is not applied:
    GPG has no ratio to correct. Returns OpenRLHF's 5-tuple (loss, clip_ratio = 0, ppo_kl,
    vllm_kl = None, is_filter_ratio = None).
    """

    def __init__(self, *args, policy_loss_type: str = "ppo", gpg_scale: float = 1.0, **kwargs):
        if policy_loss_type not in POLICY_LOSS_TYPES:
            raise ValueError(f"policy_loss_type must be one of {POLICY_LOSS_TYPES}, got {policy_loss_type!r}")
        super().__init__(*args, policy_loss_type="ppo" if policy_loss_type == "gpg" else policy_loss_type,
                         **kwargs)
        self.policy_loss_type = policy_loss_type
        self.gpg_scale = float(gpg_scale)

    def forward(self, log_probs, old_log_probs, advantages, action_mask=None, rollout_log_probs=None,
                dp_size: int = 1, batch_num_tokens=None, global_batch_size=None):
        if self.policy_loss_type != "gpg":
            return super().forward(log_probs, old_log_probs, advantages, action_mask=action_mask,
                                   rollout_log_probs=rollout_log_probs, dp_size=dp_size,
                                   batch_num_tokens=batch_num_tokens, global_batch_size=global_batch_size)
        if action_mask is None:
            action_mask = torch.ones_like(log_probs)
        loss = gpg_policy_loss(log_probs, advantages, action_mask, token_level_loss=self.token_level_loss,
                               scale=self.gpg_scale, dp_size=dp_size, batch_num_tokens=batch_num_tokens,
                               global_batch_size=global_batch_size)
        clip_ratio = torch.zeros((), device=log_probs.device)
        ppo_kl = masked_mean(-(log_probs - old_log_probs).detach(), action_mask, dim=None)
        return loss, clip_ratio, ppo_kl, None, None


# --------------------------------------------------------------------------- reward function

_VERIFIER = None
_VERIFIER_LOCK = threading.Lock()


def _verifier():
    global _VERIFIER
    if _VERIFIER is None:
        from sparserl.grading.verifier import Verifier
        _VERIFIER = Verifier(workers=2, timeout_s=10.0)
    return _VERIFIER


def response_text(query: str, prompt: str) -> str:
    """The response part of OpenRLHF's decoded query (prompt + response); the prompt's own
    instruction may contain a \\boxed{} that must not be scored."""
    if prompt and query.startswith(prompt):
        return query[len(prompt):]
    tail = prompt[-64:] if prompt else ""
    i = query.rfind(tail) if tail else -1
    return query[i + len(tail):] if i >= 0 else query


def _decode(label):
    try:
        d = json.loads(label) if isinstance(label, str) and label.startswith("{") else None
    except json.JSONDecodeError:
        d = None
    return d if isinstance(d, dict) else {"answer": label}


def reward_func(queries, prompts, labels):
    """OpenRLHF's custom reward hook: {0,1} per query from `sparserl.grading.verifier` on the label's answer.

    Returns {"rewards", "scores", "extra_logs"}: scalars for a single query (OpenRLHF's single-turn
    executor calls it one query at a time), tensors for several.
    """
    responses = [response_text(q, p) for q, p in zip(queries, prompts)]
    answers = [_decode(lab).get("answer") for lab in labels]
    with _VERIFIER_LOCK:  # OpenRLHF calls this from several threads; the verifier is not thread-safe
        scores = [float(s) for s in _verifier().score(responses, answers)]
    if len(scores) == 1:
        return {"rewards": scores[0], "scores": scores[0], "extra_logs": {}}
    t = torch.tensor(scores)
    return {"rewards": t, "scores": t, "extra_logs": {}}


__all__ = ["POLICY_LOSS_TYPES", "SparseRLPolicyLoss", "gpg_policy_loss", "response_text", "reward_func"]
