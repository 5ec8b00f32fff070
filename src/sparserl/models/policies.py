"""Tiny Qwen3-architecture policies, built from config and pre-trained on the task corpus.

Supervised next-token training on `prompt -> " \\boxed{answer}<eos>"` with the loss on the answer
tokens only. Training is budgeted in steps, not wall time, so results carry across machines.
The loop checkpoints every `pretrain.checkpoint_every` steps and resumes from the last one.
"""
from __future__ import annotations

import contextlib
import json
import math
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import torch

from sparserl.core.artifacts import (atomic_dir, config_hash, git_commit, load_checkpoint, save_checkpoint,
                                     write_manifest)
from sparserl.core.config import ConfigError, setting, snapshot_tag, start_seed
from sparserl.core.logs import get_logger, progress
from sparserl.core.paths import Paths, split_policy
from sparserl.tasks import corpus_targets, format_prompt


def build_model(pol: dict, tokenizer, max_length: int):
    from transformers import Qwen3Config, Qwen3ForCausalLM
    cfg = Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=pol["hidden_size"],
        num_hidden_layers=pol["num_layers"], num_attention_heads=pol["num_heads"],
        num_key_value_heads=pol["num_kv_heads"], intermediate_size=pol["ffn_size"],
        head_dim=pol["hidden_size"] // pol["num_heads"], tie_word_embeddings=True,
        max_position_embeddings=max(64, 2 * max_length),
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.eos_token_id)
    return Qwen3ForCausalLM(cfg)


def encode_corpus(cfg: dict, corpus, tokenizer, max_length: int):
    """Right-padded ids and a loss mask that covers the answer tokens (EOS included)."""
    n = len(corpus)
    ids = np.full((n, max_length), tokenizer.pad_token_id, dtype=np.int64)
    mask = np.zeros((n, max_length), dtype=bool)
    prompts = [format_prompt(cfg, p) for p in corpus["problem"]]
    targets = corpus_targets(cfg, corpus)
    p_ids = tokenizer(prompts, add_special_tokens=False)["input_ids"]
    t_ids = tokenizer(targets, add_special_tokens=False)["input_ids"]
    too_long = 0
    for i, (p, t) in enumerate(zip(p_ids, t_ids)):
        seq = (p + t + [tokenizer.eos_token_id])
        if len(seq) > max_length:
            too_long += 1
            seq = seq[:max_length]
        ids[i, :len(seq)] = seq
        mask[i, len(p):len(seq)] = True
    return torch.from_numpy(ids), torch.from_numpy(mask), too_long


_log = get_logger(__name__)


@contextlib.contextmanager
def _no_deepspeed_probe():
    """save_pretrained unwraps the model through accelerate, which imports deepspeed whenever it
    is installed (the OpenRLHF test install shares the venv) just to check for a DeepSpeedEngine;
    importing it prints DeepSpeed's accelerator banner in every job log. Our local models are
    plain modules, so the probe is skipped unless deepspeed is already loaded (OpenRLHF)."""
    if "deepspeed" in sys.modules:
        yield
        return
    try:
        import accelerate.utils.other as other
    except ImportError:
        yield
        return
    probe = other.is_deepspeed_available
    other.is_deepspeed_available = lambda: False
    try:
        yield
    finally:
        other.is_deepspeed_available = probe


def save_hf(model, tokenizer, out_dir: Path, info: dict) -> None:
    """Write an HF checkpoint atomically (temp dir, then rename; `atomic_dir` removes the temp
    dir and names `out_dir` on a full disk, and clears a killed save's leftovers first)."""
    # only a transformers model goes through accelerate's unwrapping (sparserl.models.qwen3 does not)
    probe = _no_deepspeed_probe() if "transformers" in sys.modules else contextlib.nullcontext()
    with atomic_dir(out_dir) as tmp, probe:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "sparserl.json").write_text(json.dumps(info, indent=2, sort_keys=True))


def _save_policy(model, tokenizer, out: Path, cfg: dict, info: dict) -> None:
    """save_hf, and a manifest beside the folder: the machine that pre-trained a start policy
    decides its weights (`sparserl provenance`); the manifest stays out of the checkpoint's bytes."""
    save_hf(model, tokenizer, out, info)
    write_manifest(out, rows=None, columns=None, cfg=cfg,
                   extra={"policy": info["policy"], "step": info["step"], "start": start_seed(cfg)})


def _lr_lambda(warmup: int, total: int):
    def f(step):
        if step < warmup:
            return (step + 1) / warmup
        prog = (step - warmup) / max(1, total - warmup)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, prog)))
    return f


def batch_loss(model, x: torch.Tensor, m: torch.Tensor, chunks: int = 1) -> torch.Tensor:
    """Backpropagate the mean next-token loss over the answer tokens of one batch and return it.

    With `chunks` > 1 the rows go through the model in that many length-sorted chunks, each cut
    to its own longest row: worked answers of 14 to 59 tokens (world 2.0) padded to the batch's
    longest waste about a third of the compute. Each chunk's summed loss is divided by the batch's
    token count, so the gradient is the one-pass gradient up to float rounding."""
    lengths = m.long().cumsum(1).argmax(1) + 1  # one past each row's last answer token
    parts = [torch.arange(len(x))] if chunks <= 1 else torch.argsort(lengths, stable=True).chunk(chunks)
    total = int(m[:, 1:].sum())
    loss = torch.zeros(())
    for rows in parts:
        L = int(lengths[rows].max())  # right padding shared by the chunk
        xc, mc = x[rows, :L], m[rows, :L]
        logits = model(input_ids=xc).logits[:, :-1]
        tgt = xc[:, 1:].masked_fill(~mc[:, 1:], -100)
        part = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1),
                                                 ignore_index=-100, reduction="sum") / total
        part.backward()
        loss += part.detach()
    return loss


def pretrain_seed(cfg: dict, name: str) -> int:
    """The torch seed of policy `name`'s initialisation and batches. `pretrain.start_seed` 0 keeps
    the seed of every tree before the setting (so their bytes); another start mixes it in through
    numpy's SeedSequence, so no (seed, name, start) lands on another's seed by arithmetic."""
    base = cfg["seed"] * 100 + sum(map(ord, name))
    start = start_seed(cfg)
    if start == 0:
        return base
    return int(np.random.SeedSequence([base, start]).generate_state(1, np.uint32)[0])


def pretrain_files(P: Paths, name: str) -> dict:
    """`pretrain`'s files of policy `name` in the layout `P`: the corpus, the tokenizer, its
    checkpoint dir and its snapshots' (what rule pretrain_policy passes)."""
    return {"corpus": P.pretrain_corpus(), "tokenizer": P.tokenizer(), "out": P.policy(name),
            "snapshots": [P.policy(r) for r in P.snapshot_refs(name)]}


def pretrain(cfg: dict, name: str, threads: int = 1, log=_log.info, stop_after: int | None = None, *,
             corpus, tokenizer, out, snapshots) -> Path:
    """Pre-train policy `name` on `corpus` with `tokenizer` into checkpoint dir `out`, and each
    `pretrain.snapshots` fraction into its dir of `snapshots` (named `<name>@<tag>`, e.g. s@p50);
    resumable, from a state dir beside `out` (`_state/<name>`). Returns `out`. The DAG passes
    every path (`pretrain_files` gives a layout's).

    `stop_after` simulates a kill after that many steps (tests)."""
    import pandas as pd
    from transformers import AutoTokenizer

    torch.set_num_threads(threads)
    out = Path(out)
    snap_dirs = {}
    for d in snapshots or []:
        owner, tag = split_policy(Path(d).name)
        if owner != name or not tag:
            raise ConfigError(f"pretrain {name}: snapshot folder {d} is not named {name}@<tag> (e.g. "
                              f"{out.parent / (name + '@p50')}); name each --snapshots folder after the "
                              "policy and its pretrain.snapshots fraction")
        snap_dirs[tag] = Path(d)
    pol = cfg["policies"][name]
    pt = cfg.get("pretrain", {})
    steps, bs = pol["steps"], setting(cfg, "pretrain", "batch_size")
    max_length = cfg["tokenizer"]["max_length"]
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer))
    corpus = pd.read_parquet(corpus)
    ids, mask, too_long = encode_corpus(cfg, corpus, tokenizer, max_length)
    if too_long:
        # reasoning-gym's basic_arithmetic draws "1-digit" operands from 0..10 (randint is
        # inclusive), so a few "10 * 10 + 10" rows run one token past max_length 24; widening
        # max_length or the generator would change what tiny pre-trains on, so they stay cut
        log(f"{too_long} corpus rows exceed tokenizer.max_length={max_length}; their last "
            "token is cut (known: 1-digit arithmetic includes 10)")

    seed = pretrain_seed(cfg, name)
    torch.manual_seed(seed)
    model = build_model(pol, tokenizer, max_length)
    precision, compiled = setting(cfg, "policies", name, "precision"), setting(cfg, "pretrain", "compile")
    if precision != "fp32" or compiled:
        # our Qwen3 (sparserl.models.qwen3) from transformers' initialisation: it has the bf16
        # switch, and compiles (policies.<name>.precision, pretrain.compile; perf/pretrain_step.py)
        from sparserl.models.qwen3 import Qwen3LM
        from sparserl.core.machine import matmul_precision
        model = Qwen3LM.from_module(model)
        if matmul_precision(precision, f"policies.{name}.precision", log) == "bf16":
            model.matmul_dtype = torch.bfloat16
        if compiled:
            model.compile_layers()
    opt = torch.optim.AdamW(model.parameters(), lr=pol["lr"], weight_decay=setting(cfg, "pretrain", "weight_decay"))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, _lr_lambda(setting(cfg, "pretrain", "warmup_steps"), steps))
    gen = torch.Generator().manual_seed(seed)
    state_dir = out.parent / "_state" / out.name  # Paths.pretrain_state
    state_file = state_dir / "last.pt"
    key = config_hash({"policy": pol, "pretrain": pt, "tokenizer": cfg.get("tokenizer"),
                       "tasks": cfg["tasks"], "seed": cfg["seed"]})
    snaps = {max(1, round(f * steps)): snapshot_tag(f) for f in pt.get("snapshots", [])}
    lost = sorted(set(snaps.values()) - set(snap_dirs))
    if lost:
        raise ConfigError(f"pretrain {name}: pretrain.snapshots asks for {', '.join(lost)}, but no snapshot "
                          f"dir {name}@<tag> was given for it (--snapshots; rule pretrain_policy)")
    start, history = 0, []
    # a truncated last.pt falls back on prev.pt or stops naming the file and the fix
    st = load_checkpoint(state_file, what=f"pre-training {name}", log=lambda m: log(f"[pretrain {name}] {m}"))
    if st is not None:
        if st.get("config_hash") != key:
            log(f"[pretrain {name}] {state_file} was made with another config; starting over")
        elif not _restore_snapshots(snap_dirs, snaps, st["step"], state_dir):
            log(f"[pretrain {name}] snapshots before step {st['step']} are lost; starting over")
        else:
            model.load_state_dict(st["model"]); opt.load_state_dict(st["opt"])
            sched.load_state_dict(st["sched"]); gen.set_state(st["gen"])
            start, history = st["step"], st["history"]
            log(f"[pretrain {name}] resumed at step {start}/{steps}")

    every = setting(cfg, "pretrain", "checkpoint_every")
    chunks = setting(cfg, "pretrain", "length_chunks")
    n = ids.shape[0]
    model.train()
    t0 = time.time()
    bar = progress(steps, f"pretrain {name}", logger=_log, every=50, initial=start)
    for step in range(start, steps):
        idx = torch.randint(0, n, (bs,), generator=gen)
        opt.zero_grad(set_to_none=True)
        loss = batch_loss(model, ids[idx], mask[idx], chunks)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step(); sched.step()
        history.append(float(loss.detach()))  # a float of a graph tensor warns each step
        done = step + 1
        bar.set_postfix_str(f"loss {np.mean(history[-50:]):.4f}")
        bar.update(1)
        if done in snaps:
            _save_policy(model, tokenizer, snap_dirs[snaps[done]], cfg, _info(cfg, name, done, history))
            # a copy in the state dir: Snakemake deletes a killed job's outputs before a rerun
            save_hf(model, tokenizer, state_dir / "snapshots" / snaps[done], _info(cfg, name, done, history))
        if done % every == 0 and done < steps:
            save_checkpoint({"model": model.state_dict(), "opt": opt.state_dict(),
                             "sched": sched.state_dict(), "gen": gen.get_state(), "step": done,
                             "history": history, "config_hash": key}, state_file)
        if stop_after is not None and done >= stop_after and done < steps:
            raise RuntimeError(f"pretrain {name}: stopped after step {done} (simulated kill)")
    bar.close()
    log(f"[pretrain {name}] {steps} steps, loss {np.mean(history[-50:]):.4f} "
        f"({time.time() - t0:.0f}s)")
    _save_policy(model, tokenizer, out, cfg, _info(cfg, name, steps, history))
    # the state only serves a killed run; a finished one reruns from scratch when asked again
    shutil.rmtree(state_dir, ignore_errors=True)
    return out


def _restore_snapshots(snap_dirs: dict, snaps: dict, step: int, state_dir: Path) -> bool:
    """Put back the snapshots a resumed run has already passed; False if one cannot be."""
    for at, tag in snaps.items():
        if at > step:
            continue
        target = snap_dirs[tag]
        if target.exists():
            continue
        saved = state_dir / "snapshots" / tag
        if not saved.exists():
            return False
        with atomic_dir(target) as tmp:  # a kill mid-copy must not leave a partial snapshot
            shutil.copytree(saved, tmp, dirs_exist_ok=True)
    return True


def _info(cfg, name, step, history):
    pol = cfg["policies"][name]
    return {"policy": name, "step": step, "steps_total": pol["steps"], "scale": cfg["scale"],
            "loss_last50": float(np.mean(history[-50:])) if history else None,
            "config_hash": config_hash(cfg), "policy_config_hash": config_hash(pol),
            "git_commit": git_commit()}
