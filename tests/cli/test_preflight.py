"""The DAG's preflight (sparserl.cli.preflight): a missing sandbox or an unwritable results folder
stops the DAG before its first job, with one line that names the fix."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparserl.cli import preflight
from sparserl.core.config import load_config

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def tiny():
    return load_config([str(REPO / "configs/tiny.yaml")])


def test_only_jobs_that_grade_codeio_need_the_sandbox(tiny):
    assert preflight.sandboxed_envs(tiny) == ["codeio"]
    assert preflight.sandboxed_envs(tiny, [("rl_train", {"method": "grpo_g4", "seed": "0"}),
                                           ("critique_train", {"exp": "rg_k8", "method": "lc_vf",
                                                               "seed": "0"})]) == []
    assert preflight.sandboxed_envs(tiny, [("critique_train", {"exp": "codeio_k4", "method": "lc_vf",
                                                               "seed": "0"})]) == ["codeio"]
    assert preflight.sandboxed_envs(tiny, [("critique_start", {"env": "codeio"})]) == ["codeio"]
    tiny["critique"]["envs"]["codeio"]["sandbox"] = {"allow_weak": True}
    assert preflight.sandboxed_envs(tiny) == []


def test_a_missing_sandbox_is_one_line_naming_the_fix(tiny, monkeypatch):
    from sparserl.envs import sandbox
    monkeypatch.setattr(sandbox, "strong_isolation", lambda python="": (False, "bubblewrap (bwrap) is not installed"))
    (line,) = preflight.problems(tiny, [("critique_start", {"env": "codeio"})])
    assert "apt-get install bubblewrap" in line and "critique.envs.codeio.sandbox.allow_weak" in line
    assert "\n" not in line
    assert preflight.problems(tiny, [("rl_train", {"method": "grpo_g4"})]) == []


def test_an_unwritable_results_folder_is_named(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    # root ignores mode bits: a read-only bind mount in a private mount namespace is a real EROFS
    code = ("import sys; from sparserl.cli.preflight import _writable; "
            "print('|'.join(_writable(sys.argv[1])))")
    cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c",
           f'mount --bind -o ro "$0" "$0" && exec "$1" -c "$2" "$0"', str(ro), sys.executable, code]
    if os.geteuid() != 0:
        os.chmod(ro, 0o500)
        cmd = [sys.executable, "-c", code, str(ro)]
    out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    assert out.returncode == 0, out.stderr
    assert str(ro) in out.stdout and "fix:" in out.stdout and "results_dir" in out.stdout, out.stdout
    assert preflight._writable(tmp_path) == []


@pytest.mark.e2e  # Snakemake run
def test_the_dag_stops_in_seconds_without_bubblewrap(tmp_path):
    """The real DAG, with bwrap off the PATH: it stops before its first job, in one line."""
    nobw = tmp_path / "bin"
    nobw.mkdir()
    for d in ("/usr/local/bin", "/usr/bin", "/bin"):
        for n in os.listdir(d) if os.path.isdir(d) else ():
            if n != "bwrap" and not os.path.lexists(nobw / n):
                (nobw / n).symlink_to(os.path.join(d, n))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{nobw}"}
    out = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d",
                          str(tmp_path), "--cores", "1", "critique", "--config",
                          f"results_dir={tmp_path / 'results'}"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 1, out.stderr[-2000:]
    lines = [l for l in out.stderr.splitlines() if l.startswith("preflight:")]
    assert len(lines) == 1 and "apt-get install bubblewrap" in lines[0], out.stderr[-2000:]
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "results" / "tiny" / "critique" / "tasks").exists()  # no job ran
    locks = tmp_path / ".snakemake" / "locks"  # no lock left behind (9.27 makes none this early)
    assert not locks.exists() or not any(locks.iterdir())
