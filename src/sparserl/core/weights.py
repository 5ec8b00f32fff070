"""Model weights read from a checkpoint folder, with one-line errors that name the file and the fix.

safetensors reports a truncated `model.safetensors` as a raw SafetensorError ("incomplete
metadata, file not fully covered") that names no file, and a file of another model (its keys or
shapes not the ones config.json describes) as a KeyError, a size-mismatch RuntimeError or, in
transformers, randomly initialised weights. Every loader of a checkpoint folder reads or checks
its weights here: a `WeightsError` names the file, what is wrong and how to rebuild the folder.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable, Mapping

from sparserl.core.artifacts import CorruptCheckpointError
from sparserl.core.paths import MODELS_DIR

__all__ = ["WeightsError", "rebuild_hint", "read_safetensors", "check_hf_weights", "check_shapes"]


class WeightsError(CorruptCheckpointError):
    """A checkpoint folder's weights cannot be read, or are not the model its config.json describes."""


def rebuild_hint(ckpt_dir: str | Path) -> str:
    """How to make `ckpt_dir` again, by where it lies: the rule and the command."""
    d = Path(ckpt_dir)
    if d.parent.name == "policies":
        return (f"delete the folder and pre-train it again (rule pretrain_policy): "
                f"`rm -r {d} && snakemake --cores 2 {d}`")
    if MODELS_DIR in d.parts[:-1]:
        return (f"delete the folder and fetch it again on a machine with internet (rule fetch_models): "
                f"`rm -r {d} && snakemake --cores 2 fetch_models`")
    for run in d.parents:  # an RL run's intermediate checkpoint (either engine's): the run trains again
        if re.fullmatch(r"seed\d+", run.name) and run.parent.parent.name == "rl" and d != run / "final":
            return (f"delete the run and train it again (rule rl_train): `rm -r {run} && snakemake "
                    f"--cores 2 rl/{run.parent.name}`")
    return f"delete the folder and rerun the rule that makes it: `rm -r {d} && snakemake --cores 2 {d}`"


def _files(ckpt_dir: Path) -> list[Path]:
    files = sorted(ckpt_dir.glob("*.safetensors"))
    if not files:
        raise WeightsError(f"{ckpt_dir}: no *.safetensors in this checkpoint folder; "
                           f"{rebuild_hint(ckpt_dir)}")
    return files


def _unreadable(f: Path, e: Exception, ckpt_dir: Path) -> WeightsError:
    # safetensors prefixes every cause with "Error while deserializing header: "
    cause = str(e).split(": ", 1)[-1] if "deserializing" in str(e) else str(e)
    return WeightsError(f"{f}: truncated or not a safetensors file ({cause}); {rebuild_hint(ckpt_dir)}")


def read_safetensors(ckpt_dir: str | Path) -> dict:
    """Every tensor of the folder's *.safetensors files, on the CPU."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file
    ckpt_dir = Path(ckpt_dir)
    state: dict = {}
    for f in _files(ckpt_dir):
        try:
            state.update(load_file(str(f)))
        except SafetensorError as e:
            raise _unreadable(f, e, ckpt_dir) from None
    return state


def check_hf_weights(ckpt_dir: str | Path) -> None:
    """For transformers' loader, which reads the files itself and leaves the weights of another
    model's file random: the folder's *.safetensors are whole and hold the weights, by name and
    shape, of the model config.json describes. Reads the headers only; the model is built on the
    meta device, so nothing is allocated. A folder of other weight files is left to transformers."""
    import torch
    from safetensors import SafetensorError, safe_open
    from transformers import AutoConfig, AutoModelForCausalLM
    ckpt_dir = Path(ckpt_dir)
    if not any(ckpt_dir.glob("*.safetensors")):
        return
    shapes: dict = {}
    for f in _files(ckpt_dir):
        try:
            with safe_open(str(f), framework="pt") as h:
                shapes.update({k: h.get_slice(k).get_shape() for k in h.keys()})
        except SafetensorError as e:
            raise _unreadable(f, e, ckpt_dir) from None
    config = AutoConfig.from_pretrained(str(ckpt_dir))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    check_shapes(ckpt_dir, shapes, {k: v.shape for k, v in model.state_dict().items()},
                 optional={"lm_head.weight"} if getattr(config, "tie_word_embeddings", False) else (),
                 extra_ok=True)


def check_shapes(ckpt_dir: str | Path, shapes: Mapping[str, Iterable[int]],
                 expected: Mapping[str, Iterable[int]], *, optional: Iterable[str] = (),
                 extra_ok: bool = False) -> None:
    """Raise a WeightsError when the weights' names and `shapes` are not the `expected` ones of the
    model config.json describes (names in `optional` may be missing; with `extra_ok`, names the
    model does not read are let through)."""
    ckpt_dir = Path(ckpt_dir)
    have = {k: tuple(v) for k, v in shapes.items()}
    want = {k: tuple(v) for k, v in expected.items()}
    missing = sorted(set(want) - set(have) - set(optional))
    unexpected = [] if extra_ok else sorted(set(have) - set(want))
    wrong = sorted(k for k in set(want) & set(have) if want[k] != have[k])
    if not (missing or unexpected or wrong):
        return
    what = []
    for label, names in (("missing", missing), ("unexpected", unexpected)):
        if names:
            more = f" and {len(names) - 3} more" if len(names) > 3 else ""
            what.append(f"{label} {', '.join(names[:3])}{more}")
    if wrong:
        k = wrong[0]
        what.append(f"{k} is {list(have[k])}, config.json says {list(want[k])}"
                    + (f" ({len(wrong) - 1} more shapes differ)" if len(wrong) > 1 else ""))
    files = ", ".join(f.name for f in sorted(ckpt_dir.glob("*.safetensors")))
    raise WeightsError(f"{ckpt_dir}/{files}: weights of another model ({'; '.join(what)}), not the one "
                       f"{ckpt_dir}/config.json describes; {rebuild_hint(ckpt_dir)}")
