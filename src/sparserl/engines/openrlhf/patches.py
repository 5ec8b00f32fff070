"""Our classes inside OpenRLHF's Ray workers, without a fork.

OpenRLHF's trainer runs in Ray actors, where a driver-side patch does not reach;
``ray.init(runtime_env={"worker_process_setup_hook": HOOK})`` runs `worker_process_setup` at the
start of every worker. It patches the module attributes where OpenRLHF looks the classes up:
`openrlhf.trainer.ppo_trainer.RemoteExperienceMaker` / `.SamplesGenerator`,
`openrlhf.trainer.ppo_trainer_async.SamplesGenerator`, `openrlhf.trainer.ray.ppo_actor.PolicyLoss` /
`openrlhf.cli.train_ppo_ray.placement_group` (names the colocated group, `placement`),
`.ActorPPOTrainer` and `openrlhf.trainer.ray.ppo_critic.CriticPPOTrainer` (looked up when the model
actors build their trainers):
at once where the module is already imported, else right after its first import (`hooks`, after
the CPU shims of the same module, so vLLM and other workers that never import the trainer pay nothing).
`METHOD_PATCHES` wraps methods of OpenRLHF's classes the same way (the save plan and the critic
state beside its checkpoints, `checkpoints`): classes importable by name reach the workers by
reference, so the wrapped method is what they run; a `@ray.remote` subclass holds a copy of the
method, wrapped too (`ray_actor_classes`).
"""
from __future__ import annotations

import importlib
import os

from sparserl.engines.openrlhf import HOOK, hooks

# module -> attribute -> "module:Class" of ours
PATCHES: dict[str, dict[str, str]] = {
    "openrlhf.trainer.ppo_trainer": {
        "RemoteExperienceMaker": "sparserl.engines.openrlhf.experience:SparseRLExperienceMaker",
        "SamplesGenerator": "sparserl.engines.openrlhf.samples:OslaSamplesGenerator",
    },
    # the sampled tokens' vLLM log-probs at every correction level: the weight sync's check (syncwatch)
    "openrlhf.trainer.ppo_utils.samples_generator": {
        "SamplingParams": "sparserl.engines.openrlhf.syncwatch:sampling_params",
    },
    "openrlhf.cli.train_ppo_ray": {
        # names the colocated placement group so the V0 prior actor can join it (placement.py)
        "placement_group": "sparserl.engines.openrlhf.placement:named_placement_group",
        # vLLM engines that return the sampled tokens' log-probs (syncwatch)
        "create_vllm_engines": "sparserl.engines.openrlhf.syncwatch:create_vllm_engines",
    },
    "openrlhf.trainer.ppo_trainer_async": {
        "SamplesGenerator": "sparserl.engines.openrlhf.samples:OslaSamplesGenerator",
    },
    "openrlhf.trainer.ray.ppo_actor": {
        "PolicyLoss": "sparserl.engines.openrlhf.losses:SparseRLPolicyLoss",
        # never trains on a critic warm-up step's rollouts (OpenRLHF's trainer for untagged runs)
        "ActorPPOTrainer": "sparserl.engines.openrlhf.critic:SparseRLActorTrainer",
    },
    # Le Critique's critic: BCE loss, FIFO replay, warm-up (OpenRLHF's trainer without our critic spec)
    "openrlhf.trainer.ray.ppo_critic": {
        "CriticPPOTrainer": "sparserl.engines.openrlhf.critic:SparseRLCriticTrainer",
    },
}

# module -> "Class.method" -> "module:factory" of ours; factory(OpenRLHF's method) -> the method
METHOD_PATCHES: dict[str, dict[str, str]] = {
    # saves at the evaluated steps and every --ckpt.save_steps (--sparserl.hf_steps)
    "openrlhf.trainer.ppo_trainer": {
        "BasePPOTrainer.save_logs_and_checkpoints": "sparserl.engines.openrlhf.checkpoints:save_logs_and_checkpoints",
    },
    "openrlhf.utils.deepspeed.deepspeed": {
        # HF copies at the evaluated steps only
        "DeepspeedStrategy.save_model": "sparserl.engines.openrlhf.checkpoints:save_model",
        # the critic's fit counter and FIFO in the tag folder of its DeepSpeed checkpoint
        "DeepspeedStrategy.save_ckpt": "sparserl.engines.openrlhf.checkpoints:save_ckpt",
    },
}
ORIGINAL = "__sparserl_original__"  # on a wrapped method: OpenRLHF's own

# --------------------------------------------------------------------------- patches


def _resolve(target: str):
    mod, _, attr = target.partition(":")
    return getattr(importlib.import_module(mod), attr)


def _apply(modname: str, module) -> list[tuple[str, str]]:
    done = []
    for attr, target in PATCHES.get(modname, {}).items():
        setattr(module, attr, _resolve(target))
        done.append((modname, attr))
    for attr, target in METHOD_PATCHES.get(modname, {}).items():
        owner, _, name = attr.partition(".")
        cls = getattr(module, owner)
        for c in [cls, *ray_actor_classes(module, cls, name)]:
            current = c.__dict__[name]
            original = getattr(current, ORIGINAL, current)  # wrap OpenRLHF's method once, however often applied
            method = _resolve(target)(original)
            setattr(method, ORIGINAL, original)
            setattr(c, name, method)
        done.append((modname, attr))
    return done


def ray_actor_classes(module, cls, name: str) -> list[type]:
    """The classes Ray runs for the `@ray.remote` subclasses of `cls` in `module` that hold their
    own copy of method `name`: `ray.remote` copies every method into the actor's class when the
    module executes (its tracing wrappers), before our patch of `cls` (PPOTrainer's
    save_logs_and_checkpoints). Ray pickles that class by value into the worker."""
    out = []
    for obj in list(vars(module).values()):
        mc = getattr(getattr(obj, "__ray_metadata__", None), "modified_class", None)
        if isinstance(mc, type) and issubclass(mc, cls) and name in mc.__dict__:
            out.append(mc)
    return out


def install_patches() -> list[tuple[str, str]]:
    """Put our classes where OpenRLHF looks them up (see the module docstring); idempotent.

    Returns the (module, attribute) pairs patched now; modules not imported yet are patched on
    their first import.
    """
    hooks.install()
    done = []
    for modname in {**PATCHES, **METHOD_PATCHES}:
        done += hooks.after_import(modname, "patches", lambda m, n=modname: _apply(n, m), hooks.PATCHES) or []
    return done


def worker_process_setup() -> None:
    """Ray's worker_process_setup_hook (runs at the start of every worker of the job)."""
    from sparserl.engines.openrlhf import cpu_shims
    cpu_shims.install_if_flagged()  # CUDA shims first, only when the driver found no GPU
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
