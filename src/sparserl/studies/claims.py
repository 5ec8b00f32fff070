"""The claims table: one row per headline claim of the four papers, measured on our artifacts.

`sparserl claims` (rule `claims`, workflow/rules/claims.smk) writes `paper_figures/{scale}/CLAIMS.md`
and `CLAIMS.csv`. Each claim is a `Claim` record in `CLAIMS`: the paper, its wording and number,
the quantity we measure with the relation the paper states (`>` or `<` a threshold), the figure
that shows it, and two functions: `inputs(cfg)`, the artifacts the claim reads (or `NotRun` when the
config never makes them), and `measure(ctx)`, the quantity with its 95% interval. A new claim is a
few lines: a factory below (`rl_diff`, `v0_auc`, `critique_diff`, ...) or a new pair of functions.

Statuses per row, each made by one function in code (never typed):
direction_status (`decide`):
  relation ">" threshold t:  reproduced     when the interval lies above t (lo > t)
                             contradicted   when it lies below t (hi < t)
                             inconclusive   when it contains t (the row gives the smallest effect
                                            this scale detects at POWER: `detectable`)
                             untestable (single run) when it has no finite bound
  relation "<" t: the mirror image.
  not run at this scale: the config does not make the claim's artifact or does not run its
  methods (the reason column says which); an artifact the config makes but that is missing on
  disk is an error naming it, not a status.
premise_status (`premise_status`): the mechanism the claim rests on (`Claim.premise`: vanilla
  collapses, k <= 2 collapses, the critic explains variance), measured here by the same rule:
  present, absent or unclear. A non-inferiority claim (`Claim.margin`) has the compared method's
  gain as its premise: its threshold is -NI_FRACTION x that gain, absent when it gains nothing.
magnitude_status (`magnitude`), against the paper's own number (`Claim.paper_value`, on our
  scale: accuracy as a fraction, MSE changes in %): "in CI" when our interval contains it (a range:
  overlaps it); for scale-free quantities (`Claim.scale_free`: AUC, % change, a coefficient)
  "within 2x" when measured / paper lies in [1/2, 2] (`MAGNITUDE_FACTOR`); else "off by Nx" or
  "opposite sign"; "no paper number" where the paper states none; "not measured" where we have
  no number.
status (`overall`): not run; premise absent when the premise is absent (the data cannot judge
  the claim); reproduced only when the direction is reproduced and the magnitude is in CI (or
  within the factor); "direction only" when the direction is reproduced but the paper gives no
  number or its number is off; else the direction status.
The threshold is what the paper states: a bound it gives ("Intra-AUC > 0.85"), 0 for "A beats B"
or "A reduces B's MSE", and a margin for "A matches B" (above). A paper's absolute accuracy gap
("over 10%") is not the threshold but its `paper_value`.

Intervals (the `ci_method` column says which): RL accuracy and gains by the
hierarchical bootstrap (`sparserl.core.hierarchical_bootstrap`, `BOOT` resamples, RNG seed
`BOOT_SEED`): start policies, RL seeds within each, benchmark problems (stratified), the arms paired
by start and problem; the column names the levels and their units ("1 start x 1 seed x 427
problems"), widened to the Student t interval over seeds where that is wider (a percentile
bootstrap over 3 seeds understates their spread). Other start policies: with `head_to_head.pool`
(configs/overlays/pool_start1.yaml) an RL row pools its methods' runs of every pooled tree as
further starts, exactly as the head-to-head does (`head_to_head.pool_trees`; the (starts, seeds,
problems) arrays from `hierarchical_bootstrap.arm_array`, the one builder of both): each start's
gain against its own start policy's evaluation, the arms paired by start and problem, the column
naming "2 starts x N seeds x J problems" and the detail each start's own value ("per start 0, 1");
with >= 2 seeds a start, widened to the t interval over the (start, seed) runs where wider. A
method a pooled tree did not run keeps the row on this tree's start alone, and the column says so
("not pooled: start 1 (...) did not run ..."). The rollouts and the sharpening context beside an
RL row stay this tree's runs.parquet. Elsewhere, with >= 2 seeds a Student t interval over seeds (of the per-seed
differences when both arms ran the same seeds: a seed fixes the data order, so the arms are
paired; Welch otherwise); with one seed a percentile bootstrap over the per-unit artifact:
checkpoint contexts (model, step) for V0's intra-context AUC; the BASIS value study's own paired bootstrap over batches for its MSE ratios
(its n-sensitivity table has s.e. only: a normal interval by the delta method). Le Critique's
final table has one row per run, so one seed, or seeds that agree exactly, give no interval
(NaN bounds: untestable).

Layers: this module reads artifacts and method specs (`sparserl.methods.spec`); the figure a
claim points to is resolved by the caller (the CLI passes the registered figures' paths), since
figures import studies and not the reverse.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from sparserl.core import hierarchical_bootstrap as hb
from sparserl.core.artifacts import read_table
from sparserl.core.paths import Paths
from sparserl.core.stats import LEVEL, normal_quantile, t_interval, welch_interval

REPRODUCED, INCONCLUSIVE, UNTESTABLE, CONTRADICTED, NOT_RUN = (
    "reproduced", "inconclusive", "untestable (single run)", "contradicted", "not run at this scale")
DIRECTION_ONLY, PREMISE_ABSENT = "direction only", "premise absent"
DIRECTION_STATUSES = (REPRODUCED, INCONCLUSIVE, UNTESTABLE, CONTRADICTED, NOT_RUN)
STATUSES = (REPRODUCED, DIRECTION_ONLY, INCONCLUSIVE, UNTESTABLE, PREMISE_ABSENT, CONTRADICTED, NOT_RUN)
# A scale-free quantity (an AUC, a % change of MSE, a coefficient) agrees with the paper's number
# when their ratio is within this factor; accuracy points never do (a 4B model's +10 points and a
# tiny policy's +2 are not one effect at two sizes), only the paper's number inside our interval.
MAGNITUDE_FACTOR = 2.0
IN_CI, WITHIN, OPPOSITE, NO_PAPER, NOT_MEASURED = (
    "in CI", f"within {MAGNITUDE_FACTOR:g}x", "opposite sign", "no paper number", "not measured")
PRESENT, ABSENT, UNCLEAR = "present", "absent", "unclear"
NI_FRACTION = 0.25  # a non-inferiority margin: a quarter of the compared method's own gain
POWER = 0.80        # the power of an inconclusive row's smallest detectable effect
BOOT = 2000
BOOT_SEED = 0

PAPERS = {"V0": "V0 (001)", "V0.5": "V0.5 (000)", "BASIS": "BASIS (004)", "Le Critique": "Le Critique (002)"}


class NotRun(Exception):
    """The config does not make what the claim needs (the message says what)."""


class MissingArtifact(FileNotFoundError):
    """An artifact the config makes is not on disk (the message names it and the fix)."""


class BadArtifact(ValueError):
    """An artifact lacks a column a claim reads (the message names the file, the columns, the fix)."""


@dataclass(frozen=True)
class Interval:
    value: float
    lo: float
    hi: float
    method: str          # how the interval was made
    detail: str = ""     # the arms' own numbers, for the reader


@dataclass(frozen=True)
class Claim:
    id: str
    paper: str                       # a key of PAPERS
    claim: str                       # the paper's wording (short quote)
    paper_number: str                # the paper's number, as it states it
    quantity: str                    # what we measure
    relation: str                    # ">" or "<"
    threshold: float
    target: str                      # figure id prefix (e.g. "basis/f3a"), resolved by the caller
    inputs: Callable[[dict], list]   # cfg -> artifact paths, or raise NotRun
    measure: Callable[["Context"], Interval]
    fmt: str = "{:.3f}"
    # the paper's number (or (lo, hi) range) on our scale, for magnitude_status; None where it gives none
    paper_value: float | tuple | None = None
    scale_free: bool = False         # an AUC, a % change, a coefficient: `magnitude` may use the factor
    premise: "Premise | None" = None  # the mechanism the claim rests on, measured
    margin: "Margin | None" = None   # a non-inferiority claim: its threshold, from the compared method


@dataclass(frozen=True)
class Premise:
    """A mechanism a claim rests on, measured here: `quantity relation threshold` must hold for the
    claim to be judged (`decide` on its interval: present, absent, or unclear)."""
    text: str
    quantity: str
    relation: str
    threshold: float
    inputs: Callable[[dict], list]
    measure: Callable[["Context"], Interval]
    fmt: str = "{:+.3f}"


@dataclass(frozen=True)
class Margin:
    """`A matches B` as non-inferiority: A - B > -NI_FRACTION x B's own gain (B over the start
    policy, or over chance), so the margin scales with what B achieves at this scale."""
    of: str                                     # whose gain, in words
    inputs: Callable[[dict], list]
    gain: Callable[["Context"], Interval]


def decide(lo: float, hi: float, relation: str, threshold: float) -> str:
    """The status of a claim `quantity <relation> threshold` given its interval [lo, hi]: reproduced
    or contradicted only when the interval excludes the threshold; no interval is untestable."""
    if relation not in (">", "<"):
        raise ValueError(f"relation must be '>' or '<', got {relation!r}")
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return UNTESTABLE
    if lo > hi:
        raise ValueError(f"interval [{lo}, {hi}] has lo > hi")
    above, below = lo > threshold, hi < threshold
    if relation == ">":
        return REPRODUCED if above else CONTRADICTED if below else INCONCLUSIVE
    return REPRODUCED if below else CONTRADICTED if above else INCONCLUSIVE


def _paper_range(value) -> tuple[float, float]:
    lo, hi = (value, value) if np.isscalar(value) else value
    lo, hi = float(lo), float(hi)
    if not (np.isfinite(lo) and np.isfinite(hi) and lo <= hi):
        raise ValueError(f"paper_value must be a finite number or a (lo, hi) range with lo <= hi, got {value!r}")
    return lo, hi


def magnitude(value: float, lo: float, hi: float, paper_value, scale_free: bool = True) -> tuple[str, float]:
    """The magnitude status of a measurement `value` [lo, hi] against the paper's number (or range),
    and measured / paper (the range's nearest end; NaN when undefined). The factor applies to
    scale-free quantities only; an accuracy gap agrees only when the paper's lies in our CI."""
    if paper_value is None:
        return NO_PAPER, np.nan
    plo, phi = _paper_range(paper_value)
    if not np.isfinite(value):
        return NOT_MEASURED, np.nan
    nearest = min(max(value, plo), phi)
    ratio = value / nearest if nearest != 0 else np.nan
    if np.isfinite(lo) and np.isfinite(hi) and phi >= lo and plo <= hi:
        return IN_CI, ratio
    if not np.isfinite(ratio) or ratio == 0:
        return f"off (measured {value:.3g}, paper {nearest:.3g})", ratio
    if ratio < 0:
        return OPPOSITE, ratio
    factor = max(ratio, 1 / ratio)
    if scale_free and factor <= MAGNITUDE_FACTOR:
        return WITHIN, ratio
    return f"off by {factor:.1f}x", ratio


def premise_status(iv: Interval, premise: Premise) -> str:
    """present when the premise's interval lies on its side of the threshold, absent when it lies
    on the other side, unclear otherwise (or with no interval)."""
    d = decide(iv.lo, iv.hi, premise.relation, premise.threshold)
    return PRESENT if d == REPRODUCED else ABSENT if d == CONTRADICTED else UNCLEAR


def overall(direction: str, magnitude_status: str, premise: str = "") -> str:
    """The row's status: not run; premise absent (the mechanism the claim rests on does not occur
    here, so the data cannot judge it); reproduced when the interval excludes the threshold on the
    claim's side and the paper's number is in our CI (or, scale-free, within the factor); direction
    only when the side is right but the paper gives no number or its number is off; otherwise
    inconclusive, untestable or contradicted, as `decide` said."""
    if direction not in DIRECTION_STATUSES:
        raise ValueError(f"direction status must be one of {DIRECTION_STATUSES}, got {direction!r}")
    if direction == NOT_RUN:
        return NOT_RUN
    if premise == ABSENT:
        return PREMISE_ABSENT
    if direction != REPRODUCED:
        return direction
    return REPRODUCED if magnitude_status in (IN_CI, WITHIN) else DIRECTION_ONLY


def detectable(lo: float, hi: float) -> float:
    """The smallest effect this interval's precision detects at POWER (two-sided, 95%):
    (z_.975 + z_power) x s.e., the s.e. read off the interval's half-width."""
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return np.nan
    z = normal_quantile(0.5 + LEVEL / 2)
    return float((z + normal_quantile(POWER)) * (hi - lo) / (2 * z))


# --------------------------------------------------------------------------- intervals

def seed_interval(a: pd.Series, b: pd.Series | None = None) -> Interval:
    """t interval over seeds of `a` (indexed by seed), or of a - b: paired on common seeds when
    both ran the same ones, Welch otherwise. One seed, or seeds that agree exactly (a handful of
    quantised rewards can), give no interval: NaN bounds, so `decide` says untestable."""
    if b is None:
        x, how = a.to_numpy(float), f"t over {len(a)} seeds"
    elif set(a.index) == set(b.index):
        x, how = (a - b.reindex(a.index)).to_numpy(float), f"paired t over {len(a)} seeds"
    else:
        x, how = None, f"Welch t over {len(a)} and {len(b)} seeds"
    if x is not None and len(x) < 2:
        return Interval(float(x.mean()), np.nan, np.nan, "1 seed: no interval")
    if x is None and min(len(a), len(b)) < 2:
        return Interval(float(a.mean() - b.mean()), np.nan, np.nan, how + " (1 seed in an arm: no interval)")
    m, lo, hi = t_interval(x) if x is not None else welch_interval(a.to_numpy(), b.to_numpy())
    if not hi - lo > 1e-9 * max(1.0, abs(m)):  # float noise of equal values is no spread
        return Interval(m, np.nan, np.nan, how + " (no spread across seeds: no interval)")
    return Interval(m, lo, hi, how)


def _percentile(boots: np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    q = (1 - level) / 2
    lo, hi = np.percentile(boots, [100 * q, 100 * (1 - q)])
    return float(lo), float(hi)


def stratified_bootstrap_diff(a: pd.DataFrame, b: pd.DataFrame | None, *, strata="benchmark", unit="id",
                              col="p", n_boot: int = BOOT, seed: int = BOOT_SEED) -> tuple[float, float, float]:
    """Mean over strata of the per-stratum mean of `col` in a (minus b's, paired on (stratum, unit)),
    with a percentile bootstrap that resamples units within each stratum."""
    rng = np.random.default_rng(seed)
    key = [strata, unit]
    if b is not None:
        m = a[key + [col]].merge(b[key + [col]], on=key, suffixes=("_a", "_b"), how="outer", indicator=True)
        if (m["_merge"] != "both").any():
            raise ValueError(f"the two per-problem tables hold different problems "
                             f"({int((m['_merge'] != 'both').sum())} unmatched)")
        m["_x"] = m[f"{col}_a"] - m[f"{col}_b"]
    else:
        m = a.assign(_x=a[col])
    point, boots = [], np.zeros(n_boot)
    groups = sorted(m.groupby(strata), key=lambda kv: str(kv[0]))
    for _, g in groups:
        x = g["_x"].to_numpy(float)
        point.append(x.mean())
        boots += x[rng.integers(0, len(x), size=(n_boot, len(x)))].mean(axis=1)
    boots /= len(groups)
    return float(np.mean(point)), *_percentile(boots)


def group_bootstrap(values_a: np.ndarray, values_b: np.ndarray | None = None, *, n_boot: int = BOOT,
                    seed: int = BOOT_SEED) -> tuple[float, float, float]:
    """Mean of per-group values (of a - b), percentile bootstrap over groups."""
    x = np.asarray(values_a, float) - (0.0 if values_b is None else np.asarray(values_b, float))
    rng = np.random.default_rng(seed)
    boots = x[rng.integers(0, len(x), size=(n_boot, len(x)))].mean(axis=1)
    return float(x.mean()), *_percentile(boots)


# --------------------------------------------------------------------------- context

@dataclass
class Context:
    """The config, its paths, and each artifact read once."""

    cfg: dict
    P: Paths = field(init=False)
    _cache: dict = field(default_factory=dict, init=False)

    def __post_init__(self):
        self.P = Paths(self.cfg)

    def trees(self) -> list:
        """This tree, then each start policy's tree of `head_to_head.pool` (`head_to_head.pool_trees`)."""
        if "trees" not in self._cache:
            self._cache["trees"] = _pool_trees(self.cfg)
        return self._cache["trees"]

    def table(self, path, need=()) -> pd.DataFrame:
        """The table at `path`; `need`: the columns the caller reads (a missing one is an error)."""
        path = Path(path)
        if path not in self._cache:
            if not path.exists():
                raise MissingArtifact(f"{path}: artifact not found; run `snakemake --cores 2 {path}` "
                                      f"(or the rule that makes it) with this config")
            self._cache[path] = read_table(path)
        df = self._cache[path]
        lacking = [c for c in need if c not in df.columns]
        if lacking:
            raise BadArtifact(f"{path}: no column(s) {lacking} (it has {list(df.columns)}); it was written by "
                              f"older code or by hand: delete it and rebuild it with `snakemake --cores 2 {path}`")
        return df

    def json(self, path) -> dict:
        path = Path(path)
        if path not in self._cache:
            if not path.exists():
                raise MissingArtifact(f"{path}: artifact not found; run `snakemake --cores 2 {path}` with this config")
            self._cache[path] = json.loads(path.read_text())
        return self._cache[path]


# --------------------------------------------------------------------------- RL accuracy

def _rl_methods(cfg: dict, *methods: str) -> list:
    rl = cfg.get("rl")
    if not rl:
        raise NotRun("the config has no rl section")
    absent = [m for m in methods if m not in rl["methods"]]
    if absent:
        raise NotRun(f"rl.methods of this config lacks {', '.join(absent)}")
    return list(rl["seeds"])


def _pool_trees(cfg: dict) -> list:
    from sparserl.studies.head_to_head import HeadToHeadError, pool_trees
    try:
        return pool_trees(cfg)
    except HeadToHeadError as e:
        raise BadArtifact(str(e)) from None


def _ran(tree, methods) -> bool:
    return all(m in tree.cfg["rl"]["methods"] for m in methods)


def _pool(trees: list, *methods: str) -> tuple[list, str]:
    """The trees an RL row pools as starts (this one and each pooled tree that ran every method of
    the row: arms paired by start need the same starts), and the ci_method's note on those left out."""
    used = [trees[0]] + [t for t in trees[1:] if _ran(t, methods)]
    left = [t for t in trees[1:] if not _ran(t, methods)]
    if not left:
        return used, ""
    lacks = sorted({m for t in left for m in methods if m not in t.cfg["rl"]["methods"]})
    alone = "the other starts" if len(used) > 1 else f"this tree's start {trees[0].start} alone"
    return used, (f"; not pooled: start {', '.join(str(t.start) for t in left)} "
                  f"({', '.join(str(t.overlay) for t in left)}) did not run {', '.join(lacks)}, so {alone}")


def _rl_inputs(*methods: str):
    def inputs(cfg):
        from sparserl.methods.spec import method_run
        seeds = _rl_methods(cfg, *methods)
        # eval.parquet is the rule's output; its per-problem tables lie beside it (same job); with
        # head_to_head.pool, the same of each pooled tree that ran the row's methods
        pooled = [method_run(t.cfg, m, s).eval for t in _pool(_pool_trees(cfg), *methods)[0][1:]
                  for m in methods for s in t.cfg["rl"]["seeds"]]
        return [Paths(cfg).rl_runs()] + [method_run(cfg, m, s).eval for m in methods for s in seeds] + pooled
    return inputs


def _per_problem(ctx: Context, method: str, seed, cfg: dict | None = None) -> pd.DataFrame:
    from sparserl.methods.spec import method_run
    run = method_run(cfg or ctx.cfg, method, seed)
    ctx.table(run.eval)  # the rule's output: a missing one names the run
    path = run.eval_dir / "final_per_problem.parquet"
    if not path.exists():
        raise MissingArtifact(f"{path}: per-problem evaluation of {method} seed {seed} not found; rerun "
                              f"`sparserl rl-eval --method {run.method} --seed {seed}` with this config")
    return ctx.table(path, need=("benchmark", "id", "p"))


def rl_accuracy(ctx: Context, a: str, b: str | None = None) -> Interval:
    """Final held-out accuracy (mean over benchmarks of mean@k, as runs.parquet) of run a, or a - b."""
    seeds = _rl_methods(ctx.cfg, *[m for m in (a, b) if m])
    runs = ctx.table(ctx.P.rl_runs(), need=("method", "seed", "eval_accuracy_final", "rollouts_total"))

    def by_seed(m):
        r = runs[runs["method"] == m].set_index("seed")["eval_accuracy_final"]
        if r.empty:
            raise MissingArtifact(f"{ctx.P.rl_runs()}: no row for method {m}; rerun `sparserl rl-summary`")
        return r

    ra, rb = by_seed(a), (by_seed(b) if b else None)
    detail = f"{ra.mean():.3f}" + (f" vs {rb.mean():.3f}" if b else "")
    rollouts = runs.groupby("method")["rollouts_total"].mean()
    detail += " (rollouts " + " vs ".join(f"{rollouts[m]:.0f}" for m in (a, b) if m) + ")"
    detail += sharpening_context(runs, [m for m in (a, b) if m])
    trees, note = _pool(ctx.trees(), *[m for m in (a, b) if m])
    arm_a, problems = _runs_array(ctx, a, trees)
    arm_b = _runs_array(ctx, b, trees, problems)[0] if b else None
    bench = problems["benchmark"].to_numpy()
    m, lo, hi, design = hb.interval(arm_a, bench, b=arm_b, n_boot=BOOT, seed=BOOT_SEED)
    iv = Interval(m, lo, hi, _hierarchical_method(design, "paired with b by start and problem" if b else "") + note,
                  detail)
    if len(trees) == 1:
        return _no_narrower_than_t(iv, seed_interval(ra, rb) if len(seeds) >= 2 else None)
    acc_b = _run_accuracies(arm_b, bench) if b else None
    iv = Interval(iv.value, iv.lo, iv.hi, iv.method, iv.detail + _per_start(trees, arm_a, arm_b, bench))
    return _no_narrower_than_t(iv, _runs_t(_run_accuracies(arm_a, bench), acc_b) if design.seeds >= 2 else None)


def _run_accuracies(arm: np.ndarray, benchmarks, baseline: np.ndarray | None = None) -> pd.Series:
    """Each run's accuracy (or gain over its start's `baseline`), indexed by (start, seed) position."""
    pw = hb.point_weights(benchmarks)
    acc = np.asarray(arm, float) @ pw - (0.0 if baseline is None else (np.asarray(baseline, float) @ pw)[:, None])
    return pd.Series(acc.ravel(), index=pd.MultiIndex.from_product([range(acc.shape[0]), range(acc.shape[1])]))


def _runs_t(a: pd.Series, b: pd.Series | None = None) -> Interval:
    """`seed_interval` over pooled runs (start, seed): paired by run when both arms hold the same."""
    iv = seed_interval(a, b)
    return Interval(iv.value, iv.lo, iv.hi, iv.method.replace(" seeds", " runs (starts x seeds)"))


def _per_start(trees: list, arm_a: np.ndarray, arm_b: np.ndarray | None, benchmarks,
               base: np.ndarray | None = None) -> str:
    """'; per start 0, 1: +0.012, +0.030': the pooled quantity of each start alone."""
    vals = [hb.point(arm_a[i:i + 1], benchmarks, None if base is None else base[i:i + 1])
            - (hb.point(arm_b[i:i + 1], benchmarks) if arm_b is not None else 0.0) for i in range(arm_a.shape[0])]
    starts = sorted(t.start for t in trees)
    return f"; per start {', '.join(map(str, starts))}: {', '.join(f'{v:+.3f}' for v in vals)}"


def _no_narrower_than_t(iv: Interval, t: Interval | None) -> Interval:
    """The bootstrap interval widened to the Student t interval over seeds where that is wider: a
    percentile bootstrap over a handful of seeds (3 at small) understates their spread (it draws
    from n points with variance (n - 1)/n of theirs, at normal quantiles), while t over seeds leaves
    out the problems' sampling; the union keeps both."""
    if t is None or not np.isfinite(t.lo) or (t.lo >= iv.lo and t.hi <= iv.hi):
        return iv
    return Interval(iv.value, min(iv.lo, t.lo), max(iv.hi, t.hi), f"{iv.method}, widened to {t.method}", iv.detail)


def _tree_table(table: pd.DataFrame, tree, pooled: bool, path) -> pd.DataFrame:
    """A per-problem table labelled with its start: its own `start` column (`sparserl rl-eval` and
    `sparserl evaluate` write it), else its tree's pretrain.start_seed; a pooled tree's must agree."""
    if "start" not in table:
        return table.assign(start=tree.start)
    if pooled and set(table["start"]) != {tree.start}:
        raise BadArtifact(f"{path}: start {sorted(set(table['start']))}, but its tree's pretrain.start_seed is "
                          f"{tree.start}; rerun its evaluation with that tree's config")
    return table


def _runs_array(ctx: Context, method: str, trees: list, problems: pd.DataFrame | None = None, col: str = "p"):
    """((starts, seeds, J) per-problem scores of a method's runs in `trees`, each tree a start, the
    (benchmark, id) order: the first run's unless given): `hierarchical_bootstrap.arm_array`, the
    builder the head-to-head uses too (`head_to_head.runs_array`)."""
    from sparserl.methods.spec import method_run
    frames = []
    for t in trees:
        for s in t.cfg["rl"]["seeds"]:
            pp = _per_problem(ctx, method, s, t.cfg)
            frames.append(_tree_table(pp, t, len(trees) > 1, method_run(t.cfg, method, s).eval_dir).assign(seed=s))
    long = pd.concat(frames, ignore_index=True)
    if problems is None:
        problems = frames[0][["benchmark", "id"]].reset_index(drop=True)
    try:
        return hb.arm_array(long, problems, col, f"{method}'s final_per_problem.parquet tables"), problems
    except ValueError as e:
        raise BadArtifact(str(e)) from None


def _hierarchical_method(design, paired: str = "") -> str:
    """The CI column's text: the bootstrap and its levels (`hierarchical_bootstrap.Design`)."""
    return f"hierarchical bootstrap ({BOOT}x{', ' + paired if paired else ''}): {design.text()}"


# context beside mean@k, which sharpening alone raises; no paper reports these, so they
# take no part in a status. The learning-vs-sharpening reading is the slip-template split
# (chosen by a hash; world 2.0), and the greedy-wrong split shows both flips, never its gain alone
CONTEXT = (("eval_greedy_final", "greedy", "{:.3f}"), ("eval_pass_final", "pass@k", "{:.3f}"),
           ("eval_slip_greedy_gain", "slip-template greedy change", "{:+.3f}"),
           ("eval_other_greedy_gain", "other-template greedy change", "{:+.3f}"),
           ("greedy_wrong_to_right", "greedy wrong -> right", "{:.1f}"),
           ("greedy_right_to_wrong", "right -> wrong", "{:.1f}"))


def sharpening_context(runs: pd.DataFrame, methods: list[str]) -> str:
    """'; greedy .61 vs .58; pass@16 ...' from runs.parquet's seed means, for the columns it has
    (runs evaluated without a greedy pass have none or NaN; world 1 has no
    slip templates, so no slip-template change)."""
    means = runs.groupby("method")[[c for c, _, _ in CONTEXT if c in runs]].mean()
    name = "/".join(sorted(set(runs["pass_metric"]) - {""})) if "pass_metric" in runs else ""
    parts = []
    for col, label, fmt in CONTEXT:
        if col in means and all(np.isfinite(means.loc[m, col]) for m in methods):
            label = label.replace("pass@k", name or "pass@k")
            parts.append(f"{label} " + " vs ".join(fmt.format(means.loc[m, col]) for m in methods))
    return "; " + "; ".join(parts) if parts else ""


def rl_diff(a: str, b: str):
    return dict(inputs=_rl_inputs(a, b), measure=lambda ctx: rl_accuracy(ctx, a, b))


def _start_per_problem_path(cfg: dict) -> Path:
    from sparserl.evaluation.evaluate import per_problem_path
    policy = (cfg.get("rl") or {}).get("policy")
    if not policy:
        raise NotRun("rl.policy is not set: no start policy to measure a gain from")
    return per_problem_path(Paths(cfg).eval_table(policy))


def _gain_inputs(method: str):
    def inputs(cfg):
        trees = _pool(_pool_trees(cfg), method)[0]
        return _rl_inputs(method)(cfg) + [Paths(t.cfg).eval_table(t.cfg["rl"]["policy"]) for t in trees]
    return inputs


def _start_path(tree) -> Path:
    path = _start_per_problem_path(tree.cfg)
    if not path.exists():
        raise MissingArtifact(f"{path}: the start policy's per-problem evaluation is missing; run "
                              f"`snakemake --cores 2 {Paths(tree.cfg).eval_table(tree.cfg['rl']['policy'])}`")
    return path


def _start_array(ctx: Context, trees: list, problems: pd.DataFrame, what: str) -> np.ndarray:
    """(starts, J): each tree's start policy's per-problem scores (its own evaluation)."""
    frames, paths = [], []
    for t in trees:
        path = _start_path(t)
        frames.append(_tree_table(ctx.table(path, need=("benchmark", "id", "p")), t, len(trees) > 1, path))
        paths.append(str(path))
    try:
        return hb.arm_array(pd.concat(frames, ignore_index=True).assign(seed=0), problems, "p",
                            ", ".join(paths))[:, 0, :]
    except ValueError as e:
        raise BadArtifact(f"{e} (against {what}'s problems)") from None


def rl_gain(ctx: Context, method: str) -> Interval:
    """Final held-out accuracy of `method` minus its start policy's (runs.parquet's eval_gain; the
    start's from its `evaluation.start_k` samples a problem), with the hierarchical bootstrap's
    interval: start policies, seeds within each, problems, paired with the start's own scores; with
    head_to_head.pool, each start's runs against their own start policy."""
    seeds = _rl_methods(ctx.cfg, method)
    runs = ctx.table(ctx.P.rl_runs(), need=("method", "seed", "eval_accuracy_final"))
    if "eval_gain" not in runs:
        raise NotRun("runs.parquet has no eval_gain (the DAG does not evaluate the start policy)")
    trees, note = _pool(ctx.trees(), method)
    for t in trees:
        _start_path(t)  # named before the runs' tables, as ever
    arm, problems = _runs_array(ctx, method, trees)
    base = _start_array(ctx, trees, problems, method)
    if base.shape[0] != arm.shape[0]:
        raise BadArtifact(f"{_start_per_problem_path(ctx.cfg)}: {base.shape[0]} start policies but {method}'s runs "
                          f"descend from {arm.shape[0]}; evaluate every start policy")
    bench = problems["benchmark"].to_numpy()
    m, lo, hi, design = hb.interval(arm, bench, baseline=base, n_boot=BOOT, seed=BOOT_SEED)
    iv = Interval(m, lo, hi, _hierarchical_method(design, "paired with the start") + note)
    if len(trees) == 1:
        gains = runs[runs["method"] == method].set_index("seed")["eval_gain"]
        return _no_narrower_than_t(iv, seed_interval(gains) if len(seeds) >= 2 else None)
    iv = Interval(iv.value, iv.lo, iv.hi, iv.method, _per_start(trees, arm, None, bench, base).lstrip("; "))
    return _no_narrower_than_t(iv, _runs_t(_run_accuracies(arm, bench, base)) if design.seeds >= 2 else None)


def collapses(method: str, name: str) -> Premise:
    """The premise that `method` collapses here: its final accuracy falls below its start's."""
    return Premise(text=f"{name} collapses", quantity=f"accuracy({name}) - accuracy(start policy)",
                   relation="<", threshold=0.0, inputs=_gain_inputs(method),
                   measure=lambda ctx: rl_gain(ctx, method))


def gain_margin(method: str, name: str) -> Margin:
    return Margin(of=f"{name}'s gain over the start policy", inputs=_gain_inputs(method),
                  gain=lambda ctx: rl_gain(ctx, method))


# --------------------------------------------------------------------------- V0

def _v0_inputs(protocol: str):
    def inputs(cfg):
        if (cfg.get("v0") or {}).get("harvest") is None:
            raise NotRun("no v0.harvest in this config: V0's tables are not built")
        P = Paths(cfg)
        return [P.value_eval(f"v0_{protocol}"), P.value_eval(f"v0_{protocol}_predictions")]
    return inputs


def _context_aucs(pred: pd.DataFrame, method: str) -> pd.Series:
    from sparserl.values.v0.metrics import auc
    d = pred[pred["method"] == method]
    if d.empty:
        raise NotRun(f"V0's predictions table has no method {method}")
    return d.groupby(["model", "step"], sort=True).apply(lambda g: auc(g["value"] >= 0.5, g["p"]), include_groups=False)


def v0_auc_interval(ctx: Context, protocol: str, a: str, b: str | None = None) -> Interval:
    """Intra-context AUC of method a (or a - b) over every policy ('all' rows of V0's table)."""
    metrics = ctx.table(ctx.P.value_eval(f"v0_{protocol}"), need=("method", "model", "seed", "intra_auc"))
    rows = metrics[metrics["model"] == "all"]

    def by_seed(m):
        r = rows[rows["method"] == m].set_index("seed")["intra_auc"]
        if r.empty:
            raise NotRun(f"V0's {protocol} table has no method {m}")
        return r

    ra, rb = by_seed(a), (by_seed(b) if b else None)
    detail = f"{ra.mean():.3f} vs {rb.mean():.3f}" if b else ""
    if len(ra) >= 2 and (rb is None or len(rb) >= 2):
        iv = seed_interval(ra, rb)
        return Interval(iv.value, iv.lo, iv.hi, iv.method, detail)
    pred = ctx.table(ctx.P.value_eval(f"v0_{protocol}_predictions"), need=("method", "model", "step", "value", "p"))
    # a context whose queries all succeed or all fail has no AUC (intra_context_auc skips it too)
    both = pd.concat([_context_aucs(pred, m).rename(m) for m in (a, b) if m], axis=1).dropna()
    if both.empty:
        return Interval(np.nan, np.nan, np.nan, "no checkpoint context with both outcomes", detail)
    m, lo, hi = group_bootstrap(both[a].to_numpy(), both[b].to_numpy() if b else None)
    return Interval(m, lo, hi, f"bootstrap over {len(both)} checkpoint contexts (1 seed, {BOOT}x"
                    f"{', paired' if b else ''})", detail)


def v0_auc(protocol: str, a: str, b: str | None = None):
    return dict(inputs=_v0_inputs(protocol), measure=lambda ctx: v0_auc_interval(ctx, protocol, a, b))


def auc_margin(protocol: str, method: str, name: str) -> Margin:
    """B's own achievement for an AUC: its intra-context AUC above chance (0.5)."""
    def gain(ctx):
        iv = v0_auc_interval(ctx, protocol, method)
        return Interval(iv.value - 0.5, iv.lo - 0.5, iv.hi - 0.5, iv.method)
    return Margin(of=f"{name}'s AUC above chance (0.5)", inputs=_v0_inputs(protocol), gain=gain)


# --------------------------------------------------------------------------- BASIS value study

def _basis_inputs(*names: str):
    def inputs(cfg):
        from sparserl.studies import StudyPaths, study_refs
        if not study_refs(cfg):
            raise NotRun("no basis.study_reference/study_oracle in this config: the value study does not run")
        SP = StudyPaths(cfg)
        return [SP.summary("basis") if n == "summary" else SP.table("basis", n) for n in names]
    return inputs


def _checkpoint_inputs(*names: str):
    """The RL-checkpoint study's tables (basis.study_checkpoints), or not run without it."""
    def inputs(cfg):
        from sparserl.studies import StudyPaths
        from sparserl.studies.basis_checkpoints import checkpoint_settings
        if not checkpoint_settings(cfg):
            raise NotRun("no basis.study_checkpoints in this config: the RL-checkpoint value study does not run")
        return [StudyPaths(cfg).table("basis", n) for n in names]
    return inputs


def basis_headline(key: str):
    """A paired relative MSE change of the study's summary (its bootstrap over batches)."""
    def measure(ctx):
        from sparserl.studies import StudyPaths
        path = StudyPaths(ctx.cfg).summary("basis")
        head = ctx.json(path).get("headline", {})
        if key not in head:
            raise MissingArtifact(f"{path}: headline has no {key!r}; rerun `sparserl study-basis-summary`")
        r = head[key]
        lo, hi = (float(v) for v in r["ci95"])
        return Interval(float(r["pct_change"]), lo, hi,
                        f"the study's paired bootstrap over {r['n_batches']} batches")
    return dict(inputs=_basis_inputs("summary"), measure=measure)


def basis_sensitivity_n(ctx: Context, small: float = 8, large: float = 64) -> Interval:
    """MSE change from n = 8 to n = 64 cached reference rollouts (BASIS Figure 5): 100 (mse_64 /
    mse_8 - 1) from the n-sensitivity table, normal interval from its s.e. (delta method, the two
    settings' s.e. combined as independent: each setting draws its own batches)."""
    from sparserl.studies import StudyPaths
    t = ctx.table(StudyPaths(ctx.cfg).table("basis", "sensitivity_n"), need=("value", "skipped", "mse", "mse_se"))
    ran = t[(t["skipped"].fillna("") == "") & t["mse"].notna()].set_index("value")
    if small not in ran.index or large not in ran.index:
        raise NotRun(f"the n-sensitivity table has no run at n={small:g} and n={large:g} "
                     f"(ran: {', '.join(f'{v:g}' for v in ran.index) or 'none'}; the cache holds basis.reference_n)")
    a, b = ran.loc[small], ran.loc[large]
    return _pct_change(a, b, f"n={small:g}: {a['mse']:.4f}, n={large:g}: {b['mse']:.4f}")


# the estimator of BASIS Figure 2 before batchwise refinement, if the study ever reports it


def basis_refined_vs_initial(ctx: Context) -> Interval:
    """BASIS Figure 2, from the RL-checkpoint study's `stage_initial_vs_refined` table at the middle
    checkpoint: the MSE of the refined estimator against the initial one, each averaged over the
    beta calibration grid (the paper's axis: "much less sensitive to a calibration
    hyperparameter"), as a % change with a normal interval from the rows' s.e. The detail names
    both estimators' best beta, which the average does not show."""
    from sparserl.studies import StudyPaths
    t = ctx.table(StudyPaths(ctx.cfg).table("basis", "stage_initial_vs_refined"),
                  need=("stage", "estimator", "beta", "mse", "mse_se"))
    stage = "middle" if "middle" in set(t["stage"]) else sorted(set(t["stage"]))[len(set(t["stage"])) // 2]
    t = t[t["stage"] == stage]
    rows = {}
    for est in ("initial", "refined"):
        e = t[t["estimator"] == est]
        if e.empty:
            raise BadArtifact(f"{StudyPaths(ctx.cfg).table('basis', 'stage_initial_vs_refined')}: no "
                                  f"'{est}' rows at stage {stage}; rerun `sparserl study-basis-stages`")
        rows[est] = pd.Series({"mse": e["mse"].mean(), "mse_se": math.sqrt((e["mse_se"] ** 2).sum()) / len(e),
                               "best": e["mse"].min()})
    a, b = rows["initial"], rows["refined"]
    return _pct_change(a, b, f"{stage} checkpoint, mean over the beta grid: initial {a['mse']:.4f}, refined "
                             f"{b['mse']:.4f}; best beta: initial {a['best']:.4f}, refined {b['best']:.4f}")


def _pct_change(a: pd.Series, b: pd.Series, detail: str) -> Interval:
    """100 (mse_b / mse_a - 1) with a normal interval from the two rows' s.e. (delta method,
    combined as independent)."""
    r = b["mse"] / a["mse"]
    se = 100 * r * math.sqrt((b["mse_se"] / b["mse"]) ** 2 + (a["mse_se"] / a["mse"]) ** 2)
    pct, z = 100 * (r - 1), normal_quantile(0.5 + LEVEL / 2)
    return Interval(float(pct), float(pct - z * se), float(pct + z * se),
                    "normal from the table's s.e. (delta method)", detail)


# --------------------------------------------------------------------------- Le Critique

def _critique_kind(method: str) -> str:
    """mean / vf / pvf / tether / other, from the method's role (lambda_GAE = 1 only)."""
    from sparserl.studies.le_critique import role
    return {"Mean": "mean", "VF": "vf", "Pvf": "pvf", "Tether": "tether"}.get(role(method), "other")


def _critique_exp(cfg: dict, exp: str):
    from sparserl.envs.world import experiments
    if not (cfg.get("critique") or {}).get("experiments"):
        raise NotRun("no critique.experiments in this config")
    for e in experiments(cfg):
        if e.name == exp:
            return e
    raise NotRun(f"critique.experiments of this config has no {exp}")


def _critique_method(cfg: dict, exp: str, kind: str) -> str:
    e = _critique_exp(cfg, exp)
    found = [m for m in e.methods if _critique_kind(m) == kind]
    if not found:
        raise NotRun(f"experiment {exp} runs no {kind.upper() if kind != 'tether' else 'Tether'} method")
    return found[0]


def _critique_inputs(exp: str, *kinds: str, runs: bool = False):
    def inputs(cfg):
        from sparserl.envs.world import CritiquePaths
        for k in kinds:
            _critique_method(cfg, exp, k)
        CP = CritiquePaths(cfg)
        return [CP.final_table()] + ([CP.runs_table()] if runs else [])
    return inputs


def _critique_col(ctx: Context, exp: str, method: str, col: str) -> pd.Series:
    from sparserl.envs.world import CritiquePaths
    path = CritiquePaths(ctx.cfg).final_table()
    f = ctx.table(path, need=("experiment", "method", "seed", col))
    r = f[(f["experiment"] == exp) & (f["method"] == method)].set_index("seed")[col]
    if r.empty:
        raise MissingArtifact(f"{path}: no run of {method} in {exp}; rerun `sparserl critique-summary`")
    return r


def critique_diff(exp: str, col: str, a: str, b: str):
    """Per-seed `col` of final.parquet, kind a minus kind b in experiment exp."""
    def measure(ctx):
        ma, mb = _critique_method(ctx.cfg, exp, a), _critique_method(ctx.cfg, exp, b)
        ra, rb = _critique_col(ctx, exp, ma, col), _critique_col(ctx, exp, mb, col)
        iv = seed_interval(ra, rb)  # one seed: no interval (final.parquet has no per-unit data)
        return Interval(iv.value, iv.lo, iv.hi, iv.method, f"{ma} {ra.mean():.3f} vs {mb} {rb.mean():.3f}")
    return dict(inputs=_critique_inputs(exp, a, b), measure=measure)


def critic_learns(exp: str) -> Premise:
    """Le Critique's value baselines rest on a critic that explains some return variance: EV(VF) > 0
    at the end of the run (t over seeds; one seed gives no interval, so unclear)."""
    def measure(ctx):
        m = _critique_method(ctx.cfg, exp, "vf")
        iv = seed_interval(_critique_col(ctx, exp, m, "ev_final"))
        return Interval(iv.value, iv.lo, iv.hi, iv.method)
    return Premise(text="the critic learns", quantity=f"EV(VF), final, {exp}", relation=">", threshold=0.0,
                   inputs=_critique_inputs(exp, "vf"), measure=measure)


def tether_rho(exp: str):
    """Tether's final rho (t over seeds), with its first-step value from runs.parquet."""
    def measure(ctx):
        from sparserl.envs.world import CritiquePaths
        m = _critique_method(ctx.cfg, exp, "tether")
        r = _critique_col(ctx, exp, m, "rho_final")
        runs = ctx.table(CritiquePaths(ctx.cfg).runs_table(), need=("experiment", "method", "step"))
        d = runs[(runs["experiment"] == exp) & (runs["method"] == m)]
        first = d[d["step"] == d["step"].min()]["est_tether_rho"].mean() if "est_tether_rho" in d else float("nan")
        iv = seed_interval(r)
        return Interval(iv.value, iv.lo, iv.hi, iv.method, f"rho after the first step {first:.3f}, final {r.mean():.3f}")
    return dict(inputs=_critique_inputs(exp, "tether", runs=True), measure=measure)


# --------------------------------------------------------------------------- the claims

def _claims() -> list[Claim]:
    C = []
    add = lambda **kw: C.append(Claim(**kw))  # noqa: E731

    # V0 (paper 001): Tables 1 and 2, Figure 5 (left)
    add(id="v0.sequential_auc", paper="V0", target="v0/t1",
        claim="V0 maintains high accuracy (Intra-AUC >0.85) from the very first step (Table 1, sequential alignment)",
        paper_number="Intra-AUC > 0.85", quantity="intra-context AUC of V0, sequential protocol, every policy",
        relation=">", threshold=0.85, paper_value=0.85, scale_free=True, **v0_auc("sequential", "v0"))
    add(id="v0.sequential_vs_vanilla", paper="V0", target="v0/t1",
        claim="V0 consistently outperforms coupled baselines across all architectures (Table 1)",
        paper_number="V0 above the Vanilla VM (Table 1)",
        quantity="AUC(V0) - AUC(vanilla value model), sequential", relation=">", threshold=0.0,
        **v0_auc("sequential", "v0", "vanilla_value_model"))
    add(id="v0.sequential_matches_stepwise", paper="V0", target="v0/t1",
        claim="it matches the computationally expensive Step-wise Retrain method (Table 1)",
        paper_number="V0 = Step-wise Retrain",
        quantity=f"AUC(V0) - AUC(step-wise retrain), sequential; 'matches' = above -{NI_FRACTION:g} x step-wise "
                 "retrain's AUC above chance", relation=">", threshold=np.nan,
        margin=auc_margin("sequential", "stepwise_retrain", "step-wise retrain"),
        **v0_auc("sequential", "v0", "stepwise_retrain"))
    add(id="v0.strict_vs_vanilla", paper="V0", target="v0/t2",
        claim="the Vanilla VM collapses to near-random guessing (AUC .560). In contrast, V0 retains robust "
              "predictive power (AUC .710) (Table 2, strict generalisation)",
        paper_number=".710 vs .560 (+.150)", quantity="AUC(V0) - AUC(vanilla value model), strict",
        relation=">", threshold=0.0, paper_value=0.150, scale_free=True,
        **v0_auc("strict", "v0", "vanilla_value_model"))
    add(id="v0.budget_allocation", paper="V0", target="v0/f5_budget",
        claim="By using V0 to estimate sample difficulty ... improving performance on OlympiadBench by ~2% "
              "compared to the allocation baselines w/o using V0 (Figure 5, left)",
        paper_number="+~2 points", quantity="accuracy(V0 budget allocation) - accuracy(uniform GRPO G=8)",
        relation=">", threshold=0.0, paper_value=0.02, **rl_diff("grpo_budget_v0", "grpo_g8"))

    # V0.5 (paper 000, the analysis of arXiv 2603.10848): Figures 1 and 5
    add(id="v05.osla_vs_grpo16", paper="V0.5", target="v05/f1",
        claim="V0.5 with only 4 initial rollouts outperforms standard GRPO and DAPO at 16 rollouts, achieving "
              "over 10% absolute accuracy improvement (Figure 1)",
        paper_number="> +10 points", quantity="accuracy(V0.5 OSLA) - accuracy(GRPO G=16)",
        relation=">", threshold=0.0, paper_value=0.10, **rl_diff("v05_osla", "grpo_g16"))
    add(id="v05.osla_vs_dapo16", paper="V0.5", target="v05/f1",
        claim="The relative ordering is consistently V0.5 > DAPO > GRPO on all benchmarks (Figure 1)",
        paper_number="V0.5 above DAPO G=16", quantity="accuracy(V0.5 OSLA) - accuracy(DAPO G=16)",
        relation=">", threshold=0.0, **rl_diff("v05_osla", "dapo_g16"))
    add(id="v05.k4_vs_grpo16", paper="V0.5", target="v05/f5",
        claim="With k = 4 or k = 8, V0.5 (fusion only, no dynamic allocation) matches or outperforms GRPO at "
              "G = 16 across all six benchmarks (Figure 5)",
        paper_number="k=4 >= G=16 (curves, no numbers)",
        quantity=f"accuracy(V0.5 k=4) - accuracy(GRPO G=16); 'matches' = above -{NI_FRACTION:g} x GRPO G=16's "
                 "gain", relation=">", threshold=np.nan, margin=gain_margin("grpo_g16", "GRPO G=16"),
        **rl_diff("v05_k4", "grpo_g16"))
    add(id="v05.k8_vs_grpo16", paper="V0.5", target="v05/f5",
        claim="With k = 8, V0.5 outperforms GRPO (G = 16) more clearly, achieving higher final accuracy (Figure 5)",
        paper_number="k=8 > G=16 (curves)", quantity="accuracy(V0.5 k=8) - accuracy(GRPO G=16)",
        relation=">", threshold=0.0, **rl_diff("v05_k8", "grpo_g16"))
    for k in (1, 2):
        add(id=f"v05.k{k}_collapse", paper="V0.5", target="v05/f5",
            claim=f"convergence fails completely at k = 1, 2 but succeeds at k = 4, 8 (Figure 5; here k = {k})",
            paper_number=f"k={k} fails, k=4 converges", quantity=f"accuracy(V0.5 k={k}) - accuracy(V0.5 k=4)",
            relation="<", threshold=0.0, premise=collapses(f"v05_k{k}", f"V0.5 k={k}"),
            **rl_diff(f"v05_k{k}", "v05_k4"))
    add(id="v05.osla_vs_k4", paper="V0.5", target="v05/f5",
        claim="V0.5 with OSLA (Figure 1) achieves higher final accuracy than V0.5 with fixed k = 4 (Figure 5) "
              "on most benchmarks, though the improvement is modest",
        paper_number="OSLA > k=4 (modest)", quantity="accuracy(V0.5 OSLA) - accuracy(V0.5 k=4)",
        relation=">", threshold=0.0, **rl_diff("v05_osla", "v05_k4"))
    add(id="v05.k4_vs_grpo4", paper="V0.5", target="head_to_head/final",
        claim="The paper's implicit claim is that GRPO at G = 4 would perform worse (not shown; the analysis)",
        paper_number="not measured by the paper", quantity="accuracy(V0.5 k=4) - accuracy(GRPO G=4)",
        relation=">", threshold=0.0, **rl_diff("v05_k4", "grpo_g4"))

    # BASIS (paper 004): Section 5.1, Figures 2, 3a, 5; Table 1
    add(id="basis.mse_vs_reinforce_pp", paper="BASIS", target="basis/f3a",
        claim="Compared with single-rollout baselines such as REINFORCE++, BASIS reduces the MSE by 69% (Figure 3a)",
        paper_number="-69%", quantity="100 (MSE(BASIS G=1) / MSE(REINFORCE++ G=1) - 1)", fmt="{:+.1f}%",
        relation="<", threshold=0.0, paper_value=-69.0, scale_free=True, **basis_headline("basis_vs_reinforce_pp_pct"))
    add(id="basis.mse_vs_grpo8", paper="BASIS", target="basis/f3a",
        claim="even with one rollout per prompt, BASIS achieves lower MSE than GRPO and RLOO with 8 rollouts (Figure 3a)",
        paper_number="MSE(BASIS G=1) < MSE(GRPO G=8)", quantity="100 (MSE(BASIS G=1) / MSE(GRPO G=8) - 1)",
        fmt="{:+.1f}%", relation="<", threshold=0.0, scale_free=True, **basis_headline("basis_vs_grpo_g8_pct"))
    add(id="basis.refined_vs_initial", paper="BASIS", target="basis/f2",
        claim="the refined estimator achieves considerably lower MSE and is much less sensitive to a calibration "
              "hyperparameter (Figure 2)",
        paper_number="refined < initial", quantity="100 (MSE(refined) / MSE(initial) - 1)", fmt="{:+.1f}%",
        relation="<", threshold=0.0, inputs=_checkpoint_inputs("stage_initial_vs_refined"),
        measure=basis_refined_vs_initial)
    add(id="basis.sensitivity_n", paper="BASIS", target="basis/f5b",
        claim="Increasing the offline cache from n=8 to n=64 reduces MSE by approximately 55-59% (Figure 5)",
        paper_number="-55% to -59%", quantity="100 (MSE(n=64) / MSE(n=8) - 1), BASIS G=1", fmt="{:+.1f}%",
        relation="<", threshold=0.0, paper_value=(-59.0, -55.0), scale_free=True,
        inputs=_basis_inputs("sensitivity_n"), measure=basis_sensitivity_n)
    add(id="basis.rl_vs_grpo8", paper="BASIS", target="basis/t1",
        claim="BASIS is competitive with 8-rollout methods while halving the online learning budget ... a gain of "
              "0.2 percentage points (Table 1, GRPO)",
        paper_number="+0.2 points at 76.8K vs 153.6K rollouts",
        quantity=f"accuracy(GRPO G=1 + BASIS, half the steps) - accuracy(GRPO G=8); 'competitive' = above "
                 f"-{NI_FRACTION:g} x GRPO G=8's gain", relation=">", threshold=np.nan, paper_value=0.002,
        margin=gain_margin("grpo_g8", "GRPO G=8"), **rl_diff("basis_grid_grpo_g1_basis", "grpo_g8"))
    add(id="basis.rl_vs_rpp", paper="BASIS", target="basis/t1",
        claim="BASIS improves the average accuracy ... by 4.2 and 2.0 percentage points over their REINFORCE++ "
              "variants (Table 1, GRPO: 4.2)",
        paper_number="+4.2 points", quantity="accuracy(GRPO G=1 + BASIS) - accuracy(GRPO G=1 + REINFORCE++)",
        relation=">", threshold=0.0, paper_value=0.042, **rl_diff("basis_grid_grpo_g1_basis", "basis_grid_grpo_g1_rpp"))
    add(id="basis.rl_vs_vanilla", paper="BASIS", target="basis/t1",
        claim="BASIS improves the average accuracy across the seven benchmarks by 28.1 and 25.6 percentage points "
              "over single-rollout vanilla GRPO and GPG (Table 1, GRPO: 28.1)",
        paper_number="+28.1 points", quantity="accuracy(GRPO G=1 + BASIS) - accuracy(vanilla GRPO G=1)",
        relation=">", threshold=0.0, paper_value=0.281,
        premise=collapses("basis_grid_grpo_g1_vanilla", "vanilla GRPO G=1"),
        **rl_diff("basis_grid_grpo_g1_basis", "basis_grid_grpo_g1_vanilla"))

    # Le Critique (paper 002): Figures 3-7, per task
    tasks = {"rg_k1": "Reasoning Gym K=1", "rg_k8": "Reasoning Gym K=8", "codeio_k4": "CodeIO K=4",
             "sudoku_k4": "Sudoku K=4"}
    for exp, name in tasks.items():
        add(id=f"lc.pvf_ev.{exp}", paper="Le Critique", target="le_critique/f4",
            claim=f"Pvf explains more return variance than VF in every environment (Figure 4; {name})",
            paper_number="EV(Pvf) > EV(VF) (bars)", quantity=f"EV(Pvf) - EV(VF), final {50} value batches, {name}",
            relation=">", threshold=0.0, **critique_diff(exp, "ev_final", "pvf", "vf"))
    for exp, name in tasks.items():
        add(id=f"lc.pvf_reward.{exp}", paper="Le Critique", target="le_critique/f7",
            claim=f"privileged conditioning improves the value baseline across all four tasks (Figures 3, 7; {name})",
            paper_number="Pvf > VF (curves)", quantity=f"final train reward(Pvf) - (VF), {name}",
            relation=">", threshold=0.0, premise=critic_learns(exp), **critique_diff(exp, "final_reward", "pvf", "vf"))
    for exp in ("rg_k8", "codeio_k4", "sudoku_k4"):
        add(id=f"lc.tether_vs_vf.{exp}", paper="Le Critique", target="le_critique/f5",
            claim=f"Tether consistently outperforms the simple value function baseline (VF) across all four tasks "
                  f"(Figures 5, 7; {tasks[exp]})",
            paper_number="Tether > VF (curves)", quantity=f"final train reward(Tether) - (VF), {tasks[exp]}",
            relation=">", threshold=0.0, premise=critic_learns(exp),
            **critique_diff(exp, "final_reward", "tether", "vf"))
    for exp in ("rg_k8", "codeio_k4", "sudoku_k4"):
        add(id=f"lc.rho.{exp}", paper="Le Critique", target="le_critique/f6",
            claim=f"All runs begin with rho=0 ... The coefficient then moves away from zero (Figure 6; {tasks[exp]})",
            paper_number="rho: 0 -> above 0", quantity=f"Tether's final rho, {tasks[exp]}",
            relation=">", threshold=0.0, scale_free=True, **tether_rho(exp))
    add(id="lc.vf_vs_mean.rg_k8", paper="Le Critique", target="le_critique/f7",
        claim="The improvement is smaller but still present at K=8, and both value baselines beat Mean in this task "
              "(Reasoning Gym K=8)",
        paper_number="VF > Mean", quantity="final train reward(VF) - (Mean), Reasoning Gym K=8",
        relation=">", threshold=0.0, premise=critic_learns("rg_k8"),
        **critique_diff("rg_k8", "final_reward", "vf", "mean"))
    add(id="lc.vf_vs_mean.sudoku_k4", paper="Le Critique", target="le_critique/f7",
        claim="Although it does not fully recover the performance of Mean on Sudoku, it substantially mitigates the "
              "degradation suffered by VF (Sudoku)",
        paper_number="VF < Mean", quantity="final train reward(VF) - (Mean), Sudoku K=4",
        relation="<", threshold=0.0, premise=critic_learns("sudoku_k4"),
        **critique_diff("sudoku_k4", "final_reward", "vf", "mean"))
    return C


CLAIMS: list[Claim] = _claims()


# --------------------------------------------------------------------------- the table

def claim_inputs(cfg: dict, claims: list[Claim] | None = None) -> list[str]:
    """Every artifact the claims (their premises and margins too) read that this config makes (the
    rule's inputs)."""
    out = set()
    for c in claims or CLAIMS:
        for fn in (c.inputs, c.premise.inputs if c.premise else None, c.margin.inputs if c.margin else None):
            try:
                out.update(str(p) for p in fn(cfg)) if fn else None
            except NotRun:
                pass
    return sorted(out)


def resolve_target(prefix: str, figures: dict[str, str] | None) -> str:
    """The registered figure whose id is `prefix` or starts with `prefix` + '_' (figure ids are the
    paper's numbers plus a name), else the prefix itself, marked as not drawn by this config."""
    figures = figures or {}
    hits = sorted(i for i in figures if i == prefix or i.startswith(prefix + "_"))
    return str(figures[hits[0]]) if hits else f"{prefix} (no figure registered for this config)"


def _judge_premise(ctx: Context, c: Claim) -> tuple[float, str, str]:
    """(threshold, premise status, premise text) of a claim: a margin's threshold from the compared
    method's gain (absent when it gains nothing), then the claim's own premise."""
    threshold, status, parts = c.threshold, "", []
    if c.margin is not None:
        try:
            g = c.margin.gain(ctx)
        except NotRun as e:
            threshold, status = np.nan, UNCLEAR
            parts.append(f"{c.margin.of}: not measured ({e}), so no margin")
        else:
            ci = f" [{g.lo:+.3f}, {g.hi:+.3f}]" if np.isfinite(g.lo) and np.isfinite(g.hi) else " (no interval)"
            if np.isfinite(g.value) and g.value > 0:
                threshold = -NI_FRACTION * g.value
                parts.append(f"{c.margin.of} {g.value:+.3f}{ci}: margin -{NI_FRACTION:g}x = {threshold:+.3f}")
                status = PRESENT if np.isfinite(g.lo) and g.lo > 0 else UNCLEAR
            else:
                threshold, status = np.nan, ABSENT
                parts.append(f"{c.margin.of} {g.value:+.3f}{ci}: no gain to be non-inferior within")
    if c.premise is not None and status != ABSENT:
        p = c.premise
        try:
            piv = p.measure(ctx)
        except NotRun as e:
            status = UNCLEAR
            parts.append(f"{p.text}: not measured ({e})")
        else:
            status = premise_status(piv, p)
            ci = (f" [{p.fmt.format(piv.lo)}, {p.fmt.format(piv.hi)}]" if np.isfinite(piv.lo) and np.isfinite(piv.hi)
                  else " (no interval)")
            parts.append(f"{p.text}: {p.quantity} = {p.fmt.format(piv.value)}{ci}, needs {p.relation} "
                         f"{p.fmt.format(p.threshold)}")
    return threshold, status, "; ".join(parts)


def build_rows(cfg: dict, figures: dict[str, str] | None = None, claims: list[Claim] | None = None) -> pd.DataFrame:
    """Measure every claim. Raises MissingArtifact naming every missing artifact at once."""
    ctx = Context(cfg)
    rows, missing = [], []
    for c in claims or CLAIMS:
        plo, phi = _paper_range(c.paper_value) if c.paper_value is not None else (np.nan, np.nan)
        row = dict(id=c.id, paper=c.paper, claim=c.claim, paper_number=c.paper_number, quantity=c.quantity,
                   relation=c.relation, threshold=c.threshold, paper_lo=plo, paper_hi=phi, measured=np.nan,
                   ci_lo=np.nan, ci_hi=np.nan, ci_method="", detail="", measured_over_paper=np.nan,
                   scale=cfg["scale"], direction_status="", magnitude_status="", premise="", premise_status="",
                   status="", detectable=np.nan, reason="", target=resolve_target(c.target, figures), sources="")
        prem = ""
        try:
            sources = c.inputs(cfg)
            row["sources"] = " ".join(str(s) for s in sources)
            iv = c.measure(ctx)
            threshold, prem, prem_text = _judge_premise(ctx, c)
        except NotRun as e:
            iv = Interval(np.nan, np.nan, np.nan, "")
            row["reason"] = str(e)
            direction = NOT_RUN
        except MissingArtifact as e:
            missing.append(str(e))
            continue
        else:
            row.update(measured=iv.value, ci_lo=iv.lo, ci_hi=iv.hi, ci_method=iv.method, detail=iv.detail,
                       threshold=threshold, premise=prem_text, premise_status=prem)
            # a margin with no gain to be within: the direction against 0, for the reader only
            direction = decide(iv.lo, iv.hi, c.relation, threshold if np.isfinite(threshold) else 0.0)
            if direction == INCONCLUSIVE:
                row["detectable"] = detectable(iv.lo, iv.hi)
        mag, ratio = magnitude(iv.value, iv.lo, iv.hi, c.paper_value, c.scale_free)
        row.update(measured_over_paper=ratio, direction_status=direction, magnitude_status=mag,
                   status=overall(direction, mag, prem))
        row["fmt"] = c.fmt
        rows.append(row)
    if missing:
        raise MissingArtifact("artifacts the config makes are missing:\n  " + "\n  ".join(dict.fromkeys(missing)))
    return pd.DataFrame(rows)


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _paper_text(r, fmt: str) -> str:
    """The paper's number as its words, then on our scale where it has one."""
    if not np.isfinite(r.paper_lo):
        return r.paper_number
    ours = fmt.format(r.paper_lo) if r.paper_lo == r.paper_hi else f"{fmt.format(r.paper_lo)} to {fmt.format(r.paper_hi)}"
    return f"{r.paper_number} (ours: {ours})"


def _measured_text(r, fmt: str) -> str:
    if r.direction_status == NOT_RUN:
        return f"— ({r.reason})"
    text = fmt.format(r.measured) + (f" [{fmt.format(r.ci_lo)}, {fmt.format(r.ci_hi)}]"
                                     if np.isfinite(r.ci_lo) and np.isfinite(r.ci_hi) else " (no interval)")
    if np.isfinite(r.detectable):
        text += f"; detectable here: ±{fmt.format(r.detectable).lstrip('+')}"
    return text + (f"; {r.detail}" if r.detail else "")


def _premise_cell(r) -> str:
    return f"{r.premise_status}: {r.premise}" if r.premise else "—"


def _threshold_text(r, fmt: str) -> str:
    return fmt.format(r.threshold) if np.isfinite(r.threshold) else "— (no margin)"


def legend() -> list[str]:
    """What the status columns mean (the rule is in code: `decide`, `magnitude`, `overall`)."""
    return [
        "direction (`decide`): for a claim `quantity > t`, reproduced when the 95% interval lies above t, "
        "contradicted when it lies below t, inconclusive when it contains t (the row then gives the smallest "
        f"effect this scale detects at {POWER:.0%} power), untestable when there is no interval (a single run); "
        "mirrored for `<`. t is the paper's bound, 0 for 'A beats B', and for 'A matches B' minus "
        f"{NI_FRACTION:g} x B's own gain (over the start policy, or over chance for an AUC), so the margin "
        "scales with what B achieves here.",
        "premise: the mechanism a claim rests on, measured here (vanilla's collapse, k <= 2's collapse, a "
        "critic that explains variance, a compared method that gains at all): present, absent or unclear by "
        "the same rule. When it is absent the data cannot judge the claim: premise absent.",
        "magnitude (`magnitude`), against the paper's own number on our scale: in CI when our interval "
        f"contains it; for scale-free quantities (AUC, % change of MSE, a coefficient) within "
        f"{MAGNITUDE_FACTOR:g}x when measured / paper lies in [1/{MAGNITUDE_FACTOR:g}, {MAGNITUDE_FACTOR:g}]; "
        "else off by Nx or opposite sign (accuracy points are never compared by a factor across scales); "
        "no paper number where the paper states none.",
        "status (`overall`): not run; premise absent; reproduced only when the direction is reproduced and the "
        f"paper's number is in CI (or, scale-free, within {MAGNITUDE_FACTOR:g}x); direction only when the side "
        "is right but the paper gives no number or its number is off; otherwise inconclusive, untestable "
        "(single run) or contradicted.",
        ("Intervals: RL accuracy and gains by a hierarchical bootstrap over start policies, seeds within each and "
         "benchmark problems (the column CI names the levels and their units), widened to the t interval over "
         "seeds where that is wider; others t over seeds with >= 2 seeds, else a bootstrap over the per-unit "
         "artifact."),
    ]


def _counts(df: pd.DataFrame) -> str:
    counts = df["status"].value_counts()
    return ", ".join(f"{s} {int(counts.get(s, 0))}" for s in STATUSES)


def _header_lines(scale: str, config_name: str, config_hash: str, commit: str, what: str,
                  origin: str = "") -> list[str]:
    lines = [f"Config `{config_name}` (hash `{config_hash}`), commit `{commit}`. Generated by `sparserl claims` "
             f"from cached artifacts (`sparserl.studies.claims`); {what}."]
    if origin:  # restored by `sparserl published rebuild`: the tables' commits, not this code's
        lines.append(f"Measured {origin}.")
    if scale != "paper":
        lines.append(f"**{scale.upper()} SCALE: not paper numbers.** These come from this scale's small policies "
                     "and tasks; they test that each piece behaves as the paper says, and never stand for the "
                     "papers' numbers, which are quoted beside them.")
    return lines


def to_markdown(df: pd.DataFrame, *, scale: str, config_name: str, config_hash: str, commit: str,
                origin: str = "") -> str:
    lines = [f"# Claims of the four papers, measured at scale `{scale}`", ""]
    for p in _header_lines(scale, config_name, config_hash, commit, "the CSV and HTML beside this file hold the "
                                                                        "same rows", origin):
        lines += [p, ""]
    lines += [f"- {item}" for item in legend()] + ["", f"Counts: {_counts(df)}.", "",
              "| # | paper | claim | paper's number | quantity (claim: relation threshold) | measured [95% CI] "
              "| CI | premise | direction | magnitude | status | target | sources |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for i, r in enumerate(df.itertuples(), 1):
        fmt = r.fmt
        lines.append("| " + " | ".join(_cell(x) for x in (
            i, PAPERS.get(r.paper, r.paper), r.claim, _paper_text(r, fmt),
            f"{r.quantity}: {r.relation} {_threshold_text(r, fmt)}", _measured_text(r, fmt), r.ci_method or "—",
            _premise_cell(r), r.direction_status, r.magnitude_status, f"**{r.status}**", f"`{r.target}`",
            " ".join(f"`{s}`" for s in r.sources.split()))) + " |")
    lines.append("")
    return "\n".join(lines)


def to_html(df: pd.DataFrame, *, scale: str, config_name: str, config_hash: str, commit: str,
            origin: str = "") -> str:
    """The same table as one HTML page (for the Snakemake report, which shows HTML inline)."""
    from sparserl.studies.report_tables import css_class, html_page
    intro = [p.replace("**", "").replace("`", "") for p in
             _header_lines(scale, config_name, config_hash, commit, "CLAIMS.md and CLAIMS.csv hold the same rows",
                           origin)]
    intro.append(f"Counts: {_counts(df)}.")
    header = ["#", "paper", "claim", "paper's number", "quantity: relation threshold", "measured [95% CI]", "CI",
              "premise", "direction", "magnitude", "status", "target"]
    rows = [[i, PAPERS.get(r.paper, r.paper), r.claim, _paper_text(r, r.fmt),
             f"{r.quantity}: {r.relation} {_threshold_text(r, r.fmt)}", _measured_text(r, r.fmt), r.ci_method or "—",
             _premise_cell(r), r.direction_status, r.magnitude_status, (r.status, css_class(r.status)), r.target]
            for i, r in enumerate(df.itertuples(), 1)]
    return html_page(f"Claims of the four papers, measured at scale {scale}", intro, header, rows,
                     legend=[x.replace("`", "") for x in legend()])


def html_path(md_path) -> Path:
    """The HTML rendering's path: beside CLAIMS.md (the rule's `html` output)."""
    return Path(md_path).with_suffix(".html")


def write_claims(cfg: dict, md_path, csv_path, *, config_name: str, figures: dict[str, str] | None = None,
                 claims: list[Claim] | None = None, html: str | Path | None = None) -> pd.DataFrame:
    """Measure the claims and write the markdown, the CSV and the HTML page (default beside the
    markdown) atomically, each with a manifest."""
    from sparserl.core.artifacts import atomic_write_text, config_hash, git_commit, write_manifest, write_table
    df = build_rows(cfg, figures, claims)
    from sparserl.core.paths import Paths
    from sparserl.core.published import origin_line
    head = dict(scale=cfg["scale"], config_name=config_name, config_hash=config_hash(cfg), commit=git_commit(),
                origin=origin_line(Paths(cfg).results))
    out = df.drop(columns="fmt")
    write_table(out, csv_path, cfg=cfg, extra={"claims": len(out)})
    for path, text in ((md_path, to_markdown(df, **head)), (html or html_path(md_path), to_html(df, **head))):
        atomic_write_text(path, text)
        write_manifest(path, rows=len(out), columns=None, cfg=cfg, extra={"csv": str(csv_path)})
    return out
