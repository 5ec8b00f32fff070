"""Every import of the package, its tests and perf/ is declared in pyproject.toml.

deptry maps each import to the distribution that provides it (from the installed metadata) and
compares with the declared dependencies, extras included; its configuration and the packages
it may ignore, with the reason for each, are in pyproject.toml's [tool.deptry].
"""
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def deptry_command() -> list[str]:
    exe = shutil.which("deptry", path=str(Path(sys.executable).parent)) or shutil.which("deptry")
    if exe is None:
        pytest.fail("deptry is not installed: it is in the `test` extra (pip install -e '.[test]')")
    return [exe, "src", "tests", "perf"]


def run_deptry(cwd: Path) -> tuple[int, str]:
    r = subprocess.run(deptry_command(), cwd=cwd, capture_output=True, text=True,
                       env={"NO_COLOR": "1", "PATH": str(Path(sys.executable).parent)})
    return r.returncode, re.sub(r"\x1b\[[0-9;]*m", "", r.stdout + r.stderr)


def test_every_import_is_declared():
    rc, out = run_deptry(ROOT)
    issues = [line for line in out.splitlines() if " DEP0" in line]
    assert rc == 0, (
        "imports without a declaration in pyproject.toml (DEP001: not installed, DEP003: installed "
        "only as another package's dependency, DEP002: declared but never imported). Add the "
        "distribution to [project.dependencies] or the extra of the code that imports it:\n"
        + "\n".join(issues or [out]))


def test_an_undeclared_import_fails_by_name(tmp_path):
    """The check is live: a copy of the project whose pyproject.toml lacks seaborn fails, naming it."""
    for name in ("src", "tests", "perf"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    text = (ROOT / "pyproject.toml").read_text()
    lines = [line for line in text.splitlines() if not line.strip().startswith('"seaborn')]
    assert len(lines) < len(text.splitlines()), "pyproject.toml no longer declares seaborn"
    (tmp_path / "pyproject.toml").write_text("\n".join(lines) + "\n")
    rc, out = run_deptry(tmp_path)
    assert rc != 0
    assert re.search(r"src/sparserl/figures/style\.py:\d+:\d+: DEP00[13] 'seaborn' imported but", out), out
