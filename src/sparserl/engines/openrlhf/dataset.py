"""The run's prompt dataset: one JSONL row {"input", "label"} per prompt of every step, the label
carrying uid, answer and the static side data (`labels.encode_label`); a Le Critique method
adds its critic warm-up steps' prompts, and a pool column "privileged" (an env's critic context,
`envs.base.Problem.privileged`) travels in the labels of `critic.privileged: answer` methods."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

from sparserl.core.artifacts import atomic_write_text, read_table
from sparserl.core.config import ConfigError
from sparserl.engines.openrlhf.critic_warmup import critic_warmup_steps
from sparserl.engines.openrlhf.labels import encode_label
from sparserl.methods.spec import MethodSpec, prompts_per_step, total_steps
from sparserl.tasks.prompts import PAPER_INSTRUCTION, format_prompt
from sparserl.values.priors import prior_for_method


def prompt_side_data(cfg: dict, method: MethodSpec, ids: list, seed: int,
                     reference_cache: str | Path | None = None) -> dict[str, list]:
    """Per-prompt side data known before training, for the labels: BASIS phat and a static prior's
    p, from `reference_cache` (the start policy's, `Paths.reference_cache`; a method that reads it
    needs it). A prior that is not static (e.g. V0) is queried during training instead
    (`experience.live_prior`), so it adds nothing here."""
    out: dict[str, list] = {}
    df = None
    if method.needs_reference_cache:
        if reference_cache is None:
            raise ValueError(f"method {method.name} reads the BASIS reference cache of {cfg['rl']['policy']}; "
                             "pass it as reference_cache")
        path = reference_cache
        if not Path(path).exists():
            raise ConfigError(f"{path}: the BASIS reference cache of {cfg['rl']['policy']} is needed by "
                              f"{method.name}; build it first (rule reference_cache)")
        df = read_table(path)
        df["prompt_id"] = df["prompt_id"].astype(str)
        phat = dict(zip(df["prompt_id"], df["phat"].astype(float)))
        missing = [i for i in ids if str(i) not in phat]
        if missing:
            raise ConfigError(f"{path}: no phat for {len(missing)} pool prompts (e.g. {missing[0]!r})")
        if "reference" in method.needs:
            out["phat"] = [phat[str(i)] for i in ids]
    if method.needs_prior and method.prior.static:
        source = {} if reference_cache is None else {"reference_source": str(reference_cache)}
        pr = prior_for_method(dataclasses.asdict(method.prior), df, seed, **source)
        out["prior"] = [float(x) for x in pr([str(i) for i in ids])]
    return out


def build_prompt_dataset(cfg: dict, method: MethodSpec, seed: int, out_path: str | Path, *, pool: str | Path,
                         reference_cache: str | Path | None = None) -> Path:
    """Write the run's prompt dataset: steps x prompts_per_step rows {"input", "label"} (JSONL),
    the RL pool (`pool`, `Paths.train_pool`) shuffled by seed and cycled as needed; label =
    `labels.encode_label` JSON, with the side data of `prompt_side_data` (`reference_cache`)."""
    pool = read_table(pool)
    ids = [str(i) for i in pool["id"]]
    side = prompt_side_data(cfg, method, ids, seed, reference_cache)
    chat = bool(cfg["tasks"].get("chat_template"))
    tmpl = cfg["tasks"]["prompt_template"]
    privileged = method.critic is not None and method.critic.privileged == "answer" and "privileged" in pool
    # a critic's warm-up steps (Le Critique B.3) consume prompts before the first policy update
    n = (total_steps(cfg["rl"], method) + critic_warmup_steps(method)) \
        * prompts_per_step(method, int(cfg["rl"]["rollouts_per_step"]))
    rng = np.random.default_rng(seed)
    order = np.concatenate([rng.permutation(len(pool)) for _ in range(-(-n // max(len(pool), 1)))])[:n]
    lines = []
    for j in order:
        row = pool.iloc[int(j)]
        text = (tmpl.format(problem=row["problem"], instruction=PAPER_INSTRUCTION) if chat
                else format_prompt(cfg, row["problem"]))
        extra = {k: v[int(j)] for k, v in side.items()}
        if privileged and isinstance(row.get("privileged"), str) and row["privileged"]:
            extra["privileged"] = row["privileged"]  # the critic's reference context (else the answer)
        lines.append(json.dumps({"input": text, "label": encode_label(ids[int(j)], row["answer"], **extra)}))
    return atomic_write_text(out_path, "\n".join(lines) + "\n")
