"""Aggregates of the head-to-head over benchmarks x seeds through `rliable` (Agarwal et al., "Deep
Reinforcement Learning at the Edge of the Statistical Precipice", NeurIPS 2021).

A method's scores are a (seeds x benchmarks) matrix: each run's final accuracy on each benchmark
(the mean over that benchmark's problems of the per-problem score p, mean@k at tiny scale, read from
`eval/final_per_problem.parquet` as `sparserl.studies.head_to_head` reads it), and its gain over the
start policy (that accuracy minus the start policy's on the same benchmark, when the DAG evaluates
the start policy). Three tables under `results/{scale}/head_to_head/` (`Paths.head_to_head`):

  iqm.parquet          one row per (method, metric in accuracy | gain): the interquartile mean of
                       its seeds x benchmarks scores (`metrics.aggregate_iqm`) and the plain mean,
                       each with a 95% stratified-bootstrap percentile interval (`interval`:
                       runs resampled within each benchmark, as rliable's StratifiedBootstrap)
  improvement.parquet  one row per (x, y): P(X > Y), the share of (run of x, run of y) pairs on a
                       benchmark where x scores higher, averaged over benchmarks
                       (`metrics.probability_of_improvement`, Mann-Whitney U), with its 95% interval;
                       every method against GRPO G=8 (`REFERENCE`, when run) and against the method
                       with the highest IQM accuracy. Accuracy only: the gain subtracts the same start
                       score from every run of a benchmark, which leaves P(X > Y) unchanged
  profiles.parquet     one row per (method, tau): the fraction of its runs x benchmarks scores above
                       tau (rliable's performance profile, `score_distributions`) with its 95%
                       interval

Other start policies: with `head_to_head.pool` (`sparserl.studies.head_to_head`) a run
is a (start, seed) pair: a method's matrix holds the runs of every pooled tree (the methods all of
them ran, as the ranking), each run's gain over its own start policy, so the IQM is over
benchmarks x (starts x seeds), the stratified bootstrap resamples those runs within each benchmark
and P(X > Y) compares runs of X and Y from any start. The tables then carry `starts` and `seeds`
columns and their `ci_method` names them ("2 starts x 1 seed = 2 runs x 7 benchmarks"); with one
start they are as before. Resampling runs treats the two starts' runs as exchangeable: it does not
draw starts first (the head-to-head's hierarchical bootstrap does), so with few starts read these
intervals as the spread over runs, not over start policies.

With 1 seed there is no run to resample: the intervals would collapse to the point, so they are
written as NaN (`ci_method` says so) rather than as a certainty the data do not give. The metrics are
rliable's (`rliable.metrics`); the stratified bootstrap is numpy's here, not `rliable.library`'s:
that module imports `arch`, whose versions rliable 1.2 allows (< 8) fail to import under pandas 3,
and it draws from numpy's global RNG. Each method or pair has its own generator (`BOOTSTRAP_SEED`,
the config's `seed`, its name): the same tables give the same bytes, and adding a method leaves
the others' intervals as they were.
"""
from __future__ import annotations

import zlib
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from sparserl.core.artifacts import read_table, write_table
from sparserl.core.logs import get_logger
from sparserl.core.paths import Paths
from sparserl.core.stats import LEVEL
from sparserl.studies.head_to_head import (BOOTSTRAP, BOOTSTRAP_SEED, HeadToHeadError, missing_pool, pool_trees,
                                          pooled_methods, start_eval_table, tree_runs)

log = get_logger(__name__)

REFERENCE = "grpo_g8"
TAUS = np.linspace(0.0, 1.0, 51)  # accuracy thresholds of the performance profile
TABLES = ("iqm", "improvement", "profiles")
METRICS = ("accuracy", "gain")


def _metrics():
    from rliable import metrics  # numpy and scipy only (rliable.library would import arch)
    return metrics


def _rng(seed: int, key: str) -> np.random.Generator:
    return np.random.default_rng([BOOTSTRAP_SEED, int(seed), zlib.crc32(key.encode())])


def interval(scores, func: Callable, key: str, reps: int, seed: int, level: float = LEVEL):
    """(point, lower, upper) of `func` by a stratified bootstrap (percentile interval): each
    resample draws runs with replacement independently within each task (column), as rliable's
    `StratifiedBootstrap`; `scores` is a (runs x tasks) array, or a list of them, each resampled
    independently. With 1 run in any of them the bounds are NaN: resampling one run gives back
    the point."""
    arrays = [np.asarray(a, dtype=float) for a in (scores if isinstance(scores, (list, tuple)) else [scores])]
    point = np.asarray(func(*arrays), dtype=float)
    if min(a.shape[0] for a in arrays) < 2:
        return point, np.full(point.shape, np.nan), np.full(point.shape, np.nan)
    rng = _rng(seed, key)
    draws = []
    for _ in range(reps):
        resampled = [np.take_along_axis(a, rng.integers(0, a.shape[0], size=a.shape), axis=0) for a in arrays]
        draws.append(np.asarray(func(*resampled), dtype=float))
    q = (1 - level) / 2
    lo, hi = np.percentile(np.stack(draws), [100 * q, 100 * (1 - q)], axis=0)
    return point, np.asarray(lo).reshape(point.shape), np.asarray(hi).reshape(point.shape)


def score_distributions(scores: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """rliable's performance profile at each tau: the fraction of runs x tasks scores above it."""
    return np.array([(np.asarray(scores) > t).mean() for t in taus])


def _ci_method(runs: int, what: str) -> str:
    if runs < 2:
        return "none: 1 seed (no run to resample)"
    return f"stratified bootstrap: {what}"


def iqm_table(scores: dict[str, np.ndarray], metric: str, reps: int = BOOTSTRAP, seed: int = 0,
              level: float = LEVEL) -> pd.DataFrame:
    """One row per method: IQM and mean of its (runs x tasks) scores with their intervals;
    `rank` 1 = highest IQM (equal IQMs share a rank)."""
    metrics = _metrics()
    func = lambda x: np.array([metrics.aggregate_iqm(x), metrics.aggregate_mean(x)])  # noqa: E731
    rows = []
    for m, s in scores.items():
        s = np.asarray(s, dtype=float)
        point, lo, hi = interval(s, func, f"{metric}/{m}", reps, seed, level)
        rows.append({"method": m, "metric": metric, "runs": s.shape[0], "tasks": s.shape[1],
                     "iqm": point[0], "ci_lo": lo[0], "ci_hi": hi[0], "mean": point[1], "mean_ci_lo": lo[1],
                     "mean_ci_hi": hi[1], "ci_method": _ci_method(s.shape[0], f"{reps} resamples of runs within "
                                                                             f"each task, {level:.0%} percentile")})
    df = pd.DataFrame(rows)
    df.insert(0, "rank", [1 + int((df["iqm"] > v).sum()) for v in df["iqm"]])
    return df


def best_method(iqm: pd.DataFrame) -> str:
    """The method with the highest IQM accuracy; equal IQMs keep the config's order."""
    acc = iqm[iqm["metric"] == "accuracy"].reset_index(drop=True)
    return str(acc.loc[int(acc["iqm"].to_numpy().argmax()), "method"])


def improvement_pairs(methods: list[str], best: str, reference: str = REFERENCE) -> list[tuple[str, str, str]]:
    """(x, y, against) for every method x against GRPO G=8 (when run) and against the best, x != y;
    once when GRPO G=8 is the best."""
    refs = ([("reference", reference)] if reference in methods else []) + ([("best", best)] if best != reference else [])
    return [(x, y, against) for against, y in refs for x in methods if x != y]


def probability_of_improvement(x: np.ndarray, y: np.ndarray) -> float:
    """rliable's `metrics.probability_of_improvement` (Mann-Whitney U / (n_x n_y), ties count one
    half, averaged over tasks) without a scipy call per task: the bootstrap calls it thousands of
    times per pair, which took minutes at tiny scale. tests/studies/test_aggregates.py checks the two agree."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    d = x[:, None, :] - y[None, :, :]                     # (runs_x, runs_y, tasks)
    return float(((d > 0).mean(axis=(0, 1)) + 0.5 * (d == 0).mean(axis=(0, 1))).mean())


def improvement_table(scores: dict[str, np.ndarray], pairs: list[tuple[str, str, str]], reps: int = BOOTSTRAP,
                      seed: int = 0, level: float = LEVEL) -> pd.DataFrame:
    """P(X > Y) of each pair with its interval (runs of x and y resampled independently per task)."""
    metrics = _metrics()
    rows = []
    for x, y, against in pairs:
        sx, sy = np.asarray(scores[x], dtype=float), np.asarray(scores[y], dtype=float)
        _, lo, hi = interval([sx, sy], probability_of_improvement, f"{x},{y}", reps, seed, level)
        point = metrics.probability_of_improvement(sx, sy)
        runs = min(sx.shape[0], sy.shape[0])
        rows.append({"x": x, "y": y, "against": against, "metric": "accuracy", "p_improvement": float(point),
                     "ci_lo": float(lo), "ci_hi": float(hi), "runs_x": sx.shape[0], "runs_y": sy.shape[0],
                     "tasks": sx.shape[1], "ci_method": _ci_method(runs, f"{reps} resamples of x's and y's runs, "
                                                                         f"independently within each task")})
    return pd.DataFrame(rows, columns=["x", "y", "against", "metric", "p_improvement", "ci_lo", "ci_hi", "runs_x",
                                       "runs_y", "tasks", "ci_method"])


def profile_table(scores: dict[str, np.ndarray], taus: np.ndarray = TAUS, reps: int = BOOTSTRAP, seed: int = 0,
                  level: float = LEVEL) -> pd.DataFrame:
    """Per method and tau: the fraction of its runs x tasks scores above tau (rliable's performance
    profile), with its stratified-bootstrap interval, one method at a time under its own seed."""
    rows = []
    for m, s in scores.items():
        s = np.asarray(s, dtype=float)
        point, lo, hi = interval(s, lambda x: score_distributions(x, taus), f"profile/{m}", reps, seed, level)
        rows += [{"method": m, "tau": float(t), "fraction": float(p), "ci_lo": float(a), "ci_hi": float(b)}
                 for t, p, a, b in zip(taus, point, lo, hi)]
    return pd.DataFrame(rows)


# --- reading the runs ------------------------------------------------------------------------------

def score_matrices(P: Paths) -> tuple[dict[str, dict[str, np.ndarray]], list[str], dict]:
    """({metric: {method: (runs x benchmarks)}}, the benchmarks, the design {starts, seeds}): final
    accuracy per benchmark of each run and, when the start policy is evaluated, its gain over the
    start policy's accuracy. With head_to_head.pool a run is a (start, seed) pair: the runs of every
    tree (`head_to_head.pool_trees`) of the methods all of them ran, each gain over its own start.
    `P`: the tree whose config it reads."""
    rl = P.cfg["rl"]
    methods, seeds = list(dict.fromkeys(rl["methods"])), list(rl["seeds"])
    if not methods or not seeds:
        raise HeadToHeadError(f"rl.methods ({methods}) and rl.seeds ({seeds}) must both be non-empty")
    trees = pool_trees(P)
    if len(trees) > 1:
        missing = missing_pool(P)
        if missing:
            raise HeadToHeadError(missing)
        methods = pooled_methods(trees)
        counts = {t.P.results: len(t.cfg["rl"]["seeds"]) for t in trees}
        if len(set(counts.values())) != 1:
            raise HeadToHeadError(f"head_to_head.pool: the trees hold {counts} seeds; every start needs as many "
                                  "(rl.seeds), as in the head-to-head")
    acc: dict[str, np.ndarray] = {}
    tree_of: dict[str, list[int]] = {}  # each run's tree (start), in the rows' order
    benchmarks: list[str] | None = None
    for m in methods:
        rows, tree_of[m] = [], []
        for i, t in enumerate(trees):
            for r in tree_runs(t, m, len(trees) > 1):  # checks each per-problem table against eval.parquet
                per = r.final.groupby("benchmark", sort=False)["p"].mean()
                if benchmarks is None:
                    benchmarks = list(per.index)
                if set(per.index) != set(benchmarks):
                    raise HeadToHeadError(f"{r.eval_path}: benchmarks {sorted(per.index)} differ from the first run's "
                                          f"{sorted(benchmarks)}; rerun `sparserl rl-eval --method {m} --seed {r.seed}`")
                rows.append(per.loc[benchmarks].to_numpy(dtype=float))
                tree_of[m].append(i)
        acc[m] = np.stack(rows)
    out = {"accuracy": acc}
    if start_eval_table(P) is not None:  # a pooled tree without one is refused by missing_pool
        a0 = [start_accuracy(t, benchmarks) for t in trees]
        out["gain"] = {m: a - np.stack([a0[i] for i in tree_of[m]]) for m, a in acc.items()}
    return out, benchmarks, {"starts": len(trees), "seeds": len(seeds)}


def start_accuracy(tree, benchmarks: list[str]) -> np.ndarray:
    """A tree's start policy's accuracy on each of `benchmarks` (its evaluation table)."""
    start = start_eval_table(tree.P)
    ev = read_table(start)
    if not {"benchmark", "accuracy"} <= set(ev.columns) or not set(benchmarks) <= set(ev["benchmark"]):
        raise HeadToHeadError(f"{start}: needs columns benchmark, accuracy with rows for {benchmarks}; "
                              f"rerun `sparserl evaluate` for the start policy {tree.cfg['rl']['policy']}")
    return ev.groupby("benchmark")["accuracy"].mean().loc[benchmarks].to_numpy(dtype=float)


def design_text(design: dict, tasks: int) -> str:
    """'2 starts x 3 seeds = 6 runs x 7 benchmarks' (one start: '3 seeds x 7 benchmarks')."""
    def unit(n, what):
        return f"{n} {what}" + ("" if n == 1 else "s")
    runs = unit(design["seeds"], "seed")
    if design["starts"] > 1:
        runs = f"{unit(design['starts'], 'start')} x {runs} = {design['starts'] * design['seeds']} runs"
    return f"{runs} x {unit(tasks, 'benchmark')}"


def aggregates(P: Paths, reps: int = BOOTSTRAP) -> dict[str, pd.DataFrame]:
    """The three tables of the module doc for tree `P`; with head_to_head.pool each has `starts` and
    `seeds` columns and its ci_method names the runs (start, seed) it resampled."""
    scores, benchmarks, design = score_matrices(P)
    seed = int(P.cfg["seed"])
    iqm = pd.concat([iqm_table(scores[k], k, reps, seed) for k in METRICS if k in scores], ignore_index=True)
    methods = list(scores["accuracy"])
    pairs = improvement_pairs(methods, best_method(iqm))
    out = {"iqm": iqm, "improvement": improvement_table(scores["accuracy"], pairs, reps, seed),
           "profiles": profile_table(scores["accuracy"], TAUS, reps, seed)}
    if design["starts"] > 1:  # one start: the tables as before the pool existed
        runs = f"runs = (start, seed) pairs, {design_text(design, len(benchmarks))}"
        for t in out.values():
            t["starts"], t["seeds"] = design["starts"], design["seeds"]
            if "ci_method" in t:
                t["ci_method"] = t["ci_method"] + f"; {runs}"
    return out


def write_aggregates(P: Paths, reps: int = BOOTSTRAP, out: dict[str, Path] | None = None) -> dict[str, Path]:
    """Compute the aggregates of tree `P` and write their tables atomically, with manifests (to
    `out[name]`, default `P.head_to_head(name)`)."""
    cfg = P.cfg
    paths = {name: Path((out or {}).get(name) or P.head_to_head(name)) for name in TABLES}
    tables = aggregates(P, reps)
    from importlib.metadata import version
    extra = {"study": "head_to_head_aggregates", "library": f"rliable {version('rliable')}", "level": LEVEL,
             "bootstrap": reps, "bootstrap_seed": BOOTSTRAP_SEED, "seed": int(cfg["seed"]),
             "reference": REFERENCE, "methods": list(cfg["rl"]["methods"]), "seeds": list(cfg["rl"]["seeds"]),
             "pool": list((cfg.get("head_to_head") or {}).get("pool", [])),
             "starts": {str(t.P.results): t.start for t in pool_trees(P)}}
    written = {name: write_table(tables[name], paths[name], cfg=cfg, extra=extra) for name in TABLES}
    iqm = tables["iqm"]
    acc = iqm[iqm["metric"] == "accuracy"].sort_values("rank", kind="stable")
    with pd.option_context("display.width", 200):
        log.info("IQM of final accuracy over seeds x benchmarks:\n"
                 + acc[["rank", "method", "runs", "tasks", "iqm", "ci_lo", "ci_hi"]].round(4).to_string(index=False))
    log.info(f"aggregates -> {paths['iqm'].parent}")
    return written
