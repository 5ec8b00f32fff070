"""Time every registered estimator relative to GRPO on one batch, and basis_refine's scaling in B.

    python perf/estimators.py [--prompts 4096] [--group 8] [--tokens 128] [--json out.json]

Goal: every sequence-level estimator within 2x of GRPO's cost. Token-level estimators run on a
(rollouts, --tokens) batch of the first --token-prompts prompts and are timed relative to GRPO
broadcast to tokens (`broadcast_sequence_advantages`) on that batch. Timings are the best of `--repeat` runs (each
run loops until it has taken at least ~50 ms), so they are stable but machine-dependent.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # run from a checkout

import sparserl.estimators as E  # noqa: E402


def best_time(fn, repeat: int = 5, min_s: float = 0.05) -> float:
    """Seconds per call: best over `repeat` rounds, each averaging enough calls to last min_s."""
    fn()
    n = 1
    while True:
        t = time.perf_counter()
        for _ in range(n):
            fn()
        dt = time.perf_counter() - t
        if dt >= min_s:
            break
        n *= 2
    best = dt / n
    for _ in range(repeat - 1):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t) / n)
    return best


def make_batch(n_prompts: int, group: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    p_true = rng.beta(0.7, 0.7, n_prompts)
    ids = np.repeat(np.arange(n_prompts), group)
    rewards = (rng.random(len(ids)) < p_true[ids]).astype(np.float64)
    # per-rollout side data (the fast path; a dict {prompt_id: p} works too)
    prior = np.clip(p_true + rng.normal(0, 0.1, n_prompts), 0, 1)[ids]
    phat = rng.binomial(64, p_true)[ids] / 64.0
    return rewards, ids, prior, phat


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=4096)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=128, help="response length T of the token batch")
    ap.add_argument("--token-prompts", type=int, default=512, help="prompts in the token batch")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)

    r, ids, prior, phat = make_batch(args.prompts, args.group)
    variants = {name: E.EstimatorContext(prior=prior, phat=phat) for name in E.list_estimators()}
    # BASIS with a fixed beta (no calibration) shows the cost of the refinement alone.
    for kind in ("unb", "vop", "rvg"):
        variants[f"basis_{kind}[beta=1]"] = E.EstimatorContext(phat=phat, beta=1.0)

    times = {}
    for label, ctx in variants.items():
        fn = E.get_estimator(label.split("[")[0])
        times[label] = best_time(lambda: fn(r, ids, ctx=ctx), args.repeat)
    base = times["grpo"]
    print(f"batch: {args.prompts} prompts x G={args.group} = {len(r)} rollouts; "
          f"BASIS grid = {len(E.default_beta_grid())} betas")
    print(f"{'estimator':<24}{'ms':>10}{'x GRPO':>10}")
    for label, t in sorted(times.items(), key=lambda kv: kv[1]):
        print(f"{label:<24}{t * 1e3:>10.3f}{t / base:>10.2f}")

    # token level: values in [0,1], right padding with lengths uniform in [1, T]
    n_tok = min(args.token_prompts, args.prompts) * args.group
    rt, idt = r[:n_tok], ids[:n_tok]
    rng_t = np.random.default_rng(2)
    mask = np.arange(args.tokens) < rng_t.integers(1, args.tokens + 1, n_tok)[:, None]
    values = rng_t.random((n_tok, args.tokens))
    grpo = E.get_estimator("grpo")
    token_times = {"grpo+broadcast": best_time(lambda: E.broadcast_sequence_advantages(grpo(rt, idt), mask),
                                               args.repeat)}
    for name in E.list_estimators("token"):
        fn = E.get_estimator(name)
        token_times[name] = best_time(lambda: fn(rt, idt, values=values, mask=mask), args.repeat)
    tbase = token_times["grpo+broadcast"]
    print(f"\ntoken level: {n_tok} rollouts x T={args.tokens}\n{'estimator':<24}{'ms':>10}{'x GRPO+bc':>10}")
    for label, t in sorted(token_times.items(), key=lambda kv: kv[1]):
        print(f"{label:<24}{t * 1e3:>10.3f}{t / tbase:>10.2f}")

    # the path the trainers take: `methods.sidedata.advantages` with the group keys they hold.
    # String prompt ids (what the trainer passed before) cost an np.unique sort over strings;
    # integer codes (its prompt_index / pool rows; OpenRLHF's factorized uids) are counted.
    from sparserl.methods.sidedata import SideData, advantages
    from sparserl.methods.spec import load_method
    str_ids = np.array([f"tiny-{i:08d}" for i in ids], dtype=object)
    trainer_times = {}
    for method in ("grpo_g8", "basis_grid_grpo_g1_basis", "v05_k4"):
        m = load_method(method)
        side = SideData(prior=prior if "prior" in m.needs else None,
                        phat=phat if "reference" in m.needs else None)
        for label, keys in (("string ids", str_ids), ("integer codes", ids)):
            trainer_times[f"{method} ({label})"] = best_time(
                lambda: advantages(m, r, keys, side, None), args.repeat)
    trainer_times["group keys only: np.unique(strings)"] = best_time(
        lambda: np.unique(str_ids, return_inverse=True), args.repeat)
    trainer_times["group keys only: group_by(codes)"] = best_time(lambda: E.group_by(ids), args.repeat)
    print(f"\ntrainer path (methods.sidedata.advantages), {len(r)} rollouts\n{'call':<52}{'ms':>10}")
    for label, t in trainer_times.items():
        print(f"{label:<52}{t * 1e3:>10.3f}")

    scaling = {}
    rng = np.random.default_rng(1)
    print(f"\nbasis_refine scaling (kind=unb)\n{'B':>8}{'ms':>10}{'ns/elem':>10}")
    B = 512
    while B <= 65536:
        v, rr = rng.uniform(0, 1, B), (rng.random(B) < 0.5).astype(np.float64)
        t = best_time(lambda: E.basis_refine(v, rr), args.repeat)
        scaling[B] = t
        print(f"{B:>8}{t * 1e3:>10.3f}{t / B * 1e9:>10.1f}")
        B *= 2

    out = {
        "machine": platform.platform(), "python": platform.python_version(), "numpy": np.__version__,
        "prompts": args.prompts, "group": args.group, "rollouts": len(r),
        "seconds": times, "ratio_to_grpo": {k: v / base for k, v in times.items()},
        "token_batch": [n_tok, args.tokens], "token_seconds": token_times,
        "trainer_path_seconds": trainer_times,
        "basis_refine_seconds": {str(k): v for k, v in scaling.items()},
    }
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
