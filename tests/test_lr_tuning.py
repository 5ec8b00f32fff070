"""Learning rates tuned per method family (rl.lr_tuning): the validation split, the choice, the
trainer's lr, config errors, and the CLI end to end on a toy world."""
import copy
import json
import math

import numpy as np
import pandas as pd
import pytest

from sparserl.core.artifacts import read_manifest, read_table, write_table
from sparserl.core.config import ConfigError, load_config
from sparserl.core.paths import Paths
from sparserl.engines import lr_tuning as L
from sparserl.engines.local.trainer import Trainer
from sparserl.methods.spec import load_method
from sparserl.tasks import procedural
from sparserl.tasks.validation import make_validation

TUNING = {"enabled": True, "grid": [0.5, 2], "steps": 2, "seeds": [0], "validation_size": 12,
          "families": {"grpo": "grpo_g4"}}


# the validation split ------------------------------------------------------------------------
@pytest.mark.parametrize("split", [None, {"eval": 0.25, "rl": 0.25}], ids=["pool-on-corpus-side", "three-way"])
def test_validation_split_is_disjoint_from_pool_corpus_and_benchmarks(repo, split):
    """Distinct pool-side problems, none in the pool, the corpus or a benchmark: with the pool on
    the corpus's side (smoke: heldout_fraction only) the corpus is excluded explicitly."""
    cfg = load_config(repo / "configs/smoke.yaml")
    if split:
        cfg["tasks"]["split"] = split
    pool = procedural.make_train_pool(cfg)
    corpus = procedural.make_pretrain_corpus(cfg)
    benches = list(procedural.make_benchmarks(cfg).values())
    tsplit = procedural.task_split(cfg["tasks"])
    val = make_validation(cfg, 40, pool, corpus, benches)
    probs = set(val["problem"])
    assert 0 < len(val) <= 40 and len(probs) == len(val)
    assert not probs & set(pool["problem"])
    assert not probs & set(corpus["problem"])
    for b in benches:
        assert not probs & set(b["problem"])
    side = procedural.pool_side(tsplit)
    assert all(procedural.split_of(p, tsplit) == side for p in probs)
    if split:  # the hash alone keeps the benchmarks' side away
        assert side == "rl" and all(procedural.split_of(p, tsplit) != "eval" for p in probs)
    assert val["id"].str.startswith("validation/").all()
    # the same config draws the same split
    assert make_validation(cfg, 40, pool, corpus, benches)["problem"].tolist() == val["problem"].tolist()


# the choice ----------------------------------------------------------------------------------
def _scores(rows):
    return pd.DataFrame([{"family": f, "method": f"{f}_rep", "factor": x, "lr": x * 1e-4, "seed": s,
                          "accuracy": a} for f, x, s, a in rows])


def test_choice_is_the_argmax_of_the_seed_mean_and_a_tie_goes_to_the_smaller_factor():
    t = L.choose(_scores([
        ("grpo", 0.5, 0, .30), ("grpo", 1, 0, .40), ("grpo", 2, 0, .50), ("grpo", 4, 0, .45),
        # seed mean: x1 .45 (.5, .4), x2 .44 (.6, .28): a better single seed does not decide
        ("basis", 1, 0, .50), ("basis", 1, 1, .40), ("basis", 2, 0, .60), ("basis", 2, 1, .28),
        # tie at the top between x2 and x4 (and x0.5 below): the smaller of the tied factors
        ("v05", 0.5, 0, .10), ("v05", 2, 0, .35), ("v05", 4, 0, .35)]))
    chosen = t[t["chosen"]].set_index("family")
    assert chosen.loc["grpo", "factor"] == 2 and chosen.loc["basis", "factor"] == 1
    assert chosen.loc["v05", "factor"] == 2
    assert t.groupby("family")["chosen"].sum().eq(1).all()
    basis = t[t["family"] == "basis"].set_index("factor")
    assert basis.loc[1, "validation_accuracy"] == pytest.approx(.45) and basis.loc[1, "seeds"] == 2
    assert chosen.loc["grpo", "lr"] == pytest.approx(2e-4)
    assert "validation_greedy_accuracy" not in t  # only where the evaluation wrote greedy scores
    greedy = _scores([("grpo", 1, 0, .4), ("grpo", 1, 1, .5)]).assign(greedy_accuracy=[.6, .7])
    assert L.choose(greedy)["validation_greedy_accuracy"].item() == pytest.approx(.65)


def test_every_method_file_has_a_family_and_the_families_split_as_documented():
    fam = {n: L.lr_family(load_method(n)) for n in ("grpo_g16", "rloo_g8", "dapo_g16", "gspo_g8", "gpg_g8",
                                                      "vanilla_g1", "reinforce_pp_g1", "basis_grid_gspo_g1_basis",
                                                      "basis_grid_gpg_g1_rpp", "v05_k1", "v05_osla",
                                                      "lc_math_vf_g8")}
    assert fam == {"grpo_g16": "grpo", "rloo_g8": "rloo", "dapo_g16": "dapo", "gspo_g8": "gspo", "gpg_g8": "gpg",
                   "vanilla_g1": "reinforce", "reinforce_pp_g1": "reinforce", "basis_grid_gspo_g1_basis": "basis",
                   "basis_grid_gpg_g1_rpp": "reinforce", "v05_k1": "v05", "v05_osla": "v05",
                   "lc_math_vf_g8": "critic"}


# config errors -------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf")])
def test_a_bad_grid_factor_is_a_config_error_naming_the_key(repo, bad):
    with pytest.raises(ConfigError, match=r"rl\.lr_tuning\.grid\.1"):
        load_config(repo / "configs/small.yaml", overrides={"rl": {"lr_tuning": {"grid": [0.5, bad]}}})


def test_enabled_tuning_needs_its_keys_and_a_representative_of_each_family(repo):
    small = repo / "configs/small.yaml"
    with pytest.raises(ConfigError, match="families"):
        load_config(repo / "configs/tiny.yaml", overrides={"rl": {"lr_tuning": {"enabled": True, "grid": [1],
                                                                              "steps": 5, "seeds": [0],
                                                                              "validation_size": 8}}})
    cfg = load_config(small)
    assert L.check(cfg) is not None
    cfg["rl"]["lr_tuning"]["families"].pop("basis")
    with pytest.raises(ConfigError, match=r"rl\.lr_tuning\.families.*'basis'.*basis_grid_grpo_g1_basis"):
        L.check(cfg)
    cfg = load_config(small)
    cfg["rl"]["lr_tuning"]["families"]["grpo"] = "rloo_g8"
    with pytest.raises(ConfigError, match=r"rl\.lr_tuning\.families\.grpo: method 'rloo_g8' is of family 'rloo'"):
        L.check(cfg)
    cfg = load_config(small)
    cfg["rl"]["lr_tuning"]["families"]["adam"] = "grpo_g8"
    with pytest.raises(ConfigError, match="unknown family 'adam'"):
        L.check(cfg)


def test_tiny_has_no_tuning_and_small_has_it(repo):
    assert L.check(load_config(repo / "configs/tiny.yaml")) is None
    assert L.check(load_config(repo / "configs/small.yaml"))["grid"] == [0.5, 1, 2]


# the trainer's lr ----------------------------------------------------------------------------
@pytest.fixture()
def world(tmp_path, tiny_lm, repo):
    """tests/test_rl.py's toy world, with the corpus and benchmarks the validation split excludes."""
    from sparserl.models.policies import save_hf
    cfg = load_config(repo / "configs/smoke.yaml")
    cfg["results_dir"] = str(tmp_path / "results")
    cfg["rl"] = {"policy": "s", "methods": ["grpo_g4"], "seeds": [0], "steps": 2,
                 "rollouts_per_step": 16, "lr": 1e-4, "checkpoint_every": 2, "eval_fractions": [],
                 "mini_batches": 2}
    cfg["rollout"]["max_new_tokens"] = 8
    P = Paths(cfg)
    write_table(procedural.make_train_pool(cfg), P.train_pool())
    write_table(procedural.make_pretrain_corpus(cfg), P.pretrain_corpus())
    for name, df in procedural.make_benchmarks(cfg).items():
        write_table(df, P.benchmark(name))
    model, tok = tiny_lm
    save_hf(model, tok, P.policy("s"), {"test": True})
    return cfg


def _write_chosen(cfg, lr, base=None):
    path = Paths(cfg).tuning("lr.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"base_lr": base or cfg["rl"]["lr"],
                                "families": {"grpo": {"method": "grpo_g4", "factor": 2.0, "lr": lr}}}))


def test_the_trainer_uses_the_tuned_lr_when_enabled_and_rl_lr_when_not(world):
    t = Trainer(world, "grpo_g4", 0)
    assert (t.lr, t.lr_source) == (1e-4, "fixed") and t.opt.param_groups[0]["lr"] == 1e-4
    cfg = copy.deepcopy(world)
    cfg["rl"]["lr_tuning"] = copy.deepcopy(TUNING)
    with pytest.raises(ConfigError, match=r"lr\.json.*rule lr_tuning"):
        Trainer(cfg, "grpo_g4", 0)
    _write_chosen(cfg, 3.5e-4)
    t = Trainer(cfg, "grpo_g4", 0)
    assert (t.lr, t.lr_source) == (3.5e-4, "tuned") and t.opt.param_groups[0]["lr"] == 3.5e-4
    # a family the tuning left out keeps rl.lr; a run elsewhere (V0's harvest) too
    assert (Trainer(cfg, "vanilla_g1", 0).lr_source, Trainer(cfg, "vanilla_g1", 0).lr) == ("fixed", 1e-4)
    assert Trainer(cfg, "grpo_g4", 0, run_paths=Paths(cfg).run("harvest", 0)).lr == 1e-4
    # a retuned rate is another run: its resume state does not carry over
    key = t._key()
    _write_chosen(cfg, 7e-4)
    assert Trainer(cfg, "grpo_g4", 0)._key() != key
    cfg["rl"]["lr"] = 2e-4  # tuned around another rl.lr: stale
    with pytest.raises(ConfigError, match="rl.lr is now 0.0002"):
        Trainer(cfg, "grpo_g4", 0)


# the CLI end to end --------------------------------------------------------------------------
def test_cli_tunes_selects_and_the_rl_run_records_the_tuned_lr(world, tmp_path):
    from sparserl.cli import main
    cfg = copy.deepcopy(world)
    cfg["rl"]["lr_tuning"] = copy.deepcopy(TUNING)
    conf = tmp_path / "toy.json"
    conf.write_text(json.dumps(cfg))
    P = Paths(cfg)
    args = ["--config", str(conf)]
    assert main(["make-validation", *args]) == 0
    val = read_table(P.validation_split())
    assert 0 < len(val) <= 12 and not set(val["problem"]) & set(read_table(P.train_pool())["problem"])
    for factor in ("0.5", "2"):
        assert main(["lr-tune-run", *args, "--family", "grpo", "--factor", factor, "--seed", "0"]) == 0
    run = P.tuning("grpo", "x2", "seed0")
    assert len(read_table(run / "metrics.parquet")) == 2  # tuning runs live under tuning/, not rl/
    assert not P.run("grpo_g4", 0).metrics.exists()
    assert main(["lr-tune-run", *args, "--family", "grpo", "--factor", "3", "--seed", "0"]) == 2  # not in grid
    assert main(["lr-tune-select", *args]) == 0
    table = read_table(P.tuning("lr.parquet"))
    assert sorted(table["factor"]) == [0.5, 2.0] and table["chosen"].sum() == 1
    assert np.allclose(table.sort_values("factor")["lr"], [0.5e-4, 2e-4])
    best = table.loc[table["validation_accuracy"].idxmax()]
    chosen = json.loads(P.tuning("lr.json").read_text())["families"]["grpo"]
    assert math.isclose(chosen["lr"], table.loc[table["chosen"], "lr"].item())
    assert chosen["validation_accuracy"] == pytest.approx(best["validation_accuracy"])
    assert main(["rl-train", *args, "--method", "grpo_g4", "--seed", "0"]) == 0
    met = read_table(P.run("grpo_g4", 0).metrics)
    assert (met["lr"] == chosen["lr"]).all() and (met["lr_source"] == "tuned").all()
    man = read_manifest(P.run("grpo_g4", 0).metrics)
    assert man["lr"] == chosen["lr"] and man["lr_source"] == "tuned"
