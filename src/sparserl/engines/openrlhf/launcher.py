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
from sparserl.core.config import schema_default
from sparserl.core.paths import RunPaths
from sparserl.engines.openrlhf import OPENRLHF_VERSION, cpu_shims, slurm
from sparserl.engines.openrlhf.checkpoints import TAG, critic_state_file
from sparserl.engines.openrlhf.critic_warmup import critic_warmup_steps
from sparserl.engines.openrlhf.dataset import build_prompt_dataset
from sparserl.engines.openrlhf.flags import flags_to_argv, openrlhf_flags
from sparserl.engines.openrlhf.metrics import harvested_rollouts, metrics_from_tensorboard
from sparserl.engines.openrlhf.parser import parse_args
from sparserl.engines.openrlhf.patches import init_ray, install_patches
from sparserl.engines.openrlhf.placement import plan_from_args
from sparserl.engines.sizing import rl_resume_save_steps
from sparserl.methods.run import Run
from sparserl.methods.spec import MethodSpec


def resume_cadence(cfg: dict, method: MethodSpec, policy_path: str | Path) -> int | None:
    """--ckpt.save_steps of a run (`flags.save_steps`): the config's own (rl.openrlhf
    ``ckpt.save_steps``), else at cluster scale (a `sizing` section) or with a critic a resume point
    every few hours of estimated work (`sizing.rl_resume_save_steps` of the start policy
    `policy_path`); None: the evaluated steps'."""
    over = cfg["rl"].get("openrlhf") or {}
    if "ckpt.save_steps" in over:
        return int(over["ckpt.save_steps"])
    if critic_warmup_steps(method) or cfg.get("sizing"):
        return rl_resume_save_steps(cfg, method, policy_path)
    return None


def openrlhf_argv(cfg: dict, method: MethodSpec, seed: int, run: RunPaths, *, policy_path: str, **kw) -> list[str]:
    """The OpenRLHF argument list for one run.

    Method -> flags: group_size -> --rollout.n_samples_per_prompt; rollouts_per_step / group_size
    (or the method's prompts_per_step) -> --rollout.batch_size; steps x steps_factor x that -> --data.max_samples (one episode);
    estimator -> --algo.advantage.estimator (our registry name); loss.type -> --actor.policy_loss_type
    (ppo | gspo | gpg); clip_low/high -> --actor.eps_clip_low_high; agg -> --actor.loss_agg_mode;
    kl_coef -> --algo.kl.init_coef (+ --algo.kl.use_loss k3 when > 0); dynamic_sampling ->
    --algo.dynamic_filtering_enable/range 0 1; overlong -> --reward.overlong_buffer_len
    (fraction x max_new_tokens) / --reward.overlong_penalty_factor; the spec itself ->
    --sparserl.spec. The train batch is the step's rollouts (one optimizer step per RL step), or
    osla.pad_multiple for OSLA. A critic (Le Critique) -> `critic_flags`, and its warm-up steps are
    added to --data.max_samples. The save cadence, unless `kw` gives one (resume_every): `resume_cadence`.
    `run`, `policy_path` and `kw`: as `flags.openrlhf_flags`.
    """
    if kw.get("resume_every") is None:
        kw["resume_every"] = resume_cadence(cfg, method, policy_path)
    return flags_to_argv(openrlhf_flags(cfg, method, seed, run, policy_path=policy_path, **kw))


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


def _tags(d: Path, latest_step: int, critic_ranks: int = 0) -> dict[str, int]:
    """Tag folders of a DeepSpeed checkpoint dir that a resume may load: model states saved, not
    newer than ``latest`` (newer ones are a save a kill cut short), and with a critic the trainer
    state of each of its ranks (`checkpoints.save_ckpt` writes it after DeepSpeed's save)."""
    out = {}
    for p in d.iterdir() if d.is_dir() else ():
        m = TAG.fullmatch(p.name)
        if not (p.is_dir() and m and int(m.group(1)) <= latest_step and any(p.glob("*model_states.pt"))):
            continue
        if all(critic_state_file(p, r).is_file() for r in range(critic_ranks)):
            out[p.name] = int(m.group(1))
    return out


def _latest(d: Path) -> tuple[str, int | None]:
    tag = (d / "latest").read_text().strip() if (d / "latest").is_file() else ""
    m = TAG.fullmatch(tag)
    return tag, (int(m.group(1)) if m else None)


def resume_checkpoint(actor_dir: Path, *, critic_ranks: int = 0, log=print) -> int:
    """The global step of the DeepSpeed checkpoint OpenRLHF will resume from (0: none).

    OpenRLHF 0.11.2 loads ``<ckpt.path>/_actor`` (and ``_critic``) whenever the folder exists
    (`PolicyModelActor.init_model_from_pretrained`), through its ``latest`` tag file, which DeepSpeed
    writes only after a save completed. A kill during a save leaves the folder without ``latest``,
    or with ``latest`` naming a tag that `DeepspeedStrategy.save_ckpt` already pruned (it deletes the
    oldest tag before writing the new one; our ``--ckpt.max_num 2`` keeps the one ``latest`` names); OpenRLHF then gets no states and every retry
    fails (`PPOTrainer.fit` reads ``checkpoint_states["episode"]``). Such a folder holds nothing to
    resume, so it is removed and the run starts over.

    With a critic (`critic_ranks` > 0), actor and critic save one after the other and the critic's
    trainer state follows its DeepSpeed save (`checkpoints`): the step resumed is the newest tag
    complete in both, ``latest`` of both is pointed at it, and later (cut short) tags are removed,
    so a kill between any two of these writes never pairs states of different steps."""
    dirs = [actor_dir] + ([actor_dir.parent / "_critic"] if critic_ranks else [])
    if not any(d.exists() for d in dirs):
        return 0
    tag, step = _latest(actor_dir)
    common = _tags(actor_dir, step) if step is not None else {}
    if critic_ranks and common:
        _, cstep = _latest(dirs[1])
        crit = _tags(dirs[1], cstep, critic_ranks) if cstep is not None else {}
        common = {t: s for t, s in common.items() if t in crit}
    if not common:
        log(f"[openrlhf-launch] {actor_dir.parent} holds no complete checkpoint (actor's latest: {tag or 'missing'}; "
            "a kill during its save): removing it, the run starts over")
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)
        return 0
    best = max(common, key=lambda t: (common[t], t == tag))
    from sparserl.core.artifacts import atomic_write_text
    for d in dirs:
        if _latest(d)[0] != best:
            log(f"[openrlhf-launch] {d}: resuming {best}, the newest checkpoint complete for "
                f"{'actor and critic' if critic_ranks else 'the actor'} (latest was {_latest(d)[0] or 'missing'})")
            atomic_write_text(d / "latest", best)
        for p in d.iterdir():
            m = TAG.fullmatch(p.name)
            if p.is_dir() and m and int(m.group(1)) > common[best]:
                shutil.rmtree(p)  # cut short: pruned first by the next save otherwise, before what we load
    return common[best]


def critic_ranks(args) -> int:
    """Ranks of our critic trainer (each saves its own state), 0 without one."""
    from sparserl.engines.openrlhf.critic import critic_method  # imports torch: only where a run resumes
    if not args.critic.model_name_or_path or critic_method(args) is None:
        return 0
    return int(args.critic.num_nodes) * int(args.critic.num_gpus_per_node)


def train_with_ray(argv: list[str], over: dict, *, log=print) -> None:
    """Ray on the SLURM allocation (launcher keys of `over`: ray_port, gpus_per_node,
    cpus_per_node), or a local Ray outside one; `launch(argv)`; Ray and its processes stopped."""
    cluster = slurm.plan_from_env(port=int(over.get("ray_port", schema_default("rl", "openrlhf", "ray_port"))),
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


def run(cfg: dict, rec: Run, *, config_paths: Iterable[str], dry_run: bool = False, log=print) -> list[str]:
    """`openrlhf-launch`: dataset + argv, Ray on the SLURM allocation (or local), training, metrics.
    `rec`: the run (`methods.run.resolve_run`: its folder absolute, Ray workers do not share the
    driver's cwd; the spec with the scale's critic lr; the files it reads, `rec.reads`),
    `config_paths` the config files (V0's prior actor loads them)."""
    cpu_shims.install_import_shims()  # without CUDA: OpenRLHF imports flash_attn at module level
    config_paths = list(config_paths)
    method, run_paths, seed, method_name, reads = rec.spec, rec.paths, rec.seed, rec.method, rec.reads
    argv = openrlhf_argv(cfg, method, seed, run_paths, policy_path=str(Path(reads.policy).absolute()),
                         v0_model=reads.v0_model, v0_pool=reads.pool, v0_embeddings=reads.v0_embeddings,
                         config_paths=config_paths)
    args = parse_args(argv)  # OpenRLHF's own checks fail here, before any GPU work
    if dry_run:
        return argv
    run_paths.openrlhf.mkdir(parents=True, exist_ok=True)
    # the harvest is cut to the resumed step by the experience maker (`experience.keep_harvest`)
    if args.ckpt.load_enable:
        resumed = resume_checkpoint(Path(args.ckpt.path) / "_actor", critic_ranks=critic_ranks(args), log=log)
        log(f"[openrlhf-launch] resuming after global step {resumed}" if resumed
            else "[openrlhf-launch] no checkpoint to resume: starting at step 0")
        # the live prior restores its support when first built, before the experience maker's
        # first step under OSLA (`experience.restore_support`)
        argv = [*argv, "--sparserl.resume_step", str(resumed)]
    write_json({"method": method_name, "seed": seed, "argv": argv}, run_paths.args, cfg=cfg)
    build_prompt_dataset(cfg, method, seed, run_paths.prompts, pool=reads.pool,
                         reference_cache=reads.reference_cache)
    train_with_ray(argv, cfg["rl"].get("openrlhf") or {}, log=log)
    extra = {"method": method_name, "seed": seed, "engine": f"openrlhf=={OPENRLHF_VERSION}"}
    write_table(metrics_from_tensorboard(run_paths.tensorboard, critic_warmup_steps(method)), run_paths.metrics,
                cfg=cfg, extra=extra)
    write_table(harvested_rollouts(run_paths.openrlhf), run_paths.rollouts, cfg=cfg,
                extra={**extra, "policy": cfg["rl"]["policy"]})
    return argv
