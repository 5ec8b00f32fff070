"""Run a paper-scale RL method on OpenRLHF 0.11.2 without forking it.

Three pieces:

1. **The argument parser, rebuilt.** OpenRLHF builds its parser inline under
   ``if __name__ == "__main__":`` of `openrlhf/cli/train_ppo_ray.py` and hard-codes the
   ``choices`` of ``--algo.advantage.estimator``. `build_parser` reads that file's source (found
   with importlib, NOT imported: no vLLM needed), executes the parser-building statements of the
   block as they are, then widens the choices (our registry names; ``gpg`` for
   ``--actor.policy_loss_type``) and adds ``--sparserl.method`` / ``--sparserl.spec``.
   `finalize_args` executes the block's own post-parse statements (hierarchize + validation)
   on our namespace, everything except the closing ``train(args)``. So the flags, defaults and
   checks are always those of the installed OpenRLHF.
2. **The method -> flags mapping** (`openrlhf_argv`): method spec + config -> OpenRLHF argv, with
   cluster defaults in `CLUSTER_DEFAULTS`, overridable from the config's free-form
   ``rl.openrlhf`` mapping (dotted OpenRLHF flag names, e.g. ``{"vllm.num_engines": 16}``; plus
   the launcher keys ``nodes``, ``gpus_per_node``, ``ray_port``).
3. **Our classes inside Ray workers** (`install_patches`, `worker_process_setup`, `init_ray`).
   OpenRLHF's trainer runs in Ray actors, where a driver-side patch does not reach;
   ``ray.init(runtime_env={"worker_process_setup_hook": HOOK})`` runs `worker_process_setup` at
   the start of every worker. It patches the module attributes where OpenRLHF looks the classes
   up: `openrlhf.trainer.ppo_trainer.RemoteExperienceMaker` / `.SamplesGenerator`,
   `openrlhf.trainer.ppo_trainer_async.SamplesGenerator` and
   `openrlhf.trainer.ray.ppo_actor.PolicyLoss`: at once where the module is already imported,
   else right after its first import (a post-import hook on sys.meta_path, so vLLM and other
   workers that never import the trainer pay nothing).
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import importlib
import importlib.abc
import importlib.util
import json
import math
import os
import sys
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable

HOOK = "sparserl.engines.openrlhf.launcher.worker_process_setup"
TRAIN_SCRIPT = ("cli", "train_ppo_ray.py")
OPENRLHF_VERSION = "0.11.2"

# module -> attribute -> "module:Class" of ours
PATCHES: dict[str, dict[str, str]] = {
    "openrlhf.trainer.ppo_trainer": {
        "RemoteExperienceMaker": "sparserl.engines.openrlhf.experience:SparseRLExperienceMaker",
        "SamplesGenerator": "sparserl.engines.openrlhf.samples:OslaSamplesGenerator",
    },
    "openrlhf.trainer.ppo_trainer_async": {
        "SamplesGenerator": "sparserl.engines.openrlhf.samples:OslaSamplesGenerator",
    },
    "openrlhf.trainer.ray.ppo_actor": {
        "PolicyLoss": "sparserl.engines.openrlhf.losses:SparseRLPolicyLoss",
    },
}

# --------------------------------------------------------------------------- patches / hook


def _resolve(target: str):
    mod, _, attr = target.partition(":")
    return getattr(importlib.import_module(mod), attr)


def _apply(modname: str, module) -> list[tuple[str, str]]:
    done = []
    for attr, target in PATCHES.get(modname, {}).items():
        setattr(module, attr, _resolve(target))
        done.append((modname, attr))
    return done


class _PatchingLoader(importlib.abc.Loader):
    """Wraps a module's real loader; applies our patches right after the module executes."""

    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        _apply(module.__name__, module)

    def __getattr__(self, name):  # get_source, get_filename, is_package, ...
        return getattr(self._loader, name)


class _PostImportPatcher(importlib.abc.MetaPathFinder):
    """sys.meta_path entry: finds PATCHES' modules with the other finders, wraps their loader."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in PATCHES:
            return None
        for finder in sys.meta_path:
            if finder is self or isinstance(finder, _PostImportPatcher) or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and not isinstance(spec.loader, _PatchingLoader):
                    spec.loader = _PatchingLoader(spec.loader)
                return spec
        return None


def install_patches() -> list[tuple[str, str]]:
    """Put our classes where OpenRLHF looks them up (see the module docstring); idempotent.

    Returns the (module, attribute) pairs patched now; modules not imported yet are patched on
    their first import.
    """
    if not any(isinstance(f, _PostImportPatcher) for f in sys.meta_path):
        sys.meta_path.insert(0, _PostImportPatcher())
    done = []
    for modname in PATCHES:
        mod = sys.modules.get(modname)
        if mod is not None:
            done += _apply(modname, mod)
    return done


def worker_process_setup() -> None:
    """Ray's worker_process_setup_hook (runs at the start of every worker of the job)."""
    install_patches()


def runtime_env(extra_env: dict | None = None) -> dict:
    """The Ray runtime_env of our jobs: OpenRLHF's own env defaults plus the setup hook."""
    env = {
        "TOKENIZERS_PARALLELISM": os.environ.get("TOKENIZERS_PARALLELISM", "true"),
        "NCCL_DEBUG": os.environ.get("NCCL_DEBUG", "WARN"),
        "RAY_ENABLE_ZERO_COPY_TORCH_TENSORS": os.environ.get("RAY_ENABLE_ZERO_COPY_TORCH_TENSORS", "1"),
    }
    env.update(extra_env or {})
    return {"worker_process_setup_hook": HOOK, "env_vars": env}


def init_ray(address: str | None = None, extra_env: dict | None = None, **kwargs):
    """ray.init with our runtime_env. OpenRLHF's train() only calls ray.init when Ray is not
    initialised yet, so ours (with the hook) is the one that counts."""
    import ray

    if ray.is_initialized():
        raise RuntimeError("Ray is already initialised in this process: its workers would not run the "
                           f"setup hook {HOOK}; call init_ray before anything else starts Ray")
    return ray.init(address=address, runtime_env=runtime_env(extra_env), **kwargs)


# --------------------------------------------------------------------------- the parser, rebuilt


def openrlhf_root() -> Path:
    spec = importlib.util.find_spec("openrlhf")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            "openrlhf is not installed: pip install -r requirements-openrlhf-cpu.txt && "
            f"pip install --no-deps openrlhf=={OPENRLHF_VERSION} (cluster: pip install 'openrlhf[vllm]=={OPENRLHF_VERSION}')")
    return Path(list(spec.submodule_search_locations)[0])


def _main_block(tree: ast.Module) -> list[ast.stmt]:
    for node in tree.body:
        if (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
                and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__"):
            return node.body
    raise RuntimeError("openrlhf/cli/train_ppo_ray.py has no `if __name__ == '__main__':` block; "
                       f"this launcher is written against OpenRLHF {OPENRLHF_VERSION}")


def _is_parse_args(stmt: ast.stmt) -> bool:
    return (isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call)
            and isinstance(stmt.value.func, ast.Attribute) and stmt.value.func.attr == "parse_args")


def _is_train_call(stmt: ast.stmt) -> bool:
    return (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
            and isinstance(stmt.value.func, ast.Name) and stmt.value.func.id == "train")


def _split_main(source_path: Path) -> tuple[list[ast.stmt], list[ast.stmt]]:
    body = _main_block(ast.parse(source_path.read_text(), filename=str(source_path)))
    cut = next((i for i, s in enumerate(body) if _is_parse_args(s)), None)
    if cut is None:
        raise RuntimeError(f"{source_path}: no `args = parser.parse_args()` in its __main__ block")
    post = [s for s in body[cut + 1:] if not _is_train_call(s)]
    return body[:cut], post


def _exec(stmts: list[ast.stmt], namespace: dict, source_path: Path) -> dict:
    mod = ast.fix_missing_locations(ast.Module(body=stmts, type_ignores=[]))
    exec(compile(mod, str(source_path), "exec"), namespace)  # OpenRLHF's own statements
    return namespace


def _find_action(parser: argparse.ArgumentParser, dest: str) -> argparse.Action:
    for a in parser._actions:
        if a.dest == dest:
            return a
    raise KeyError(f"OpenRLHF's parser has no argument {dest!r} (version drift? expected {OPENRLHF_VERSION})")


def our_estimators() -> list[str]:
    from sparserl.estimators import list_estimators
    return list_estimators()


def build_parser(source_path: Path | None = None) -> argparse.ArgumentParser:
    """OpenRLHF's train_ppo_ray parser with our estimator names, ``gpg``, and ``--sparserl.*``."""
    source_path = source_path or openrlhf_root().joinpath(*TRAIN_SCRIPT)
    pre, _ = _split_main(source_path)
    ns = _exec(pre, {"argparse": argparse, "datetime": datetime, "os": os, "__name__": "__openrlhf_args__"},
               source_path)
    parser: argparse.ArgumentParser = ns["parser"]
    parser.prog = "openrlhf train_ppo_ray (sparserl)"
    est = _find_action(parser, "algo.advantage.estimator")
    est.choices = list(est.choices) + [n for n in our_estimators() if n not in est.choices]
    loss = _find_action(parser, "actor.policy_loss_type")
    loss.choices = list(loss.choices) + [n for n in ("gpg",) if n not in loss.choices]
    parser.add_argument("--sparserl.method", type=str, default=None, help="sparserl method name")
    parser.add_argument("--sparserl.spec", type=str, default=None,
                        help="the method spec as JSON (read by the experience maker and OSLA sampler)")
    return parser


def finalize_args(namespace: argparse.Namespace, source_path: Path | None = None):
    """OpenRLHF's own post-parse code on `namespace` (hierarchize + validation), minus train()."""
    source_path = source_path or openrlhf_root().joinpath(*TRAIN_SCRIPT)
    _, post = _split_main(source_path)

    def _no_train(*_a, **_k):  # defensive: a train() call nested elsewhere must not run here
        raise RuntimeError("finalize_args must not start training")

    with contextlib.redirect_stdout(sys.stderr):  # OpenRLHF prints its warnings; keep stdout clean
        ns = _exec(post, {"args": namespace, "os": os, "train": _no_train, "__name__": "__openrlhf_args__"},
                   source_path)
    return ns["args"]


def parse_args(argv: list[str], source_path: Path | None = None):
    """argv -> OpenRLHF's hierarchical args, validated by OpenRLHF's own checks."""
    parser = build_parser(source_path)
    return finalize_args(parser.parse_args(argv), source_path)


# --------------------------------------------------------------------------- method -> flags

# Cluster defaults (one 8-GPU node, everything colocated, vLLM sleeping during training);
# override any of them from the config: rl: {openrlhf: {"vllm.num_engines": 16, nodes: 2}}.
CLUSTER_DEFAULTS: dict[str, Any] = {
    "actor.num_nodes": 1,
    "actor.num_gpus_per_node": 8,
    "ref.num_nodes": 1,
    "ref.num_gpus_per_node": 8,
    "vllm.num_engines": 8,
    "vllm.tensor_parallel_size": 1,
    "vllm.gpu_memory_utilization": 0.6,
    "vllm.enable_prefix_caching": True,
    "vllm.enable_sleep": True,
    "train.colocate_all": True,
    "ds.enable_sleep": True,
    "ds.zero_stage": 3,
    "ds.param_dtype": "bf16",
    "ds.packing_samples": True,
    "ds.attn_implementation": "flash_attention_2",
    "actor.gradient_checkpointing_enable": True,
    "train.micro_batch_size": 4,
    "rollout.micro_batch_size": 8,
    "actor.adam.lr": 1e-6,
    "actor.lr_scheduler": "constant_with_warmup",  # OSLA's step sizes vary: no max_steps-based decay
    "actor.lr_warmup_ratio": 0.0,
    "actor.max_norm": 1.0,
    "rollout.top_p": 1.0,
    "algo.advantage.gamma": 1.0,
    "eval.steps": -1,  # evaluation runs as its own Snakemake rule on the saved checkpoints
    "logger.logging_steps": 1,
    "ckpt.save_hf": True,
}
LAUNCHER_KEYS = ("nodes", "gpus_per_node", "cpus_per_node", "ray_port")
AGG = {"token_mean": "token-mean", "seq_mean_token_mean": "seq-mean-token-mean"}
LOSS_TYPE = {"ppo_clip": "ppo", "gspo": "gspo", "gpg": "gpg"}


class LaunchConfigError(ValueError):
    pass


def _config_error(msg: str):
    try:
        from sparserl.core.config import ConfigError
        return ConfigError(msg)
    except Exception:  # pragma: no cover
        return LaunchConfigError(msg)


def run_dir_files(out_dir: str | Path) -> dict[str, Path]:
    """`--out` is the final HF model directory (the Snakemake rule's ``final``); the run's other
    files live beside it: ``<run>/metrics.parquet`` and ``<run>/openrlhf/`` (prompt dataset,
    DeepSpeed checkpoints, TensorBoard logs, the argument list)."""
    out = Path(out_dir)
    work = out.parent / "openrlhf"
    return {"model": out, "metrics": out.parent / "metrics.parquet", "work": work,
            "prompts": work / "prompts.jsonl", "ckpt": work / "ckpt", "tensorboard": work / "tensorboard",
            "args": work / "args.json"}


def openrlhf_flags(cfg: dict, method: dict, seed: int, out_dir: str | Path, *,
                   policy_path: str | None = None) -> dict[str, Any]:
    """OpenRLHF flags (dotted names -> values) for one method + config + seed (see `openrlhf_argv`)."""
    from sparserl.methods.spec import prompts_per_step, total_steps

    rl = cfg["rl"]
    over = dict(rl.get("openrlhf") or {})
    files = run_dir_files(Path(out_dir).absolute())  # Ray workers do not share the driver's cwd
    if policy_path is None:
        from sparserl.core.paths import Paths
        pol = Paths(cfg).policy(rl["policy"])  # a Path for local checkpoints, a str for hub names
        policy_path = str(pol.absolute()) if isinstance(pol, Path) else str(pol)

    f: dict[str, Any] = dict(CLUSTER_DEFAULTS)
    # cluster shape from the launcher keys
    nodes = int(over.get("nodes", 1))
    gpn = int(over.get("gpus_per_node", 8))
    f.update({"actor.num_nodes": nodes, "ref.num_nodes": nodes, "actor.num_gpus_per_node": gpn,
              "ref.num_gpus_per_node": gpn})
    tp = int(over.get("vllm.tensor_parallel_size", f["vllm.tensor_parallel_size"]))
    f["vllm.num_engines"] = max(1, nodes * gpn // tp)

    # data and reward
    f.update({
        "actor.model_name_or_path": policy_path,
        "data.prompt_dataset": str(files["prompts"]),
        "data.input_key": "input",
        "data.label_key": "label",
        "reward.remote_url": str(Path(__file__).with_name("losses.py")),  # our reward_func
        "train.seed": int(seed),
        "train.num_episodes": 1,
        "ckpt.output_dir": str(files["model"]),
        "ckpt.path": str(files["ckpt"]),
        "logger.tensorboard_dir": str(files["tensorboard"]),
        "logger.wandb.run_name": f"{method.get('name', 'run')}_seed{int(seed)}",
    })
    if cfg.get("tasks", {}).get("chat_template"):
        f["data.apply_chat_template"] = True
    max_new = int(rl.get("max_new_tokens") or cfg.get("rollout", {}).get("max_new_tokens", 1024))
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
    if "checkpoint_every" in rl:
        f["ckpt.save_steps"] = int(rl["checkpoint_every"])

    # batch sizes: every method consumes rl.rollouts_per_step rollouts per step
    G = int(method["group_size"])
    B = prompts_per_step(method, int(rl["rollouts_per_step"]))
    steps = total_steps(cfg["rl"], method)
    # rl.mini_batches optimiser steps per rollout step, as the local trainer takes
    mini = max(1, int(rl.get("mini_batches", 1)))
    f.update({"rollout.n_samples_per_prompt": G, "rollout.batch_size": B,
              "data.max_samples": steps * B, "train.batch_size": max(1, B * G // mini)})
    osla = method.get("osla")
    if osla:  # rollouts per step vary (multiples of the pad): one optimizer step per pad-sized block
        f["train.batch_size"] = int(osla.get("pad_multiple") or G)

    # estimator and loss
    f["algo.advantage.estimator"] = method["estimator"]
    loss = method["loss"]
    f["actor.policy_loss_type"] = LOSS_TYPE[loss["type"]]
    if loss["type"] in ("ppo_clip", "gspo"):
        lo = float(loss.get("clip_low", 0.2 if loss["type"] == "ppo_clip" else 3e-4))
        hi = float(loss.get("clip_high", lo))
        f["actor.eps_clip_low_high"] = [lo, hi]
    agg = loss.get("agg", "seq_mean_token_mean")
    if agg not in AGG:
        raise _config_error(f"method {method.get('name')}: loss.agg {agg!r} has no OpenRLHF equivalent "
                            f"(it has {sorted(AGG)})")
    f["actor.loss_agg_mode"] = AGG[agg]
    kl = float(method.get("kl_coef", 0.0))
    f["algo.kl.init_coef"] = kl
    if kl > 0:  # GRPO-style KL loss against the reference policy
        f.update({"algo.kl.use_loss": True, "algo.kl.estimator": "k3"})

    # DAPO pieces
    ds = method.get("dynamic_sampling") or {}
    if ds.get("enabled"):
        # drop groups whose mean reward is 0 or 1; OpenRLHF replaces each dropped prompt with a new
        # one until the batch is full (gen_batch_factor has no OpenRLHF counterpart)
        f.update({"algo.dynamic_filtering_enable": True, "algo.dynamic_filtering_range": [0.0, 1.0]})
    ol = method.get("overlong") or {}
    if ol.get("enabled"):
        f["reward.overlong_buffer_len"] = float(ol.get("buffer_fraction", 0.25)) * max_new
        f["reward.overlong_penalty_factor"] = float(ol.get("penalty", 1.0))

    # ours
    f["sparserl.method"] = method.get("name")
    f["sparserl.spec"] = json.dumps(method, sort_keys=True)

    # free-form overrides (dotted OpenRLHF flags)
    for k, v in over.items():
        if k in LAUNCHER_KEYS:
            continue
        if "." not in k:
            raise _config_error(f"rl.openrlhf.{k}: not an OpenRLHF flag (dotted, e.g. 'vllm.num_engines') "
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


def openrlhf_argv(cfg: dict, method: dict, seed: int, out_dir: str | Path, **kw) -> list[str]:
    """The OpenRLHF argument list for one run.

    Method -> flags: group_size -> --rollout.n_samples_per_prompt; rollouts_per_step / group_size
    -> --rollout.batch_size; steps x steps_factor x that -> --data.max_samples (one episode);
    estimator -> --algo.advantage.estimator (our registry name); loss.type -> --actor.policy_loss_type
    (ppo | gspo | gpg); clip_low/high -> --actor.eps_clip_low_high; agg -> --actor.loss_agg_mode;
    kl_coef -> --algo.kl.init_coef (+ --algo.kl.use_loss k3 when > 0); dynamic_sampling ->
    --algo.dynamic_filtering_enable/range 0 1; overlong -> --reward.overlong_buffer_len
    (fraction x max_new_tokens) / --reward.overlong_penalty_factor; the spec itself ->
    --sparserl.spec. The train batch is the step's rollouts (one optimizer step per RL step), or
    osla.pad_multiple for OSLA.
    """
    return flags_to_argv(openrlhf_flags(cfg, method, seed, out_dir, **kw))


# --------------------------------------------------------------------------- the prompt dataset


def prompt_side_data(cfg: dict, method: dict, ids: list, seed: int) -> dict[str, list]:
    """Per-prompt side data for the labels: BASIS phat and the V0.5 prior p (resolved now)."""
    from sparserl.core.artifacts import read_table
    from sparserl.core.paths import Paths
    from sparserl.methods.spec import needs_reference_cache

    P = Paths(cfg)
    est = method["estimator"]
    prior = method.get("prior") or {}
    out: dict[str, list] = {}
    phat = df = None
    if needs_reference_cache(method):
        path = P.reference_cache(cfg["rl"]["policy"])
        if not Path(path).exists():
            raise _config_error(f"{path}: the BASIS reference cache of {cfg['rl']['policy']} is needed by "
                                f"{method.get('name')}; build it first (rule reference_cache)")
        df = read_table(path)
        df["prompt_id"] = df["prompt_id"].astype(str)
        phat = dict(zip(df["prompt_id"], df["phat"].astype(float)))
        missing = [i for i in ids if str(i) not in phat]
        if missing:
            raise _config_error(f"{path}: no phat for {len(missing)} pool prompts (e.g. {missing[0]!r})")
        if est.startswith("basis"):
            out["phat"] = [phat[str(i)] for i in ids]
    if est.startswith("v05") or method.get("osla"):
        from sparserl.values.priors import prior_for_method
        kind = prior.get("kind")
        if kind in ("oracle", "constant"):
            pr = prior_for_method(prior, df, seed)
            out["prior"] = [float(x) for x in pr([str(i) for i in ids])]
        else:
            raise _config_error(
                f"method {method.get('name')}: prior kind {kind!r} needs V0's online support buffer, which "
                "the OpenRLHF engine does not carry; only static priors (oracle, constant) travel in the labels")
    return out


def build_prompt_dataset(cfg: dict, method: dict, seed: int, out_path: str | Path) -> Path:
    """Write the run's prompt dataset: steps x prompts_per_step rows {"input", "label"} (JSONL),
    the pool shuffled by seed and cycled as needed; label = `experience.encode_label` JSON."""
    import numpy as np

    from sparserl.core.artifacts import atomic_write_text, read_table
    from sparserl.core.paths import Paths
    from sparserl.methods.spec import prompts_per_step, total_steps
    from sparserl.tasks.prompts import PAPER_INSTRUCTION, format_prompt

    from .experience import encode_label

    P = Paths(cfg)
    pool = read_table(P.train_pool())
    ids = [str(i) for i in pool["id"]]
    side = prompt_side_data(cfg, method, ids, seed)
    chat = bool(cfg["tasks"].get("chat_template"))
    tmpl = cfg["tasks"]["prompt_template"]
    n = total_steps(cfg["rl"], method) * prompts_per_step(method, int(cfg["rl"]["rollouts_per_step"]))
    rng = np.random.default_rng(seed)
    order = np.concatenate([rng.permutation(len(pool)) for _ in range(-(-n // max(len(pool), 1)))])[:n]
    lines = []
    for j in order:
        row = pool.iloc[int(j)]
        text = (tmpl.format(problem=row["problem"], instruction=PAPER_INSTRUCTION) if chat
                else format_prompt(cfg, row["problem"]))
        extra = {k: v[int(j)] for k, v in side.items()}
        lines.append(json.dumps({"input": text, "label": encode_label(ids[int(j)], row["answer"], **extra)}))
    return atomic_write_text(out_path, "\n".join(lines) + "\n")


# --------------------------------------------------------------------------- run


def launch(argv: list[str], *, address: str | None = None, extra_env: dict | None = None):
    """Parse argv with the rebuilt parser, install our classes (here and, through the setup hook,
    in every Ray worker), start Ray and call OpenRLHF's own `train(args)`."""
    args = parse_args(argv)
    install_patches()
    init_ray(address=address, extra_env=extra_env)
    from openrlhf.cli.train_ppo_ray import train

    return train(args)


def metrics_from_tensorboard(tb_dir: str | Path):
    """OpenRLHF's TensorBoard scalars as one row per global step ('train/rollout/reward_mean' ->
    'rollout_reward_mean', 'eval/x' -> 'eval_x'); 'reward_mean' (the local trainer's name) is an
    alias of 'rollout_reward_mean'. Empty (a 'step' column only) without tensorboard installed."""
    import pandas as pd

    rows: dict[int, dict] = {}
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError:  # tensorboard is an OpenRLHF dependency on the cluster
        return pd.DataFrame({"step": []})
    for ev_dir in sorted({p.parent for p in Path(tb_dir).rglob("events.out.tfevents.*")}):
        acc = EventAccumulator(str(ev_dir))
        acc.Reload()
        for tag in acc.Tags().get("scalars", []):
            name = (tag.split("/", 1)[1] if tag.startswith("train/") else tag).replace("/", "_")
            for e in acc.Scalars(tag):
                rows.setdefault(int(e.step), {"step": int(e.step)})[name] = float(e.value)
    df = pd.DataFrame([rows[k] for k in sorted(rows)]) if rows else pd.DataFrame({"step": []})
    for src in ("rollout_reward_mean", "reward"):
        if src in df.columns:
            df["reward_mean"] = df[src]
            break
    return df


def run(config_paths: Iterable[str], method_name: str, seed: int, out_dir: str | Path, *,
        dry_run: bool = False, log=print) -> list[str]:
    """`openrlhf-launch`: dataset + argv, Ray on the SLURM allocation (or local), training, metrics."""
    from sparserl.core.artifacts import write_json, write_table
    from sparserl.core.config import load_config
    from sparserl.methods.spec import load_method

    from . import slurm

    cfg = load_config(list(config_paths))
    if "rl" not in cfg:
        raise _config_error("the config has no 'rl' section")
    method = load_method(method_name)
    files = run_dir_files(out_dir)
    argv = openrlhf_argv(cfg, method, seed, out_dir)
    parse_args(argv)  # OpenRLHF's own checks fail here, before any GPU work
    if dry_run:
        return argv
    files["work"].mkdir(parents=True, exist_ok=True)
    write_json({"method": method_name, "seed": seed, "argv": argv}, files["args"], cfg=cfg)
    build_prompt_dataset(cfg, method, seed, files["prompts"])
    over = cfg["rl"].get("openrlhf") or {}
    cluster = slurm.plan_from_env(port=int(over.get("ray_port", 6379)),
                                  gpus_per_node=over.get("gpus_per_node"),
                                  cpus_per_node=over.get("cpus_per_node"))
    procs = []
    try:
        address = None
        if cluster is not None:
            log(f"[openrlhf-launch] Ray on {len(cluster.nodes)} node(s), head {cluster.head} ({cluster.address})")
            procs = slurm.start_ray(cluster, log=log)
            address = cluster.address
        else:
            log("[openrlhf-launch] no SLURM allocation: local Ray")
        launch(argv, address=address)
    finally:
        try:
            import ray
            if ray.is_initialized():
                ray.shutdown()
        finally:
            slurm.stop(procs)
    write_table(metrics_from_tensorboard(files["tensorboard"]), files["metrics"], cfg=cfg,
                extra={"method": method_name, "seed": seed, "engine": f"openrlhf=={OPENRLHF_VERSION}"})
    return argv


__all__ = ["CLUSTER_DEFAULTS", "HOOK", "PATCHES", "build_parser", "build_prompt_dataset", "finalize_args",
           "flags_to_argv", "init_ray", "install_patches", "launch", "metrics_from_tensorboard", "openrlhf_argv", "openrlhf_flags",
           "parse_args", "prompt_side_data", "run", "runtime_env", "worker_process_setup"]
