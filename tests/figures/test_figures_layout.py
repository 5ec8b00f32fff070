"""The figure modules take their results layout from the caller (the DAG's `P`, the `figure`
command's): none of them builds one, so a figure reads exactly the tables its rule names."""
import ast
from pathlib import Path

import sparserl.figures

LAYOUTS = {"Paths", "StudyPaths", "CritiquePaths", "OODPaths", "RunPaths"}


def layout_calls(path: Path) -> list[str]:
    """`file:line name` of each call that constructs a layout class in `path`."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            if name in LAYOUTS:
                out.append(f"{path.name}:{node.lineno} {name}")
    return out


def test_no_figure_module_constructs_a_results_layout():
    files = sorted(Path(sparserl.figures.__file__).parent.glob("*.py"))
    assert len(files) > 10
    sites = [s for f in files for s in layout_calls(f)]
    assert not sites, f"figure code builds a layout; take `P` (or the tables) from the caller: {sites}"


def test_the_check_finds_a_layout_built_in_a_figure_module(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from sparserl.core import paths\n\ndef t(cfg):\n    return [paths.Paths(cfg).rl_runs()]\n")
    assert layout_calls(bad) == ["bad.py:4 Paths"]
