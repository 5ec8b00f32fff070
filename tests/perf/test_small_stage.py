"""perf/small_stage.py stops before its minutes of measuring when a run it measures lacks a file."""
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
