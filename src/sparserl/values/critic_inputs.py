"""What Le Critique's critic reads, laid out once for both engines (local trainer, OpenRLHF).

The critic's sequence is  prompt + privileged context + response  (Le Critique Section 3.1:
V(h_{i,t}, z_i)); the policy's is  prompt + response. The value of response token t is read at
the critic position of the token before it (the state h_{i,t} the policy acted in), so it aligns
with the policy's log-prob of token t, which is gathered at prompt position len(prompt) - 1 + t:

    policy  [p0 .. pP-1][y0 .. yT-1]              logp(y_t) at P - 1 + t
    critic  [p0 .. pP-1][z0 .. zZ-1][y0 .. yT-1]  V(h_t, z) at P + Z - 1 + t

Privileged context (`CriticSpec.privileged`):
  none       ordinary VF: Z = 0, the critic reads what the policy reads
  answer     the env's reference context (`Problem.privileged`: the reference answer, Sudoku's
             solved grid), Le Critique's Reasoning Gym and Sudoku Pvf
  loo_group  the other K-1 responses of the group and their rewards (CodeIO's Pvf, Section 3.2)
"""
from __future__ import annotations

from typing import Sequence

PRIVILEGED = ("none", "answer", "loo_group")
ANSWER_TAG = "\nR:"  # [our choice] short tags: a tiny critic's context is tens of tokens
GROUP_TAG = "\nG:"


def answer_context(reference: str) -> str:
    """The text inserted after the prompt for `privileged: answer`."""
    return f"{ANSWER_TAG} {reference.strip()}" if reference else ""


def loo_group_context(responses: Sequence[str], rewards: Sequence[float], i: int) -> str:
    """The text inserted for `privileged: loo_group`: every response of i's group but i's own,
    each with its reward, in group order (empty for a group of one)."""
    parts = [f" {str(r).strip()} ={int(round(float(w)))};" for j, (r, w) in enumerate(zip(responses, rewards))
             if j != i]
    return GROUP_TAG + "".join(parts) if parts else ""


def privileged_context(kind: str, reference: str = "", group_responses: Sequence[str] = (),
                       group_rewards: Sequence[float] = (), index: int = 0) -> str:
    """The privileged text of one rollout (see the module docstring)."""
    if kind == "none":
        return ""
    if kind == "answer":
        return answer_context(reference)
    if kind == "loo_group":
        return loo_group_context(group_responses, group_rewards, index)
    raise ValueError(f"unknown privileged context {kind!r}; known: {', '.join(PRIVILEGED)}")


def critic_sequence(prompt_ids: Sequence[int], privileged_ids: Sequence[int],
                    response_ids: Sequence[int]) -> tuple[list[int], int]:
    """(critic token ids, position of the value of response token 0): values of tokens
    t = 0..T-1 are at positions start + t, start = len(prompt) + len(privileged) - 1."""
    ids = list(prompt_ids) + list(privileged_ids) + list(response_ids)
    return ids, len(prompt_ids) + len(privileged_ids) - 1
