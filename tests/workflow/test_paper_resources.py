"""The paper DAG on SLURM: hub models fetched once, hand-placed files flagged, the reference cache
sharded (and equal to one job's), and each GPU rule's estimated work within its runtime."""
import contextlib
import json
import math
import re
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from sparserl.core.artifacts import read_manifest, read_table, write_table
from sparserl.core.paths import Paths


# --------------------------------------------------------------------------- reference cache shards

def _fake_rollouts(monkeypatch):
    """mc_values with a backend whose rewards depend only on (prompt, seed): shards must reuse
    the one-job seeds for the tables to agree."""
    import sparserl.values.mcvalues as mc

    class Verifier:
        def __init__(self):
            self.n = 0

        def timeout_counts(self):
            return {"items": self.n, "timeouts": 0}

    @contextlib.contextmanager
    def open_verifier(cfg):
        yield Verifier()

    def rollout(backend, prompts, answers, n, params, seed, ver):
        rng = np.random.default_rng([seed, *(sum(map(ord, p)) for p in prompts)])
        ver.n += len(prompts) * n
        idx = np.repeat(np.arange(len(prompts)), n)
        lengths = rng.integers(1, 9, size=len(idx))
        return SimpleNamespace(rewards=rng.integers(0, 2, size=len(idx)).astype(float), prompt_index=idx,
                               response_lengths=lambda: lengths)

    monkeypatch.setattr(mc, "make_backend", lambda *a, **k: SimpleNamespace())
    monkeypatch.setattr(mc, "rollout", rollout)
    monkeypatch.setattr(mc, "open_verifier", open_verifier)
    monkeypatch.setattr(mc, "rollout_progress", lambda *a, **k: contextlib.nullcontext())
    monkeypatch.setattr(mc, "format_prompt", lambda cfg, p, tok=None: p)
    return mc


@pytest.mark.e2e  # sharded rollouts and their merge
def test_sharded_reference_cache_merges_to_the_one_job_table(tmp_path, monkeypatch):
    mc = _fake_rollouts(monkeypatch)
    cfg = {"scale": "unit", "seed": 0, "results_dir": str(tmp_path / "results"),
           "rollout": {"backend": "cpu", "max_new_tokens": 4}, "passrate": {},
           "policies": {"s": {"source": "pretrain"}}}
    P = Paths(cfg)
    pool = pd.DataFrame({"id": [f"q{i}" for i in range(11)], "problem": [f"{i} + 1" for i in range(11)],
                         "answer": [str(i + 1) for i in range(11)]})
    write_table(pool, P.train_pool())
    files = {"policy_dir": P.policy("s"), "pool": P.train_pool()}
    one = mc.mc_values(cfg, "s", 4, tmp_path / "one.parquet", shard_size=2, **files)
    parts = [P.reference_cache_shard("s", k, 3) for k in range(3)]
    for k, part in enumerate(parts):
        sub = mc.mc_values(cfg, "s", 4, part, shard_size=2, job_shard=(k, 3), **files)
        assert 0 < len(sub) < len(pool)
    merged = mc.merge_mc_values(cfg, "s", 4, reversed(parts), P.reference_cache("s"), pool=P.train_pool())
    pd.testing.assert_frame_equal(merged, one)
    pd.testing.assert_frame_equal(read_table(P.reference_cache("s")), read_table(tmp_path / "one.parquet"))
    a, b = read_manifest(P.reference_cache("s")), read_manifest(tmp_path / "one.parquet")
    for key in ("key_hash", "verifier", "mean_phat", "frac_mixed", "rows", "rollouts_per_prompt"):
        assert a[key] == b[key], key
    with pytest.raises(ValueError, match=r"not shards 0\.\.1 of 2"):
        mc.merge_mc_values(cfg, "s", 4, parts[:2], tmp_path / "bad.parquet", pool=P.train_pool())


# --------------------------------------------------------------------------- hub models, hand-placed files

def test_hub_models_are_local_copies_fetched_once(repo, tmp_path):
    from sparserl.core.config import load_config
    from sparserl.data.hub_models import fetch_models
    cfg = load_config(repo / "configs/paper.yaml")
    P = Paths(cfg, root=tmp_path)
    assert P.policy("qwen3_4b") == tmp_path / "models" / "Qwen" / "Qwen3-4B-Instruct-2507"
    got = P.hub_models()
    assert set(got) == {p["hf_name"] for p in cfg["policies"].values()} | {
        "Qwen/Qwen3.5-4B", "Qwen/Qwen3-Embedding-0.6B"}
    assert got["Qwen/Qwen3-Embedding-0.6B"] == tmp_path / cfg["v0"]["embedder"]["path"]
    calls = []

    def download(name, path):
        calls.append(name)
        (path / "config.json").write_text("{}")
    cfg["policies"] = {"q": cfg["policies"]["qwen3_4b"]}
    cfg.pop("critique"), cfg.pop("models")
    import os
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        fetch_models(Paths(cfg).hub_models(), download=download, log=lambda *_: None)
        fetch_models(Paths(cfg).hub_models(), download=download, log=lambda *_: None)  # already there: no second download
    finally:
        os.chdir(old)
    assert calls == ["Qwen/Qwen3-4B-Instruct-2507"]
    with pytest.raises(ValueError, match="not an 'org/name' id"):
        Paths({**cfg, "policies": {"q": {"source": "hub", "hf_name": "../x"}}}).policy("q")


def test_hand_placed_files_name_their_key(repo):
    from sparserl.core.config import load_config
    from sparserl.core.hand_placed import hand_placed_files
    cfg = load_config(repo / "configs/paper.yaml")
    keys = {h.key for h in hand_placed_files(cfg)}
    assert keys == {"v0.embedder.path", "v0.head.model_path", "critique.envs.minif2f.data",
                    "critique.envs.minif2f.project_dir"}
    fetched = {str(p) for p in Paths(cfg).hub_models().values()}
    assert "v0.embedder.path" not in {h.key for h in hand_placed_files(cfg, fetched=fetched)}
    assert [h.key for h in hand_placed_files(cfg, ["v0.head"])] == ["v0.head.model_path"]
    for small in ("tiny", "small"):
        assert hand_placed_files(load_config(repo / f"configs/{small}.yaml")) == []
        assert Paths(load_config(repo / f"configs/{small}.yaml")).hub_models() == {}


# --------------------------------------------------------------------------- the paper dry run

def _dry_run(repo, tmp_path):
    # the profile names the slurm executor (snakemake-executor-plugin-slurm, in the cpu extra); a
    # dry run submits nothing, so it plans with the profile's resources on a machine without SLURM
    out = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(repo / "Snakefile"), "-d", str(tmp_path),
                          "--profile", "slurm", "-n", "all"], cwd=repo, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    jobs = []
    for b in (out.stdout + out.stderr).split("\n\n"):
        m = re.search(r"^(local)?rule (\w+):", b, re.M)
        if m:
            res = re.search(r"resources: (.*)", b)
            res = dict(kv.split("=", 1) for kv in res.group(1).split(", ")) if res else {}
            jobs.append({"rule": m.group(2), "local": bool(m.group(1)), "block": b, "res": res})
        elif "missing hand-placed file" in b:
            jobs.append({"rule": "hand_placed_file", "local": True, "block": b, "res": {}})
    return jobs


@pytest.fixture(scope="module")
def paper_jobs(repo, tmp_path_factory):
    from sparserl.engines.sizing import dry_run_jobs
    return dry_run_jobs(repo, tmp_path_factory.mktemp("dag"))


@pytest.mark.e2e  # the paper DAG's dry run
def test_paper_dag_fetches_shards_flags_and_fits_its_runtimes(repo, tmp_path):
    from sparserl.core.config import load_config
    cfg = load_config(repo / "configs/paper.yaml")
    jobs = _dry_run(repo, tmp_path)
    by = {}
    for j in jobs:
        by.setdefault(j["rule"], []).append(j)
    # every hub model in one job on the submit host; the jobs that load a policy wait on it
    (fetch,) = by["fetch_models"]
    assert "gpu=" not in fetch["block"] and "HF_HUB_OFFLINE=0" in fetch["block"]
    for d in Paths(cfg).hub_models().values():
        assert str(d) in fetch["block"]
    for rule in ("rl_cluster", "evaluate", "v0_harvest_run"):
        for j in by[rule]:
            assert re.search(r"input: .*models/", j["block"]), (rule, j["block"][:300])
    # hand-placed files: one flagged job each, naming the config key
    flagged = "\n".join(j["block"] for j in by["hand_placed_file"])
    for key in ("v0.head.model_path", "critique.envs.minif2f.data", "critique.envs.minif2f.project_dir"):
        assert f"config key {key})" in flagged
    # the reference cache: K GPU jobs, then one CPU merge
    K = cfg["basis"]["reference_shards"]
    shards = by["reference_cache_shard"]
    assert K > 1 and sorted(int(re.search(r"shard=(\d+)", j["block"]).group(1)) for j in shards) == list(range(K))
    assert all(j["res"]["gpu"] == "1" for j in shards)
    (merge,) = by["reference_cache"]
    assert "gpu" not in merge["res"] and "mc-values-merge" in merge["block"]
    # the harvest's avg@k (helper H3: v0_harvest_values_shard, v0.harvest.shards per policy)
    h = cfg["v0"]["harvest"]
    assert len(by.get("v0_harvest_values_shard", [])) == len(h["policies"]) * h.get("shards", 1) > len(h["policies"])
    # no V0 job asks for a GPU it does not use: V0 uses the GPU only through v0.device (auto/cuda),
    # and the CPU-only V0 steps (routing, merges) ask for none
    from sparserl.engines.sizing import V0_RESOURCES
    assert cfg["v0"].get("device", "auto") in ("auto", "cuda")
    for rule in V0_RESOURCES:
        for j in by.get(rule, []):
            asked = int(j["res"].get("gpu", 0))
            if rule in ("v0_routing", "v0_harvest_merge"):
                assert asked == 0, (rule, j["res"])
    for rule in ("v0_harvest",):
        assert all("gpu" not in j["res"] for j in by[rule])
    # each GPU job's estimate x 1.5 fits its runtime at the default GPU type (sparserl.engines.sizing)
    from sparserl.engines import sizing
    checked = set()
    for j in jobs:
        if int(j["res"].get("gpu", 0)):
            wc = re.search(r"wildcards: (.*)", j["block"])
            e = sizing.estimate(Paths(cfg), j["rule"], dict(kv.split("=", 1) for kv in wc.group(1).split(", ")) if wc else {})
            assert int(j["res"]["gpu"]) >= e.gpus, (j["rule"], j["res"], e.work)
            assert int(j["res"]["runtime"]) >= e.seconds * sizing.MARGIN / 60, \
                f"{j['rule']} {e.job}: {e.work}; x {sizing.MARGIN} > runtime {j['res']['runtime']} min"
            checked.add(j["rule"])
    assert set(sizing.ESTIMATORS) - {"v0_harvest_values"} == checked  # v0_harvest_values: one shard only


# --------------------------------------------------------------------------- sizing: derived numbers

def test_qwen3_4b_decode_is_memory_bound_near_5k_tokens_a_second_on_an_h100():
    from sparserl.engines import sizing as S
    q = S.model_shape("Qwen/Qwen3-4B-Instruct-2507")
    assert q.kv_bytes_per_token == 36 * 8 * 128 * 2 * 2 == 144 * 1024
    assert 4.0e9 < q.params < 4.05e9  # the model card's 4.0B
    assert 7.5e9 < S.model_shape("Qwen/Qwen2.5-7B-Instruct").params < 7.7e9  # 7.61B
    rates = {g: S.decode_tokens_per_s(q, S.GPUS[g], 3000) for g in S.GPUS}
    assert 4000 < rates["H100"] < 6000 and 6500 < rates["H200"] < 9000 and rates["A100"] < rates["H100"]
    # an RL step waits for its longest response: at least cap decode steps, each a weight read
    L = S.response_lengths("Qwen/Qwen3-4B-Instruct-2507", 8192)
    one = S.generation_s(q, S.GPUS["H100"], 8, L, engines=8, mem_util=0.6)
    assert one > 8192 * q.weight_bytes / S.GPUS["H100"].hbm_bytes_per_s
    assert S.generation_s(q, S.GPUS["H100"], 8, L, engines=8, mem_util=0.6, rounds=7) > 6.5 * one
    # a local config.json is read instead of the table
    import json
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        (__import__("pathlib").Path(d) / "config.json").write_text(json.dumps(
            {**S.HF_CONFIGS["Qwen/Qwen3-4B-Instruct-2507"], "num_key_value_heads": 4}))
        assert S.model_shape("Qwen/Qwen3-4B-Instruct-2507", d).kv_bytes_per_token == 72 * 1024
    from sparserl.core.config import ConfigError
    with pytest.raises(ConfigError, match="no shape for model 'org/unknown'; add its config.json"):
        S.model_shape("org/unknown")


def test_osla_runs_pay_their_sequential_rounds(repo):
    from sparserl.core.config import load_config
    from sparserl.engines import sizing as S
    from sparserl.methods.spec import load_method
    cfg = load_config(repo / "configs/paper.yaml")
    assert S.osla_rounds(load_method("v05_osla")) == 7
    g = S.estimate(Paths(cfg), "rl_cluster", {"method": "grpo_g16", "seed": "0"})
    o = S.estimate(Paths(cfg), "rl_cluster", {"method": "v05_osla", "seed": "0"})
    assert o.seconds > 2.5 * g.seconds and "2048 rollouts, 7 x 8192" in o.work
    assert o.ask_minutes == math.ceil(o.seconds * 1.5 / 60)


def test_a_gpu_rule_without_an_estimate_fails(repo):
    from sparserl.core.config import load_config
    from sparserl.engines import sizing as S
    cfg = load_config(repo / "configs/paper.yaml")
    job = {"rule": "new_gpu_rule", "wildcards": {}, "resources": {"gpu": "1", "runtime": "60"}}
    with pytest.raises(KeyError, match="GPU rule 'new_gpu_rule' has no estimate; add one to ESTIMATORS"):
        S.gpu_job_estimates(Paths(cfg), [job])
    assert S.gpu_job_estimates(Paths(cfg), [{**job, "resources": {"runtime": "60"}}]) == []  # CPU jobs need none


@pytest.mark.e2e  # every paper run's sizing
def test_long_runs_checkpoint_and_storage_is_computed(repo):
    from sparserl.core.config import load_config
    from sparserl.engines import sizing as S
    from sparserl.engines.openrlhf.critique import critique_flags
    from sparserl.methods.run import resolve_critique_run
    cfg = load_config(repo / "configs/paper.yaml")
    for exp, method in (("sudoku_k4", "lc_vf"), ("codeio_k4", "lc_mean"), ("rg_k8", "lc_tether")):
        e = S.estimate(Paths(cfg), "critique_train", {"exp": exp, "method": method, "seed": "0"})
        every = S.critique_save_steps(cfg, exp, method, Paths(cfg).critique.policy(exp))
        assert e.extra["saves"] >= 1 and every * e.extra["step_s"] <= S.RESUME_EVERY_S, (exp, method, e.work)
        f = critique_flags(cfg, resolve_critique_run(cfg, exp, method, 0))
        assert f["ckpt.save_steps"] == every and f["ckpt.save_hf"] is False
    # lc_math_*: the evaluated steps (110, 210, 310 after the critic's 10 warm-up steps) and a
    # resume point every few hours of work, not every 10 steps (the gcd with the warm-up: 41 saves)
    from sparserl.methods.spec import load_method
    lc = S.estimate(Paths(cfg), "rl_cluster", {"method": "lc_math_vf_g8", "seed": "0"})
    grpo = S.estimate(Paths(cfg), "rl_cluster", {"method": "grpo_g8", "seed": "0"})
    every = S.rl_resume_save_steps(cfg, load_method("lc_math_vf_g8"), Paths(cfg).policy(cfg["rl"]["policy"]))
    assert lc.extra["save_steps"] == every and every * lc.extra["step_s"] <= S.RESUME_EVERY_S and every > 10
    assert lc.extra["saves"] == len(set(range(every, 411, every)) | {110, 210, 310}) < 41
    assert lc.extra["hf_copies"] == 3 and grpo.extra["hf_copies"] == 3
    # every run resumes at most a few hours of work back, not only at its evaluated steps (100 apart)
    for method in ("grpo_g8", "v05_osla_v0"):
        e = S.estimate(Paths(cfg), "rl_cluster", {"method": method, "seed": "0"})
        assert e.extra["save_steps"] < 100 and e.extra["save_steps"] * e.extra["step_s"] <= S.RESUME_EVERY_S, method
    shape = S.model_shape("Qwen/Qwen3-4B-Instruct-2507")
    # HF copies (3 evaluated + final/) and two kept DeepSpeed states each of actor and critic
    assert lc.storage_bytes == pytest.approx(4 * shape.weight_bytes + 2 * 2 * S.ADAM_BYTES_PER_PARAM * shape.params)
    assert lc.storage_bytes < 0.3e12 and grpo.storage_bytes < 0.2e12


@pytest.mark.e2e  # the paper DAG's dry run
def test_cluster_doc_tables_are_the_codes(repo, paper_jobs):
    from sparserl.core.config import load_config
    from sparserl.engines import sizing as S
    cfg = load_config(repo / "configs/paper.yaml")
    doc = (repo / "docs/cluster.md").read_text()
    table = S.sizing_table(Paths(cfg), paper_jobs)
    assert table in doc, "docs/cluster.md: paste `python -m sparserl sizing-table --config configs/paper.yaml`:\n" + table
    assert S.storage_table(Paths(cfg), paper_jobs) in doc


# --------------------------------------------------------------------------- settings that must agree

@pytest.mark.parametrize("change, message", [
    ({"resources": {"rl": {"nodes": 2, "gpus": 16}}}, r"resources.rl.nodes = 2 but rl.openrlhf.nodes = 1: .*set both"),
    ({"resources": {"rl": {"gpus": 4}}}, r"resources.rl.gpus = 4 .* but rl.openrlhf nodes x gpus_per_node = 1 x 8"),
    ({"rl": {"openrlhf": {"vllm.num_engines": 4}}}, r"vllm.num_engines x vllm.tensor_parallel_size = 4 x 1 but .* 8 GPUs"),
    ({"rl": {"mini_batches": 32}}, r"rl.rollouts_per_step / mini_batches = 512 / 32 is not a multiple of "
                                   r"train.micro_batch_size x GPUs = 4 x 8"),
    ({"critique": {"experiments": {"sudoku_k4": {"rl": {"rollouts_per_step": 48}}}}},
     r"critique.experiments.sudoku_k4.rl.rollouts_per_step / mini_batches = 48 / 1"),
])
def test_cluster_settings_that_must_agree_are_checked_at_load(repo, tmp_path, change, message):
    import yaml
    from sparserl.core.config import ConfigError, load_config
    over = tmp_path / "over.yaml"
    over.write_text(yaml.safe_dump(change))
    with pytest.raises(ConfigError, match=message) as e:
        load_config([repo / "configs/paper.yaml", over])
    # one line, starting with the file that sets the key
    assert "\n" not in str(e.value) and str(e.value).split(": ")[0] in (str(over), str(repo / "configs/paper.yaml"))
    both = {"resources": {"rl": {"nodes": 2, "gpus": 16}}, "rl": {"openrlhf": {"nodes": 2}},
            "critique": {"rl": {"openrlhf": {"nodes": 2}}}}
    over.write_text(yaml.safe_dump(both))
    load_config([repo / "configs/paper.yaml", over])  # agreeing settings load


# --------------------------------------------------------------------------- real submission lines

@pytest.mark.e2e  # the SLURM plugin on the paper DAG
def test_slurm_plugin_builds_each_gpu_jobs_sbatch_and_srun_lines(repo, tmp_path):
    """sbatch and the jobstep srun of every GPU job, from snakemake-executor-plugin-slurm's own
    functions (tests/helpers/slurm_submit.py): account, partition, GPUs, CPUs (one task, not one per GPU)
    and time as configs/paper.yaml and the sizing ask them."""
    import yaml
    from sparserl.core.config import load_config
    cfg = load_config(repo / "configs/paper.yaml")
    groups = {g for g, v in cfg["resources"].items() if v.get("gpus")}
    acct = tmp_path / "account.yaml"
    acct.write_text(yaml.safe_dump({"resources": {g: {"slurm_account": "proj_x"} for g in groups}}))
    out = tmp_path / "lines.jsonl"
    run = subprocess.run([sys.executable, str(repo / "tests/helpers/slurm_submit.py"), str(out), "-s", str(repo / "Snakefile"),
                          "-d", str(tmp_path / "wd"), "--profile", "slurm", "-n", "all", "--configfile",
                          str(repo / "configs/paper.yaml"), str(acct)], cwd=repo, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    from sparserl.engines import sizing as S
    assert {r["rule"] for r in rows} == set(S.ESTIMATORS) - {"v0_harvest_values"}
    group = {"rl_cluster": "rl", "critique_train": "rl", "v0_harvest_run": "rl", "rl_eval": "rl_eval",
             "ood_lm_eval": "ood", "ood_evalplus": "ood", "v0_embeddings": "v0_embed",
             "v0_pool_embeddings": "v0_embed", "v0_table": "v0_train", "v0_ablations": "v0_ablations"}
    for r in rows:
        res = cfg["resources"][group.get(r["rule"], "rollout")]
        sb, sr = r["sbatch"].split(), r["srun"].split()
        assert sb[0] == "sbatch" and sb[sb.index("-A") + 1] == "proj_x" and sb[sb.index("-p") + 1] == "gpu"
        for flag in (f"--gpus={res['gpus']}", f"--cpus-per-task={res['cpus']}", f"--mem", str(res["mem_mb"]),
                     f"--nodes={res.get('nodes', 1)}"):
            assert flag in sb + sr, (r["rule"], flag, r["sbatch"])
        assert not any(x.startswith("--ntasks-per-gpu") for x in sb), r["sbatch"]  # one task of all the CPUs
        minutes = int(sb[sb.index("-t") + 1])
        e = S.estimate(Paths(cfg), r["rule"], r["wildcards"])
        assert minutes >= e.ask_minutes, (r["rule"], minutes, e.work)
        if r["rule"] in ("rl_cluster", "critique_train", "v0_harvest_run", "evaluate"):  # sized: the ask in whole hours
            assert minutes == -(-e.ask_minutes // 60) * 60
        else:
            assert minutes == res["runtime"]
        assert sr[:3] == ["srun", "-n1", "--cpu-bind=q"] and f"--gpus={res['gpus']}" in sr \
            and f"--cpus-per-task={res['cpus']}" in sr


@pytest.mark.e2e  # the SLURM plugin on the small DAG
def test_slurm_plugin_runs_the_small_stage_as_cpu_jobs_one_per_run(repo, tmp_path):
    """`snakemake --profile slurm all --configfile configs/small.yaml configs/overlays/small_v0.yaml`
    on a CPU cluster: the plugin's sbatch and srun lines for every job of the small stage ask no
    GPU, each RL run (method x seed) is one job, and every job asks its rule's threads as CPUs and
    the profile's default memory and time (small sets no `resources`: its longest job measured
    13 minutes on one core, docs/cluster.md)."""
    import yaml
    from sparserl.core.config import load_config
    from sparserl.methods.spec import run_owners
    files = [repo / "configs/small.yaml", repo / "configs/overlays/small_v0.yaml"]
    cfg = load_config(files)
    assert not cfg.get("resources")
    out = tmp_path / "lines.jsonl"
    run = subprocess.run([sys.executable, str(repo / "tests/helpers/slurm_submit.py"), "--all-jobs", str(out), "-s",
                          str(repo / "Snakefile"), "-d", str(tmp_path / "wd"), "--profile", "slurm", "-n", "all",
                          "--configfile", *map(str, files)], cwd=repo, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    profile = yaml.safe_load((repo / "workflow/profiles/slurm/config.yaml").read_text())["default-resources"]
    owners = run_owners(cfg["rl"]["methods"], cfg["rl"]["rollouts_per_step"])
    runs = {(m, str(s)) for m in cfg["rl"]["methods"] if owners[m] == m for s in cfg["rl"]["seeds"]}
    assert sorted((r["wildcards"]["method"], r["wildcards"]["seed"]) for r in rows if r["rule"] == "rl_train") \
        == sorted(runs)
    assert {"lr_tune_run", "critique_train", "pretrain_policy", "v0_harvest_run", "claims"} <= {r["rule"] for r in rows}
    for r in rows:
        sb, sr = r["sbatch"].split(), r["srun"].split()
        assert not any("gpu" in x or "gres" in x for x in sb + sr), r
        assert sb[sb.index("-t") + 1] == str(profile["runtime"]) and sb[sb.index("--mem") + 1] == str(profile["mem_mb"])
        assert "--ntasks=1" in sb and sr[:3] == ["srun", "-n1", "--cpu-bind=q"], r
        cpus = [x for x in sb if x.startswith("--cpus-per-task=")]
        assert cpus == [x for x in sr if x.startswith("--cpus-per-task=")] and len(cpus) == 1, r
    assert all("--cpus-per-task=1" in r["sbatch"] for r in rows if r["rule"] in ("rl_train", "lr_tune_run")), \
        "an RL run's threads: 1, as the published tables were made"
