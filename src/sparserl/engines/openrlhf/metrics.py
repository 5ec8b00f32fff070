"""An OpenRLHF run's outputs in our artifact format: its TensorBoard scalars as metrics.parquet
(the local trainer's column names where they mean the same), and the rollouts the experience
maker harvested as rollouts.parquet."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

HARVEST_FILE = "rollouts.jsonl"  # under the run's openrlhf/ folder, one JSON row per rollout


def metrics_from_tensorboard(tb_dir: str | Path, warmup_steps: int = 0):
    """OpenRLHF's TensorBoard scalars as one row per global step ('train/rollout/reward_mean' ->
    'rollout_reward_mean', 'eval/x' -> 'eval_x'); 'reward_mean' (the local trainer's name) is an
    alias of 'rollout_reward_mean', 'wall_time_s' of 'timing_step_total', 'entropy' of
    'entropy_loss'. Empty (a 'step' column only) without tensorboard installed.

    'step' is the POLICY step: with a critic warm-up of W = `warmup_steps` critic-only steps
    (`critic_warmup.critic_warmup_steps`), OpenRLHF's global step g is policy step g - W; 'global_step'
    keeps g, and the W warm-up rows (step <= 0, the start policy's rollouts) stay, flagged
    'critic_warmup' = 1.

    A retried run (resumed from its checkpoint, or started over) writes a second event file into
    the same folder. Files are read in the order they were started; a later one replaces every
    step from its first logged step on, so the steps a killed run logged after its checkpoint are
    replaced by the resumed run's, and a run that started over replaces all of them."""
    import pandas as pd

    rows: dict[int, dict] = {}
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError:  # tensorboard is an OpenRLHF dependency on the cluster
        return pd.DataFrame({"step": []})
    sessions = []
    for path in Path(tb_dir).rglob("events.out.tfevents.*"):
        acc = EventAccumulator(str(path), size_guidance={"scalars": 0})  # 0: every step, no sampling
        acc.Reload()
        pts = [(e.wall_time, int(e.step), (tag.split("/", 1)[1] if tag.startswith("train/") else tag).replace("/", "_"),
                float(e.value)) for tag in acc.Tags().get("scalars", []) for e in acc.Scalars(tag)]
        if pts:
            sessions.append(sorted(pts))  # by wall time: a step logged twice keeps its later value
    for pts in sorted(sessions, key=lambda s: s[0][0]):
        first = min(step for _t, step, _n, _v in pts)
        rows = {k: v for k, v in rows.items() if k < first}
        for _t, step, name, value in pts:
            rows.setdefault(step, {"step": step})[name] = value
    df = pd.DataFrame([rows[k] for k in sorted(rows)]) if rows else pd.DataFrame({"step": []})
    for src in ("rollout_reward_mean", "reward"):
        if src in df.columns:
            df["reward_mean"] = df[src]
            break
    if "timing_step_total" in df.columns:
        df["wall_time_s"] = df["timing_step_total"]
    if "entropy_loss" in df.columns:  # logged with --actor.entropy_coef (0: the entropy, not a loss term)
        df["entropy"] = df["entropy_loss"]
    # the local trainer's budget columns, which rl_summary reads
    if "rollout_num_samples" in df.columns:
        df["rollouts_total"] = df["rollout_num_samples"].cumsum()
    if "group_size" in df.columns:  # OpenRLHF averages it over rollouts, not prompts
        df["rollouts_per_prompt_mean"] = df["group_size"]
    return policy_steps(df, warmup_steps)


def policy_steps(df: pd.DataFrame, warmup_steps: int) -> pd.DataFrame:
    """A table keyed by OpenRLHF's global step ('step') re-keyed by policy step (module doc of
    `metrics_from_tensorboard`); unchanged without a warm-up."""
    W = int(warmup_steps)
    if W <= 0 or "step" not in df.columns:
        return df
    df = df.copy()
    df.insert(1, "global_step", df["step"].astype(int))
    df["step"] = df["global_step"] - W
    df["critic_warmup"] = (df["step"] <= 0).astype(int)
    return df


def harvested_rollouts(work_dir: str | Path) -> pd.DataFrame:
    """The rows `SparseRLExperienceMaker` appended (prompt_id, step, reward, length), in order."""
    path = Path(work_dir) / HARVEST_FILE
    cols = ["prompt_id", "step", "reward", "length"]
    if not path.exists():
        return pd.DataFrame({c: [] for c in cols})
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return pd.DataFrame(rows, columns=cols)
