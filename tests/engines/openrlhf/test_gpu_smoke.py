"""perf/gpu_smoke.sh: its dry mode lists every paper-path piece with the exact command it runs on a
GPU, the GRPO piece's configs give OpenRLHF the cluster's flags, and its vllm_kl check can fail.
Nothing here needs a GPU; the pieces themselves run on a lent GPU machine."""
from __future__ import annotations

import importlib.util
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "perf"))
import gpu_smoke  # noqa: E402  (perf/gpu_smoke.py)
from helpers.openrlhf_stubs import openrlhf_run  # noqa: E402

# the paper path on one GPU: what the issue asks the smoke check to reach
PAPER_PIECES = {"cuda", "openrlhf_grpo", "vllm_kl", "v0_actor", "vllm_rollouts", "local_parts"}


def _dry(tmp_path) -> str:
    r = subprocess.run(["bash", "perf/gpu_smoke.sh", "--dry", "--work", str(tmp_path)], cwd=REPO,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


@pytest.mark.e2e  # perf/gpu_smoke.sh's DAG dry runs
def test_dry_mode_lists_every_piece_with_its_command(tmp_path):
    out = _dry(tmp_path)
    assert out.startswith("gpu_smoke: dry mode (--dry)")
    listed = {}
    lines = out.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("  ") and not line.startswith("      "):
            name = line.split()[0]
            cmd = next(x for x in lines[i + 1:] if x.strip().startswith("$ "))
            listed[name] = shlex.split(cmd.strip()[2:])
    assert set(listed) == PAPER_PIECES, out
    for name, cmd in listed.items():
        assert cmd[0] == sys.executable, cmd
        script = next((c for c in cmd if c.endswith(".py")), None)
        if script:  # an in-repo script, asked for a piece it knows
            assert (REPO / script).is_file(), cmd
            if "--piece" in cmd:
                assert cmd[cmd.index("--piece") + 1] == name and name in gpu_smoke.IN_PROCESS
    grpo = listed["openrlhf_grpo"]
    assert grpo[1:3] == ["-m", "snakemake"] and grpo[grpo.index("--configfile") + 1:][:2] == [
        "configs/openrlhf_cpu.yaml", "configs/overlays/gpu_smoke.yaml"]
    assert grpo[5] == str(tmp_path / "results" / "smoke" / "rl" / "grpo_g4" / "seed0" / "metrics.parquet")
    assert "CUDA-IPC sync" in out and "sleep mode" in out and "flash-attention packing" in out
    packing = "not installed" not in out.split("flags:")[1].splitlines()[0]
    assert packing == (importlib.util.find_spec("flash_attn") is not None)


@pytest.mark.e2e  # perf/gpu_smoke.sh's DAG dry runs
def test_no_gpu_means_dry_mode(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is here: the script would run the pieces")
    r = subprocess.run(["bash", "perf/gpu_smoke.sh", "--work", str(tmp_path)], cwd=REPO,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.startswith("gpu_smoke: dry mode (no CUDA GPU here)"), r.stdout + r.stderr


def test_grpo_piece_runs_openrlhf_with_the_cluster_flags(tmp_path):
    """The GRPO piece's configs, through the launcher's flags and OpenRLHF's own parser: the
    conditions under which OpenRLHF 0.11.2 takes the CUDA-IPC sync (ppo_actor: nccl, colocate_all,
    not async), sleeps vLLM and DeepSpeed, and packs with flash-attention."""
    pytest.importorskip("openrlhf")
    from sparserl.core.config import load_config
    from sparserl.engines.openrlhf.launcher import openrlhf_argv
    from sparserl.engines.openrlhf.parser import parse_args
    from sparserl.engines.openrlhf.placement import plan_from_args
    from sparserl.methods.spec import load_method
    files = [str(REPO / f) for f in gpu_smoke.grpo_configs()]
    cfg = load_config(files, overrides={"results_dir": str(tmp_path)})
    args = parse_args(openrlhf_argv(cfg, load_method("grpo_g4"), 0, openrlhf_run(tmp_path / "final"), policy_path="/p"))
    assert args.vllm.sync_backend == "nccl" and args.train.colocate_all and not args.train.async_enable
    assert args.vllm.enable_sleep and args.ds.enable_sleep and args.vllm.num_engines == 1
    flash = importlib.util.find_spec("flash_attn") is not None
    assert args.ds.packing_samples == flash
    assert args.ds.attn_implementation == ("flash_attention_2" if flash else "sdpa")
    # vllm_kl is logged and bounded at every correction level (engines.openrlhf.syncwatch)
    assert args.sparserl.vllm_kl_max > 0
    plan = plan_from_args(args)
    assert len(plan.bundles) == 1 and plan.used(0) == pytest.approx(0.4) and plan.outside() == []


@pytest.mark.parametrize("kl, ok", [([1e-3, 2e-4, 4e-4], True), ([1e-3, 0.3, 4e-4], False)])
def test_vllm_kl_piece_fails_when_vllm_samples_stale_weights(tmp_path, kl, ok):
    import pandas as pd
    path = gpu_smoke.grpo_metrics(tmp_path)
    path.parent.mkdir(parents=True)
    pd.DataFrame({"step": [1, 2, 3], "vllm_kl": kl}).to_parquet(path)
    if ok:
        assert gpu_smoke.piece_vllm_kl(tmp_path, False).startswith("vllm_kl by step: 1: 1.00e-03")
    else:
        with pytest.raises(RuntimeError, match="not below 0.05"):
            gpu_smoke.piece_vllm_kl(tmp_path, False)


def test_a_missing_package_is_reported_not_installed(tmp_path, monkeypatch, capsys):
    """The driver on a GPU machine without vLLM: pieces that need it are 'not installed', the
    vllm_kl check 'skipped', the rest run (here replaced by a recorder)."""
    ran = []
    monkeypatch.setattr(gpu_smoke, "missing", lambda p: [m for m in p.needs if m == "vllm"])

    class Done:
        pid = 0

        def __init__(self, cmd, **kw):
            ran.append(cmd)

        def wait(self, timeout=None):
            return 0
    monkeypatch.setattr(gpu_smoke.subprocess, "Popen", Done)
    assert gpu_smoke.run_all(tmp_path) == 0
    summary = " ".join(capsys.readouterr().out.split("gpu_smoke summary")[1].split())
    for line in ("passed cuda:", "not installed openrlhf_grpo: missing vllm", "skipped vllm_kl: openrlhf_grpo did not pass",
                 "passed v0_actor:", "not installed vllm_rollouts: missing vllm", "passed local_parts:"):
        assert line in summary, summary
    assert [c[-1] for c in ran] == [str(tmp_path), str(tmp_path), "perf/gpu_smoke_local.py"]


def test_a_piece_over_its_limit_fails_and_its_children_stop(tmp_path, monkeypatch, capsys):
    """A piece's Ray and vLLM processes must not outlive its limit (they would hold the GPU)."""
    import time
    pidfile = tmp_path / "child.pid"
    monkeypatch.setattr(gpu_smoke, "PIECES", [gpu_smoke.Piece("cuda", "a piece that hangs", (), 2)])
    monkeypatch.setattr(gpu_smoke, "command", lambda p, work: [
        "bash", "-c", f"sleep 60 & echo $! > {pidfile}; wait"])
    assert gpu_smoke.run_all(tmp_path) == 1
    assert "failed        cuda: over its 2 s limit" in capsys.readouterr().out
    status = Path(f"/proc/{int(pidfile.read_text())}/status")

    def alive():  # a killed child left unreaped by its new parent shows as a zombie (Z)
        try:
            return "\tZ" not in next(ln for ln in status.read_text().splitlines() if ln.startswith("State:"))
        except FileNotFoundError:
            return False
    deadline = time.time() + 5
    while alive() and time.time() < deadline:
        time.sleep(0.1)
    assert not alive()
