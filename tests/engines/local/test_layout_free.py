"""The local trainer, the evaluation, the policies and the value priors take their files from the
caller (the run's `RunInputs`, a rule's paths, a layout `P`): none of them builds a results layout."""
import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[3] / "src" / "sparserl"
LAYOUTS = {"Paths", "StudyPaths", "CritiquePaths", "OODPaths", "RunPaths"}
FILES = sorted([*(SRC / "engines" / "local").rglob("*.py"), *(SRC / "evaluation").rglob("*.py"),
                SRC / "models" / "policies.py", SRC / "values" / "priors.py", SRC / "values" / "v0" / "prior.py"])


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(SRC)))
def test_builds_no_layout(path):
    calls = [f"line {n.lineno}" for n in ast.walk(ast.parse(path.read_text()))
             if isinstance(n, ast.Call) and getattr(n.func, "id", getattr(n.func, "attr", None)) in LAYOUTS]
    assert not calls, f"{path.relative_to(SRC)} builds a layout at {calls}: take it (or the files) from the caller"
