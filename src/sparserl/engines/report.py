"""After training: evaluate each run's checkpoints, and one table of every run."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from sparserl.core.artifacts import read_table, write_table
from sparserl.core.config import start_seed
from sparserl.core.logs import get_logger
from sparserl.evaluation import evaluate_checkpoint
from sparserl.evaluation.evaluate import benchmark_tables
from sparserl.grading.verifier import open_verifier
from sparserl.core.paths import Paths
from sparserl.core.runlog import EVAL_SUFFIX, RunLog
from sparserl.core.stats import t_interval
from sparserl.methods.run import Run, run_paths
from sparserl.methods.spec import load_method
from sparserl.tasks.procedural import in_distribution

log = get_logger(__name__)


def run_checkpoints(rec: Run) -> list[tuple[str, Path]]:
    """(label, dir) of the run's intermediate checkpoints (those its config asks for) and the
    final one, in training order; wherever the run's engine saved them (`Run.paths`)."""
    run, steps, method, seed = rec.paths, rec.snapshot_steps, rec.method, rec.seed
    # OpenRLHF counts a critic's W warm-up steps: policy step s is its global step s + W
    offset = openrlhf_step_offset(rec.spec) if run.engine == "openrlhf" else 0
    out = [(run.checkpoint_label(s), run.checkpoint(s + offset)) for s in steps] + [("final", run.final)]
    missing = [str(c) for _, c in out if not c.is_dir()]
    if missing:
        cmd = "rl-train" if run.engine == "local" else "openrlhf-launch"
        raise FileNotFoundError(f"{method} seed {seed}: checkpoints {missing} are missing; rerun "
                                f"`sparserl {cmd} --method {method} --seed {seed}` with this config")
    return out


def openrlhf_step_offset(method) -> int:
    """OpenRLHF's global step minus the policy step: the critic's warm-up steps W (0 without a
    critic; `engines.openrlhf.critic_warmup.critic_warmup_steps`, which imports no OpenRLHF)."""
    from sparserl.engines.openrlhf.critic_warmup import critic_warmup_steps
    return critic_warmup_steps(method)


def evaluate_run(cfg: dict, rec: Run, benchmarks: list, threads: int = 1) -> pd.DataFrame:
    """Every checkpoint of run `rec` (`run_checkpoints`) on the `benchmarks` files (the config's)
    -> its eval.parquet (one table per checkpoint under eval/), logged at each checkpoint's step
    (`log_evaluation`)."""
    run, method, seed = rec.paths, rec.method, rec.seed
    checkpoint_steps(rec)  # the steps logged: a tuned run's must be read before hours of evaluation
    problems = benchmark_tables(benchmarks)
    tables = []
    with open_verifier(cfg) as ver:  # one set of grading workers for every checkpoint
        for label, ck in run_checkpoints(rec):
            tables.append(evaluate_checkpoint(
                cfg, str(ck), run.eval_dir / f"{label}.parquet", f"{method}/seed{seed}/{label}",
                threads=threads, extra_cols={"method": method, "seed": seed, "checkpoint": label},
                verifier=ver, benchmarks=problems))
    out = pd.concat(tables, ignore_index=True)
    write_table(out, run.eval, cfg=cfg, extra={"method": method, "seed": seed, "start": start_seed(cfg)})
    log_evaluation(cfg, rec, out)
    return out


def checkpoint_steps(rec: Run) -> dict[str, int]:
    """The training step of each evaluated checkpoint label (`run_checkpoints`): the final one's is
    the run's steps (rl.lr_tuning's chosen steps, else the horizon), so `rec` has read its choice."""
    if rec.steps is None:
        raise ValueError(f"{rec.dir}: the run's tuned steps are unread; resolve it with read_choice=True "
                         "(`methods.run.resolve_run`)")
    steps = {rec.paths.checkpoint_label(s): int(s) for s in rec.snapshot_steps}
    return {**steps, "final": int(rec.steps)}


def log_evaluation(cfg: dict, rec: Run, ev: pd.DataFrame) -> None:
    """The evaluation into the run's TensorBoard folder (and W&B when enabled), at each
    checkpoint's training step: `eval/accuracy` (the mean over benchmarks, as the runs table's
    eval_accuracy_final) and `eval/accuracy/<benchmark>`. A rerun replaces the earlier ones."""
    run, method, seed = rec.paths, rec.method, rec.seed
    steps = checkpoint_steps(rec)
    with RunLog(cfg, run.tensorboard, f"{method}/seed{seed}", suffix=EVAL_SUFFIX, log=log.info) as tb:
        for label, d in ev.groupby("checkpoint", sort=False):
            values = {"eval/accuracy": float(d["accuracy"].mean()),
                      **{f"eval/accuracy/{b}": float(a) for b, a in zip(d["benchmark"], d["accuracy"])}}
            tb.evaluation(values, steps[str(label)])


def rollouts_note(steps: float, steps_nominal: int, per_step: int, generated: float,
                  trained: float, osla_rounds: float | None = None, method: str | None = None) -> str:
    """Why a method's rollout total differs from `rl.steps x rl.rollouts_per_step`, read off its
    metrics: fewer steps (BASIS's grid trains for a fraction), rollouts generated but not trained
    (DAPO's dynamic sampling drops all-equal groups), adaptive group sizes (OSLA's rounds), or
    the matched-prompts protocol (the method's `prompts_per_step` x its group size)."""
    parts = []
    spec = load_method(method) if method else None
    if spec is not None and spec.prompts_per_step is not None:
        if spec.prompts_per_step * spec.group_size != per_step:
            parts.append(f"matched prompts: {spec.prompts_per_step} prompts x group size "
                         f"{spec.group_size} a step instead of {per_step} rollouts")
        per_step = spec.prompts_per_step * spec.group_size
    if steps < steps_nominal:
        parts.append(f"{steps:g} of {steps_nominal} steps (method steps_factor)")
    if generated > trained + 0.5:
        parts.append(f"{generated - trained:.0f} generated rollouts not trained "
                     "(dynamic sampling oversamples and drops all-equal groups)")
    if steps and abs(trained / steps - per_step) > 0.5:
        rounds = f" over {osla_rounds:.1f} OSLA rounds per step" if osla_rounds else ""
        parts.append(f"adaptive group sizes: {trained / steps:.0f} rollouts trained per step "
                     f"instead of {per_step}{rounds}")
    return "; ".join(parts) or f"the fixed budget: {per_step} rollouts per step"


def _groups(ev: pd.DataFrame, in_dist: dict[str, bool]) -> dict:
    """Mean accuracy over the in-distribution benchmarks (levels of the RL pool) and the harder
    ones, when the config says which is which."""
    out = {}
    for name, flag in (("in_distribution", True), ("harder", False)):
        sel = ev[ev["benchmark"].map(lambda b: in_dist.get(b) is flag)]
        if len(sel):
            out[f"eval_{name}"] = float(sel["accuracy"].mean())
    return out


def _start_accuracy(P: Paths, in_dist: dict[str, bool]) -> dict:
    """The RL start policy's evaluation (`P.eval_table`: results/<scale>/eval/<policy>/eval.parquet),
    if the DAG evaluates it: eval_accuracy and the group means, greedy accuracy and pass@k."""
    policy = P.cfg["rl"].get("policy")
    path = P.eval_table(policy) if policy else None
    if path is None or not path.exists():
        return {}
    ev = read_table(path)
    return {"eval_accuracy": float(ev["accuracy"].mean()), **_groups(ev, in_dist), **greedy_and_pass(ev, path)}


_warned: set = set()


def _warn_once(path, what: str, fix: str) -> None:
    if str(path) not in _warned:
        _warned.add(str(path))
        log.warning(f"{path}: no {what} (written before they existed); its columns are NaN here: {fix}")


def greedy_and_pass(ev: pd.DataFrame, path) -> dict:
    """Mean over benchmarks of greedy accuracy and of pass@k (`evaluate_checkpoint`'s columns);
    NaN where the table predates them or ran without the greedy pass."""
    if not {"greedy_accuracy", "pass_at_k"} <= set(ev.columns):
        _warn_once(path, "greedy_accuracy / pass_at_k columns",
                   "delete it and rerun its evaluation (`sparserl rl-eval` / `sparserl evaluate`)")
        return {"eval_greedy": np.nan, "eval_pass": np.nan}
    return {"eval_greedy": float(ev["greedy_accuracy"].mean(skipna=False)),
            "eval_pass": float(ev["pass_at_k"].mean())}


def pass_metric(ev: pd.DataFrame) -> str:
    """The name(s) of an evaluation's pass@k (pass@16), '' for a table that predates it."""
    return "/".join(sorted(set(ev["pass_metric"]))) if "pass_metric" in ev else ""


def start_per_problem(P: Paths) -> tuple[pd.DataFrame, Path] | None:
    """The RL start policy's (`rl.policy`) per-problem evaluation beside `P.eval_table`, with its
    path; None when the DAG does not evaluate it or the table has no greedy column (or NaN ones)."""
    from sparserl.evaluation.evaluate import per_problem_path
    policy = P.cfg["rl"].get("policy")
    if not policy or not P.eval_table(policy).exists():
        return None
    path = per_problem_path(P.eval_table(policy))
    pp = read_table(path) if path.exists() else pd.DataFrame()
    if "greedy" not in pp or pp["greedy"].isna().any():
        _warn_once(path, "table or greedy column (or NaN greedy scores)", "the greedy-wrong and slip-template "
                   f"splits need evaluation.greedy: true; delete it and rerun `sparserl evaluate --policy {policy}`")
        return None
    return pp, path


def greedy_wrong_split(P: Paths) -> pd.DataFrame | None:
    """The greedy-wrong split: the held-out problems (benchmark, id) whose greedy answer
    by the RL start policy (`rl.policy`) is wrong, read from its per-problem evaluation beside
    `P.eval_table`; None when the DAG does not evaluate it or the table has no greedy column.
    Chosen by the start's own answers: read it with its complement (`evaluation.splits.greedy_flips`)."""
    start = start_per_problem(P)
    if start is None:
        return None
    pp = start[0]
    split = pp.loc[pp["greedy"] == 0, ["benchmark", "id", "p", "greedy"]].reset_index(drop=True)
    split.attrs["held_out"] = len(pp)
    return split


def on_split(pp: pd.DataFrame, split: pd.DataFrame, path) -> dict:
    """mean@k and greedy accuracy of one per-problem table on the split's problems, pooled over
    the problems (a benchmark may hold few of them)."""
    d = split[["benchmark", "id"]].merge(pp, on=["benchmark", "id"], how="left", validate="one_to_one")
    if d["p"].isna().any():
        raise ValueError(f"{path}: {int(d['p'].isna().sum())} problems of the greedy-wrong split are not in it; it "
                         "was evaluated on other benchmarks than the start policy: rerun its evaluation")
    if "greedy" not in d:
        _warn_once(path, "greedy column", "delete the run's eval.parquet and rerun `sparserl rl-eval`")
    greedy = float(d["greedy"].mean(skipna=False)) if "greedy" in d else np.nan
    return {"eval_greedy_wrong": float(d["p"].mean()), "eval_greedy_wrong_greedy": greedy}


def critic_switch(met: pd.DataFrame) -> tuple[int, int] | None:
    """(steps whose advantage used the critic, steps) of an EVPO run, from its metrics'
    `est_evpo_use_critic` (estimators.tether.evpo_advantage); None for a run without the switch."""
    if "est_evpo_use_critic" not in met:
        return None
    on = met["est_evpo_use_critic"].to_numpy(dtype=float)
    return int((on > 0.5).sum()), len(on)


def switch_twin(method: str, methods: list[str]) -> str | None:
    """The listed method an EVPO method equals when its switch picks the critic at every step: the
    same spec with the critic's Monte Carlo baseline (estimator gae, lambda 1), e.g.
    lc_math_evpo_g8 -> lc_math_vf_g8. None for another estimator or no such method listed."""
    spec = load_method(method).to_dict()
    if spec["estimator"] != "evpo":
        return None
    for other in methods:
        o = load_method(other).to_dict()
        if (o["estimator"] == "gae" and (o.get("critic") or {}).get("lam_gae") == 1.0
                and {k: v for k, v in o.items() if k not in ("name", "estimator")}
                == {k: v for k, v in spec.items() if k not in ("name", "estimator")}):
            return other
    return None


def switch_note(method: str, methods: list[str], switches: list[tuple[int, int] | None]) -> tuple[str, str]:
    """(the method it equals or '', a note): an EVPO method whose critic switch was on at every step
    of every seed is its `switch_twin`'s run, "= <twin> (switch on at every step: N/N)"; otherwise
    the share, "critic at n/N steps"; ('', '') for a method without the switch."""
    got = [s for s in switches if s is not None]
    if not got:
        return "", ""
    on, steps = sum(s[0] for s in got), sum(s[1] for s in got)
    twin = switch_twin(method, methods)
    if twin is not None and all(s[0] == s[1] for s in got):
        return twin, f"= {twin} (switch on at every step: {on}/{steps})"
    return "", f"critic at {on}/{steps} steps"


def protocol(method: str) -> str:
    """Matched prompts when the method spec fixes its prompts per step, else matched rollouts."""
    return "matched prompts" if load_method(method).prompts_per_step else "matched rollouts"


def run_lr(met: pd.DataFrame, rl: dict) -> dict:
    """The learning rate a run trained at, from its metrics (rl.lr or its family's tuned one,
    `engines.lr_tuning`); rl.lr and "fixed" for metrics written before runs recorded it."""
    if "lr" in met:
        return {"lr": float(met["lr"].iloc[-1]), "lr_source": str(met["lr_source"].iloc[-1])}
    return {"lr": float(rl.get("lr", np.nan)), "lr_source": "fixed"}


# the slip-template split first: chosen by a hash, not by the start's answers (evaluation.splits)
SLIP_COLUMNS = ("start_eval_slip_greedy", "eval_slip_greedy_final", "eval_slip_greedy_gain",
                "start_eval_other_greedy", "eval_other_greedy_final", "eval_other_greedy_gain",
                "slip_problems", "other_problems")
FLIP_COLUMNS = ("greedy_wrong_to_right", "greedy_right_to_wrong", "greedy_flip_net",
                "greedy_wrong_problems", "greedy_right_problems")
SPLIT_COLUMNS = ("eval_greedy_final", "eval_pass_final", "eval_greedy_wrong_final", "eval_greedy_wrong_greedy_final",
                 "start_eval_greedy", "start_eval_pass", "start_eval_greedy_wrong", "start_eval_greedy_wrong_greedy",
                 "eval_greedy_gain", "eval_pass_gain", "eval_greedy_wrong_gain", "eval_greedy_wrong_greedy_gain",
                 "greedy_wrong_share") + SLIP_COLUMNS + FLIP_COLUMNS


def final_per_problem(run) -> tuple[pd.DataFrame, Path]:
    """A run's final checkpoint's per-problem table and its path (`sparserl rl-eval` writes it)."""
    from sparserl.evaluation.evaluate import per_problem_path
    path = per_problem_path(run.eval_dir / "final.parquet")
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing beside {run.eval} (`sparserl rl-eval` writes both): delete "
                                f"{run.eval} and rerun `sparserl rl-eval --method {run.method} --seed {run.seed}`")
    return read_table(path), path


def _split_columns(run, split: pd.DataFrame | None, start: pd.DataFrame | None, labels: pd.DataFrame | None) -> dict:
    """A run's final mean@k and greedy accuracy on the greedy-wrong split with the split's size, its
    complement (flips both ways, `greedy_flips`) and the slip-template split (`slip_split`)."""
    if split is None:
        return {}
    from sparserl.evaluation.splits import greedy_flips, slip_split
    pp, path = final_per_problem(run)
    return {**{f"{k}_final": v for k, v in on_split(pp, split, path).items()},
            "greedy_wrong_share": len(split) / split.attrs["held_out"],
            **greedy_flips(start, pp, str(path)), **slip_split(start, pp, labels, str(path))}


GAIN_COLUMNS = ("eval_gain", "eval_greedy_gain", "eval_pass_gain", "eval_slip_greedy_gain", "eval_other_greedy_gain",
                "greedy_flip_net", "eval_greedy_wrong_gain", "eval_greedy_wrong_greedy_gain")


def gain_intervals(runs: pd.DataFrame) -> pd.DataFrame:
    """Per method, `<gain>_ci_lo` and `<gain>_ci_hi`: the 95% t-interval over seeds of each gain
    over the start policy (mean@k's, greedy's, pass@k's, the splits'); NaN with one seed, where
    the seed spread is unknown, or a missing value."""
    cols = [c for c in GAIN_COLUMNS if c in runs]
    rows = []
    for method, d in runs.groupby("method", sort=True):
        row = {"method": method}
        for c in cols:
            x = d[c].to_numpy(float)
            lo, hi = t_interval(x)[1:] if len(x) > 1 and np.isfinite(x).all() else (np.nan, np.nan)
            row.update({f"{c}_ci_lo": lo, f"{c}_ci_hi": hi})
        rows.append(row)
    return pd.DataFrame(rows, columns=["method"] + [f"{c}_ci_{e}" for c in cols for e in ("lo", "hi")])


def _switch_columns(met: pd.DataFrame) -> dict:
    sw = critic_switch(met)
    return {} if sw is None else {"critic_switch_steps": sw[0], "critic_switch_of": sw[1],
                                  "critic_switch_share": sw[0] / sw[1]}


def summarize_runs(cfg: dict, P: Paths, out_runs: Path | None = None, out_summary: Path | None = None) -> pd.DataFrame:
    """Per method: final reward and accuracy (mean over seeds, with the spread) and rollouts used,
    with `rollouts_note` saying why a method's total differs from the common budget. `P`: the tree
    whose runs (`methods.run.run_paths`) and start evaluation it reads; the per-run and per-method
    tables go to `out_runs` and `out_summary` (rule rl_summary's outputs; default P's)."""
    out_runs, out_summary = Path(out_runs or P.rl_runs()), Path(out_summary or P.rl_summary())
    rl = cfg["rl"]
    in_dist = in_distribution(cfg)
    start = _start_accuracy(P, in_dist)
    split = greedy_wrong_split(P)
    start_pp, labels = None, None
    if split is not None:
        from sparserl.evaluation.splits import slip_labels
        start.update(on_split(split, split, "the start policy's per-problem table"))
        start_pp, labels = start_per_problem(P)[0], slip_labels(P)
    rows = []
    for method in rl["methods"]:
        for seed in rl["seeds"]:
            run = run_paths(P, method, seed)
            met = read_table(run.metrics)
            ev = read_table(run.eval)
            fin = ev[ev["checkpoint"] == "final"]
            tail = met.tail(max(1, len(met) // 5))
            head = met.head(max(1, len(met) // 10))
            generated = int(met["rollouts_total"].iloc[-1])
            trained = int(met["rollouts_trained"].sum()) if "rollouts_trained" in met else generated
            rows.append({"method": method, "seed": seed, "steps": int(met["step"].max()),
                         "rollouts_total": generated,
                         "rollouts_per_prompt_mean": float(met["rollouts_per_prompt_mean"].mean()),
                         "train_reward_last20pct": float(tail["reward_mean"].mean()),
                         "eval_accuracy_final": float(fin["accuracy"].mean()),
                         "wall_time_s": float(met["wall_time_s"].sum()),
                         **{f"eval_{b}": float(a) for b, a in zip(fin["benchmark"], fin["accuracy"])},
                         # added after the columns above, which keep their values
                         "rollouts_generated": generated, "rollouts_trained": trained,
                         "osla_rounds_mean": float(met["osla_rounds"].mean())
                         if "osla_rounds" in met else np.nan,
                         "run": run.method,
                         "train_reward_first10pct": float(head["reward_mean"].mean()),
                         **_groups(fin, in_dist), **{f"start_{k}": v for k, v in start.items()},
                         **{f"{k}_final": v for k, v in greedy_and_pass(fin, run.eval).items()},
                         **_split_columns(run, split, start_pp, labels), "pass_metric": pass_metric(fin),
                         "protocol": protocol(method), **run_lr(met, rl),
                         **_switch_columns(met)})
    runs = pd.DataFrame(rows)
    if start:  # gains over the policy RL starts from, on the same benchmarks and protocol
        runs["eval_gain"] = runs["eval_accuracy_final"] - runs["start_eval_accuracy"]
        for g in ("in_distribution", "harder"):
            if f"eval_{g}" in runs and f"start_eval_{g}" in runs:
                runs[f"eval_gain_{g}"] = runs[f"eval_{g}"] - runs[f"start_eval_{g}"]
    for g in ("greedy", "pass", "greedy_wrong", "greedy_wrong_greedy"):  # the same over the split
        if f"start_eval_{g}" in runs:
            runs[f"eval_{g}_gain"] = runs[f"eval_{g}_final"] - runs[f"start_eval_{g}"]
    runs["train_reward_gain"] = runs["train_reward_last20pct"] - runs["train_reward_first10pct"]
    notes = [rollouts_note(r.steps, rl["steps"], rl["rollouts_per_step"], r.rollouts_generated,
                           r.rollouts_trained, None if np.isnan(r.osla_rounds_mean) else r.osla_rounds_mean,
                           r.method)
             for r in runs.itertuples()]
    runs["rollouts_note"] = notes
    write_table(runs, out_runs, cfg=cfg)
    agg = runs.groupby("method", sort=True).agg(
        seeds=("seed", "count"), rollouts_total=("rollouts_total", "mean"),
        rollouts_per_prompt=("rollouts_per_prompt_mean", "mean"),
        train_reward=("train_reward_last20pct", "mean"),
        eval_accuracy=("eval_accuracy_final", "mean"),
        eval_accuracy_sd=("eval_accuracy_final", lambda x: float(np.std(x, ddof=1)) if len(x) > 1 else 0.0),
        wall_time_s=("wall_time_s", "mean"),
        steps=("steps", "mean"), rollouts_generated=("rollouts_generated", "mean"),
        rollouts_trained=("rollouts_trained", "mean"),
        osla_rounds_mean=("osla_rounds_mean", "mean"), run=("run", "first"),
        **{c: (c, "mean") for c in ("eval_gain", "eval_gain_in_distribution", "eval_gain_harder",
                                    "train_reward_gain", "start_eval_accuracy") if c in runs},
        # greedy, pass@k and the splits beside mean@k (sharpening or learning), the start's and the gains
        **{c: (c, "mean") for c in SPLIT_COLUMNS if c in runs},
        **{c: (c, "first") for c in ("pass_metric", "protocol", "lr", "lr_source", "slip_split") if c in runs}
    ).reset_index()
    agg["eval_accuracy_se"] = agg["eval_accuracy_sd"] / np.sqrt(agg["seeds"])  # over seeds
    if "critic_switch_steps" in runs:  # Le Critique App. C's EVPO: which of its runs are VF's
        notes = {m: switch_note(m, rl["methods"], [
            None if np.isnan(r.critic_switch_steps) else (int(r.critic_switch_steps), int(r.critic_switch_of))
            for r in d.itertuples()]) for m, d in runs.groupby("method")}
        agg["critic_switch_share"] = agg["method"].map(runs.groupby("method")["critic_switch_share"].mean())
        agg["same_as"] = agg["method"].map(lambda m: notes[m][0])
        agg["critic_switch"] = agg["method"].map(lambda m: notes[m][1])
    agg = agg.merge(gain_intervals(runs), on="method", how="left")
    agg["rollouts_note"] = [
        rollouts_note(r.steps, rl["steps"], rl["rollouts_per_step"], r.rollouts_generated,
                      r.rollouts_trained, None if np.isnan(r.osla_rounds_mean) else r.osla_rounds_mean,
                      r.method)
        for r in agg.itertuples()]
    agg = agg.drop(columns="osla_rounds_mean")
    write_table(agg, out_summary, cfg=cfg)
    with pd.option_context("display.width", 160, "display.max_colwidth", 60):
        log.info("RL runs by method:\n" + agg.drop(columns="rollouts_note").round(3).to_string(index=False))
        log.info("why rollout totals differ:\n" + agg[["method", "rollouts_note"]].to_string(index=False))
    log.info(f"rl summary -> {out_summary}")
    return agg
