"""The studies take their results layout from their caller: no module of sparserl.studies builds
one (`Paths(...)`, `StudyPaths(...)`, ...), and each study command builds it once, from its
--config (the DAG resolves the rest and passes it). On main's code 44 sites built it."""
import ast
from pathlib import Path

import sparserl

SRC = Path(sparserl.__file__).parent
LAYOUTS = {"Paths", "StudyPaths", "CritiquePaths", "OODPaths", "RunPaths"}
COMMANDS = ["cli/studies.py", "cli/claims.py", "cli/reading.py", "cli/head_to_head.py", "cli/world_compare.py"]


def _layout_calls(tree: ast.AST) -> list[ast.Call]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call)
            and (n.func.id if isinstance(n.func, ast.Name) else getattr(n.func, "attr", None)) in LAYOUTS]


def test_no_study_module_builds_a_layout():
    sites = [f"{p.relative_to(SRC)}:{c.lineno}" for p in sorted((SRC / "studies").rglob("*.py"))
             for c in _layout_calls(ast.parse(p.read_text()))]
    assert sites == [], f"build no layout in sparserl.studies; take `P` from the caller: {sites}"


def test_each_study_command_builds_the_layout_at_most_once():
    over = []
    for name in COMMANDS:
        tree = ast.parse((SRC / name).read_text())
        for fn in (n for n in tree.body if isinstance(n, ast.FunctionDef)):
            n = len(_layout_calls(fn))
            if n > 1:
                over.append(f"{name}:{fn.name} builds {n}")
    assert over == []
