"""Held-out evaluation of checkpoints (sparserl.evaluation.evaluate): one verifier shared by a
run's checkpoints grades as a fresh one per checkpoint does, and each manifest counts its own."""
from __future__ import annotations

import pandas as pd

from sparserl.core.artifacts import read_manifest, write_table
from sparserl.core.config import load_config
from sparserl.core.paths import Paths
from sparserl.evaluation.evaluate import evaluate_checkpoint
from sparserl.grading.verifier import open_verifier
from sparserl.tasks import procedural


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

    alone = [evaluate_checkpoint(cfg, str(P.policy("s")), tmp_path / f"alone{i}.parquet", "s")
             for i in range(2)]
    with open_verifier(cfg) as ver:
        shared = [evaluate_checkpoint(cfg, str(P.policy("s")), tmp_path / f"shared{i}.parquet", "s",
                                      verifier=ver) for i in range(2)]
        total = ver.timeout_counts()["items"]
    for a, s, i in zip(alone, shared, range(2)):
        pd.testing.assert_frame_equal(a, s)
        pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / f"alone{i}_per_problem.parquet"),
                                      pd.read_parquet(tmp_path / f"shared{i}_per_problem.parquet"))
        assert read_manifest(tmp_path / f"shared{i}.parquet")["verifier"] == \
            read_manifest(tmp_path / f"alone{i}.parquet")["verifier"]
    counts = [read_manifest(tmp_path / f"shared{i}.parquet")["verifier"]["items"] for i in range(2)]
    assert counts[0] > 0 and sum(counts) == total
