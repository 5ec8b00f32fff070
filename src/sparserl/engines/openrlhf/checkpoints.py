"""When OpenRLHF 0.11.2 saves, what a save keeps, and Le Critique's critic state beside it.

Save plan. OpenRLHF saves (the DeepSpeed resume state, plus an HF copy with --ckpt.save_hf) at
every global step that is a multiple of --ckpt.save_steps (`BasePPOTrainer.save_logs_and_checkpoints`).
A critic's W warm-up steps move policy step s to global step s + W, so the evaluated steps are no
longer the multiples of one cadence (with the gcd the lc_math runs saved every 10 steps, 41 HF
copies). With --sparserl.hf_steps (the evaluated global steps, `flags.hf_steps`) OpenRLHF's save
condition becomes `saves_at`: a multiple of --ckpt.save_steps (the resume cadence) or an
evaluated step; and `DeepspeedStrategy.save_model` writes ``<ckpt.path>/global_step<N>_hf`` only for
an evaluated N, so resume-only saves are DeepSpeed states alone, pruned to --ckpt.max_num.
Without --sparserl.hf_steps: OpenRLHF's own rule. Installed by the worker hook
(`patches.METHOD_PATCHES`); the installed package is never edited.

Critic state. A DeepSpeed checkpoint of the critic holds its weights and optimiser; our trainer
(`critic.SparseRLCriticTrainer`) also carries its fit counter (the warm-up's progress) and FIFO
replay. `save_ckpt` writes them, per rank, into the tag folder DeepSpeed has just written
(``<ckpt.path>/_critic/<tag>/critic_state_rank<r>.pt``, atomically), so they are pruned with it,
and a resume reads the state of the tag whose weights DeepSpeed loaded (`load_critic_state`). A
kill between DeepSpeed's save and ours leaves a tag without the state; the launcher then resumes
the newest tag complete for actor and critic (`launcher.resume_checkpoint`).
"""
from __future__ import annotations

import os
import re
from pathlib import Path

STATE_ATTR = "sparserl_checkpoint_state"  # on a DeepSpeed engine: () -> the state saved beside it
TAG = re.compile(r"(?:best_)?global_step(\d+)")
HF_DIR = re.compile(r"global_step(\d+)_hf")


def saves_at(global_step: int, every: float, hf: "set[int] | list[int]") -> bool:
    """Whether OpenRLHF saves after `global_step` under our plan: the resume cadence (`every`,
    --ckpt.save_steps; inf: never) or an evaluated step (`hf`)."""
    return global_step in hf or (every != float("inf") and global_step % int(every) == 0)


def save_plan(total: int, every: float, hf: "list[int]") -> list[int]:
    """Global steps 1..total that `saves_at` saves."""
    return [g for g in range(1, int(total) + 1) if saves_at(g, every, set(hf))]


def critic_state_file(tag_dir: str | os.PathLike, rank: int) -> Path:
    return Path(tag_dir) / f"critic_state_rank{int(rank)}.pt"


def hf_steps(args) -> set[int] | None:
    """--sparserl.hf_steps as a set; None: OpenRLHF's own save rule."""
    steps = getattr(getattr(args, "sparserl", None), "hf_steps", None)
    return None if steps is None else {int(s) for s in steps}


def keeps_hf_copy(args, output_dir) -> bool:
    """False for the HF copy of a resume-only save (<ckpt.path>/global_step<N>_hf, N not evaluated)."""
    steps = hf_steps(args)
    m = HF_DIR.fullmatch(Path(output_dir).name)
    if steps is None or m is None or Path(output_dir).parent.resolve() != Path(args.ckpt.path).resolve():
        return True
    return int(m.group(1)) in steps


def rank_of(strategy) -> int:
    if hasattr(strategy, "get_rank"):
        return int(strategy.get_rank())
    import torch.distributed as dist
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def attach_state(engine, state_fn) -> None:
    """`save_ckpt` of `engine` also writes state_fn() into the tag folder."""
    object.__setattr__(engine, STATE_ATTR, state_fn)


def load_critic_state(args, rank: int) -> dict | None:
    """The critic state saved with the DeepSpeed checkpoint `CriticModelActor` has just loaded:
    ``<ckpt.path>/_critic/<latest>`` (it loads whenever --ckpt.load_enable and that folder exist;
    None otherwise, and where DeepSpeed found no ``latest`` either)."""
    import torch
    ckpt = getattr(args, "ckpt", None)
    if ckpt is None or not getattr(ckpt, "load_enable", False):
        return None
    critic_dir = Path(ckpt.path) / "_critic"
    latest = critic_dir / "latest"
    if not latest.is_file():
        return None
    tag = latest.read_text().strip()
    path = critic_state_file(critic_dir / tag, rank)
    m = TAG.fullmatch(tag)
    if not path.is_file() or m is None:
        raise RuntimeError(f"{path}: the critic's checkpoint {tag} has no saved trainer state (FIFO replay, "
                           "warm-up counter); openrlhf-launch resumes from the newest complete checkpoint, so "
                           f"start the run through it, or delete {ckpt.path} to start over")
    st = torch.load(path, map_location="cpu", weights_only=False)
    step = int(m.group(1))
    if int(st["step"]) != step or int(st["state"]["fits"]) != step:
        raise RuntimeError(f"{path}: saved at step {st['step']} after {st['state']['fits']} critic fits, but it "
                           f"sits in the checkpoint of global step {step}; delete {ckpt.path} to start over")
    print(f"[sparserl] critic state of {tag} restored (rank {rank}): {st['state']['fits']} fits, "
          f"{len(st['state']['fifo']['entries'])} replay items", flush=True)
    return st["state"]


# --------------------------------------------------------------------------- OpenRLHF method patches


def save_logs_and_checkpoints(original):
    """`BasePPOTrainer.save_logs_and_checkpoints` saving where `saves_at` says (module doc)."""

    def wrapped(self, global_step, logs_dict=None, client_states=None):
        steps = hf_steps(self.args)
        if steps is None:
            return original(self, global_step, logs_dict, client_states)
        ckpt = self.args.ckpt
        every = ckpt.save_steps
        # OpenRLHF's own body (logging, client states, actor and critic saves) with its condition
        # `global_step % save_steps == 0` answered by ours
        ckpt.save_steps = 1 if saves_at(global_step, every, steps) else float("inf")
        try:
            return original(self, global_step, logs_dict, client_states)
        finally:
            ckpt.save_steps = every
    return wrapped


def save_model(original):
    """`DeepspeedStrategy.save_model` skipping the HF copy of a resume-only save (every rank alike:
    the decision is the args' and the path's, so ZeRO-3's gather is skipped on all)."""

    def wrapped(self, model, tokenizer, output_dir, **kwargs):
        if not keeps_hf_copy(self.args, output_dir):
            return None
        return original(self, model, tokenizer, output_dir, **kwargs)
    return wrapped


def save_ckpt(original):
    """`DeepspeedStrategy.save_ckpt` that then writes the engine's attached state (our critic's)
    into the tag folder just saved."""

    def wrapped(self, model, save_dir, tag=None, *args, **kwargs):
        out = original(self, model, save_dir, tag, *args, **kwargs)
        state_fn = getattr(model, STATE_ATTR, None)
        if state_fn is not None:
            from sparserl.core.artifacts import atomic_torch_save
            tag = tag or (Path(save_dir) / "latest").read_text().strip()
            m = TAG.fullmatch(tag)
            if m is None:
                raise ValueError(f"{save_dir}: checkpoint tag {tag!r} names no global step; the critic state "
                                 "is saved for OpenRLHF's global_step<N> tags only")
            atomic_torch_save({"step": int(m.group(1)), "state": state_fn()},
                              critic_state_file(Path(save_dir) / tag, rank_of(self)))
        return out
    return wrapped
