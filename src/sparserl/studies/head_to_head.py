"""The head-to-head of every RL baseline: no paper has it.

Every method of `rl.methods` (whatever it is: GRPO, DAPO, BASIS, V0.5, the critics, ...) has been
trained from the same start policy at the same `rl.rollouts_per_step` and evaluated by the RL stage
(`workflow/rules/rl.smk`). This study reads those runs' cached tables only and writes three tables
under `results/{scale}/head_to_head/` (`Paths.head_to_head`):

  ranking.parquet  one row per method: family (the advantage estimator of its spec), loss, sampler,
                   prior, seeds, steps, rollouts per step / per prompt, rollouts consumed, training
                   wall time, final accuracy with its 95% CI, rank, tie group, the methods it ties with;
                   beside it the seed means of greedy accuracy, pass@k, the slip-template
                   split (world 2.0: greedy on slip and other templates, start, final, change; chosen
                   by a hash, so free of selection) and the greedy-wrong split (held-out problems the
                   start policy answers wrong greedily: mean@k and greedy) with its complement
                   (wrong -> right, right -> wrong, net; `evaluation.splits`); for EVPO the share of
                   steps its switch chose the critic, and `same_as` its VF twin when that was every step;
                   then the gains over the start policy in mean@k and pass@k (`gain`,
                   `pass_gain`), the start's from its `evaluation.start_k` samples a problem (unbiased
                   pass@k), with the hierarchical bootstrap's 95% intervals, and `ci_levels`: the
                   levels that bootstrap resampled, e.g. "1 start x 1 seed x 427 problems"
  pairs.parquet    one row per pair of methods (a ranked above b): diff = acc_a - acc_b, its 95%
                   paired-bootstrap CI; with >= 2 seeds also the Welch t-interval over seeds;
                   separated (rule 3: the bootstrap with 1 seed, Welch with more); `bootstrap_levels`
  curves.parquet   one row per (method, seed, evaluated checkpoint): step, rollouts consumed and
                   training wall time up to that step, eval accuracy, greedy accuracy and pass@k (the
                   start policy at step 0 when the DAG evaluates it)

Other start policies: `head_to_head.pool` names overlays of trees pre-trained from
another `pretrain.start_seed` (configs/overlays/start1.yaml). Their runs of the methods every tree
ran join this tree's as further starts (grouped by the per-problem `start`): the ranking holds those
methods, `accuracy` is the mean over starts and seeds, and rules 1 and 3 read the hierarchical
bootstrap (starts, seeds within, problems) in place of the t and Welch intervals over seeds;
`starts` counts the start policies, `ci_levels` names the levels. Steps, wall time, the splits and
the curves stay this tree's runs (the splits are defined by this tree's start policy). The
(starts, seeds, problems) arrays come from `runs_array` (`hierarchical_bootstrap.arm_array`), the
builder the claims' RL rows use too, so both pool the same runs the same way; the rliable
aggregates (`sparserl.studies.aggregates`) pool them as (start, seed) runs.

Accuracy is the RL summary's `eval_accuracy_final`: the mean over the benchmarks of the mean over
each benchmark's problems of the per-problem score p (mean@k at tiny scale), read here from the
final checkpoint's per-problem table `eval/final_per_problem.parquet` (checked against eval.parquet).

The rules (CI level 95%, `BOOTSTRAP` resamples, RNG seeded by `BOOTSTRAP_SEED` and the config's `seed`):

1. A method's accuracy CI. With >= 2 seeds: the t-interval over seeds,
   mean +- t_{0.975, n-1} * sd / sqrt(n) (sd with ddof 1; the benchmark is held fixed, the
   interval is about training noise). With 1 seed: the percentile interval of the problem
   bootstrap below (the run is held fixed, the interval is about which problems were drawn).
2. The bootstrap (`sparserl.core.hierarchical_bootstrap`: with one start policy, as now, its two
   lower levels; a second start policy adds its start draw). One replicate draws, for every benchmark, its problems with replacement
   (stratified: each benchmark keeps its size, so a replicate's accuracy is again a mean of
   benchmark means); the same draw serves every method, which is what pairs the comparison. It
   also draws, for every run owner (`methods.spec.run_owners`: two names of one spec share one run
   and one draw), `len(seeds)` seeds with replacement, independently across owners: runs of two
   methods at the same seed share no randomness that would pair them. A method's replicate is the
   mean over its drawn seeds of their accuracy on the drawn problems.
3. Ties. With 1 seed: a and b are "not separated by the data" when the 95% percentile interval
   of rep_a - rep_b over the bootstrap replicates contains 0 (ci_lo <= 0 <= ci_hi). "Separated"
   then says that these two runs differ beyond the noise of the eval problems (and of their
   mean@k scores), not that the methods do. With >= 2 seeds (small scale: 3) the seeds are the
   unit of replication, as in rule 1: a and b are not separated when the Welch t-interval of the
   difference of their seed means contains 0 (`welch_*`; `sparserl.core.stats`, at the
   unrounded Welch-Satterthwaite df). The bootstrap interval stays in pairs.parquet beside it:
   over 3 seeds it is narrower than a t-interval (a percentile bootstrap of a mean of n values
   spreads by sd_(ddof 0) / sqrt(n) with normal-like quantiles, the t-interval has sd_(ddof 1) and
   t_{0.975, n-1} = 4.30 at n = 3) and separated 325 of 406 small-scale pairs where Welch
   separated 305 (counted when the Welch df was still rounded down, which widened its intervals).
   No correction for the number of pairs (M(M-1)/2 of them): at 27 methods about 18 of 351 pairs
   of truly equal methods would read as separated by chance; read single separations with that
   in mind. Identical runs (aliases) give a difference of exactly 0 and always tie.
4. Rank: 1 + the number of runs with a strictly higher mean accuracy (equal means share a rank; an
   alias and an EVPO method whose critic switch was on at every step, `same_as`, count once).
5. Tie groups (`tie_group`): a compact letter display. The groups are the maximal cliques of the
   graph "not separated" (Bron-Kerbosch); each gets a letter, ordered by its best member's rank.
   Two methods share a letter exactly when the data do not separate them, so every tie in
   pairs.parquet is visible in the labels; `ties_with` lists them by name.

`rollouts_total` of a run is its metrics' cumulative `rollouts_total` at the last step (generated
rollouts, as in the RL summary: DAPO's dropped groups and OSLA's extra rounds count), wall time the
sum of its per-step `wall_time_s` (sampling, advantages and the update; no evaluation, no
checkpoint saving, no model loading).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from sparserl.core.artifacts import read_table, write_table
from sparserl.core.logs import get_logger
from sparserl.core.paths import Paths
from sparserl.engines.lr_tuning import lr_family
from sparserl.methods.run import method_run
from sparserl.methods.spec import load_method, run_owners
from sparserl.core import hierarchical_bootstrap as hb
from sparserl.core.hierarchical_bootstrap import problem_weights  # noqa: F401  (the stratified draw, here before)
from sparserl.core.stats import LEVEL, t_interval, welch_interval

log = get_logger(__name__)

BOOTSTRAP = 2000
BOOTSTRAP_SEED = 1414  # fixed: the same tables give the same intervals, to the byte
TABLES = ("ranking", "pairs", "curves")


class HeadToHeadError(ValueError):
    """A run table the head-to-head cannot use (missing column, other problems, inconsistent)."""


# --- the statistics, on arrays (tested on synthetic data) ----------------------------------------

def accuracy(p: np.ndarray, benchmarks: np.ndarray) -> float:
    """Mean over benchmarks of the mean p per benchmark (the RL summary's accuracy)."""
    s = pd.Series(np.asarray(p, dtype=float)).groupby(np.asarray(benchmarks), sort=False).mean()
    return float(s.mean())


def bootstrap_replicates(per_problem: dict[str, np.ndarray], owners: dict[str, str], benchmarks: np.ndarray,
                         n_boot: int = BOOTSTRAP, seed: int = 0, baseline: np.ndarray | None = None,
                         key: int | None = None) -> dict[str, np.ndarray]:
    """Per method, its `n_boot` bootstrap replicates of the accuracy (rule 2 of the module doc), or
    of its gain over `baseline` (the start policies' per-problem scores, (starts, J)): the
    hierarchical bootstrap (`sparserl.core.hierarchical_bootstrap`). `per_problem[m]` is
    (starts, seeds, J), or (seeds, J) for one start: p of each run on the J problems, in one
    problem order for all methods; `owners[m]` the run the method reports (aliases share one seed
    draw); `key`: a further RNG key, so another set of replicates draws anew."""
    arms = {}
    for m, p in per_problem.items():
        p = np.asarray(p, dtype=float)
        p = p[None] if p.ndim == 2 else p
        if p.ndim != 3 or p.shape[2] != len(benchmarks):
            raise HeadToHeadError(f"{m}: per-problem array of shape {p.shape}, expected (starts, seeds, "
                                  f"{len(benchmarks)})")
        arms[m] = p
    rng_key = [BOOTSTRAP_SEED, int(seed)] + ([int(key)] if key is not None else [])
    return hb.replicates(arms, benchmarks, n_boot, rng_key, owners, baseline)[0]


def pair_table(means: dict[str, float], reps: dict[str, np.ndarray], order: list[str],
               level: float = LEVEL, seed_acc: dict[str, np.ndarray] | None = None) -> pd.DataFrame:
    """Every pair (a above b in `order`): diff, its percentile bootstrap CI and, with `seed_acc`
    (each method's per-seed accuracies, >= 2 seeds), the Welch t-interval over seeds; `separated`
    is rule 3: the interval (Welch with >= 2 seeds, else the bootstrap) excludes 0."""
    rows = []
    q = [(1 - level) / 2, (1 + level) / 2]
    welch = seed_acc is not None and all(len(seed_acc[m]) >= 2 for m in order)
    for i, a in enumerate(order):
        for b in order[i + 1:]:
            lo, hi = np.quantile(reps[a] - reps[b], q)
            row = {"a": a, "b": b, "diff": means[a] - means[b], "ci_lo": float(lo), "ci_hi": float(hi),
                   "separated": bool(lo > 0 or hi < 0)}
            if welch:
                _, wlo, whi = welch_interval(seed_acc[a], seed_acc[b], level)
                row.update(welch_ci_lo=wlo, welch_ci_hi=whi, welch_separated=bool(wlo > 0 or whi < 0))
                row["separated"] = row["welch_separated"]
            rows.append(row)
    cols = ["a", "b", "diff", "ci_lo", "ci_hi", "separated"]
    return pd.DataFrame(rows, columns=cols + (["welch_ci_lo", "welch_ci_hi", "welch_separated"] if welch else []))


def maximal_cliques(nodes: list[str], edges: set[frozenset]) -> list[set[str]]:
    """Maximal cliques of an undirected graph (Bron-Kerbosch with pivoting); isolated nodes are
    cliques of one."""
    nbr = {n: {m for m in nodes if m != n and frozenset((n, m)) in edges} for n in nodes}
    out: list[set[str]] = []

    def expand(r: set, p: set, x: set):
        if not p and not x:
            out.append(r)
            return
        pivot = max(p | x, key=lambda u: len(nbr[u] & p))
        for v in sorted(p - nbr[pivot], key=nodes.index):
            expand(r | {v}, p & nbr[v], x & nbr[v])
            p = p - {v}
            x = x | {v}

    expand(set(), set(nodes), set())
    return out


def _letter(i: int) -> str:
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    return letters[i] if i < len(letters) else f"[{i + 1}]"


def tie_groups(order: list[str], pairs: pd.DataFrame) -> tuple[dict[str, str], dict[str, list[str]]]:
    """(method -> tie-group letters, method -> the methods it ties with, in `order`): rule 5."""
    tied = pairs[~pairs["separated"]]
    edges = {frozenset((a, b)) for a, b in zip(tied["a"], tied["b"])}
    cliques = maximal_cliques(order, edges)
    rank = {m: i for i, m in enumerate(order)}
    cliques.sort(key=lambda c: sorted(rank[m] for m in c))
    labels = {m: "" for m in order}
    for i, c in enumerate(cliques):
        for m in sorted(c, key=rank.get):
            labels[m] += _letter(i)
    ties = {m: [o for o in order if o != m and frozenset((m, o)) in edges] for m in order}
    return labels, ties


def rank_methods(means: dict[str, float], order: list[str]) -> list[str]:
    """Methods by mean accuracy, best first; equal means keep the config's order."""
    return sorted(order, key=lambda m: (-means[m], order.index(m)))


# --- reading the runs -----------------------------------------------------------------------------

def start_eval_table(P: Paths) -> Path | None:
    """The RL start policy's evaluation in tree `P`, when the DAG evaluates that policy (as rl_summary)."""
    cfg = P.cfg
    policy = cfg["rl"].get("policy")
    policies = cfg.get("evaluation", {}).get("policies", list(cfg.get("policies", {})))
    return P.eval_table(policy) if policy in policies else None


@dataclass(frozen=True)
class Tree:
    """A results tree the head-to-head reads: its layout (and so its config), the overlay that made
    it from this one (None: this tree), its start policy's pre-training seed."""

    P: Paths
    overlay: str | None
    start: int

    @property
    def cfg(self) -> dict:
        return self.P.cfg


def pool_trees(P: Paths) -> list[Tree]:
    """Tree `P`, then each tree of its `head_to_head.pool`: the overlay layered on P's config (as
    `snakemake --configfile <this config> <overlay>` resolves it), under P's root, checked to be
    another start."""
    from sparserl.core.config import ConfigError, deep_merge, read_yaml, start_seed, validate
    cfg = P.cfg
    base = {k: v for k, v in cfg.items() if k != "head_to_head"}
    trees = [Tree(P, None, start_seed(cfg))]
    for overlay in (cfg.get("head_to_head") or {}).get("pool", []):
        if not Path(overlay).is_file():
            raise HeadToHeadError(f"head_to_head.pool: {overlay} is no file; name an overlay of another start "
                                  "policy's tree, e.g. configs/overlays/start1.yaml")
        try:
            layer = read_yaml(overlay) or {}
            other = validate(deep_merge(base, layer), [("this config", base), (overlay, layer)])
        except ConfigError as e:
            raise HeadToHeadError(f"head_to_head.pool: {e}") from None
        tree = Tree(P.for_config(other), overlay, start_seed(other))
        if not (other.get("rl") or {}).get("methods"):
            raise HeadToHeadError(f"head_to_head.pool: {overlay} leaves its tree no rl.methods")
        for t in trees:
            if tree.P.results == t.P.results or tree.start == t.start:
                raise HeadToHeadError(f"head_to_head.pool: {overlay} gives results {tree.P.results} and "
                                      f"pretrain.start_seed {tree.start}, as {t.overlay or 'this config'} does; "
                                      "a pooled tree needs its own results_dir and start_seed")
        trees.append(tree)
    return trees


def pooled_methods(trees: list[Tree]) -> list[str]:
    """The methods the head-to-head ranks (`trees`: `pool_trees`): the first tree's rl.methods, or
    with a pool those every tree ran (each method's intervals then resample the same starts)."""
    methods = list(dict.fromkeys(trees[0].cfg["rl"]["methods"]))
    out = [m for m in methods if all(m in t.cfg["rl"]["methods"] for t in trees)]
    if not out:
        raise HeadToHeadError(f"head_to_head.pool: no method of rl.methods is in every pooled tree "
                              f"({', '.join(t.overlay for t in trees[1:])}); pool trees that ran the same methods")
    return out


def input_tables(P: Paths) -> list[Path]:
    """What the study and its aggregates read in tree `P` (their rules' input): each run's metrics
    and eval table, deduplicated over aliases, and the start policy's evaluation when there is one;
    with `head_to_head.pool`, the same of every pooled tree for the methods every tree ran. The
    per-problem tables beside eval.parquet are written by the same `sparserl rl-eval` before it."""
    trees = pool_trees(P)
    methods = pooled_methods(trees) if len(trees) > 1 else P.cfg["rl"]["methods"]
    out: list[Path] = []
    for t in trees:
        files = {str(f) for m in methods for s in t.cfg["rl"]["seeds"]
                 for f in (method_run(t.cfg, m, s).metrics, method_run(t.cfg, m, s).eval)}
        start = start_eval_table(t.P)
        out += [Path(f) for f in sorted(files)] + ([start] if start is not None else [])
    return out


def missing_pool(P: Paths, config_files: str | None = None) -> str | None:
    """One line naming the first file a pooled tree of tree `P` lacks and the command that builds
    that tree; None when every pooled tree is there (or there is no pool). `config_files`: this
    config's files as the command line gave them (default configs/<scale>.yaml)."""
    trees = pool_trees(P)
    if len(trees) == 1:
        return None
    methods = pooled_methods(trees)
    files = config_files or f"configs/{P.cfg['scale']}.yaml"
    for t in trees[1:]:
        need = [method_run(t.cfg, m, s).eval_dir / "final_per_problem.parquet" for m in methods
                for s in t.cfg["rl"]["seeds"]]
        start = start_eval_table(t.P)
        if start is None:
            return (f"head_to_head.pool: {t.overlay} evaluates no start policy (rl.policy in evaluation.policies); "
                    "each start's gain needs its own start policy's evaluation")
        from sparserl.evaluation.evaluate import per_problem_path
        mine = [f for f in input_tables(P) if Path(f).is_relative_to(t.P.results)]
        for f in mine + need + [per_problem_path(start)]:
            if not Path(f).exists():
                return (f"head_to_head.pool: {f} is missing: build the pooled tree first with `snakemake --cores 2 "
                        f"head_to_head --configfile {files} {t.overlay}`")
    return None


def _need(df: pd.DataFrame, cols, path) -> None:
    missing = [c for c in cols if c not in df]
    if missing:
        raise HeadToHeadError(f"{path}: no column(s) {missing} (columns: {list(df.columns)}); "
                              "rerun the rule that writes it (`sparserl rl-train` / `sparserl rl-eval`) with this code")


def _checkpoint_step(label: str, last_step: int, path) -> int:
    if label == "final":
        return last_step
    if label.startswith("step") and label[4:].isdigit():
        return int(label[4:])
    raise HeadToHeadError(f"{path}: checkpoint label {label!r} is neither 'final' nor 'stepNNNNN'")


@dataclass
class Run:
    method: str
    seed: int
    owner: str
    metrics: pd.DataFrame
    eval: pd.DataFrame
    final: pd.DataFrame      # per problem: benchmark, id, p (and pass, greedy when evaluated with them)
    eval_path: Path | None = None


def read_run(cfg: dict, method: str, seed: int) -> Run:
    run = method_run(cfg, method, seed)
    met, ev = read_table(run.metrics), read_table(run.eval)
    _need(met, ("step", "rollouts_total", "wall_time_s"), run.metrics)
    _need(ev, ("checkpoint", "benchmark", "accuracy"), run.eval)
    pp_path = run.eval_dir / "final_per_problem.parquet"
    if not pp_path.exists():
        raise HeadToHeadError(f"{pp_path} is missing: the head-to-head bootstraps the final checkpoint's "
                              f"per-problem scores; rerun `sparserl rl-eval --method {run.method} --seed {seed}` "
                              "(or delete its eval.parquet so Snakemake does)")
    pp = read_table(pp_path)
    _need(pp, ("benchmark", "id", "p"), pp_path)
    fin = ev[ev["checkpoint"] == "final"]
    if fin.empty:
        raise HeadToHeadError(f"{run.eval}: no 'final' checkpoint rows")
    a_pp, a_ev = accuracy(pp["p"].to_numpy(), pp["benchmark"].to_numpy()), float(fin["accuracy"].mean())
    if abs(a_pp - a_ev) > 1e-9 or set(pp["benchmark"]) != set(fin["benchmark"]):
        raise HeadToHeadError(f"{pp_path} (accuracy {a_pp:.6f}) disagrees with {run.eval} (final accuracy "
                              f"{a_ev:.6f}): the two come from different evaluations; rerun `sparserl rl-eval "
                              f"--method {run.method} --seed {seed}`")
    return Run(method, int(seed), run.method, met.sort_values("step"), ev, pp, run.eval)


def run_curve(r: Run) -> pd.DataFrame:
    """One row per evaluated checkpoint of a run: step, rollouts and wall time up to it, accuracy,
    greedy accuracy and pass@k (NaN for an evaluation without them)."""
    from sparserl.engines.report import greedy_and_pass
    met = r.metrics
    last = int(met["step"].max())
    rows = []
    for label, d in r.eval.groupby("checkpoint", sort=False):
        step = _checkpoint_step(str(label), last, f"{r.method} seed {r.seed} eval.parquet")
        upto = met[met["step"] <= step]
        if upto.empty or int(upto["step"].max()) != step:
            raise HeadToHeadError(f"{r.method} seed {r.seed}: checkpoint {label} is at step {step}, "
                                  f"which metrics.parquet (steps {int(met['step'].min())}-{last}) lacks")
        rows.append({"method": r.method, "seed": r.seed, "checkpoint": str(label), "step": step,
                     "rollouts": int(upto["rollouts_total"].iloc[-1]),
                     "wall_time_s": float(upto["wall_time_s"].sum()), "accuracy": float(d["accuracy"].mean()),
                     **_sharpening(greedy_and_pass(d, r.eval_path))})
    return pd.DataFrame(rows).sort_values("step")


def _sharpening(gp: dict) -> dict:
    """`report.greedy_and_pass`'s means under this study's column names."""
    return {"greedy_accuracy": gp["eval_greedy"], "pass_at_k": gp["eval_pass"]}


def run_start(r: Run) -> int:
    """The pre-training seed of the start policy a run descends from (its per-problem `start`;
    0 for tables written before the column)."""
    return int(r.final["start"].iloc[0]) if "start" in r.final else 0


def tree_runs(tree: Tree, method: str, pooling: bool = False) -> list[Run]:
    """A tree's runs of `method` (its rl.seeds); `pooling`: each checked to descend from the tree's
    start policy (its per-problem `start` is the tree's pretrain.start_seed), so trees pool as starts."""
    out = [read_run(tree.cfg, method, s) for s in tree.cfg["rl"]["seeds"]]
    for r in out if pooling else []:
        if run_start(r) != tree.start:
            raise HeadToHeadError(f"{r.eval_path.parent / 'eval' / 'final_per_problem.parquet'}: start {run_start(r)}, "
                                  f"but its tree's pretrain.start_seed is {tree.start}; rerun `sparserl rl-eval "
                                  f"--method {method} --seed {r.seed}` with that tree's config")
    return out


def runs_array(runs: list[Run], problems: pd.DataFrame, col: str = "p", what: str = "") -> np.ndarray:
    """(starts, seeds, J) of the runs' per-problem `col` in `problems`' (benchmark, id) order,
    grouped by their start (`run_start`): `hierarchical_bootstrap.arm_array`, the one builder the
    claims use too; every start must hold as many seeds."""
    long = pd.concat([r.final[["benchmark", "id", col]].assign(start=run_start(r), seed=r.seed) for r in runs],
                     ignore_index=True)
    try:
        return hb.arm_array(long, problems, col, what)
    except ValueError as e:
        raise HeadToHeadError(str(e)) from None


GAINS = (("gain", "p"), ("pass_gain", "pass"))  # column -> the per-problem score it is a gain of


def start_tables(trees: list[Tree]) -> tuple[pd.DataFrame | None, str]:
    """The start policies' per-problem tables of every tree (a table without `start` is its tree's
    `pretrain.start_seed`; a pooled tree's must hold that start), and their paths as text; None
    when a tree lacks one (no gains then)."""
    from sparserl.evaluation.evaluate import per_problem_path
    tables, paths = [], []
    for t in trees:
        start = start_eval_table(t.P)
        path = per_problem_path(start) if start is not None else None
        if path is None or not path.exists():
            return None, ""
        pp = read_table(path)
        pp = pp if "start" in pp else pp.assign(start=t.start)
        if len(trees) > 1 and set(pp["start"]) != {t.start}:
            raise HeadToHeadError(f"{path}: the start policy's table says start {sorted(set(pp['start']))}, its "
                                  f"config pretrain.start_seed {t.start}; rerun its evaluation (`sparserl evaluate`) "
                                  "with this code and that config")
        tables.append(pp)
        paths.append(str(path))
    return pd.concat(tables, ignore_index=True), ", ".join(paths)


def start_gains(cfg: dict, runs: dict[str, list[Run]], owners: dict[str, str], key: list, benchmarks: np.ndarray,
                n_boot: int, trees: list[Tree]) -> dict[str, dict]:
    """Per method: its gain over the start policy in mean@k (`gain`) and pass@k (`pass_gain`), the
    start's estimates from its `evaluation.start_k` samples a problem (unbiased pass@k), each with
    the 95% percentile interval of the hierarchical bootstrap (starts, seeds within, problems;
    `ci_levels` says which levels it resampled and their units). Each run's gain is over its own
    start policy (`trees`: this one and the pooled ones, each with its start's table). NaN without
    a start's per-problem table (or a column of it)."""
    pp, path = start_tables(trees)
    nan = {f"{g}{e}": np.nan for g, _ in GAINS for e in ("", "_ci_lo", "_ci_hi")}
    out = {m: dict(nan) for m in runs}
    problems = pd.DataFrame(key, columns=["benchmark", "id"])
    for gain, col in GAINS:
        if pp is None or col not in pp or any(col not in r.final for rs in runs.values() for r in rs):
            continue
        try:
            base = hb.arm_array(pp.assign(seed=0), problems, col, path)[:, 0, :]
        except ValueError as e:
            raise HeadToHeadError(f"{e} (the start policy's table against the runs' problems)") from None
        arms = {m: runs_array(rs, problems, col, m) for m, rs in runs.items()}
        if {a.shape[0] for a in arms.values()} != {base.shape[0]}:
            raise HeadToHeadError(f"{path}: {base.shape[0]} start policies but the runs descend from "
                                  f"{sorted({a.shape[0] for a in arms.values()})}; evaluate every start policy")
        reps = bootstrap_replicates(arms, owners, benchmarks, n_boot, int(cfg["seed"]), baseline=base,
                                    key=1 + [g for g, _ in GAINS].index(gain))
        for m, a in arms.items():
            lo, hi = hb.percentile(reps[m])
            out[m].update({gain: hb.point(a, benchmarks, base), f"{gain}_ci_lo": lo, f"{gain}_ci_hi": hi})
    return out


def _split_scores(runs: list[Run], split: pd.DataFrame | None, start: pd.DataFrame | None,
                  labels: pd.DataFrame | None) -> dict:
    """Seed means of each run's final scores on the two splits of `evaluation.splits`: the
    slip-template split (selection-free; greedy on slip and other templates, start, final, change)
    and the greedy-wrong split (mean@k and greedy on it) with its complement (flips both ways, net)."""
    from sparserl.engines.report import on_split
    from sparserl.evaluation.splits import greedy_flips, slip_split
    if split is None:
        return {"greedy_wrong_accuracy": np.nan, "greedy_wrong_greedy": np.nan}
    s = [on_split(r.final, split, r.eval_path) for r in runs]
    f = [greedy_flips(start, r.final, str(r.eval_path)) for r in runs]
    sl = [slip_split(start, r.final, labels, str(r.eval_path)) for r in runs]

    def mean(rows, key):
        return float(np.mean([x[key] for x in rows]))

    return {"slip_split": sl[0]["slip_split"],
            **{f"{k}{suffix}": mean(sl, col) for k in ("slip_greedy", "other_greedy")
               for suffix, col in (("_start", f"start_eval_{k}"), ("", f"eval_{k}_final"), ("_gain", f"eval_{k}_gain"))},
            "greedy_wrong_accuracy": mean(s, "eval_greedy_wrong"), "greedy_wrong_greedy": mean(s, "eval_greedy_wrong_greedy"),
            **{k: mean(f, k) for k in ("greedy_wrong_to_right", "greedy_right_to_wrong", "greedy_flip_net")}}


def _switch(m: str, methods: list[str], runs: list[Run]) -> dict:
    """EVPO's critic switch (Le Critique App. C) over a method's runs: the share of steps on the
    critic and, when it was on at every step, the method whose run it then is (`report.switch_note`)."""
    from sparserl.engines.report import critic_switch, switch_note
    sw = [critic_switch(r.metrics) for r in runs]
    if all(x is None for x in sw):
        return {"critic_switch_share": np.nan, "critic_switch": "", "same_as": ""}
    same, note = switch_note(m, methods, sw)
    got = [x for x in sw if x is not None]
    return {"critic_switch_share": sum(x[0] for x in got) / sum(x[1] for x in got), "critic_switch": note,
            "same_as": same}


def _spec_columns(method: str) -> dict:
    """What kind of method it is, from its spec alone (no list of names): the advantage estimator
    (`family`), the loss, how a step samples, the prior, whether it trains a critic."""
    m = load_method(method)
    return {"family": m.estimator, "loss": m.loss.type, "sampler": m.sampler,
            "prior": m.prior.kind if m.prior is not None else "none", "critic": bool(m.needs_critic),
            "group_size": int(m.group_size)}


# --- the study -------------------------------------------------------------------------------------

def head_to_head(P: Paths, n_boot: int = BOOTSTRAP) -> dict[str, pd.DataFrame]:
    """The three tables of the module doc, from tree `P`'s cached run tables (nothing is trained)."""
    cfg = P.cfg
    rl = cfg["rl"]
    methods, seeds = list(dict.fromkeys(rl["methods"])), list(rl["seeds"])
    if not methods or not seeds:
        raise HeadToHeadError(f"rl.methods ({methods}) and rl.seeds ({seeds}) must both be non-empty")
    trees = pool_trees(P)
    if len(trees) > 1:  # other start policies' trees (head_to_head.pool), the methods all ran
        missing = missing_pool(P)
        if missing:
            raise HeadToHeadError(missing)
        methods = pooled_methods(trees)
    owners = run_owners(methods, rl.get("rollouts_per_step"))
    pooling = len(trees) > 1
    runs = {m: tree_runs(trees[0], m, pooling) for m in methods}
    # every tree's runs, grouped by start below; `runs` (this tree's) keep the columns beside the
    # accuracy (steps, wall time, the splits against this tree's start policy, the curves)
    pooled = {m: runs[m] + [r for t in trees[1:] for r in tree_runs(t, m, pooling)] for m in methods}
    # an EVPO method whose switch chose the critic at every step trained its twin's run:
    # one run, one seed draw, one count in the ranks
    switch = {m: _switch(m, methods, runs[m]) for m in methods}
    for m in methods:
        if switch[m]["same_as"]:
            owners[m] = owners[switch[m]["same_as"]]
    # one problem order for every run: the first run's
    ref = runs[methods[0]][0].final
    key = list(zip(ref["benchmark"], ref["id"]))
    benchmarks = ref["benchmark"].to_numpy()
    ref_path = runs[methods[0]][0].eval_path.parent / "eval" / "final_per_problem.parquet"
    per_problem = {}
    for m in methods:
        mat = []
        for r in pooled[m]:
            p = r.final.set_index(["benchmark", "id"])["p"]
            if len(p) != len(key) or set(p.index) != set(key):
                path = r.eval_path.parent / "eval" / "final_per_problem.parquet"
                raise HeadToHeadError(f"{path}: evaluated on other problems than {ref_path} ({len(p)} vs "
                                      f"{len(key)}); every run must be scored on the same benchmarks: rerun its "
                                      f"`sparserl rl-eval --method {m} --seed {r.seed}`")
            mat.append(p.loc[key].to_numpy(dtype=float))
        per_problem[m] = np.stack(mat)
    seed_acc = {m: np.array([accuracy(row, benchmarks) for row in per_problem[m]]) for m in methods}
    means = {m: float(seed_acc[m].mean()) for m in methods}
    problems = pd.DataFrame(key, columns=["benchmark", "id"])
    nested = {m: runs_array(pooled[m], problems, "p", m) for m in methods}
    design = hb.design_of(nested[methods[0]], benchmarks)
    starts = design.starts > 1  # rules 1 and 3 then read the hierarchical bootstrap, not seeds alone
    reps = bootstrap_replicates(nested, owners, benchmarks, n_boot, int(cfg["seed"]))
    order = rank_methods(means, methods)
    pairs = pair_table(means, reps, order, seed_acc=seed_acc if len(seeds) >= 2 and not starts else None)
    pairs["bootstrap_levels"] = design.text()  # added after the columns above
    labels, ties = tie_groups(order, pairs)
    q = [(1 - LEVEL) / 2, (1 + LEVEL) / 2]
    from sparserl.engines.report import (greedy_and_pass, greedy_wrong_split, pass_metric, protocol, run_lr,
                                         start_per_problem)
    from sparserl.evaluation.splits import slip_labels
    split = greedy_wrong_split(P)
    start_pp, slips = (start_per_problem(P)[0], slip_labels(P)) if split is not None else (None, None)

    rows = []
    for m in order:
        accs = seed_acc[m]
        if starts:
            lo, hi = (float(v) for v in np.quantile(reps[m], q))
            how = f"hierarchical bootstrap over {design.text()}"
        elif len(accs) >= 2:
            _, lo, hi = t_interval(accs)
            how = f"t over {len(accs)} seeds"
        else:
            lo, hi = (float(v) for v in np.quantile(reps[m], q))
            how = f"bootstrap over {len(benchmarks)} problems (1 seed: no seed noise)"
        rs = runs[m]
        steps = np.array([int(r.metrics["step"].max()) for r in rs])
        total = np.array([int(r.metrics["rollouts_total"].iloc[-1]) for r in rs])
        trained = np.array([int(r.metrics["rollouts_trained"].sum()) if "rollouts_trained" in r.metrics else t
                            for r, t in zip(rs, total)])
        ppm = np.array([float(r.metrics["rollouts_per_prompt_mean"].mean()) if "rollouts_per_prompt_mean"
                        in r.metrics else np.nan for r in rs])
        # rule 4, one count per run: an alias or an EVPO run equal to VF's does not push others down
        rank = 1 + len({owners[o] for o in methods if means[o] > means[m]})
        rows.append({"rank": rank, "method": m, **_spec_columns(m),
                     "run": owners[m], "seeds": len(rs), "steps": float(steps.mean()),
                     "rollouts_per_step": float((total / steps).mean()),
                     "rollouts_per_prompt": float(np.nanmean(ppm)) if np.isfinite(ppm).any() else np.nan,
                     "rollouts_total": float(total.mean()), "rollouts_trained": float(trained.mean()),
                     "wall_time_s": float(np.mean([r.metrics["wall_time_s"].sum() for r in rs])),
                     "accuracy": means[m], "accuracy_sd": float(accs.std(ddof=1)) if len(accs) > 1 else np.nan,
                     "ci_lo": float(lo), "ci_hi": float(hi), "ci_method": how,
                     "tie_group": labels[m], "n_ties": len(ties[m]), "ties_with": ", ".join(ties[m]),
                     # sharpening or learning; after the columns above, so their order holds
                     **{k: float(np.mean([_sharpening(greedy_and_pass(r.eval[r.eval["checkpoint"] == "final"],
                                                                       r.eval_path))[k] for r in rs]))
                        for k in ("greedy_accuracy", "pass_at_k")},
                     "pass_metric": pass_metric(rs[0].eval), **_split_scores(rs, split, start_pp, slips),
                     "greedy_wrong_share": np.nan if split is None else len(split) / split.attrs["held_out"],
                     **run_lr(rs[0].metrics, rl), "lr_family": lr_family(load_method(m)),
                     "protocol": protocol(m), **switch[m]})
    ranking = pd.DataFrame(rows)
    # gains over the start policy's many-sample evaluation, hierarchical intervals
    gains = start_gains(cfg, pooled, owners, key, benchmarks, n_boot, trees)
    ranking = pd.concat([ranking, pd.DataFrame([gains[m] for m in order])], axis=1)
    ranking["ci_levels"] = design.text()
    ranking["starts"] = design.starts  # start policies pooled (head_to_head.pool)

    curves = pd.concat([run_curve(r) for m in methods for r in runs[m]], ignore_index=True)
    start = start_eval_table(P)
    if start is not None:
        ev = read_table(start)
        _need(ev, ("benchmark", "accuracy"), start)
        acc0, sharp0 = float(ev["accuracy"].mean()), _sharpening(greedy_and_pass(ev, start))
        curves = pd.concat([pd.DataFrame([{"method": m, "seed": s, "checkpoint": "start", "step": 0, "rollouts": 0,
                                           "wall_time_s": 0.0, "accuracy": acc0, **sharp0}
                                          for m in methods for s in seeds]),
                            curves], ignore_index=True)
    curves["method"] = pd.Categorical(curves["method"], methods)
    curves = curves.sort_values(["method", "seed", "step"], kind="stable").reset_index(drop=True)
    curves["method"] = curves["method"].astype(str)
    return {"ranking": ranking, "pairs": pairs, "curves": curves}


def curve_summary(curves: pd.DataFrame, level: float = LEVEL) -> pd.DataFrame:
    """Per (method, checkpoint): the seeds' mean step, rollouts, wall time and accuracy, with the
    t-interval of the accuracy when there are >= 2 seeds (NaN otherwise). Methods keep their order."""
    rows = []
    extra = [c for c in ("greedy_accuracy", "pass_at_k") if c in curves]  # older tables lack them

    def mean_ci(x: np.ndarray) -> tuple[float, float, float]:
        if len(x) >= 2 and np.isfinite(x).all():
            return t_interval(x, level)
        return float(np.mean(x)), np.nan, np.nan

    for (m, ck), d in curves.groupby(["method", "checkpoint"], sort=False):
        lo = hi = np.nan
        if len(d) >= 2:
            _, lo, hi = t_interval(d["accuracy"].to_numpy(), level)
        row = {"method": m, "checkpoint": ck, "seeds": len(d), "step": float(d["step"].mean()),
               "rollouts": float(d["rollouts"].mean()), "wall_time_s": float(d["wall_time_s"].mean()),
               "accuracy": float(d["accuracy"].mean()), "ci_lo": lo, "ci_hi": hi}
        for c in extra:
            row[c], row[f"{c}_ci_lo"], row[f"{c}_ci_hi"] = mean_ci(d[c].to_numpy(dtype=float))
        rows.append(row)
    out = pd.DataFrame(rows)
    order = {m: i for i, m in enumerate(dict.fromkeys(curves["method"]))}
    out = out.assign(_o=out["method"].map(order)).sort_values(["_o", "step"], kind="stable")
    return out.drop(columns="_o").reset_index(drop=True)


def write_head_to_head(P: Paths, n_boot: int = BOOTSTRAP, out: dict[str, Path] | None = None) -> dict[str, Path]:
    """Run the study on tree `P` and write its tables atomically, with manifests (to `out[name]`,
    default `P.head_to_head(name)`)."""
    cfg = P.cfg
    paths = {name: Path((out or {}).get(name) or P.head_to_head(name)) for name in TABLES}
    tables = head_to_head(P, n_boot)
    extra = {"study": "head_to_head", "level": LEVEL, "bootstrap": n_boot, "bootstrap_seed": BOOTSTRAP_SEED,
             "seed": int(cfg["seed"]), "methods": list(cfg["rl"]["methods"]), "seeds": list(cfg["rl"]["seeds"]),
             "pool": list((cfg.get("head_to_head") or {}).get("pool", [])),
             "starts": {str(t.P.results): t.start for t in pool_trees(P)},
             "ci_levels": str(tables["ranking"]["ci_levels"].iloc[0])}
    written = {name: write_table(tables[name], paths[name], cfg=cfg, extra=extra) for name in TABLES}
    r = tables["ranking"]
    with pd.option_context("display.width", 200, "display.max_colwidth", 40):
        log.info("head-to-head ranking:\n" + r[["rank", "method", "family", "seeds", "rollouts_total", "wall_time_s",
                                                "accuracy", "ci_lo", "ci_hi", "tie_group"]].round(4).to_string(index=False))
    pairs = tables["pairs"]
    welch = f" (Welch t over seeds: {int(pairs['welch_separated'].sum())})" if "welch_separated" in pairs else ""
    log.info(f"{int(pairs['separated'].sum())} of {len(pairs)} pairs separated at {LEVEL:.0%}{welch} "
             f"-> {paths['ranking'].parent}")
    return written
