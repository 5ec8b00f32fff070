"""BASIS Table 2: out-of-domain evaluation of the GRPO-family checkpoints.

What the paper says (BASIS §5.2, Table 2): the GRPO variants post-trained on DAPO-Math-17K (GRPO
with G=8 rollouts per prompt, its vanilla single-rollout version, REINFORCE++'s global batch
baseline at G=1, and BASIS at G=1 trained for half the steps; "for the OOD evaluation, we apply
BASIS only to GRPO") are evaluated on five out-of-domain benchmarks, "HumanEval+ and MBPP+ for
code generation, MMLU-Pro for broad-domain knowledge and reasoning, MGSM for multilingual
mathematical reasoning, and IFEval for instruction following", each with "its standard task
metric" and their average. BASIS gains 14.4 points on average over vanilla G=1 and 4.1 over
REINFORCE++.

One table holds every suite, `results/{scale}/ood/ood.parquet`, one row per (policy, benchmark):
`policy` is `start` (the RL start policy) or `<method>/seed<s>` (that run's `final/` checkpoint).

- **Paper scale** (`ood.lm_eval`, `ood.evalplus`; cluster only): lm-evaluation-harness (MMLU-Pro,
  MGSM, IFEval) and evalplus (HumanEval+, MBPP+) on vLLM, one job per checkpoint and harness
  (`sparserl ood-harness`), their JSON outputs parsed into the table (`sparserl ood-table`). The
  paper names neither harness versions, task variants nor shots: [our choice] lm-eval's `mmlu_pro`
  (5-shot, `exact_match,custom-extract`), MGSM as the unweighted mean of the eleven languages'
  `mgsm_native_cot_<lang>` tasks (`exact_match,flexible-extract`), IFEval's
  `prompt_level_strict_acc`, all under the chat template; evalplus greedy pass@1 on the plus
  tests (base + extra). The config names every task and metric key.
- **Tiny and small scale** (`ood.benchmarks`): reasoning-gym families the policies never trained
  on, held out like the in-domain benchmarks (the `eval` side of the hash split, none of the
  in-domain benchmarks' problems), under the evaluation protocol (`ood.protocol`, else
  `evaluation.default`). A family is admitted only if the policy can write its answers: every
  token of every answer target must occur in the pre-training corpus (`ood-tasks` refuses the
  benchmark otherwise); its prompts may hold tokens the policy never read, and the table says
  what share (`unseen_prompt_token_share`): that is what makes them out of domain.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from sparserl.core.artifacts import atomic_write_text, read_table, write_table
from sparserl.core.config import ConfigError, rollout_max_new_tokens
from sparserl.core.logs import get_logger
from sparserl.core.paths import Paths
from sparserl.evaluation.evaluate import per_prompt_rates
from sparserl.evaluation.progress import rollout_progress

log = get_logger(__name__)

#: BASIS Table 2's rows, in its order: GRPO G=8 and the three single-rollout GRPO variants
T2_METHODS = ["grpo_g8", "basis_grid_grpo_g1_vanilla", "basis_grid_grpo_g1_rpp", "basis_grid_grpo_g1_basis"]
START = "start"
#: evalplus dataset -> the benchmark's name in Table 2 (plus tests) and with the base tests only
EVALPLUS_NAMES = {"humaneval": ("HumanEval+", "HumanEval"), "mbpp": ("MBPP+", "MBPP")}
TABLE_COLUMNS = ["suite", "benchmark", "task", "metric", "policy", "method", "seed", "score", "stderr",
                 "problems", "k", "unseen_prompt_token_share", "mean_response_tokens", "checkpoint", "scale"]


# --- settings and paths --------------------------------------------------------------------

def ood_settings(cfg: dict) -> dict:
    """The `ood` section with its defaults: Table 2's methods (which must be RL methods of the
    config), `basis_method` (the Δ rows: it minus each other method; default the last method),
    `start_policy` (also evaluate the RL start policy; default true)."""
    ood = cfg.get("ood")
    if not ood:
        raise ConfigError("the config has no `ood` section (BASIS Table 2's out-of-domain evaluation)")
    if not cfg.get("rl"):
        raise ConfigError("ood: the out-of-domain evaluation reads RL checkpoints; the config has no `rl` section")
    methods = list(ood.get("methods") or T2_METHODS)
    missing = [m for m in methods if m not in cfg["rl"]["methods"]]
    if missing:
        raise ConfigError(f"ood.methods: {missing} are not in rl.methods, so no run trains them; "
                          "add them to rl.methods or drop them from ood.methods")
    basis = ood.get("basis_method", methods[-1])
    if basis not in methods:
        raise ConfigError(f"ood.basis_method: {basis!r} is not one of ood.methods {methods}")
    if not (ood.get("benchmarks") or ood.get("lm_eval") or ood.get("evalplus")):
        raise ConfigError("ood: give `benchmarks` (reasoning-gym families, local scales) or "
                          "`lm_eval` / `evalplus` (paper scale)")
    return {**ood, "methods": methods, "basis_method": basis, "start_policy": ood.get("start_policy", True)}


def policies(cfg: dict) -> list[tuple[str, str, int | None]]:
    """(label, method, seed) of every evaluated policy: `start`, then each method x rl.seeds."""
    s = ood_settings(cfg)
    out = [(START, START, None)] if s["start_policy"] else []
    return out + [(f"{m}/seed{seed}", m, int(seed)) for m in s["methods"] for seed in cfg["rl"]["seeds"]]


def parse_label(label: str) -> tuple[str, int | None]:
    """'grpo_g8/seed0' -> ('grpo_g8', 0); 'start' -> ('start', None)."""
    if label == START:
        return START, None
    method, _, seed = label.partition("/seed")
    if not method or not seed.isdigit():
        raise ValueError(f"OOD policy label {label!r}: expected 'start' or '<method>/seed<n>'")
    return method, int(seed)


class OODPaths:
    """Every file of the OOD stage: ``results/{scale}/ood/``."""

    def __init__(self, cfg: dict, root: str | Path = "."):
        self.dir = Paths(cfg, root).stage("ood")

    def table(self) -> Path:
        return self.dir / "ood.parquet"

    def task(self, name: str) -> Path:
        return self.dir / "tasks" / f"{name}.parquet"

    def harness(self, label: str, tool: str, dataset: str | None = None) -> Path:
        """One harness's JSON for one policy (paper scale): lm_eval.json, evalplus_<dataset>.json."""
        name = "lm_eval.json" if tool == "lm_eval" else f"evalplus_{dataset}.json"
        return self.dir / "harness" / label / name


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


# --- tiny / small: reasoning-gym families the policies never trained on ----------------------

def _token_ids(tokenizer, texts: list[str]) -> list[list[int]]:
    return [e.ids for e in tokenizer.encode_batch(texts, add_special_tokens=False)]


def load_fast_tokenizer(tok_dir: Path):
    """The tiny BPE as a `tokenizers.Tokenizer` (no transformers import: a second, not five)."""
    from tokenizers import Tokenizer
    path = Path(tok_dir) / "tokenizer.json"
    if not path.exists():
        raise FileNotFoundError(f"{path}: the tokenizer is missing; run `snakemake {tok_dir}` first")
    return Tokenizer.from_file(str(path))


def build_ood_tasks(cfg: dict, tokenizer=None, corpus: pd.DataFrame | None = None) -> dict[str, pd.DataFrame]:
    """One table per `ood.benchmarks` family: its held-out problems (columns of the benchmarks'
    records plus `prompt_tokens`, `unseen_prompt_tokens`), drawn like the in-domain benchmarks.

    Refuses a family whose answer targets hold a token the corpus never has (the policy was
    never trained to write it: a decimal point, a letter), naming the family, the token and the fix.
    """
    from sparserl.tasks import format_prompt, format_target
    from sparserl.tasks.procedural import _records, distinct_problems, task_split
    s = ood_settings(cfg)
    P = Paths(cfg)
    tokenizer = tokenizer or load_fast_tokenizer(P.tokenizer())
    if corpus is None:
        corpus = read_table(P.pretrain_corpus())
    seen = {i for ids in _token_ids(tokenizer, [format_prompt(cfg, p) + format_target(cfg, a)
                                                for p, a in zip(corpus["problem"], corpus["answer"])])
            for i in ids}
    split = task_split(cfg["tasks"])
    taken = set()
    for b in P.benchmark_names():  # no in-domain benchmark problem is an OOD one
        if P.benchmark(b).exists():
            taken |= set(read_table(P.benchmark(b))["problem"])
    in_domain = {lv["name"] for lv in cfg["tasks"].get("benchmarks", []) if isinstance(lv, dict)}
    out = {}
    for bi, lv in enumerate(s["benchmarks"]):
        if lv["name"] in in_domain:
            raise ConfigError(f"ood.benchmarks: '{lv['name']}' is also an in-domain benchmark "
                              "(tasks.benchmarks); give the OOD family another name")
        pairs = distinct_problems(lv, lv.get("size", 128), cfg["seed"] * 1000 + 3_000 + bi, "eval", split, taken,
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


def write_ood_tasks(cfg: dict) -> dict[str, Path]:
    O = OODPaths(cfg)
    out = {}
    for name, df in build_ood_tasks(cfg).items():
        share = float(df["unseen_prompt_tokens"].sum() / df["prompt_tokens"].sum())
        out[name] = write_table(df, O.task(name), cfg=cfg, extra={
            "unseen_prompt_token_share": share, "max_prompt_tokens": int(df["prompt_tokens"].max())})
        log.info(f"ood task {name}: {len(df)} problems, {share:.1%} of prompt tokens unseen in "
                 f"pre-training -> {out[name]}")
    return out


def _max_positions(checkpoint: str) -> int | None:
    cfg_file = Path(checkpoint) / "config.json"
    if cfg_file.exists():
        return json.loads(cfg_file.read_text()).get("max_position_embeddings")
    return None


def evaluate_ood(cfg: dict, checkpoints: list[tuple[str, str, int | None, str]], threads: int = 1) -> pd.DataFrame:
    """Evaluate every (label, method, seed, checkpoint dir) on the `ood.benchmarks` tables and
    write `results/{scale}/ood/ood.parquet`. A checkpoint two labels share (a method whose spec
    repeats another's reports that run) is rolled out once; every checkpoint sees the same seeds."""
    from sparserl.grading.verifier import open_verifier
    from sparserl.rollout import SamplingParams, make_backend, rollout
    from sparserl.tasks import format_prompt
    s = ood_settings(cfg)
    O = OODPaths(cfg)
    spec = dict(cfg["evaluation"]["default"])
    spec.update(s.get("protocol") or {})
    greedy = spec.get("protocol") == "greedy"
    k = 1 if greedy else int(spec.get("k", 16))
    max_new = rollout_max_new_tokens(cfg)
    params = SamplingParams(temperature=spec.get("temperature", 1.0), top_p=spec.get("top_p", 1.0),
                            greedy=greedy, max_new_tokens=max_new)
    metric = "greedy" if greedy else f"{'avg' if spec.get('protocol') == 'avg_at_k' else 'mean'}@{k}"
    benches = [(lv["name"], lv["generator"], read_table(O.task(lv["name"]))) for lv in s["benchmarks"]]
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
    out = _table(rows)
    write_table(out, O.table(), cfg=cfg, extra={"suite": "reasoning_gym", "metric": metric,
                                               "verifier": timeouts, "checkpoints_rolled_out": len(by_ckpt)})
    log.info("OOD accuracy:\n" + out.pivot(index="policy", columns="benchmark", values="score").round(3).to_string())
    return out


def _table(rows: list[dict]) -> pd.DataFrame:
    df = pd.DataFrame(rows)
    for c in TABLE_COLUMNS:
        if c not in df:
            df[c] = None
    df = df[TABLE_COLUMNS]
    df["seed"] = df["seed"].astype("Int64")
    return df


# --- paper scale: lm-evaluation-harness and evalplus -----------------------------------------

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
        "--batch_size", str(le.get("batch_size", "auto")),
        "--output_path", str(output_path),
        "--seed", str(cfg["seed"]),
    ]
    if le.get("apply_chat_template", True):
        argv.append("--apply_chat_template")
    if le.get("fewshot_as_multiturn", True):
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
        "--root", str(root), "--tp", str(v.get("tensor_parallel_size", 1)), "--dtype", str(v["dtype"])]
    if ep.get("greedy", True):
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


def run_harness(cfg: dict, label: str, tool: str, model: str, dataset: str | None = None,
                out: Path | None = None, dry_run: bool = False) -> list[str] | Path:
    """Run one harness on one checkpoint in a scratch folder beside its output, then copy the
    harness's results JSON to `OODPaths.harness(label, tool, dataset)` atomically (a killed job
    leaves no half file that Snakemake would take as done). `dry_run`: the argv only."""
    out = Path(out or OODPaths(cfg).harness(label, tool, dataset))
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
    which = (ood_settings(cfg).get("evalplus") or {}).get("tests", "plus")
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


def harness_table(cfg: dict, models: dict[str, str] | None = None) -> pd.DataFrame:
    """Parse every harness JSON of the config into `results/{scale}/ood/ood.parquet`."""
    O = OODPaths(cfg)
    rows = []
    for label, tool, ds in harness_outputs(cfg):
        path = O.harness(label, tool, ds)
        if not path.exists():
            raise FileNotFoundError(f"{path}: missing; `snakemake {path}` runs its harness")
        obj = json.loads(path.read_text())
        found = parse_lm_eval(obj, cfg, path) if tool == "lm_eval" else parse_evalplus(obj, ds, cfg, path)
        method, seed = parse_label(label)
        rows += [{**r, "policy": label, "method": method, "seed": seed, "k": 1,
                  "checkpoint": (models or {}).get(label), "scale": cfg["scale"]} for r in found]
    out = _table(rows)
    write_table(out, O.table(), cfg=cfg, extra={"suite": "lm_eval+evalplus"})
    log.info("OOD scores:\n" + out.pivot(index="policy", columns="benchmark", values="score").round(3).to_string())
    return out


def t2_table(df: pd.DataFrame, methods: list[str], basis: str) -> pd.DataFrame:
    """Table 2 from the OOD table: one row per method (mean over seeds; the start policy first when
    present), a column per benchmark (in the table's order) and `Avg` (their unweighted mean), then
    one `Δ vs <method>` row per other method: BASIS minus it, in points of the score's scale."""
    benches = list(dict.fromkeys(df["benchmark"]))
    order = ([START] if START in set(df["method"]) else []) + [m for m in methods if m in set(df["method"])]
    df = df.assign(seed=df["seed"].astype("float").fillna(-1))  # the start policy has no seed
    per_seed = df.pivot_table(index=["method", "seed"], columns="benchmark", values="score")
    per_seed = per_seed.reindex(columns=benches)
    per_seed["Avg"] = per_seed[benches].mean(axis=1)
    mean = per_seed.groupby(level="method").mean().reindex(order)
    sd = per_seed.groupby(level="method").std(ddof=1).reindex(order)
    seeds = per_seed.groupby(level="method").size().reindex(order)
    rows = []
    for m in order:
        rows.append({"row": m, "kind": "method", "seeds": int(seeds[m]),
                     **{c: float(mean.loc[m, c]) for c in benches + ["Avg"]},
                     **{f"{c} sd": (float(sd.loc[m, c]) if seeds[m] > 1 else np.nan) for c in benches + ["Avg"]}})
    if basis in mean.index:
        for m in order:
            if m in (basis, START):
                continue
            rows.append({"row": f"Δ vs {m}", "kind": "delta", "seeds": int(min(seeds[m], seeds[basis])),
                         **{c: float(mean.loc[basis, c] - mean.loc[m, c]) for c in benches + ["Avg"]}})
    return pd.DataFrame(rows)


__all__ = ["EVALPLUS_NAMES", "OODPaths", "START", "T2_METHODS", "build_ood_tasks", "evalplus_argv", "evaluate_ood",
           "find_evalplus_results", "find_lm_eval_results", "harness_outputs", "harness_table", "lm_eval_argv",
           "ood_settings", "parse_evalplus", "parse_label", "parse_lm_eval", "policies", "run_harness",
           "t2_table", "write_ood_tasks"]
