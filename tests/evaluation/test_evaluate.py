"""Held-out evaluation of checkpoints (sparserl.evaluation.evaluate): one verifier shared by a
run's checkpoints grades as a fresh one per checkpoint does, and each manifest counts its own."""
from __future__ import annotations

import contextlib

import numpy as np
import pandas as pd
import pytest

from sparserl.core.artifacts import read_manifest, write_table
from sparserl.core.config import load_config
from sparserl.core.paths import Paths
from sparserl.evaluation.evaluate import benchmark_tables, evaluate_checkpoint
from sparserl.grading.verifier import open_verifier
from sparserl.tasks import procedural


def _config_benchmarks(P):
    """{name: problems} of the config's benchmark files, as rl-eval passes them."""
    return benchmark_tables([P.benchmark(b) for b in P.benchmark_names()])


def test_a_shared_verifier_grades_alike_and_counts_each_checkpoint_alone(tmp_path, tiny_lm, repo):
    from sparserl.models.policies import save_hf
    cfg = load_config(repo / "configs/smoke.yaml")
    cfg["results_dir"] = str(tmp_path / "results")
    cfg["rollout"]["max_new_tokens"] = 4
    cfg["evaluation"]["default"] = {"protocol": "mean_at_k", "k": 2, "temperature": 1.0, "top_p": 1.0}
    P = Paths(cfg)
    for name, df in procedural.make_benchmarks(cfg).items():
        write_table(df, P.benchmark(name))
    model, tok = tiny_lm
    save_hf(model, tok, P.policy("s"), {"test": True})

    alone = [evaluate_checkpoint(cfg, str(P.policy("s")), tmp_path / f"alone{i}.parquet", "s", benchmarks=_config_benchmarks(P))
             for i in range(2)]
    with open_verifier(cfg) as ver:
        shared = [evaluate_checkpoint(cfg, str(P.policy("s")), tmp_path / f"shared{i}.parquet", "s",
                                      verifier=ver, benchmarks=_config_benchmarks(P)) for i in range(2)]
        total = ver.timeout_counts()["items"]
    for a, s, i in zip(alone, shared, range(2)):
        pd.testing.assert_frame_equal(a, s)
        pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / f"alone{i}_per_problem.parquet"),
                                      pd.read_parquet(tmp_path / f"shared{i}_per_problem.parquet"))
        assert read_manifest(tmp_path / f"shared{i}.parquet")["verifier"] == \
            read_manifest(tmp_path / f"alone{i}.parquet")["verifier"]
    counts = [read_manifest(tmp_path / f"shared{i}.parquet")["verifier"]["items"] for i in range(2)]
    assert counts[0] > 0 and sum(counts) == total


class _ParityVerifier:
    """Grades a response correct when its characters' code points sum to a multiple of 3: a
    random toy policy then scores about a third of its samples, so pass@k, mean@k and greedy
    differ, and any change in a sampled text shows in the scores."""

    def __init__(self):
        self.items = 0

    def score(self, texts, gold):
        self.items += len(texts)
        return [float(sum(map(ord, t)) % 3 == 0) for t in texts]

    def timeout_counts(self):
        return {"items": self.items}


def _hand_greedy(model, tok, prompt: str, max_new_tokens: int) -> str:
    """Argmax decoding one token at a time, without the backend (no batching, no cache)."""
    import torch
    ids = tok(prompt, add_special_tokens=False)["input_ids"]
    out = []
    with torch.no_grad():
        for _ in range(max_new_tokens):
            t = int(model(input_ids=torch.tensor([ids + out])).logits[0, -1].argmax())
            out.append(t)
            if t == tok.eos_token_id:
                break
    return tok.decode([t for t in out if t != tok.eos_token_id], skip_special_tokens=True)


def test_pass_at_k_and_greedy_beside_an_unchanged_mean_at_k(tmp_path, tiny_lm, repo):
    """pass@k and a greedy pass per benchmark; the greedy pass runs after the
    sampled rollouts, so mean@k and its per-problem scores are those of an evaluation without it."""
    from sparserl.models.policies import save_hf
    from sparserl.tasks import format_prompt
    cfg = load_config(repo / "configs/smoke.yaml")
    cfg["results_dir"] = str(tmp_path / "results")
    cfg["rollout"]["max_new_tokens"] = 4
    cfg["evaluation"]["default"] = {"protocol": "mean_at_k", "k": 4, "temperature": 1.0, "top_p": 1.0}
    cfg["evaluation"]["overrides"] = {}
    P = Paths(cfg)
    benches = procedural.make_benchmarks(cfg)
    for name, df in benches.items():
        write_table(df, P.benchmark(name))
    model, tok = tiny_lm
    save_hf(model, tok, P.policy("s"), {"test": True})

    with_g = evaluate_checkpoint(cfg, str(P.policy("s")), tmp_path / "g.parquet", "s", verifier=_ParityVerifier(),
                                 benchmarks=_config_benchmarks(P))
    cfg_off = {**cfg, "evaluation": {**cfg["evaluation"], "greedy": False}}
    without = evaluate_checkpoint(cfg_off, str(P.policy("s")), tmp_path / "n.parquet", "s", verifier=_ParityVerifier(),
                                  benchmarks=_config_benchmarks(P))
    old = ["policy", "benchmark", "protocol", "metric", "k", "problems", "accuracy", "stderr", "mean_response_tokens"]
    pd.testing.assert_frame_equal(with_g[old], without[old])
    assert without["greedy_accuracy"].isna().all()
    pp, pp_off = pd.read_parquet(tmp_path / "g_per_problem.parquet"), pd.read_parquet(tmp_path / "n_per_problem.parquet")
    pd.testing.assert_frame_equal(pp[["benchmark", "id", "p", "pass"]], pp_off[["benchmark", "id", "p", "pass"]])

    assert (with_g["pass_metric"] == "pass@4").all()
    assert ((with_g["pass_at_k"] >= with_g["accuracy"]) & (with_g["accuracy"] >= 0)).all()
    assert (with_g["pass_at_k"] > with_g["accuracy"]).any()  # a third correct: some problems mixed
    assert ((pp["pass"] == 1) == (pp["p"] > 0)).all()
    # the greedy column is argmax decoding of each problem, graded, and its mean the benchmark's row
    for name, df in benches.items():
        got = pp[pp["benchmark"] == name].set_index("id")["greedy"]
        want = [float(sum(map(ord, _hand_greedy(model, tok, format_prompt(cfg, q, tok), 4))) % 3 == 0)
                for q in df["problem"]]
        assert got.loc[df["id"]].tolist() == want, name
        row = with_g[with_g["benchmark"] == name].iloc[0]
        assert row["greedy_accuracy"] == pytest.approx(np.mean(want))


def _eval_files(cfg, ref):
    """The paths rule evaluate passes (workflow/rules/evaluation.smk)."""
    P = Paths(cfg)
    return dict(policy_dir=P.policy(ref), benchmarks=[P.benchmark(b) for b in P.benchmark_names()],
                out=P.eval_table(ref), curve=P.pass_at_k_curve(ref))


def test_the_start_policy_draws_start_k_samples_and_writes_its_unbiased_pass_at_k_curve(tmp_path, tiny_lm, repo, monkeypatch):
    """rl.policy is evaluated at evaluation.start_k samples a problem (a greedy benchmark
    stays one greedy rollout); pass@k is the unbiased estimate from them, its curve runs to start_k;
    another policy keeps the protocol's k."""
    from math import comb

    from sparserl.evaluation import evaluate as EV
    from sparserl.models.policies import save_hf
    cfg = load_config(repo / "configs/smoke.yaml")
    cfg["results_dir"] = str(tmp_path / "results")
    cfg["rollout"]["max_new_tokens"] = 4
    cfg["evaluation"].update(default={"protocol": "mean_at_k", "k": 4, "temperature": 1.0, "top_p": 1.0}, start_k=8,
                             greedy=False)
    cfg["rl"] = {"policy": "s"}
    P = Paths(cfg)
    for name, df in procedural.make_benchmarks(cfg).items():
        write_table(df, P.benchmark(name))
    model, tok = tiny_lm
    for ref in ("s", "m"):
        save_hf(model, tok, P.policy(ref), {"test": True})
    monkeypatch.setattr(EV, "open_verifier", lambda cfg: contextlib.nullcontext(_ParityVerifier()))
    start, other = EV.evaluate_policy(cfg, "s", **_eval_files(cfg, "s")), EV.evaluate_policy(cfg, "m", **_eval_files(cfg, "m"))
    sampled = start["protocol"] != "greedy"
    assert sampled.any() and (~sampled).any()  # smoke: one greedy override
    assert start.loc[sampled, "samples"].eq(8).all() and start.loc[~sampled, "samples"].eq(1).all()
    assert other.loc[other["protocol"] != "greedy", "samples"].eq(4).all()
    assert (start["metric"] == other["metric"]).all() and (start["pass_metric"] == other["pass_metric"]).all()
    pp = pd.read_parquet(P.stage("eval", "s", "eval_per_problem.parquet"))
    bench = set(start.loc[sampled, "benchmark"])
    s = pp[pp["benchmark"].isin(bench)]
    assert (s["n"] == 8).all() and (s["start"] == 0).all() and (s["p"] == s["c"] / 8).all()
    assert 0 < s["c"].mean() < 8  # a third correct: mixed problems
    want = [1 - comb(8 - c, 4) / comb(8, 4) for c in s["c"]]
    assert s["pass"].to_numpy() == pytest.approx(want)
    row = start[start["benchmark"] == sorted(bench)[0]].iloc[0]
    assert row["pass_at_k"] == pytest.approx(pp.loc[pp["benchmark"] == row["benchmark"], "pass"].mean())
    # the curve: over the sampled benchmarks (a greedy one has no k > 1), k = 1, 2, 4, 8
    curve = pd.read_parquet(P.pass_at_k_curve("s"))
    assert set(curve["benchmark"]) == bench | {"overall"}
    overall = curve[curve["benchmark"] == "overall"].set_index("k")["pass_at_k"]
    assert list(overall.index) == [1, 2, 4, 8] and overall.is_monotonic_increasing
    assert overall[1] == pytest.approx(start.loc[sampled, "accuracy"].mean())
    assert overall[4] == pytest.approx(start.loc[sampled, "pass_at_k"].mean())
    assert list(pd.read_parquet(P.pass_at_k_curve("m"))["k"].unique()) == [1, 2, 4]


def test_every_evaluation_records_its_start_policy_seed(tmp_path, tiny_lm, repo, monkeypatch):
    """The per-problem table's `start` and the manifests carry pretrain.start_seed, the
    level the head-to-head's bootstrap resamples (fails if `start` stays 0 whatever the config)."""
    from sparserl.evaluation import evaluate as EV
    from sparserl.evaluation.evaluate import per_problem_path
    from sparserl.models.policies import save_hf
    cfg = load_config(repo / "configs/smoke.yaml", overrides={"pretrain": {"start_seed": 3}})
    cfg["results_dir"] = str(tmp_path / "results")
    cfg["rollout"]["max_new_tokens"] = 4
    cfg["evaluation"].update(default={"protocol": "mean_at_k", "k": 2, "temperature": 1.0, "top_p": 1.0},
                             greedy=False, start_k=2)
    P = Paths(cfg)
    for name, df in procedural.make_benchmarks(cfg).items():
        write_table(df, P.benchmark(name))
    model, tok = tiny_lm
    save_hf(model, tok, P.policy("s"), {"test": True})
    monkeypatch.setattr(EV, "open_verifier", lambda cfg: contextlib.nullcontext(_ParityVerifier()))
    EV.evaluate_policy(cfg, "s", **_eval_files(cfg, "s"))
    table = P.eval_table("s")
    assert (pd.read_parquet(per_problem_path(table))["start"] == 3).all()
    for path in (table, per_problem_path(table), P.pass_at_k_curve("s")):
        assert read_manifest(path)["start"] == 3, path
    # a checkpoint's evaluation (rl-eval's path) too, and an explicit start wins
    out = tmp_path / "ck" / "final.parquet"
    EV.evaluate_checkpoint(cfg, str(P.policy("s")), out, "ck", start=5, benchmarks=_config_benchmarks(P))
    assert (pd.read_parquet(per_problem_path(out))["start"] == 5).all() and read_manifest(out)["start"] == 5
