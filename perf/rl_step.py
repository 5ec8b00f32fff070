"""One small-scale RL step, each part timed, side by side: this tree, a pinned commit, TRL.

The workload is configs/small.yaml's: GRPO G=16 (`--method`), 256 rollouts a step from policy m,
world 2.0 answers, the scale's mini-batches. Variants, each in its own process (its own torch
threads and its own `sparserl`), run in interleaved rounds so the machine's drift hits them alike:

- `now`: the working tree's code and configs/small.yaml;
- `before`: the same at `--baseline` (a pinned commit; `git archive` of its src/ and configs/);
- `trl`, `trl-bf16`: TRL's `GRPOTrainer` on the same policy and batch shape (perf/rl_step_trl.py),
  in float32 and under its bf16 autocast.

Parts of our step (seconds a step, mean over `--steps` steps after `--warmup`):

    generation       the rollout engine (`backend.generate`)
    reward           the verifier
    sample_other     the sampler's rest (prompt draw, batch assembly)
    advantages       the estimator (critic methods: the critic's forward too)
    critic           Le Critique's value update (critic methods)
    logprob_nograd   forwards without gradient: pi_old recomputed under bf16, the KL reference
    forward          training forwards (log-probs, entropy)
    backward         `backward()`
    optimizer        gradient clipping and AdamW
    update_other     the loss, pi_old gathering, bookkeeping

and `eval_checkpoint`: evaluating one checkpoint as rule rl_eval does (every benchmark at the
scale's protocol), once per variant. Each part is set against its bound: forward and backward
against the FLOPs they need (matmuls; the backward twice the forward) at the matmul speed
measured here on the model's own shapes (float32, or bf16 where the variant trains in bf16),
generation against its forward FLOPs, the optimiser against the bytes AdamW moves at the
measured copy bandwidth. Reward and bookkeeping have no hardware bound; their share is reported.

    python perf/rl_step.py --results results/small [--baseline 006d22f] [--threads 1] \
        [--steps 4] [--warmup 1] [--rounds 2] [--no-trl] [--no-eval] [--beside CMD] [--json out.json]

`--results` is a scale's results folder holding policies/m, tasks/train_pool.parquet and
tasks/benchmarks/ (`snakemake --cores 2 results/small/policies/m results/small/tasks/train_pool.parquet
--configfile configs/small.yaml`: targets first, as --configfile takes every word after it).
Measure on an idle machine: beside another job, a step at 2 threads ran 35x slower
(docs/performance.md).
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------- worker (ours)
def worker(args) -> dict:
    """Run in a variant's process: PYTHONPATH holds that variant's src/, cwd its tree."""
    t_import = time.perf_counter()
    import numpy as np
    import torch
    import sparserl.engines.local.trainer as tr
    from sparserl.core.config import load_config
    from sparserl.grading.verifier import open_verifier
    import_s = time.perf_counter() - t_import

    results = Path(args.results).resolve()
    cfg = load_config(str(Path.cwd() / (args.config or f"configs/{results.name}.yaml")))
    cfg["results_dir"] = str(results.parent)
    cfg["rl"]["lr_tuning"] = {"enabled": False}  # the step, not the tuning: rl.lr as it is
    parts: dict = defaultdict(float)
    counts: dict = defaultdict(float)

    def timed(name, fn):
        def wrap(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                parts[name] += time.perf_counter() - t0
        return wrap

    def token_logprobs(model, seqs, plens, pad, with_entropy=False, **kw):
        grad = torch.is_grad_enabled()
        if kw.get("share_prompts"):  # the tokens the forward runs: each distinct prompt once
            prompts = {tuple(x[:p]) for x, p in zip(seqs, plens)}
            resp = [len(x) - p for x, p in zip(seqs, plens)]
            padded = len(prompts) * max(map(len, prompts)) + len(seqs) * max(resp)
            real = sum(map(len, prompts)) + sum(resp)
        else:
            padded, real = len(seqs) * max(map(len, seqs)), sum(map(len, seqs))
        counts["train_tokens_padded" if grad else "nograd_tokens_padded"] += padded
        counts["train_tokens" if grad else "nograd_tokens"] += real
        return timed("forward" if grad else "logprob_nograd", orig_lp)(model, seqs, plens, pad, with_entropy, **kw)

    orig_lp = tr.token_logprobs
    tr.token_logprobs = token_logprobs
    orig_backward = torch.Tensor.backward
    torch.Tensor.backward = timed("backward", orig_backward)
    orig_clip = torch.nn.utils.clip_grad_norm_
    torch.nn.utils.clip_grad_norm_ = timed("optimizer", orig_clip)

    t0 = time.perf_counter()
    try:  # a trainer since c185495 takes the resolved run; the baseline's took (method, seed)
        from sparserl.methods.run import resolve_run
    except ImportError:
        t = tr.Trainer(cfg, args.method, 0, threads=args.threads)
    else:
        t = tr.Trainer(cfg, resolve_run(cfg, args.method, 0), threads=args.threads)
    init_s = time.perf_counter() - t0
    t.opt.step = timed("optimizer", t.opt.step)
    gen = t.backend.generate

    def generate(prompts, n, params, seed):
        b = timed("generation", gen)(prompts, n, params, seed)
        counts["rollouts"] += len(b)
        counts["response_tokens"] += int(b.response_lengths().sum())
        counts["prompt_tokens_unique"] += sum(len(p) for p in b.prompt_ids)
        return b
    t.backend.generate = generate
    steps, warm_steps = [], []
    warmup_s = 0.0
    with open_verifier(cfg) as t._ver:
        t._ver.score = timed("reward", t._ver.score)
        if getattr(t, "critic", None) is not None:  # Le Critique's critic warms up before step 1
            t0 = time.perf_counter()
            t.model.eval()
            t.warmup()
            warmup_s = time.perf_counter() - t0
        for i in range(args.warmup + args.steps):
            if i == args.warmup:
                parts.clear()
                counts.clear()
            t0 = time.perf_counter()
            info: dict = {}
            t.model.eval()
            s = timed("sample", t.sampler.sample)(info)
            if getattr(t, "critic", None) is None:
                adv = timed("advantages", t.advantages)(s, info)
            else:  # token advantages from the critic, then its value update
                adv, payload = timed("advantages", t.critic_advantages)(s, info)
                timed("critic", t.train_critic)(payload, info)
            timed("update", t.update)(s.batch, adv, info)
            t.step += 1
            (steps if i >= args.warmup else warm_steps).append(time.perf_counter() - t0)
        n = len(steps)
        out = {k: v / n for k, v in parts.items()}
        out["sample_other"] = out.pop("sample") - out.get("generation", 0) - out.get("reward", 0)
        out["update_other"] = out.pop("update") - sum(out.get(k, 0) for k in
                                                      ("forward", "backward", "optimizer", "logprob_nograd"))
        eval_s = None
        if args.eval:
            from sparserl.evaluation import evaluate as ev
            kw = {}
            if hasattr(ev, "benchmark_tables"):  # since ecf1150 the caller passes them; before, it read the config's
                from sparserl.core.paths import Paths
                P = Paths(cfg)
                kw["benchmarks"] = ev.benchmark_tables([P.benchmark(b) for b in P.benchmark_names()])
            with tempfile.TemporaryDirectory() as d:
                t._save_hf(Path(d) / "ck")
                t0 = time.perf_counter()
                ev.evaluate_checkpoint(cfg, str(Path(d) / "ck"), Path(d) / "ev.parquet", "perf",
                                       threads=args.threads, verifier=t._ver, **kw)
                eval_s = time.perf_counter() - t0
    return {"impl": args.variant, "method": args.method, "per_step_s": steps, "critic_warmup_s": warmup_s,
            "warmup_steps_s": warm_steps, "init_s": init_s, "compile": bool(cfg["rl"].get("compile")), "parts_s": out,
            "counts": {k: v / n for k, v in counts.items()}, "import_s": import_s, "eval_checkpoint_s": eval_s,
            # what the matmuls ran in: rl.precision bf16 stays float32 on a CPU without bf16 kernels
            "precision": "bf16" if getattr(t.model, "matmul_dtype", None) is not None else "fp32",
            "length_chunks": cfg["rl"].get("length_chunks", 1),
            "threads": torch.get_num_threads(), "model": dict(t.model.config)}


# ----------------------------------------------------------------------------- bounds
def machine_speeds(model_cfg: dict, rows: int, threads: int) -> dict:
    """Measured matmul GFLOP/s on the model's projection shapes (float32 and bf16) at `rows`
    rows, and copy bandwidth (GB/s), in this process at `threads` threads."""
    import torch
    torch.set_num_threads(threads)
    H, F_ = model_cfg["hidden_size"], model_cfg["intermediate_size"]
    nh, kvh = model_cfg["num_attention_heads"], model_cfg["num_key_value_heads"]
    hd = model_cfg.get("head_dim") or H // nh
    shapes = [(H, nh * hd), (H, kvh * hd), (H, kvh * hd), (nh * hd, H), (H, F_), (H, F_), (F_, H)]
    out = {}
    for name, dt in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        total_flop, total_s = 0.0, 0.0
        for k, n in shapes:
            a, w = torch.randn(rows, k, dtype=dt), torch.randn(n, k, dtype=dt)
            torch.nn.functional.linear(a, w)
            best = min(_time(lambda: torch.nn.functional.linear(a, w)) for _ in range(10))
            total_flop += 2 * rows * k * n
            total_s += best
        out[f"matmul_gflops_{name}"] = total_flop / total_s / 1e9
    x = torch.empty(64 * 2**20 // 4)
    y = torch.empty_like(x)
    best = min(_time(lambda: y.copy_(x)) for _ in range(10))
    out["copy_gbps"] = 2 * x.numel() * 4 / best / 1e9
    return out


def _time(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def bounds(res: dict, speeds: dict) -> dict:
    """Seconds a step each part would take at the hardware's bound (None: no bound)."""
    c, m = res["counts"], res["model"]
    H, F_, V, nl = m["hidden_size"], m["intermediate_size"], m["vocab_size"], m["num_hidden_layers"]
    nh, kvh = m["num_attention_heads"], m["num_key_value_heads"]
    hd = m.get("head_dim") or H // nh
    per_token = 2 * (nl * (H * (nh + 2 * kvh) * hd + nh * hd * H + 3 * H * F_) + H * V)  # FLOPs
    gflops = speeds["matmul_gflops_bf16" if res.get("precision") == "bf16" else "matmul_gflops_fp32"] * 1e9
    fp32 = speeds["matmul_gflops_fp32"] * 1e9
    params = nl * (H * (nh + 2 * kvh) * hd + nh * hd * H + 3 * H * F_ + 2 * H + 2 * hd) + V * H * 2 + H
    return {"forward": c.get("train_tokens", 0) * per_token / gflops,
            "backward": 2 * c.get("train_tokens", 0) * per_token / gflops,
            "logprob_nograd": c.get("nograd_tokens", 0) * per_token / gflops,
            "generation": (c.get("prompt_tokens_unique", 0) + c.get("response_tokens", 0)) * per_token / fp32,
            "optimizer": 28 * params / (speeds["copy_gbps"] * 1e9)}


# ----------------------------------------------------------------------------- driver
def variant_tree(name: str, commit: str | None, tmp: Path) -> Path:
    if commit is None:
        return ROOT
    out = tmp / name
    out.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "src", "configs"],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive, check=True)
    return out


@contextlib.contextmanager
def beside(cmd: str | None):
    """`cmd` running (and rerun when it ends) in the background for the block's duration."""
    if not cmd:
        yield
        return
    loop = subprocess.Popen(["bash", "-c", f"while true; do {cmd}; done"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    time.sleep(3)  # let it reach its work
    try:
        yield
    finally:
        os.killpg(loop.pid, 9)
        loop.wait()


def run_variant(name: str, tree: Path, args) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree / "src"), "OMP_NUM_THREADS": str(args.threads)}
    if name.startswith("trl"):
        results = Path(args.results).resolve()
        cmd = [sys.executable, str(ROOT / "perf" / "rl_step_trl.py"), "--policy", str(results / "policies" / "m"),
               "--pool", str(results / "tasks" / "train_pool.parquet"), "--steps", str(args.steps),
               "--warmup", str(args.warmup), "--threads", str(args.threads)] + (["--bf16"] if name == "trl-bf16" else [])
    else:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--variant", name, "--results",
               str(Path(args.results).resolve()), "--method", args.method, "--steps", str(args.steps),
               "--warmup", str(args.warmup), "--threads", str(args.threads)] + ([] if args.eval else ["--no-eval"]) \
            + (["--config", args.config] if args.config else [])
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    if p.returncode:
        sys.exit(f"variant {name} failed (rc {p.returncode}):\n{p.stderr[-3000:]}")
    res = json.loads(p.stdout.strip().splitlines()[-1])
    res["process_s"] = time.perf_counter() - t0
    return res


def report(runs: dict, speeds: dict) -> str:
    lines = []
    med = {name: statistics.median(s for r in rs for s in r["per_step_s"]) for name, rs in runs.items()}
    for name, rs in runs.items():
        r = rs[-1]
        lines.append(f"\n## {name}: {med[name]:.3f} s a step (median of {sum(len(x['per_step_s']) for x in rs)} "
                     f"steps, {len(rs)} rounds; min {min(s for x in rs for s in x['per_step_s']):.3f}), "
                     f"{r.get('threads')} threads, precision {r.get('precision', 'fp32')}, "
                     f"length_chunks {r.get('length_chunks', '-')}, compile {r.get('compile', False)}, "
                     f"imports {r.get('import_s', 0):.1f} s"
                     + (f", warm-up steps {', '.join(f'{x:.1f}' for x in r['warmup_steps_s'])} s"
                        if r.get("warmup_steps_s") else ""))
        parts = defaultdict(list)
        for x in rs:
            for k, v in x["parts_s"].items():
                parts[k].append(v)
        b = bounds(r, speeds) if "counts" in r else {}
        lines.append("| part | s a step | share | bound s | bound / time |")
        lines.append("|---|---|---|---|---|")
        total = sum(statistics.median(v) for v in parts.values())
        for k, v in sorted(parts.items(), key=lambda kv: -statistics.median(kv[1])):
            t = statistics.median(v)
            bk = b.get(k)
            lines.append(f"| {k} | {t:.3f} | {t / total:.0%} | " + (f"{bk:.3f} | {bk / t:.0%} |" if bk else "- | - |"))
        ev = [x["eval_checkpoint_s"] for x in rs if x.get("eval_checkpoint_s")]
        if ev:
            lines.append(f"eval_checkpoint: {ev[0]:.1f} s (one checkpoint, every benchmark at the scale's protocol)")
        if r.get("unmatched"):
            lines.append("unmatched: " + "; ".join(r["unmatched"]))
    if "before" in med and "now" in med:
        lines.append(f"\nnow vs before: {med['before'] / med['now']:.2f}x faster a step")
    for trl in ("trl", "trl-bf16"):
        if trl in med and "now" in med:
            lines.append(f"now vs {trl}: {med[trl] / med['now']:.2f}x faster a step")
    lines.append(f"\nmachine: {json.dumps({k: round(v, 1) for k, v in speeds.items()})}")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--results", default="results/small")
    p.add_argument("--config", help="the scale's config, in each variant's tree (default: "
                   "configs/<the results folder's name>.yaml)")
    p.add_argument("--method", default="grpo_g16")
    p.add_argument("--baseline", default="006d22f", help="the pinned commit `before` runs (none: skip)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--no-trl", dest="trl", action="store_false")
    p.add_argument("--no-eval", dest="eval", action="store_false")
    p.add_argument("--beside", help="a shell command kept running beside every measurement (another job, "
                   "a test run), restarted when it ends: how the step fares when the cores are shared")
    p.add_argument("--json")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--variant", default="now", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        print(json.dumps(worker(args)))
        return
    res = Path(args.results)
    # the checkpoint evaluation reads the benchmarks after the measured steps (rule make_tasks
    # writes them with the pool): check them first too
    need = ("policies/m/config.json", "tasks/train_pool.parquet") + (("tasks/benchmarks",) if args.eval else ())
    missing = [x for x in need if not (res / x).exists()]
    if missing:
        sys.exit(f"{res}: no {', '.join(missing)}; build them first: snakemake --cores 2 {res}/policies/m "
                 f"{res}/tasks/train_pool.parquet --configfile configs/{res.name}.yaml")
    if args.trl and importlib.util.find_spec("trl") is None:  # before anything is measured
        sys.exit("perf/rl_step.py: TRL is not installed: pip install -e '.[perf]', or pass --no-trl")
    variants = [("now", None)] + ([("before", args.baseline)] if args.baseline != "none" else [])
    runs: dict = defaultdict(list)
    with tempfile.TemporaryDirectory() as tmp, beside(args.beside):
        trees = {name: variant_tree(name, commit, Path(tmp)) for name, commit in variants}
        if args.trl:  # TRL in float32 and under its bf16 autocast
            trees["trl"] = trees["trl-bf16"] = ROOT
        for rnd in range(args.rounds):
            for name, tree in trees.items():
                # evaluation once per variant (first round): a minute each, and it does not drift
                sub = argparse.Namespace(**{**vars(args), "eval": args.eval and rnd == 0})
                r = run_variant(name, tree, sub)
                runs[name].append(r)
                print(f"round {rnd + 1} {name}: {statistics.median(r['per_step_s']):.3f} s a step", flush=True)
    model = next(r["model"] for rs in runs.values() for r in rs if "model" in r)
    rows = int(next(r["counts"]["train_tokens_padded"] for r in runs["now"]) // 4)  # a micro-batch's
    speeds = machine_speeds(model, max(rows, 256), args.threads)
    text = report(runs, speeds)
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": runs, "speeds": speeds, "report": text}, indent=1))


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
