"""What the small RL stage (`snakemake --cores 2 rl --configfile configs/small.yaml`) costs on 2 cores,
from measured per-step times of every distinct run and the job and thread layout it runs with.

The stage's jobs come from Snakemake's own dry run (no job is guessed): pre-training m, the
reference cache, the start's evaluation, the learning-rate tuning runs, every RL run (methods that
train the same run counted once) and its evaluation. Every distinct method is measured: its
per-step time over `--steps` steps after `--warmup` (perf/rl_step.py's worker, critic warm-up
included), two at a time at 1 thread each (the DAG's layout: `--cores 2`, rules at 1 thread,
so each measurement has a neighbour, as in the stage). A checkpoint's evaluation is measured
once (every benchmark at the scale's protocol); the one-off jobs (pre-training, the reference
cache, the start's evaluation) are read from `--logs` when they ran there, else given with
`--fixed rule=seconds`. The wall time is a two-lane list schedule of the jobs in dependency
order, longest first (Snakemake's greedy scheduler runs whatever is ready).

    python perf/small_stage.py --results results/small [--logs results/small/logs] [--tree DIR]
        [--steps 3] [--warmup 2] [--json out.json]
"""
from __future__ import annotations

import argparse
import heapq
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def dry_run(config: str) -> dict[str, int]:
    """Job counts by rule of the small `rl` target, from Snakemake's dry run in an empty folder."""
    with tempfile.TemporaryDirectory() as d:
        out = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "2", "--configfile", config,
                              "--directory", d, "-s", str(ROOT / "Snakefile"), "rl"],
                             cwd=ROOT, capture_output=True, text=True)
    if out.returncode:
        sys.exit(f"dry run failed:\n{out.stderr[-2000:]}")
    stats = out.stdout.split("Job stats:")[1].split("total")[0]
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", stats, re.M)}


def measure(results: Path, methods: list[str], steps: int, warmup: int, eval_once: bool, tree: Path,
            config: str) -> dict:
    """Per-step times of each method, two workers at a time, 1 thread each, with `tree`'s code."""
    def one(method: str, with_eval: bool) -> dict:
        cmd = [sys.executable, str(ROOT / "perf" / "rl_step.py"), "--worker", "--results", str(results),
               "--method", method, "--steps", str(steps), "--warmup", str(warmup), "--threads", "1",
               "--config", config]
        env = {**os.environ, "PYTHONPATH": str(tree / "src"), "OMP_NUM_THREADS": "1"}
        p = subprocess.run(cmd + ([] if with_eval else ["--no-eval"]), cwd=tree, env=env,
                           capture_output=True, text=True)
        if p.returncode:
            sys.exit(f"{method}: worker failed:\n{p.stderr[-2000:]}")
        r = json.loads(p.stdout.strip().splitlines()[-1])
        print(f"{method}: {statistics.median(r['per_step_s']):.2f} s a step"
              + (f", critic warm-up {r['critic_warmup_s']:.0f} s" if r.get("critic_warmup_s") else "")
              + (f", eval {r['eval_checkpoint_s']:.0f} s a checkpoint" if r.get("eval_checkpoint_s") else ""),
              flush=True)
        return r
    with ThreadPoolExecutor(2) as pool:
        futures = {m: pool.submit(one, m, eval_once and i == 0) for i, m in enumerate(methods)}
        return {m: f.result() for m, f in futures.items()}


def missing_inputs(cfg: dict, results: Path, methods: list[str], config: str) -> None:
    """Stop before measuring (minutes) when a measured run lacks a file it reads (a BASIS run
    its reference cache, V0's prior its model), naming them and how to make them."""
    from sparserl.methods.run import resolve_run
    cfg = {**cfg, "results_dir": str(results.parent), "rl": {**cfg["rl"], "lr_tuning": {"enabled": False}}}
    missing = sorted({f for m in methods for f in resolve_run(cfg, m, 0).inputs if not Path(f).exists()})
    if missing:
        sys.exit(f"{results}: the runs to measure read {len(missing)} missing file(s): {' '.join(missing)}; "
                 f"make them first: snakemake --cores 2 {' '.join(missing)} --configfile {config}")


def log_seconds(logs: Path, pattern: str) -> float | None:
    """A job's wall time from the first and last timestamps of its log."""
    times = []
    for f in sorted(logs.glob(pattern)):
        stamps = re.findall(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)", f.read_text(errors="replace"), re.M)
        if len(stamps) >= 2:
            t = [time.mktime(time.strptime(s, "%Y-%m-%d %H:%M:%S")) for s in (stamps[0], stamps[-1])]
            times.append(t[1] - t[0])
    return max(times) if times else None


def schedule(jobs: list[tuple[str, float, int]], lanes: int = 2) -> float:
    """Makespan of jobs (name, seconds, level): each level starts when the one before it is done
    (pre-training, then what reads it, ...), longest first onto the lane free first."""
    end = 0.0
    for level in sorted({lv for _, _, lv in jobs}):
        free = [end] * lanes
        heapq.heapify(free)
        for _, sec, _ in sorted((j for j in jobs if j[2] == level), key=lambda j: -j[1]):
            heapq.heappush(free, heapq.heappop(free) + sec)
        end = max(free)
    return end


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--results", default="results/small", type=Path)
    p.add_argument("--config", default="configs/small.yaml")
    p.add_argument("--logs", type=Path, help="a results/small/logs folder the one-off jobs ran in")
    p.add_argument("--fixed", nargs="*", default=[], help="rule=seconds for one-off jobs not in --logs")
    p.add_argument("--tree", type=Path, default=ROOT,
                   help="measure another checkout's code and configs (e.g. `git worktree add /tmp/b <commit>`)")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--json")
    a = p.parse_args()
    from sparserl.core.config import load_config
    from sparserl.methods.spec import load_method, run_owners, snapshot_steps, total_steps
    cfg = load_config(a.config)
    rl = cfg["rl"]
    counts = dry_run(a.config)
    owners = sorted(set(run_owners(rl["methods"], rl["rollouts_per_step"]).values()))
    tuning = rl.get("lr_tuning", {})
    from sparserl.engines import lr_tuning as lrt
    tuners = {st: ms[0] for st, ms in lrt.setting_methods(cfg).items()} if tuning.get("enabled") else {}
    reps = sorted(set(tuners.values()))
    methods = sorted(set(owners) | set(reps))
    missing_inputs(cfg, a.results.resolve(), methods, a.config)
    measured = measure(a.results.resolve(), methods, a.steps, a.warmup, True, a.tree.resolve(), a.config)
    step_s = {m: statistics.median(r["per_step_s"]) for m, r in measured.items()}
    eval_s = next(r["eval_checkpoint_s"] for r in measured.values() if r.get("eval_checkpoint_s"))
    # once a run: the critic's warm-up, and what its first steps cost beyond a step (compile)
    warm = {m: (r.get("critic_warmup_s") or 0.0) + r.get("init_s", 0.0) + r.get("import_s", 0.0)
            + sum(max(0.0, w - step_s[m]) for w in r.get("warmup_steps_s", [])) for m, r in measured.items()}
    fixed = dict(kv.split("=") for kv in a.fixed)
    one_off = {}
    for rule, pattern in (("pretrain_policy", "pretrain_m.log"), ("reference_cache", "reference_cache*.log"),
                          ("evaluate", "evaluate_m*.log")):
        sec = float(fixed[rule]) if rule in fixed else (log_seconds(a.logs, pattern) if a.logs else None)
        one_off[rule] = sec if sec is not None else 0.0
    jobs = [("pretrain_policy", one_off["pretrain_policy"], 0), ("reference_cache", one_off["reference_cache"], 1),
            ("evaluate", one_off["evaluate"], 1)]
    vsize = tuning.get("validation_size", 256)
    bench = sum(b["size"] for b in cfg["tasks"]["benchmarks"])
    for st, rep in tuners.items():
        spec = load_method(rep)
        for lr in tuning.get("grid", []):
            for seed in tuning.get("seeds", []):
                # the setting's steps, then a validation evaluation (validation_size problems, not
                # the benchmarks) at each of rl.lr_tuning.checkpoints
                jobs.append((f"lr_tune {st} lr{lr} s{seed}", total_steps(rl, spec) * step_s[rep] + warm[rep]
                             + eval_s * vsize / bench * len(lrt.checkpoint_steps(cfg, spec)), 1))
    rows = []
    for m in owners:
        spec = load_method(m)
        n = total_steps(rl, spec)
        train = n * step_s[m] + warm[m]
        checkpoints = len(snapshot_steps(rl, spec)) + 1
        for seed in rl["seeds"]:
            jobs.append((f"rl_train {m} s{seed}", train, 2))
            jobs.append((f"rl_eval {m} s{seed}", eval_s * checkpoints, 3))
        rows.append((m, n, step_s[m], train, eval_s * checkpoints))
    assert sum(1 for j in jobs if j[0].startswith("rl_train")) == counts.get("rl_train"), (counts, len(owners))
    assert sum(1 for j in jobs if j[0].startswith("lr_tune")) == counts.get("lr_tune_run", 0)
    total = sum(s for _, s, _ in jobs)
    wall = schedule(jobs)
    lines = ["| run (method) | steps | s a step | train s | eval s |", "|---|---|---|---|---|"]
    lines += [f"| {m} | {n} | {s:.2f} | {t:.0f} | {e:.0f} |" for m, n, s, t, e in rows]
    lines.append(f"\njobs: {json.dumps(counts)}")
    lines.append("one-off jobs (s): " + ", ".join(f"{k} {v:.0f}" for k, v in one_off.items()))
    lines.append(f"evaluation of one checkpoint: {eval_s:.0f} s")
    lines.append(f"job seconds {total:.0f}; estimated wall time on 2 cores, 2 jobs x 1 thread: "
                 f"{wall / 3600:.2f} h")
    text = "\n".join(lines)
    print(text)
    if a.json:
        Path(a.json).write_text(json.dumps({"measured": measured, "jobs": jobs, "wall_s": wall, "report": text},
                                           indent=1))


if __name__ == "__main__":
    main()
