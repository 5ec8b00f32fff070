"""The environment interface of Le Critique's tasks (Reasoning Gym mixture, CodeIO, Sudoku, MiniF2F).

Le Critique (Privileged Value Functions for LLM Reinforcement Learning, arXiv 2608.16739; Section
4.1 and Appendix D) trains on four tasks beside math. Each is an `Env`: it makes problems on three
disjoint sides (a hash of the problem decides, as `sparserl.tasks.procedural.split_of` does for
math), scores responses with a binary reward, and hands the critic its privileged context
(`Problem.privileged`: the reference answer, or Sudoku's solved grid), which the policy never sees.

Single-turn envs (`multi_turn = False`) score a batch of (problem, response) pairs at once
(`score`); CodeIO runs its programs for a whole batch in one sandboxed process. Multi-turn envs
(Sudoku, MiniF2F) run an episode: `reset` -> (`observe` -> policy response -> `step`)* until
`done`; the reward is the episode's, given when it ends.

At tiny scale an env also writes the pre-training demonstrations of the Le Critique policy
(`demonstrations`): (prompt, target) rows on the pre-training side, a share of them wrong, so the
policy partly solves the task and RL has room (as `tasks.pretrain_noise` does for math).
"""
from __future__ import annotations

import abc
import hashlib
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

SIDES = ("eval", "rl", "pretrain")


@dataclass(frozen=True)
class Problem:
    id: str  # unique and stable: "<env>/<side>/<i>"
    prompt: str  # the policy's first observation (all it ever sees of the problem)
    answer: str  # what the grader checks against (a reference answer, a serialised solution)
    privileged: str = ""  # the critic's context hidden from the policy ("" when the env has none)
    meta: dict = field(default_factory=dict)  # env-specific (CodeIO: program, direction; Sudoku: grids)


def side_of(key: str, split: dict) -> str:
    """'eval', 'rl' or 'pretrain' from a hash of `key` (a problem's canonical text);
    split = {"eval": fraction, "rl": fraction}, the rest is pre-training's."""
    h = int(hashlib.sha1(key.encode()).hexdigest()[:8], 16) % 10_000
    if h < split["eval"] * 10_000:
        return "eval"
    if h < (split["eval"] + split["rl"]) * 10_000:
        return "rl"
    return "pretrain"


class Env(abc.ABC):
    """One Le Critique task. `spec` is the env's config mapping (`critique.envs.<name>`)."""

    kind: str = ""  # registry name (`sparserl.envs.ENVS`)
    multi_turn: bool = False
    max_turns: int = 1

    def __init__(self, spec: dict, seed: int = 0):
        self.spec, self.seed = dict(spec), int(seed)
        self.split = dict(self.spec.get("split", {"eval": 0.25, "rl": 0.25}))

    def problems(self, side: str, n: int) -> list[Problem]:
        """n distinct problems of one side (fewer if the generator runs out), deterministic in
        (spec, seed, side, n); made once by `_make` (demonstrations and runs ask for the same sets)."""
        if side not in SIDES:
            raise ValueError(f"side {side!r} is not one of {', '.join(SIDES)}")
        made = self.__dict__.setdefault("_made", {})
        if (side, n) not in made:
            made[(side, n)] = self._make(side, n)
        return list(made[(side, n)])

    def _make(self, side: str, n: int) -> list[Problem]:
        raise NotImplementedError(f"env {self.kind!r} makes no problems: define _make or problems")

    def demonstrations(self, n: int, noise: float, rng: np.random.Generator) -> list[tuple[str, str]]:
        """n (prompt, target) pre-training rows from the 'pretrain' side; a share `noise` of the
        targets wrong in the env's own systematic way. Multi-turn envs give one row per turn.
        Envs that only run at paper scale (MiniF2F) have none."""
        raise NotImplementedError(f"env {self.kind!r} has no tiny-scale demonstrations")

    # single-turn --------------------------------------------------------------------------
    def score(self, problems: Sequence[Problem], responses: Sequence[str]) -> np.ndarray:
        """Binary rewards (float, one per pair) for single-turn envs."""
        raise NotImplementedError(f"env {self.kind!r} is multi-turn: use reset/observe/step")

    # multi-turn ---------------------------------------------------------------------------
    def reset(self, problem: Problem) -> Any:
        raise NotImplementedError(f"env {self.kind!r} is single-turn: use score")

    def observe(self, state: Any) -> str:
        """The policy's prompt for the next turn."""
        raise NotImplementedError

    def step(self, state: Any, response: str) -> tuple[Any, bool, float]:
        """Apply one policy response: (new state, done, reward); reward is 0 until done."""
        raise NotImplementedError

    def close(self) -> None:
        pass
