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

    def take(self, rows: Sequence[int], prompt_index: int) -> "RolloutBatch":
        """The rollouts `rows` (all of one prompt) as a batch of that single prompt, renumbered to
        `prompt_index` (its position in the batch they will be concatenated into)."""
        rows = list(rows)
        pi = int(self.prompt_index[rows[0]]) if rows else 0
        return RolloutBatch(prompts=[], prompt_ids=[self.prompt_ids[pi]] if self.prompt_ids else [],
                            prompt_index=np.full(len(rows), prompt_index),
                            response_ids=[self.response_ids[r] for r in rows],
                            logprobs=[self.logprobs[r] for r in rows], texts=[self.texts[r] for r in rows],
                            finish_reason=[self.finish_reason[r] for r in rows],
                            rewards=None if self.rewards is None else self.rewards[rows])

    @staticmethod
    def concat(batches: Sequence["RolloutBatch"], prompts: list[str]) -> "RolloutBatch":
        """Merge batches generated for subsets of the same prompt list (`prompt_index` already
        global); a prompt's token ids come from whichever batch has them."""
        out = RolloutBatch(prompts=prompts, prompt_ids=[[] for _ in prompts],
                           prompt_index=np.concatenate([b.prompt_index for b in batches]).astype(np.int64),
                           response_ids=[r for b in batches for r in b.response_ids],
                           logprobs=[x for b in batches for x in b.logprobs],
                           texts=[t for b in batches for t in b.texts],
                           finish_reason=[f for b in batches for f in b.finish_reason],
                           rewards=np.concatenate([b.rewards for b in batches]).astype(np.float32))
        for b in batches:
            for i, ids in enumerate(b.prompt_ids):
                if ids:
                    out.prompt_ids[i] = ids
        return out

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
    #: progress meters set this: called with a row count each time part of a `generate` is done
    on_rows = None

    def _rows_done(self, k: int) -> None:
        if self.on_rows is not None:
            self.on_rows(int(k))

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
