"""Commands take their paths from the DAG: Le Critique's, the OOD stage's and the lr tuning's
commands read and write the files they are given, not the ones the config's tree would name."""
import json

import pandas as pd
import pytest

from sparserl.cli import main
from sparserl.core.artifacts import read_table, write_json, write_table
from sparserl.core.config import load_config
from sparserl.core.paths import Paths


@pytest.fixture
def tiny(repo):
    return load_config([str(repo / "configs/tiny.yaml")])


def _conf(tmp_path, cfg) -> str:
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(cfg))
    return str(path)


# Le Critique ----------------------------------------------------------------------------------
def test_a_critique_run_lives_where_the_dag_puts_it(tiny, tmp_path):
    """resolve_critique_run with the DAG's folder and start policy: those paths, the run's key
    unchanged (a moved run resumes, and Snakemake's params key does not rerun it)."""
    from sparserl.methods.run import resolve_critique_run
    exp = next(iter(tiny["critique"]["experiments"]))
    method = tiny["critique"]["experiments"][exp]["methods"][0]
    default = resolve_critique_run(tiny, exp, method, 0)
    run = resolve_critique_run(tiny, exp, method, 0, root=tmp_path / "run", policy=tmp_path / "c")
    assert run.paths.dir == tmp_path / "run" and run.paths.metrics == tmp_path / "run" / "metrics.parquet"
    assert run.inputs == (str(tmp_path / "c"),) and default.inputs != run.inputs
    assert run.key == default.key


def test_critique_train_passes_its_folder_and_policy(tiny, tmp_path, monkeypatch):
    import sparserl.engines.local.critique as crit
    got = {}
    monkeypatch.setattr(crit, "train", lambda cfg, exp, method, seed, **kw: got.update(kw, exp=exp) or "ok")
    conf, run = _conf(tmp_path, tiny), tmp_path / "elsewhere" / "run"
    args = ["critique-train", "--config", conf, "--experiment", "rg_k8", "--method", "lc_vf", "--seed", "0",
            "--policy", str(tmp_path / "c"), "--summary", str(run / "summary.json")]
    assert main(args + ["--metrics", str(run / "metrics.parquet")]) == 0
    assert got["run_dir"] == run and got["policy"] == str(tmp_path / "c") and got["exp"] == "rg_k8"
    with pytest.raises(SystemExit, match=r"--metrics .*other/metrics.parquet is not beside --summary"):
        main(args + ["--metrics", str(tmp_path / "other" / "metrics.parquet")])


def test_critique_summary_reads_the_runs_it_is_given(tiny, tmp_path):
    """runs.parquet and final.parquet from the given summaries (their order, their identity) and
    the given start evaluations; a run whose env has no start evaluation is refused, naming it."""
    runs = []
    for i, (exp, env, method) in enumerate([("b_k2", "rg", "lc_vf"), ("a_k4", "sudoku", "lc_mean")]):
        d = tmp_path / "anywhere" / str(i)
        write_table(pd.DataFrame({"step": [1, 2], "reward_mean": [0.1 * i, 0.2 + i], "wall_time_s": [1.0, 1.0]}),
                    d / "metrics.parquet")
        write_json({"experiment": exp, "env": env, "k": 2 + 2 * i, "method": method, "seed": 3, "heldout_reward": 0.5,
                    "rollouts_total": 8, "warmup_updates": 0}, d / "summary.json")
        runs.append(str(d / "summary.json"))
    starts = []
    for env, r in (("rg", 0.25), ("sudoku", 0.125)):
        write_json({"env": env, "heldout_reward": r}, tmp_path / "s" / f"{env}.json")
        starts.append(str(tmp_path / "s" / f"{env}.json"))
    out = ["--out-runs", str(tmp_path / "o" / "runs.parquet"), "--out-final", str(tmp_path / "o" / "final.parquet")]
    conf = _conf(tmp_path, tiny)
    assert main(["critique-summary", "--config", conf, "--runs", *runs, "--starts", *starts, *out]) == 0
    final = read_table(tmp_path / "o" / "final.parquet")
    assert list(final["experiment"]) == ["b_k2", "a_k4"] and list(final["k"]) == [2, 4] and set(final["seed"]) == {3}
    assert list(final["heldout_gain"]) == [0.25, 0.375]  # each against its own env's start
    assert list(read_table(tmp_path / "o" / "runs.parquet")["method"]) == ["lc_vf"] * 2 + ["lc_mean"] * 2
    with pytest.raises(ValueError, match=r"1/summary.json: env 'sudoku' has no start evaluation"):
        main(["critique-summary", "--config", conf, "--runs", *runs, "--starts", starts[0], *out])


# OOD ------------------------------------------------------------------------------------------
def test_ood_task_files_are_matched_to_families_by_name(tiny, tmp_path):
    from sparserl.evaluation.ood.procedural import task_files
    names = [b["name"] for b in tiny["ood"]["benchmarks"]]
    given = [tmp_path / f"{n}.parquet" for n in reversed(names)]
    assert task_files(tiny, given) == {n: tmp_path / f"{n}.parquet" for n in names}
    with pytest.raises(ValueError, match=rf"no file for the ood.benchmarks families \['{names[0]}'\]"):
        task_files(tiny, given[:-1])


def test_ood_policies_are_the_configs_in_its_order(tiny, tmp_path):
    """--policies label=checkpoint: the DAG's checkpoint per label, returned in the config's
    policy order whatever the order given; a missing or unknown label stops the command."""
    from sparserl.cli.ood import _checkpoints
    from sparserl.evaluation.ood import policies
    labels = [label for label, _, _ in policies(tiny)]
    items = [f"{label}=ck/{i}" for i, label in enumerate(labels)]
    got = _checkpoints(tiny, items[::-1])
    assert [g[0] for g in got] == labels and [g[3] for g in got] == [f"ck/{i}" for i in range(len(labels))]
    assert got[1][1:3] == policies(tiny)[1][1:3]
    with pytest.raises(SystemExit, match="exactly the config's OOD policies"):
        _checkpoints(tiny, items[1:])
    with pytest.raises(SystemExit, match="exactly the config's OOD policies"):
        _checkpoints(tiny, items + ["other/seed0=x"])


# lr tuning ------------------------------------------------------------------------------------
def test_lr_tune_run_and_select_pass_their_paths(repo, tmp_path, monkeypatch):
    import sparserl.engines.lr_tuning as L
    cfg = load_config([str(repo / "configs/small.yaml")])
    st = next(iter(L.setting_methods(cfg)))
    run = L.tuning_run(cfg, st, 1e-5, 0, root=tmp_path / "t")
    default = L.tuning_run(cfg, st, 1e-5, 0, L.tuning_dir(Paths(cfg), st, 1e-5, 0))
    assert run.paths.dir == tmp_path / "t" and run.key == default.key
    got = {}
    monkeypatch.setattr(L, "tune_run", lambda *a, **kw: got.update(run=a))
    monkeypatch.setattr(L, "select", lambda *a: got.update(select=a))
    conf = _conf(tmp_path, cfg)
    tasks = ["--pool", "p.parquet", "--corpus", "c.parquet", "--benchmarks", "b1.parquet", "b2.parquet"]
    lr = L.lr_label(cfg["rl"]["lr_tuning"]["grid"][0])
    assert main(["lr-tune-run", "--config", conf, "--setting", st, "--lr", lr, "--seed", "1", *tasks,
                 "--validation", "v.parquet", "--out", "t/validation.parquet"]) == 0
    assert got["run"][1:] == (st, float(lr), 1, "t/validation.parquet", "v.parquet", "p.parquet", "c.parquet",
                              ["b1.parquet", "b2.parquet"])
    assert main(["lr-tune-select", "--config", conf, "--tables", "a.parquet", "b.parquet", "--validation", "v.parquet",
                 "--out-table", "o.parquet", "--out-csv", "o.csv", "--out-md", "o.md", "--out-json", "o.json"]) == 0
    assert got["select"][1:] == (["a.parquet", "b.parquet"], "v.parquet", "o.parquet", "o.csv", "o.md", "o.json")
