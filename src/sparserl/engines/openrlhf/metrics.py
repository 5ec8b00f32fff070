"""An OpenRLHF run's outputs in our artifact format: its TensorBoard scalars as metrics.parquet
(the local trainer's column names where they mean the same), and the rollouts the experience
maker harvested as rollouts.parquet."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

HARVEST_FILE = "rollouts.jsonl"  # under the run's openrlhf/ folder, one JSON row per rollout


def metrics_from_tensorboard(tb_dir: str | Path):
    """OpenRLHF's TensorBoard scalars as one row per global step ('train/rollout/reward_mean' ->
    'rollout_reward_mean', 'eval/x' -> 'eval_x'); 'reward_mean' (the local trainer's name) is an
    alias of 'rollout_reward_mean'. Empty (a 'step' column only) without tensorboard installed."""
    import pandas as pd

    rows: dict[int, dict] = {}
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError:  # tensorboard is an OpenRLHF dependency on the cluster
        return pd.DataFrame({"step": []})
    for ev_dir in sorted({p.parent for p in Path(tb_dir).rglob("events.out.tfevents.*")}):
        acc = EventAccumulator(str(ev_dir))
        acc.Reload()
        for tag in acc.Tags().get("scalars", []):
            name = (tag.split("/", 1)[1] if tag.startswith("train/") else tag).replace("/", "_")
            for e in acc.Scalars(tag):
                rows.setdefault(int(e.step), {"step": int(e.step)})[name] = float(e.value)
    df = pd.DataFrame([rows[k] for k in sorted(rows)]) if rows else pd.DataFrame({"step": []})
    for src in ("rollout_reward_mean", "reward"):
        if src in df.columns:
            df["reward_mean"] = df[src]
            break
    return df


def harvested_rollouts(work_dir: str | Path) -> pd.DataFrame:
    """The rows `SparseRLExperienceMaker` appended (prompt_id, step, reward, length), in order."""
    path = Path(work_dir) / HARVEST_FILE
    cols = ["prompt_id", "step", "reward", "length"]
    if not path.exists():
        return pd.DataFrame({c: [] for c in cols})
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return pd.DataFrame(rows, columns=cols)
