"""GPU smoke check of the paper path on one GPU, under 10 minutes (perf/gpu_smoke.sh runs it).

Pieces, each its own process with its own time limit, reported as passed, failed, not installed
(a package it needs is missing) or skipped (the piece it reads failed):
  cuda            torch sees a CUDA GPU
  openrlhf_grpo   configs/openrlhf_cpu.yaml's GRPO run through the rl_cluster rule (Snakemake ->
                  openrlhf-launch -> OpenRLHF's train_ppo_ray: vLLM, Ray, DeepSpeed, our experience
                  maker and loss) with the cluster's flags (configs/overlays/gpu_smoke.yaml):
                  CUDA-IPC weight sync, vLLM and DeepSpeed sleep mode, flash-attention packing
                  (where flash-attn is installed; else sdpa and no packing, reported)
  vllm_kl         that run's vllm_kl below 0.05 from step 2: vLLM samples from the trained weights
  v0_actor        the V0 prior actor placed as a paper run places it (engines.openrlhf.placement):
                  Ray on the GPU, the colocated group, vLLM's and the policy's shares held, V0 in
                  its share with its threads, answering on the GPU
  vllm_rollouts   our vLLM rollout backend on a tiny policy (log-probs finite)
  local_parts     perf/gpu_smoke_local.py: V0's embedder, adapter and heads, the HF backend and
                  the local trainer on the GPU

    bash perf/gpu_smoke.sh [--work DIR]       # on a GPU machine, from the repo root
    bash perf/gpu_smoke.sh --dry              # anywhere: each piece, what it needs, its command

Without a CUDA GPU it runs in dry mode. Exit status: 0 when no piece failed, 1 otherwise.
`--piece NAME` runs one in-process piece (the commands below use it; `--cpu` lets those run on
the CPU, to check the code without a GPU).
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUDGET_S = 570  # the shell wrapper's timeout is 600: leave time for the summary
STACK = ("vllm", "ray", "deepspeed", "openrlhf")


@dataclass
class Piece:
    name: str
    what: str
    needs: tuple
    timeout_s: int
    after: str | None = None  # a piece whose output this one reads


PIECES = [
    Piece("cuda", "torch sees a CUDA GPU", ("torch",), 60),
    Piece("openrlhf_grpo", "GRPO, 3 steps, through rl_cluster / OpenRLHF train_ppo_ray: vLLM rollouts, Ray, "
          "DeepSpeed ZeRO-3, CUDA-IPC weight sync, vLLM + DeepSpeed sleep mode, flash-attention packing",
          (*STACK, "snakemake"), 360),
    Piece("vllm_kl", "the GRPO run's vllm_kl < 0.05 from step 2 (weight sync reached vLLM)", ("pandas",), 30,
          after="openrlhf_grpo"),
    Piece("v0_actor", "the V0 prior actor in its share of OpenRLHF's colocated placement group, on the GPU",
          ("ray", "torch"), 90),
    Piece("vllm_rollouts", "our vLLM rollout backend: 4 prompts x n=2 on a tiny policy", ("vllm", "transformers"), 120),
    Piece("local_parts", "V0 embedder / adapter / GP and TabPFN heads, HF backend, local trainer (perf/gpu_smoke_local.py)",
          ("torch", "transformers"), 150),
]


def flash_attn_installed() -> bool:
    return importlib.util.find_spec("flash_attn") is not None


def grpo_configs() -> list[str]:
    files = ["configs/openrlhf_cpu.yaml", "configs/overlays/gpu_smoke.yaml"]
    if not flash_attn_installed():  # OpenRLHF's packing needs flash_attention_2
        files.append("configs/overlays/gpu_smoke_sdpa.yaml")
    return files


def grpo_metrics(work: Path) -> Path:
    sys.path.insert(0, str(REPO / "src"))
    from sparserl.core.config import load_config
    from sparserl.core.paths import Paths
    cfg = load_config([str(REPO / f) for f in grpo_configs()], overrides={"results_dir": str(work / "results")})
    return Paths(cfg).run("grpo_g4", 0).metrics


def command(p: Piece, work: Path, cpu: bool = False) -> list[str]:
    py = sys.executable
    if p.name == "openrlhf_grpo":
        return [py, "-m", "snakemake", "--cores", str(min(os.cpu_count() or 4, 8)), str(grpo_metrics(work)),
                "--configfile", *grpo_configs(), "--config", f"results_dir={work / 'results'}"]
    if p.name == "local_parts":
        return [py, "perf/gpu_smoke_local.py"]
    return [py, "perf/gpu_smoke.py", "--piece", p.name, "--work", str(work)] + (["--cpu"] if cpu else [])


def missing(p: Piece) -> list[str]:
    return [m for m in p.needs if importlib.util.find_spec(m) is None]


# --------------------------------------------------------------------------- in-process pieces


def tiny_policy(folder: Path) -> Path:
    """A random 2-layer Qwen3 with our BPE tokenizer, head_dim 32 (what configs/openrlhf_cpu.yaml's p has)."""
    import torch
    from sparserl.models.policies import build_model, save_hf
    from sparserl.models.tokenizer import train_tokenizer
    texts = [f"Q: {a} + {b} =\nA: \\boxed{{{a + b}}}" for a in range(10) for b in range(10)]
    tok = train_tokenizer(texts * 3, 120, folder / "tokenizer", 24)
    torch.manual_seed(0)
    save_hf(build_model({"hidden_size": 64, "num_layers": 2, "num_heads": 2, "num_kv_heads": 1, "ffn_size": 128},
                        tok, 64), tok, folder / "policy", {"gpu_smoke": True})
    return folder / "policy"


def piece_cuda(work: Path, cpu: bool) -> str:
    import torch
    if not torch.cuda.is_available():
        raise RuntimeError(f"torch {torch.__version__} (CUDA build {torch.version.cuda}) sees no CUDA device")
    return f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, CUDA {torch.version.cuda}"


def piece_vllm_kl(work: Path, cpu: bool) -> str:
    import pandas as pd
    df = pd.read_parquet(grpo_metrics(work))
    if "vllm_kl" not in df.columns or len(df) < 2:
        raise RuntimeError(f"metrics hold {len(df)} steps, columns {sorted(df.columns)}: need >= 2 steps with vllm_kl")
    later = df[df["step"] >= 2]
    if not len(later) or not (later["vllm_kl"].abs() < 0.05).all():
        raise RuntimeError(f"vllm_kl from step 2 not below 0.05: {df[['step', 'vllm_kl']].to_dict('list')}")
    return "vllm_kl by step: " + ", ".join(f"{int(s)}: {k:.2e}" for s, k in zip(df["step"], df["vllm_kl"]))


def piece_v0_actor(work: Path, cpu: bool) -> str:
    import ray
    import torch
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy as PGS
    from sparserl.core.config import v0_actor_settings
    from sparserl.engines.openrlhf import placement, v0_server
    from sparserl.values.v0.embedder import EmbeddingTable
    from sparserl.values.v0.model import V0, save_v0
    s = v0_actor_settings({})
    plan = placement.colocated_plan(nodes=1, gpus_per_node=1, vllm_engines=1, v0_gpus=s["v0_gpus"])
    torch.manual_seed(0)  # a V0 of the trained shape and a 3-prompt table: placement, not values
    model = save_v0(V0(16, {"n_static": 12, "d_attn": 24, "d_residual": 16}, {"kind": "gp"}, "toy"), work / "v0.pt")
    EmbeddingTable(["a", "b", "c"], torch.randn(3, 4, 16).half(), torch.ones(3, 4, dtype=torch.bool),
                   "toy").save(work / "emb.pt")
    env = {"PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    ray.init(num_gpus=1, num_cpus=max(4, os.cpu_count() or 4), include_dashboard=False,
             runtime_env={"env_vars": env})
    try:
        pg = placement.named_placement_group(plan.bundles, strategy="PACK")
        ray.get(pg.ready(), timeout=60)

        @ray.remote
        class Resident:  # holds vLLM engine 0's and policy rank 0's shares, as OpenRLHF's actors would
            def ok(self):
                return True
        res = [Resident.options(num_gpus=x.gpus, num_cpus=x.cpus, scheduling_strategy=PGS(
            placement_group=pg, placement_group_bundle_index=x.bundle)).remote()
            for x in plan.shares if x.bundle is not None and x.role != placement.V0_ROLE]
        ray.get([r.ok.remote() for r in res], timeout=60)
        prior = v0_server.RemoteV0Prior(
            v0_server.v0_server(str(model), [], share=plan.v0, threads=int(s["v0_threads"]), embeddings=str(work / "emb.pt")),
            timeout_s=60, start_timeout_s=120)
        p = prior(["a", "c"], [("a", 1.0), ("b", 0.0)])
        where = ray.get(prior.handle.where.remote(), timeout=60)
    finally:
        ray.shutdown()
    want = "cpu" if cpu else "cuda"
    if not str(where["device"]).startswith(want) or where["threads"] != int(s["v0_threads"]) \
            or where["placement_group"] != pg.id.hex():
        raise RuntimeError(f"V0 actor ran as {where}; wanted device {want}, {s['v0_threads']} threads, group {pg.id.hex()}")
    return (f"V0 on {where['device']} (GPU ids {where['gpu_ids']}, share {plan.v0.gpus:g} of bundle {plan.v0.bundle}), "
            f"{where['threads']} threads, p = {[round(float(x), 3) for x in p]}")


def piece_vllm_rollouts(work: Path, cpu: bool) -> str:
    import numpy as np
    from sparserl.rollout import SamplingParams
    from sparserl.rollout.vllm_backend import VLLMBackend
    policy = tiny_policy(work / "tiny")
    b = VLLMBackend(str(policy), seed=0, gpu_memory_utilization=0.1 if cpu else 0.3, max_model_len=64,
                    enable_prefix_caching=False, enforce_eager=True)
    try:
        prompts = [f"Q: {a} + {a} =\nA:" for a in range(4)]
        out = b.generate(prompts, 2, SamplingParams(max_new_tokens=8, temperature=1.0, top_p=1.0), seed=0)
    finally:
        b.close()
    lp = np.concatenate([np.asarray(x, dtype=float) for x in out.logprobs])
    if len(out.texts) != 8 or not len(lp) or not np.isfinite(lp).all():
        raise RuntimeError(f"{len(out.texts)} rollouts, {len(lp)} log-probs (finite: {np.isfinite(lp).all()})")
    return f"{len(out.texts)} rollouts, {len(lp)} tokens, mean log-prob {lp.mean():.3f}"


IN_PROCESS = {"cuda": piece_cuda, "vllm_kl": piece_vllm_kl, "v0_actor": piece_v0_actor,
              "vllm_rollouts": piece_vllm_rollouts}


# --------------------------------------------------------------------------- driver


def grpo_flags_note() -> str:
    return ("CUDA-IPC sync (vllm.sync_backend nccl + colocate_all), vLLM and DeepSpeed sleep mode, " +
            ("flash-attention packing" if flash_attn_installed() else
             "flash-attention packing: not installed (flash_attn missing: sdpa, no packing)"))


def dry(work: Path, why: str) -> int:
    print(f"gpu_smoke: dry mode ({why}): on a GPU it runs these pieces, in this order, each with its "
          f"time limit, in {BUDGET_S} s in all:")
    for p in PIECES:
        gone = missing(p)
        here = "installed here" if not gone else f"not installed here: {', '.join(gone)}"
        print(f"  {p.name} ({p.timeout_s} s): {p.what}")
        print(f"      needs {', '.join(p.needs)} ({here})" + (f"; reads {p.after}'s output" if p.after else ""))
        if p.name == "openrlhf_grpo":
            print(f"      flags: {grpo_flags_note()}")
        print(f"      $ {shlex.join(command(p, work))}")
    return 0


def run_all(work: Path) -> int:
    t0 = time.time()
    results: dict[str, tuple[str, str]] = {}
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    for p in PIECES:
        left = BUDGET_S - (time.time() - t0)
        gone = missing(p)
        if gone:
            results[p.name] = ("not installed", f"missing {', '.join(gone)}")
        elif p.after and results.get(p.after, ("",))[0] != "passed":
            results[p.name] = ("skipped", f"{p.after} did not pass")
        elif left < 20:
            results[p.name] = ("failed", f"no time left in the {BUDGET_S} s budget")
        else:
            cmd, log = command(p, work), logs / f"{p.name}.log"
            t = time.time()
            limit = min(p.timeout_s, left - 10)
            with open(log, "w") as fh:  # own session: a timeout stops Ray's and vLLM's processes too
                proc = subprocess.Popen(cmd, cwd=REPO, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
                try:
                    rc = proc.wait(timeout=limit)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    rc = None
            tail = (log.read_text().strip().splitlines()[-1:] or [""])[0][:300]
            results[p.name] = (("passed" if rc == 0 else "failed"),
                               f"{tail} ({time.time() - t:.0f} s; log {log})" if rc is not None
                               else f"over its {limit:.0f} s limit (log {log})")
        print(f"[{time.time() - t0:5.0f} s] {p.name}: {results[p.name][0]}  {results[p.name][1]}", flush=True)
    if "openrlhf_grpo" in results and results["openrlhf_grpo"][0] == "passed":
        print(f"  openrlhf_grpo ran with: {grpo_flags_note()}")
    print("\ngpu_smoke summary")
    for name, (status, note) in results.items():
        print(f"  {status:13s} {name}: {note}")
    return 1 if any(s == "failed" for s, _ in results.values()) else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry", action="store_true", help="list the pieces and their commands; run nothing")
    ap.add_argument("--work", type=Path, default=None, help="scratch folder (default: a new temporary one)")
    ap.add_argument("--piece", choices=sorted(IN_PROCESS), help="run one in-process piece")
    ap.add_argument("--cpu", action="store_true", help="with --piece: run it on the CPU (a check of the code)")
    a = ap.parse_args(argv)
    sys.path.insert(0, str(REPO / "src"))
    work = a.work or Path(tempfile.mkdtemp(prefix="gpu_smoke_"))
    work.mkdir(parents=True, exist_ok=True)
    if a.piece:
        print(f"{a.piece}: {IN_PROCESS[a.piece](work, a.cpu)}", flush=True)
        return 0
    if a.dry:
        return dry(work, "--dry")
    try:
        import torch
        gpu = torch.cuda.is_available()
    except ImportError:
        gpu = False
    if not gpu:
        return dry(work, "no CUDA GPU here")
    return run_all(work)


if __name__ == "__main__":
    sys.exit(main())
