"""Le Critique's runs in two cached tables, which its figures and the note read.

  runs.parquet   one row per (experiment, method, seed, step): train reward, the critic's EV on
                 the evaluated batch, Tether's rho, EVPO's switch, value loss
  final.parquet  one row per run: final train reward (mean of the last `FINAL_FRACTION` of the
                 steps), held-out reward of the final policy and of the start policy, the EV over
                 the final `EV_BATCHES` value batches (Figure 4: the paper's final 50)
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from sparserl.core.artifacts import read_table, write_table
from sparserl.methods.spec import load_method

FINAL_FRACTION = 0.2
EV_BATCHES = 50  # Le Critique Figure 4: "averaged across seeds and the final 50 value batches"


def role(method: str) -> str:
    """Mean / VF / Pvf / Tether / Tether (bucketed) / EVPO, with the lambda when it is not 1: a
    method's role in the paper comes from its spec, never from its name."""
    m = load_method(method)
    base = {"tether": "Tether", "tether_bucketed": "Tether (bucketed)", "evpo": "EVPO"}.get(m.estimator)
    if m.critic is None:
        base = "Mean"
    elif base is None:
        base = "VF" if m.critic.privileged == "none" else "Pvf"
    lam = None if m.critic is None else m.critic.lam_gae
    return base if lam in (1, 1.0, None) else f"{base}, λ=0.4^(1/L)"


def final_row(metrics: pd.DataFrame, summary: dict, start: dict) -> dict:
    n = len(metrics)
    tail = metrics.iloc[-max(1, int(round(FINAL_FRACTION * n))):]
    ev = metrics["critic_ev"].dropna().iloc[-EV_BATCHES:] if "critic_ev" in metrics else pd.Series(dtype=float)
    rho = metrics["est_tether_rho"] if "est_tether_rho" in metrics else (
        metrics["est_tether_rho_mean"] if "est_tether_rho_mean" in metrics else pd.Series(dtype=float))
    return {"final_reward": float(tail["reward_mean"].mean()), "first_reward": float(metrics["reward_mean"].iloc[0]),
            "heldout_reward": float(summary["heldout_reward"]), "start_heldout_reward": float(start["heldout_reward"]),
            "heldout_gain": float(summary["heldout_reward"]) - float(start["heldout_reward"]),
            "ev_final": float(ev.mean()) if len(ev) else float("nan"),
            "rho_final": float(rho.iloc[-1]) if len(rho) else float("nan"),
            "rollouts_total": int(summary["rollouts_total"]), "warmup_updates": int(summary["warmup_updates"]),
            "wall_time_s": float(metrics["wall_time_s"].sum())}


def write_runs_table(cfg: dict, summaries: list, starts: list, runs_out, final_out) -> str:
    """runs.parquet (`runs_out`) and final.parquet (`final_out`) from each run's summary.json
    (`summaries`, in the tables' row order; its metrics.parquet beside it) and each env's start
    evaluation (`starts`). A run's identity (experiment, env, K, method, seed) is its summary's."""
    rows, finals = [], []
    start = {}
    for path in starts:
        doc = json.loads(Path(path).read_text())
        start[doc["env"]] = doc
    for path in summaries:
        summary = json.loads(Path(path).read_text())
        keys = {k: summary[k] for k in ("experiment", "env", "k", "method", "seed")}
        if keys["env"] not in start:
            raise ValueError(f"{path}: env {keys['env']!r} has no start evaluation among {list(map(str, starts))}; "
                             "pass its start_eval/<env>.json (rule critique_start)")
        met = read_table(Path(path).parent / "metrics.parquet")
        rows.append(met.assign(**keys))
        finals.append({**keys, **final_row(met, summary, start[keys["env"]])})
    runs = pd.concat(rows, ignore_index=True)
    write_table(runs, runs_out, cfg=cfg)
    write_table(pd.DataFrame(finals), final_out, cfg=cfg)
    return str(runs_out)


def seed_stats(final: pd.DataFrame, col: str) -> pd.DataFrame:
    """Mean, sd and seed count of `col` per (experiment, method)."""
    g = final.groupby(["experiment", "method"], sort=False)[col]
    return pd.DataFrame({"mean": g.mean(), "sd": g.std(ddof=1), "n": g.size()}).reset_index()


def ema(x: np.ndarray, alpha: float = 0.3) -> np.ndarray:
    """The EMA smoothing the paper's reward curves use [our choice of alpha at 40 steps]."""
    out = np.empty(len(x))
    acc = x[0] if len(x) else 0.0
    for i, v in enumerate(x):
        acc = alpha * v + (1 - alpha) * acc
        out[i] = acc
    return out
