"""BASIS's RL figures and Table 1 (paper 004), from the RL runs' cached tables only.

The paper's grid: three GRPO-type algorithms (GRPO, GPG, GSPO), each run four ways at the same
rollouts per step: G=8 with the group mean, and G=1 with the vanilla (b = 0), REINFORCE++
(global batch mean) and BASIS baselines; BASIS trains half the steps (`steps_factor: 0.5`).
Here the G=8 rows are `grpo_g8`, `gpg_g8`, `gspo_g8` and the G=1 rows
`basis_grid_{grpo,gpg,gspo}_g1_{vanilla,rpp,basis}` (configs/methods; a cell whose spec repeats
another method's reads that run: `basis_grid_grpo_g1_vanilla` is `vanilla_g1`).

- Table 1 (`basis/t1_policy_optimization`): final accuracy per benchmark, Avg, steps, rollouts and
  wall time per row, then BASIS minus each baseline in percentage points (and the wall time BASIS
  saves), from the runs table of `sparserl rl-summary`.
- Figure 6 (`basis/f6_training_curves`, Appendix C): train reward and held-out accuracy over
  training per family, where the paper's vanilla GRPO / GPG collapse.
- Figure 8 (`basis/f8_beta_t`, Appendix D): the beta_t the online calibration selects each step.

A family is drawn when rl.methods has all four of its methods; a figure is unavailable when no
family is complete.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from sparserl.core.paths import benchmark_names
from sparserl.figures.curves import (
    EVAL_BUILT_BY,
    MEAN,
    TRAIN_BUILT_BY,
    draw_accuracy,
    draw_smoothed,
    eval_tables,
    metric_curves,
    metrics_tables,
    outlined,
    read_eval_curves,
    read_smoothed,
    run_pairs,
    smooth_window,
)
from sparserl.figures.registry import (
    FigureError,
    pyplot,
    read_single,
    register_figure,
    single,
)
from sparserl.figures.style import method_color
from sparserl.methods.spec import load_method

FAMILIES = {"GRPO": "grpo", "GPG": "gpg", "GSPO": "gspo"}
ROLES = ("G=8", "G=1 vanilla", "G=1 REINFORCE++", "G=1 BASIS")
ROLE_LABELS = {"G=8": "G=8 (group mean)", "G=1 vanilla": "G=1 vanilla (b=0)", "G=1 REINFORCE++": "G=1 REINFORCE++",
               "G=1 BASIS": "G=1 BASIS (½ steps)"}
# the role's look in every family panel: the family's colours are shades of one palette
ROLE_STYLE = {"G=8": {"ls": "-", "marker": "o"}, "G=1 vanilla": {"ls": ":", "marker": "v"},
              "G=1 REINFORCE++": {"ls": "--", "marker": "s"}, "G=1 BASIS": {"ls": "-", "marker": "D", "lw": 2.0}}
BETA_LABELS = {f"basis_grid_{f}_g1_basis": f"{F} + BASIS" for F, f in FAMILIES.items()}
DELTA_GOOD, DELTA_NEAR = "#c7e9c0", "#e3e3e3"  # the paper's green (BASIS better) and gray (< 5 pp below)


def family_methods(family: str) -> dict[str, str]:
    """Role -> method of one family of the grid (`GRPO` -> grpo_g8, basis_grid_grpo_g1_vanilla, ...)."""
    f = FAMILIES[family]
    return {"G=8": f"{f}_g8", "G=1 vanilla": f"basis_grid_{f}_g1_vanilla",
            "G=1 REINFORCE++": f"basis_grid_{f}_g1_rpp", "G=1 BASIS": f"basis_grid_{f}_g1_basis"}


def complete_families(cfg: dict) -> list[str]:
    have = set((cfg.get("rl") or {}).get("methods") or [])
    return [f for f in FAMILIES if set(family_methods(f).values()) <= have]


def _no_grid(what: str):
    def why(cfg: dict) -> str:
        if not cfg.get("rl"):
            return f"{what} needs an `rl` section in the config"
        if complete_families(cfg):
            return ""
        have = set(cfg["rl"].get("methods") or [])
        lacks = "; ".join(f"{f} lacks {', '.join(m for m in family_methods(f).values() if m not in have)}"
                          for f in FAMILIES)
        return f"{what} needs all four methods of GRPO, GPG or GSPO in rl.methods ({lacks})"
    return why


def _grid_methods(cfg: dict) -> list[str]:
    return [m for f in complete_families(cfg) for m in family_methods(f).values()]


def _roles(cfg: dict) -> pd.DataFrame:
    return pd.DataFrame([{"family": f, "role": r, "method": m} for f in complete_families(cfg)
                         for r, m in family_methods(f).items()])


# ---------------------------------------------------------------------------------------------
# Table 1

def _fmt_time(s: float) -> str:
    s = abs(s)
    return f"{s / 3600:.1f} h" if s >= 3600 else f"{s / 60:.1f} min" if s >= 120 else f"{s:.1f} s"


def _fmt_count(n: float) -> str:
    return f"{n / 1e3:.1f}K" if n >= 1e3 else f"{n:.0f}"


def _read_table1(cfg: dict, tables) -> dict:
    """Per family and role: the seeds' mean (and sd) of each benchmark's final accuracy (percent),
    their Avg (eval_accuracy_final), steps, rollouts and wall time; then BASIS minus each baseline."""
    runs = read_single(cfg, tables)
    path = tables[0]
    benches = benchmark_names(cfg)
    need = ["method", "seed", *(f"eval_{b}" for b in benches), "eval_accuracy_final", "wall_time_s", "steps",
            "rollouts_total"]
    missing = [c for c in need if c not in runs]
    if missing:
        raise FigureError(f"{path} has no {', '.join(missing)} column; rerun rule rl_summary (`sparserl rl-summary`)")
    acc_cols = [f"eval_{b}" for b in benches] + ["eval_accuracy_final"]
    rows = []
    for f in complete_families(cfg):
        stats = {}
        for role, m in family_methods(f).items():
            d = runs[runs["method"] == m]
            if not len(d):
                raise FigureError(f"{path} has no row of method {m}; rerun rule rl_summary (`sparserl rl-summary`)")
            r = {"family": f, "row": role, "method": m, "seeds": int(d["seed"].nunique())}
            for c in acc_cols:
                name = "avg" if c == "eval_accuracy_final" else c[5:]
                r[name] = 100 * float(d[c].mean())
                r[f"{name}_sd"] = 100 * float(d[c].std(ddof=1)) if len(d) > 1 else np.nan
            r.update(steps=float(d["steps"].mean()), rollouts=float(d["rollouts_total"].mean()),
                     wall_time_s=float(d["wall_time_s"].mean()))
            stats[role] = r
            rows.append(r)
        basis = stats["G=1 BASIS"]
        for role in ROLES[:3]:
            base = stats[role]
            r = {"family": f, "row": f"Δ vs {role}", "method": f"{basis['method']} - {base['method']}",
                 "seeds": min(basis["seeds"], base["seeds"])}
            for name in benches + ["avg"]:
                r[name] = basis[name] - base[name]  # percentage points
            r["time_reduction_s"] = base["wall_time_s"] - basis["wall_time_s"]
            r["time_reduction_pct"] = 100 * r["time_reduction_s"] / base["wall_time_s"] if base["wall_time_s"] else np.nan
            rows.append(r)
    df = pd.DataFrame(rows)
    cols = (["family", "row", "method", "seeds"] + [c for b in benches + ["avg"] for c in (b, f"{b}_sd")]
            + ["steps", "rollouts", "wall_time_s", "time_reduction_s", "time_reduction_pct"])
    return {"df": df.reindex(columns=cols), "benchmarks": benches}


def _table1_layout(data):
    """About 0.6 inch a number column (more with ± sd), 0.2 inch a row."""
    sd = int(data["df"]["seeds"].max()) > 1
    width = 2.7 + (0.62 + 0.3 * sd) * (len(data["benchmarks"]) + 1) + 1.7
    return pyplot().subplots(figsize=(width, 0.75 + 0.2 * (len(data["df"]) + 2)))


def _cell(v: float, sd: float) -> str:
    return f"{v:.1f}" + (f" ± {sd:.1f}" if np.isfinite(sd) else "")


@register_figure("basis/t1_policy_optimization", tables=lambda P: [P.rl_runs()], read=_read_table1,
                 layout=_table1_layout, built_by="rule rl_summary (`sparserl rl-summary`)",
                 unavailable=_no_grid("BASIS Table 1"),
                 caption="BASIS Table 1: online policy optimisation. Per GRPO-type algorithm: G=8 (group mean), "
                         "G=1 vanilla (b=0), G=1 REINFORCE++ (batch mean) and G=1 BASIS (half the steps), the same "
                         "rollouts per step; final held-out accuracy per benchmark and their unweighted mean (Avg, "
                         "percent; seed mean ± sd when there are several seeds), steps, rollouts and training wall "
                         "time (the sum of the steps' times, evaluation excluded). Each family's Δ rows: BASIS minus "
                         "that baseline in percentage points, under time the wall time BASIS saves (percent of the "
                         "baseline's); green: BASIS better, gray: within 5 pp below (the paper's colours). The tiny "
                         "and small scales differ from the paper: policy s (tiny) or m (small) on arithmetic, 40 "
                         "(tiny) or 100 (small) steps (BASIS half) of 128 (tiny) or 256 (small) rollouts against 300 "
                         "(150) of 512, the benchmarks' mean@8 (tiny) or mean@16 (small) against seven math "
                         "benchmarks at avg@32 / greedy, wall times of a shared 2-core CPU.")
def _table1(data, ax):
    df, benches = data["df"], data["benchmarks"]
    ax.axis("off")
    header = ["", "G, baseline"] + ["\n".join(b.rsplit("_", 1)) for b in benches] + ["Avg", "steps", "rollouts", "time"]
    short = {"Δ vs G=1 vanilla": "Δ vs vanilla", "Δ vs G=1 REINFORCE++": "Δ vs REINFORCE++"}
    text, colours, bold = [], [], []
    for i, r in enumerate(df.itertuples(index=False)):
        rd = r._asdict()
        first = i == 0 or df["family"].iloc[i - 1] != r.family
        delta = str(r.row).startswith("Δ")
        row = [r.family if first else "", short.get(r.row, r.row) if delta else ROLE_LABELS[r.row]]
        colour = ["white"] * len(header)
        for j, b in enumerate(benches + ["avg"]):
            v = rd[b]
            if delta:
                row.append(f"{v:+.1f}".replace("-", "−"))
                colour[2 + j] = DELTA_GOOD if v > 0 else DELTA_NEAR if v > -5 else "white"
            else:
                row.append(_cell(v, rd[f"{b}_sd"]))
        if delta:  # the wall time BASIS saves, as BASIS minus the baseline
            red, pct = rd["time_reduction_s"], rd["time_reduction_pct"]
            row += ["", "", f"{'−' if red >= 0 else '+'}{_fmt_time(red)} ({'−' if pct >= 0 else '+'}{abs(pct):.0f}%)"]
            colour[-1] = DELTA_GOOD if red > 0 else "white"
        else:
            row += [f"{rd['steps']:.0f}", _fmt_count(rd["rollouts"]), _fmt_time(rd["wall_time_s"])]
        text.append(row)
        colours.append(colour)
        bold.append(r.row == "G=1 BASIS")
    n_num = len(benches) + 1
    widths = np.array([0.7, 1.95] + [1.0] * n_num + [0.6, 0.8, 1.35])
    table = ax.table(cellText=text, colLabels=header, cellColours=colours, cellLoc="center",
                     colWidths=list(widths / widths.sum()), bbox=[0, 0, 1, 1])
    table.auto_set_font_size(False)
    table.set_fontsize(7)
    for (i, j), cell in table.get_celld().items():
        cell.set_edgecolor("0.82")
        cell.set_linewidth(0.5)
        if i == 0:
            cell.set_height(cell.get_height() * 1.8)
            cell.set_text_props(weight="bold")
        elif bold[i - 1]:
            cell.set_text_props(weight="bold")
        if j == 0 and i > 0:
            cell.set_text_props(weight="bold")
        if j == 1 and i > 0:
            cell.set_text_props(ha="left")
            cell.PAD = 0.04
    seeds = int(df["seeds"].max())
    ax.set_title(f"Table 1: online policy optimisation ({seeds} seed{'s' if seeds > 1 else ''}"
                 f"{', mean ± sd' if seeds > 1 else ''}; accuracy in %, Δ: BASIS minus the row's baseline in "
                 "percentage points)", fontsize=8.5, pad=6)


# ---------------------------------------------------------------------------------------------
# Figure 6: training curves

def _read_f6(cfg: dict, tables) -> dict:
    methods = _grid_methods(cfg)
    train = read_smoothed(cfg, metrics_tables(cfg, methods), methods, "reward_mean")
    ev = read_eval_curves(cfg, tables, methods)
    roles = _roles(cfg)
    t = train["df"].merge(roles, on="method").assign(part="train_reward")
    t = t.rename(columns={"smoothed": "value"}).drop(columns=["metric"])
    e = ev["df"][ev["df"]["benchmark"] == MEAN].merge(roles, on="method").assign(part="eval_accuracy")
    e = e.rename(columns={"accuracy": "value"}).drop(columns=["benchmark"])
    df = pd.concat([t, e], ignore_index=True)
    cols = ["family", "role", "method", "part", "step", "seeds", "value", "raw", "lo", "hi", "stderr", "window"]
    return {"df": df.reindex(columns=cols), "families": complete_families(cfg), "window": train["window"],
            "train": train["df"], "eval": ev["df"][ev["df"]["benchmark"] == MEAN], "metric": ev["metric"],
            "benchmarks": ev["benchmarks"]}


def _f6_layout(data):
    n = len(data["families"])
    fig, axes = pyplot().subplots(2, n, figsize=(3.5 * n, 5.6), squeeze=False)
    return fig, axes


@register_figure("basis/f6_training_curves", tables=lambda P: eval_tables(P, _grid_methods(P.cfg)), read=_read_f6, layout=_f6_layout,
                 built_by=EVAL_BUILT_BY, unavailable=_no_grid("BASIS Figure 6"),
                 bars="accuracy: ±1 s.e. over the problems with one seed, else the seeds' min–max band",
                 caption="BASIS Fig. 6 (Appendix C): training curves per GRPO-type algorithm, G=8 against G=1 "
                         "vanilla, REINFORCE++ and BASIS (half the steps). Top: train reward (mean over the step's "
                         "rollouts), a centred rolling mean over about a twelfth of the run, seed mean, faint: per "
                         "step; bottom: held-out accuracy (unweighted mean over the benchmarks) at the start policy, "
                         "the rl.eval_fractions checkpoints and the end, error bars ±1 s.e. over problems with one "
                         "seed, else the seeds' min–max band. The tiny and small scales differ from the paper: 40 "
                         "(tiny) or 100 (small) steps, BASIS half, 3 evaluations a run where the paper's curves "
                         "evaluate throughout, policy s (tiny) or m (small) on arithmetic, one seed at tiny.")
def _f6(data, axes):
    for j, fam in enumerate(data["families"]):
        methods = list(family_methods(fam).values())
        labels = {m: ROLE_LABELS[r] for r, m in family_methods(fam).items()}
        styles = {m: ROLE_STYLE[r] for r, m in family_methods(fam).items()}
        top, bottom = axes[0][j], axes[1][j]
        draw_smoothed(top, data["train"], methods, labels,
                      {m: {k: v for k, v in s.items() if k != "marker"} for m, s in styles.items()})
        top.set_title(fam)
        top.set_xlabel("RL step")
        draw_accuracy(bottom, data["eval"], methods, labels, styles)
        bottom.set_xlabel("RL step")
        top.legend(fontsize=6.5, frameon=False)
    axes[0][0].set_ylabel(f"train reward (rolling mean, {data['window']} steps)")
    axes[1][0].set_ylabel(f"held-out {data['metric']}\n(mean of {len(data['benchmarks'])} benchmarks)")


# ---------------------------------------------------------------------------------------------
# Figure 8: the selected beta_t

def calibrated_basis_methods(cfg: dict) -> list[str]:
    """rl.methods whose BASIS baseline calibrates beta online (est_beta in their metrics)."""
    out = []
    for m in (cfg.get("rl") or {}).get("methods") or []:
        spec = load_method(m)
        if spec.estimator.startswith("basis_") and spec.basis.fixed_beta() is None:
            out.append(m)
    return out


def _no_beta(cfg: dict) -> str:
    if not cfg.get("rl"):
        return "BASIS Figure 8 needs an `rl` section in the config"
    return "" if calibrated_basis_methods(cfg) else \
        "BASIS Figure 8 needs a BASIS method that calibrates beta (e.g. basis_grid_grpo_g1_basis) in rl.methods"


def _rolling_median(y: np.ndarray, window: int) -> np.ndarray:
    """Centred running median; np.inf (beta = inf) counts as the largest value."""
    h = window // 2
    return np.array([np.median(y[max(0, i - h):i + h + 1]) for i in range(len(y))])


def _read_f8(cfg: dict, tables) -> dict:
    methods = calibrated_basis_methods(cfg)
    curves = metric_curves(run_pairs(cfg, methods), tables, ("est_beta",))
    window = smooth_window(int(curves.groupby(["method", "seed"])["step"].size().max()))
    med = curves.groupby(["method", "step"], sort=False)["est_beta"].median().reset_index()
    parts = []
    for m, d in med.groupby("method", sort=False):
        d = d.sort_values("step")
        parts.append(d.assign(running_median=_rolling_median(d["est_beta"].to_numpy(float), window)))
    median = pd.concat(parts, ignore_index=True).rename(columns={"est_beta": "beta_seed_median"})
    seeds = curves.groupby("method")["seed"].nunique()
    median = median.assign(window=window, seeds=median["method"].map(seeds))
    # the CSV: every drawn marker (one a seed and step) with its method's running median
    df = curves[["method", "seed", "step", "est_beta"]].merge(median, on=["method", "step"], how="left")
    return {"df": df, "median": median, "per_seed": curves, "methods": methods, "window": window}


@register_figure("basis/f8_beta_t", tables=lambda P: metrics_tables(P.cfg, calibrated_basis_methods(P.cfg)),
                 read=_read_f8, layout=single((6.4, 3.8)), built_by=TRAIN_BUILT_BY, unavailable=_no_beta,
                 caption="BASIS Fig. 8 (Appendix D): the beta_t the online calibration selects at each step (the "
                         "grid value minimising the batch's leave-one-out squared error; metrics est_beta), log "
                         "scale; markers: each step of each seed, line: a centred running median over about a "
                         "twelfth of the run (of the seeds' median); beta = ∞ (the baseline is the reference pass "
                         "rate) on the top row. The paper's beta_t generally decreases over training; the tiny "
                         "and small scales differ: 20 (tiny) or 50 (small) BASIS steps (half of 40 or 100) of 128 "
                         "(tiny) or 256 (small) single-rollout prompts from policy s (tiny) or m (small), one seed at tiny.")
def _f8(data, ax):
    df, per_seed = data["median"], data["per_seed"]
    finite = per_seed["est_beta"][np.isfinite(per_seed["est_beta"])]
    top = float(finite.max()) if len(finite) else 1.0
    bottom = float(finite.min()) if len(finite) else 1.0
    y_inf = top * 4  # where beta = inf is drawn, a row above the largest finite beta
    for i, m in enumerate(data["methods"]):
        c = method_color(m)
        d = per_seed[per_seed["method"] == m]
        y = d["est_beta"].to_numpy(float)
        ax.plot(d["step"], np.where(np.isinf(y), y_inf, y), ls="none", marker="os^Dv"[i % 5], ms=3.5, color=c,
                mec="0.2", mew=0.4, alpha=0.8)
        r = df[df["method"] == m]
        yr = r["running_median"].to_numpy(float)
        ax.plot(r["step"], np.where(np.isinf(yr), y_inf, yr), color=c, lw=1.6, label=BETA_LABELS.get(m, m),
                **outlined(c, 1.6))
    ax.set_yscale("log")
    ax.axhline(np.sqrt(top * y_inf), color="0.6", lw=0.7, ls="--")
    ticks = [t for t in 10.0 ** np.arange(np.floor(np.log10(bottom)), np.ceil(np.log10(top)) + 1) if t <= top * 1.5]
    ax.set_yticks(ticks + [y_inf], [f"{t:g}" for t in ticks] + ["∞"])
    ax.yaxis.set_minor_formatter(pyplot().NullFormatter())
    ax.set_ylim(bottom / 1.6, y_inf * 12)  # headroom for the legend above the beta = inf row
    ax.set_xlabel("RL step")
    ax.set_ylabel("selected β_t (log scale)")
    seeds = int(df["seeds"].max())
    ax.set_title(f"β_t per step (markers; {seeds} seed{'s' if seeds > 1 else ''}), running median over "
                 f"{data['window']} steps (lines)", fontsize=8.5)
    ax.legend(fontsize=7, frameon=False, loc="upper center", ncol=min(3, len(data["methods"])))
