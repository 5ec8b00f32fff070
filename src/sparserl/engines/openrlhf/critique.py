"""Le Critique's experiments at paper scale on OpenRLHF 0.11.2, the driver: an env's prompt
dataset, the argument list of a run, and the run end to end (the env side that OpenRLHF loads by
path, reward function and agent, is `envs`; the run's settings are `experiment`).

Paper: Le Critique: Privileged Value Functions for LLM Reinforcement Learning (arXiv 2608.16739),
Sections 4-6 and Appendix D.
The envs are `sparserl.envs` (Reasoning Gym mixture, CodeIO, Sudoku, MiniF2F); the methods are
configs/methods/lc_*.yaml with their group size set to the experiment's K; OpenRLHF's critic path
with our critic (`critic`, `experience`) trains the value model.

  dataset  one JSONL row {"input": the env's prompt, "label"} per problem of every step, the
           critic's warm-up steps included; K samples of each (--rollout.n_samples_per_prompt).
           The label (`labels.encode_label`) carries uid (problem id + row: one group per
           row), answer, privileged (the critic's context for `privileged: answer`), env, pid
           and env_file: the run's openrlhf/env.json, which holds the env's kind, spec and seed,
           the chat settings and every problem of the run by id (prompt, answer, privileged,
           meta), so a vLLM engine rebuilds the exact `Problem` without regenerating the env's
           problem set (CodeIO's runs sandboxed programs). A second file of the eval side's
           problems is OpenRLHF's --eval.dataset (datasource "heldout").
  reward   single-turn envs: `envs` is --reward.remote_url (`envs.reward_func`).
  agent    multi-turn envs (Sudoku, MiniF2F): `envs` is --train.agent_func_path (`envs.AgentInstance`,
           `envs.AgentExecutor`).
  argv     `flags.openrlhf_flags` on the experiment's settings (`critique.rl` + its own `rl`) with
           the method's group size set to K and the critic flags of critic methods; plus the
           env's reward or agent file, the held-out evaluation at the last global step, and no
           intermediate checkpoints (only final/ is read; runs do not resume, see `critic`).
  run      `run_critique`: dataset, argv, Ray + OpenRLHF's train() (`launcher.train_with_ray`),
           then metrics.parquet (policy steps: OpenRLHF's global step minus the warm-up) and
           summary.json (held-out reward from OpenRLHF's eval) in the run's folder (its
           `methods.run.resolve_critique_run` record, as the DAG resolved it), the files the
           tiny-scale summary and figures read.

Start policy: `start_reward` is the paper-scale `critique-start`: the hub policy's held-out reward
on one env with vLLM (`rollout.VLLMBackend`), the same eval problems, samples, chat template and
turn logic (`Episode`) as the runs' evaluation.
"""
from __future__ import annotations

import importlib
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from sparserl.core.config import setting
from sparserl.engines.openrlhf.critic_warmup import critic_warmup_steps, warmup_schedule
from sparserl.engines.openrlhf.envs import (ENV_FILE, THIS_FILE, Episode, forget_env_files, problem_of, problem_row,
                                            score_queries)
from sparserl.engines.openrlhf.experiment import settings
from sparserl.engines.openrlhf.flags import flags_to_argv, openrlhf_flags
from sparserl.engines.openrlhf.labels import encode_label
from sparserl.engines.openrlhf.launcher import train_with_ray
from sparserl.engines.sizing import critique_save_steps
from sparserl.envs.base import Problem
from sparserl.envs.world import heldout_eval

HELDOUT_FILE = "heldout.jsonl"
HELDOUT_SOURCE = "heldout"  # the eval rows' datasource: OpenRLHF logs eval/eval_heldout_pass1
HELDOUT_COLUMN = f"eval_eval_{HELDOUT_SOURCE}_pass1"  # its metrics.parquet column (`metrics`)


# --------------------------------------------------------------------------- settings


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


def build_dataset(cfg: dict, exp: str, method, seed: int, run) -> dict:
    """Write the run's env file, prompt dataset and held-out file (module doc); returns their
    paths and sizes. `method` is the run's spec (`Run.spec`)."""
    from sparserl.core.artifacts import atomic_write_text
    from sparserl.methods.spec import prompts_per_step
    s = settings(cfg, exp)
    name, spec, env = _env_of(cfg, exp)
    try:
        pool = env.problems("rl", int(s["pool"]))
        held = env.problems("eval", heldout_eval(s)[0])
    finally:
        env.close()
    if not pool:
        raise ValueError(f"critique env {name!r}: no problems on the rl side; check its split/sides and data")
    if not held:
        raise ValueError(f"critique env {name!r}: no problems on the eval side; check its split/sides and data")
    env_file = Path(run.openrlhf) / ENV_FILE
    doc = {"env": name, "kind": spec["kind"], "spec": worker_spec(spec), "seed": int(cfg["seed"]),
           "end_of_turn": s["end_of_turn"], "turn_template": s["turn_template"],
           "problems": {p.id: problem_row(p) for p in list(pool) + list(held)}}
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


# --------------------------------------------------------------------------- argv


def critique_flags(cfg: dict, rec, *, config_paths: list | None = None) -> dict[str, Any]:
    """OpenRLHF flags of one Le Critique run `rec` (`methods.run.resolve_critique_run`: its folder
    absolute, Ray workers have another cwd): `flags.openrlhf_flags` on the experiment's settings
    (steps, rollouts per step, lengths, lr, temperature, openrlhf overrides) and the method with
    group size K, then the env's files and the evaluation (module doc)."""
    from sparserl.envs.world import critique_cfg, experiment
    exp, method_name, seed, method, run = rec.experiment, rec.method, rec.seed, rec.spec, rec.paths
    s = settings(cfg, exp)
    e = experiment(cfg, exp)
    policy = rec.reads.policy  # a hub model's local copy (rule fetch_models)
    if not (e.policy_hub or critique_cfg(cfg).get("policy_hub")):
        raise ValueError(f"critique-openrlhf: experiment {exp} has no hub policy; set critique.policy_hub "
                         "(paper scale), or train it with the local engine (critique-train)")
    sub = {"scale": cfg["scale"], "seed": cfg["seed"], "results_dir": setting(cfg, "results_dir"),
           "tasks": {"chat_template": True},
           "rollout": {"backend": "vllm", "max_new_tokens": s["max_new_tokens"], "vllm": {"max_model_len": s["max_len"]}},
           "rl": {k: s[k] for k in ("steps", "rollouts_per_step", "lr", "temperature", "mini_batches", "ppo_epochs",
                                    "weight_decay", "max_new_tokens", "openrlhf") if k in s}}
    sub["rl"]["eval_fractions"] = []
    # a DeepSpeed resume point every few hours of work (sizing.critique_save_steps), whatever the
    # critic's warm-up; no HF copies (only final/ is read: eval_fractions [], hf_steps [])
    every = critique_save_steps(cfg, exp, method_name, policy)
    f = openrlhf_flags(sub, method, seed, run, policy_path=str(Path(policy).absolute()),
                       config_paths=config_paths, resume_every=every)
    W = critic_warmup_steps(method)
    multi = is_multi_turn(critique_cfg(cfg)["envs"][e.env]["kind"])
    f.update({
        "rollout.max_new_tokens": s["max_new_tokens"],  # multi-turn: per turn (`AgentExecutor`)
        "data.max_len": s["max_len"],  # multi-turn: the whole trajectory
        "eval.dataset": str(Path(run.openrlhf) / HELDOUT_FILE),
        "eval.steps": int(s["steps"]) + W,  # once, after the last policy update
        "eval.n_samples_per_prompt": heldout_eval(s)[1],
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


def critique_argv(cfg: dict, rec, **kw) -> list[str]:
    return flags_to_argv(critique_flags(cfg, rec, **kw))


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


def run_critique(cfg: dict, rec, *, dry_run: bool = False, config_paths: list | None = None,
                 log=print) -> list[str]:
    """`critique-openrlhf`: dataset, argv (checked by OpenRLHF's parser), Ray + train(), then
    metrics.parquet and summary.json in the folder of run `rec` (`critique_flags`). Returns the argv."""
    import shutil

    from sparserl.core.artifacts import atomic_write_text, write_json, write_table
    from sparserl.engines.openrlhf import OPENRLHF_VERSION
    from sparserl.engines.openrlhf.metrics import HARVEST_FILE, metrics_from_tensorboard
    from sparserl.engines.openrlhf.parser import parse_args
    from sparserl.envs.world import experiment
    exp, method_name, seed, method, run = rec.experiment, rec.method, rec.seed, rec.spec, rec.paths
    argv = critique_argv(cfg, rec, config_paths=config_paths)
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


def start_reward(cfg: dict, env_name: str, CP, backend=None, tokenizer=None) -> dict:
    """Held-out reward of the paper-scale start policy on one env (`critique-start` under the
    OpenRLHF engine; `CP` the tree's `CritiquePaths`, where the experiments' hub policies are
    copied): the eval side's problems x `rl.eval.samples` at the runs' temperature,
    chat-templated, multi-turn envs played turn by turn through `Episode` within the trajectory
    limit. `backend` (a RolloutBackend; default vLLM on the hub policy) and `tokenizer` (its
    chat template and token counts) are for tests."""
    import tempfile

    from sparserl.envs.world import experiments
    from sparserl.rollout import SamplingParams
    exps = [e for e in experiments(cfg) if e.env == env_name]
    if not exps:
        raise ValueError(f"critique-start: no experiment runs on env {env_name!r}")
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
        problems = env.problems("eval", heldout_eval(s)[0])
    finally:
        env.close()
    k = heldout_eval(s)[1]
    chat = lambda text: tok.apply_chat_template([{"role": "user", "content": text}], tokenize=False,  # noqa: E731
                                                add_generation_prompt=True)
    with tempfile.TemporaryDirectory() as tmp:
        env_file = Path(tmp) / ENV_FILE
        env_file.write_text(json.dumps({"env": name, "kind": spec["kind"], "spec": spec, "seed": int(cfg["seed"]),
                                        "end_of_turn": s["end_of_turn"], "turn_template": s["turn_template"],
                                        "problems": {p.id: problem_row(p) for p in problems}}, default=str))
        labels = [json.dumps({"pid": p.id, "env_file": str(env_file)}) for p in problems for _ in range(k)]
        texts = [chat(p.prompt) for p in problems for _ in range(k)]
        rewards = play_chat(labels, texts, backend, tok, params, s["max_len"], seed=424_242)
        forget_env_files()
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


__all__ = ["HELDOUT_COLUMN", "build_dataset", "critique_argv", "critique_flags", "is_multi_turn", "play_chat",
           "run_critique", "start_reward", "summary", "worker_spec"]
