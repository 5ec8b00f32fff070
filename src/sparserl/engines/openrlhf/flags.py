"""A method spec + config -> OpenRLHF's flags (`openrlhf_flags`) and argument list (`flags_to_argv`).

Cluster defaults (`cluster_defaults`) are the schema's defaults of ``rl.openrlhf``'s dotted keys
(src/sparserl/core/config.schema.yaml), overridable from the config's free-form ``rl.openrlhf``
mapping (dotted OpenRLHF flag names, e.g. ``{"vllm.num_engines": 16}``; plus the launcher keys
``nodes``, ``gpus_per_node``, ``cpus_per_node``, ``ray_port``). The resume cadence is the caller's
(`launcher.resume_cadence`): this module reads the config and the method only.
"""
from __future__ import annotations

import functools
import json
import math
from pathlib import Path
from typing import Any

from sparserl.core.config import (ConfigError, load_schema, openrlhf_shape, rl_max_new_tokens, schema_default,
                                  section_setting, v0_actor_settings)
from sparserl.core.paths import RunPaths
from sparserl.engines.openrlhf.critic_warmup import critic_warmup_steps, freezing_steps
from sparserl.methods.spec import MethodSpec, prompts_per_step, snapshot_steps, total_steps


@functools.lru_cache(maxsize=1)
def _cluster_keys() -> tuple[str, ...]:
    props = load_schema()["$defs"]["openrlhf"]["properties"]
    return tuple(k for k, v in props.items() if "." in k and "default" in v)


def cluster_defaults() -> dict[str, Any]:
    """The OpenRLHF flags every run starts from (one 8-GPU node, everything colocated, vLLM
    sleeping during training): rl.openrlhf's dotted keys with a schema default, in the schema's
    order (the argv's order); a fresh dict."""
    return {k: schema_default("rl", "openrlhf", k) for k in _cluster_keys()}


LAUNCHER_KEYS = ("nodes", "gpus_per_node", "cpus_per_node", "ray_port", "v0_gpus", "v0_threads",
                 "v0_timeout_s", "v0_start_timeout_s")
AGG = {"token_mean": "token-mean", "seq_mean_token_mean": "seq-mean-token-mean"}
LOSS_TYPE = {"ppo_clip": "ppo", "gspo": "gspo", "gpg": "gpg"}


def save_steps(rl: dict, method: MethodSpec, resume_every: int | None = None) -> int:
    """OpenRLHF's ckpt.save_steps, the resume cadence: `resume_every` when given (at cluster scale
    `sizing.rl_resume_save_steps`, a few hours of estimated work, so a killed job loses no more),
    with the evaluated steps saved besides (`hf_steps`, `checkpoints.saves_at`; docs/cluster.md: storage).
    Without it: the gcd of the steps whose checkpoint is evaluated (`rl.eval_fractions`;
    `rl.checkpoint_every` when none is), so the resume points are the evaluated steps. A critic run
    needs it: with a warm-up of W steps, policy step s is OpenRLHF's global step s + W, and the gcd
    with W (10 for the lc_math runs) would save every 10 steps."""
    if resume_every is not None:
        return max(1, int(resume_every))
    if critic_warmup_steps(method):
        raise ValueError(f"method {method.name}: a critic run's save cadence is its resume_every "
                         "(launcher.resume_cadence: sizing.rl_resume_save_steps); pass it")
    every = math.gcd(*snapshot_steps(rl, method))
    return every if every > 0 else int(section_setting(rl, "rl", "checkpoint_every"))


def hf_steps(rl: dict, method: MethodSpec) -> list[int]:
    """OpenRLHF global steps whose HF checkpoint is evaluated: policy step s at s + W (`Paths.run(...)
    .checkpoint`); the last step is read from final/. --sparserl.hf_steps: `checkpoints` saves
    there too and writes HF copies there only."""
    W = critic_warmup_steps(method)
    return [s + W for s in snapshot_steps(rl, method)]


def critic_flags(method: MethodSpec, policy_path: str, nodes: int, gpus_per_node: int) -> dict[str, Any]:
    """OpenRLHF's critic flags of a Le Critique method: a copy of the policy with a fresh value
    head (B.3: --critic.model_name_or_path = the actor's model), the spec's learning rate on a
    constant schedule (as the actor's), the warm-up as --critic.freezing_steps (`critic_warmup.freezing_steps`),
    placed like the actor (colocated). Loss, replay and value batches come from the spec through
    the worker hook (`critic.SparseRLCriticTrainer`)."""
    c = method.critic
    f: dict[str, Any] = {
        "critic.model_name_or_path": policy_path,
        "critic.num_nodes": nodes,
        "critic.num_gpus_per_node": gpus_per_node,
        "critic.adam.lr": float(c.lr),
        "critic.lr_scheduler": "constant_with_warmup",
        "critic.lr_warmup_ratio": 0.0,
        "critic.max_norm": 1.0,
    }
    fs = freezing_steps(c)
    if fs >= 0:
        f["critic.freezing_steps"] = fs
    return f


def openrlhf_flags(cfg: dict, method: MethodSpec, seed: int, run: RunPaths, *, policy_path: str,
                   v0_model: str | Path | None = None, v0_pool: str | Path | None = None,
                   v0_embeddings: str | Path | None = None, config_paths: list | None = None,
                   resume_every: int | None = None) -> dict[str, Any]:
    """OpenRLHF flags (dotted names -> values) for one method + config + seed (`launcher.openrlhf_argv`);
    `run`: the run's files (`methods.run.Run.paths`, absolute: Ray workers do not share the driver's
    cwd); `policy_path`: the start policy (the actor's model); `v0_model`: the trained V0 of a V0
    prior's method (`Paths.v0_prior_model`), `v0_pool` and `v0_embeddings` the run's pool and V0's
    embeddings of it (its `RunInputs`: the V0 actor reads them); `resume_every`: the save cadence
    (`launcher.resume_cadence`; None: the config's ckpt.save_steps, else the evaluated steps',
    `save_steps`; a critic run or one at cluster scale must pass it)."""
    rl = cfg["rl"]
    if method.sampler == "budget":
        raise ConfigError(f"method {method.name}: V0's budget allocation runs in the local trainer only; the "
                          "OpenRLHF engine has no budget samples generator yet (drop it from rl.methods at paper scale)")
    over = dict(rl.get("openrlhf") or {})

    f: dict[str, Any] = cluster_defaults()
    # cluster shape from the launcher keys
    shape = openrlhf_shape(over)
    nodes, gpn = int(shape["nodes"]), int(shape["gpus_per_node"])
    f.update({"actor.num_nodes": nodes, "ref.num_nodes": nodes, "actor.num_gpus_per_node": gpn,
              "ref.num_gpus_per_node": gpn})
    tp = int(over.get("vllm.tensor_parallel_size", f["vllm.tensor_parallel_size"]))
    f["vllm.num_engines"] = max(1, nodes * gpn // tp)

    # data and reward
    f.update({
        "actor.model_name_or_path": policy_path,
        "data.prompt_dataset": str(run.prompts),
        "data.input_key": "input",
        "data.label_key": "label",
        "reward.remote_url": str(Path(__file__).with_name("losses.py")),  # our reward_func
        "train.seed": int(seed),
        "train.num_episodes": 1,
        "ckpt.output_dir": str(run.final),
        "ckpt.path": str(run.checkpoints),
        "logger.tensorboard_dir": str(run.tensorboard),
        "logger.wandb.run_name": f"{method.name}_seed{int(seed)}",
    })
    if cfg.get("tasks", {}).get("chat_template"):
        f["data.apply_chat_template"] = True
    max_new = rl_max_new_tokens(cfg)
    max_len = cfg.get("rollout", {}).get("vllm", {}).get("max_model_len") or (max_new + 2048)
    f["rollout.max_new_tokens"] = max_new
    f["data.max_len"] = int(max(max_len, max_new + 1))
    if "temperature" in rl:
        f["rollout.temperature"] = float(rl["temperature"])
    if "lr" in rl:
        f["actor.adam.lr"] = float(rl["lr"])
    if "weight_decay" in rl:
        f["actor.adam.weight_decay"] = float(rl["weight_decay"])
    if "ppo_epochs" in rl:
        f["train.max_epochs"] = int(rl["ppo_epochs"])
    # the resume cadence: the caller's (launcher.resume_cadence), else the config's own; at cluster
    # scale (a `sizing` section) the caller sizes it, else the evaluated steps (save_steps)
    if resume_every is None and "ckpt.save_steps" in over:  # applied with the overrides below
        resume_every = int(over["ckpt.save_steps"])
    elif resume_every is None and cfg.get("sizing") and not critic_warmup_steps(method):
        raise ValueError(f"method {method.name}: at cluster scale (a `sizing` section) the save cadence is "
                         "sized (launcher.resume_cadence); pass it as resume_every")
    f["ckpt.save_steps"] = save_steps(rl, method, resume_every)
    f["sparserl.hf_steps"] = hf_steps(rl, method)  # saved too, the only HF copies (checkpoints)
    # a retried job resumes from <ckpt.path>/_actor (and _critic: the critic's fit counter and
    # FIFO are saved beside its DeepSpeed state, engines.openrlhf.checkpoints)
    f["ckpt.load_enable"] = True

    # batch sizes: every method consumes rl.rollouts_per_step rollouts per step (one with
    # prompts_per_step: that many prompts x G, the matched-prompts protocol)
    G = method.group_size
    B = prompts_per_step(method, int(rl["rollouts_per_step"]))
    steps = total_steps(cfg["rl"], method)
    # rl.mini_batches optimiser steps per rollout step, as the local trainer takes
    mini = max(1, int(section_setting(rl, "rl", "mini_batches")))
    # a critic's warm-up steps consume prompts too: the policy still gets `steps` updates
    f.update({"rollout.n_samples_per_prompt": G, "rollout.batch_size": B,
              "data.max_samples": (steps + critic_warmup_steps(method)) * B, "train.batch_size": max(1, B * G // mini)})
    if method.osla:  # rollouts per step vary (multiples of the pad): one optimizer step per pad-sized block
        f["train.batch_size"] = int(method.osla.pad_multiple or G)

    # estimator and loss
    f["algo.advantage.estimator"] = method.estimator
    loss = method.loss
    f["actor.policy_loss_type"] = LOSS_TYPE[loss.type]
    if loss.type != "gpg":
        f["actor.eps_clip_low_high"] = [float(loss.clip_low), float(loss.clip_high)]
    if loss.agg not in AGG:
        raise ConfigError(f"method {method.name}: loss.agg {loss.agg!r} has no OpenRLHF equivalent "
                          f"(it has {sorted(AGG)})")
    f["actor.loss_agg_mode"] = AGG[loss.agg]
    kl = method.kl_coef
    f["algo.kl.init_coef"] = kl
    if kl > 0:  # GRPO-style KL loss against the reference policy
        f.update({"algo.kl.use_loss": True, "algo.kl.estimator": "k3"})

    # DAPO pieces
    if method.dynamic_sampling.enabled:
        # drop groups whose mean reward is 0 or 1; OpenRLHF replaces each dropped prompt with a new
        # one until the batch is full (gen_batch_factor has no OpenRLHF counterpart)
        f.update({"algo.dynamic_filtering_enable": True, "algo.dynamic_filtering_range": [0.0, 1.0]})
    ol = method.overlong
    if ol.enabled:
        f["reward.overlong_buffer_len"] = float(ol.buffer_fraction) * max_new
        f["reward.overlong_penalty_factor"] = float(ol.penalty)

    # Le Critique's critic (token-level estimators): OpenRLHF's critic path
    if method.critic is not None:
        if method.sampler != "plain":
            raise ConfigError(f"method {method.name}: a critic runs with the plain sampler only (got "
                              f"{method.sampler!r}); drop osla / dynamic_sampling from the method")
        f.update(critic_flags(method, policy_path, nodes, gpn))

    # ours
    f["sparserl.method"] = method.name
    f["sparserl.spec"] = json.dumps(method.to_dict(), sort_keys=True)
    f["sparserl.run_dir"] = str(run.dir)  # the experience maker appends harvested rollouts there
    f["sparserl.seed"] = int(seed)
    if method.needs_v0_model:  # the V0 prior actor (engines.openrlhf.v0_server)
        if v0_model is None:
            raise ValueError(f"method {method.name}: its V0 prior loads the trained V0 (Paths.v0_prior_model); "
                             "pass it as v0_model")
        # the actor's files, checked here rather than in the actor after Ray and vLLM have started
        missing = [k for k, v in (("v0_pool", v0_pool), ("v0_embeddings", v0_embeddings)) if v is None]
        if missing:
            raise ValueError(f"method {method.name}: its V0 actor reads the run's pool and V0's embeddings "
                             f"of it; pass {' and '.join(missing)} (the run's RunInputs pool, v0_embeddings)")
        for k, v in (("v0_model", v0_model), ("v0_pool", v0_pool), ("v0_embeddings", v0_embeddings)):
            f[f"sparserl.{k}"] = str(Path(v).absolute())
        for k, v in v0_actor_settings(over).items():  # share, threads, timeouts (engines.openrlhf.placement)
            f[f"sparserl.{k}"] = v
        if config_paths:
            f["sparserl.config"] = json.dumps([str(Path(c).absolute()) for c in config_paths])

    # free-form overrides (dotted OpenRLHF flags)
    for k, v in over.items():
        if k in LAUNCHER_KEYS:
            continue
        if "." not in k:
            raise ConfigError(f"rl.openrlhf.{k}: not an OpenRLHF flag (dotted, e.g. 'vllm.num_engines') "
                                f"nor a launcher key ({', '.join(LAUNCHER_KEYS)})")
        f[k] = v
    return f


def flags_to_argv(flags: dict[str, Any]) -> list[str]:
    """True -> '--flag'; False/None -> omitted; list -> '--flag a b'; else '--flag value'."""
    argv: list[str] = []
    for k, v in flags.items():
        if v is None or v is False:
            continue
        if v is True:
            argv.append(f"--{k}")
        elif isinstance(v, (list, tuple)):
            argv += [f"--{k}", *map(_fmt, v)]
        else:
            argv += [f"--{k}", _fmt(v)]
    return argv


def _fmt(v) -> str:
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else str(v)
    return str(v)
