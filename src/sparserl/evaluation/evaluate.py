"""Pass rates on the training pool and benchmark evaluation.

Protocols (config `evaluation.default` / `evaluation.overrides.<benchmark>`):
- `mean_at_k`: V0.5's mean@k, k samples per problem at temperature 1.0, top-p 0.7.
- `avg_at_k`: BASIS's avg@32 for AIME/AMC/HMMT (same estimator, its own name and settings).
- `greedy`: BASIS's single greedy rollout for MATH-500, Minerva and OlympiadBench.
Accuracy is the mean reward over all (problem, sample) pairs; the standard error is over problems.
Beside it, for every benchmark: `pass_at_k` (the unbiased pass@k of Chen et al. 2021, arXiv:2107.03374,
Sec. 2.1, `sparserl.evaluation.pass_at_k`; with n = k samples the share of problems with a correct one;
`pass_metric` names it, e.g. pass@16) and `greedy_accuracy` (one greedy rollout per problem, rolled
out after every sampled one so those keep their seeds and outputs; off with `evaluation.greedy: false`).
The per-problem table has `p`, `pass` (its unbiased pass@k), `greedy`, `n` (samples), `c` (correct)
and `start` (the pre-training seed of the start policy the model descends from,
`pretrain.start_seed`; the manifests record it too) per problem.

The RL start policy (`rl.policy`) draws `evaluation.start_k` samples a problem (default 64) on each
sampled benchmark instead of the protocol's k (`samples` column): its mean@k and pass@k estimate the
same quantities as a k-sample evaluation with less noise, so every gain over it is measured against
a sharper start. `evaluate_policy` also writes the pass@k curve, k = 1, 2, 4, ... up to the samples
drawn, per sampled benchmark and over them (`Paths.pass_at_k_curve`; greedy benchmarks have no k > 1).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from sparserl.core.artifacts import read_manifest, read_table, write_json, write_table
from sparserl.core.config import rollout_max_new_tokens, section_setting, setting, start_samples, start_seed
from sparserl.core.logs import get_logger
from sparserl.evaluation.pass_at_k import pass_at_k, pass_at_k_curve
from sparserl.evaluation.progress import rollout_progress
from sparserl.grading.verifier import open_verifier
from sparserl.rollout import SamplingParams, make_backend, rollout
from sparserl.tasks import format_prompt

log = get_logger(__name__)


def _prompts(cfg, df, backend):
    tok = getattr(backend, "tokenizer", None)
    return [format_prompt(cfg, p, tok) for p in df["problem"]]


def per_prompt_rates(batch, num_prompts: int) -> tuple[np.ndarray, np.ndarray]:
    """(successes, n) per prompt from a scored RolloutBatch."""
    succ = np.bincount(batch.prompt_index, weights=batch.rewards, minlength=num_prompts)
    n = np.bincount(batch.prompt_index, minlength=num_prompts)
    return succ, n


def _rates_from_cache(path: Path, pool: pd.DataFrame, samples: int) -> tuple[np.ndarray, float]:
    """(pass rate per pool prompt, mean response tokens) from the first `samples` cached rollouts
    of each prompt: an unbiased `samples`-sample estimate, as if rolled out for it."""
    table = read_table(path)
    missing = [c for c in ("prompt_id", "rewards", "lengths") if c not in table.columns]
    if missing:
        raise ValueError(f"{path}: columns {missing} are missing (written by an older version); "
                         f"delete it and rerun the DAG to rebuild it")
    by_id = table.set_index("prompt_id")
    absent = [i for i in pool["id"] if i not in by_id.index]
    if absent:
        raise ValueError(f"{path} has no rollouts of pool prompt {absent[0]!r} ({len(absent)} "
                         "missing); it was built from another pool: rerun the DAG to rebuild it")
    rows = by_id.loc[pool["id"]]
    short = [pid for pid, r in zip(pool["id"], rows["rewards"]) if len(r) < samples]
    if short:
        raise ValueError(f"{path}: prompt {short[0]!r} has fewer than passrate.samples = {samples} "
                         "rollouts")
    p = np.array([np.mean(r[:samples]) for r in rows["rewards"]], dtype=np.float64)
    tokens = float(np.mean([np.mean(x[:samples]) for x in rows["lengths"]]))
    return p, tokens


def measure_passrate(cfg: dict, ref: str, *, policy_dir, pool, out, cache=None, threads: int = 1) -> dict:
    """Pass rates of policy `ref` (checkpoint `policy_dir`) on the training pool `pool` from
    `passrate.samples` samples per prompt, written to `out`: read off the reference cache `cache`
    when the DAG gives one (`Paths.passrate_cache`), else rolled out."""
    pool_path, out = Path(pool), Path(out)
    pool = read_table(pool_path)
    params = SamplingParams(temperature=setting(cfg, "passrate", "temperature"),
                            top_p=setting(cfg, "passrate", "top_p"),
                            max_new_tokens=rollout_max_new_tokens(cfg))
    samples = setting(cfg, "passrate", "samples")
    cache = Path(cache) if cache is not None else None
    if cache is not None:
        p, mean_tokens = _rates_from_cache(cache, pool, samples)
        timeouts = (read_manifest(cache) or {}).get("verifier", {})
        log.info(f"passrate {ref}: the first {samples} rollouts per prompt of {cache}")
    else:
        backend = make_backend(cfg, str(policy_dir), threads=threads)
        with open_verifier(cfg) as ver, \
                rollout_progress(backend, len(pool) * samples, f"passrate {ref}", log):
            batch = rollout(backend, _prompts(cfg, pool, backend), list(pool["answer"]),
                            samples, params, cfg["seed"], ver)
        succ, n = per_prompt_rates(batch, len(pool))
        p = succ / n
        mean_tokens = float(batch.response_lengths().mean())
        timeouts = ver.timeout_counts()
    by_level = pd.DataFrame({"source": pool["source"], "p": p}).groupby("source")["p"].mean()
    result = {
        "policy": ref, "samples_per_prompt": int(setting(cfg, "passrate", "samples")),
        "temperature": params.temperature, "top_p": params.top_p, "prompts": len(pool),
        "mean_pass_rate": float(p.mean()),
        "frac_mixed": float(((p > 0) & (p < 1)).mean()),
        "frac_zero": float((p == 0).mean()), "frac_one": float((p == 1).mean()),
        "by_level": by_level.round(4).to_dict(),
        "histogram": np.histogram(p, bins=np.linspace(0, 1, 11))[0].tolist(),
        "mean_response_tokens": mean_tokens,
        "rollouts_from": str(cache) if cache is not None else "rolled out for this table",
        "per_prompt": {"id": list(pool["id"]), "p": p.round(4).tolist()},
    }
    write_json(result, out, cfg=cfg, extra={"verifier": timeouts})
    log.info(f"passrate {ref}: mean={result['mean_pass_rate']:.3f} mixed={result['frac_mixed']:.3f} "
             f"-> {out}")
    return result


def summarize_passrates(cfg: dict, passrates, out, lo: float = 0.2, hi: float = 0.8, mixed: float = 0.4) -> dict:
    """One JSON `out` with the spread of every pre-trained policy (`passrates`: their
    `measure_passrate` JSONs, in config order) and the checks of the foundation issue."""
    import json
    rates = {}
    for path in passrates:
        r = json.loads(Path(path).read_text())
        rates[r["policy"]] = r
    names = list(rates)
    pp = {n: np.asarray(r["per_prompt"]["p"]) for n, r in rates.items()}
    pairs = {}
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            pairs[f"{a}-{b}"] = {"mean_diff": float(pp[a].mean() - pp[b].mean()),
                                 "mean_abs_prompt_diff": float(np.abs(pp[a] - pp[b]).mean())}
    table = {n: {k: r[k] for k in ("mean_pass_rate", "frac_mixed", "frac_zero", "frac_one",
                                   "by_level")} for n, r in rates.items()}
    checks = {
        "mean_in_range": {n: lo <= t["mean_pass_rate"] <= hi for n, t in table.items()},
        "mixed_at_least": {n: t["frac_mixed"] >= mixed for n, t in table.items()},
        "policies_differ": all(abs(v["mean_diff"]) >= 0.02 or v["mean_abs_prompt_diff"] >= 0.05
                               for v in pairs.values()),
    }
    checks["all_pass"] = (all(checks["mean_in_range"].values())
                          and all(checks["mixed_at_least"].values()) and checks["policies_differ"])
    summary = {"scale": cfg["scale"], "criteria": {"mean_range": [lo, hi], "min_frac_mixed": mixed},
               "policies": table, "pairwise": pairs, "checks": checks}
    write_json(summary, out, cfg=cfg)
    for n, t in table.items():
        log.info(f"{n}: mean pass {t['mean_pass_rate']:.3f}, 0<p<1 for {t['frac_mixed']:.1%}")
    log.info(f"pass-rate checks: {'all pass' if checks['all_pass'] else 'FAILED'} -> {out}")
    return summary


def protocol_for(cfg: dict, bench: str) -> dict:
    ev = cfg["evaluation"]
    spec = dict(ev["default"])
    spec.update(ev.get("overrides", {}).get(bench, {}))
    return spec


def per_problem_path(path: Path) -> Path:
    """The per-problem table `evaluate_checkpoint` writes beside its evaluation table `path`."""
    path = Path(path)
    return path.with_name(path.stem + "_per_problem.parquet")


ESTIMATOR = "unbiased pass@k, 1 - C(n-c,k)/C(n,k) (Chen et al. 2021, arXiv:2107.03374, Sec. 2.1)"


def is_start_policy(cfg: dict, ref: str) -> bool:
    """Whether `ref` is the policy RL starts from (`rl.policy`): it is evaluated at `start_k`."""
    return bool(cfg.get("rl")) and cfg["rl"].get("policy") == ref


def benchmark_tables(paths) -> dict[str, pd.DataFrame]:
    """{name: problems} of benchmark files `tasks/benchmarks/<name>.parquet` (`Paths.benchmark`)."""
    return {Path(p).stem: read_table(p) for p in paths}


def evaluate_policy(cfg: dict, ref: str, *, policy_dir, benchmarks, out, curve, threads: int = 1) -> pd.DataFrame:
    """Policy `ref`'s (checkpoint `policy_dir`) evaluation on the `benchmarks` files, written to
    `out` (the start policy at `evaluation.start_k` samples a problem), and its pass@k curve to
    `curve` (`Paths.eval_table`, `Paths.pass_at_k_curve`)."""
    samples = start_samples(cfg) if is_start_policy(cfg, ref) else None
    return evaluate_checkpoint(cfg, str(policy_dir), Path(out), ref, threads=threads, samples=samples,
                               curve=Path(curve), benchmarks=benchmark_tables(benchmarks))


def evaluate_checkpoint(cfg: dict, model: str, path: Path, label: str, threads: int = 1,
                        extra_cols: dict | None = None, verifier=None, *,
                        benchmarks: dict[str, pd.DataFrame], samples: int | None = None,
                        curve: Path | None = None, start: int | None = None) -> pd.DataFrame:
    """Evaluate one checkpoint (dir or hub name) on every benchmark; write `path` (+ per problem).
    `verifier`: an open one to share across checkpoints (its workers start once); the manifest
    counts this checkpoint's items only. `benchmarks`: name -> problems to score (`benchmark_tables`
    of the config's benchmark files, or the lr tuning's validation split), each under `protocol_for` its name.
    `samples`: draw this many samples a problem on a sampled benchmark (at least its k; the start
    policy's `start_k`); `curve`: write the pass@k curve there; `start`: the per-problem `start`
    (default `pretrain.start_seed`: the start policy every model of the config descends from)."""
    if verifier is None:
        with open_verifier(cfg) as ver:
            return evaluate_checkpoint(cfg, model, path, label, threads, extra_cols, ver, benchmarks=benchmarks,
                                       samples=samples, curve=curve, start=start)
    ver, before = verifier, verifier.timeout_counts()
    start = start_seed(cfg) if start is None else int(start)
    backend = make_backend(cfg, model, threads=threads)
    rows, per_problem = [], []
    benches = [(b, df, protocol_for(cfg, b)) for b, df in benchmarks.items()]
    ks = [1 if spec.get("protocol") == "greedy" else section_setting(spec, "$defs", "sampling", "k")
          for _, _, spec in benches]
    # samples drawn a problem: the protocol's k, or more for the start policy (same estimands)
    ns = [k if spec.get("protocol") == "greedy" else max(k, int(samples or 0)) for k, (_, _, spec) in zip(ks, benches)]
    # one greedy rollout per problem of each sampled benchmark (a greedy protocol already is one)
    extra_greedy = [bool(setting(cfg, "evaluation", "greedy")) and spec.get("protocol") != "greedy"
                    for _, _, spec in benches]
    total = sum(len(df) * (n + g) for (_, df, _), n, g in zip(benches, ns, extra_greedy))
    with rollout_progress(backend, total, f"evaluate {label}", log):
        for bi, ((bench, df, spec), k, n_draw) in enumerate(zip(benches, ks, ns)):
            greedy = spec.get("protocol") == "greedy"
            params = SamplingParams(temperature=section_setting(spec, "$defs", "sampling", "temperature"),
                                    top_p=section_setting(spec, "$defs", "sampling", "top_p"), greedy=greedy,
                                    max_new_tokens=rollout_max_new_tokens(cfg))
            batch = rollout(backend, _prompts(cfg, df, backend), list(df["answer"]), n_draw, params,
                            cfg["seed"] + 7 * bi, ver)
            succ, n = per_prompt_rates(batch, len(df))
            p = succ / n
            # correct: a positive reward, as pass@k has always counted it
            c = np.bincount(batch.prompt_index, weights=np.asarray(batch.rewards) > 0,
                            minlength=len(df)).round().astype(np.int64)
            pk = pass_at_k(n, c, k)
            rows.append({
                "policy": label, **(extra_cols or {}), "benchmark": bench,
                "protocol": section_setting(spec, "$defs", "sampling", "protocol"),
                "metric": "greedy" if greedy else f"{'avg' if spec.get('protocol') == 'avg_at_k' else 'mean'}@{k}",
                "k": k, "temperature": None if greedy else params.temperature,
                "top_p": None if greedy else params.top_p, "problems": len(df),
                "accuracy": float(p.mean()),
                "stderr": float(p.std(ddof=1) / np.sqrt(len(p))) if len(p) > 1 else 0.0,
                "mean_response_tokens": float(batch.response_lengths().mean()),
                "scale": cfg["scale"],
                # added after the columns above, which keep their values
                "pass_metric": f"pass@{k}", "pass_at_k": float(pk.mean()),
                "greedy_accuracy": float(p.mean()) if greedy else np.nan,
                "samples": int(n_draw),
            })
            per_problem.append(pd.DataFrame({"benchmark": bench, "id": df["id"], "p": p, "pass": pk,
                                             "greedy": p if greedy else np.nan, "n": n.astype(np.int64),
                                             "c": c, "start": int(start)}))
        # after every sampled rollout: the greedy pass changes none of their seeds or outputs
        for bi, ((bench, df, spec), g) in enumerate(zip(benches, extra_greedy)):
            if not g:
                continue
            params = SamplingParams(greedy=True, max_new_tokens=rollout_max_new_tokens(cfg))
            batch = rollout(backend, _prompts(cfg, df, backend), list(df["answer"]), 1, params,
                            cfg["seed"] + 7 * bi, ver)
            succ, _ = per_prompt_rates(batch, len(df))
            rows[bi]["greedy_accuracy"] = float(succ.mean())
            per_problem[bi]["greedy"] = succ.astype(np.float64)
    out = pd.DataFrame(rows)
    path = Path(path)
    per_problem = pd.concat(per_problem, ignore_index=True)
    write_table(per_problem, per_problem_path(path), cfg=cfg, extra={"policy": label, "start": start})
    if curve is not None:  # over the sampled benchmarks: a greedy one has no k > 1
        sampled = [b for (b, _, spec) in benches if spec.get("protocol") != "greedy"]
        rows_c = per_problem[per_problem["benchmark"].isin(sampled)] if sampled else per_problem
        write_table(pass_at_k_curve(rows_c), curve, cfg=cfg,
                    extra={"policy": label, "estimator": ESTIMATOR, "benchmarks": sampled or "greedy only",
                           "start": start})
    counts = {k: v - before.get(k, 0) for k, v in ver.timeout_counts().items()}
    write_table(out, path, cfg=cfg, extra={"policy": label, "verifier": counts, "start": start})
    log.info(f"{label}:\n" + out[["benchmark", "metric", "problems", "accuracy", "pass_metric", "pass_at_k",
                                    "greedy_accuracy"]].to_string(index=False))
    return out


def summarize_evals(cfg: dict, evals, out) -> pd.DataFrame:
    """One table `out` of the evaluation tables `evals` (`evaluate_policy`'s, in config order)."""
    df = pd.concat([read_table(p) for p in evals], ignore_index=True)
    write_table(df, out, cfg=cfg)
    wide = df.pivot(index="benchmark", columns="policy", values="accuracy")
    log.info("accuracy by benchmark and policy:\n" + wide.round(3).to_string())
    log.info(f"evaluation summary -> {out}")
    return df
