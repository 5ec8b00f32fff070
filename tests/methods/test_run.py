"""A run resolved once (`methods.run`): one key for every consumer, and a resume state of another
key is never resumed."""
import copy
import shutil

import pandas as pd
import pytest

from sparserl.core.artifacts import config_hash
from sparserl.core.config import load_config
from sparserl.core.paths import Paths
from sparserl.methods import spec as spec_mod
from sparserl.methods.run import resolve_run
from sparserl.methods.spec import load_method, run_settings
from helpers.rl_worlds import rl_world


@pytest.fixture
def tiny(repo):
    return load_config(repo / "configs/tiny.yaml")


def test_two_resolutions_give_one_key_which_is_the_dags_and_each_run_setting_changes_it(tiny):
    a, b = resolve_run(tiny, "grpo_g4", 0), resolve_run(copy.deepcopy(tiny), "grpo_g4", 0)
    assert a.key == b.key and a.paths.dir == b.paths.dir == Paths(tiny).run("grpo_g4", 0).dir
    # the value the DAG's rule param had before the Run existed: no results tree reruns
    m = load_method("grpo_g4")
    assert a.key == config_hash({"rl": run_settings(tiny["rl"], m), "rollout": tiny["rollout"], "method": m.to_dict()})
    assert "max_new_tokens" not in tiny["rl"]  # tiny's runs take the rollout section's length
    changes = [("rl", "steps", 7), ("rl", "lr", 1e-3), ("rl", "temperature", 0.7), ("rl", "policy", "m"),
               ("rl", "rollouts_per_step", 32), ("rl", "eval_fractions", [0.25]), ("rl", "max_new_tokens", 16),
               ("rollout", "max_new_tokens", 16), ("rollout", "backend", "hf")]
    for section, key, value in changes:
        cfg = copy.deepcopy(tiny)
        assert cfg[section].get(key) != value
        cfg[section][key] = value
        assert resolve_run(cfg, "grpo_g4", 0).key != a.key, f"{section}.{key}"
    # the lists that choose which runs exist are no part of a run
    cfg = copy.deepcopy(tiny)
    cfg["rl"]["methods"] = cfg["rl"]["methods"][:3] + ["grpo_g4"]
    cfg["rl"]["seeds"] = [0, 5, 9]
    assert resolve_run(cfg, "grpo_g4", 0).key == a.key
    # the BASIS value study's run keeps extra checkpoints: its key alone changes
    cfg = copy.deepcopy(tiny)
    cfg.setdefault("basis", {})["study_checkpoints"] = {"method": "grpo_g4", "seed": 0, "fractions": [0.3]}
    study = resolve_run(cfg, "grpo_g4", 0)
    assert study.key != a.key and study.study_steps and study.snapshot_steps == a.snapshot_steps
    assert not set(study.study_steps) & set(study.snapshot_steps)  # kept, not evaluated
    assert resolve_run(cfg, "grpo_g4", 1).key == resolve_run(tiny, "grpo_g4", 1).key
    # a run elsewhere (V0's harvest folder names no seed): the key holds the seed and the rate given
    root = Paths(tiny).stage("elsewhere")
    r0, r1 = resolve_run(tiny, "grpo_g4", 0, root=root), resolve_run(tiny, "grpo_g4", 1, root=root)
    assert r0.key != r1.key and r0.paths.dir == root
    assert resolve_run(tiny, "grpo_g4", 0, root=root, lr=1e-2).key != r0.key


def test_a_method_files_setting_changes_the_key(tiny, tmp_path, monkeypatch):
    shutil.copytree(spec_mod.METHODS_DIR, tmp_path / "methods")
    monkeypatch.setattr(spec_mod, "METHODS_DIR", tmp_path / "methods")
    before = resolve_run(tiny, "grpo_g4", 0).key
    f = tmp_path / "methods" / "grpo_g4.yaml"
    f.write_text(f.read_text() + "kl_coef: 0.01\n")
    assert resolve_run(tiny, "grpo_g4", 0).key != before


def test_a_changed_response_length_after_a_kill_reruns_from_scratch(tmp_path, tiny_lm, repo):
    """rl sets no max_new_tokens, so the runs take rollout.max_new_tokens. A run killed with a
    resume state, then asked again at another length (Snakemake reruns it: its key changed), starts
    over and logs why; it trains what a fresh run at that length trains, never the old state."""
    from sparserl.engines.local.trainer import KilledForTest, Trainer, train
    world = rl_world(tmp_path / "a", tiny_lm, repo)
    assert "max_new_tokens" not in world["rl"] and world["rollout"]["max_new_tokens"] == 8
    with pytest.raises(KilledForTest):
        train(world, "grpo_g4", 0, stop_after=3)  # a resume state at step 2
    state = Paths(world).run("grpo_g4", 0).state
    assert state.is_file()
    short = copy.deepcopy(world)
    short["rollout"]["max_new_tokens"] = 3
    logs: list[str] = []
    t = Trainer(short, resolve_run(short, "grpo_g4", 0), log=logs.append)
    assert not t.try_resume() and t.step == 0
    assert any("starting over" in m and "rollout.max_new_tokens: 8 -> 3" in m for m in logs), logs
    met = pd.read_parquet(t.run() / "metrics.parquet").drop(columns=["wall_time_s"])
    fresh = rl_world(tmp_path / "b", tiny_lm, repo)
    fresh["rollout"]["max_new_tokens"] = 3
    ref = pd.read_parquet(train(fresh, "grpo_g4", 0) / "metrics.parquet").drop(columns=["wall_time_s"])
    pd.testing.assert_frame_equal(met, ref)
    assert met["response_len_mean"].max() <= 3
