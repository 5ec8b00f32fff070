"""The engines' library code takes the results layout from its caller: the engine report, the
sizing, the lr tuning, V0's harvest settings and the OpenRLHF flags, dataset, launcher and Le
Critique driver construct no `Paths`, `RunPaths`, `StudyPaths`, `CritiquePaths` or `OODPaths`;
the DAG (workflow/), the commands (cli/) and the run resolver (methods/run.py) build it once."""
from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "sparserl"
LIBRARY = ["engines/report.py", "engines/sizing.py", "engines/lr_tuning.py", "engines/harvest_settings.py",
           "engines/openrlhf/flags.py", "engines/openrlhf/dataset.py", "engines/openrlhf/experiment.py",
           "engines/openrlhf/critique.py", "engines/openrlhf/launcher.py", "methods/spec.py", "methods/lr_choice.py"]
LAYOUTS = {"Paths", "RunPaths", "StudyPaths", "CritiquePaths", "OODPaths"}


def layout_calls(path: Path, root: Path = SRC) -> list[str]:
    """`file:line name(` (relative to `root`) of every call that constructs a layout in `path`."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            if name in LAYOUTS:
                out.append(f"{path.relative_to(root)}:{node.lineno} {name}(")
    return out


def test_the_engines_library_code_constructs_no_layout():
    sites = [s for rel in LIBRARY for s in layout_calls(SRC / rel)]
    assert sites == [], "take the layout (P, a RunPaths/Run) or the files from the caller:\n" + "\n".join(sites)


def test_the_check_finds_a_layout_built_in_a_library_function(tmp_path):
    """The scan itself: a bare and a dotted constructor are both found (not only `import` lines)."""
    f = tmp_path / "probe.py"
    f.write_text("from sparserl.core import paths\n\ndef f(cfg, P):\n    return Paths(cfg), paths.RunPaths('.', 'm', 0), P.run('m', 0)\n")
    assert layout_calls(f, tmp_path) == ["probe.py:4 Paths(", "probe.py:4 RunPaths("]
