"""The perf/ benchmarks still run against the code they measure: a refactor of the trainer's
signature left perf/rl_step.py and perf/gpu_smoke_local.py failing on their first call, unseen
until someone measured (each is a subprocess, as its users run it; timings are not asserted)."""
import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.e2e  # benchmarks: a few seconds to a minute each


def _env(repo, **extra):
    return {**os.environ, "PYTHONPATH": str(repo / "src"), "SPARSERL_PROGRESS": "0", "OMP_NUM_THREADS": "1", **extra}


def test_gpu_smoke_local_parts_run_on_the_cpu(repo):
    """Its CPU dry check: every local part (V0, the HF backend, the local trainer) passes."""
    out = subprocess.run([sys.executable, "perf/gpu_smoke_local.py"], cwd=repo, capture_output=True, text=True,
                         env=_env(repo, SPARSERL_SMOKE_DEVICE="cpu"), timeout=600)
    summary = out.stdout.split("gpu_smoke summary")[-1]
    assert out.returncode == 0, summary + out.stderr[-3000:]
    assert "local trainer" in summary and "FAILED" not in summary


def _smoke_tree(cfg_path, root, tok):
    """What perf/rl_step.py reads under a scale's results folder: the train pool, the benchmarks
    (its checkpoint evaluation) and the policies."""
    from sparserl.core.config import load_config
    from sparserl.core.paths import Paths
    from sparserl.core.artifacts import write_table
    from sparserl.models.policies import build_model, save_hf
    from sparserl.models.qwen3 import Qwen3LM
    from sparserl.tasks import procedural
    cfg = load_config(cfg_path, {"results_dir": str(root)})
    P = Paths(cfg)
    write_table(procedural.make_train_pool(cfg), P.train_pool())
    for name, df in procedural.make_benchmarks(cfg).items():
        write_table(df, P.benchmark(name))
    for name, pol in cfg["policies"].items():  # written as pre-training writes them
        model = Qwen3LM.from_module(build_model(pol, tok, cfg["tokenizer"]["max_length"]))
        save_hf(model, tok, P.policy(name), {"policy": name, "step": 0})
    return P.results


def test_rl_step_benchmark_times_our_step(repo, tmp_path, tiny_lm):
    import yaml
    cfg = yaml.safe_load((repo / "configs" / "smoke.yaml").read_text())
    cfg["rl"] = {"policy": "m", "methods": ["grpo_g4"], "seeds": [0], "steps": 2, "rollouts_per_step": 16,
                 "lr": 1e-4, "mini_batches": 2}
    (tmp_path / "smoke.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    results = _smoke_tree(tmp_path / "smoke.yaml", tmp_path / "results", tiny_lm[1])
    out = subprocess.run([sys.executable, "perf/rl_step.py", "--results", str(results), "--method", "grpo_g4",
                          "--config", str(tmp_path / "smoke.yaml"),
                          "--baseline", "none", "--no-trl", "--steps", "2", "--warmup", "0",
                          "--rounds", "1", "--json", str(tmp_path / "out.json")],
                         cwd=repo, capture_output=True, text=True, env=_env(repo), timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    run = json.loads((tmp_path / "out.json").read_text())["runs"]["now"][0]
    assert len(run["per_step_s"]) == 2 and run["counts"]["rollouts"] > 0
    assert {"generation", "reward", "forward", "backward", "optimizer"} <= set(run["parts_s"])
    assert "| generation |" in out.stdout and "| backward |" in out.stdout
    assert run["eval_checkpoint_s"] > 0  # one checkpoint evaluated as rule rl_eval does
