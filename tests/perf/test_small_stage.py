"""perf/small_stage.py and perf/rl_step.py stop before their minutes of measuring when a file they
read is missing."""
import importlib.util

import pytest


def _small_stage(repo):
    spec = importlib.util.spec_from_file_location("small_stage", repo / "perf" / "small_stage.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_missing_reference_cache_stops_it_before_measuring(repo, tmp_path):
    from sparserl.core.config import load_config
    cfg = load_config(repo / "configs" / "small.yaml")
    results = tmp_path / "results" / "small"
    with pytest.raises(SystemExit, match=r"missing file\(s\): .*basis/reference/m\.parquet.*snakemake --cores 2 "):
        _small_stage(repo).missing_inputs(cfg, results, ["grpo_g16", "basis_grid_grpo_g1_basis"], "configs/small.yaml")
    # the policy and pool alone are all a GRPO run reads
    for f in ("policies/m/config.json", "tasks/train_pool.parquet"):
        (results / f).parent.mkdir(parents=True, exist_ok=True)
        (results / f).write_text("{}")
    _small_stage(repo).missing_inputs(cfg, results, ["grpo_g16"], "configs/small.yaml")


def test_rl_step_without_benchmarks_stops_before_measuring(repo, tmp_path):
    """perf/rl_step.py evaluates a checkpoint after its measured steps: without the benchmarks it
    stops at the start, in one line, not minutes later."""
    import subprocess
    import sys
    res = tmp_path / "results" / "small"
    for f in ("policies/m/config.json", "tasks/train_pool.parquet"):
        (res / f).parent.mkdir(parents=True, exist_ok=True)
        (res / f).write_text("{}")
    cmd = [sys.executable, str(repo / "perf" / "rl_step.py"), "--results", str(res), "--no-trl", "--baseline", "none"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and r.stderr.strip().endswith("--configfile configs/small.yaml"), r.stderr
    assert "no tasks/benchmarks;" in r.stderr and "Traceback" not in r.stderr, r.stderr
