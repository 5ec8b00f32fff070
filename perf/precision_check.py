"""Does bf16 training change the science? GRPO G=16 at small, float32 seeds against bf16 seeds.

Each run's final checkpoint is scored as rule rl_eval scores it (every benchmark: mean@16, greedy,
pass@16); a run's score is its mean over benchmarks. The float32 runs' 95% interval is the
t-interval of their seed means (scipy); the bf16 runs pass when their mean on every metric lies
inside it. Both sets must share the start policy, config and seeds.

    python perf/precision_check.py --fp32 A/results/small --bf16 B/results/small [--method grpo_g16] [--seeds 0 1 2]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

METRICS = {"mean@16": "accuracy", "greedy": "greedy_accuracy", "pass@16": "pass_at_k"}


def scores(results: Path, method: str, seeds: list[int]) -> pd.DataFrame:
    rows = []
    for s in seeds:
        path = results / "rl" / method / f"seed{s}" / "eval.parquet"
        if not path.is_file():
            sys.exit(f"{path}: missing; run `snakemake --cores 2 {path} --configfile configs/small.yaml` first")
        ev = pd.read_parquet(path)
        final = ev[ev["checkpoint"] == "final"]
        rows.append({"seed": s, **{m: float(final[c].mean()) for m, c in METRICS.items()}})
    return pd.DataFrame(rows).set_index("seed")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--fp32", required=True, type=Path)
    p.add_argument("--bf16", required=True, type=Path)
    p.add_argument("--method", default="grpo_g16")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    a = p.parse_args()
    ref, new = scores(a.fp32, a.method, a.seeds), scores(a.bf16, a.method, a.seeds)
    ok = True
    print(f"{a.method}, final checkpoints, seeds {a.seeds}; fp32 {a.fp32}, bf16 {a.bf16}")
    print("| metric | fp32 seeds | fp32 mean [95% CI] | bf16 seeds | bf16 mean | inside |")
    print("|---|---|---|---|---|---|")
    for m in METRICS:
        x = ref[m].to_numpy()
        half = stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x))
        lo, hi = x.mean() - half, x.mean() + half
        y = new[m].mean()
        inside = lo <= y <= hi
        ok &= inside
        print(f"| {m} | {', '.join(f'{v:.3f}' for v in x)} | {x.mean():.3f} [{lo:.3f}, {hi:.3f}] | "
              f"{', '.join(f'{v:.3f}' for v in new[m])} | {y:.3f} | {'yes' if inside else 'NO'} |")
    print("bf16 inside the fp32 interval on every metric" if ok else "bf16 OUTSIDE the fp32 interval")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
