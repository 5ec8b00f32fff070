"""The BASIS value study on RL checkpoints, as the paper runs it (BASIS Section 5.1, Appendix A).

The paper post-trains with GRPO and takes checkpoints from the early, middle and late stages of
training; each gets 256 held-out Monte Carlo rollouts per prompt for the oracle, and the value
estimators are scored against it with the starting policy as BASIS's reference. Ours: config
`basis.study_checkpoints: {method, seed, fractions, prompts}` names one RL run (tiny/small:
`grpo_g8` seed 0, the policy `rl.policy` as the reference, its cache `Paths.reference_cache`) and
the fractions of its steps (0.25, 0.5, 1.0: early, middle, late; the trainer keeps those
checkpoints for this run, `methods.spec.study_snapshot_steps`). The oracle of each checkpoint is
`oracle_n` rollouts per prompt on a fixed, seeded subset of `prompts` pool prompts (the whole pool
when null), `sparserl study-checkpoint-oracle`.

Per stage the tables are today's: `basis_value.simulate` on (reference cache, the checkpoint's
oracle) and `basis_value.mse_by_method`, with a `stage` column; and BASIS Figure 2: the MSE of the
initial estimate V^_beta(phat) (no batchwise refinement) against the refined UNB estimate
V~_beta over the beta calibration grid, with how often the batch's calibration picks each beta.

The snapshot pair of `basis.study_reference` / `basis.study_oracle` (s@p50 -> s@p75) is the
stress test: a larger drift than an RL run's.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from sparserl.core.config import ConfigError, with_defaults
from sparserl.core.paths import Paths
from sparserl.estimators import basis_calibrate, basis_refine, basis_value

from . import BASIS_TABLES, StudyData, study_refs, study_seed
from . import basis_value as bv

STAGE_NAMES = ("early", "middle", "late")
STAGE_TABLES = ("stage_mse_by_method", "stage_initial_vs_refined")


def checkpoint_settings(cfg: dict) -> dict | None:
    """`basis.study_checkpoints` over its schema defaults; None when the study is off (no key, no RL)."""
    sc = (cfg.get("basis") or {}).get("study_checkpoints")
    if not sc or not cfg.get("rl"):
        return None
    out = with_defaults(sc, "basis", "study_checkpoints")
    if "method" not in out:
        raise ConfigError("basis.study_checkpoints needs `method` (the RL run whose checkpoints are studied, "
                         "e.g. grpo_g8)")
    fr = [float(f) for f in out["fractions"]]
    if not fr or any(not 0 < f <= 1 for f in fr) or fr != sorted(set(fr)):
        raise ConfigError(f"basis.study_checkpoints.fractions = {out['fractions']}: give increasing fractions "
                         "in (0, 1] of the run's steps, e.g. [0.25, 0.5, 1.0]")
    out["fractions"] = fr
    return out


@dataclass(frozen=True)
class StudyCheckpoint:
    """One stage of the study: a checkpoint of the run and where its oracle goes."""

    method: str  # the run trained (its owner when the named method repeats another's spec)
    seed: int
    run_dir: Path
    stage: str
    fraction: float
    step: int
    label: str  # RunPaths.checkpoint_label(step), or "final"
    path: Path  # the HF checkpoint directory the run's engine saved
    oracle: Path  # Paths.checkpoint_oracle


def stage_names(n: int) -> list[str]:
    return list(STAGE_NAMES) if n == 3 else [f"stage{i + 1}" for i in range(n)]


def study_checkpoints(P: Paths) -> list[StudyCheckpoint]:
    """The study's checkpoints in training order, their oracles in tree `P` ([] when
    basis.study_checkpoints is off)."""
    from sparserl.engines.report import openrlhf_step_offset
    from sparserl.methods.run import method_run
    from sparserl.methods.spec import fraction_step, load_method, total_steps
    cfg = P.cfg
    sc = checkpoint_settings(cfg)
    if sc is None:
        return []
    run = method_run(cfg, sc["method"], sc["seed"])  # the owner's run when the spec repeats another
    spec = load_method(run.method)
    n = total_steps(cfg["rl"], spec)
    offset = openrlhf_step_offset(spec) if run.engine == "openrlhf" else 0
    out = []
    for stage, f in zip(stage_names(len(sc["fractions"])), sc["fractions"]):
        step = fraction_step(f, n)
        final = step == n
        label = "final" if final else run.checkpoint_label(step)
        out.append(StudyCheckpoint(method=run.method, seed=int(sc["seed"]), run_dir=run.dir, stage=stage,
                                   fraction=f, step=step, label=label,
                                   path=run.final if final else run.checkpoint(step + offset),
                                   oracle=P.checkpoint_oracle(run.method, sc["seed"], label)))
    return out


def study_prompt_ids(cfg: dict, pool_ids) -> list | None:
    """The fixed prompt subset of the checkpoint oracles: `prompts` pool ids drawn with the study's
    seed, in pool order (the pool is ordered by level, so its head would be the easiest level);
    None for the whole pool."""
    k = (checkpoint_settings(cfg) or {}).get("prompts")
    ids = np.asarray(pool_ids, dtype=object)
    if k is None or int(k) >= len(ids):
        return None
    keep = np.sort(np.random.default_rng(study_seed(cfg)).choice(len(ids), size=int(k), replace=False))
    return ids[keep].tolist()


# --------------------------------------------------------------------------- tables


def initial_vs_refined(data: StudyData, s: dict, seed: int, kind: str = "unb") -> pd.DataFrame:
    """BASIS Figure 2 on one checkpoint: per beta of the calibration grid, the MSE against the
    oracle value of the initial estimate V^_beta = V*_beta(phat) (Eq. 4, used as the baseline
    without refinement) and of the refined V~_beta (`basis_refine`, one rollout per prompt), over
    `repeats` batches of B prompts; `frac_chosen`: how often the batch's own calibration
    (`basis_calibrate`, as basis_unb runs it) picks that beta."""
    grid = bv.beta_grid(s["beta_grid_size"])
    n_ref = data.ref.shape[1] if s.get("reference_n") is None else int(s["reference_n"])
    phat_all = data.ref[:, :n_ref].mean(axis=1)
    B, repeats, eps, inactive = int(s["B"]), int(s["repeats"]), float(s["eps"]), s["inactive"]
    if B > data.n_prompts:
        raise ValueError(f"batch size B={B} exceeds the {data.n_prompts} prompts present in both caches")
    rng = np.random.default_rng(seed)
    err = np.zeros((2, repeats, len(grid)))
    chosen = np.zeros(len(grid))
    for rep in range(repeats):
        idx = rng.choice(data.n_prompts, size=B, replace=False)
        r = bv.draw_rewards(rng, data.oracle[idx], 1)[:, 0]
        p, phat = data.p[idx], phat_all[idx]
        vhat = basis_value(phat[None, :], grid[:, None])  # (grid, B)
        vt = np.stack([basis_refine(v, r, eps=eps, kind=kind, inactive=inactive) for v in vhat])
        err[0, rep] = ((vhat - p) ** 2).mean(axis=1)
        err[1, rep] = ((vt - p) ** 2).mean(axis=1)
        beta, _ = basis_calibrate(phat, r, grid, eps=eps, kind=kind, inactive=inactive)
        chosen[int(np.flatnonzero(grid == beta)[0])] += 1
    rows = []
    for e, name in enumerate(("initial", "refined")):
        for k, beta in enumerate(grid):
            x = err[e, :, k]
            rows.append(dict(estimator=name, kind=kind, beta_index=k, beta=float(beta), mse=float(x.mean()),
                             mse_se=float(x.std(ddof=1) / np.sqrt(repeats)) if repeats > 1 else np.nan,
                             frac_chosen=float(chosen[k] / repeats), n_batches=repeats, B=B))
    return pd.DataFrame(rows)


def _stage_columns(ck: StudyCheckpoint, data: StudyData) -> dict:
    return dict(stage=ck.stage, fraction=ck.fraction, step=ck.step, checkpoint=ck.label,
                prompts=data.n_prompts, mean_oracle_p=float(data.p.mean()),
                mean_reference_phat=float(data.ref.mean()))


def _with_stage(df: pd.DataFrame, cols: dict) -> pd.DataFrame:
    front = pd.DataFrame({k: [v] * len(df) for k, v in cols.items()}, index=df.index)
    return pd.concat([front, df], axis=1)


def stage_tables(stages: list[tuple[StudyCheckpoint, StudyData]], s: dict, seed: int) -> dict[str, pd.DataFrame]:
    """Both tables over the stages: `stage_mse_by_method` (today's `mse_by_method` per checkpoint,
    BASIS vs REINFORCE++ and GRPO G=8 in its pct_vs_* columns) and `stage_initial_vs_refined`."""
    mse, f2 = [], []
    for ck, data in stages:
        cols = _stage_columns(ck, data)
        raw = bv.simulate_from_settings(data, s, seed)
        mse.append(_with_stage(bv.mse_by_method(raw, s["bootstrap"], seed), cols))
        f2.append(_with_stage(initial_vs_refined(data, s, seed), cols))
    return {"stage_mse_by_method": pd.concat(mse, ignore_index=True),
            "stage_initial_vs_refined": pd.concat(f2, ignore_index=True)}


# --------------------------------------------------------------------------- which caches F3 / F5 read

STRESS = "stress_"  # table / figure prefix of the snapshot-pair stress test


def main_checkpoint(P: Paths) -> StudyCheckpoint | None:
    """The checkpoint of the F3 / F5 tables in tree `P`: the middle one (BASIS 5.1: "an intermediate
    training checkpoint"); None when basis.study_checkpoints is off."""
    cks = study_checkpoints(P)
    return cks[len(cks) // 2] if cks else None


def study_variants(P: Paths) -> dict[str, tuple[Path, Path]]:
    """Table prefix -> (reference cache, oracle) of the BASIS value-study tables (F3a-d, F5a-d,
    summary.json). With basis.study_checkpoints: "" is the RL run's middle checkpoint against the
    start policy (the paper's protocol) and "stress_" the snapshot pair basis.study_reference ->
    basis.study_oracle; without it (the smoke config) "" is the snapshot pair. {} without the pair
    (the studies stage needs it: the V0.5 statistics read it). The caches of tree `P`."""
    cfg = P.cfg
    refs = study_refs(cfg)
    if not refs:
        return {}
    pair = (P.reference_cache(refs[0]), P.oracle(refs[1]))
    main = main_checkpoint(P)
    if main is None:
        return {"": pair}
    return {"": (P.reference_cache(cfg["rl"]["policy"]), main.oracle), STRESS: pair}


def targets(sp) -> list[Path]:
    """The RL-checkpoint study's stage tables, and the snapshot-pair stress test's tables and
    summary (`study_variants`) of `sp`, a `StudyPaths`; [] unless basis.study_checkpoints is set."""
    if not checkpoint_settings(sp.P.cfg):
        return []
    out = [sp.csv("basis", t) for t in STAGE_TABLES]
    if STRESS in study_variants(sp.P):
        # F3's tables and the summary; F5's sensitivity is the main study's only (tiny's DAG time)
        out += [sp.summary("basis", STRESS)] + [sp.csv("basis", STRESS + t) for t in BASIS_TABLES]
    return out
