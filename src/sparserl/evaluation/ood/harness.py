"""OOD evaluation at paper scale (cluster only): lm-evaluation-harness and evalplus on vLLM, one
job per checkpoint and harness, their JSON outputs parsed into the OOD table."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from sparserl.core.artifacts import atomic_write_text, write_table
from sparserl.core.config import ConfigError, section_setting
from sparserl.core.logs import get_logger

from .common import (
    EVALPLUS_NAMES,
    to_table,
    ood_settings,
    parse_label,
    policies,
)

log = get_logger(__name__)


def harness_outputs(cfg: dict) -> list[tuple[str, str, str | None]]:
    """(label, tool, dataset) of every harness job the config asks for."""
    s = ood_settings(cfg)
    out = []
    for label, _, _ in policies(cfg):
        if s.get("lm_eval"):
            out.append((label, "lm_eval", None))
        for ds in (s.get("evalplus") or {}).get("datasets", []):
            out.append((label, "evalplus", ds))
    return out


def _vllm_args(cfg: dict, extra: dict | None) -> dict:
    """vLLM engine arguments of a harness: the config's rollout.vllm (parallelism, memory, dtype,
    length), then the harness's own overrides."""
    v = (cfg.get("rollout") or {}).get("vllm") or {}
    args = {k: v[k] for k in ("tensor_parallel_size", "dtype", "gpu_memory_utilization", "max_model_len") if k in v}
    args.setdefault("dtype", "bfloat16")
    args.update(extra or {})
    return args


def lm_eval_argv(cfg: dict, model: str, output_path: str | Path) -> list[str]:
    """The `lm_eval` command line for one checkpoint (lm-evaluation-harness's CLI, vLLM backend):
    every task of `ood.lm_eval.tasks` in one run, results under `output_path` (a directory: lm-eval
    writes `<output_path>/<model name sanitized>/results_<date>.json`)."""
    le = ood_settings(cfg).get("lm_eval")
    if not le:
        raise ConfigError("ood.lm_eval is not in the config")
    margs = {"pretrained": str(model), **_vllm_args(cfg, le.get("model_args"))}
    tasks = list(dict.fromkeys(t for spec in le["tasks"] for t in spec["tasks"]))
    argv = list(le.get("command", ["lm_eval"])) + [
        "--model", "vllm",
        "--model_args", ",".join(f"{k}={v}" for k, v in margs.items()),
        "--tasks", ",".join(tasks),
        "--batch_size", str(section_setting(le, "ood", "lm_eval", "batch_size")),
        "--output_path", str(output_path),
        "--seed", str(cfg["seed"]),
    ]
    if section_setting(le, "ood", "lm_eval", "apply_chat_template"):
        argv.append("--apply_chat_template")
    if section_setting(le, "ood", "lm_eval", "fewshot_as_multiturn"):
        argv.append("--fewshot_as_multiturn")
    if le.get("gen_kwargs"):
        argv += ["--gen_kwargs", str(le["gen_kwargs"])]
    if le.get("log_samples"):
        argv.append("--log_samples")
    return argv


def evalplus_argv(cfg: dict, model: str, dataset: str, root: str | Path) -> list[str]:
    """The `evalplus.evaluate` command line (code generation on vLLM, then the base and plus tests)
    for one checkpoint and dataset; evalplus writes `<root>/<dataset>/<model id>_vllm_temp_0.0
    .eval_results.json`."""
    ep = ood_settings(cfg).get("evalplus")
    if not ep:
        raise ConfigError("ood.evalplus is not in the config")
    if dataset not in EVALPLUS_NAMES:
        raise ConfigError(f"ood.evalplus.datasets: unknown dataset {dataset!r}; use {sorted(EVALPLUS_NAMES)}")
    v = _vllm_args(cfg, None)
    argv = list(ep.get("command", ["evalplus.evaluate"])) + [
        "--model", str(model), "--dataset", dataset, "--backend", "vllm",
        "--root", str(root), "--tp", str(section_setting(v, "rollout", "vllm", "tensor_parallel_size")),
        "--dtype", str(v["dtype"])]
    if section_setting(ep, "ood", "evalplus", "greedy"):
        argv.append("--greedy")
    for key, val in (ep.get("args") or {}).items():
        argv += [f"--{key}", str(val)]
    return argv


def find_lm_eval_results(output_path: Path) -> Path:
    found = sorted(Path(output_path).rglob("results_*.json"))
    if not found:
        raise FileNotFoundError(f"{output_path}: lm_eval wrote no results_*.json (it only warns when it "
                                "cannot save); see the job's log")
    return found[-1]  # names carry the date: the newest run


def find_evalplus_results(root: Path, dataset: str) -> Path:
    found = sorted((Path(root) / dataset).glob("*eval_results.json"))
    if len(found) != 1:
        raise FileNotFoundError(f"{Path(root) / dataset}: expected one *eval_results.json from "
                                f"evalplus, found {[p.name for p in found]}; see the job's log")
    return found[0]


def run_harness(cfg: dict, label: str, tool: str, model: str, out: str | Path, dataset: str | None = None,
                dry_run: bool = False) -> list[str] | Path:
    """Run one harness on one checkpoint in a scratch folder beside its output `out`, then copy
    the harness's results JSON to `out` atomically (a killed job leaves no half file that
    Snakemake would take as done). `dry_run`: the argv only."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    # the harness runs in its scratch folder: every path it gets must be absolute
    work = (Path(tempfile.mkdtemp(prefix=f".{out.stem}.", dir=out.parent)).resolve() if not dry_run
            else out.parent.resolve() / "<scratch>")
    model = str(Path(model).resolve()) if Path(model).exists() else model  # else a hub name
    argv = (lm_eval_argv(cfg, model, work / "lm_eval") if tool == "lm_eval"
            else evalplus_argv(cfg, model, dataset, work / "evalplus"))
    if dry_run:
        return argv
    try:
        log.info(f"ood {tool} {label}: {' '.join(argv)}")
        rc = subprocess.run(argv, cwd=work, env={**os.environ, "TOKENIZERS_PARALLELISM": "false"}).returncode
        if rc != 0:
            raise RuntimeError(f"ood {tool} {label}: `{argv[0]}` exited with {rc}; see the job's log")
        src = (find_lm_eval_results(work / "lm_eval") if tool == "lm_eval"
               else find_evalplus_results(work / "evalplus", dataset))
        obj = json.loads(src.read_text())
        # parse now: a results file without the metrics the config names fails this job, not the table's
        parse_lm_eval(obj, cfg, src) if tool == "lm_eval" else parse_evalplus(obj, dataset, cfg, src)
        atomic_write_text(out, json.dumps(obj, indent=1, sort_keys=True, default=str) + "\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


def _stderr_key(metric: str) -> str:
    name, _, filt = metric.partition(",")
    return f"{name}_stderr,{filt}" if filt else f"{name}_stderr"


def _num(x) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):  # lm-eval writes "N/A" for a stderr it did not compute
        return None
    return v if np.isfinite(v) else None


def parse_lm_eval(obj: dict, cfg: dict, where: str | Path = "<lm_eval results>") -> list[dict]:
    """Rows of one lm-eval results JSON: `results.<task>.<metric>` (metric keys are
    `<metric>,<filter>`, e.g. `exact_match,custom-extract`, `prompt_level_strict_acc,none`), one
    row per `ood.lm_eval.tasks` entry: a benchmark of several tasks (MGSM's languages) is their
    unweighted mean, its stderr that of a mean of independent estimates."""
    res = obj.get("results")
    if not isinstance(res, dict):
        raise ValueError(f"{where}: no `results` object; is this an lm-eval results_*.json?")
    n_samples = obj.get("n-samples") or {}
    rows = []
    for spec in ood_settings(cfg)["lm_eval"]["tasks"]:
        metric = spec["metric"]
        vals, errs, n = [], [], 0
        for t in spec["tasks"]:
            if t not in res:
                raise ValueError(f"{where}: task {t!r} (ood.lm_eval benchmark {spec['benchmark']!r}) is not in "
                                 f"`results` (has {sorted(res)[:8]}); check the task name against lm-eval's")
            entry = res[t]
            if metric not in entry:
                keys = [k for k in entry if "," in k and "_stderr" not in k]
                raise ValueError(f"{where}: results.{t} has no metric {metric!r} (has {keys}); set "
                                 f"ood.lm_eval.tasks[{spec['benchmark']}].metric to one of them")
            vals.append(float(entry[metric]))
            errs.append(_num(entry.get(_stderr_key(metric))))
            ns = n_samples.get(t) or {}
            n += int(ns.get("effective", ns.get("original", 0)) or 0)
        se = (float(np.sqrt(sum(e * e for e in errs)) / len(errs)) if all(e is not None for e in errs) else None)
        rows.append({"suite": "lm_eval", "benchmark": spec["benchmark"], "task": ",".join(spec["tasks"]),
                     "metric": metric, "score": float(np.mean(vals)), "stderr": se, "problems": n or None})
    return rows


def parse_evalplus(obj: dict, dataset: str, cfg: dict, where: str | Path = "<evalplus results>") -> list[dict]:
    """The row of one evalplus `*.eval_results.json`: pass@1 on the plus tests (base and extra both
    pass; `ood.evalplus.tests: base` for the base tests alone), from `eval` (task id -> its samples'
    `base_status` / `plus_status`), the mean over problems of each one's passing share, which is
    evalplus's unbiased pass@1; its `pass_at_k.<tests>.pass@1` (written by evalplus 0.3) must agree."""
    which = section_setting(ood_settings(cfg).get("evalplus"), "ood", "evalplus", "tests")
    ev = obj.get("eval")
    if not isinstance(ev, dict) or not ev:
        raise ValueError(f"{where}: no `eval` object of per-problem statuses; is this an evalplus "
                         "*.eval_results.json?")
    status = "plus_status" if which == "plus" else "base_status"
    p = np.array([np.mean([(s.get("base_status") == "pass") and (s.get(status) == "pass") for s in samples])
                  for samples in ev.values()], dtype=float)
    score = float(p.mean())
    stored = ((obj.get("pass_at_k") or {}).get(which) or {}).get("pass@1")
    if stored is not None and abs(float(stored) - score) > 1e-6:
        raise ValueError(f"{where}: pass_at_k.{which}.pass@1 = {stored} but its `eval` statuses give "
                         f"{score:.6f}; the file is inconsistent, rerun `sparserl ood-harness`")
    se = float(p.std(ddof=1) / np.sqrt(len(p))) if len(p) > 1 else None
    name = EVALPLUS_NAMES[dataset][0 if which == "plus" else 1]
    return [{"suite": "evalplus", "benchmark": name, "task": dataset, "metric": f"pass@1 ({which})",
             "score": score, "stderr": se, "problems": len(ev)}]


def harness_table(cfg: dict, files: list, out: str | Path, models: dict[str, str] | None = None) -> pd.DataFrame:
    """Parse every harness JSON of the config (`files`, in `harness_outputs` order, each ending
    `<label>/lm_eval.json` or `<label>/evalplus_<dataset>.json`) into the OOD table `out`."""
    want = harness_outputs(cfg)
    if len(files) != len(want):
        raise ValueError(f"ood-table: {len(files)} harness files for the config's {len(want)} (label, tool, "
                         "dataset) jobs; pass each job's JSON, in harness_outputs order")
    rows = []
    for path, (label, tool, ds) in zip(map(Path, files), want):
        name = "lm_eval.json" if tool == "lm_eval" else f"evalplus_{ds}.json"
        if not path.as_posix().endswith(f"{label}/{name}"):
            raise ValueError(f"ood-table: {path} is not the {tool} JSON of {label} (expected a path ending "
                             f"{label}/{name}); pass the files in harness_outputs order")
        if not path.exists():
            raise FileNotFoundError(f"{path}: missing; `snakemake {path}` runs its harness")
        obj = json.loads(path.read_text())
        found = parse_lm_eval(obj, cfg, path) if tool == "lm_eval" else parse_evalplus(obj, ds, cfg, path)
        method, seed = parse_label(label)
        rows += [{**r, "policy": label, "method": method, "seed": seed, "k": 1,
                  "checkpoint": (models or {}).get(label), "scale": cfg["scale"]} for r in found]
    table = to_table(rows)
    write_table(table, out, cfg=cfg, extra={"suite": "lm_eval+evalplus"})
    log.info("OOD scores:\n" + table.pivot(index="policy", columns="benchmark", values="score").round(3).to_string())
    return table
