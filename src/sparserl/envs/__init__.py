"""Le Critique's environments (`base.Env`), by kind: lazily imported, so a math run imports none."""
from __future__ import annotations

import importlib

from sparserl.envs.base import Env, Problem, side_of

ENVS = {
    "rg_mixture": "sparserl.envs.rg_mixture:RGMixtureEnv",
    "codeio": "sparserl.envs.codeio:CodeIOEnv",
    "sudoku": "sparserl.envs.sudoku:SudokuEnv",
    "minif2f": "sparserl.envs.minif2f:MiniF2FEnv",
}


def make_env(kind: str, spec: dict, seed: int = 0) -> Env:
    """The env of `kind` (a key of ENVS) built from its config mapping."""
    if kind not in ENVS:
        raise ValueError(f"unknown env kind {kind!r}; known: {', '.join(sorted(ENVS))}")
    mod, cls = ENVS[kind].split(":")
    return getattr(importlib.import_module(mod), cls)(spec, seed)


__all__ = ["ENVS", "Env", "Problem", "make_env", "side_of"]
