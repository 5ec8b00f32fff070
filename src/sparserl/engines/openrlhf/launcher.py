"""Run a paper-scale RL method on OpenRLHF 0.11.2 without forking it: the prompt dataset
(`dataset`), the argument list (`flags`, checked by OpenRLHF's own rebuilt parser, `parser`), Ray
on the SLURM allocation (`slurm`) with our classes in every worker (`patches`), OpenRLHF's own
`train(args)`, then the run's metrics and harvested rollouts in our artifact format (`metrics`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

from sparserl.core.artifacts import write_json, write_table
from sparserl.core.config import ConfigError, load_config
from sparserl.engines.openrlhf import OPENRLHF_VERSION, slurm
from sparserl.engines.openrlhf.dataset import build_prompt_dataset
from sparserl.engines.openrlhf.flags import critic_warmup_steps, openrlhf_argv, run_files
from sparserl.engines.openrlhf.metrics import HARVEST_FILE, harvested_rollouts, metrics_from_tensorboard
from sparserl.engines.openrlhf.parser import parse_args
from sparserl.engines.openrlhf.patches import init_ray, install_patches
from sparserl.methods.spec import load_method


def launch(argv: list[str], *, address: str | None = None, extra_env: dict | None = None):
    """Parse argv with the rebuilt parser, install our classes (here and, through the setup hook,
    in every Ray worker), start Ray and call OpenRLHF's own `train(args)`."""
    args = parse_args(argv)
    install_patches()
    init_ray(address=address, extra_env=extra_env)
    from openrlhf.cli.train_ppo_ray import train

    return train(args)


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
    config_paths = list(config_paths)
    cfg = load_config(config_paths)
    if "rl" not in cfg:
        raise ConfigError("the config has no 'rl' section")
    method = load_method(method_name)
    run_paths = run_files(method, seed, out_dir)
    argv = openrlhf_argv(cfg, method, seed, out_dir, config_paths=config_paths)
    parse_args(argv)  # OpenRLHF's own checks fail here, before any GPU work
    if dry_run:
        return argv
    run_paths.openrlhf.mkdir(parents=True, exist_ok=True)
    (run_paths.openrlhf / HARVEST_FILE).unlink(missing_ok=True)
    write_json({"method": method_name, "seed": seed, "argv": argv}, run_paths.args, cfg=cfg)
    build_prompt_dataset(cfg, method, seed, run_paths.prompts)
    train_with_ray(argv, cfg["rl"].get("openrlhf") or {}, log=log)
    extra = {"method": method_name, "seed": seed, "engine": f"openrlhf=={OPENRLHF_VERSION}"}
    write_table(metrics_from_tensorboard(run_paths.tensorboard, critic_warmup_steps(method)), run_paths.metrics,
                cfg=cfg, extra=extra)
    write_table(harvested_rollouts(run_paths.openrlhf), run_paths.rollouts, cfg=cfg,
                extra={**extra, "policy": cfg["rl"]["policy"]})
    return argv
