"""`sparserl published`: pack a sweep's tables into published/<scale>/, their status against the
current config, the rebuild of figures and ranking from them alone, and verify's comparison."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from helpers.head_to_head_tables import make_cfg, write_runs

from sparserl.core import published as pub
from sparserl.core.artifacts import read_manifest, write_manifest, write_table

METHODS = ["grpo_g4", "vanilla_g1"]


def _sweep(repo, tmp_path, monkeypatch):
    """A finished smoke sweep of two RL methods in tmp_path/sweep (synthetic run tables, as
    `rl-train` and `rl-eval` lay them out), with a checkpoint and rollouts beside each run."""
    from sparserl.core.config import load_config, write_resolved
    path = tmp_path / "smoke.yaml"
    path.write_text(yaml.safe_dump(make_cfg(repo, methods=METHODS)))
    cfg = load_config([path])  # as the jobs read it: resolved, its hash in every manifest
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    monkeypatch.chdir(sweep)
    write_resolved(cfg, "results/smoke/.config")  # as the Snakefile does
    write_runs(cfg)
    for m in METHODS:
        run = Path("results/smoke/rl", m, "seed0")
        # weights with a manifest, and a table inside a checkpoint folder: never published
        write_table(pd.DataFrame({"w": [1.0]}), run / "checkpoints" / "step00002" / "state.parquet", cfg=cfg)
        (run / "final").mkdir()
        (run / "final" / "model.safetensors").write_bytes(b"weights")
        # a resume state with a manifest beside the per-checkpoint evaluations pack does read
        (run / "eval" / "resume.pt").write_bytes(b"state")
        write_manifest(run / "eval" / "resume.pt", rows=None, columns=None, cfg=cfg)
        write_table(pd.DataFrame({"reward": [0.0, 1.0]}), run / "rollouts.parquet", cfg=cfg)
    return cfg, path, sweep


def _cli(*argv) -> int:
    from sparserl.cli import main
    return main(list(argv))


@pytest.mark.e2e  # ~40 s
@pytest.mark.two_cores  # a DAG run: 1.4 busy cores
def test_pack_status_rebuild_round_trip_without_checkpoints(repo, tmp_path, monkeypatch, capsys):
    cfg, path, sweep = _sweep(repo, tmp_path, monkeypatch)
    out = tmp_path / "published"
    assert _cli("published", "pack", "smoke", "--configfile", str(path), "--published", str(out),
                "--results", str(sweep / "results/smoke")) == 0
    text = capsys.readouterr().out
    root = out / "smoke"
    index = json.loads((root / "index.json").read_text())["files"]
    # what the head-to-head and rl_summary read, and the per-problem tables rl-eval writes beside eval.parquet
    for m in METHODS:
        for name in ("metrics.parquet", "eval.parquet", "eval/final_per_problem.parquet"):
            key = f"results/rl/{m}/seed0/{name}"
            assert key in index and (root / key).is_file() and pub.manifest_path(root / key).is_file(), key
    assert index["results/rl/grpo_g4/seed0/eval/final_per_problem.parquet"]["declared"] is False
    assert "results/eval/s/eval_per_problem.parquet" in index
    # no weights, nothing of a checkpoint folder, no rollouts (no figure or claim reads them)
    files = [str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()]
    assert not [f for f in files if "checkpoints" in f or "final/" in f or f.endswith((".safetensors", ".pt"))
                or "rollouts" in f], files
    assert all(oct((root / f).stat().st_mode & 0o777) == "0o644" for f in files)
    assert f"{root}: {len(files)} files" in text
    # incremental: a second pack copies nothing and deletes nothing
    (root / "results" / "extra.json").write_text("{}")
    assert _cli("published", "pack", "smoke", "--published", str(out), "--results", str(sweep / "results/smoke")) == 0
    assert "0 files copied" in capsys.readouterr().out and (root / "results" / "extra.json").is_file()

    assert _cli("published", "status", "smoke", "--published", str(out)) == 0
    text = capsys.readouterr().out
    assert "RL runs" in text and "stale:" not in text
    assert "missing: " in text  # the DAG's study tables, never made by this sweep

    rebuilt = tmp_path / "rebuilt"
    monkeypatch.chdir(tmp_path)
    assert _cli("published", "rebuild", "smoke", "--published", str(out), "--out", str(rebuilt)) == 0
    text = capsys.readouterr().out
    assert "not rebuilt: " in text  # the figures of tables the sweep never made, each named
    ranking = pd.read_parquet(rebuilt / "results/smoke/head_to_head/ranking.parquet")
    assert set(ranking["method"]) == set(METHODS)
    assert (rebuilt / "paper_figures/smoke/head_to_head/ranking.png").is_file()
    # nothing trained: no run has a final checkpoint, no log of a training rule
    assert not list(rebuilt.glob("results/smoke/rl/*/seed0/final"))
    assert not list(rebuilt.glob("results/smoke/logs/rl_*"))
    origin = pub.origin_line(rebuilt / "results/smoke")
    assert origin.startswith("from published tables at commit") and "STALE" not in origin
    csv = (rebuilt / "paper_figures/smoke/head_to_head/ranking.csv").read_text()
    assert csv and read_manifest(rebuilt / "results/smoke/head_to_head/ranking.parquet")


@pytest.mark.e2e  # ~5 s
def test_status_calls_tables_of_another_config_stale_by_section(repo, tmp_path, monkeypatch, capsys):
    from sparserl.cli.published import Setup, stale_lines, status
    from sparserl.core.config import load_config
    cfg, path, sweep = _sweep(repo, tmp_path, monkeypatch)
    out = tmp_path / "published"
    assert _cli("published", "pack", "smoke", "--configfile", str(path), "--published", str(out),
                "--results", str(sweep / "results/smoke")) == 0
    root = out / "smoke"
    same = status(Setup("smoke", [str(path)], load_config([path]), root))
    assert not same.stale and same.rows
    # another method list: a run's tables do not depend on it (methods.spec.run_settings)
    more = load_config([path], {"rl": {"methods": METHODS + ["grpo_g8"]}})
    assert not status(Setup("smoke", [str(path)], more, root)).stale
    # another learning rate: every table of the run's config is stale, its section named
    other = load_config([path], {"rl": {"lr": 1e-3}, "evaluation": {"start_k": 8}})
    st = status(Setup("smoke", [str(path)], other, root))
    assert "RL runs" in st.stale
    lines = stale_lines(st)
    assert any(line.startswith("stale: RL runs: ") and line.endswith("in: evaluation, rl") for line in lines), lines
    # the CPUs the tables were made on, from their manifests: here one, this machine's
    from sparserl.cli.published import cpu_name, machine_records
    from sparserl.core.machine import machine_record
    files = pub.read_index(root)["files"]
    recs = machine_records(Setup("smoke", [str(path)], cfg, root), files)
    assert list(recs) == [cpu_name(machine_record()["cpu"])] and len(recs[cpu_name(machine_record()["cpu"])]) == len(files)
    key = sorted(files)[0]
    m = json.loads(pub.manifest_path(root / key).read_text())
    m["machine"]["cpu"]["flags"] = ["sse2"]
    pub.manifest_path(root / key).write_text(json.dumps(m))
    recs = machine_records(Setup("smoke", [str(path)], cfg, root), files)
    assert len(recs) == 2 and recs[f"{m['machine']['cpu']['model']} [sse2]"] == [key]


def test_compare_tables_names_each_differing_column_and_its_largest_difference():
    a = pd.DataFrame({"acc": [0.5, 0.25, np.nan], "name": ["x", "y", "z"], "wall_time_s": [1.0, 2.0, 3.0],
                      "n": [1, 2, 3]})
    assert pub.compare_tables(a, a.copy()) == []  # NaN against NaN is equal
    b = a.assign(acc=[0.5, 0.125, np.nan], name=["x", "y", "w"], wall_time_s=[1.5, 2.0, 3.0])
    d = pub.compare_tables(a, b)
    assert "acc: max abs difference 0.125 over 1 of 3 rows" in d
    assert "name: 1 of 3 rows differ" in d
    assert [x for x in d if x.startswith("wall_time_s")] and len(pub.unexpected(d)) == 2
    assert pub.compare_tables(a, b.drop(columns="n").assign(extra=1))[:2] == [
        "columns in the published table only: n", "columns in the fresh table only: extra"]
    assert pub.compare_tables(a, a.iloc[:2]) == ["rows: 3 published vs 2 fresh"]
    assert pub.unexpected(pub.compare_tables(a, a.assign(acc=[0.5, 0.25, 1.0])))  # NaN against a number
    # a statistic that is +-inf on some steps (BASIS's est_beta with no active prompt) on both sides:
    # equal, not "NaN on one side only"; inf against a number still differs
    inf = a.assign(acc=[np.inf, -np.inf, np.nan])
    assert pub.compare_tables(inf, inf.copy()) == []
    assert pub.unexpected(pub.compare_tables(inf, inf.assign(acc=[np.inf, 0.0, np.nan])))


@pytest.mark.e2e  # ~5 s
def test_verify_comparison_says_equal_differs_or_another_machine(repo, tmp_path, monkeypatch):
    from sparserl.cli.published import Setup, compare_run
    from sparserl.core.config import load_config
    cfg, path, sweep = _sweep(repo, tmp_path, monkeypatch)
    out = tmp_path / "published"
    assert _cli("published", "pack", "smoke", "--configfile", str(path), "--published", str(out),
                "--results", str(sweep / "results/smoke")) == 0
    S = Setup("smoke", [str(path)], load_config([path]), out / "smoke")
    keys = [f"results/rl/grpo_g4/seed0/{n}" for n in ("metrics.parquet", "eval.parquet")]
    lines, equal, machine = compare_run(S, keys, sweep)  # the sweep itself: equal, same machine
    assert equal and not machine and all(line.endswith("(same bytes)") for line in lines)
    # a rerun whose final accuracy moved, recorded on a CPU without AVX-512
    fresh = tmp_path / "fresh"
    ev = pd.read_parquet(sweep / "results/smoke/rl/grpo_g4/seed0/eval.parquet")
    ev.loc[ev["checkpoint"] == "final", "accuracy"] += 0.01
    write_table(ev, fresh / "results/smoke/rl/grpo_g4/seed0/eval.parquet", cfg=cfg)
    mp = pub.manifest_path(fresh / "results/smoke/rl/grpo_g4/seed0/eval.parquet")
    m = json.loads(mp.read_text())
    m["machine"]["cpu"]["flags"] = [f for f in m["machine"]["cpu"]["flags"] if not f.startswith("avx512")] + ["sse2"]
    mp.write_text(json.dumps(m))
    lines, equal, machine = compare_run(S, keys, fresh)
    assert not equal
    assert "results/rl/grpo_g4/seed0/metrics.parquet: not made by the fresh run" in lines
    assert any(line.strip().startswith("accuracy: max abs difference 0.01") for line in lines), lines
    assert machine and machine[0].startswith("machine.cpu.flags")


def test_origin_line_names_commits_and_stale_groups(tmp_path):
    assert pub.origin_line(tmp_path) == ""
    (tmp_path / pub.ORIGIN).write_text(json.dumps({"published": "published/small", "commits": ["a" * 40],
                                                   "config_hashes": ["h1"], "stale_groups": ["V0"]}))
    assert pub.origin_line(tmp_path) == ("from published tables at commit aaaaaaaaaaaa (published/small; config h1); "
                                         "STALE against this config: V0")
    from sparserl.studies.claims.table import _header_lines
    head = _header_lines("small", "small.yaml", "h2", "b" * 40, "rows", origin=pub.origin_line(tmp_path))
    assert head[1] == f"Measured {pub.origin_line(tmp_path)}."


def test_keys_map_workdir_paths_and_groups():
    k = pub.to_key("results/small/rl/grpo_g16/seed0/eval.parquet", "results", "paper_figures", "small")
    assert k == "results/rl/grpo_g16/seed0/eval.parquet" and pub.run_of(k) == "grpo_g16/seed0"
    assert pub.from_key(k, "results", "paper_figures", "small") == "results/small/rl/grpo_g16/seed0/eval.parquet"
    assert pub.to_key("paper_figures/small/basis/x.parquet", "results", "paper_figures", "small") == \
        "paper_figures/basis/x.parquet"
    assert pub.to_key("results/tiny/x.parquet", "results", "paper_figures", "small") is None
    assert pub.group_of("results/values/eval/v0_strict.parquet") == "V0"
    assert pub.is_checkpoint("results/rl/m/seed0/checkpoints/step00010/eval.parquet")
    assert pub.is_checkpoint("results/values/models/v0/v0.sequential.seed0.pt")


@pytest.mark.parametrize("path, ignored", [
    ("published/small/results/rl/grpo_g16/seed0/eval.parquet", False),
    ("published/small/paper_figures/basis/mse_by_method.parquet", False),
    ("published/small/index.json", False),
    ("published/tiny/results/rl/grpo_g16/seed0/eval.parquet", True),  # tiny: rebuilt by the DAG
    ("results/small/rl/grpo_g16/seed0/eval.parquet", True),
])
def test_published_small_is_committable_and_tiny_is_not(repo, path, ignored):
    import subprocess
    rc = subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=repo).returncode
    assert rc == (0 if ignored else 1), path


def test_the_tuning_tables_are_published_though_no_figure_reads_them():
    """The tuning table and its spread over rates and seeds are published data: the tables of the
    tuning rules are packed beside what the rebuild rules read; a training job's are not."""
    from sparserl.cli.published import Job, plan
    jobs = [Job("lr_tune_run", ["results/small/policies/m"], ["results/small/tuning/grpo/lr1e-05/seed10/validation.parquet"]),
            Job("lr_tuning", ["results/small/tuning/grpo/lr1e-05/seed10/validation.parquet"],
                ["results/small/tuning/lr.parquet", "results/small/tuning/lr.csv"]),
            Job("rl_train", ["results/small/tuning/lr.json"], ["results/small/rl/grpo_g8/seed0/metrics.parquet"]),
            Job("claims", ["results/small/rl/grpo_g8/seed0/metrics.parquet"], ["paper_figures/small/CLAIMS.md"])]
    needed = plan((jobs, set())).needed
    assert "results/small/tuning/lr.parquet" in needed
    assert "results/small/tuning/grpo/lr1e-05/seed10/validation.parquet" in needed
    assert "results/small/rl/grpo_g8/seed0/metrics.parquet" in needed
    assert not any(n.startswith("results/small/policies") for n in needed)


def test_a_tuning_runs_own_tables_are_current_under_their_derived_config(repo, tmp_path):
    """A tuning run's metrics carry the hash of its derived config (rl.lr set to the grid's rate),
    which no resolved-config file holds: pack derives it again, and status compares it with the
    current config's tuning run at that rate, so a change of the base rate (which tuning replaces)
    leaves it current and a change of the tuning's checkpoints makes it stale."""
    from sparserl.cli.published import Setup, resolved_configs, status
    from sparserl.core.artifacts import config_hash, write_json
    from sparserl.core.config import load_config, write_resolved
    from sparserl.engines.lr_tuning import tuning_config
    files = [repo / "configs/small.yaml"]
    cfg = load_config(files)
    lr = cfg["rl"]["lr_tuning"]["grid"][0]
    resolved = tmp_path / ".config"
    write_resolved(cfg, resolved)
    h = config_hash(tuning_config(cfg, lr))
    recs = resolved_configs(resolved, {config_hash(cfg), h, "0123456789abcdef"})
    assert set(recs) == {config_hash(cfg), h}
    assert recs[config_hash(cfg)][1] is None and recs[h][1] == {"config_hash": config_hash(cfg), "lr": lr}
    root = tmp_path / "published" / "small"
    key = "results/tuning/grpo_p16_r256_s100/lr1e-05/seed10/metrics.parquet"
    (root / pub.CONFIGS).mkdir(parents=True)
    (root / pub.CONFIGS / f"{h}.json").write_text(recs[h][0])
    write_json({"files": {key: {"group": pub.group_of(key), "declared": False, "config_hash": h, "git_commit": "x"}},
                "tuning_configs": {h: recs[h][1]}}, root / pub.INDEX)
    assert not status(Setup("small", [], cfg, root)).stale
    assert not status(Setup("small", [], load_config(files, {"rl": {"lr": 3e-3}}), root)).stale
    later = load_config(files, {"rl": {"lr_tuning": {"checkpoints": [0.5, 1.0]}}})
    assert status(Setup("small", [], later, root)).stale == {"learning-rate tuning": {h: ["rl"]}}


def test_pack_leaves_out_the_rollouts_a_job_writes_beside_a_published_table(tmp_path):
    """A tuning run writes its metrics and rollouts beside validation.parquet: the metrics are
    published with it, the rollouts (read by no figure) are not."""
    from sparserl.cli.published import companions
    from sparserl.core.artifacts import write_table
    run = tmp_path / "results/small/tuning/grpo_p16_r256_s100/lr1e-05/seed10"
    for name in ("validation", "metrics", "rollouts"):
        write_table(pd.DataFrame({"x": [1.0]}), run / f"{name}.parquet")
    rel = str((run / "validation.parquet").relative_to(tmp_path))
    assert [Path(c).name for c in companions(tmp_path, rel, {rel})] == ["metrics.parquet"]
