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


def test_sharded_reference_cache_merges_to_the_one_job_table(tmp_path, monkeypatch):
    mc = _fake_rollouts(monkeypatch)
    cfg = {"scale": "unit", "seed": 0, "results_dir": str(tmp_path / "results"),
           "rollout": {"backend": "cpu", "max_new_tokens": 4}, "passrate": {},
           "policies": {"s": {"source": "pretrain"}}}
    P = Paths(cfg)
    pool = pd.DataFrame({"id": [f"q{i}" for i in range(11)], "problem": [f"{i} + 1" for i in range(11)],
                         "answer": [str(i + 1) for i in range(11)]})
    write_table(pool, P.train_pool())
    one = mc.mc_values(cfg, "s", 4, tmp_path / "one.parquet", shard_size=2)
    parts = [P.reference_cache_shard("s", k, 3) for k in range(3)]
    for k, part in enumerate(parts):
        sub = mc.mc_values(cfg, "s", 4, part, shard_size=2, job_shard=(k, 3))
        assert 0 < len(sub) < len(pool)
    merged = mc.merge_mc_values(cfg, "s", 4, reversed(parts), P.reference_cache("s"))
    pd.testing.assert_frame_equal(merged, one)
    pd.testing.assert_frame_equal(read_table(P.reference_cache("s")), read_table(tmp_path / "one.parquet"))
    a, b = read_manifest(P.reference_cache("s")), read_manifest(tmp_path / "one.parquet")
    for key in ("key_hash", "verifier", "mean_phat", "frac_mixed", "rows", "rollouts_per_prompt"):
        assert a[key] == b[key], key
    with pytest.raises(ValueError, match=r"not shards 0\.\.1 of 2"):
        mc.merge_mc_values(cfg, "s", 4, parts[:2], tmp_path / "bad.parquet")


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
        fetch_models(cfg, download=download, log=lambda *_: None)
        fetch_models(cfg, download=download, log=lambda *_: None)  # already there: no second download
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


# Throughputs behind the estimates: V0's constants (sparserl.engines.sizing), one set for every
# rule. Training (rl_cluster): fwd + bwd of a 4B model with gradient checkpointing is ~32 GFLOP a
# token; at ~100 TFLOP/s effective on one H100, ~3,000 tokens/s per GPU, plus the reference forward.
TRAIN_TOKENS_PER_S = 3_000
PROMPT_TOKENS = 300  # a DAPO prompt with the chat template


def _estimates(cfg) -> dict:
    """rule -> (gpus, runtime minutes with the margin, the arithmetic)."""
    from sparserl.engines import sizing as v0
    out = {}
    b = cfg["basis"]
    K = b.get("reference_shards", 1)
    per = math.ceil(v0.DAPO_PROMPTS * b["reference_n"] / K)
    s = per * v0.MEAN_RESPONSE_TOKENS / v0.GEN_TOKENS_PER_S
    out["reference_cache_shard" if K > 1 else "reference_cache"] = (
        1, s * v0.MARGIN / 60, f"{v0.DAPO_PROMPTS} prompts x {b['reference_n']} / {K} shards = {per} rollouts x "
                               f"{v0.MEAN_RESPONSE_TOKENS} tokens / {v0.GEN_TOKENS_PER_S} tokens/s = {s / 3600:.1f} h")
    rl, gpus = cfg["rl"], cfg["resources"]["rl"]["gpus"]
    rollouts = rl["steps"] * rl["rollouts_per_step"]
    gen = rollouts * v0.MEAN_RESPONSE_TOKENS / (gpus * v0.GEN_TOKENS_PER_S)
    train = 2 * rollouts * (v0.MEAN_RESPONSE_TOKENS + PROMPT_TOKENS) / (gpus * TRAIN_TOKENS_PER_S)
    out["rl_cluster"] = (gpus, (gen + train) * v0.MARGIN / 60,
                         f"{rollouts} rollouts: generation {gen / 3600:.1f} h + training and reference "
                         f"forward {train / 3600:.1f} h on {gpus} GPUs")
    bench = sum(v0.BENCHMARK_SIZES.get(x, 500) for x in cfg["tasks"]["benchmarks"])
    k = cfg["evaluation"]["default"]["k"]
    ev = bench * k * v0.MEAN_RESPONSE_TOKENS / v0.GEN_TOKENS_PER_S
    out["evaluate"] = (1, ev * v0.MARGIN / 60, f"{bench} problems x k {k} x {v0.MEAN_RESPONSE_TOKENS} tokens / "
                                              f"{v0.GEN_TOKENS_PER_S} tokens/s = {ev / 3600:.1f} h")
    ckpts = len(rl["eval_fractions"]) + 1
    out["rl_eval"] = (1, ckpts * ev * v0.MARGIN / 60, f"{ckpts} checkpoints x {ev / 3600:.1f} h")
    for rule, e in v0.v0_rule_estimates(cfg).items():  # helper H3's V0 estimates (margin included)
        out[rule] = (e["gpus"], e["runtime"], e["work"])
    return out


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
    # each rule's estimated work (margin included) fits the runtime and GPUs it asks for
    checked = []
    for rule, (gpus, minutes, work) in _estimates(cfg).items():
        for j in by.get(rule, []):
            assert int(j["res"].get("gpu", 0)) >= gpus, (rule, j["res"], work)
            assert int(j["res"]["runtime"]) >= minutes, f"{rule}: {work} x margin = {minutes:.0f} min > " \
                                                        f"runtime {j['res']['runtime']}"
            checked.append(rule)
    assert {"reference_cache_shard", "rl_cluster", "v0_harvest_values_shard", "v0_embeddings", "evaluate",
            "rl_eval"} <= set(checked)
