"""Claim measures on RL runs: accuracy differences and gains over the start policy (V0.5, BASIS and
V0's budget claims), by the hierarchical bootstrap over starts, seeds and problems.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from sparserl.core import hierarchical_bootstrap as hb
from sparserl.core.paths import Paths

from .context import BadArtifact, Context, MissingArtifact, NotRun, pooled_trees
from .rule import BOOT, BOOT_SEED, Interval, Margin, Premise, seed_interval


def _rl_methods(cfg: dict, *methods: str) -> list:
    rl = cfg.get("rl")
    if not rl:
        raise NotRun("the config has no rl section")
    absent = [m for m in methods if m not in rl["methods"]]
    if absent:
        raise NotRun(f"rl.methods of this config lacks {', '.join(absent)}")
    return list(rl["seeds"])



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
    def inputs(P):
        from sparserl.methods.run import method_run
        seeds = _rl_methods(P.cfg, *methods)
        # eval.parquet is the rule's output; its per-problem tables lie beside it (same job); with
        # head_to_head.pool, the same of each pooled tree that ran the row's methods
        pooled = [method_run(t.cfg, m, s).eval for t in _pool(pooled_trees(P), *methods)[0][1:]
                  for m in methods for s in t.cfg["rl"]["seeds"]]
        return [P.rl_runs()] + [method_run(P.cfg, m, s).eval for m in methods for s in seeds] + pooled
    return inputs


def _per_problem(ctx: Context, method: str, seed, cfg: dict | None = None) -> pd.DataFrame:
    from sparserl.methods.run import method_run
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
    from sparserl.methods.run import method_run
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


def _start_per_problem_path(P: Paths) -> Path:
    """The start policy's per-problem evaluation in tree `P` (a `Paths`)."""
    from sparserl.evaluation.evaluate import per_problem_path
    policy = (P.cfg.get("rl") or {}).get("policy")
    if not policy:
        raise NotRun("rl.policy is not set: no start policy to measure a gain from")
    return per_problem_path(P.eval_table(policy))


def _gain_inputs(method: str):
    def inputs(P):
        trees = _pool(pooled_trees(P), method)[0]
        return _rl_inputs(method)(P) + [t.P.eval_table(t.cfg["rl"]["policy"]) for t in trees]
    return inputs


def _start_path(tree) -> Path:
    path = _start_per_problem_path(tree.P)
    if not path.exists():
        raise MissingArtifact(f"{path}: the start policy's per-problem evaluation is missing; run "
                              f"`snakemake --cores 2 {tree.P.eval_table(tree.cfg['rl']['policy'])}`")
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
        raise BadArtifact(f"{_start_per_problem_path(ctx.P)}: {base.shape[0]} start policies but {method}'s runs "
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
