"""The layer contracts of pyproject.toml ([tool.importlinter]) hold: nothing imports upward."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _lint(cwd: Path, src: Path) -> subprocess.CompletedProcess:
    exe = shutil.which("lint-imports")
    if exe is None:
        pytest.fail("lint-imports is missing: pip install -e '.[test]' installs import-linter")
    env = {"PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin", "PYTHONPATH": str(src)}
    return subprocess.run([exe, "--no-cache"], cwd=cwd, env=env, capture_output=True, text=True)


def test_layer_contracts_hold():
    r = _lint(REPO, REPO / "src")
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "0 broken" in r.stdout


def test_an_upward_import_breaks_the_contract(tmp_path):
    """The contract can fail: a copy of the package where the estimators import an engine."""
    shutil.copytree(REPO / "src", tmp_path / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    bad = tmp_path / "src" / "sparserl" / "estimators" / "group.py"
    bad.write_text(bad.read_text() + "\n\ndef _upward():\n    from sparserl.engines.report import summarize_runs  # noqa\n")
    r = _lint(tmp_path, tmp_path / "src")
    assert r.returncode != 0
    assert "sparserl.estimators.group -> sparserl.engines.report" in r.stdout
