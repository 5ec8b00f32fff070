"""Synthetic RL run tables for the head-to-head (tests/studies/test_head_to_head.py, tests/figures/test_figures.py):
each run's metrics.parquet, eval.parquet and per-problem tables in the layout `sparserl rl-train`
and `sparserl rl-eval` write, and the start policy's evaluation, with per-problem scores whose
differences between methods the test chooses."""
from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd
import yaml

from sparserl.core.artifacts import write_table
from sparserl.core.config import start_seed
from sparserl.core.paths import Paths
from sparserl.methods.run import method_run
from sparserl.methods.spec import load_method, run_owners, snapshot_steps, total_steps

BENCHMARKS = (("b1", 40), ("b2", 60))


def problems(benchmarks=BENCHMARKS) -> pd.DataFrame:
    rows = [{"benchmark": b, "id": f"{b}/{i}"} for b, n in benchmarks for i in range(n)]
    df = pd.DataFrame(rows)
    # a start score per problem on a 1/16 grid, as mean@16 gives
    df["p0"] = np.random.default_rng(7).integers(0, 17, len(df)) / 16
    return df


def _sharpening(pp: pd.DataFrame) -> pd.DataFrame:
    """The per-problem `pass` and `greedy` columns of `sparserl rl-eval`: greedy right when p > 1/2."""
    return pp.assign(**{"pass": (pp["p"] > 0).astype(float), "greedy": (pp["p"] > 0.5).astype(float)})


def _sharpening_row(d: pd.DataFrame) -> dict:
    return {"pass_metric": "pass@16", "pass_at_k": float(d["pass"].mean()), "greedy_accuracy": float(d["greedy"].mean())}


def default_lift(method: str, seed: int, methods: list[str]) -> float:
    """A final-checkpoint lift of the score: methods apart by 0.05 in list order, seeds by 0.01."""
    return 0.05 * (len(methods) - methods.index(method)) + 0.01 * seed


def write_runs(cfg: dict, lift: Callable[[str, int], float] | None = None,
               scores: Callable[[str, int, np.ndarray], np.ndarray] | None = None,
               benchmarks=BENCHMARKS) -> pd.DataFrame:
    """Write every run of cfg's rl.methods x rl.seeds (aliases once, in their owner's dir). A
    checkpoint at fraction f of the run scores clip(p0 + f * lift(method, seed)), or
    `scores(method, seed, p0)` at the final checkpoint when given. Returns the problems."""
    rl = cfg["rl"]
    methods = list(rl["methods"])
    lift = lift or (lambda m, s: default_lift(m, s, methods))
    probs = problems(benchmarks)
    p0 = probs["p0"].to_numpy()
    owners = run_owners(methods)
    P = Paths(cfg)
    start_id = start_seed(cfg)  # rl-eval records the start policy's pre-training seed
    for m in methods:
        if owners[m] != m:
            continue
        spec = load_method(m)
        n = total_steps(rl, spec)
        for seed in rl["seeds"]:
            run = method_run(cfg, m, seed)
            steps = np.arange(1, n + 1)
            per = rl["rollouts_per_step"]
            write_table(pd.DataFrame({"step": steps, "reward_mean": 0.3 + 0.01 * steps,
                                      "rollouts_total": per * steps, "rollouts_trained": per,
                                      "rollouts_per_prompt_mean": float(spec.group_size),
                                      "wall_time_s": 0.25 * (1 + methods.index(m)),
                                      "entropy": 1.0 - 0.5 * steps / n}), run.metrics, cfg=cfg)
            rows = []
            for label, step in [(run.checkpoint_label(s), s) for s in snapshot_steps(rl, spec)] + [("final", n)]:
                if label == "final" and scores is not None:
                    p = np.asarray(scores(m, seed, p0), dtype=float)
                else:
                    p = np.clip(p0 + step / n * lift(m, seed), 0, 1)
                pp = _sharpening(probs[["benchmark", "id"]].assign(p=p)).assign(start=start_id)
                write_table(pp, run.eval_dir / f"{label}_per_problem.parquet", cfg=cfg)
                for b, d in pp.groupby("benchmark", sort=False):
                    rows.append({"policy": f"{m}/seed{seed}/{label}", "method": m, "seed": seed, "checkpoint": label,
                                 "benchmark": b, "problems": len(d), "accuracy": float(d["p"].mean()),
                                 **_sharpening_row(d)})
            write_table(pd.DataFrame(rows), run.eval, cfg=cfg)
    pp0 = _sharpening(probs[["benchmark", "id"]].assign(p=p0)).assign(start=start_id)
    start = [{"policy": rl["policy"], "benchmark": b, "accuracy": float(d["p"].mean()), **_sharpening_row(d)}
             for b, d in pp0.groupby("benchmark", sort=False)]
    write_table(pd.DataFrame(start), P.eval_table(rl["policy"]), cfg=cfg)
    write_table(pp0, P.stage("eval", rl["policy"], "eval_per_problem.parquet"), cfg=cfg)
    # its pass@k curve as `sparserl evaluate` writes it, as if from 64 samples a problem at rate p0
    from sparserl.evaluation.pass_at_k import pass_at_k_curve
    counts = pp0[["benchmark"]].assign(n=64, c=np.rint(64 * pp0["p"]).astype(int))
    write_table(pass_at_k_curve(counts), P.pass_at_k_curve(rl["policy"]), cfg=cfg)
    return probs


def write_head_to_head_tables(cfg: dict, n_boot: int = 200, **kw) -> dict:
    """Synthetic runs, then the study's tables (ranking, pairs, curves) as `sparserl head-to-head` writes them,
    and the rliable aggregates (iqm, improvement, profiles) as `sparserl head-to-head-aggregates` does."""
    from sparserl.core.artifacts import read_table
    from sparserl.studies.aggregates import write_aggregates
    from sparserl.studies.head_to_head import write_head_to_head
    write_runs(cfg, **kw)
    P = Paths(cfg)
    out = {**write_head_to_head(P, n_boot=n_boot), **write_aggregates(P, reps=min(n_boot, 100))}
    return {name: read_table(path) for name, path in out.items()}


# GRPO and V0.5 at k = 4, 8 (the matched figure), RLOO, and an alias: basis_grid_grpo_g1_vanilla
# is vanilla_g1's spec, so it reports vanilla_g1's run
METHODS = ["grpo_g4", "v05_k4", "grpo_g8", "v05_k8", "rloo_g8", "vanilla_g1", "basis_grid_grpo_g1_vanilla"]


def make_cfg(repo, methods=METHODS, seeds=(0,)):
    c = yaml.safe_load((repo / "configs/smoke.yaml").read_text())
    rl = yaml.safe_load((repo / "configs/tiny.yaml").read_text())["rl"]
    c["rl"] = {**rl, "methods": list(methods), "seeds": list(seeds), "steps": 4, "rollouts_per_step": 64}
    return c


def two_start_trees(repo, tmp_path, monkeypatch, seeds=(0,)):
    """Two synthetic trees as configs/overlays/start1.yaml and pool_start1.yaml make them: the
    first (start 0) ran grpo_g8, v05_k4 and rloo_g8, the second (start 1, results_start1) the first
    two. Start 1's policy is 0.2 better on every problem and so are its runs; each run is its start
    + 0.1 + a lift of (method, seed). Returns the first config, the pooled one and the lifts."""
    from sparserl.core.artifacts import read_table
    monkeypatch.chdir(tmp_path)
    first = make_cfg(repo, ["grpo_g8", "v05_k4", "rloo_g8"], seeds=seeds)
    overlay = tmp_path / "start1.yaml"
    overlay.write_text(yaml.safe_dump({"results_dir": "results_start1", "pretrain": {"start_seed": 1},
                                       "rl": {"methods": ["grpo_g8", "v05_k4"]}}))
    second = {**first, "results_dir": "results_start1", "pretrain": {**first["pretrain"], "start_seed": 1},
              "rl": {**first["rl"], "methods": ["grpo_g8", "v05_k4"]}}
    lifts = {"grpo_g8": (0.02, 0.03), "v05_k4": (0.05, 0.06), "rloo_g8": (0.0, 0.01)}
    for c, shift in ((first, 0.0), (second, 0.2)):
        probs = write_runs(c, scores=lambda m, s, p0, shift=shift: p0 * 0.5 + 0.2 + shift + 0.1 + lifts[m][s])
        start = probs[["benchmark", "id"]].assign(p=probs["p0"] * 0.5 + 0.2 + shift, start=c["pretrain"].get("start_seed", 0))
        write_table(start.assign(**{"pass": 1.0}), Paths(c).stage("eval", "s", "eval_per_problem.parquet"), cfg=c)
        # its eval.parquet agrees (the aggregates read each start's accuracy per benchmark there)
        ev = read_table(Paths(c).eval_table("s"))
        write_table(ev.assign(accuracy=ev["benchmark"].map(start.groupby("benchmark")["p"].mean())),
                    Paths(c).eval_table("s"), cfg=c)
    return first, {**first, "head_to_head": {"pool": [str(overlay)]}}, lifts
