"""After training: evaluate each run's checkpoints, and one table of every run."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from sparserl.core.artifacts import read_table, write_table
from sparserl.evaluation import evaluate_checkpoint
from sparserl.core.paths import Paths
from sparserl.methods.spec import load_method, snapshot_steps


def run_checkpoints(cfg: dict, method: str, seed: int) -> list[tuple[str, Path]]:
    """(label, dir) of the run's intermediate checkpoints (those its config asks for) and the
    final one, in training order; wherever the run's engine saved them (`Paths.run`)."""
    run = Paths(cfg).run(method, seed)
    steps = snapshot_steps(cfg["rl"], load_method(method))
    out = [(run.checkpoint_label(s), run.checkpoint(s)) for s in steps] + [("final", run.final)]
    missing = [str(c) for _, c in out if not c.is_dir()]
    if missing:
        cmd = "rl-train" if run.engine == "local" else "openrlhf-launch"
        raise FileNotFoundError(f"{method} seed {seed}: checkpoints {missing} are missing; rerun "
                                f"`sparserl {cmd} --method {method} --seed {seed}` with this config")
    return out


def evaluate_run(cfg: dict, method: str, seed: int, threads: int = 1) -> pd.DataFrame:
    run = Paths(cfg).run(method, seed)
    tables = []
    for label, ck in run_checkpoints(cfg, method, seed):
        t = evaluate_checkpoint(cfg, str(ck), run.eval_dir / f"{label}.parquet",
                                f"{method}/seed{seed}/{label}", threads=threads,
                                extra_cols={"method": method, "seed": seed, "checkpoint": label})
        tables.append(t)
    out = pd.concat(tables, ignore_index=True)
    write_table(out, run.eval, cfg=cfg, extra={"method": method, "seed": seed})
    return out


def summarize_runs(cfg: dict) -> pd.DataFrame:
    """Per method: final reward and accuracy (mean over seeds, with the spread) and rollouts used."""
    P = Paths(cfg)
    rl = cfg["rl"]
    rows = []
    for method in rl["methods"]:
        for seed in rl["seeds"]:
            run = P.run(method, seed)
            met = read_table(run.metrics)
            ev = read_table(run.eval)
            fin = ev[ev["checkpoint"] == "final"]
            tail = met.tail(max(1, len(met) // 5))
            rows.append({"method": method, "seed": seed, "steps": int(met["step"].max()),
                         "rollouts_total": int(met["rollouts_total"].iloc[-1]),
                         "rollouts_per_prompt_mean": float(met["rollouts_per_prompt_mean"].mean()),
                         "train_reward_last20pct": float(tail["reward_mean"].mean()),
                         "eval_accuracy_final": float(fin["accuracy"].mean()),
                         "wall_time_s": float(met["wall_time_s"].sum()),
                         **{f"eval_{b}": float(a) for b, a in zip(fin["benchmark"], fin["accuracy"])}})
    runs = pd.DataFrame(rows)
    write_table(runs, P.rl_runs(), cfg=cfg)
    agg = runs.groupby("method").agg(
        seeds=("seed", "count"), rollouts_total=("rollouts_total", "mean"),
        rollouts_per_prompt=("rollouts_per_prompt_mean", "mean"),
        train_reward=("train_reward_last20pct", "mean"),
        eval_accuracy=("eval_accuracy_final", "mean"),
        eval_accuracy_sd=("eval_accuracy_final", lambda x: float(np.std(x, ddof=1)) if len(x) > 1 else 0.0),
        wall_time_s=("wall_time_s", "mean")).reset_index()
    write_table(agg, P.rl_summary(), cfg=cfg)
    with pd.option_context("display.width", 160):
        print(agg.round(3).to_string(index=False))
    print(f"rl summary -> {P.rl_summary()}")
    return agg
