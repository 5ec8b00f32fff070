"""The rollout interface shared by every backend."""
from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class SamplingParams:
    """temperature/top_p follow the usual definitions; `greedy` ignores both.

    `top_k` is never applied: transformers' default top_k=50 silently truncates a 268-token
    vocabulary, which would bias tiny-scale pass rates.
    """
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 16
    greedy: bool = False

    def __post_init__(self):
        if not self.greedy and self.temperature <= 0:
            raise ValueError(f"temperature must be > 0 (got {self.temperature}); use greedy=True")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1] (got {self.top_p})")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1 (got {self.max_new_tokens})")


@dataclass
class RolloutBatch:
    """M rollouts of P prompts. Row m answers prompt `prompt_index[m]`.

    `logprobs[m][t]` is log pi(token_t | prefix) under the tempered distribution (logits / T)
    before top-p truncation, the quantity PPO-style trainers recompute (greedy: T = 1).
    """
    prompts: list[str]
    prompt_ids: list[list[int]]
    prompt_index: np.ndarray
    response_ids: list[list[int]]
    logprobs: list[np.ndarray]
    texts: list[str]
    finish_reason: list[str]
    rewards: np.ndarray | None = None
    meta: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.response_ids)

    @property
    def n_per_prompt(self) -> np.ndarray:
        return np.bincount(self.prompt_index, minlength=len(self.prompts))

    def response_lengths(self) -> np.ndarray:
        return np.array([len(r) for r in self.response_ids], dtype=np.int64)

    def to_frame(self, prompt_ids: Sequence[str] | None = None) -> pd.DataFrame:
        df = pd.DataFrame({
            "prompt_index": self.prompt_index,
            "response": self.texts,
            "response_ids": [list(map(int, r)) for r in self.response_ids],
            "logprobs": [np.asarray(lp, dtype=np.float32).tolist() for lp in self.logprobs],
            "finish_reason": self.finish_reason,
        })
        if prompt_ids is not None:
            df.insert(0, "prompt_id", np.asarray(prompt_ids, dtype=object)[self.prompt_index])
        if self.rewards is not None:
            df["reward"] = self.rewards
        return df


def expand_n(n: int | Sequence[int], num_prompts: int) -> np.ndarray:
    """n per prompt as an int array; n may differ per prompt (OSLA) and may be 0."""
    arr = np.full(num_prompts, n, dtype=np.int64) if np.isscalar(n) else np.asarray(n, np.int64)
    if arr.shape != (num_prompts,):
        raise ValueError(f"n has {arr.size} entries for {num_prompts} prompts")
    if (arr < 0).any():
        raise ValueError("n per prompt must be >= 0")
    return arr


class RolloutBackend(abc.ABC):
    @abc.abstractmethod
    def generate(self, prompts: Sequence[str], n: int | Sequence[int], params: SamplingParams,
                 seed: int) -> RolloutBatch:
        """Sample n[i] responses for prompts[i]; same seed and inputs give the same batch."""

    def close(self) -> None:
        pass


def rollout(backend: RolloutBackend, prompts: Sequence[str], answers: Sequence[str],
            n: int | Sequence[int], params: SamplingParams, seed: int, verifier) -> RolloutBatch:
    """Generate, then score each response against its prompt's answer (reward in {0, 1})."""
    batch = backend.generate(prompts, n, params, seed)
    gold = [answers[i] for i in batch.prompt_index]
    batch.rewards = np.asarray(verifier.score(batch.texts, gold), dtype=np.float32)
    return batch
