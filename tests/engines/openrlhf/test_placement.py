"""Where Ray places a paper run's actors, the V0 prior actor among them (engines.openrlhf.placement).

The plan comes from the launcher's own path (config -> flags -> OpenRLHF's parser -> `plan_from_args`)
for the paper's shapes, 8 GPUs on 1 node and 8 x 2 nodes. One test runs Ray on this CPU with 1 and
2 nodes of 8 logical GPUs: the colocated group as OpenRLHF makes it, V0's bundle filled as the plan
says, and the real V0PriorServer actor placed in it (and a share that does not fit left pending
until the timeout).
"""
from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from sparserl.core.config import ConfigError, load_config, v0_actor_settings
from sparserl.engines.openrlhf import placement, v0_server

from helpers.v0_toys import toy_v0
from helpers.openrlhf_stubs import openrlhf_run

REPO = Path(__file__).resolve().parents[3]


def _paper_cfg(tmp_path, nodes: int, **over):
    return {
        "scale": "paper", "seed": 0, "results_dir": str(tmp_path / "results"),
        "tasks": {"source": "hub", "chat_template": True, "prompt_template": "{problem}"},
        "policies": {"qwen3_4b": {"source": "hub", "hf_name": "Qwen/Qwen3-4B-Instruct-2507"}},
        "rollout": {"backend": "vllm", "max_new_tokens": 8192, "vllm": {"max_model_len": 10240}},
        "rl": {"policy": "qwen3_4b", "methods": ["v05_osla_v0"], "seeds": [0], "steps": 100,
               "rollouts_per_step": 512, "lr": 1e-6, "openrlhf": {"nodes": nodes, **over}},
    }


def _launcher_plan(tmp_path, nodes: int, method: str = "v05_osla_v0", **over):
    """The plan `launcher.launch` logs and the V0 actor uses: from the run's parsed argv."""
    pytest.importorskip("openrlhf")
    from sparserl.engines.openrlhf.launcher import openrlhf_argv
    from sparserl.engines.openrlhf.parser import parse_args
    from sparserl.methods.run import resolve_run
    from sparserl.methods.spec import load_method
    cfg = _paper_cfg(tmp_path, nodes, **over)
    reads = resolve_run(cfg, method, 0).reads
    argv = openrlhf_argv(cfg, load_method(method), 0, openrlhf_run(tmp_path / "run" / "final"), policy_path="/models/q",
                         v0_model=reads.v0_model, v0_pool=reads.pool, v0_embeddings=reads.v0_embeddings,
                         config_paths=[str(tmp_path / "c.json")])
    return placement.plan_from_args(parse_args(argv))


def _check_fits(plan, n_gpus: int):
    assert plan.bundles == [{"GPU": 1, "CPU": 1}] * n_gpus
    for b in range(n_gpus):
        assert plan.used(b) <= 1 and plan.used(b, "cpus") <= 1, plan.lines()
    assert plan.outside() == [], plan.lines()  # nothing asks for a GPU outside the group


@pytest.mark.parametrize("nodes", [1, 2])
def test_paper_plan_puts_v0_in_the_last_bundle_of_the_colocated_group(tmp_path, nodes):
    plan = _launcher_plan(tmp_path, nodes)
    n = 8 * nodes
    _check_fits(plan, n)
    by_role = {s.role: s for s in plan.shares}
    for r in range(n):  # OpenRLHF's hybrid engine: engine i and policy rank i share GPU i
        assert by_role[f"vllm engine {r}"].bundle == r and by_role[f"policy rank {r}"].bundle == r
        assert plan.node_of(r) == r // 8
    assert plan.v0 == placement.Share("v0 prior", n - 1, 0.1, 0.1)  # the schema's default share
    assert plan.node_of(plan.v0.bundle) == nodes - 1
    assert plan.used(n - 1) == pytest.approx(0.5) and plan.used(0) == pytest.approx(0.4)
    assert by_role["ppo trainer (controller)"].bundle is None and by_role["ppo trainer (controller)"].gpus == 0
    assert len(plan.lines()) == 1 + n + 1 and f"v0 prior 0.1; GPU 0.5" in plan.lines()[n]


def test_a_full_bundle_leaves_v0_its_share():
    """KL (reference) and a critic beside vLLM and the policy: 0.8 of each GPU, V0's 0.1 still fits."""
    plan = placement.colocated_plan(nodes=2, gpus_per_node=8, vllm_engines=16, ref=True, critic=True, v0_gpus=0.1)
    _check_fits(plan, 16)
    assert plan.used(0) == pytest.approx(0.8) and plan.used(15) == pytest.approx(0.9)
    tp2 = placement.colocated_plan(nodes=1, gpus_per_node=8, vllm_engines=4, tensor_parallel_size=2, v0_gpus=0.1)
    assert [s.bundle for s in tp2.shares if s.role == "vllm engine 1"] == [2, 3]
    _check_fits(tp2, 8)


def test_v0_share_that_does_not_fit_or_lies_outside_the_group_is_refused():
    with pytest.raises(ConfigError, match=r"v0_gpus = 0.3 does not fit bundle 7 .* at most 0.2$"):
        placement.colocated_plan(nodes=1, gpus_per_node=8, vllm_engines=8, ref=True, critic=True, v0_gpus=0.3)
    with pytest.raises(ConfigError, match="train.colocate_all is off"):
        placement.colocated_plan(nodes=1, gpus_per_node=8, vllm_engines=8, colocate_all=False, v0_gpus=0.1)
    cpu_only = placement.colocated_plan(nodes=1, gpus_per_node=8, vllm_engines=8, colocate_all=False, v0_gpus=0)
    assert cpu_only.v0.bundle is None and cpu_only.v0.gpus == 0 and cpu_only.outside() == []


def _layer(tmp_path, openrlhf: dict) -> list[str]:
    import yaml
    extra = tmp_path / "cluster.yaml"
    extra.write_text(yaml.safe_dump({"rl": {"openrlhf": openrlhf}}))
    return [str(REPO / "configs" / "openrlhf_cpu.yaml"), str(REPO / "configs" / "overlays" / "openrlhf_cpu_v0.yaml"),
            str(extra)]


@pytest.mark.parametrize("openrlhf, why", [
    ({"train.colocate_all": False, "v0_gpus": 0.5}, "train.colocate_all is off"),
    ({"v0_gpus": 0.7}, "does not fit bundle 0"),
])
def test_config_asking_for_a_gpu_outside_the_group_is_refused_at_load(tmp_path, openrlhf, why):
    with pytest.raises(ConfigError) as e:
        load_config(_layer(tmp_path, openrlhf))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(str(tmp_path / "cluster.yaml")) and why in msg
    assert "rl.openrlhf.v0_gpus" in msg and "(method v05_osla_v0)" in msg and " set " in msg


def test_v0_settings_come_from_the_schema_and_reach_the_actor_flags(tmp_path):
    cfg = load_config(_layer(tmp_path, {"v0_threads": 6}))
    assert v0_actor_settings(cfg["rl"]["openrlhf"]) == {"v0_gpus": 0.1, "v0_threads": 6, "v0_timeout_s": 600,
                                                        "v0_start_timeout_s": 3600}
    plan = _launcher_plan(tmp_path, 1, v0_threads=6, v0_timeout_s=30)
    assert plan.v0.gpus == 0.1


def test_v0_actor_options_follow_its_share(monkeypatch):
    """No Ray cluster: `ray.remote(...).options(**kw)` recorded."""
    import ray
    rec = {}

    class _Actor:
        def options(self, **kw):
            rec.update(kw)
            return SimpleNamespace(remote=lambda *a: rec.setdefault("args", a) and "handle")
    monkeypatch.setattr(ray, "remote", lambda cls: _Actor())
    monkeypatch.setattr(placement, "colocated_group", lambda: "the-group")
    share = placement.Share("v0 prior", 7, 0.1, 0.1)
    assert v0_server.v0_server("/m/v0.pt", ["/c.json"], share=share, threads=12, embeddings="/e.pt",
                               pool="/pool.parquet") == "handle"
    assert rec["num_gpus"] == 0.1 and rec["num_cpus"] == 0.1 and rec["name"] == v0_server.ACTOR_NAME
    st = rec["scheduling_strategy"]
    assert st.placement_group == "the-group" and st.placement_group_bundle_index == 7
    assert rec["runtime_env"]["env_vars"]["OMP_NUM_THREADS"] == "12"
    assert rec["args"] == ("/m/v0.pt", ["/c.json"], "/e.pt", 12, "/pool.parquet")  # the run's files


@pytest.mark.e2e  # a real Ray cluster
@pytest.mark.two_cores
@pytest.mark.parametrize("nodes", [1, 2])
def test_v0_actor_schedules_in_the_colocated_group_of_a_cpu_ray(tmp_path, monkeypatch, nodes):
    """Ray on this CPU, `nodes` nodes of 8 logical GPUs (ray.cluster_utils): OpenRLHF's group (named
    as the patched train_ppo_ray names it) packed node by node as the plan says, V0's bundle holding
    what the plan puts there, and the V0 actor placed in it with its threads, on the last node;
    then a share that does not fit stays pending and the client stops on the timeout."""
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy as PGS
    if ray.is_initialized():
        pytest.skip("Ray already running in this process")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]))
    model, emb = toy_v0(tmp_path)
    plan = placement.colocated_plan(nodes=nodes, gpus_per_node=8, vllm_engines=8 * nodes, v0_gpus=0.1)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 8, "num_gpus": 8, "include_dashboard": False})
    for _ in range(nodes - 1):
        cluster.add_node(num_cpus=8, num_gpus=8)
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        cluster.wait_for_nodes()
        pg = placement.named_placement_group(plan.bundles, strategy="PACK")
        ray.get(pg.ready(), timeout=30)
        assert placement.colocated_group().id == pg.id
        on = ray.util.placement_group_table(pg)["bundles_to_node_id"]
        first_seen = list(dict.fromkeys(on[b] for b in range(len(plan.bundles))))
        assert [first_seen.index(on[b]) for b in range(len(plan.bundles))] == \
            [plan.node_of(b) for b in range(len(plan.bundles))]

        @ray.remote
        class Resident:  # stands in for the vLLM engine and policy rank of V0's bundle
            def ok(self):
                return True
        last = plan.v0.bundle
        residents = [Resident.options(num_gpus=s.gpus, num_cpus=s.cpus, scheduling_strategy=PGS(
            placement_group=pg, placement_group_bundle_index=last)).remote()
            for s in plan.shares if s.bundle == last and s.role != placement.V0_ROLE]
        assert ray.get([r.ok.remote() for r in residents], timeout=30) == [True, True]

        @ray.remote(num_cpus=0)
        def start(share):  # in a Ray worker, as OpenRLHF's experience maker starts it: the group by name
            return v0_server.v0_server(model, [], share=share, threads=3, embeddings=emb)
        prior = v0_server.RemoteV0Prior(ray.get(start.remote(plan.v0), timeout=30), timeout_s=30, start_timeout_s=30)
        assert prior(["a", "c"], []).tolist() == [0.5, 0.5]
        where = ray.get(prior.handle.where.remote(), timeout=30)
        assert where["placement_group"] == pg.id.hex() and where["threads"] == 3 and where["omp_num_threads"] == "3"
        assert where["gpu_ids"] == [str(last % 8)]  # the bundle's GPU on its node
        assert first_seen.index(where["node_id"]) == plan.node_of(last) == nodes - 1

        ray.kill(prior.handle)  # a share beyond the bundle's free 0.6 never schedules
        big = placement.Share(placement.V0_ROLE, last, 0.7, 0.7)
        stuck = v0_server.RemoteV0Prior(v0_server.v0_server(model, [], share=big, threads=1, embeddings=emb),
                                        timeout_s=1, start_timeout_s=2)
        with pytest.raises(TimeoutError) as e:
            stuck(["a"], [])
        msg = str(e.value)
        assert "\n" not in msg and msg.startswith(f"V0 prior actor {v0_server.ACTOR_NAME}")
        assert "over 2 s (rl.openrlhf.v0_start_timeout_s)" in msg and "lower rl.openrlhf.v0_gpus" in msg
    finally:
        ray.shutdown()
        cluster.shutdown()


def test_openrlhf_colocated_group_gets_the_name_the_v0_actor_looks_up():
    """train_ppo_ray looks `placement_group` up as a module global (read from the installed
    source, not imported: that pulls in vLLM); `patches` puts `named_placement_group` there."""
    import importlib.util
    from sparserl.engines.openrlhf import patches
    spec = importlib.util.find_spec("openrlhf.cli.train_ppo_ray")
    if spec is None:
        pytest.skip("openrlhf is not installed")
    src = Path(spec.origin).read_text()
    assert "from ray.util.placement_group import placement_group" in src
    assert src.count("pg = placement_group(bundles") == 2  # the colocated group first, a critic's second
    assert src.index("if args.train.colocate_actor_ref or args.train.colocate_all") < src.index("pg = placement_group(bundles")
    target = patches.PATCHES["openrlhf.cli.train_ppo_ray"]["placement_group"]
    assert patches._resolve(target) is placement.named_placement_group


@pytest.mark.e2e  # real OpenRLHF launch, ~9 s
def test_patched_train_ppo_ray_uses_the_naming_placement_group():
    """In a fresh process, as the launcher does it (import shims without CUDA, then the patches):
    OpenRLHF's train_ppo_ray calls our `named_placement_group`."""
    import subprocess
    import sys
    pytest.importorskip("openrlhf")
    code = ("from sparserl.engines.openrlhf import cpu_shims, patches, placement\n"
            "cpu_shims.install_import_shims()\npatches.install_patches()\n"
            "import openrlhf.cli.train_ppo_ray as t\n"
            "print('NAMED', t.placement_group is placement.named_placement_group)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert "NAMED True" in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]
