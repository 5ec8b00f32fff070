"""Learning rates and steps chosen per batch setting on the validation split (rl.lr_tuning): the
split and its guard against benchmark, pool and corpus problems, the settings, the rule
(validation_argmax), the trainer's lr and steps, config errors, and the CLI end to end."""
import copy
import dataclasses
import itertools
import json

import numpy as np
import pandas as pd
import pytest

from sparserl.core.artifacts import read_manifest, read_table, write_table
from sparserl.core.config import ConfigError, load_config
from sparserl.core.paths import Paths
from sparserl.engines import lr_tuning as L
from sparserl.engines.local.trainer import Trainer
from sparserl.methods.run import resolve_run
from sparserl.methods.spec import load_method
from sparserl.tasks import procedural
from sparserl.tasks.validation import make_validation

TUNING = {"enabled": True, "grid": [5e-5, 2e-4], "checkpoints": [0.5, 1.0], "seeds": [0, 1],
          "validation_size": 12}


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


@pytest.fixture()
def tasks(tmp_path, repo):
    """Smoke's tasks on disk (three-way split), and the validation split make-validation writes."""
    cfg = load_config(repo / "configs/smoke.yaml")
    cfg["results_dir"] = str(tmp_path / "results")
    cfg["tasks"]["split"] = {"eval": 0.25, "rl": 0.25}
    P = Paths(cfg)
    pool, corpus = procedural.make_train_pool(cfg), procedural.make_pretrain_corpus(cfg)
    write_table(pool, P.train_pool())
    write_table(corpus, P.pretrain_corpus())
    benches = procedural.make_benchmarks(cfg)
    for name, df in benches.items():
        write_table(df, P.benchmark(name))
    write_table(make_validation(cfg, 40, pool, corpus, list(benches.values())), P.validation_split())
    return cfg


def _split_files(cfg):
    """(validation split, pool, corpus, benchmark tables) of a tree: what the DAG passes the scoring."""
    P = Paths(cfg)
    return (P.validation_split(), P.train_pool(), P.pretrain_corpus(), [P.benchmark(b) for b in P.benchmark_names()])


def test_the_scored_split_is_disjoint_from_benchmarks_by_text_and_by_hash(tasks):
    """What the scoring reads (`validation_problems`) against the files on disk: no benchmark,
    pool or corpus problem, and none hashed to the benchmarks' side."""
    P = Paths(tasks)
    val = L.validation_problems(tasks, *_split_files(tasks))
    split = procedural.task_split(tasks["tasks"])
    bench = pd.concat([read_table(P.benchmark(b)) for b in P.benchmark_names()])
    assert not set(val["problem"]) & set(bench["problem"])
    assert {procedural.split_of(p, split) for p in val["problem"]} == {"rl"}
    assert {procedural.split_of(p, split) for p in bench["problem"]} == {"eval"}


@pytest.mark.parametrize("leak", ["benchmark file", "benchmark, respaced", "pool problem", "corpus problem",
                                  "benchmark-side hash"])
def test_scoring_pointed_at_a_benchmark_problem_raises(tasks, leak):
    """The mutation the guard exists for: the split the scoring reads replaced by (or salted
    with) a benchmark's problems, the pool's or the corpus's, or a problem on the benchmarks'
    side of the hash that no benchmark drew; the scoring refuses it, naming the file."""
    P = Paths(tasks)
    split = procedural.task_split(tasks["tasks"])
    val = read_table(P.validation_split())
    bench = read_table(P.benchmark(P.benchmark_names()[0]))
    if leak == "benchmark file":
        bad = bench
    else:
        row = val.iloc[:1].copy()
        if leak == "benchmark, respaced":
            row["problem"] = "  " + bench["problem"].iloc[0].replace(" ", "  ")
        elif leak == "pool problem":
            row["problem"] = read_table(P.train_pool())["problem"].iloc[0]
        elif leak == "corpus problem":
            row["problem"] = read_table(P.pretrain_corpus())["problem"].iloc[0]
        else:
            seen = set(bench["problem"])
            row["problem"] = next(f"{a} + {b}" for a in range(100, 999) for b in range(10)
                                  if procedural.split_of(f"{a} + {b}", split) == "eval" and f"{a} + {b}" not in seen)
        bad = pd.concat([val, row], ignore_index=True)
    write_table(bad, P.validation_split())
    with pytest.raises(ValueError, match=r"validation\.parquet.*(benchmark|RL pool|corpus|hash off)"):
        L.validation_problems(tasks, *_split_files(tasks))


def test_a_tuning_run_on_a_leaked_split_stops_before_training(world):
    cfg = copy.deepcopy(world)
    cfg["rl"]["lr_tuning"] = copy.deepcopy(TUNING)
    P = Paths(cfg)
    write_table(read_table(P.benchmark(P.benchmark_names()[0])), P.validation_split())
    st = L.setting_of(load_method("grpo_g4"), cfg["rl"])
    with pytest.raises(ValueError, match="benchmark"):
        L.tune_run(cfg, st, 5e-5, 0, L.validation_table(P, st, 5e-5, 0), *_split_files(cfg))
    assert not L.tuning_run(cfg, st, 5e-5, 0, L.tuning_dir(P, st, 5e-5, 0)).paths.metrics.exists()


def test_a_tuning_runs_folder_and_scores_are_where_the_tuning_rules_put_them(world):
    """The tuning's layout (tuning_dir, validation_table) is the one trees were built with:
    results/<scale>/tuning/<setting>/lr<lr>/seed<s>/, never under rl/."""
    cfg = copy.deepcopy(world)
    cfg["rl"]["lr_tuning"] = copy.deepcopy(TUNING)
    P = Paths(cfg)
    st = L.setting_of(load_method("grpo_g4"), cfg["rl"])
    want = P.results / "tuning" / st / "lr5e-05" / "seed1"
    run = L.tuning_run(cfg, st, 5e-5, 1, L.tuning_dir(P, st, 5e-5, 1))
    assert run.paths.dir == want and run.paths.metrics == want / "metrics.parquet"
    assert L.validation_table(P, st, 5e-5, 1) == want / "validation.parquet"


# the settings --------------------------------------------------------------------------------
def test_settings_come_from_the_spec_per_group_size_and_matched_prompts(repo):
    cfg = load_config(repo / "configs/small.yaml")
    rl = cfg["rl"]
    st = {n: L.setting_of(load_method(n), rl) for n in rl["methods"]}
    assert st["grpo_g4"] == "grpo_p64_r256_s100" and st["grpo_g8"] == "grpo_p32_r256_s100"
    assert st["grpo_g16"] == "grpo_p16_r256_s100"
    # *_mp: 64 prompts a step, rollouts growing with G; at 256 rollouts grpo_g4_mp is grpo_g4's setting
    assert st["grpo_g4_mp"] == st["grpo_g4"]
    assert st["grpo_g8_mp"] == "grpo_p64_r512_s100" and st["grpo_g16_mp"] == "grpo_p64_r1024_s100"
    assert st["basis_grid_grpo_g1_basis"] == "basis_p256_r256_s50" != st["basis_grid_grpo_g1_basis_full"]
    members = L.setting_methods(cfg)
    assert sorted(m for ms in members.values() for m in ms) == sorted(rl["methods"])
    for name, ms in members.items():  # one family and one batch shape per setting
        assert {L.setting_of(load_method(m), rl) for m in ms} == {name}
        assert L.tuner(cfg, name) == ms[0]
    # read off the spec, not a list: another group size is another setting
    g8 = load_method("grpo_g8")
    assert L.setting_of(dataclasses.replace(g8, group_size=4), rl) == st["grpo_g4"]


# the rule ------------------------------------------------------------------------------------
def _scores(rows):
    return pd.DataFrame([{"setting": s, "family": s.split("_")[0], "method": f"{s}_m", "prompts_per_step": 32,
                          "rollouts_per_step": 256, "lr": lr, "steps": n, "seed": seed, "accuracy": a}
                         for s, lr, n, seed, a in rows])


def test_the_rule_is_the_seed_mean_argmax_with_ties_to_the_smaller_lr_then_fewer_steps():
    rows = []
    # grpo: best seed mean at (2e-5, 50); a single lucky seed at (4e-5, 100) does not decide
    for lr, n, accs in [(1e-5, 50, (.40, .42)), (1e-5, 100, (.41, .43)), (2e-5, 50, (.50, .48)),
                        (2e-5, 100, (.45, .47)), (4e-5, 50, (.30, .32)), (4e-5, 100, (.70, .20))]:
        rows += [("grpo", lr, n, s, a) for s, a in enumerate(accs)]
    # v05: a three-way tie at the top: the smaller lr, then the fewer steps
    for lr, n, accs in [(1e-5, 50, (.3, .3)), (2e-5, 50, (.35, .35)), (2e-5, 100, (.35, .35)),
                        (4e-5, 50, (.35, .35)), (4e-5, 100, (.1, .1))]:
        rows += [("v05", lr, n, s, a) for s, a in enumerate(accs)]
    t = L.validation_argmax(_scores(rows), [1e-5, 2e-5, 4e-5])
    assert list(t.columns) == list(L.TABLE_COLUMNS)
    c = t[t["chosen"]].set_index("setting")
    assert (c.loc["grpo", "lr"], c.loc["grpo", "steps"]) == (2e-5, 50)
    assert (c.loc["v05", "lr"], c.loc["v05", "steps"]) == (2e-5, 50)
    assert not c["lr_at_grid_edge"].any() and not c["steps_at_last_checkpoint"].any()
    g = t[(t["setting"] == "grpo") & (t["lr"] == 4e-5) & (t["steps"] == 100)].iloc[0]
    assert g["validation_accuracy"] == pytest.approx(.45) and g["validation_accuracy_sd"] == pytest.approx(np.std([.7, .2], ddof=1))
    assert (g["validation_accuracy_min"], g["validation_accuracy_max"], g["seeds"]) == (.2, .7, 2)
    # an edge choice is flagged; checkpoints before min_steps are not eligible
    edge = L.validation_argmax(_scores([("grpo", lr, 10, s, lr * 1e4) for lr in (1e-5, 2e-5) for s in (0, 1)]))
    assert edge.loc[edge["chosen"], "lr"].item() == 2e-5 and edge.loc[edge["chosen"], "lr_at_grid_edge"].item()
    late = L.validation_argmax(_scores(rows), [1e-5, 2e-5, 4e-5], {"grpo": 100, "v05": 0})
    lc = late[late["chosen"]].set_index("setting")
    assert (lc.loc["grpo", "lr"], lc.loc["grpo", "steps"]) == (2e-5, 100) and not late.loc[
        (late["setting"] == "grpo") & (late["steps"] == 50), "eligible"].any()


def test_the_chosen_rate_is_the_validation_argmax_over_the_grid_on_random_tables():
    rng = np.random.default_rng(0)
    grid, steps = [5e-6, 1.5e-5, 4.5e-5], [50, 75, 100]
    for _ in range(50):
        acc = rng.integers(0, 6, size=(len(grid), len(steps), 3)) / 5  # coarse: ties happen
        rows = [("s", lr, n, seed, acc[i, j, seed]) for (i, lr), (j, n) in itertools.product(enumerate(grid), enumerate(steps))
                for seed in range(3)]
        t = L.validation_argmax(_scores(rows), grid)
        mean = acc.mean(axis=2)
        i, j = min(zip(*np.nonzero(np.isclose(mean, mean.max(), rtol=0, atol=1e-12))))  # smaller lr, then steps
        chosen = t[t["chosen"]].iloc[0]
        assert (chosen["lr"], chosen["steps"]) == (grid[i], steps[j])
        assert chosen["lr_at_grid_edge"] == (i in (0, len(grid) - 1))


def test_the_rule_refuses_one_seed_and_uneven_seeds():
    with pytest.raises(ValueError, match="two or more seeds"):
        L.validation_argmax(_scores([("s", 1e-5, 10, 0, .5), ("s", 2e-5, 10, 0, .6)]))
    with pytest.raises(ValueError, match="same two or more seeds"):
        L.validation_argmax(_scores([("s", 1e-5, 10, 0, .5), ("s", 1e-5, 10, 1, .5), ("s", 2e-5, 10, 0, .6)]))


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
def test_a_bad_grid_rate_is_a_config_error_naming_the_key(repo, bad):
    with pytest.raises(ConfigError, match=r"rl\.lr_tuning\.grid\.1"):
        load_config(repo / "configs/small.yaml", overrides={"rl": {"lr_tuning": {"grid": [1e-5, bad]}}})


def test_enabled_tuning_needs_its_keys_and_two_seeds(repo):
    with pytest.raises(ConfigError, match="checkpoints"):
        load_config(repo / "configs/tiny.yaml", overrides={"rl": {"lr_tuning": {"enabled": True, "grid": [1e-5, 2e-5],
                                                                              "seeds": [0, 1], "validation_size": 8}}})
    with pytest.raises(ConfigError, match=r"rl\.lr_tuning\.seeds"):
        load_config(repo / "configs/small.yaml", overrides={"rl": {"lr_tuning": {"seeds": [0]}}})
    with pytest.raises(ConfigError, match=r"rl\.lr_tuning\.families"):  # the per-family list is gone
        load_config(repo / "configs/small.yaml", overrides={"rl": {"lr_tuning": {"families": {"grpo": "grpo_g8"}}}})


def test_tiny_is_untuned_and_small_chooses_on_disjoint_seeds(repo):
    tiny = load_config(repo / "configs/tiny.yaml")
    assert L.check(tiny) is None and L.tuned_lr(tiny, load_method("grpo_g8"), L.chosen_path(Paths(tiny))) == (tiny["rl"]["lr"], "fixed")
    small = load_config(repo / "configs/small.yaml")
    s = L.check(small)
    assert len(s["grid"]) >= 3 and len(s["seeds"]) >= 2 and not set(s["seeds"]) & set(small["rl"]["seeds"])
    # the grid's rates are absolute, and small's rl.lr is none of what the rule may choose from
    assert all(1e-7 < x < 1e-3 for x in s["grid"])


# the trainer's lr and steps ------------------------------------------------------------------
@pytest.fixture()
def world(tmp_path, tiny_lm, repo):
    """tests/engines/local/test_rl.py's toy world, with the corpus and benchmarks the validation split excludes."""
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


def _write_chosen(cfg, lr, steps, grid=None):
    path = Paths(cfg).tuning("lr.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    st = L.setting_of(load_method("grpo_g4"), cfg["rl"])
    path.write_text(json.dumps({"grid": grid or cfg["rl"]["lr_tuning"]["grid"],
                                "settings": {st: {"method": "grpo_g4", "lr": lr, "steps": steps}}}))


def test_the_trainer_uses_the_chosen_lr_and_steps_when_enabled_and_rl_lr_when_not(world):
    t = Trainer(world, resolve_run(world, "grpo_g4", 0))
    assert (t.lr, t.lr_source, t.steps) == (1e-4, "fixed", 2) and t.opt.param_groups[0]["lr"] == 1e-4
    cfg = copy.deepcopy(world)
    cfg["rl"]["lr_tuning"] = copy.deepcopy(TUNING)
    with pytest.raises(ConfigError, match=r"lr\.json.*rule lr_tuning"):
        Trainer(cfg, resolve_run(cfg, "grpo_g4", 0))
    _write_chosen(cfg, 2e-4, 1)
    t = Trainer(cfg, resolve_run(cfg, "grpo_g4", 0))
    assert (t.lr, t.lr_source, t.steps) == (2e-4, "tuned", 1) and t.opt.param_groups[0]["lr"] == 2e-4
    # a setting the tuning left out keeps rl.lr and the horizon; a run elsewhere (V0's harvest) too
    v = Trainer(cfg, resolve_run(cfg, "vanilla_g1", 0))
    assert (v.lr_source, v.lr, v.steps) == ("fixed", 1e-4, 2)
    h = Trainer(cfg, resolve_run(cfg, "grpo_g4", 0, root=Paths(cfg).stage("harvest")))
    assert (h.lr, h.steps) == (1e-4, 2)
    # a retuned rate is another run: its resume state does not carry over
    state = t.state_key()
    _write_chosen(cfg, 5e-5, 1)
    retuned = Trainer(cfg, resolve_run(cfg, "grpo_g4", 0))
    assert t.state_mismatch(state) is None and "lr 0.0002 -> 5e-05" in retuned.state_mismatch(state)
    cfg["rl"]["lr_tuning"]["grid"] = [5e-5, 1e-4]  # chosen on another grid: stale
    with pytest.raises(ConfigError, match="another grid"):
        Trainer(cfg, resolve_run(cfg, "grpo_g4", 0))
    cfg["rl"]["lr_tuning"]["grid"] = TUNING["grid"]
    _write_chosen(cfg, 5e-5, 3)  # past the horizon
    with pytest.raises(ConfigError, match="3 steps chosen"):
        Trainer(cfg, resolve_run(cfg, "grpo_g4", 0))


def test_a_tree_with_lr_tuning_from_trains_the_first_trees_choice_and_tunes_nothing(world, tmp_path):
    """A second start's tree (rl.lr_tuning.from) reads the first tree's lr.json, {scale}
    filled in; its own tuning/lr.json is never asked for, and a missing first tree is one error
    naming the file and the command that builds it."""
    first = copy.deepcopy(world)
    first["rl"]["lr_tuning"] = copy.deepcopy(TUNING)
    _write_chosen(first, 2e-4, 1)
    second = copy.deepcopy(first)
    second["results_dir"] = str(tmp_path / "results_start1")
    second["rl"]["lr_tuning"]["from"] = str(tmp_path / "results" / "{scale}" / "tuning" / "lr.json")
    assert L.borrowed(second) == Paths(first).tuning("lr.json") and L.borrowed(first) is None
    g4 = load_method("grpo_g4")
    chosen = L.chosen_path(Paths(second))
    assert chosen == Paths(first).tuning("lr.json")
    assert L.tuned_lr(second, g4, chosen) == (2e-4, "tuned") and L.tuned_steps(second, g4, chosen) == 1
    assert not Paths(second).tuning("lr.json").exists()
    second["rl"]["lr_tuning"]["from"] = str(tmp_path / "nowhere" / "{scale}" / "lr.json")
    with pytest.raises(ConfigError, match=r"nowhere/smoke/lr\.json: rl\.lr_tuning\.from .*snakemake --cores 2 "):
        L.tuned_lr(second, g4, L.chosen_path(Paths(second)))
    # off, `from` is inert (tiny layered with configs/overlays/start1.yaml)
    second["rl"]["lr_tuning"]["enabled"] = False
    assert L.borrowed(second) is None and L.tuned_lr(second, g4, L.chosen_path(Paths(second))) == (1e-4, "fixed")


# the CLI end to end --------------------------------------------------------------------------
@pytest.mark.e2e  # tuning runs, then an RL run
def test_cli_tunes_selects_and_the_rl_run_trains_the_chosen_lr_and_steps(world, tmp_path):
    from sparserl.cli import main
    cfg = copy.deepcopy(world)
    cfg["rl"]["lr_tuning"] = copy.deepcopy(TUNING)
    conf = tmp_path / "toy.json"
    conf.write_text(json.dumps(cfg))
    P = Paths(cfg)
    args = ["--config", str(conf)]
    tasks = ["--pool", str(P.train_pool()), "--corpus", str(P.pretrain_corpus()),
             "--benchmarks", *[str(P.benchmark(b)) for b in P.benchmark_names()]]
    assert main(["make-validation", *args, *tasks, "--out", str(P.validation_split())]) == 0
    val = read_table(P.validation_split())
    assert 0 < len(val) <= 12 and not set(val["problem"]) & set(read_table(P.train_pool())["problem"])
    st = L.setting_of(load_method("grpo_g4"), cfg["rl"])
    tables = []
    for lr, seed in itertools.product(("5e-05", "0.0002"), (0, 1)):
        tables.append(str(P.tuning(st, f"lr{lr}", f"seed{seed}", "validation.parquet")))
        assert main(["lr-tune-run", *args, "--setting", st, "--lr", lr, "--seed", str(seed), *tasks,
                     "--validation", str(P.validation_split()), "--out", tables[-1]]) == 0
    run = P.tuning(st, "lr0.0002", "seed1")
    assert len(read_table(run / "metrics.parquet")) == 2  # tuning runs live under tuning/, not rl/
    assert sorted(read_table(run / "validation.parquet")["steps"]) == [1, 2]  # checkpoints 0.5 and 1
    assert not P.run("grpo_g4", 0).metrics.exists()
    other = ["--validation", str(P.validation_split()), "--out", str(tmp_path / "x" / "validation.parquet")]
    assert main(["lr-tune-run", *args, "--setting", st, "--lr", "3e-4", "--seed", "0", *tasks, *other]) == 2  # not in grid
    assert main(["lr-tune-run", *args, "--setting", "grpo_p9_r9_s9", "--lr", "5e-05", "--seed", "0", *tasks,
                 *other]) == 2
    assert main(["lr-tune-select", *args, "--tables", *tables, "--validation", str(P.validation_split()),
                 "--out-table", str(P.tuning("lr.parquet")), "--out-csv", str(P.tuning("lr.csv")),
                 "--out-md", str(P.tuning("lr.md")), "--out-json", str(P.tuning("lr.json"))]) == 0
    table = read_table(P.tuning("lr.parquet"))
    assert len(table) == 4 and table["chosen"].sum() == 1 and (table["seeds"] == 2).all()
    assert read_manifest(P.tuning("lr.parquet"))["rule"] == "sparserl.engines.lr_tuning.validation_argmax"
    assert "validation_argmax" in P.tuning("lr.md").read_text() and P.tuning("lr.csv").is_file()
    best = table.sort_values(["validation_accuracy", "lr", "steps"], ascending=[False, True, True]).iloc[0]
    chosen = json.loads(P.tuning("lr.json").read_text())["settings"][st]
    assert (chosen["lr"], chosen["steps"]) == (best["lr"], best["steps"])
    assert main(["rl-train", *args, "--method", "grpo_g4", "--seed", "0"]) == 0
    met = read_table(P.run("grpo_g4", 0).metrics)
    assert (met["lr"] == chosen["lr"]).all() and (met["lr_source"] == "tuned").all()
    assert len(met) == chosen["steps"]
    man = read_manifest(P.run("grpo_g4", 0).metrics)
    assert man["lr"] == chosen["lr"] and man["lr_source"] == "tuned" and man["steps"] == chosen["steps"]
