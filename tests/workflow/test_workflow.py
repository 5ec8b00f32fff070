"""The Snakemake DAG: the paper dry run under the SLURM profile, config errors, and a smoke run."""
import json
import re
import subprocess
import sys

import pandas as pd
import pytest


def snakemake(repo, workdir, *args, timeout=600):
    cmd = [sys.executable, "-m", "snakemake", "-s", str(repo / "Snakefile"), "-d", str(workdir),
           *args]
    return subprocess.run(cmd, cwd=repo, capture_output=True, text=True, timeout=timeout)


def _sized(block, rule):
    """The runtime a sized job asks: its estimate x 1.5 in whole hours (common.smk SIZED)."""
    from sparserl.core.config import load_config
    from sparserl.core.paths import Paths
    from sparserl.engines.sizing import estimate
    from pathlib import Path
    wc = dict(kv.split("=", 1) for kv in re.search(r"wildcards: (.*)", block).group(1).split(", "))
    cfg = load_config(Path(__file__).resolve().parents[2] / "configs/paper.yaml")
    return -(-estimate(Paths(cfg), rule, wc).ask_minutes // 60) * 60


@pytest.mark.e2e  # DAG dry run
def test_paper_dry_run_under_slurm_profile_lists_gpu_jobs(repo, tmp_path):
    out = snakemake(repo, tmp_path, "--profile", "slurm", "-n", "all")
    assert out.returncode == 0, out.stderr[-3000:]
    log = out.stdout + out.stderr
    assert "rule evaluate:" in log and "results/paper/eval/qwen3_4b/eval.parquet" in log
    eval_block = log[log.index("rule evaluate:"):].split("\n\n")[0]
    # resources.rollout, the runtime sized: the start policy draws evaluation.start_k samples
    for res in ("gpu=1", "mem_mb=128000", f"runtime={_sized(eval_block, 'evaluate')}", "cpus_per_task=16"):
        assert res in eval_block, f"{res} missing from the evaluate job's resources"
    assert "fetch_data" in log
    assert "slurm_partition=gpu" in eval_block
    # CPU-only and download jobs get their own resources, never the gpu partition
    blocks = {}
    for b in log.split("\n\n"):
        m = re.search(r"^(?:local)?rule (\w+):", b, re.M)
        if m:
            blocks.setdefault(m.group(1), b)
    cpu_rules = [r for r in blocks if r in ("fetch_data", "rl_summary", "eval_summary",
                                            "passrate_summary") or r.startswith(("figure_", "study_"))]
    assert {"fetch_data", "rl_summary", "eval_summary"} <= set(cpu_rules)
    for r in cpu_rules:
        res = re.search(r"resources: (.*)", blocks[r]).group(1)
        assert "slurm_partition=gpu" not in res and "gpu=" not in res, f"{r}: {res}"
        assert "cpus_per_task=" in res, f"{r} has no resources of its own: {res}"
    # every RL method of the paper config runs on 8 GPUs through OpenRLHF
    from sparserl.core.config import load_config
    from sparserl.methods.spec import run_owners
    # a method whose spec repeats another's shares its run: one GPU job per distinct spec
    methods = sorted(set(run_owners(load_config(repo / "configs/paper.yaml")["rl"]["methods"]).values()))
    blocks = [b for b in log.split("\n\n") if "rule rl_cluster:" in b]
    assert len(blocks) == len(methods)
    for m in methods:
        block = next(b for b in blocks if f"method={m}," in b)
        assert "gpu=8" in block and f"runtime={_sized(block, 'rl_cluster')}" in block, block
        assert "openrlhf-launch" in block and f"--method {m} " in block
    # V0's harvest: one GPU job per architecture the config names, then the V0 tables on the harvest
    cfg = load_config(repo / "configs/paper.yaml")
    harvest = [b for b in log.split("\n\n") if "rule v0_harvest_run:" in b]
    assert sorted(re.search(r"wildcards: policy=(\S+)", b).group(1) for b in harvest) == \
        sorted(cfg["v0"]["harvest"]["policies"])
    assert all("gpu=8" in b for b in harvest)
    assert log.count("rule v0_table:") == 2 and "rule v0_ablations:" in log
    # Le Critique on OpenRLHF: one 8-GPU job per (experiment, method, seed), one 1-GPU start
    # evaluation per env, from the hub policy: no world, no pre-training
    from sparserl.envs.world import experiments, seeds
    runs = {(e.name, m, s) for e in experiments(cfg) for m in e.methods for s in seeds(cfg, e.name)}
    assert len(runs) == 45 and ("rg_k1", "lc_vf", 1) in runs and ("rg_k1", "lc_vf", 2) not in runs
    train = [b for b in log.split("\n\n") if "rule critique_train:" in b]
    got = {tuple(re.search(r"wildcards: exp=(\S+), method=(\S+), seed=(\d+)", b).groups()) for b in train}
    assert got == {(e, m, str(s)) for e, m, s in runs} and len(train) == len(runs)
    for b in train:
        res = re.search(r"resources: (.*)", b).group(1)
        for want in ("gpu=8", f"runtime={_sized(b, 'critique_train')}", "cpus_per_task=64", "slurm_partition=gpu",
                     "mem_mb=960000"):
            assert want in res, (want, res)
        exp, method, seed = re.search(r"wildcards: exp=(\S+), method=(\S+), seed=(\d+)", b).groups()
        assert "critique-openrlhf --config " in b and f"--experiment {exp} --method {method} --seed {seed} " in b
        # a hub policy: only fetch_models' local copy (and MiniF2F's hand-placed files) come first
        assert "critique-train" not in b and re.search(r"^\s*input: models/", b, re.M), b
    starts = [b for b in log.split("\n\n") if "rule critique_start:" in b]
    assert sorted(re.search(r"wildcards: env=(\S+)", b).group(1) for b in starts) == \
        sorted(cfg["critique"]["envs"])
    for b in starts:
        res = re.search(r"resources: (.*)", b).group(1)
        assert "gpu=1" in res and "slurm_partition=gpu" in res and "critique-start" in b
        env = re.search(r"wildcards: env=(\S+)", b).group(1)
        assert f"--out results/paper/critique/start_eval/{env}.json " in b  # the DAG's path, not the command's
    assert "rule critique_world:" not in log and "rule critique_pretrain:" not in log
    summ = next(b for b in log.split("\n\n") if re.search(r"^(?:local)?rule critique_summary:", b, re.M))
    assert "gpu=" not in re.search(r"resources: (.*)", summ).group(1)


@pytest.mark.e2e  # DAG dry run
def test_tiny_dry_run_is_the_default(repo, tmp_path):
    out = snakemake(repo, tmp_path, "--cores", "2", "-n", "all")
    assert out.returncode == 0, out.stderr[-3000:]
    log = out.stdout + out.stderr
    for rule in ("make_tasks", "train_tokenizer", "pretrain_policy", "passrate", "evaluate"):
        assert f"rule {rule}:" in log
    assert "results/tiny/policies/passrates.json" in log
    # the RL start policy's pass rates share the rollouts of its reference cache
    blocks = [b for b in re.split(r"\n(?=\[\w{3} \w{3} )", log) if "rule passrate:" in b]
    shared = [b for b in blocks if re.search(r"wildcards: policy=s$", b, re.M)]
    assert len(blocks) == 3 and len(shared) == 1, blocks
    assert "results/tiny/basis/reference/s.parquet" in re.search(r"input: (.*)", shared[0]).group(1)
    for b in blocks:
        if b not in shared:
            assert "basis/reference" not in re.search(r"input: (.*)", b).group(1)


@pytest.mark.e2e  # DAG dry run
def test_small_tuning_dag_runs_each_setting_rate_and_seed(repo, tmp_path):
    """rl.lr_tuning at small: one lr_tune_run per batch setting x grid rate x seed (the *_mp runs
    and G=4/8/16 apart), and an RL run reads the chosen rates and steps."""
    from sparserl.core.config import load_config
    from sparserl.engines import lr_tuning as L
    cfg = load_config(repo / "configs/small.yaml")
    s = L.check(cfg)
    out = snakemake(repo, tmp_path, "results/small/tuning/lr.parquet", "results/small/rl/grpo_g16_mp/seed0/metrics.parquet",
                    "--cores", "2", "-n", "--configfile", str(repo / "configs/small.yaml"))
    assert out.returncode == 0, out.stderr[-3000:]
    log = out.stdout + out.stderr
    settings = L.setting_methods(cfg)
    assert {"grpo_p16_r256_s100", "grpo_p64_r512_s100", "grpo_p64_r1024_s100"} <= set(settings)
    runs = set(re.findall(r"tuning/(\w+)/lr([0-9.e+-]+)/seed(\d+)/validation\.parquet", log))
    assert runs == {(st, L.lr_label(lr), str(seed)) for st in settings for lr in s["grid"] for seed in s["seeds"]}
    # rl_train prints its message, then the reason that names its inputs
    reason = re.search(r"training grpo_g16_mp seed 0:.*\nReason: (.*)", log).group(1)
    assert "results/small/tuning/lr.json" in reason


@pytest.mark.e2e  # DAG dry run
def test_bad_config_stops_the_dag_naming_key_and_file(repo, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text((repo / "configs/smoke.yaml").read_text().replace("seed: 0", "seed: zero"))
    out = snakemake(repo, tmp_path, "all", "--cores", "1", "-n", "--configfile", str(bad))
    assert out.returncode != 0
    log = out.stdout + out.stderr
    assert "bad.yaml" in log and "key 'seed'" in log and "not of type 'integer'" in log


@pytest.mark.e2e
@pytest.mark.two_cores
def test_smoke_dag_end_to_end(repo, tmp_path):
    cfg = str(repo / "configs/smoke.yaml")
    out = snakemake(repo, tmp_path, "all", "--cores", "2", "--configfile", cfg, timeout=300)
    assert out.returncode == 0, out.stderr[-4000:]
    res = tmp_path / "results" / "smoke"
    summary = pd.read_parquet(res / "eval" / "summary.parquet")
    assert set(summary["policy"]) == {"s", "m"}
    assert set(summary["benchmark"]) == {"add_sub_2x1digit", "add_sub_3x1digit"}
    greedy = summary[summary["benchmark"] == "add_sub_2x1digit"]
    assert (greedy["metric"] == "greedy").all()
    assert summary["accuracy"].between(0, 1).all()
    rates = json.loads((res / "policies" / "passrates.json").read_text())
    assert set(rates["policies"]) == {"s", "m"}
    assert (res / "policies" / "s@p50" / "config.json").exists()
    assert (res / "eval" / "s" / "eval.parquet.manifest.json").exists()
    harvest = pd.read_parquet(res / "values" / "harvest.parquet")  # V0's harvest, both policies
    assert set(harvest["model"]) == {"s", "m"} and set(harvest["split"]) == {"heldout", "onpolicy"}
    assert set(harvest.loc[harvest.split == "heldout", "step"]) == {0, 2, 4}
    for protocol in ("sequential", "strict"):
        table = pd.read_parquet(res / "values" / "eval" / f"v0_{protocol}.parquet")
        assert {"v0", "knn_contextual", "vanilla_value_model"} <= set(table["method"])
    figs = sorted((tmp_path / "paper_figures" / "smoke").rglob("*.png"))
    assert len(figs) >= 13, figs
    # a figure regenerates from its cached table alone, with every other output on disk
    fig = tmp_path / "paper_figures" / "smoke" / "basis" / "f3a_mse_by_method.png"
    fig.unlink()
    redo = snakemake(repo, tmp_path, str(fig.relative_to(tmp_path)), "--cores", "2", "-n",
                     "--configfile", cfg)
    assert redo.returncode == 0, redo.stdout[-3000:] + redo.stderr[-3000:]
    rules = re.findall(r"^(?:local)?rule (\w+):", redo.stdout, re.M)
    assert rules == ["figure_basis_f3a_mse_by_method"], rules
    # `all` redraws that figure and nothing else; `all` has no run block: once the figure is
    # redrawn, a real rerun of the finished DAG has nothing to do, and the output list comes from
    # the onsuccess handler
    redraw = snakemake(repo, tmp_path, "all", "--cores", "2", "--configfile", cfg)
    assert redraw.returncode == 0, redraw.stderr[-3000:]
    ran = [r for r in re.findall(r"^(?:local)?rule (\w+):", redraw.stdout + redraw.stderr, re.M) if r != "all"]
    assert ran == ["figure_basis_f3a_mse_by_method"], ran
    assert fig.exists() and "sparserl smoke: outputs under" in redraw.stdout
    rerun = snakemake(repo, tmp_path, "all", "--cores", "2", "--configfile", cfg)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "Nothing to be done" in rerun.stdout + rerun.stderr, rerun.stdout[-2000:] + rerun.stderr[-2000:]
    # the Snakemake report of the finished DAG names every figure of the config, with its caption
    # (tests/figures/test_report.py checks the report in detail; perf/check_report.py in Chromium)
    import html
    from sparserl.core.config import load_config
    from sparserl.core.paths import Paths
    from sparserl.figures import list_figures
    from sparserl.figures.report import report_results
    report = snakemake(repo, tmp_path, "--report", str(tmp_path / "report.html"), "--configfile", cfg)
    assert report.returncode == 0, report.stderr[-3000:]
    smoke = load_config([cfg])
    entries = report_results((tmp_path / "report.html").read_text())
    for f in list_figures(smoke):
        shown = html.unescape(re.sub(r"<[^>]+>", " ", entries[str(f.output(Paths(smoke)))]["caption"]))
        assert " ".join(f.caption.split()) in " ".join(shown.split()), f.id


@pytest.mark.e2e  # runs DAG jobs
def test_config_overrides_reach_the_jobs(repo, tmp_path):
    """`--config key=value` used to change the DAG only: the jobs re-read the config files. Now
    every job reads the config Snakemake resolved, so the override changes what they compute."""
    from sparserl.core.artifacts import config_hash, read_manifest
    from sparserl.core.config import load_config
    cfg = str(repo / "configs/smoke.yaml")
    target = "results/smoke/tasks/train_pool.parquet"
    pools = {}
    for seed in (0, 3):
        wd = tmp_path / f"seed{seed}"
        out = snakemake(repo, wd, target, "--cores", "1", "--configfile", cfg, "--config", f"seed={seed}")
        assert out.returncode == 0, out.stderr[-3000:]
        pools[seed] = pd.read_parquet(wd / target)
        want = load_config(cfg, overrides={"seed": seed})
        assert read_manifest(wd / target)["config_hash"] == config_hash(want)
    assert not pools[0]["problem"].equals(pools[3]["problem"])


# -------------------------------------------------------------------------------------- the researcher's loop

def _resolved_configs(workdir, scale="tiny"):
    return [json.loads(p.read_text()) for p in (workdir / "results" / scale / ".config").glob("*.json")]


@pytest.mark.e2e  # DAG dry run
def test_an_embedder_of_kind_policy_is_an_input_its_rules_pass(repo, tmp_path):
    """v0.embedder kind policy reads a pre-trained policy: both embedding rules wait for its folder
    and hand it to `v0-embed`, which never looks it up itself."""
    out = snakemake(repo, tmp_path, "--cores", "2", "-n", "-p", "--forceall", "all",
                    "--config", "v0.embedder.kind=policy", "v0.embedder.path=m")
    assert out.returncode == 0, out.stderr[-3000:]
    log = out.stdout + out.stderr
    blocks = [b for b in re.split(r"\n(?=\[\w{3} \w{3} )", log) if re.search(r"rule v0_(pool_)?embeddings:", b)]
    assert len(blocks) == 2, log[-3000:]
    for b in blocks:
        assert "results/tiny/policies/m" in re.search(r"input: (.*)", b).group(1).split(", ")
        assert "--embedder-policy results/tiny/policies/m " in b


@pytest.mark.e2e  # DAG dry run
@pytest.mark.parametrize("override", ["rl.steps=20", 'rl={"steps": "20"}'])
def test_command_line_overrides_are_typed_echoed_and_reach_the_jobs(repo, tmp_path, override):
    out = snakemake(repo, tmp_path, "--cores", "2", "-n", "rl/grpo_g4", "--config", override)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "sparserl: command-line --config: rl.steps=20 (was 40)" in out.stderr
    steps = [c["rl"]["steps"] for c in _resolved_configs(tmp_path)]
    assert steps == [20] and isinstance(steps[0], int)  # the one config every job reads


@pytest.mark.e2e  # DAG dry run
@pytest.mark.parametrize("override, shown", [("rl.steps=abc", "rl.steps=abc"),
                                              ('rl={"steps": "abc"}', 'rl={"steps": "abc"}')])
def test_a_wrong_override_is_blamed_on_the_command_line(repo, tmp_path, override, shown):
    out = snakemake(repo, tmp_path, "--cores", "2", "-n", "rl/grpo_g4", "--config", override)
    assert out.returncode != 0
    log = out.stdout + out.stderr
    assert (f"config error: --config {shown}: key 'rl.steps': 'abc' is not of type 'integer'; "
            "fix the value of 'rl.steps' on the command line") in log
    assert "tiny.yaml: key" not in log


@pytest.mark.e2e  # DAG dry run
def test_any_method_file_is_a_target(repo, tmp_path):
    """rl/<method> trains and evaluates rl.seeds of a method that rl.methods does not list."""
    from sparserl.core.config import load_config
    assert "grpo_median_g8" not in load_config(repo / "configs/tiny.yaml")["rl"]["methods"]
    out = snakemake(repo, tmp_path, "--cores", "2", "-n", "rl/grpo_median_g8")
    assert out.returncode == 0, out.stderr[-3000:]
    log = out.stdout + out.stderr
    jobs = dict(re.findall(r"^(\S+)\s+(\d+)$", log.split("Job stats:")[1].split("total")[0], re.M))
    assert jobs == {"make_tasks": "1", "train_tokenizer": "1", "pretrain_policy": "1", "rl_train": "1",
                    "rl_eval": "1", "rl/grpo_median_g8": "1"}
    assert "wildcards: method=grpo_median_g8, seed=0" in log


@pytest.mark.e2e  # DAG dry run
@pytest.mark.parametrize("target, config, shown", [
    ("rl/grpo_g4", "smoke.yaml", "configs/smoke.yaml has no rl section, so there are no rl/<method> "
                                 "targets; add an rl section (as in configs/tiny.yaml)"),
    ("rl/grpo_g5", "tiny.yaml", "there is no configs/methods/grpo_g5.yaml; did you mean rl/grpo_g8? "
                                "the rl/<method> targets are: rl/basis_grid_gpg_g1_basis, "),
    ("results/tiny/nothing.txt", "tiny.yaml", "no rule makes it; ask for a rule (all, basis, "),
])
def test_an_unknown_target_is_one_line_naming_it_and_the_targets_there_are(repo, tmp_path, target,
                                                                           config, shown):
    """Snakemake's own report of a target no rule makes is a raw AttributeError (sparserl.core.targets)."""
    out = snakemake(repo, tmp_path, target, "--cores", "1", "-n", "--configfile",
                    str(repo / "configs" / config))
    assert out.returncode == 1
    log = out.stdout + out.stderr
    assert "Traceback" not in log and "AttributeError" not in log, log[-3000:]
    errors = [line for line in log.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1
    # Snakemake's preamble (9.27's banner of Date, Platform, ... included), then the one error
    banner = re.compile(r"(Using workflow specific profile|host: |Assuming unrestricted shared filesystem"
                        r"|SNAKEMAKE$|=+$|  [A-Za-z0-9 ()]+: |$)")
    assert [line for line in log.splitlines() if not banner.match(line)] == errors
    assert errors[0].startswith(f"Error: unknown target {target}: ") and shown in errors[0], errors
    locks = tmp_path / ".snakemake" / "locks"  # it stops before Snakemake locks the folder
    assert not locks.exists() or not any(locks.iterdir())


@pytest.mark.e2e  # runs DAG jobs
def test_a_file_target_finishes_quietly_and_a_config_rerun_names_its_keys(repo, tmp_path):
    cfg = str(repo / "configs/smoke.yaml")
    target = "results/smoke/tasks/train_pool.parquet"
    out = snakemake(repo, tmp_path, target, "--cores", "1", "--configfile", cfg)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "outputs under" not in out.stdout + out.stderr  # `all`'s list only when `all` was built
    out = snakemake(repo, tmp_path, target, "--cores", "1", "-n", "--configfile", cfg, "--config", "seed=3")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Params have changed since last execution: config keys changed: seed: 0 -> 3" in out.stdout + out.stderr


def test_snakemakes_removal_of_an_output_names_a_failure_and_takes_the_manifest(tmp_path, monkeypatch, caplog):
    """Snakemake removes a failed job's outputs; on a folder that turned read-only its os.remove
    raised through Snakemake as a raw traceback, and a removed table left its manifest behind
    (sparserl.core.snakemake_io)."""
    import asyncio
    import errno
    import os
    import snakemake.io as sio
    from sparserl.core.artifacts import write_table
    from sparserl.core.snakemake_io import install_removal_hooks
    monkeypatch.setattr(sio, "remove", sio.remove)  # the hook is undone after the test
    install_removal_hooks()
    out = tmp_path / "rl" / "metrics.parquet"
    out.parent.mkdir()
    out.write_text("x")

    def read_only(path, *a, **k):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), path)

    monkeypatch.setattr(os, "remove", read_only)
    with caplog.at_level("ERROR", logger="snakemake.logging"):
        asyncio.run(sio.IOFile(str(out)).remove())  # as Snakemake removes a failed job's output
    assert [r.getMessage() for r in caplog.records] == [
        f"{out}: could not remove this output of the failed job (Read-only file system, EROFS); {out.parent} "
        f"is on a read-only filesystem; point results_dir at a writable one, then delete it (`rm -r {out}`) "
        "and rerun"]
    assert out.read_text() == "x"
    monkeypatch.undo()
    monkeypatch.setattr(sio, "remove", sio.remove)
    install_removal_hooks()
    write_table(pd.DataFrame({"a": [1]}), out)
    asyncio.run(sio.IOFile(str(out)).remove())  # its manifest goes with it, not left without its table
    assert sorted(os.listdir(out.parent)) == []


MINI_SNAKEFILE = '''
from sparserl.core.snakemake_io import install_removal_hooks
install_removal_hooks()

rule made_then_failed:
    output: "out/done.txt"
    shell: "echo done > {output}; mount --bind -o ro out out; exit 1"
'''


@pytest.mark.e2e  # runs a DAG job
def test_a_job_whose_folder_turns_read_only_fails_in_one_line_keeping_its_output(repo, tmp_path):
    """A real read-only filesystem (a bind mount in a mount namespace of Snakemake's own): the job
    fails, Snakemake cannot remove its output and says so in one line, then reports the failed job
    as usual, without a traceback."""
    import os
    import shutil
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-m", "true"],
                                                         capture_output=True).returncode != 0:
        pytest.skip("needs `unshare -m` (root or user namespaces)")
    (tmp_path / "Snakefile").write_text(MINI_SNAKEFILE)
    env = {**os.environ, "PYTHONPATH": str(repo / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run(["unshare", "-m", sys.executable, "-m", "snakemake", "-s", str(tmp_path / "Snakefile"),
                          "-d", str(tmp_path), "--cores", "1", "out/done.txt"],
                         capture_output=True, text=True, timeout=300, env=env)
    log = out.stdout + out.stderr
    assert out.returncode == 1, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
    assert ("out/done.txt: could not remove this output of the failed job (Read-only file system, EROFS); out "
            "is on a read-only filesystem; point results_dir at a writable one, then delete it (`rm -r "
            "out/done.txt`) and rerun") in log.splitlines(), log[-3000:]
    assert "Error in rule made_then_failed" in log
    assert (tmp_path / "out" / "done.txt").read_text() == "done\n"


@pytest.mark.e2e  # runs DAG jobs
@pytest.mark.two_cores
def test_the_scheduler_never_runs_more_threads_than_cores(tmp_path):
    """Snakemake 9.10-9.27.0 started a third 1-thread job on `--cores 2` right after an upstream
    job ended (snakemake#3913): two RL runs and a third beside them ran 35x slower. The DAG's
    scheduler (profiles/default: greedy) must hold jobs x threads <= cores."""
    (tmp_path / "Snakefile").write_text(
        'rule all:\n    input: expand("out{i}.txt", i=range(5))\n'
        'rule common:\n    output: "common.txt"\n    shell: "touch {output}"\n'
        'rule job:\n    input: "common.txt"\n    output: "out{i}.txt"\n    threads: 1\n'
        '    shell: "python -c \'import time; print(time.time())\' > {output}; sleep 1; '
        'python -c \'import time; print(time.time())\' >> {output}"\n')
    subprocess.run([sys.executable, "-m", "snakemake", "--cores", "2", "--scheduler", "greedy", "-q"],
                   cwd=tmp_path, check=True, capture_output=True)
    spans = [tuple(map(float, (tmp_path / f"out{i}.txt").read_text().split())) for i in range(5)]
    most = max(sum(s <= t < e for s, e in spans) for t, _ in spans)
    assert most <= 2, f"{most} one-thread jobs ran at once on --cores 2: {sorted(spans)}"
