"""Le Critique's envs inside OpenRLHF 0.11.2's vLLM engines: the file OpenRLHF loads by path.

Paper: Le Critique: Privileged Value Functions for LLM Reinforcement Learning (arXiv 2608.16739),
Sections 4-6 and Appendix D. The run's driver (`critique`) writes the env file and the dataset
and points OpenRLHF here; this module rebuilds each rollout's `Problem` from its label and scores
or plays it (it imports no driver code: the engines load it outside the package's import graph).

  reward   single-turn envs: this file is --reward.remote_url; `reward_func` scores the response
           (the decoded query after the prompt, cut at the end-of-turn marker) with `env.score`.
  agent    multi-turn envs (Sudoku, MiniF2F): this file is --train.agent_func_path; OpenRLHF's
           `MultiTurnAgentExecutor` runs `AgentInstance`, which resets the env from the label
           (`env.reset`), steps it with each model turn (`env.step`) and answers with the env's
           next observation as a new user turn (`turn_template`, ChatML by default); the reward
           is 0 until the episode ends, then the episode's. OpenRLHF's executor caps only the
           whole trajectory (--data.max_len); `AgentExecutor` also caps each turn at
           --rollout.max_new_tokens (the paper's per-turn limits).
  env file the run's openrlhf/env.json (`ENV_FILE`): the env's kind, spec and seed, the chat
           settings and every problem of the run by id (`problem_row`), so a vLLM engine rebuilds
           the exact `Problem` without regenerating the env's problem set (CodeIO's runs
           sandboxed programs). Labels (`labels.encode_label`) carry its path and the problem id.
"""
from __future__ import annotations

import asyncio
import copy
import functools
import json
import queue
import threading
from pathlib import Path
from typing import Any, Sequence

from sparserl.core.config import section_setting
from sparserl.engines.openrlhf.experiment import END_OF_TURN
from sparserl.engines.openrlhf.labels import decode_label
from sparserl.envs.base import Problem

try:  # the agent classes OpenRLHF loads from this file; the driver side needs no OpenRLHF
    from openrlhf.utils.agent import AgentInstanceBase, MultiTurnAgentExecutor
except ImportError:  # pragma: no cover - only without the OpenRLHF install
    AgentInstanceBase = object
    MultiTurnAgentExecutor = None

ENV_FILE = "env.json"  # under the run's openrlhf/ folder
THIS_FILE = str(Path(__file__).resolve())


def problem_row(p: Problem) -> dict:
    """A problem as the env file holds it (`problem_of` rebuilds it)."""
    return {"prompt": p.prompt, "answer": p.answer, "privileged": p.privileged, "meta": p.meta}


class _EnvPool:
    """Env instances of one env file (`workers` of them: the schema's $defs.env_common) lent to one
    caller at a time; OpenRLHF calls rewards and agents from threads."""

    def __init__(self, doc: dict):
        self.doc = doc
        self.size = max(1, int(section_setting(doc["spec"], "$defs", "env_common", "workers")))
        self._free: queue.Queue = queue.Queue()
        self._made = 0
        self._lock = threading.Lock()

    def _make(self):
        from sparserl.envs import make_env
        return make_env(self.doc["kind"], self.doc["spec"], int(self.doc["seed"]))

    def acquire(self):
        with self._lock:
            if self._free.empty() and self._made < self.size:
                self._made += 1
                return self._make()
        return self._free.get()

    def release(self, env) -> None:
        self._free.put(env)

    def run(self, fn):
        env = self.acquire()
        try:
            return fn(env)
        finally:
            self.release(env)

    @functools.cached_property
    def multi_turn(self) -> bool:
        return bool(self.run(lambda e: e.multi_turn))

    @functools.cached_property
    def max_turns(self) -> int:
        return int(self.run(lambda e: e.max_turns))


_LOAD_LOCK = threading.Lock()


def _load(env_file: str) -> tuple[dict, _EnvPool]:
    """The run's env document and its env pool, read once per process (OpenRLHF's reward and
    agent calls come from several threads)."""
    with _LOAD_LOCK:
        return _load_once(env_file)


@functools.lru_cache(maxsize=8)
def _load_once(env_file: str) -> tuple[dict, _EnvPool]:
    doc = json.loads(Path(env_file).read_text())
    return doc, _EnvPool(doc)


def forget_env_files() -> None:
    """Drop the env documents and pools read so far (a caller that deletes its env file)."""
    _load_once.cache_clear()


def problem_of(label: Any) -> tuple[Problem, dict, _EnvPool]:
    """The label's Problem, the run's env document and its env pool."""
    d = decode_label(label)
    if not d.get("env_file") or not d.get("pid"):
        raise ValueError(f"label {str(label)[:200]!r} has no env_file/pid: not a Le Critique dataset row; "
                         "rebuild the prompt dataset with `sparserl critique-openrlhf`")
    doc, pool = _load(str(d["env_file"]))
    row = doc["problems"].get(str(d["pid"]))
    if row is None:
        raise KeyError(f"problem {d['pid']!r} is not in {d['env_file']}; the dataset and the env file "
                       "come from different builds")
    return Problem(id=str(d["pid"]), **row), doc, pool


def response_only(text: str, end_of_turn: str = END_OF_TURN) -> str:
    """A model turn as the env grades it: cut at the end-of-turn marker."""
    return text.split(end_of_turn, 1)[0] if end_of_turn and end_of_turn in text else text


def response_text(query: str, prompt: str) -> str:
    """The response part of OpenRLHF's decoded query (prompt + response), as `losses.response_text`."""
    if prompt and query.startswith(prompt):
        return query[len(prompt):]
    tail = prompt[-64:] if prompt else ""
    i = query.rfind(tail) if tail else -1
    return query[i + len(tail):] if i >= 0 else query


def score_queries(queries: Sequence[str], prompts: Sequence[str], labels: Sequence[Any]) -> list[float]:
    """Binary rewards of single-turn rollouts through their env's `score`."""
    out = []
    for q, p, lab in zip(queries, prompts, labels):
        problem, doc, pool = problem_of(lab)
        resp = response_only(response_text(q, p), doc["end_of_turn"])
        out.append(float(pool.run(lambda env: env.score([problem], [resp])[0])))
    return out


def reward_func(queries, prompts, labels):
    """OpenRLHF's custom reward hook (--reward.remote_url <this file>): {0,1} per query from the
    env. Scalars for one query (OpenRLHF's single-turn executor sends one), tensors for several."""
    from sparserl.engines.openrlhf import envs as canonical  # OpenRLHF loads this file as another module
    scores = canonical.score_queries(queries, prompts, labels)
    if len(scores) == 1:
        return {"rewards": scores[0], "scores": scores[0], "extra_logs": {}}
    import torch
    t = torch.tensor(scores)
    return {"rewards": t, "scores": t, "extra_logs": {}}


class Episode:
    """One multi-turn episode of an env from a label, on text: `step(model turn)` ->
    {reward, done, feedback (the next user turn, "" when done), turns, outcome}. The agent and
    the start policy's evaluation both play through it."""

    def __init__(self, label: Any):
        self.problem, self.doc, self.pool = problem_of(label)
        self.eot, self.template = self.doc["end_of_turn"], self.doc["turn_template"]
        self.state = self.pool.run(lambda env: env.reset(self.problem))
        self.turns, self.done, self.reward = 0, False, 0.0

    def observation(self) -> str:
        """The env's next observation, without the first prompt when it repeats it (MiniF2F's
        feedback follows the theorem; the conversation already holds the theorem)."""
        obs = self.pool.run(lambda env: env.observe(self.state))
        p = self.problem.prompt
        return obs[len(p):].strip() if obs.startswith(p) and len(obs) > len(p) else obs

    def step(self, action_text: str) -> dict:
        if self.done:
            raise ValueError(f"episode {self.problem.id} is over; OpenRLHF stepped it again")
        resp = response_only(action_text, self.eot)
        self.state, done, reward = self.pool.run(lambda env: env.step(self.state, resp))
        self.turns += 1
        if not done and self.turns >= self.pool.max_turns:  # out of turns: unfinished, 0
            done = True
        self.done, self.reward = bool(done), float(reward) if done else 0.0
        feedback = ""
        if not self.done:
            close = "" if (not self.eot or action_text.rstrip().endswith(self.eot)) else self.eot
            feedback = close + self.template.format(observation=self.observation())
        return {"reward": self.reward, "done": self.done, "feedback": feedback, "turns": self.turns,
                "outcome": str(getattr(self.state, "outcome", "") or ("solved" if self.reward > 0 else ""))}


class AgentInstance(AgentInstanceBase):
    """One rollout of a multi-turn env for OpenRLHF's `MultiTurnAgentExecutor` (module doc)."""

    def __init__(self, *args, **kwargs):
        self.episode: Episode | None = None

    async def reset(self, states: dict, **kwargs):
        self.episode = await asyncio.to_thread(Episode, states["label"])
        return {"observation": states["observation"]}  # the chat-templated first prompt as it is

    async def step(self, states: dict, **kwargs):
        import torch
        out = await asyncio.to_thread(self.episode.step, states["action_text"])  # Lean runs off the event loop
        r = torch.tensor(out["reward"])
        return {"rewards": r, "scores": r, "environment_feedback": out["feedback"], "done": out["done"],
                "sampling_params": states.get("sampling_params"), "extra_logs": {"turns": float(out["turns"])}}


class _TurnCap:
    """The vLLM engine as the executor sees it, each generation capped at `cap` new tokens."""

    def __init__(self, engine, cap: int | None):
        self.engine, self.cap = engine, cap

    async def generate(self, prompt_ids, sampling_params, **kw):
        if self.cap and (sampling_params.max_tokens is None or sampling_params.max_tokens > self.cap):
            sampling_params.max_tokens = int(self.cap)
        return await self.engine.generate(prompt_ids, sampling_params, **kw)

    def __getattr__(self, name):
        return getattr(self.engine, name)


if MultiTurnAgentExecutor is not None:

    class AgentExecutor(MultiTurnAgentExecutor):
        """OpenRLHF's multi-turn executor over `AgentInstance`, each turn capped at the
        dataset-time --rollout.max_new_tokens (OpenRLHF passes each turn the trajectory's rest)."""

        def __init__(self):
            super().__init__(AgentInstance)

        async def execute(self, prompt, label, sampling_params, max_length: int, hf_tokenizer, llm_engine,
                          images=None):
            # OpenRLHF hands the K executions of a prompt one SamplingParams, which its executor
            # mutates per turn: each execution gets its own copy
            sampling_params = copy.deepcopy(sampling_params)
            cap = getattr(sampling_params, "max_tokens", None)
            return await super().execute(prompt, label, sampling_params, max_length, hf_tokenizer,
                                         _TurnCap(llm_engine, cap), images)


__all__ = ["AgentInstance", "ENV_FILE", "Episode", "THIS_FILE", "forget_env_files", "problem_of", "problem_row",
           "response_only", "response_text", "reward_func", "score_queries"]
if MultiTurnAgentExecutor is not None:
    __all__.append("AgentExecutor")
