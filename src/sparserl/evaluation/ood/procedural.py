"""OOD evaluation at tiny and small scale: reasoning-gym families the policies never trained on,
admitted when the policy can write their answers, scored under the evaluation protocol."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from sparserl.core.artifacts import read_table, write_table
from sparserl.core.config import ConfigError, rollout_max_new_tokens, section_setting
from sparserl.core.logs import get_logger
from sparserl.evaluation.evaluate import per_prompt_rates
from sparserl.evaluation.progress import rollout_progress

from .common import to_table, ood_settings

log = get_logger(__name__)


def _token_ids(tokenizer, texts: list[str]) -> list[list[int]]:
    return [e.ids for e in tokenizer.encode_batch(texts, add_special_tokens=False)]


def load_fast_tokenizer(tok_dir: Path):
    """The tiny BPE as a `tokenizers.Tokenizer` (no transformers import: a second, not five)."""
    from tokenizers import Tokenizer
    path = Path(tok_dir) / "tokenizer.json"
    if not path.exists():
        raise FileNotFoundError(f"{path}: the tokenizer is missing; run `snakemake {tok_dir}` first")
    return Tokenizer.from_file(str(path))


def build_ood_tasks(cfg: dict, tokenizer, corpus: pd.DataFrame,
                    benchmarks: list[pd.DataFrame] = ()) -> dict[str, pd.DataFrame]:
    """One table per `ood.benchmarks` family: its held-out problems (columns of the benchmarks'
    records plus `prompt_tokens`, `unseen_prompt_tokens`), drawn like the in-domain benchmarks, none
    of them a problem of the in-domain `benchmarks` tables. `tokenizer`: the world's (a
    `tokenizers.Tokenizer`); `corpus`: its pre-training corpus.

    Refuses a family whose answer targets hold a token the corpus never has (the policy was
    never trained to write it: a decimal point, a letter), naming the family, the token and the fix.
    """
    from sparserl.tasks import format_prompt, format_target
    from sparserl.tasks.procedural import _records, distinct_problems, task_split
    s = ood_settings(cfg)
    seen = {i for ids in _token_ids(tokenizer, [format_prompt(cfg, p) + format_target(cfg, a)
                                                for p, a in zip(corpus["problem"], corpus["answer"])])
            for i in ids}
    split = task_split(cfg["tasks"])
    taken = set()
    for b in benchmarks:  # no in-domain benchmark problem is an OOD one
        taken |= set(b["problem"])
    in_domain = {lv["name"] for lv in cfg["tasks"].get("benchmarks", []) if isinstance(lv, dict)}
    out = {}
    for bi, lv in enumerate(s["benchmarks"]):
        if lv["name"] in in_domain:
            raise ConfigError(f"ood.benchmarks: '{lv['name']}' is also an in-domain benchmark "
                              "(tasks.benchmarks); give the OOD family another name")
        pairs = distinct_problems(lv, section_setting(lv, "$defs", "level", "size"), cfg["seed"] * 1000 + 3_000 + bi,
                                  "eval", split, taken,
                                  where="ood.benchmarks")
        if not pairs:
            raise ValueError(f"ood.benchmarks '{lv['name']}': no held-out problems could be generated; "
                             "change its params or raise tasks.split.eval")
        taken |= {p for p, _ in pairs}
        df = pd.DataFrame(_records(pairs, lv, bi, f"ood/{lv['name']}"))
        prompts = _token_ids(tokenizer, [format_prompt(cfg, p) for p in df["problem"]])
        targets = _token_ids(tokenizer, [format_target(cfg, a) for a in df["answer"]])
        for ans, ids in zip(df["answer"], targets):
            bad = [i for i in ids if i not in seen]
            if bad:
                raise ConfigError(
                    f"ood.benchmarks '{lv['name']}' ({lv['generator']}): the answer {ans!r} needs the "
                    f"token {tokenizer.id_to_token(bad[0])!r}, which the pre-training corpus never has, so "
                    "the policy cannot write it; pick a generator or params with integer answers, or drop it")
        df["prompt_tokens"] = [len(ids) for ids in prompts]
        df["unseen_prompt_tokens"] = [sum(i not in seen for i in ids) for ids in prompts]
        out[lv["name"]] = df
    return out


def task_files(cfg: dict, paths: list) -> dict[str, Path]:
    """`ood.benchmarks` family name -> its task table among `paths` (named `<family>.parquet`);
    a family without one is an error naming it."""
    by_name = {Path(p).stem: Path(p) for p in paths}
    names = [lv["name"] for lv in ood_settings(cfg)["benchmarks"]]
    missing = [n for n in names if n not in by_name]
    if missing:
        raise ValueError(f"ood tasks: no file for the ood.benchmarks families {missing} among "
                         f"{[str(p) for p in paths]}; give one <family>.parquet each")
    return {n: by_name[n] for n in names}


def write_ood_tasks(cfg: dict, tokenizer_dir: str | Path, corpus: str | Path, benchmarks: list,
                    out: list) -> dict[str, Path]:
    """The OOD task tables (`build_ood_tasks`) from the world's tokenizer folder, pre-training
    corpus and in-domain benchmark tables, each written to its `<family>.parquet` of `out`."""
    dest = task_files(cfg, out)
    tables = build_ood_tasks(cfg, load_fast_tokenizer(tokenizer_dir), read_table(corpus),
                             [read_table(b) for b in benchmarks])
    written = {}
    for name, df in tables.items():
        share = float(df["unseen_prompt_tokens"].sum() / df["prompt_tokens"].sum())
        written[name] = write_table(df, dest[name], cfg=cfg, extra={
            "unseen_prompt_token_share": share, "max_prompt_tokens": int(df["prompt_tokens"].max())})
        log.info(f"ood task {name}: {len(df)} problems, {share:.1%} of prompt tokens unseen in "
                 f"pre-training -> {written[name]}")
    return written


def _max_positions(checkpoint: str) -> int | None:
    cfg_file = Path(checkpoint) / "config.json"
    if cfg_file.exists():
        return json.loads(cfg_file.read_text()).get("max_position_embeddings")
    return None


def evaluate_ood(cfg: dict, checkpoints: list[tuple[str, str, int | None, str]], tasks: list, out: str | Path,
                 threads: int = 1) -> pd.DataFrame:
    """Evaluate every (label, method, seed, checkpoint dir) on the `ood.benchmarks` task tables
    (`tasks`, one `<family>.parquet` each) and write the OOD table to `out`. A checkpoint two
    labels share (a method whose spec repeats another's reports that run) is rolled out once;
    every checkpoint sees the same seeds."""
    from sparserl.grading.verifier import open_verifier
    from sparserl.rollout import SamplingParams, make_backend, rollout
    from sparserl.tasks import format_prompt
    s = ood_settings(cfg)
    files = task_files(cfg, tasks)
    spec = dict(cfg["evaluation"]["default"])
    spec.update(s.get("protocol") or {})
    greedy = spec.get("protocol") == "greedy"
    k = 1 if greedy else int(section_setting(spec, "$defs", "sampling", "k"))
    max_new = rollout_max_new_tokens(cfg)
    params = SamplingParams(temperature=section_setting(spec, "$defs", "sampling", "temperature"),
                            top_p=section_setting(spec, "$defs", "sampling", "top_p"),
                            greedy=greedy, max_new_tokens=max_new)
    metric = "greedy" if greedy else f"{'avg' if spec.get('protocol') == 'avg_at_k' else 'mean'}@{k}"
    benches = [(lv["name"], lv["generator"], read_table(files[lv["name"]])) for lv in s["benchmarks"]]
    by_ckpt: dict[str, list[dict]] = {}
    rows = []
    with open_verifier(cfg) as ver:
        for label, method, seed, ckpt in checkpoints:
            ckpt = str(ckpt)
            if ckpt not in by_ckpt:
                limit = _max_positions(ckpt)
                for name, _, df in benches:
                    if limit is not None and int(df["prompt_tokens"].max()) + max_new > limit:
                        raise ConfigError(f"ood.benchmarks '{name}': prompts of up to {int(df['prompt_tokens'].max())} "
                                          f"tokens + rollout.max_new_tokens {max_new} exceed the {limit} positions "
                                          f"of {ckpt}; use fewer terms or shorter values")
                backend = make_backend(cfg, ckpt, threads=threads)
                total = sum(len(df) for _, _, df in benches) * k
                found = []
                with rollout_progress(backend, total, f"ood {label}", log):
                    for bi, (name, gen, df) in enumerate(benches):
                        batch = rollout(backend, [format_prompt(cfg, p) for p in df["problem"]],
                                        list(df["answer"]), k, params, cfg["seed"] + 101 + 7 * bi, ver)
                        succ, n = per_prompt_rates(batch, len(df))
                        p = succ / n
                        found.append({
                            "suite": "reasoning_gym", "benchmark": name, "task": gen, "metric": metric,
                            "score": float(p.mean()),
                            "stderr": float(p.std(ddof=1) / np.sqrt(len(p))) if len(p) > 1 else 0.0,
                            "problems": len(df), "k": k,
                            "unseen_prompt_token_share": float(df["unseen_prompt_tokens"].sum() / df["prompt_tokens"].sum()),
                            "mean_response_tokens": float(batch.response_lengths().mean())})
                backend.close()
                by_ckpt[ckpt] = found
            rows += [{**r, "policy": label, "method": method, "seed": seed, "checkpoint": ckpt,
                      "scale": cfg["scale"]} for r in by_ckpt[ckpt]]
        timeouts = ver.timeout_counts()
    table = to_table(rows)
    write_table(table, out, cfg=cfg, extra={"suite": "reasoning_gym", "metric": metric,
                                            "verifier": timeouts, "checkpoints_rolled_out": len(by_ckpt)})
    log.info("OOD accuracy:\n" + table.pivot(index="policy", columns="benchmark", values="score").round(3).to_string())
    return table
