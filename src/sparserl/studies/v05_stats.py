"""V0.5 statistics study: what the V0.5 paper proves but never measures (its review, "What is
not shown" / "Missing ablations"), on cached oracle rollouts with priors of known quality.

Truth: mu_true = 2p - 1 with p the oracle pass rate; rewards are drawn without replacement from the
prompt's cached oracle rollouts (the finite-population model of `sparserl.studies`). Priors are
pluggable (`sparserl.values.priors`): the oracle plus a known offset delta on the V = 2p - 1 scale (so
the true prior bias |Delta| = delta unless clipped at +-1), constants (0.5, the pool mean) and the
stale reference checkpoint's pass rates.

1. Fusion at fixed k (`bias_table`): for k in {1,2,4,8,16} the bias E[mu] - mu_true and MSE of the
   fused baseline mu (`shrinkage_fusion`) and of the endpoints prior-only (mu = V) and
   empirical-only (mu = vbar_k), per prompt EXACTLY: the number of successes among k draws without
   replacement is hypergeometric, so E[.] is a finite sum over j = 0..k (no Monte Carlo noise).
   Theorem 3.4's bound |bias| <= 1/sqrt(k) is checked per prompt: the table reports, per
   difficulty bin, max |bias| sqrt(k) (<= 1 means inside the bound), plus the test's rejection
   probability P(Delta2 > 0).
2. OSLA (`osla_runs`): `run_osla` on random batches of B prompts, the sample_fn drawing from the
   cached rollouts; per prior and cost c: rollouts per prompt, stopping times and reasons, the
   test's rejection at k_init, and the regret against the oracle.

Regret (documented choice). With the TRUE Delta^2 = (mu_true - V)^2 of a prompt, the risk OSLA
targets is R(k) = Delta^2 / (k Delta^2 + 1) + c k (V0.5, arXiv 2603.10848, Eq. 11: MSEhat(k) + c k,
i.e. the MSE of the fusion with the oracle weight under the 1/k noise bound, plus the compute cost).
The oracle knows Delta^2: its continuous optimum is k_oracle = 1/sqrt(c) - 1/Delta^2 (V0.5
Appendix A.7), and on the budgets OSLA can end at, K = {k_init, k_init + k_step, ..., k_max}, it
picks k*_grid = argmin_{k in K} R(k) (R is convex in k, so k*_grid is the grid point next to
clip(k_oracle, k_init, k_max)). Regret of a prompt = R(K_OSLA) - R(k*_grid) >= 0 (V scale);
regret / c counts it in rollouts. Also reported: the realised risk (mu_OSLA - mu_true)^2 + c K.
k_max is min(floor(1/sqrt(c)), cached rollouts per prompt).
"""
from __future__ import annotations

import math

import numpy as np
from scipy.stats import hypergeom
import pandas as pd

from sparserl.core.config import section_setting
from sparserl.estimators import osla_k_max, shrinkage_fusion
from sparserl.methods.osla_sampler import REASONS, cached_sample_fn, run_osla
from sparserl.values.priors import make_prior

from . import StudyData, bin_labels, difficulty_bins

ESTIMATORS = ("fusion", "prior_only", "empirical_only")


# --------------------------------------------------------------------------- priors


def prior_specs(v: dict, data: StudyData) -> list[dict]:
    """The priors of the study, from settings `v` (offsets, constant_priors, reference_prior)."""
    specs = [dict(name=f"oracle+{float(d):g}", kind="oracle", offset=float(d), sign=v["offset_sign"])
             for d in v["offsets"]]
    for c in v.get("constant_priors", []):
        if c == "pool_mean":
            specs.append(dict(name="pool mean", kind="constant", p=float(data.p.mean()), offset=np.nan))
        else:
            specs.append(dict(name=f"constant {float(c):g}", kind="constant", p=float(c), offset=np.nan))
    if section_setting(v, "basis", "study", "v05", "reference_prior"):
        specs.append(dict(name="reference", kind="reference", offset=np.nan))
    if v.get("v0_prior", False):  # the trained V0 (values.v0.prior), values from `v0_prior_values`
        specs.append(dict(name="v0", kind="v0", offset=np.nan))
    return specs


def v0_prior_values(P, data: StudyData, seed: int, context: int = 256) -> np.ndarray:
    """The V0 prior's p for every prompt of the study, as V0.5 would query it: a context of
    `context` (prompt, reward) pairs of the current policy, one rollout each (the last oracle
    column). The prompts are split in two halves and each half is predicted from a context drawn
    from the other, so no prompt sees its own reward."""
    from sparserl.values.v0.prior import make_v0_prior
    from sparserl.values.v0.settings import v0_settings
    kind = v0_settings(P.cfg)["embedder"]["kind"]  # the layout `P`'s trained V0 and pool embeddings
    prior = make_v0_prior({"kind": "v0"}, seed, P.cfg, model=P.v0_prior_model(), pool=P.train_pool(),
                          embeddings=P.v0_pool_embeddings(kind))
    ids = [str(i) for i in data.ids]
    rng = np.random.default_rng([seed, 5])
    half = rng.permutation(len(ids)) % 2
    out = np.empty(len(ids))
    for h in (0, 1):
        pool = np.flatnonzero(half != h)
        ctx = rng.choice(pool, min(context, len(pool)), replace=False)
        tgt = np.flatnonzero(half == h)
        out[tgt] = prior([ids[i] for i in tgt], [(ids[i], float(data.oracle[i, -1])) for i in ctx])
    return out


def prior_values(spec: dict, data: StudyData, seed: int, extra: dict | None = None) -> np.ndarray:
    """p of the spec's prior for every prompt of `data` (context unused by these priors; a learned
    prior's values come precomputed in `extra`, e.g. {'v0': v0_prior_values(...)})."""
    ids = list(data.ids)
    if spec["kind"] == "v0":
        if not extra or "v0" not in extra:
            raise ValueError("basis.study.v05.v0_prior needs the V0 prior's values (v0_prior_values; "
                             "the study command computes them from the trained V0)")
        return np.asarray(extra["v0"], dtype=np.float64)
    if spec["kind"] == "oracle":
        prior = make_prior("oracle", values=dict(zip(ids, data.p)), offset=spec["offset"], sign=spec["sign"], seed=seed)
    elif spec["kind"] == "constant":
        prior = make_prior("constant", p=spec["p"])
    elif spec["kind"] == "reference":
        prior = make_prior("oracle", values=dict(zip(ids, data.ref.mean(axis=1))), offset=0.0)
    else:
        raise ValueError(f"unknown prior kind {spec['kind']!r}")
    return np.asarray(prior(ids, None), dtype=np.float64)


# --------------------------------------------------------------------------- exact fixed-k moments


def hypergeom_pmf(N: int, S: np.ndarray, k: int) -> np.ndarray:
    """(P, k+1): P(j successes among k draws without replacement from N with S successes)."""
    S = np.asarray(S, dtype=np.int64)
    if not 0 < k <= N:
        raise ValueError(f"k={k} must be in 1..{N}")
    return hypergeom.pmf(np.arange(k + 1)[None, :], N, S[:, None], k)


def fixed_k_moments(N: int, S: np.ndarray, k: int, prior_v: np.ndarray) -> dict:
    """Exact per-prompt E, bias, MSE of fused / prior-only / empirical-only mu at fixed k, and the
    test's rejection probability P(Delta2 > 0); mu_true = 2 S/N - 1."""
    pmf = hypergeom_pmf(N, S, k)
    mu_true = 2.0 * np.asarray(S) / N - 1.0
    vbar = 2.0 * np.arange(k + 1)[None, :] / k - 1.0
    V = np.asarray(prior_v, dtype=np.float64)[:, None]
    mu, w, d2 = shrinkage_fusion(np.broadcast_to(vbar, pmf.shape), k, np.broadcast_to(V, pmf.shape))
    out = {}
    for name, m in (("fusion", mu), ("prior_only", np.broadcast_to(V, pmf.shape)),
                    ("empirical_only", np.broadcast_to(vbar, pmf.shape))):
        e = (pmf * m).sum(axis=1)
        out[name] = dict(bias=e - mu_true, mse=(pmf * (m - mu_true[:, None]) ** 2).sum(axis=1))
    out["fusion"]["p_reject"] = (pmf * (d2 > 0)).sum(axis=1)
    out["fusion"]["mean_w"] = (pmf * w).sum(axis=1)
    return out


def bias_table(data: StudyData, v: dict, seed: int, extra: dict | None = None) -> pd.DataFrame:
    """Per prior x k x estimator x difficulty bin (and 'all'): mean MSE, mean bias, max |bias|,
    the bound 1/sqrt(k), max |bias| sqrt(k), whether inside the bound, rejection probability."""
    N = data.oracle.shape[1]
    S = data.oracle.sum(axis=1).astype(np.int64)
    edges = v["difficulty_edges"]
    bins = difficulty_bins(data.p, edges)
    labels = bin_labels(edges)
    rows = []
    for spec in prior_specs(v, data):
        pv = 2.0 * prior_values(spec, data, seed, extra) - 1.0
        for k in v["ks"]:
            if k > N:
                continue
            mom = fixed_k_moments(N, S, int(k), pv)
            bound = 1.0 / math.sqrt(k)
            for est in ESTIMATORS:
                m = mom[est]
                groups = [("all", -1, np.ones(len(S), bool))] + [(labels[j], j, bins == j) for j in range(len(labels))]
                for lab, j, sel in groups:
                    if not sel.any():
                        continue
                    ab = np.abs(m["bias"][sel])
                    rows.append(dict(prior=spec["name"], prior_kind=spec["kind"], offset=spec["offset"], k=int(k),
                                     estimator=est, p_bin=j, p_bin_label=lab, n_prompts=int(sel.sum()),
                                     mse=float(m["mse"][sel].mean()), bias=float(m["bias"][sel].mean()),
                                     abs_bias_mean=float(ab.mean()), abs_bias_max=float(ab.max()), bound=bound,
                                     max_ratio=float(ab.max() / bound), within_bound=bool(ab.max() <= bound + 1e-12),
                                     reject_rate=float(m["p_reject"][sel].mean()) if est == "fusion" else np.nan,
                                     mean_w=float(m["mean_w"][sel].mean()) if est == "fusion" else np.nan))
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- OSLA runs


def oracle_risk(delta2_true: np.ndarray, k, c: float) -> np.ndarray:
    """R(k) = Delta^2 / (k Delta^2 + 1) + c k at the true Delta^2 (see the module docstring)."""
    d = np.asarray(delta2_true, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    return d / (k * d + 1.0) + c * k


def budget_grid(k_init: int, k_step: int, k_max: int) -> np.ndarray:
    """The budgets OSLA can stop at: k_init, k_init + k_step, ..., capped at k_max."""
    if k_init >= k_max:
        return np.array([k_init])
    return np.unique(np.append(np.arange(k_init, k_max + 1, k_step), k_max))


def oracle_k(delta2_true: np.ndarray, c: float, k_init: int, k_step: int, k_max: int):
    """(k_oracle clipped to [k_init, k_max], k*_grid, R(k*_grid)) per prompt."""
    d = np.asarray(delta2_true, dtype=np.float64)
    inv = np.divide(1.0, d, out=np.full(d.shape, np.inf), where=d > 0)
    k_cont = np.clip(1.0 / math.sqrt(c) - inv, k_init, k_max)
    grid = budget_grid(k_init, k_step, k_max)
    R = oracle_risk(d[:, None], grid[None, :], c)
    j = R.argmin(axis=1)
    return k_cont, grid[j], R[np.arange(len(d)), j]


def osla_runs(data: StudyData, v: dict, seed: int, extra: dict | None = None) -> pd.DataFrame:
    """One row per (prior, c, repeat, prompt of the batch). Batches and reward orders are shared by
    every prior and c (common random numbers)."""
    P, N = data.oracle.shape
    B = min(int(v["B"]), P)
    S = data.oracle.sum(axis=1)
    specs = prior_specs(v, data)
    pri = {s["name"]: prior_values(s, data, seed, extra) for s in specs}
    k_init, k_step = int(v["k_init"]), int(v["k_step"])
    p_rej = {}
    for s in specs:  # exact P(Delta2 > 0) at the first test (k = k_init)
        p_rej[s["name"]] = fixed_k_moments(N, S.astype(np.int64), min(k_init, N), 2 * pri[s["name"]] - 1)["fusion"]["p_reject"]
    cols: dict[str, list] = {}

    def add(**kw):
        for key, val in kw.items():
            cols.setdefault(key, []).append(np.broadcast_to(val, (B,)) if np.ndim(val) == 0 else np.asarray(val))

    for rep in range(int(v["repeats"])):
        rng = np.random.default_rng([seed, rep])
        idx = rng.choice(P, size=B, replace=False)
        order_seed = [seed, rep, 1]
        p_true = data.p[idx]
        mu_true = 2 * p_true - 1
        for s in specs:
            prior_p = pri[s["name"]][idx]
            d2_true = (mu_true - (2 * prior_p - 1)) ** 2
            for c in v["cs"]:
                k_max = min(osla_k_max(c), N)
                res = run_osla(cached_sample_fn(data.oracle[idx], np.random.default_rng(order_seed)), prior_p,
                               k_init=k_init, k_step=k_step, c=c, k_max=k_max, global_stop=v["global_stop"],
                               pad_multiple=v.get("pad_multiple"))
                k_cont, k_grid, r_star = oracle_k(d2_true, c, k_init, k_step, k_max)
                r_osla = oracle_risk(d2_true, res.k, c)
                sq = (res.mu - mu_true) ** 2
                add(prior=s["name"], prior_kind=s["kind"], offset=s["offset"], c=float(c), k_max=k_max, repeat=rep,
                    prompt=idx, p=p_true, prior_p=prior_p, k=res.k, stop_round=res.stop_round,
                    stop_reason=res.stop_reason, rejected_init=res.delta2_init > 0,
                    p_reject_init=p_rej[s["name"]][idx], delta2_final=res.delta2, true_delta2=d2_true,
                    k_oracle=k_cont, k_oracle_grid=k_grid, regret=r_osla - r_star, sq_err=sq,
                    realized_risk=sq + c * res.k, batch_rollouts=res.total_rollouts,
                    batch_dispatched=res.dispatched_rollouts if res.dispatched_rollouts is not None else -1,
                    n_rounds=res.n_rounds)
    return pd.DataFrame({k: np.concatenate(vs) for k, vs in cols.items()})


def _se(x) -> float:
    x = np.asarray(x, dtype=float)
    return float(x.std(ddof=1) / np.sqrt(len(x))) if len(x) > 1 else float("nan")


def _summarise(d: pd.DataFrame, k_init: int) -> dict:
    per_batch = d.groupby("repeat").agg(k=("k", "mean"), regret=("regret", "mean"),
                                        disp=("batch_dispatched", "first"), n=("k", "size"))
    c = float(d["c"].iloc[0])
    out = dict(n_prompts=len(d), n_batches=len(per_batch), k_max=int(d["k_max"].iloc[0]),
               mean_budget=float(d["k"].mean()), budget_se=_se(per_batch["k"]),
               dispatched_per_prompt=float((per_batch["disp"] / per_batch["n"]).mean()) if (per_batch["disp"] >= 0).all() else np.nan,
               reject_rate_init=float(d["rejected_init"].mean()), reject_rate_init_exact=float(d["p_reject_init"].mean()),
               frac_expanded=float((d["k"] > k_init).mean()), mean_k_oracle=float(d["k_oracle"].mean()),
               mean_k_oracle_grid=float(d["k_oracle_grid"].mean()), mean_regret=float(d["regret"].mean()),
               regret_se=_se(per_batch["regret"]), regret_over_c=float(d["regret"].mean() / c),
               mean_sq_err=float(d["sq_err"].mean()), mean_realized_risk=float(d["realized_risk"].mean()),
               mean_abs_prior_error=float(np.sqrt(d["true_delta2"]).mean()))
    for r in REASONS:
        out[f"frac_{r}"] = float((d["stop_reason"] == r).mean())
    return out


def _spec_cols(d: pd.DataFrame) -> dict:
    return dict(prior=d["prior"].iloc[0], prior_kind=d["prior_kind"].iloc[0], offset=float(d["offset"].iloc[0]))


def budget_by_offset(runs: pd.DataFrame, v: dict) -> pd.DataFrame:
    """At the paper's c: per prior, OSLA's mean rollouts per prompt, the test's rejection rate at
    k_init (observed and exact), stop reasons, regret."""
    c = float(v["c"])
    at = runs[np.isclose(runs["c"], c)]
    if at.empty:
        raise ValueError(f"c={c} is not among the swept costs {sorted(runs['c'].unique())}")
    rows = [dict(_spec_cols(d), c=c, **_summarise(d, int(v["k_init"]))) for _, d in at.groupby("prior", sort=False)]
    return pd.DataFrame(rows)


def c_sweep(runs: pd.DataFrame, v: dict) -> pd.DataFrame:
    rows = [dict(_spec_cols(d), c=float(c), **_summarise(d, int(v["k_init"])))
            for (_, c), d in runs.groupby(["prior", "c"], sort=False)]
    return pd.DataFrame(rows)


def stopping_hist(runs: pd.DataFrame, v: dict) -> pd.DataFrame:
    g = runs.groupby(["prior", "c", "k"], sort=False).size().rename("count").reset_index()
    g["frac"] = g["count"] / g.groupby(["prior", "c"])["count"].transform("sum")
    kinds = runs.drop_duplicates("prior").set_index("prior")
    g["prior_kind"] = kinds.loc[g["prior"], "prior_kind"].to_numpy()
    g["offset"] = kinds.loc[g["prior"], "offset"].to_numpy()
    return g


RUN_TABLES = {"budget_by_offset": budget_by_offset, "c_sweep": c_sweep, "stopping_hist": stopping_hist}


def make_run_table(name: str, runs: pd.DataFrame, v: dict) -> pd.DataFrame:
    if name not in RUN_TABLES:
        raise ValueError(f"unknown V0.5 table {name!r}; known: {sorted(RUN_TABLES)}")
    return RUN_TABLES[name](runs, v)


def summary(bias: pd.DataFrame, runs: pd.DataFrame, v: dict) -> dict:
    """Headline numbers: OSLA's mean budget at the paper's c per prior, whether the fused bias stays
    inside 1/sqrt(k) (max |bias| sqrt(k) over priors, bins and prompts), rejection rates, regret."""
    fus = bias[(bias["estimator"] == "fusion") & (bias["p_bin"] == -1)]
    per_k = fus.groupby("k")["max_ratio"].max()
    worst = fus.loc[fus["max_ratio"].idxmax()] if len(fus) else None
    bo = budget_by_offset(runs, v)
    cs = c_sweep(runs, v)
    return {
        "c": float(v["c"]),
        "offset_scale": "delta is added to V = 2p - 1 (clipped to [-1, 1]); unclipped, true |Delta| = delta",
        "offset_sign": v["offset_sign"],
        "osla_mean_budget": {r["prior"]: {"mean": r["mean_budget"], "se": r["budget_se"],
                                          "dispatched_per_prompt": r["dispatched_per_prompt"],
                                          "reject_rate_init": r["reject_rate_init"],
                                          "regret_over_c": r["regret_over_c"]} for r in bo.to_dict("records")},
        "fused_bias_within_bound": bool((fus["max_ratio"] <= 1.0 + 1e-12).all()),
        "fused_bias_max_ratio_by_k": {int(k): float(x) for k, x in per_k.items()},
        "fused_bias_worst": None if worst is None else {"prior": worst["prior"], "k": int(worst["k"]),
                                                        "max_ratio": float(worst["max_ratio"]),
                                                        "abs_bias_max": float(worst["abs_bias_max"])},
        "reject_rate_by_prior_k4": {r["prior"]: r["reject_rate"] for r in
                                    fus[fus["k"] == int(v["k_init"])].to_dict("records")},
        "c_sweep_mean_budget": {f"{r['prior']} @ c={r['c']:g}": r["mean_budget"] for r in cs.to_dict("records")},
    }
