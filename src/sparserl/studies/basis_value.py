"""BASIS value-estimation study (BASIS Section 5.1 and Appendix A) on cached rollouts.

Per repeat: a random batch of B prompts (without replacement) from the prompts in both caches.
For every prompt, G = 8 rewards are drawn without replacement from its cached oracle rollouts
(the current policy); single-rollout methods use the first of them (common random numbers, so
methods are compared on the same draws). The truth is the oracle pass rate p (see the package
docstring for why that is exact under the finite-population model).

Methods (each the registry baseline the trainers run, `sparserl.estimators.get_baseline`):
  basis_unb        G=1, vhat = V*_beta(reference phat), UNB refinement, beta calibrated on the batch
  basis_vop/rvg    the same with the VOP / RVG refinement
  basis_unb_prev   UNB with beta calibrated on the preceding batch (an independent batch of the
                   same policy: BASIS Limitations / Appendix D)
  basis_unb_inf    UNB with beta = inf (vhat = phat, no calibration)
  basis_unb_vhat   UNB, prompts outside the active set keep vhat instead of the baseline 0
  reinforce_pp     G=1, b = mean of the batch's B rewards
  grpo             G=8, b_i = mean of the prompt's 8 rewards
  rloo             G=8, b_ik = mean of the prompt's 7 other rewards (errors averaged over rollouts)
Per batch and method: MSE = mean (b - p)^2 over prompts (RLOO: over rollouts), bias = mean (b - p),
and the rate of baselines exactly 0 or exactly 1. Raw per (batch, method, difficulty bin) sums go
to one table (`simulate`), from which every reported table is an aggregation.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from sparserl.estimators import EstimatorContext, default_beta_grid, get_baseline

from . import StudyData, bin_labels, difficulty_bins

BASIS_METHODS = ("basis_unb", "basis_vop", "basis_rvg", "basis_unb_prev", "basis_unb_inf", "basis_unb_vhat")
METHODS = BASIS_METHODS + ("reinforce_pp", "grpo", "rloo")
GROUP_SIZE = {"grpo": "G", "rloo": "G"}  # others use one rollout per prompt


def beta_grid(size: int) -> np.ndarray:
    """Calibration grid of a given size: 1 -> [inf] only; m > 1 -> m log-spaced betas in
    [1e-2, 1e2] plus inf (`default_beta_grid(m)`; the default m = 16 is the registry's grid)."""
    size = int(size)
    if size < 1:
        raise ValueError(f"beta grid size must be >= 1, got {size}")
    return np.array([np.inf]) if size == 1 else default_beta_grid(size)


def draw_rewards(rng: np.random.Generator, rows: np.ndarray, G: int) -> np.ndarray:
    """(B, G) rewards drawn without replacement from each row of cached rewards (B, N)."""
    B, N = rows.shape
    if G > N:
        raise ValueError(f"cannot draw {G} rewards without replacement from {N} cached ones")
    keys = rng.random((B, N))
    cols = np.argpartition(keys, G - 1, axis=1)[:, :G] if G < N else np.argsort(keys, axis=1)
    return np.take_along_axis(rows, cols, axis=1).astype(np.float64)


def batch_baselines(phat: np.ndarray, r: np.ndarray, *, eps: float, grid: np.ndarray, inactive: str,
                    prev: tuple[np.ndarray, np.ndarray] | None, methods=METHODS) -> dict:
    """Baselines of one batch: {method: (b, info)} with b of shape (B, 1) or (B, G).

    phat: reference pass rates (B,); r: (B, G) current-policy rewards, r[:, 0] the single rollout.
    """
    B, G = r.shape
    ids = np.arange(B)
    r1 = r[:, 0]
    out = {}
    for m in methods:
        info: dict = {}
        if m.startswith("basis_"):
            kind = m.split("_")[1]
            ctx = EstimatorContext(phat=phat, beta_grid=grid, active_eps=eps)
            inact = inactive
            if m == "basis_unb_prev":
                if prev is None:
                    raise ValueError("basis_unb_prev needs the preceding batch")
                ctx.calibrate_on, ctx.prev_phat, ctx.prev_rewards = "previous", prev[0], prev[1]
            elif m == "basis_unb_inf":
                ctx.beta = np.inf
            elif m == "basis_unb_vhat":
                inact = "vhat"
            b = get_baseline(f"basis_{kind}")(r1, ids, ctx=ctx, info=info, inactive=inact)[:, None]
        elif m == "reinforce_pp":
            b = get_baseline("reinforce_pp")(r1, ids)[:, None]
        elif m in ("grpo", "rloo"):
            b = get_baseline(m)(r.ravel(), np.repeat(ids, G)).reshape(B, G)
            if m == "grpo":
                b = b[:, :1]  # the group mean is the same for every rollout of the prompt
        else:
            raise ValueError(f"unknown method {m!r}; known: {METHODS}")
        out[m] = (b, info)
    return out


def _rows(repeat: int, b_by_method: dict, p: np.ndarray, bins: np.ndarray, n_bins: int, G: int,
          extra: dict) -> list[dict]:
    rows = []
    for m, (b, info) in b_by_method.items():
        err = b - p[:, None]
        g = b.shape[1]
        sum_sq = np.bincount(bins, weights=(err ** 2).sum(axis=1), minlength=n_bins)
        sum_err = np.bincount(bins, weights=err.sum(axis=1), minlength=n_bins)
        n01 = np.bincount(bins, weights=((b == 0.0) | (b == 1.0)).sum(axis=1), minlength=n_bins)
        n = np.bincount(bins, minlength=n_bins) * g
        beta = info.get("beta")
        for j in range(n_bins):
            rows.append(dict(repeat=repeat, method=m, G=G if m in ("grpo", "rloo") else 1, p_bin=j,
                             n=int(n[j]), sum_sq=float(sum_sq[j]), sum_err=float(sum_err[j]), n01=int(n01[j]),
                             beta=np.nan if beta is None else float(beta),
                             active=float(info.get("active_size", np.nan)), **extra))
    return rows


def simulate(data: StudyData, *, B: int, repeats: int, G: int, eps: float, grid: np.ndarray, inactive: str,
             n_ref: int | None, seed: int, difficulty_edges, methods=METHODS) -> pd.DataFrame:
    """Raw study table: one row per (repeat, method, difficulty bin) with sums over the bin's prompts
    (n entries, sum of squared errors, sum of errors, count of baselines exactly 0 or 1) plus the
    batch's heterogeneity (std of oracle p over the batch), calibrated beta and active-set size."""
    P = data.n_prompts
    if B > P:
        raise ValueError(f"batch size B={B} exceeds the {P} prompts present in both caches")
    n_ref = data.ref.shape[1] if n_ref is None else int(n_ref)
    if not 1 <= n_ref <= data.ref.shape[1]:
        raise ValueError(f"reference n={n_ref} outside 1..{data.ref.shape[1]} cached rollouts")
    phat_all = data.ref[:, :n_ref].mean(axis=1)  # the first n cached reference rewards
    bins_all = difficulty_bins(data.p, difficulty_edges)
    n_bins = len(difficulty_edges) - 1
    rng = np.random.default_rng(seed)
    rows: list[dict] = []
    for rep in range(repeats):
        idx = rng.choice(P, size=B, replace=False)
        r = draw_rewards(rng, data.oracle[idx], G)
        prev = None
        if "basis_unb_prev" in methods:  # the preceding batch: another independent batch
            pidx = rng.choice(P, size=B, replace=False)
            prev = (phat_all[pidx], draw_rewards(rng, data.oracle[pidx], 1)[:, 0])
        bl = batch_baselines(phat_all[idx], r, eps=eps, grid=grid, inactive=inactive, prev=prev, methods=methods)
        p = data.p[idx]
        rows += _rows(rep, bl, p, bins_all[idx], n_bins, G,
                      dict(B=B, heterogeneity=float(p.std()), frac_ref_extreme=float(np.mean((phat_all[idx] == 0) | (phat_all[idx] == 1)))))
    df = pd.DataFrame(rows)
    df["p_bin_label"] = np.asarray(bin_labels(difficulty_edges))[df["p_bin"].to_numpy()]
    return df


def simulate_from_settings(data: StudyData, s: dict, seed: int) -> pd.DataFrame:
    return simulate(data, B=s["B"], repeats=s["repeats"], G=s["G"], eps=s["eps"], grid=beta_grid(s["beta_grid_size"]),
                    inactive=s["inactive"], n_ref=s.get("reference_n"), seed=seed,
                    difficulty_edges=s["difficulty_edges"])


# --------------------------------------------------------------------------- aggregations


def per_batch(raw: pd.DataFrame) -> pd.DataFrame:
    """Per (repeat, method): mse, bias, zero_one rate over all prompts of the batch."""
    g = raw.groupby(["repeat", "method"], sort=False)
    out = g.agg(n=("n", "sum"), sum_sq=("sum_sq", "sum"), sum_err=("sum_err", "sum"), n01=("n01", "sum"),
                G=("G", "first"), B=("B", "first"), heterogeneity=("heterogeneity", "first"),
                beta=("beta", "first"), active=("active", "first")).reset_index()
    out["mse"] = out["sum_sq"] / out["n"]
    out["bias"] = out["sum_err"] / out["n"]
    out["zero_one_rate"] = out["n01"] / out["n"]
    return out


def _se(x) -> float:
    x = np.asarray(x, dtype=float)
    return float(x.std(ddof=1) / np.sqrt(len(x))) if len(x) > 1 else float("nan")


def _order(methods) -> list[str]:
    return [m for m in METHODS if m in set(methods)] + sorted(set(methods) - set(METHODS))


def paired_relative_change(a: np.ndarray, b: np.ndarray, n_boot: int, seed: int) -> dict:
    """100 (mean a / mean b - 1) over paired batches, with a paired bootstrap SE and 95% interval."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if not len(a) or b.mean() <= 0:  # no batches, or a reference with zero error: undefined
        return dict(pct_change=float("nan"), se=float("nan"), ci95=[float("nan")] * 2, n_batches=int(len(a)))
    pct = 100.0 * (a.mean() / b.mean() - 1.0)
    rng = np.random.default_rng(seed)
    if n_boot and len(a) > 1:
        idx = rng.integers(0, len(a), size=(int(n_boot), len(a)))
        with np.errstate(divide="ignore", invalid="ignore"):
            boots = 100.0 * (a[idx].mean(axis=1) / b[idx].mean(axis=1) - 1.0)
        se, lo, hi = float(boots.std(ddof=1)), *np.percentile(boots, [2.5, 97.5]).tolist()
    else:
        se = lo = hi = float("nan")
    return dict(pct_change=float(pct), se=se, ci95=[lo, hi], n_batches=int(len(a)))


def mse_by_method(raw: pd.DataFrame, n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    pb = per_batch(raw)
    wide = pb.pivot(index="repeat", columns="method", values="mse")
    rows = []
    for m in _order(pb["method"].unique()):
        d = pb[pb["method"] == m]
        row = dict(method=m, G=int(d["G"].iloc[0]), mse=float(d["mse"].mean()), mse_se=_se(d["mse"]),
                   bias=float(d["bias"].mean()), bias_se=_se(d["bias"]),
                   zero_one_rate=float(d["n01"].sum() / d["n"].sum()), n_batches=len(d),
                   mean_beta=float(d["beta"].replace(np.inf, np.nan).mean()) if d["beta"].notna().any() else np.nan,
                   frac_beta_inf=float(np.isinf(d["beta"]).mean()) if d["beta"].notna().any() else np.nan)
        for ref in ("reinforce_pp", "grpo"):
            if ref in wide and m in wide:
                rc = paired_relative_change(wide[m].to_numpy(), wide[ref].to_numpy(), n_boot, seed)
                row[f"pct_vs_{ref}"], row[f"pct_vs_{ref}_se"] = rc["pct_change"], rc["se"]
        rows.append(row)
    return pd.DataFrame(rows)


def mse_by_heterogeneity(raw: pd.DataFrame, n_bins: int = 5) -> pd.DataFrame:
    """Batches binned by heterogeneity (std of oracle p in the batch): n_bins equal-width bins over
    the observed range (last bin closed); per bin the mean over its batches of the batch MSE."""
    pb = per_batch(raw)
    h = pb.groupby("repeat")["heterogeneity"].first()
    lo, hi = float(h.min()), float(h.max())
    edges = np.linspace(lo, hi, n_bins + 1) if hi > lo else np.array([lo] + [lo] * n_bins)
    b = np.clip(np.searchsorted(edges, pb["heterogeneity"], side="right") - 1, 0, n_bins - 1)
    pb = pb.assign(h_bin=b)
    rows = []
    for m in _order(pb["method"].unique()):
        for j in range(n_bins):
            d = pb[(pb["method"] == m) & (pb["h_bin"] == j)]
            rows.append(dict(method=m, h_bin=j, lo=float(edges[j]), hi=float(edges[j + 1]),
                             center=float((edges[j] + edges[j + 1]) / 2), n_batches=len(d),
                             mse=float(d["mse"].mean()) if len(d) else np.nan, mse_se=_se(d["mse"]) if len(d) else np.nan))
    return pd.DataFrame(rows)


def mse_by_difficulty(raw: pd.DataFrame) -> pd.DataFrame:
    """Prompts binned by oracle p; per bin the MSE pooled over its prompts (and rollouts) across all
    batches, with the standard error across batches of the per-batch bin MSE."""
    rows = []
    for m in _order(raw["method"].unique()):
        d = raw[raw["method"] == m]
        for j, dj in d.groupby("p_bin"):
            label = dj["p_bin_label"].iloc[0]  # empty bins keep their label (no duplicates)
            dj = dj[dj["n"] > 0]
            n = dj["n"].sum()
            per = dj["sum_sq"] / dj["n"]
            rows.append(dict(method=m, p_bin=int(j), p_bin_label=label,
                             n=int(n), n_batches=len(dj), mse=float(dj["sum_sq"].sum() / n) if n else np.nan,
                             mse_se=_se(per) if len(dj) else np.nan,
                             bias=float(dj["sum_err"].sum() / n) if n else np.nan))
    return pd.DataFrame(rows)


def zero_one_rate(raw: pd.DataFrame) -> pd.DataFrame:
    """Rate of baselines exactly 0 or 1 (a zero advantage for every rollout with that reward),
    overall ('all') and per difficulty bin."""
    rows = []
    for m in _order(raw["method"].unique()):
        d = raw[raw["method"] == m]
        rows.append(dict(method=m, p_bin=-1, p_bin_label="all", n=int(d["n"].sum()),
                         rate=float(d["n01"].sum() / d["n"].sum())))
        for j, dj in d.groupby("p_bin"):
            n = dj["n"].sum()
            rows.append(dict(method=m, p_bin=int(j), p_bin_label=dj["p_bin_label"].iloc[0], n=int(n),
                             rate=float(dj["n01"].sum() / n) if n else np.nan))
    return pd.DataFrame(rows)


TABLES = {"mse_by_heterogeneity": mse_by_heterogeneity, "mse_by_difficulty": mse_by_difficulty,
          "zero_one_rate": zero_one_rate}


def make_table(name: str, raw: pd.DataFrame, s: dict, seed: int) -> pd.DataFrame:
    if name == "mse_by_method":
        return mse_by_method(raw, s["bootstrap"], seed)
    if name == "mse_by_heterogeneity":
        return mse_by_heterogeneity(raw, s["heterogeneity_bins"])
    if name in TABLES:
        return TABLES[name](raw)
    raise ValueError(f"unknown BASIS table {name!r}")


# --------------------------------------------------------------------------- sensitivity


def sensitivity(data: StudyData, param: str, s: dict, seed: int) -> pd.DataFrame:
    """BASIS (UNB, current-batch calibration) MSE as one setting varies, the others at default:
    eps (active-set threshold), n (first n cached reference rollouts), B, grid (beta-grid size).
    REINFORCE++ on the same batches is reported alongside. Values that the caches cannot support
    (B above the prompt count, n above the cached rollouts) are reported as skipped."""
    values = s["sensitivity"][param]
    rows = []
    for v in values:
        kw = dict(B=s["B"], repeats=s["sensitivity_repeats"], G=1, eps=s["eps"], grid=beta_grid(s["beta_grid_size"]),
                  inactive=s["inactive"], n_ref=s.get("reference_n"), seed=seed, difficulty_edges=s["difficulty_edges"],
                  methods=("basis_unb", "reinforce_pp"))
        if param == "eps":
            kw["eps"] = float(v)
        elif param == "n":
            kw["n_ref"] = int(v)
        elif param == "B":
            kw["B"] = int(v)
        elif param == "grid":
            kw["grid"] = beta_grid(int(v))
        else:
            raise ValueError(f"unknown sensitivity parameter {param!r}")
        row = dict(param=param, value=float(v), skipped="")
        if kw["B"] > data.n_prompts:
            row["skipped"] = f"B={kw['B']} > {data.n_prompts} prompts"
        elif kw["n_ref"] is not None and kw["n_ref"] > data.ref.shape[1]:
            row["skipped"] = f"n={kw['n_ref']} > {data.ref.shape[1]} cached reference rollouts"
        if row["skipped"]:
            rows.append(dict(row, mse=np.nan, mse_se=np.nan, mse_reinforce_pp=np.nan, zero_one_rate=np.nan,
                             mean_beta=np.nan, n_batches=0))
            continue
        pb = per_batch(simulate(data, **kw))
        b, rpp = pb[pb["method"] == "basis_unb"], pb[pb["method"] == "reinforce_pp"]
        rows.append(dict(row, mse=float(b["mse"].mean()), mse_se=_se(b["mse"]),
                         mse_reinforce_pp=float(rpp["mse"].mean()),
                         zero_one_rate=float(b["n01"].sum() / b["n"].sum()),
                         mean_beta=float(b["beta"].replace(np.inf, np.nan).mean()), n_batches=len(b)))
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- summary


def summary(raw: pd.DataFrame, s: dict, seed: int, data_info: dict | None = None) -> dict:
    """Headline numbers: each method's MSE +- SE across batches, and BASIS (UNB) relative to
    REINFORCE++ (paper: -69%) and to GRPO G=8 (paper: BASIS lower), paired bootstrap over batches."""
    pb = per_batch(raw)
    wide = pb.pivot(index="repeat", columns="method", values="mse")
    out: dict = {"methods": {}, "settings": {k: s[k] for k in ("B", "repeats", "G", "eps", "beta_grid_size", "inactive")}}
    for m in _order(wide.columns):
        out["methods"][m] = {"mse": float(wide[m].mean()), "se": _se(wide[m])}
    comps = {}
    for m in [c for c in BASIS_METHODS if c in wide]:
        for ref in ("reinforce_pp", "grpo", "rloo"):
            if ref in wide:
                comps[f"{m}_vs_{ref}"] = paired_relative_change(wide[m].to_numpy(), wide[ref].to_numpy(),
                                                                s["bootstrap"], seed)
    out["relative_mse_pct"] = comps
    head = {}
    if "basis_unb" in wide and "reinforce_pp" in wide:
        head["basis_vs_reinforce_pp_pct"] = comps["basis_unb_vs_reinforce_pp"]
        head["paper_claim_vs_reinforce_pp_pct"] = -69.0
    if "basis_unb" in wide and "grpo" in wide:
        head["basis_vs_grpo_g8_pct"] = comps["basis_unb_vs_grpo"]
        head["basis_below_grpo_g8"] = bool(wide["basis_unb"].mean() < wide["grpo"].mean())
    out["headline"] = head
    if data_info:
        out["data"] = data_info
    return out
