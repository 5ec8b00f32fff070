"""Le Critique's experiments at paper scale on OpenRLHF 0.11.2: an env's prompt dataset, its
reward function or agent, the argument list of a run, and the run end to end.

Paper: Le Critique: Privileged Value Functions for LLM Reinforcement Learning (arXiv 2608.16739),
Sections 4-6 and Appendix D.
The envs are `sparserl.envs` (Reasoning Gym mixture, CodeIO, Sudoku, MiniF2F); the methods are
configs/methods/lc_*.yaml with their group size set to the experiment's K; OpenRLHF's critic path
with our critic (`critic`, `experience`) trains the value model.

  dataset  one JSONL row {"input": the env's prompt, "label"} per problem of every step, the
           critic's warm-up steps included; K samples of each (--rollout.n_samples_per_prompt).
           The label (`experience.encode_label`) carries uid (problem id + row: one group per
           row), answer, privileged (the critic's context for `privileged: answer`), env, pid
           and env_file: the run's openrlhf/env.json, which holds the env's kind, spec and seed,
           the chat settings and every problem of the run by id (prompt, answer, privileged,
           meta), so a vLLM engine rebuilds the exact `Problem` without regenerating the env's
           problem set (CodeIO's runs sandboxed programs). A second file of the eval side's
           problems is OpenRLHF's --eval.dataset (datasource "heldout").
  reward   single-turn envs: this file is --reward.remote_url; `reward_func` scores the response
           (the decoded query after the prompt, cut at the end-of-turn marker) with `env.score`.
  agent    multi-turn envs (Sudoku, MiniF2F): this file is --train.agent_func_path; OpenRLHF's
           `MultiTurnAgentExecutor` runs `AgentInstance`, which resets the env from the label
           (`env.reset`), steps it with each model turn (`env.step`) and answers with the env's
           next observation as a new user turn (`turn_template`, ChatML by default); the reward
           is 0 until the episode ends, then the episode's. OpenRLHF's executor caps only the
           whole trajectory (--data.max_len); `AgentExecutor` also caps each turn at
           --rollout.max_new_tokens (the paper's per-turn limits).
  argv     `flags.openrlhf_argv` on the experiment's settings (`critique.rl` + its own `rl`) with
           the method's group size set to K and the critic flags of critic methods; plus the
           env's reward or agent file, the held-out evaluation at the last global step, and no
           intermediate checkpoints (only final/ is read; runs do not resume, see `critic`).
  run      `run_critique`: dataset, argv, Ray + OpenRLHF's train() (`launcher.train_with_ray`),
           then metrics.parquet (policy steps: OpenRLHF's global step minus the warm-up) and
           summary.json (held-out reward from OpenRLHF's eval) in the `CritiquePaths` run dir,
           the files the tiny-scale summary and figures read.

Start policy: `start_reward` is the paper-scale `critique-start`: the hub policy's held-out reward
on one env with vLLM (`rollout.VLLMBackend`), the same eval problems, samples, chat template and
turn logic (`Episode`) as the runs' evaluation.
"""
from __future__ import annotations

import asyncio
import copy
import functools
import importlib
import json
import math
import queue
import threading
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from sparserl.envs.base import Problem

try:  # the agent classes OpenRLHF loads from this file; the driver side needs no OpenRLHF
    from openrlhf.utils.agent import AgentInstanceBase, MultiTurnAgentExecutor
except ImportError:  # pragma: no cover - only without the OpenRLHF install
    AgentInstanceBase = object
    MultiTurnAgentExecutor = None

ENV_FILE = "env.json"  # under the run's openrlhf/ folder
HELDOUT_FILE = "heldout.jsonl"
HELDOUT_SOURCE = "heldout"  # the eval rows' datasource: OpenRLHF logs eval/eval_heldout_pass1
HELDOUT_COLUMN = f"eval_eval_{HELDOUT_SOURCE}_pass1"  # its metrics.parquet column (`metrics`)
END_OF_TURN = "<|im_end|>"  # Qwen3's ChatML
TURN_TEMPLATE = "\n<|im_start|>user\n{observation}<|im_end|>\n<|im_start|>assistant\n"
THIS_FILE = str(Path(__file__).resolve())


# --------------------------------------------------------------------------- settings


def settings(cfg: dict, exp: str) -> dict:
    """The experiment's run settings: `critique.rl` with its own `rl`, lengths resolved."""
    from sparserl.envs.world import experiment_rl
    rl = experiment_rl(cfg, exp)
    max_new = int(rl["max_new_tokens"])
    return {**rl, "max_new_tokens": max_new, "max_len": int(rl.get("max_len") or max_new + 2048),
            "temperature": float(rl.get("temperature", 1.0)),
            "end_of_turn": str(rl.get("end_of_turn", END_OF_TURN)),
            "turn_template": str(rl.get("turn_template", TURN_TEMPLATE)),
            "eval": dict(rl.get("eval") or {"problems": 128, "samples": 4})}


def run_method(cfg: dict, exp: str, method_name: str):
    """The method spec of a run: group size = the experiment's K (as the local engine), the
    scale's critic lr (`critique.rl.critic_lr`) when set (`methods.run.resolve_critique_run`)."""
    from sparserl.methods.run import resolve_critique_run
    return resolve_critique_run(cfg, exp, method_name, 0).spec


def run_paths(cfg: dict, exp: str, method: str, seed: int):
    """The run's files: `CritiquePaths.run` (metrics.parquet, summary.json, final/) with the
    OpenRLHF engine's working files under openrlhf/ (absolute: Ray workers have another cwd)."""
    from sparserl.core.paths import RunPaths
    from sparserl.methods.run import resolve_critique_run
    rp = resolve_critique_run(cfg, exp, method, seed).paths
    return RunPaths(Path(rp.dir).absolute(), method, seed, engine="openrlhf")


def is_multi_turn(kind: str) -> bool:
    """Whether an env kind plays episodes (its class attribute; nothing is built)."""
    from sparserl.envs import ENVS
    mod, cls = ENVS[kind].split(":")
    return bool(getattr(importlib.import_module(mod), cls).multi_turn)


def _env_of(cfg: dict, exp: str):
    from sparserl.envs import make_env
    from sparserl.envs.world import critique_cfg, experiment
    name = experiment(cfg, exp).env
    spec = critique_cfg(cfg)["envs"][name]
    return name, spec, make_env(spec["kind"], spec, cfg["seed"])


# --------------------------------------------------------------------------- dataset


PATH_KEYS = ("data", "project_dir")  # env spec keys naming files (MiniF2F's theorems, its Lean project)


def worker_spec(spec: dict) -> dict:
    """The env spec as the Ray workers read it: relative paths made absolute (they run elsewhere)."""
    out = dict(spec)
    for k in PATH_KEYS:
        if isinstance(out.get(k), str) and out[k] and not Path(out[k]).is_absolute():
            out[k] = str(Path(out[k]).absolute())
    return out


def _problem_row(p: Problem) -> dict:
    return {"prompt": p.prompt, "answer": p.answer, "privileged": p.privileged, "meta": p.meta}


def build_dataset(cfg: dict, exp: str, method, seed: int, run) -> dict:
    """Write the run's env file, prompt dataset and held-out file (module doc); returns their
    paths and sizes. `method` is the run's spec (`run_method`)."""
    from sparserl.core.artifacts import atomic_write_text
    from sparserl.engines.openrlhf.experience import encode_label
    from sparserl.engines.openrlhf.flags import critic_warmup_steps
    from sparserl.methods.spec import prompts_per_step
    s = settings(cfg, exp)
    name, spec, env = _env_of(cfg, exp)
    try:
        pool = env.problems("rl", int(s["pool"]))
        held = env.problems("eval", int(s["eval"]["problems"]))
    finally:
        env.close()
    if not pool:
        raise ValueError(f"critique env {name!r}: no problems on the rl side; check its split/sides and data")
    if not held:
        raise ValueError(f"critique env {name!r}: no problems on the eval side; check its split/sides and data")
    env_file = Path(run.openrlhf) / ENV_FILE
    doc = {"env": name, "kind": spec["kind"], "spec": worker_spec(spec), "seed": int(cfg["seed"]),
           "end_of_turn": s["end_of_turn"], "turn_template": s["turn_template"],
           "problems": {p.id: _problem_row(p) for p in list(pool) + list(held)}}
    atomic_write_text(env_file, json.dumps(doc, default=str))

    B = prompts_per_step(method, int(s["rollouts_per_step"]))
    n = (int(s["steps"]) + critic_warmup_steps(method)) * B  # the warm-up steps' prompts first
    rng = np.random.default_rng(seed)
    order = np.concatenate([rng.permutation(len(pool)) for _ in range(-(-n // len(pool)))])[:n]

    def row(p: Problem, i: int, **extra) -> str:
        label = encode_label(f"{p.id}#{i}", p.answer, env=name, pid=p.id, env_file=str(env_file),
                             privileged=p.privileged or None)
        return json.dumps({"input": p.prompt, "label": label, **extra})

    atomic_write_text(run.prompts, "\n".join(row(pool[int(j)], i) for i, j in enumerate(order)) + "\n")
    heldout = Path(run.openrlhf) / HELDOUT_FILE
    atomic_write_text(heldout, "\n".join(row(p, i, datasource=HELDOUT_SOURCE) for i, p in enumerate(held)) + "\n")
    return {"prompts": Path(run.prompts), "heldout": heldout, "env_file": env_file, "rows": n,
            "prompts_per_step": B, "pool": len(pool), "heldout_problems": len(held)}


# --------------------------------------------------------------------------- env side (vLLM engines)


class _EnvPool:
    """Env instances of one env file (`workers` of them, default 1: MiniF2F's Lean REPLs are
    not thread-safe) lent to one caller at a time; OpenRLHF calls rewards and agents from threads."""

    def __init__(self, doc: dict):
        self.doc = doc
        self.size = max(1, int(doc["spec"].get("workers", 1)))
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


def problem_of(label: Any) -> tuple[Problem, dict, _EnvPool]:
    """The label's Problem, the run's env document and its env pool."""
    from sparserl.engines.openrlhf.experience import decode_label
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


# --------------------------------------------------------------------------- argv


def critique_flags(cfg: dict, exp: str, method_name: str, seed: int, *, run=None,
                   config_paths: list | None = None) -> dict[str, Any]:
    """OpenRLHF flags of one Le Critique run: `flags.openrlhf_flags` on the experiment's settings
    (steps, rollouts per step, lengths, lr, temperature, openrlhf overrides) and the method with
    group size K, then the env's files and the evaluation (module doc)."""
    from sparserl.envs.world import CritiquePaths, critique_cfg, experiment
    from sparserl.engines.openrlhf.flags import critic_warmup_steps, openrlhf_flags
    from sparserl.engines.sizing import critique_save_steps
    s = settings(cfg, exp)
    e = experiment(cfg, exp)
    method = run_method(cfg, exp, method_name)
    run = run or run_paths(cfg, exp, method_name, seed)
    policy = CritiquePaths(cfg).policy(exp)  # a hub model's local copy (rule fetch_models)
    if not (e.policy_hub or critique_cfg(cfg).get("policy_hub")):
        raise ValueError(f"critique-openrlhf: experiment {exp} has no hub policy; set critique.policy_hub "
                         "(paper scale), or train it with the local engine (critique-train)")
    sub = {"scale": cfg["scale"], "seed": cfg["seed"], "results_dir": cfg.get("results_dir", "results"),
           "tasks": {"chat_template": True},
           "rollout": {"backend": "vllm", "max_new_tokens": s["max_new_tokens"], "vllm": {"max_model_len": s["max_len"]}},
           "rl": {k: s[k] for k in ("steps", "rollouts_per_step", "lr", "temperature", "mini_batches", "ppo_epochs",
                                    "weight_decay", "max_new_tokens", "openrlhf") if k in s}}
    sub["rl"]["eval_fractions"] = []
    # a DeepSpeed resume point every few hours of work (sizing.critique_save_steps), whatever the
    # critic's warm-up; no HF copies (only final/ is read: eval_fractions [], hf_steps [])
    every = critique_save_steps(cfg, exp, method_name)
    f = openrlhf_flags(sub, method, seed, run.final, policy_path=str(Path(policy).absolute()),
                       config_paths=config_paths, resume_every=every)
    W = critic_warmup_steps(method)
    multi = is_multi_turn(critique_cfg(cfg)["envs"][e.env]["kind"])
    f.update({
        "rollout.max_new_tokens": s["max_new_tokens"],  # multi-turn: per turn (`AgentExecutor`)
        "data.max_len": s["max_len"],  # multi-turn: the whole trajectory
        "eval.dataset": str(Path(run.openrlhf) / HELDOUT_FILE),
        "eval.steps": int(s["steps"]) + W,  # once, after the last policy update
        "eval.n_samples_per_prompt": int(s["eval"].get("samples", 4)),
        "eval.temperature": s["temperature"],
        "ckpt.save_steps": every,
        "ckpt.save_hf": False,
        "logger.wandb.run_name": f"{exp}_{method_name}_seed{int(seed)}",
        "sparserl.run_dir": str(run.dir),
    })
    if multi:
        f["reward.remote_url"] = None  # OpenRLHF sets "agent" itself
        f["train.agent_func_path"] = THIS_FILE
    else:
        f["reward.remote_url"] = THIS_FILE
    assert e.k == f["rollout.n_samples_per_prompt"]
    return f


def critique_argv(cfg: dict, exp: str, method_name: str, seed: int, **kw) -> list[str]:
    from sparserl.engines.openrlhf.flags import flags_to_argv
    return flags_to_argv(critique_flags(cfg, exp, method_name, seed, **kw))


# --------------------------------------------------------------------------- a run


def run_metrics(every, rollouts_per_step: int):
    """metrics.parquet of a run from OpenRLHF's scalars by policy step (`every`:
    `metrics.metrics_from_tensorboard` with the warm-up W subtracted): the warm-up rows dropped
    (the local engine logs policy steps only), the local engine's rollouts columns added."""
    df = every[every["step"] >= 1].reset_index(drop=True) if "step" in every else every
    if len(df):
        df["rollouts"] = int(rollouts_per_step)
        df["rollouts_total"] = df["rollouts"].cumsum()
        for col in ("reward_mean", "wall_time_s"):
            if col not in df:
                df[col] = float("nan")
    return df


def summary(cfg: dict, exp: str, method, seed: int, metrics_all, metrics) -> dict:
    """summary.json of a run (the local engine's keys): held-out reward from OpenRLHF's eval at
    the last step (`HELDOUT_COLUMN`), else NaN with a note."""
    from sparserl.engines.openrlhf.critic import warmup_schedule
    from sparserl.envs.world import experiment
    e = experiment(cfg, exp)
    s = settings(cfg, exp)
    held, note = float("nan"), None
    if HELDOUT_COLUMN in metrics_all and metrics_all[HELDOUT_COLUMN].notna().any():
        held = float(metrics_all[HELDOUT_COLUMN].dropna().iloc[-1])
    else:
        note = (f"OpenRLHF logged no {HELDOUT_COLUMN} (eval/eval_{HELDOUT_SOURCE}_pass1): its evaluation did "
                "not run or tensorboard is not installed; heldout_reward is NaN")
    warm = 0
    if method.critic is not None:
        warm = int(sum(warmup_schedule(method.critic)))
        if "critic_warmup" in metrics_all and "critic_updates" in metrics_all:  # what the critic did
            w = metrics_all[metrics_all["critic_warmup"] == 1]
            if len(w):
                warm = int(w["critic_updates"].fillna(0).sum())
    out = {"experiment": e.name, "env": e.env, "k": e.k, "method": method.name, "seed": int(seed),
           "steps": int(s["steps"]), "warmup_updates": warm,
           "rollouts_total": int(metrics["rollouts_total"].iloc[-1]) if len(metrics) else 0,
           "heldout_reward": held, "engine": "openrlhf"}
    if note:
        out["heldout_note"] = note
    return out


def run_critique(cfg: dict, exp: str, method_name: str, seed: int, *, dry_run: bool = False,
                 config_paths: list | None = None, log=print) -> list[str]:
    """`critique-openrlhf`: dataset, argv (checked by OpenRLHF's parser), Ray + train(), then
    metrics.parquet and summary.json in the run dir. Returns the argv."""
    import shutil

    from sparserl.core.artifacts import atomic_write_text, write_json, write_table
    from sparserl.engines.openrlhf import OPENRLHF_VERSION
    from sparserl.engines.openrlhf.flags import critic_warmup_steps
    from sparserl.engines.openrlhf.launcher import train_with_ray
    from sparserl.engines.openrlhf.metrics import HARVEST_FILE, metrics_from_tensorboard
    from sparserl.engines.openrlhf.parser import parse_args
    from sparserl.envs.world import experiment
    run = run_paths(cfg, exp, method_name, seed)
    method = run_method(cfg, exp, method_name)
    argv = critique_argv(cfg, exp, method_name, seed, run=run, config_paths=config_paths)
    parse_args(argv)  # OpenRLHF's own checks, before any GPU work
    if dry_run:
        return argv
    for stale in (run.final, run.metrics, run.dir / "summary.json", run.tensorboard):
        shutil.rmtree(stale, ignore_errors=True) if stale.is_dir() else stale.unlink(missing_ok=True)
    run.openrlhf.mkdir(parents=True, exist_ok=True)
    (run.openrlhf / HARVEST_FILE).unlink(missing_ok=True)
    e = experiment(cfg, exp)
    keys = {"experiment": exp, "env": e.env, "k": e.k, "method": method_name, "seed": int(seed)}
    write_json({**keys, "argv": argv}, run.args, cfg=cfg)
    data = build_dataset(cfg, exp, method, seed, run)
    log(f"[critique-openrlhf] {exp} {method_name} seed {seed}: {data['rows']} prompts "
        f"({data['prompts_per_step']} per step x K={e.k}), {data['heldout_problems']} held-out -> {run.openrlhf}")
    train_with_ray(argv, settings(cfg, exp).get("openrlhf") or {}, log=log)
    s = settings(cfg, exp)
    W = critic_warmup_steps(method)
    every = metrics_from_tensorboard(run.tensorboard, W)
    met = run_metrics(every, int(data["prompts_per_step"]) * method.group_size)  # the method's prompts_per_step too
    if not len(met):
        raise RuntimeError(f"{run.tensorboard}: OpenRLHF logged no training step; see the run's log")
    extra = {**keys, "steps": int(s["steps"]), "engine": f"openrlhf=={OPENRLHF_VERSION}", "warmup_steps": W}
    write_table(met, run.metrics, cfg=cfg, extra=extra)
    summ = summary(cfg, exp, method, seed, every, met)
    atomic_write_text(run.dir / "summary.json", json.dumps(summ, indent=1) + "\n")  # NaN stays NaN
    return argv


# --------------------------------------------------------------------------- the start policy


def start_reward(cfg: dict, env_name: str, backend=None, tokenizer=None) -> dict:
    """Held-out reward of the paper-scale start policy on one env (`critique-start` under the
    OpenRLHF engine): the eval side's problems x `rl.eval.samples` at the runs' temperature,
    chat-templated, multi-turn envs played turn by turn through `Episode` within the trajectory
    limit. `backend` (a RolloutBackend; default vLLM on the hub policy) and `tokenizer` (its
    chat template and token counts) are for tests."""
    import tempfile

    from sparserl.envs.world import CritiquePaths, experiments
    from sparserl.rollout import SamplingParams
    exps = [e for e in experiments(cfg) if e.env == env_name]
    if not exps:
        raise ValueError(f"critique-start: no experiment runs on env {env_name!r}")
    CP = CritiquePaths(cfg)
    policies = {str(CP.policy(e.name)) for e in exps}
    if len(policies) > 1:
        raise ValueError(f"critique-start: the experiments on env {env_name!r} start from different policies "
                         f"({sorted(policies)}); give them one policy_hub")
    exp = exps[0].name
    s = settings(cfg, exp)
    if backend is None:
        from sparserl.rollout import make_backend
        vcfg = {"seed": cfg["seed"], "rollout": {"backend": "vllm", "vllm": {
            **(cfg.get("rollout", {}).get("vllm") or {}), "max_model_len": s["max_len"]}}}
        backend = make_backend(vcfg, policies.pop())
    tok = tokenizer or backend.tokenizer
    params = SamplingParams(temperature=s["temperature"], top_p=1.0, max_new_tokens=s["max_new_tokens"])
    name, spec, env = _env_of(cfg, exp)
    try:
        problems = env.problems("eval", int(s["eval"]["problems"]))
    finally:
        env.close()
    k = int(s["eval"].get("samples", 4))
    chat = lambda text: tok.apply_chat_template([{"role": "user", "content": text}], tokenize=False,  # noqa: E731
                                                add_generation_prompt=True)
    with tempfile.TemporaryDirectory() as tmp:
        env_file = Path(tmp) / ENV_FILE
        env_file.write_text(json.dumps({"env": name, "kind": spec["kind"], "spec": spec, "seed": int(cfg["seed"]),
                                        "end_of_turn": s["end_of_turn"], "turn_template": s["turn_template"],
                                        "problems": {p.id: _problem_row(p) for p in problems}}, default=str))
        labels = [json.dumps({"pid": p.id, "env_file": str(env_file)}) for p in problems for _ in range(k)]
        texts = [chat(p.prompt) for p in problems for _ in range(k)]
        rewards = play_chat(labels, texts, backend, tok, params, s["max_len"], seed=424_242)
        _load_once.cache_clear()
    return {"env": env_name, "heldout_reward": float(np.mean(rewards)) if len(rewards) else math.nan,
            "policy": str(CP.policy(exp)), "problems": len(problems), "samples": k, "engine": "openrlhf"}


def play_chat(labels: list, texts: list[str], backend, tokenizer, params, max_len: int, seed: int = 0) -> np.ndarray:
    """Rewards of one rollout per (label, chat-templated first prompt): single-turn envs scored
    by `score_queries`, multi-turn envs stepped by `Episode`, each conversation growing by the
    model's turn and the env's next user turn until done or `max_len` tokens."""
    _p, _doc, pool = problem_of(labels[0])
    if not pool.multi_turn:
        b = backend.generate(texts, 1, params, seed)
        return np.asarray(score_queries([t + r for t, r in zip(texts, b.texts)], texts, labels))
    eps = [Episode(lab) for lab in labels]
    convo = list(texts)
    rewards = np.zeros(len(eps))
    live = list(range(len(eps)))
    turn = 0
    while live:
        b = backend.generate([convo[j] for j in live], 1, params, seed + 7919 * turn)
        nxt = []
        for r, j in enumerate(live):
            out = eps[j].step(b.texts[r])
            rewards[j] = out["reward"]
            if out["done"]:
                continue
            convo[j] += b.texts[r] + out["feedback"]
            if len(tokenizer(convo[j], add_special_tokens=False)["input_ids"]) < max_len:
                nxt.append(j)
        live, turn = nxt, turn + 1
    return rewards


__all__ = ["AgentInstance", "Episode", "HELDOUT_COLUMN", "build_dataset", "critique_argv", "critique_flags",
           "play_chat", "problem_of", "reward_func", "run_critique", "run_method", "score_queries", "settings",
           "start_reward"]
if MultiTurnAgentExecutor is not None:
    __all__.append("AgentExecutor")
