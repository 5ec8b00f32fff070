"""Run a paper-scale RL method on OpenRLHF 0.11.2 without forking it: the prompt dataset
(`dataset`), the argument list (`flags`, checked by OpenRLHF's own rebuilt parser, `parser`), Ray
on the SLURM allocation (`slurm`) with our classes in every worker (`patches`), OpenRLHF's own
`train(args)`, then the run's metrics and harvested rollouts in our artifact format (`metrics`).
"""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Iterable

from sparserl.core.artifacts import write_json, write_table
from sparserl.core.config import ConfigError, load_config
from sparserl.engines.openrlhf import OPENRLHF_VERSION, cpu_shims, slurm
from sparserl.engines.openrlhf.flags import critic_warmup_steps, openrlhf_argv
from sparserl.engines.openrlhf.metrics import harvested_rollouts, metrics_from_tensorboard
from sparserl.engines.openrlhf.parser import parse_args
from sparserl.engines.openrlhf.patches import init_ray, install_patches
from sparserl.engines.openrlhf.placement import plan_from_args
from sparserl.methods.run import resolve_run


def launch(argv: list[str], *, address: str | None = None, extra_env: dict | None = None):
    """Parse argv with the rebuilt parser, install our classes (here and, through the setup hook,
    in every Ray worker), start Ray and call OpenRLHF's own `train(args)`."""
    args = parse_args(argv)
    for line in plan_from_args(args).lines():  # refuses a V0 share that does not fit (ConfigError)
        print(f"[openrlhf-launch] {line}", flush=True)
    cpu_env = cpu_shims.activate()  # None with a CUDA GPU: nothing changes
    install_patches()
    ray_kw = {}
    if cpu_env is not None:
        extra_env = {**(extra_env or {}), **{k: v for k, v in cpu_env.items() if k != "PYTHONPATH"}}
        if address is None:  # Ray accepts logical GPUs: one per placement bundle OpenRLHF asks for
            ray_kw = {"num_gpus": logical_gpus(args), "num_cpus": max(os.cpu_count() or 1, 8)}
    init_ray(address=address, extra_env=extra_env, **ray_kw)
    from openrlhf.cli.train_ppo_ray import train

    return train(args)


def logical_gpus(args) -> int:
    """GPUs a local CPU-only Ray must announce for OpenRLHF's placement groups: the actor's with
    colocate_all (vLLM, reference and critic share its bundles), else every role's own."""
    actor = args.actor.num_nodes * args.actor.num_gpus_per_node
    if args.train.colocate_all:
        return actor
    n = actor + (args.vllm.num_engines or 0) * args.vllm.tensor_parallel_size
    if args.algo.kl.init_coef > 0 and not args.train.colocate_actor_ref:
        n += args.ref.num_nodes * args.ref.num_gpus_per_node
    if args.critic.model_name_or_path:
        n += args.critic.num_nodes * args.critic.num_gpus_per_node
    return n


def resume_checkpoint(actor_dir: Path, *, log=print) -> int:
    """The global step of the DeepSpeed checkpoint OpenRLHF will resume from (0: none).

    OpenRLHF 0.11.2 loads ``<ckpt.path>/_actor`` whenever the folder exists
    (`PolicyModelActor.init_model_from_pretrained`), through its ``latest`` tag file, which DeepSpeed
    writes only after a save completed. A kill during a save leaves the folder without ``latest``,
    or with ``latest`` naming a tag that `DeepspeedStrategy.save_ckpt` already pruned (it deletes the
    oldest tag before writing the new one; our ``--ckpt.max_num 2`` keeps the one ``latest`` names); OpenRLHF then gets no states and every retry
    fails (`PPOTrainer.fit` reads ``checkpoint_states["episode"]``). Such a folder holds nothing to
    resume, so it is removed and the run starts over."""
    if not actor_dir.exists():
        return 0
    latest = actor_dir / "latest"
    tag = latest.read_text().strip() if latest.is_file() else ""
    m = re.search(r"global_step(\d+)$", tag)  # OpenRLHF's tags: global_step<N>, best_global_step<N>
    if m and any((actor_dir / tag).glob("*model_states.pt")):
        return int(m.group(1))
    log(f"[openrlhf-launch] {actor_dir} holds no complete checkpoint (latest: {tag or 'missing'}; a kill "
        "during its save): removing it, the run starts over")
    shutil.rmtree(actor_dir)
    return 0


def train_with_ray(argv: list[str], over: dict, *, log=print) -> None:
    """Ray on the SLURM allocation (launcher keys of `over`: ray_port, gpus_per_node,
    cpus_per_node), or a local Ray outside one; `launch(argv)`; Ray and its processes stopped."""
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


def run(config_paths: Iterable[str], method_name: str, seed: int, out_dir: str | Path, *,
        dry_run: bool = False, log=print) -> list[str]:
    """`openrlhf-launch`: dataset + argv, Ray on the SLURM allocation (or local), training, metrics."""
    cpu_shims.install_import_shims()  # without CUDA: OpenRLHF imports flash_attn at module level
    from sparserl.engines.openrlhf.dataset import build_prompt_dataset

    config_paths = list(config_paths)
    cfg = load_config(config_paths)
    if "rl" not in cfg:
        raise ConfigError("the config has no 'rl' section")
    # the run in --out's parent (rl/<method>/seed<s>, or V0's harvest folder), absolute: Ray
    # workers do not share the driver's cwd; the spec with the scale's critic lr (rl.critic_lr)
    run = resolve_run(cfg, method_name, seed, root=Path(out_dir).absolute().parent)
    method, run_paths = run.spec, run.paths
    argv = openrlhf_argv(cfg, method, seed, out_dir, config_paths=config_paths, paths=run_paths)
    args = parse_args(argv)  # OpenRLHF's own checks fail here, before any GPU work
    if dry_run:
        return argv
    run_paths.openrlhf.mkdir(parents=True, exist_ok=True)
    # the harvest is cut to the resumed step by the experience maker (`experience.keep_harvest`)
    if args.ckpt.load_enable:
        resumed = resume_checkpoint(Path(args.ckpt.path) / "_actor", log=log)
        log(f"[openrlhf-launch] resuming after global step {resumed}" if resumed
            else "[openrlhf-launch] no checkpoint to resume: starting at step 0")
        # the live prior restores its support when first built, before the experience maker's
        # first step under OSLA (`experience.restore_support`)
        argv = [*argv, "--sparserl.resume_step", str(resumed)]
    write_json({"method": method_name, "seed": seed, "argv": argv}, run_paths.args, cfg=cfg)
    build_prompt_dataset(cfg, method, seed, run_paths.prompts)
    train_with_ray(argv, cfg["rl"].get("openrlhf") or {}, log=log)
    extra = {"method": method_name, "seed": seed, "engine": f"openrlhf=={OPENRLHF_VERSION}"}
    write_table(metrics_from_tensorboard(run_paths.tensorboard, critic_warmup_steps(method)), run_paths.metrics,
                cfg=cfg, extra=extra)
    write_table(harvested_rollouts(run_paths.openrlhf), run_paths.rollouts, cfg=cfg,
                extra={**extra, "policy": cfg["rl"]["policy"]})
    return argv
