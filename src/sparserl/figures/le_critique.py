"""Le Critique's Figures 3-8 from the cached runs tables of `sparserl critique-summary` only.

F3 (and the curves of F7): train reward of Mean, VF and Pvf per task, K = 1 and K = 8.
F4: explained variance of VF vs Pvf over the final value batches, seed error bars.
F5: Tether vs VF vs Mean.  F6: Tether's rho over training.  F7: final rewards of every method.
F8: the lambda_GAE sweep (lambda = 1 vs 0.4^(1/L)), VF and Pvf.
A method's role (Mean, VF, Pvf, Tether, ...) comes from its spec, never from its name.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from sparserl.core.artifacts import read_table
from sparserl.envs.world import experiments
from sparserl.figures.registry import FigureError, pyplot, register_figure
from sparserl.figures.style import method_color
from sparserl.studies.le_critique import EV_BATCHES, ema, role, seed_stats  # noqa: F401 (role: used here, re-exported)

BUILT_BY = "rule critique_summary (`sparserl critique-summary`)"
BAND = "band = the seeds' min–max (none with one seed)"
SD = "±1 sd across seeds (none with one seed)"


def _color(role: str) -> str:
    """A role's colour (figures.style.ROLE_COLORS); a λ variant takes its role's."""
    return method_color(role.split(",")[0])


def _none(cfg: dict) -> str:
    return "" if cfg.get("critique", {}).get("experiments") else "Le Critique's figures need critique.experiments"


def _runs(P):
    return [P.critique.runs_table()]


def _final(P):
    return [P.critique.final_table()]


def _read(cfg, tables):
    df = read_table(tables[0])
    df["role"] = [role(m) for m in df["method"]]
    order = [e.name for e in experiments(cfg)]
    return {"df": df, "order": [o for o in order if o in set(df["experiment"])]}


def _panels(roles, need=None):
    """Layout: one axes per experiment that ran two of `roles`, one of them in `need` if given."""
    def layout(data):
        df = data["df"]

        def ran(e):
            have = set(df[(df["experiment"] == e) & df["role"].isin(roles)]["role"])
            return len(have) > 1 and (need is None or bool(have & set(need)))
        exps = [e for e in data["order"] if ran(e)]
        if not exps:
            raise FigureError(f"no experiment ran two of {roles}")
        data["panels"] = exps
        fig, axes = pyplot().subplots(1, len(exps), figsize=(3.6 * len(exps), 3.3), squeeze=False)
        return fig, axes[0]
    return layout


def _curves(roles, col="reward_mean", ylabel="train reward (EMA)", smooth=True):
    def draw(data, axes):
        df = data["df"]
        for ax, e in zip(axes, data["panels"]):
            d = df[(df["experiment"] == e) & df["role"].isin(roles)]
            for r in [r for r in roles if r in set(d["role"])]:
                runs = d[d["role"] == r]
                per_seed = [g.sort_values("step") for _, g in runs.groupby("seed")]
                steps = per_seed[0]["step"].to_numpy()
                ys = np.array([(ema(g[col].to_numpy()) if smooth else g[col].to_numpy())[:len(steps)]
                               for g in per_seed])
                mu = ys.mean(0)
                ax.plot(steps, mu, color=_color(r), lw=1.4,
                        ls="--" if "λ" in r else "-", label=f"{r} ({len(per_seed)} seeds)")
                if len(ys) > 1:
                    ax.fill_between(steps, ys.min(0), ys.max(0), color=_color(r), alpha=0.15, lw=0)
            k = int(d["k"].iloc[0])
            ax.set_title(f"{d['env'].iloc[0]}, K={k}", fontsize=9)
            ax.set_xlabel("policy step")
            ax.set_ylabel(ylabel)
            ax.legend(fontsize=6.5, frameon=False)
    return draw


def _read_rho(cfg, tables):
    data = _read(cfg, tables)
    df = data["df"]
    rho = df["est_tether_rho"] if "est_tether_rho" in df else pd.Series(np.nan, index=df.index)
    if "est_tether_rho_mean" in df:  # bucketed Tether logs one rho per bucket: their mean
        rho = rho.fillna(df["est_tether_rho_mean"])
    df["rho"] = rho
    return data


PVF_ROLES = ("Mean", "VF", "Pvf")
TETHER_ROLES = ("Mean", "VF", "Tether", "Tether (bucketed)", "EVPO")
LAMBDA_ROLES = ("VF", "Pvf", "VF, λ=0.4^(1/L)", "Pvf, λ=0.4^(1/L)")

register_figure(
    "le_critique/f3_pvf_rewards", tables=_runs, read=_read, layout=_panels(PVF_ROLES), built_by=BUILT_BY,
    unavailable=_none, bars=BAND,
    caption="Le Critique Fig. 3: train reward of Mean (leave-one-out group baseline), VF and Pvf per task "
            "(Reasoning Gym mixture at K=1 and K=8, CodeIO with the leave-one-out-group Pvf, Sudoku with "
            "the solved-grid Pvf); EMA-smoothed seed mean, band min-max over seeds.")(_curves(PVF_ROLES))
register_figure(
    "le_critique/f5_tether_rewards", tables=_runs, read=_read, layout=_panels(TETHER_ROLES, need=TETHER_ROLES[2:]), built_by=BUILT_BY,
    unavailable=_none, bars=BAND,
    caption="Le Critique Fig. 5: Tether vs VF vs Mean (and EVPO, token-bucketed Tether where run); "
            "EMA-smoothed train reward, seed mean, band min-max.")(_curves(TETHER_ROLES))
register_figure(
    "le_critique/f6_tether_rho", tables=_runs, read=_read_rho, layout=_panels(("Tether", "Tether (bucketed)", "Mean"), need=("Tether", "Tether (bucketed)")),
    built_by=BUILT_BY, unavailable=_none, bars=BAND,
    caption="Le Critique Fig. 6: Tether's mixture coefficient rho over training (rho_0 = 0, EMA d = 0.95); "
            "seed mean, band min-max; bucketed Tether: mean over buckets.")(
    _curves(("Tether", "Tether (bucketed)"), col="rho", ylabel="rho", smooth=False))
register_figure(
    "le_critique/f8_lambda_sweep", tables=_runs, read=_read, layout=_panels(LAMBDA_ROLES, need=LAMBDA_ROLES[2:]), built_by=BUILT_BY,
    unavailable=_none, bars=BAND,
    caption="Le Critique Fig. 8: VF and Pvf at lambda_GAE = 1 and 0.4^(1/L), L the response length "
            "(the paper's 0.999888 at L = 8192); EMA-smoothed train reward, seed mean, band min-max over seeds.")(_curves(LAMBDA_ROLES))


def _bars_layout(data):
    fig, ax = pyplot().subplots(figsize=(max(5.0, 1.6 * len(data["order"]) + 1.5), 3.4))
    return fig, ax


def _bars(ax, stats: pd.DataFrame, order, roles, ylabel):
    width = 0.8 / max(1, len(roles))
    for j, r in enumerate(roles):
        s = stats[stats["role"] == r].set_index("experiment")
        xs = [i for i, e in enumerate(order) if e in s.index]
        if not xs:
            continue
        mu = [s.loc[order[i], "mean"] for i in xs]
        sd = [0.0 if not np.isfinite(s.loc[order[i], "sd"]) else s.loc[order[i], "sd"] for i in xs]
        ax.bar(np.array(xs) + (j - (len(roles) - 1) / 2) * width, mu, width, yerr=sd, capsize=2,
               color=_color(r), hatch="//" if "λ" in r else None, label=r)
    ax.set_xticks(range(len(order)), order, fontsize=8)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=6.5, frameon=False, ncol=3)


def _stats(data, col):
    df = data["df"]
    st = seed_stats(df, col)
    st["role"] = [role(m) for m in st["method"]]
    return st


@register_figure("le_critique/f4_explained_variance", tables=_final, read=_read, layout=_bars_layout,
                 built_by=BUILT_BY, unavailable=_none, bars=SD,
                 caption=f"Le Critique Fig. 4: explained variance EV = 1 - Var(R - V) / Var(R) of VF and Pvf on "
                         f"the batches they evaluated, averaged over the final {EV_BATCHES} value batches "
                         f"(all of them when a run has fewer), seed mean; error bars one sd across seed means.")
def _ev(data, ax):
    st = _stats(data, "ev_final")
    _bars(ax, st, data["order"], [r for r in ("VF", "Pvf") if r in set(st["role"])], "explained variance")
    ax.axhline(0, color="0.5", lw=0.6)
    ax.set_title("Explained variance of the critic, VF vs Pvf (seed mean ± 1 sd across seeds)")


@register_figure("le_critique/f7_final_rewards", tables=_final, read=_read, layout=_bars_layout,
                 built_by=BUILT_BY, unavailable=_none, bars=SD,
                 caption="Le Critique Fig. 7: final train reward (mean of the last 20% of steps) of every method "
                         "per task, seed mean, error bars one sd.")
def _final_rewards(data, ax):
    st = _stats(data, "final_reward")
    roles = [r for r in ("Mean", "VF", "Pvf", "Tether", "Tether (bucketed)", "EVPO", "VF, λ=0.4^(1/L)",
                         "Pvf, λ=0.4^(1/L)") if r in set(st["role"])]
    _bars(ax, st, data["order"], roles, "final train reward")
    ax.set_title("Final train reward (last 20% of steps), seed mean ± 1 sd across seeds")
