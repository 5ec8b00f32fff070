"""Curves and bars the RL figures of every paper share, from the runs' cached tables: a run's
metrics per step (`metric_curves`, smoothed by `read_smoothed`), held-out accuracy per evaluated
checkpoint (`read_eval_curves`, the start policy at step 0), and their drawing (`draw_accuracy`,
`draw_smoothed`, `seed_bars`). V0.5's figures (figures/v05.py), BASIS's Figure 6 (figures/basis.py),
the RL overview (figures/rl.py) and the head-to-head (figures/head_to_head.py) draw with them.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from sparserl.core.artifacts import read_table
from sparserl.core.paths import Paths, benchmark_names
from sparserl.figures.registry import FigureError
from sparserl.figures.style import method_color
from sparserl.methods.run import method_run

MEAN = "mean"  # the benchmark label of the mean over benchmarks

MARKERS = ("o", "s", "^", "D", "v", "P", "X")

LINESTYLES = ("-", "--", ":", "-.")

EVAL_BUILT_BY = ("rule rl_eval (`sparserl rl-eval`) and rule evaluate (`sparserl evaluate`) for the start "
                 "policy; rule rl_train for the runs' metrics")

TRAIN_BUILT_BY = "rule rl_train or rl_cluster (`sparserl rl-train` / `sparserl openrlhf-launch`)"

def needs_methods(methods, what: str):
    """`unavailable` for a figure that draws `methods`: why the config lacks it, or ''."""
    def why(cfg: dict) -> str:
        rl = cfg.get("rl")
        if not rl:
            return f"{what} needs an `rl` section in the config"
        missing = [m for m in methods if m not in set(rl.get("methods") or [])]
        return f"{what} needs {', '.join(missing)} in rl.methods" if missing else ""
    return why


def run_pairs(cfg: dict, methods) -> list[tuple[str, int]]:
    return [(m, s) for m in methods for s in cfg["rl"]["seeds"]]


def metrics_tables(cfg: dict, methods) -> list[Path]:
    """The metrics.parquet of each (method, seed) of `run_pairs`, in that order (a method that
    shares its owner's run reads the owner's table: `method_run`)."""
    return [method_run(cfg, m, s).metrics for m, s in run_pairs(cfg, methods)]


def eval_tables(P: Paths, methods) -> list[Path]:
    """The start policy's evaluation, then each run's metrics and eval tables (each path once)."""
    paths = [P.eval_table(P.cfg["rl"]["policy"])]
    for m, s in run_pairs(P.cfg, methods):
        run = method_run(P.cfg, m, s)
        paths += [run.metrics, run.eval]
    return list(dict.fromkeys(paths))


def metric_curves(runs: list[tuple[str, int]], tables: list[Path], columns=("reward_mean",)) -> pd.DataFrame:
    """`columns` of each run's metrics.parquet per step (columns method, seed, step, *columns);
    `tables[i]` is the metrics table of `runs[i]` = (method, seed). The V0.5 and BASIS curves use it too."""
    frames = []
    for (method, seed), path in zip(runs, tables, strict=True):
        df = read_table(path)
        missing = [c for c in ("step", *columns) if c not in df]
        if missing:
            raise FigureError(f"{path} has no {', '.join(missing)} column (columns: {list(df.columns)}); "
                              f"rerun the run's rl_train job to rewrite its metrics")
        frames.append(df[["step", *columns]].assign(method=method, seed=seed))
    return pd.concat(frames, ignore_index=True)


def _eval_rows(df: pd.DataFrame, path: Path) -> pd.DataFrame:
    missing = [c for c in ("benchmark", "accuracy") if c not in df]
    if missing:
        raise FigureError(f"{path} has no {', '.join(missing)} column (columns: {list(df.columns)}); "
                          "rerun the evaluation that writes it")
    keys = ["checkpoint", "benchmark"] if "checkpoint" in df else ["benchmark"]
    dup = df.duplicated(keys)
    if dup.any():
        raise FigureError(f"{path}: {int(dup.sum())} duplicate rows of {', '.join(keys)} "
                          f"(e.g. {df.loc[dup, keys].iloc[0].tolist()}); one row per benchmark expected")
    out = df[[*keys, "accuracy"]].copy()
    out["stderr"] = df["stderr"] if "stderr" in df else np.nan
    return out


def checkpoint_step(label: str, final_step: int, path: Path) -> int:
    """`final` -> the run's last step; `step00030` -> 30."""
    if label == "final":
        return int(final_step)
    m = re.fullmatch(r"step(\d+)", str(label))
    if not m:
        raise FigureError(f"{path}: checkpoint {label!r} is neither 'final' nor 'stepNNNNN'")
    return int(m.group(1))


def benchmark_order(cfg: dict, present) -> list[str]:
    """The config's benchmarks that were evaluated, in the config's order, then any others."""
    present = list(dict.fromkeys(present))
    named = [b for b in benchmark_names(cfg) if b in set(present)]
    return named + [b for b in present if b not in set(named)]


def read_eval_curves(cfg: dict, tables: list[Path], methods) -> dict:
    """Accuracy per (method, seed, step, benchmark), the mean over benchmarks as benchmark `MEAN`
    (unweighted, as the runs table's eval_accuracy_final), and its seed aggregate:
    {"raw", "df" (method, benchmark, step, seeds, accuracy, lo, hi, stderr), "methods", "benchmarks", "metric"}.
    `tables`: `eval_tables(P, methods)`, the start policy's evaluation first.
    """
    start_path = tables[0]
    start = read_table(start_path)
    metrics = set(start["metric"].astype(str)) if "metric" in start else set()
    metric = "/".join(sorted(metrics)) or "accuracy"
    start = _eval_rows(start, start_path).drop(columns="checkpoint", errors="ignore")
    frames = []
    for m, s in run_pairs(cfg, methods):
        run = method_run(cfg, m, s)
        met = read_table(run.metrics)
        if "step" not in met or not len(met):
            raise FigureError(f"{run.metrics} has no steps (columns: {list(met.columns)}); rerun its rl_train job")
        ev = read_table(run.eval)
        if "checkpoint" not in ev:
            raise FigureError(f"{run.eval} has no checkpoint column (columns: {list(ev.columns)}); rerun rl_eval")
        if metrics and "metric" in ev and set(ev["metric"].astype(str)) != metrics:
            raise FigureError(f"{run.eval} is {'/'.join(sorted(set(ev['metric'].astype(str))))} but the start "
                              f"policy's {start_path} is {metric}: evaluate both with the same config")
        ev = _eval_rows(ev, run.eval)
        ev["step"] = [checkpoint_step(c, met["step"].max(), run.eval) for c in ev["checkpoint"]]
        frames.append(pd.concat([start.assign(checkpoint="start", step=0), ev], ignore_index=True)
                      .assign(method=m, seed=s))
    raw = pd.concat(frames, ignore_index=True)
    benches = benchmark_order(cfg, raw["benchmark"])
    # mean over benchmarks; its s.e. treats the benchmarks' samples as independent
    mean = raw.groupby(["method", "seed", "step", "checkpoint"], sort=False).agg(
        accuracy=("accuracy", "mean"), stderr=("stderr", lambda x: float(np.sqrt((x ** 2).sum(min_count=len(x)))) / len(x)),
        n=("benchmark", "size")).reset_index()
    if mean["n"].nunique() > 1:
        short = mean[mean["n"] < mean["n"].max()].iloc[0]
        raise FigureError(f"{method_run(cfg, short['method'], short['seed']).eval}: checkpoint {short['checkpoint']} "
                          f"has {short['n']} benchmarks, others {mean['n'].max()}; rerun its rl_eval job")
    raw = pd.concat([raw, mean.drop(columns="n").assign(benchmark=MEAN)], ignore_index=True)
    g = raw.groupby(["method", "benchmark", "step"], sort=False)
    df = g.agg(seeds=("seed", "nunique"), accuracy=("accuracy", "mean"), lo=("accuracy", "min"),
               hi=("accuracy", "max"), stderr=("stderr", "mean")).reset_index()
    order = {b: i for i, b in enumerate(benches + [MEAN])}
    morder = {m: i for i, m in enumerate(methods)}
    df = df.sort_values(["method", "benchmark", "step"], key=lambda c: c.map(morder) if c.name == "method"
                        else c.map(order) if c.name == "benchmark" else c, kind="stable").reset_index(drop=True)
    return {"raw": raw, "df": df, "methods": list(methods), "benchmarks": benches, "metric": metric}


def outlined(color: str, lw: float) -> dict:
    """A thin grey outline for a pale method colour (a family's lightest shades vanish on white)."""
    from matplotlib import colors, patheffects
    r, g, b = colors.to_rgb(color)
    if 0.2126 * r + 0.7152 * g + 0.0722 * b < 0.7:
        return {}
    return {"path_effects": [patheffects.Stroke(linewidth=lw + 0.7, foreground="0.5"), patheffects.Normal()]}


def draw_accuracy(ax, df: pd.DataFrame, methods, labels=None, styles=None) -> None:
    """One benchmark's accuracy curve per method (rows of `read_eval_curves`' df): mean over seeds,
    band = the seeds' min-max, or with one seed error bars = the evaluation's s.e. With one seed
    the methods' points are dodged sideways (1% of the steps apart) so their bars stay apart."""
    labels = labels or {}
    present = [m for m in methods if m in set(df["method"])]
    dodge = 0.01 * float(df["step"].max() or 1) if (df["seeds"] <= 1).all() else 0.0
    for i, m in enumerate(methods):
        d = df[df["method"] == m].sort_values("step")
        if not len(d):
            continue
        c = method_color(m)
        st = {"ls": LINESTYLES[i % len(LINESTYLES)], "marker": MARKERS[i % len(MARKERS)], "lw": 1.3,
              **((styles or {}).get(m, {}))}
        x = d["step"].to_numpy() + (present.index(m) - (len(present) - 1) / 2) * dodge
        y = d["accuracy"].to_numpy()
        ax.plot(x, y, **{"color": c, "ms": 4, "mec": "0.15", "mew": 0.5, "label": labels.get(m, m),
                         **outlined(c, st["lw"]), **st})
        if (d["seeds"] > 1).any():
            ax.fill_between(x, d["lo"].to_numpy(), d["hi"].to_numpy(), color=c, alpha=0.15, lw=0)
        elif d["stderr"].notna().any():
            ax.errorbar(x, y, yerr=d["stderr"].fillna(0).to_numpy(), fmt="none", ecolor=c, elinewidth=0.9, capsize=2)


def smooth_window(n_steps: int) -> int:
    """About a twelfth of the run, odd (3 steps of 40, 9 of 100)."""
    return max(1, round(n_steps / 12)) | 1


def smooth(y: pd.Series, window: int) -> np.ndarray:
    """Centred rolling mean (edges over the steps they have)."""
    return y.rolling(window, center=True, min_periods=1).mean().to_numpy()


def read_smoothed(cfg: dict, tables: list[Path], methods, column: str) -> dict:
    """`column` per step of each method: the seed mean per step (`raw`), a centred rolling mean of
    each seed (`smoothed`: their mean, lo / hi: their min-max), and the window."""
    runs = run_pairs(cfg, methods)
    curves = metric_curves(runs, tables, (column,))
    window = smooth_window(int(curves.groupby(["method", "seed"])["step"].size().max()))
    parts = []
    for (m, s), d in curves.groupby(["method", "seed"], sort=False):
        d = d.sort_values("step")
        parts.append(d.assign(smoothed=smooth(d[column].astype(float), window)))
    per_seed = pd.concat(parts, ignore_index=True)
    df = per_seed.groupby(["method", "step"], sort=False).agg(
        seeds=("seed", "nunique"), raw=(column, "mean"), smoothed=("smoothed", "mean"),
        lo=("smoothed", "min"), hi=("smoothed", "max")).reset_index()
    return {"df": df.assign(metric=column, window=window), "methods": list(methods), "window": window,
            "column": column}


def draw_smoothed(ax, df: pd.DataFrame, methods, labels=None, styles=None) -> None:
    """Per method: the smoothed seed mean, the per-step seed mean faint behind it, the seeds' band."""
    labels = labels or {}
    for i, m in enumerate(methods):
        d = df[df["method"] == m].sort_values("step")
        if not len(d):
            continue
        c = method_color(m)
        st = {"ls": LINESTYLES[i % len(LINESTYLES)], "lw": 1.6, **((styles or {}).get(m, {}))}
        x = d["step"].to_numpy()
        ax.plot(x, d["raw"].to_numpy(), color=c, lw=0.6, alpha=0.35)
        ax.plot(x, d["smoothed"].to_numpy(), **{"color": c, "label": labels.get(m, m), **outlined(c, st["lw"]), **st})
        if (d["seeds"] > 1).any():
            ax.fill_between(x, d["lo"].to_numpy(), d["hi"].to_numpy(), color=c, alpha=0.15, lw=0)


def seed_bars(ax, df: pd.DataFrame, methods: list[str], *, err: str = "sd", color="C0", dots="C1",
              label: str | None = None):
    """Final accuracy per method, in `methods`' order: bar = mean over seeds, error bar = the seeds'
    sd or the mean's s.e. (`err`), dots = single seeds. Returns the bars' x and the seeds a method."""
    acc = df.groupby("method", sort=False)["eval_accuracy_final"]
    mean, n = acc.mean().reindex(methods), acc.size().reindex(methods)
    spread = acc.std(ddof=1).reindex(methods)
    if err == "se":
        spread = spread / np.sqrt(n)
    spread = spread.fillna(0.0)  # one seed: no spread to show
    x = np.arange(len(methods))
    ax.bar(x, mean.to_numpy(), yerr=spread.to_numpy(), color=color, alpha=0.7, capsize=3)
    pos = {m: i for i, m in enumerate(methods)}
    ax.plot(df["method"].map(pos).to_numpy(), df["eval_accuracy_final"].to_numpy(), ".", color=dots, ms=5, label=label)
    return x, n
