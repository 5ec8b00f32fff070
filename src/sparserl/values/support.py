"""A prior queried during training: V0.5's support buffer of recent (prompt, reward) pairs as
the context a value model conditions on (V0.5: the 512 most recent pairs, 256 sampled per step).

Both engines use it: the local trainer (with its own Generator, so a run replays exactly) and the
OpenRLHF engine (`engines.openrlhf.experience`, one per process, shared by the OSLA samples
generator and the experience maker). Static priors (oracle, constant) ignore the context.
"""
from __future__ import annotations

from collections import deque
from typing import Any, Iterable, Sequence

import numpy as np


class SupportBuffer:
    """The `size` most recent (prompt id, reward) pairs; `context()` samples `context` of them,
    once per step: the sample stays until the step's outcomes arrive (`extend`), so OSLA's
    allocation and the fusion estimator of one step condition on the same context (V0.5,
    arXiv 2603.10848, the RL workflow's Step 1: the prior is queried once per prompt, before any
    rollout). The OpenRLHF engine asks twice a step, the local trainer once."""

    def __init__(self, size: int, context: int, rng: np.random.Generator):
        if size < 1 or context < 1:
            raise ValueError(f"support buffer size and context must be >= 1, got {size}, {context}")
        self.pairs: deque = deque(maxlen=int(size))
        self.n_context, self.rng = int(context), rng
        self._context: list | None = None

    def __len__(self) -> int:
        return len(self.pairs)

    def extend(self, pairs: Iterable[tuple[Any, float]]) -> None:
        self.pairs.extend(pairs)
        self._context = None

    def context(self) -> list:
        if self._context is None:
            n = min(self.n_context, len(self.pairs))
            pick = self.rng.choice(len(self.pairs), n, replace=False) if n else []
            self._context = [self.pairs[i] for i in pick]
        return list(self._context)


class LivePrior:
    """`prior(prompt_ids, context)` bound to a support buffer: call it with prompt ids alone, and
    feed it each step's outcomes with `observe`."""

    def __init__(self, prior, support: SupportBuffer):
        self.prior, self.support = prior, support

    def __call__(self, prompt_ids: Sequence[Any]) -> np.ndarray:
        p = np.asarray(self.prior(list(prompt_ids), self.support.context()), dtype=np.float64)
        if p.shape != (len(prompt_ids),) or not np.isfinite(p).all() or (p < 0).any() or (p > 1).any():
            raise ValueError(f"prior {self.prior!r} returned {p.shape} values outside [0, 1] for "
                             f"{len(prompt_ids)} prompts")
        return p

    def observe(self, prompt_ids: Sequence[Any], rewards: Sequence[float]) -> None:
        self.support.extend(zip(list(prompt_ids), [float(r) for r in rewards]))
