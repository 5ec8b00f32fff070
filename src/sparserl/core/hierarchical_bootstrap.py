"""The hierarchical (nested) bootstrap of an RL accuracy or gain: start policies, then RL seeds
within each start, then benchmark problems.

An RL result varies with three things: the start policy (its pre-training seed, `start`), the RL
seed of a run from it (`seed`), and which problems the benchmarks happened to draw. The runs are
nested (seed within start); the problems are crossed with them (every run is scored on the same
problems). One replicate, after Davison & Hinkley 1997, "Bootstrap Methods and their Application",
Sec. 3.8 (multi-stage sampling: resample the first-stage units, then the second-stage units within
each one drawn):

1. draws the problems with replacement within each benchmark (stratified: each keeps its size, so
   a replicate's accuracy is again a mean of benchmark means); one draw per replicate serves every
   run and arm, since the problems are crossed with the runs, and it pairs the arms;
2. draws S starts with replacement out of the S, one draw shared by the arms (runs from one start
   share it: a gain or a difference is paired at that level);
3. within each drawn start, draws its R seeds with replacement, independently for each arm (runs
   of two methods at one seed share no randomness that would pair them; two names of one run,
   `owners`, share the draw).

A replicate's value is the mean over the drawn starts of the mean over their drawn seeds of each
run's accuracy on the drawn problems, minus, for a gain, the start policy's own accuracy on the
same problems under the same drawn start. A level with one unit (one start without
head_to_head.pool; at tiny: one seed) has nothing to draw from and reduces away: one start gives
seeds then problems, one seed problems only. `Design` records the units of each level and which were resampled, e.g.
"1 start x 1 seed x 427 problems (7 benchmarks); resampled: problems".

With few units at a level (3 seeds), a percentile bootstrap understates that level's spread (a
resampled mean of n values spreads by sd(ddof 0) / sqrt(n), with normal-like quantiles where a
t-interval has t_{n-1}); read such intervals as at least as narrow as the data allow.

numpy's Generator only, vectorised over replicates: the same inputs and seed give the same bytes.
The draws come in a fixed order (problems, starts, then each arm's seeds), so with one start the
replicates are those of the two-level (seeds, problems) bootstrap the head-to-head used before.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from sparserl.core.stats import LEVEL

LEVELS = ("start", "seed", "problem")


@dataclass(frozen=True)
class Design:
    """The units at each level of the bootstrap."""

    starts: int
    seeds: int
    problems: int
    benchmarks: int

    def resampled(self) -> list[str]:
        """The levels with more than one unit: those the bootstrap draws from."""
        n = {"start": self.starts, "seed": self.seeds, "problem": self.problems}
        return [lv for lv in LEVELS if n[lv] > 1]

    def text(self) -> str:
        """'1 start x 3 seeds x 427 problems (7 benchmarks); resampled: seeds, problems'."""
        def unit(n, what):
            return f"{n} {what}" + ("" if n == 1 else "s")
        levels = " x ".join([unit(self.starts, "start"), unit(self.seeds, "seed"), unit(self.problems, "problem")])
        resampled = ", ".join(lv + "s" for lv in self.resampled()) or "none"
        return f"{levels} ({unit(self.benchmarks, 'benchmark')}); resampled: {resampled}"


def problem_weights(benchmarks: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """(n_boot, J) weights of the stratified problem bootstrap: w @ p is a replicate's mean over
    benchmarks of the benchmark means of p (multinomial counts within each benchmark)."""
    benchmarks = np.asarray(benchmarks)
    names = list(dict.fromkeys(benchmarks))
    w = np.zeros((n_boot, len(benchmarks)))
    for name in names:
        idx = np.flatnonzero(benchmarks == name)
        n = len(idx)
        counts = rng.multinomial(n, np.full(n, 1.0 / n), size=n_boot)
        w[:, idx] = counts / (n * len(names))
    return w


def point_weights(benchmarks: np.ndarray) -> np.ndarray:
    """(J,) weights of the plain estimate: the mean over benchmarks of the benchmark means."""
    benchmarks = np.asarray(benchmarks)
    names, inverse, counts = np.unique(benchmarks, return_inverse=True, return_counts=True)
    return 1.0 / (counts[inverse] * len(names))


def _check(x: np.ndarray, what: str, shape_tail: tuple) -> np.ndarray:
    x = np.asarray(x, dtype=float)
    if x.shape[len(x.shape) - len(shape_tail):] != shape_tail or not np.isfinite(x).all():
        raise ValueError(f"{what}: array of shape {x.shape} (finite values, ending in {shape_tail}) expected")
    return x


def replicates(arms: dict[str, np.ndarray], benchmarks, n_boot: int, seed: int | Sequence[int],
               owners: dict[str, str] | None = None,
               baseline: np.ndarray | None = None) -> tuple[dict[str, np.ndarray], Design]:
    """Per arm, its `n_boot` replicates of the accuracy (or, with `baseline`, of the gain over it),
    and the design. `arms[a]` is (starts, seeds, J): the per-problem score of each run, one problem
    order for all (seeds: the same count under every start); `baseline` (starts, J): the start
    policies' own per-problem scores; `owners[a]`: the run an arm reports (aliases share draws)."""
    benchmarks = np.asarray(benchmarks)
    J = len(benchmarks)
    if not arms:
        raise ValueError("a hierarchical bootstrap needs at least one arm")
    arrs = {a: _check(x, f"arm {a}", (J,)) for a, x in arms.items()}
    shapes = {x.shape[:2] for x in arrs.values()}
    if any(x.ndim != 3 for x in arrs.values()) or len({s[0] for s in shapes}) != 1:
        raise ValueError(f"arms must be (starts, seeds, {J}) arrays with one start count, got "
                         f"{ {a: x.shape for a, x in arrs.items()} }")
    S = next(iter(shapes))[0]
    if baseline is not None:
        baseline = _check(baseline, "baseline", (J,))
        if baseline.shape != (S, J):
            raise ValueError(f"baseline: shape {baseline.shape}, expected ({S}, {J}): one row per start")
    rng = np.random.default_rng(seed)
    w = problem_weights(benchmarks, n_boot, rng)                 # (B, J), shared by all arms
    starts = rng.integers(0, S, size=(n_boot, S))                # (B, S), shared by all arms
    cols = np.arange(n_boot)
    base = 0.0
    if baseline is not None:
        base = (baseline @ w.T)[starts, cols[:, None]].mean(axis=1)   # (B,): the drawn starts' own
    draws: dict[str, np.ndarray] = {}
    out = {}
    for a, x in arrs.items():
        R = x.shape[1]
        owner = (owners or {}).get(a, a)
        if owner not in draws or draws[owner].shape[2] != R:
            draws[owner] = rng.integers(0, R, size=(n_boot, S, R))   # seeds within each drawn start
        acc = (x.reshape(S * R, J) @ w.T).reshape(S, R, n_boot)   # each run on each replicate's problems
        picked = acc[starts[:, :, None], draws[owner], cols[:, None, None]]   # (B, S, R)
        out[a] = picked.mean(axis=(1, 2)) - base
    return out, design_of(next(iter(arrs.values())), benchmarks)


def design_of(x: np.ndarray, benchmarks) -> Design:
    """The design of a (starts, seeds, J) arm."""
    x = np.asarray(x)
    return Design(starts=x.shape[0], seeds=x.shape[1], problems=x.shape[2],
                  benchmarks=len(set(np.asarray(benchmarks).tolist())))


def point(x: np.ndarray, benchmarks, baseline: np.ndarray | None = None) -> float:
    """The plain estimate: mean over starts and seeds of the accuracy (minus the baseline's)."""
    pw = point_weights(benchmarks)
    value = float((np.asarray(x, dtype=float) @ pw).mean())
    return value - (float((np.asarray(baseline, dtype=float) @ pw).mean()) if baseline is not None else 0.0)


def percentile(reps: np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    """The percentile interval of the replicates."""
    lo, hi = np.quantile(np.asarray(reps, dtype=float), [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def interval(a: np.ndarray, benchmarks, *, b: np.ndarray | None = None, baseline: np.ndarray | None = None,
             n_boot: int = 2000, seed: int | Sequence[int] = 0,
             level: float = LEVEL) -> tuple[float, float, float, Design]:
    """(estimate, lo, hi, design) of arm a's accuracy, of a - b, or of a's gain over `baseline`
    (a and b: (starts, seeds, J); baseline: (starts, J)); a percentile interval."""
    arms = {"a": a} if b is None else {"a": a, "b": b}
    reps, design = replicates(arms, benchmarks, n_boot, seed, baseline=baseline)
    est = point(a, benchmarks, baseline) - (point(b, benchmarks) if b is not None else 0.0)
    diff = reps["a"] - (reps["b"] if b is not None else 0.0)
    return (est, *percentile(diff, level), design)


def arm_array(per_problem: pd.DataFrame, problems: pd.DataFrame, col: str = "p", what: str = "") -> np.ndarray:
    """(starts, seeds, J) from a long per-problem table with columns start, seed, benchmark, id and
    `col`, in `problems`' (benchmark, id) order. A table without `start` is start 0 (written before
    the column existed); every start must hold the same number of seeds and every run every problem."""
    d = per_problem if "start" in per_problem else per_problem.assign(start=0)
    need = [c for c in ("seed", "benchmark", "id", col) if c not in d]
    if need:
        raise ValueError(f"{what}: per-problem rows lack column(s) {need}; rerun its evaluation with this code")
    key = pd.MultiIndex.from_frame(problems[["benchmark", "id"]])
    starts = sorted(d["start"].unique())
    per_start = {s: sorted(d.loc[d["start"] == s, "seed"].unique()) for s in starts}
    counts = {s: len(v) for s, v in per_start.items()}
    if len(set(counts.values())) != 1:
        raise ValueError(f"{what}: starts hold different numbers of seeds {counts}; the hierarchical bootstrap needs "
                         "the same count under every start: run the missing seeds (rl.seeds)")
    out = np.empty((len(starts), next(iter(counts.values())), len(key)))
    for i, s in enumerate(starts):
        for j, r in enumerate(per_start[s]):
            run = d[(d["start"] == s) & (d["seed"] == r)].set_index(["benchmark", "id"])[col]
            if len(run) != len(key) or not run.index.equals(run.index.unique()) or set(run.index) != set(key):
                raise ValueError(f"{what}: start {s} seed {r} is scored on other problems than the first run "
                                 f"({len(run)} vs {len(key)}); rerun its evaluation on the config's benchmarks")
            out[i, j] = run.loc[key].to_numpy(dtype=float)
    return out
