"""V0 at paper scale: chat-template prompts, the device setting, the sharded harvest, and the
resources of the V0 rules against the work they do (sparserl.engines.sizing)."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")

from sparserl.core.artifacts import read_manifest, read_table, write_table
from sparserl.core.config import ConfigError, load_config
from sparserl.core.paths import Paths

REPO = Path(__file__).resolve().parents[2]
CHAT = {"chat_template": True, "prompt_template": "{problem}\n\n{instruction}"}


class RecordingEmbedder:
    """Stands in for the 0.6B embedder: one token per text, its features a hash of the text."""
    name, dim = "recording", 4

    def __init__(self):
        self.texts = []

    def encode(self, texts):
        self.texts += list(texts)
        h = torch.tensor([[float(hash(t) % 97), len(t), 1.0, 0.0] for t in texts])[:, None, :]
        return h, torch.ones(len(texts), 1, dtype=torch.bool)


def _cfg(tmp_path, **over):
    return load_config(REPO / "configs/tiny.yaml", overrides={"results_dir": str(tmp_path / "results"), **over})


# 1. chat-template prompts ---------------------------------------------------------------------

@pytest.mark.e2e  # V0's tables end to end
def test_v0_tables_and_prior_embed_the_user_message_under_a_chat_template(tmp_path, monkeypatch, tiny_lm):
    from sparserl.tasks import format_prompt
    from sparserl.values.v0 import experiments
    from sparserl.values.v0.prior import pool_embeddings
    from sparserl.tasks.prompts import PAPER_INSTRUCTION
    cfg = _cfg(tmp_path, tasks=CHAT)
    P = Paths(cfg)
    emb = RecordingEmbedder()
    monkeypatch.setattr(experiments, "make_embedder", lambda s, policy_dir=None: emb)
    write_table(pd.DataFrame({"id": ["p0", "p1"], "problem": ["1 + 2", "3 + 4"], "answer": ["3", "7"]}),
                P.train_pool())
    write_table(pd.DataFrame({"query_id": ["p0", "h0"], "problem": ["1 + 2", "5 + 5"], "model": "s",
                              "step": 0, "value": 0.5}), P.harvest_table())
    pool = pool_embeddings(cfg, None, tmp_path / "pool.pt", P.train_pool())        # v05_osla_v0's prior
    harvest = experiments.harvest_embeddings(cfg, P.harvest_table(), tmp_path / "harvest.pt")  # Tables 1, 2, 6, routing
    want = {q: f"{p}\n\n{PAPER_INSTRUCTION}" for q, p in [("p0", "1 + 2"), ("p1", "3 + 4"), ("h0", "5 + 5")]}
    assert sorted(emb.texts) == sorted([want["p0"], want["p1"], want["p0"], want["h0"]])
    assert pool.ids == ["p0", "p1"] and harvest.ids == ["h0", "p0"]
    # the same query has one embedding in the harvest and in the prior's pool
    assert torch.equal(pool.get(["p0"])[0], harvest.get(["p0"])[0])
    # and it is the user message the policy's own chat template wraps
    model, tok = tiny_lm
    tok.chat_template = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}<|assistant|>"
    wrapped = format_prompt(cfg, "1 + 2", tok)
    assert wrapped == f"<|user|>{want['p0']}<|assistant|>"
    assert experiments.query_text(cfg, "1 + 2") in wrapped


def test_without_a_chat_template_v0_reads_the_policy_prompt_as_before(tmp_path):
    from sparserl.tasks import format_prompt
    from sparserl.values.v0.experiments import harvest_texts
    cfg = _cfg(tmp_path)
    df = pd.DataFrame({"query_id": ["a"], "problem": ["2 * 3"]})
    assert harvest_texts(cfg, df) == {"a": format_prompt(cfg, "2 * 3")}


# 2. device --------------------------------------------------------------------------------------

def test_v0_device_setting_and_its_errors(tmp_path, monkeypatch):
    from sparserl.values.v0.settings import v0_device, v0_settings
    assert v0_settings()["device"] == "auto"
    assert v0_device({"device": "cpu"}) == torch.device("cpu")
    assert v0_device({"device": "auto"}) == torch.device("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ConfigError, match="v0.device is 'gpu'"):
        v0_device({"device": "gpu"})
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert v0_device({"device": "auto"}) == torch.device("cpu")
    with pytest.raises(ConfigError, match="v0.device is 'cuda:1' but torch sees no CUDA"):
        v0_device({"device": "cuda:1"})
    with pytest.raises(ConfigError, match="v0.device"):
        _cfg(tmp_path, v0={"device": "tpu"})
    assert _cfg(tmp_path, v0={"device": "cuda:0"})["v0"]["device"] == "cuda:0"  # valid; checked where it runs


def test_embedder_and_v0_run_where_v0_device_says(tmp_path, monkeypatch):
    from sparserl.values.v0 import embedder as E
    from sparserl.values.v0.embedder import EmbeddingTable
    from sparserl.values.v0.model import V0, load_v0, save_v0
    from sparserl.values.v0.prior import V0Prior
    from sparserl.values.v0.settings import make_embedder, v0_settings
    from sparserl.values.v0.train import fit_v0, predict_v0
    made = {}

    class FakeHF:
        def __init__(self, path, **kw):
            made.update(kw)
    monkeypatch.setattr(E, "HFEmbedder", FakeHF)
    (tmp_path / "emb").mkdir()
    make_embedder({**v0_settings(None, embedder={"kind": "hf", "path": str(tmp_path / "emb")}), "device": "cpu"})
    assert made["device"] == torch.device("cpu")
    # training and prediction gather each episode's states onto the model's device
    torch.manual_seed(0)
    states = torch.randn(12, 3, 16).half()
    table = EmbeddingTable([f"q{i}" for i in range(12)], states, torch.ones(12, 3, dtype=torch.bool), "toy")
    seen = []
    get = table.get
    monkeypatch.setattr(table, "get", lambda ids, device=None: (seen.append(device), get(ids, device))[1])
    tl = pd.DataFrame({"model": "a", "step": 0, "query_id": [f"q{i}" for i in range(12)],
                       "value": [0.0, 1.0] * 6, "role": ["context"] * 8 + ["train"] * 2 + ["test"] * 2})
    s = v0_settings(None, train={"epochs": 1, "context": 8, "query_batch": 2, "batch_size": 1})
    model = V0(16, {"n_static": 4, "d_attn": 12, "d_residual": 8}, {"kind": "gp"}, "toy").to("cpu")
    fit_v0(model, table, tl, s, 0)
    predict_v0(model, table, tl, tl[tl.role == "test"], s, 0)
    assert seen and all(d == torch.device("cpu") for d in seen)
    # a saved V0 loads onto the device asked for; the prior's answers come back as numpy
    m2 = load_v0(save_v0(model, tmp_path / "v0.pt"), device="cpu")
    assert m2.device == torch.device("cpu")
    p = V0Prior(m2, table)(["q0"], [("q1", 1.0), ("q2", 0.0)])
    assert isinstance(p, np.ndarray) and p.shape == (1,)


# 4. sharded harvest ------------------------------------------------------------------------------

def _fake_harvest_inputs(cfg, policy, monkeypatch):
    """The files harvest_values reads (pool, benchmarks, rollouts) and a deterministic avg@k."""
    from sparserl.engines import harvest as H
    from sparserl.evaluation import evaluate as EV
    P = Paths(cfg)
    write_table(pd.DataFrame({"id": [f"t{i}" for i in range(6)], "problem": [f"{i} + 1" for i in range(6)],
                              "answer": [str(i + 1) for i in range(6)]}), P.train_pool())
    for b in P.benchmark_names():
        write_table(pd.DataFrame({"id": [f"{b}{i}" for i in range(4)], "problem": [f"{b} {i}" for i in range(4)],
                                  "answer": ["0"] * 4}), P.benchmark(b))
    rp = H.harvest_run_paths(cfg, policy, P.harvest_run(policy))
    rng = np.random.default_rng(0)
    write_table(pd.DataFrame({"step": np.repeat(np.arange(1, 9), 6), "prompt_id": [f"t{i}" for i in range(6)] * 8,
                              "reward": rng.integers(0, 2, 48).astype(float)}), rp.rollouts)

    def fake_eval(hcfg, path, out, label, threads=1, benchmarks=None):
        assert list(benchmarks) == P.benchmark_names()  # the files the command was given
        rows = [{"id": f"{b}{i}", "benchmark": b, "p": (hash((label, b, i)) % 11) / 10}
                for b in P.benchmark_names() for i in range(4)]
        write_table(pd.DataFrame(rows), Path(out).with_name(Path(out).stem + "_per_problem.parquet"))
    monkeypatch.setattr(EV, "evaluate_checkpoint", fake_eval)


def _harvest_files(cfg, policy):
    """The paths rules v0_harvest_values / _shard / _merge pass (workflow/rules/values.smk)."""
    P = Paths(cfg)
    run = P.harvest_run(policy)
    return dict(policy_dir=P.policy(policy), final=run / "final", rollouts=run / "rollouts.parquet",
                pool=P.train_pool(), benchmarks=[P.benchmark(b) for b in P.benchmark_names()],
                out=P.harvest(policy))


def _shard_files(cfg, policy, shard):
    from sparserl.engines.harvest import harvest_settings, harvest_shard_path
    f = _harvest_files(cfg, policy)
    n = harvest_settings(cfg)["shards"]
    return dict(policy_dir=f["policy_dir"], final=f["final"], benchmarks=f["benchmarks"],
                out=harvest_shard_path(f["out"], shard, n))


def _merge_files(cfg, policy):
    from sparserl.engines.harvest import harvest_settings, harvest_shard_path
    f = _harvest_files(cfg, policy)
    n = harvest_settings(cfg)["shards"]
    return dict(shards=[harvest_shard_path(f["out"], i, n) for i in range(n)], rollouts=f["rollouts"],
                pool=f["pool"], out=f["out"])


@pytest.mark.e2e  # a sharded harvest and its merge
def test_sharded_harvest_then_merge_is_the_unsharded_table(tmp_path, monkeypatch):
    from sparserl.engines.harvest import (harvest_merge, harvest_settings, harvest_shard_path, harvest_steps,
                                          harvest_values, harvest_values_shard)
    harvest = {"policies": ["s"], "steps": 8, "rollouts_per_step": 16, "checkpoint_samples": 32, "k": 2}
    one = _cfg(tmp_path / "one", v0={"harvest": harvest})
    _fake_harvest_inputs(one, "s", monkeypatch)
    assert harvest_settings(one)["shards"] == 1 and len(harvest_steps(one)) == 5
    harvest_values(one, "s", **_harvest_files(one, "s"))
    sharded = _cfg(tmp_path / "sharded", v0={"harvest": {**harvest, "shards": 3}})
    _fake_harvest_inputs(sharded, "s", monkeypatch)
    for i in (2, 0, 1):
        harvest_values_shard(sharded, "s", i, **_shard_files(sharded, "s", i))
    assert read_manifest(harvest_shard_path(Paths(sharded).harvest("s"), 1, 3))["checkpoints"] == [2, 8]
    harvest_merge(sharded, "s", **_merge_files(sharded, "s"))
    a, b = Paths(one).harvest("s"), Paths(sharded).harvest("s")
    assert a.read_bytes() == b.read_bytes()
    drop = lambda m: {k: v for k, v in m.items() if k not in ("created", "config_hash", "process_wall_s")}  # noqa: E731
    assert drop(read_manifest(a)) == drop(read_manifest(b))
    assert not a.with_name(a.name + ".parts").exists()
    # a stale shard (another shard count) is refused, naming the file and the rule
    write_table(read_table(harvest_shard_path(b, 0, 3)), harvest_shard_path(b, 0, 3),
                extra={"checkpoints": [0, 8]})
    with pytest.raises(ValueError, match=r"shard0of3.parquet: its manifest lists checkpoints \[0, 8\].*v0_harvest_values_shard"):
        harvest_merge(sharded, "s", **_merge_files(sharded, "s"))
    with pytest.raises(ConfigError, match="a shard is 0..2"):
        harvest_values_shard(sharded, "s", 3, **_shard_files(sharded, "s", 3))
    with pytest.raises(ConfigError, match="at most one shard per checkpoint"):
        harvest_settings(_cfg(tmp_path / "x", v0={"harvest": {**harvest, "shards": 6}}))


# 3. resources ---------------------------------------------------------------------------------

def test_paper_v0_resources_cover_the_work_and_only_gpu_rules_ask_for_a_gpu():
    from sparserl.engines.sizing import V0_RESOURCES, v0_rule_estimates
    cfg = load_config(REPO / "configs/paper.yaml")
    smk = (REPO / "workflow/rules/values.smk").read_text()
    est = v0_rule_estimates(Paths(cfg))
    assert {"v0_embeddings", "v0_pool_embeddings", "v0_table", "v0_ablations", "v0_routing",
            "v0_harvest_values_shard", "v0_harvest_merge"} <= set(est)
    for rule, e in est.items():
        group = V0_RESOURCES[rule]
        r = cfg["resources"][group]
        body = re.search(rf"rule {rule}:\n(.*?)(?=\n\s*rule |\Z)", smk, re.S).group(1)
        assert f'R("{group}")' in body, f"{rule} should take resources.{group}"
        assert r["runtime"] >= e["runtime"], (rule, r, e["work"])
        assert r["mem_mb"] >= e["mem_mb"], (rule, r, e["work"])
        assert bool(r.get("gpus")) == bool(e["gpus"]), f"{rule}: asks for {r.get('gpus')} GPUs, uses {e['gpus']}"
    # the V0 rules that run no model stay off the GPU
    for rule in ("v0_routing", "v0_harvest_merge"):
        assert not cfg["resources"][V0_RESOURCES[rule]].get("gpus")
