"""Le Critique's world at tiny and small scale: its envs, the pre-training corpus of its policy,
its experiments (env x K x methods), and where each artifact lives.

The Le Critique tasks are not math, so the math policies cannot play them. The DAG pre-trains one
policy `c` on noisy demonstrations of every env (`Env.demonstrations`, a share `critique.corpus.noise`
of the targets wrong), with its own tokenizer, under ``results/{scale}/critique/``. The world is a
config of the shape the math stage reads (`critique_world`), so the tokenizer, the corpus encoding
and pre-training are the math stage's own functions.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from sparserl.core.config import section_setting
from sparserl.core.paths import WORLD_POLICY, critique_cfg, critique_world  # noqa: F401  (the world's config)
from sparserl.envs import make_env

def envs(cfg: dict) -> dict:
    """name -> Env of every configured env."""
    return {name: make_env(spec["kind"], spec, cfg["seed"]) for name, spec in critique_cfg(cfg)["envs"].items()}


def build_corpus(cfg: dict) -> pd.DataFrame:
    """Pre-training rows (problem = prompt, answer = target, env) of every env, shuffled:
    `critique.corpus.size` rows split by `critique.envs.<name>.corpus_weight` (default equal)."""
    c = critique_cfg(cfg)
    size, noise = int(c["corpus"]["size"]), float(c["corpus"]["noise"])
    rng = np.random.default_rng((cfg["seed"], 0xC0))
    names = list(c["envs"])
    w = np.array([float(section_setting(c["envs"][n], "critique", "envs", n, "corpus_weight")) for n in names])
    counts = np.floor(size * w / w.sum()).astype(int)
    rows = []
    for name, n in zip(names, counts):
        env = make_env(c["envs"][name]["kind"], c["envs"][name], cfg["seed"])
        rows += [{"problem": p, "answer": t, "env": name} for p, t in env.demonstrations(int(n), noise, rng)]
        env.close()
    df = pd.DataFrame(rows)
    return df.iloc[rng.permutation(len(df))].reset_index(drop=True)


@dataclasses.dataclass(frozen=True)
class Experiment:
    name: str
    env: str
    k: int
    methods: tuple
    rl: dict = dataclasses.field(default_factory=dict)  # overrides of critique.rl for this experiment
    policy_hub: str | None = None  # paper scale: this experiment's hub policy (else critique.policy_hub)


def experiments(cfg: dict) -> list[Experiment]:
    return [Experiment(name, e["env"], int(e["k"]), tuple(e["methods"]), dict(e.get("rl") or {}),
                       e.get("policy_hub"))
            for name, e in critique_cfg(cfg).get("experiments", {}).items()]


def experiment(cfg: dict, name: str) -> Experiment:
    for e in experiments(cfg):
        if e.name == name:
            return e
    raise ValueError(f"critique.experiments has no {name!r}; known: {[e.name for e in experiments(cfg)]}")


def heldout_eval(rl: dict) -> tuple[int, int]:
    """(problems, samples) of a Le Critique run's held-out evaluation: `rl.eval` (critique.rl with an
    experiment's overrides), the schema's critique.rl.eval defaults where it sets none."""
    ev = rl.get("eval")
    return (int(section_setting(ev, "$defs", "critique_rl", "eval", "problems")),
            int(section_setting(ev, "$defs", "critique_rl", "eval", "samples")))


def experiment_rl(cfg: dict, name: str) -> dict:
    """critique.rl with the experiment's own `rl` overrides (paper scale: steps, batch, lengths)."""
    return {**critique_cfg(cfg)["rl"], **experiment(cfg, name).rl}


def seeds(cfg: dict, exp: str | None = None) -> list[int]:
    """The seeds of every experiment (critique.rl.seeds), or of one (its `rl.seeds` if it sets them)."""
    if exp is not None:
        return list(experiment_rl(cfg, exp)["seeds"])
    return list(critique_cfg(cfg)["rl"]["seeds"])
