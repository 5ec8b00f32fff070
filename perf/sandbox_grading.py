"""CodeIO's grading cost before and after the sandbox's one-process-per-program design, side by
side in one run: the sandbox module at a pinned commit (every program of a batch in one shared
bwrap'd interpreter) against the current one (one process per program, so no program can touch
another's grade; docs/sandbox.md).

Workload: a batch of `--calls` CodeIO calls over `--programs` distinct reference programs (a step
of 64 rollouts at k = 4 rollouts a problem is 16 programs), the tiny templates' size of program.

    python perf/sandbox_grading.py [--before 3b03b3a] [--calls 64] [--programs 1 8 16 64] [--repeats 10]

Prints the median and min milliseconds per batch for each (design, programs) and the ratio.
Both run at the strong level when bwrap is present (`--weak` for the weak level).
"""
from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def _module_at(commit: str):
    src = subprocess.run(["git", "-C", str(ROOT), "show", f"{commit}:src/sparserl/envs/sandbox.py"],
                         check=True, capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp(prefix="sparserl-perf-")) / "sandbox_before.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("sandbox_before", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def _batch(mod, n_calls: int, n_programs: int):
    progs = [f"def f(x):\n    return (x * {3 + p} + {p}) % {7 + p}\n" for p in range(n_programs)]
    return [mod.Call(progs[i % n_programs], "f", (i,)) for i in range(n_calls)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", default="3b03b3a", help="the commit of the shared-interpreter design")
    ap.add_argument("--calls", type=int, default=64)
    ap.add_argument("--programs", type=int, nargs="+", default=[1, 8, 16, 64])
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--weak", action="store_true", help="the weak level instead of the strong one")
    args = ap.parse_args(argv)
    from sparserl.envs import sandbox as after
    before = _module_at(args.before)
    iso = "weak" if args.weak else "strong"
    designs = {f"before ({args.before})": before, "after (this tree)": after}
    for name, mod in designs.items():
        ok, why = (True, "") if args.weak else mod.strong_isolation()
        if not ok:
            print(f"{name}: strong isolation unavailable ({why}); use --weak")
            return 1
    print(f"{args.calls} calls a batch, {iso} level, median (min) ms of {args.repeats} batches")
    print(f"{'programs':>8} | " + " | ".join(f"{n:>24}" for n in designs) + " | after/before")
    for n_prog in args.programs:
        times = {n: [] for n in designs}
        for _ in range(args.repeats):  # interleaved, so load drifts hit both alike
            for name, mod in designs.items():
                calls = _batch(mod, args.calls, n_prog)
                lim = mod.Limits(isolation=iso)
                t0 = time.perf_counter()
                res = mod.run_jobs(calls, time_limit_s=1.0, limits=lim)
                times[name].append(1000 * (time.perf_counter() - t0))
                assert all(r.ok for r in res), [r.error for r in res if not r.ok][:3]
        med = {n: statistics.median(t) for n, t in times.items()}
        cells = [f"{med[n]:9.1f} ({min(times[n]):7.1f})" for n in designs]
        ratio = med["after (this tree)"] / med[f"before ({args.before})"]
        print(f"{n_prog:>8} | " + " | ".join(f"{c:>24}" for c in cells) + f" | {ratio:11.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
