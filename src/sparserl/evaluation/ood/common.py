"""What both OOD pipelines share: the settings, the policies evaluated, their labels and paths,
the table's columns and BASIS Table 2 built from it (the package docstring,
`sparserl.evaluation.ood`, describes the two pipelines)."""
from __future__ import annotations


import numpy as np
import pandas as pd

from sparserl.core.config import ConfigError, setting

#: BASIS Table 2's rows, in its order: GRPO G=8 and the three single-rollout GRPO variants
T2_METHODS = ["grpo_g8", "basis_grid_grpo_g1_vanilla", "basis_grid_grpo_g1_rpp", "basis_grid_grpo_g1_basis"]
START = "start"
#: evalplus dataset -> the benchmark's name in Table 2 (plus tests) and with the base tests only
EVALPLUS_NAMES = {"humaneval": ("HumanEval+", "HumanEval"), "mbpp": ("MBPP+", "MBPP")}
TABLE_COLUMNS = ["suite", "benchmark", "task", "metric", "policy", "method", "seed", "score", "stderr",
                 "problems", "k", "unseen_prompt_token_share", "mean_response_tokens", "checkpoint", "scale"]


def ood_settings(cfg: dict) -> dict:
    """The `ood` section with its defaults: Table 2's methods (which must be RL methods of the
    config), `basis_method` (the Δ rows: it minus each other method; default the last method),
    `start_policy` (also evaluate the RL start policy; default true)."""
    ood = cfg.get("ood")
    if not ood:
        raise ConfigError("the config has no `ood` section (BASIS Table 2's out-of-domain evaluation)")
    if not cfg.get("rl"):
        raise ConfigError("ood: the out-of-domain evaluation reads RL checkpoints; the config has no `rl` section")
    methods = list(ood.get("methods") or T2_METHODS)
    missing = [m for m in methods if m not in cfg["rl"]["methods"]]
    if missing:
        raise ConfigError(f"ood.methods: {missing} are not in rl.methods, so no run trains them; "
                          "add them to rl.methods or drop them from ood.methods")
    basis = ood.get("basis_method", methods[-1])
    if basis not in methods:
        raise ConfigError(f"ood.basis_method: {basis!r} is not one of ood.methods {methods}")
    if not (ood.get("benchmarks") or ood.get("lm_eval") or ood.get("evalplus")):
        raise ConfigError("ood: give `benchmarks` (reasoning-gym families, local scales) or "
                          "`lm_eval` / `evalplus` (paper scale)")
    return {**ood, "methods": methods, "basis_method": basis, "start_policy": setting(cfg, "ood", "start_policy")}


def policies(cfg: dict) -> list[tuple[str, str, int | None]]:
    """(label, method, seed) of every evaluated policy: `start`, then each method x rl.seeds."""
    s = ood_settings(cfg)
    out = [(START, START, None)] if s["start_policy"] else []
    return out + [(f"{m}/seed{seed}", m, int(seed)) for m in s["methods"] for seed in cfg["rl"]["seeds"]]


def parse_label(label: str) -> tuple[str, int | None]:
    """'grpo_g8/seed0' -> ('grpo_g8', 0); 'start' -> ('start', None)."""
    if label == START:
        return START, None
    method, _, seed = label.partition("/seed")
    if not method or not seed.isdigit():
        raise ValueError(f"OOD policy label {label!r}: expected 'start' or '<method>/seed<n>'")
    return method, int(seed)


def to_table(rows: list[dict]) -> pd.DataFrame:
    """Rows as the OOD table: every column of TABLE_COLUMNS, in order."""
    df = pd.DataFrame(rows)
    for c in TABLE_COLUMNS:
        if c not in df:
            df[c] = None
    df = df[TABLE_COLUMNS]
    df["seed"] = df["seed"].astype("Int64")
    return df


def t2_table(df: pd.DataFrame, methods: list[str], basis: str) -> pd.DataFrame:
    """Table 2 from the OOD table: one row per method (mean over seeds; the start policy first when
    present), a column per benchmark (in the table's order) and `Avg` (their unweighted mean), then
    one `Δ vs <method>` row per other method: BASIS minus it, in points of the score's scale."""
    benches = list(dict.fromkeys(df["benchmark"]))
    order = ([START] if START in set(df["method"]) else []) + [m for m in methods if m in set(df["method"])]
    df = df.assign(seed=df["seed"].astype("float").fillna(-1))  # the start policy has no seed
    per_seed = df.pivot_table(index=["method", "seed"], columns="benchmark", values="score")
    per_seed = per_seed.reindex(columns=benches)
    per_seed["Avg"] = per_seed[benches].mean(axis=1)
    mean = per_seed.groupby(level="method").mean().reindex(order)
    sd = per_seed.groupby(level="method").std(ddof=1).reindex(order)
    seeds = per_seed.groupby(level="method").size().reindex(order)
    rows = []
    for m in order:
        rows.append({"row": m, "kind": "method", "seeds": int(seeds[m]),
                     **{c: float(mean.loc[m, c]) for c in benches + ["Avg"]},
                     **{f"{c} sd": (float(sd.loc[m, c]) if seeds[m] > 1 else np.nan) for c in benches + ["Avg"]}})
    if basis in mean.index:
        for m in order:
            if m in (basis, START):
                continue
            rows.append({"row": f"Δ vs {m}", "kind": "delta", "seeds": int(min(seeds[m], seeds[basis])),
                         **{c: float(mean.loc[basis, c] - mean.loc[m, c]) for c in benches + ["Avg"]}})
    return pd.DataFrame(rows)
