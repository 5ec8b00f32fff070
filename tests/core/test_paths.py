"""Every artifact path comes from `Paths`; RL runs from `Paths.run`, for both engines."""
from pathlib import Path

from sparserl.core.paths import Paths, RunPaths


def _cfg(backend):
    return {"scale": "tiny", "results_dir": "res", "figures_dir": "figs", "rollout": {"backend": backend}}


def test_run_paths_of_the_local_engine():
    run = Paths(_cfg("hf")).run("grpo_g16", 1)
    base = Path("res/tiny/rl/grpo_g16/seed1")
    assert run.engine == "local" and run.dir == base
    assert (run.metrics, run.final, run.eval, run.rollouts) == (
        base / "metrics.parquet", base / "final", base / "eval.parquet", base / "rollouts.parquet")
    assert run.checkpoint(30) == base / "checkpoints" / "step00030"
    assert run.eval_dir / f"{run.checkpoint_label(30)}.parquet" == base / "eval" / "step00030.parquet"


def test_run_paths_of_the_openrlhf_engine_are_where_openrlhf_saves():
    run = Paths(_cfg("vllm")).run("v05_osla", 0)
    assert run.engine == "openrlhf"
    assert run.checkpoint(25) == run.dir / "openrlhf" / "ckpt" / "global_step25_hf"
    assert run.prompts == run.dir / "openrlhf" / "prompts.jsonl"


def test_rule_patterns_and_value_model_homes():
    P = Paths(_cfg("hf"))
    assert str(P.run("{method}", "{seed}").metrics) == "res/tiny/rl/{method}/seed{seed}/metrics.parquet"
    assert P.harvest("v0") == Path("res/tiny/values/harvest/v0.parquet")
    assert P.value_model("v0") == Path("res/tiny/values/models/v0")
    assert P.value_eval("v0") == Path("res/tiny/values/eval/v0.parquet")
    assert isinstance(P.run("x", 0), RunPaths)
