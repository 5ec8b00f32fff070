"""The results tree is resolved once per process and handed down: the layout classes of
core.paths are built only in core/ and the run resolver (methods/run.py). A command of the command
line takes its tree from the resolver's `layout` (at most once, from its --config, for what its
rule passes no path); the V0 actor's process gets the run's files as flags. Every other module
takes the layout, or the file paths, its caller resolved, so a rule's output and the file its
command writes cannot drift apart. AST, not grep: an alias or a call across lines counts."""
from __future__ import annotations

import ast
from pathlib import Path

import sparserl
from sparserl.core import paths as layout

SRC = Path(sparserl.__file__).parent
LAYOUTS = {name for name, obj in vars(layout).items() if isinstance(obj, type) and name.endswith("Paths")}
ALLOWED = ("core/", "methods/run.py")
# still to move, with the reason (none left)
KNOWN: dict[str, int] = {}


def layout_calls(tree: ast.AST) -> list[int]:
    """Line numbers of calls that build a layout: `Paths(...)`, `paths.RunPaths(...)`, an alias."""
    aliases = {a.asname or a.name: a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
               for a in node.names if a.name in LAYOUTS}
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if name in LAYOUTS or aliases.get(name) in LAYOUTS:
                lines.append(node.lineno)
    return sorted(lines)


def _modules():
    for f in sorted(SRC.rglob("*.py")):
        yield f.relative_to(SRC).as_posix(), ast.parse(f.read_text(), str(f))


def test_the_layouts_are_the_core_modules_classes():
    assert {"Paths", "RunPaths", "StudyPaths", "OODPaths", "CritiquePaths"} <= LAYOUTS


def test_only_core_and_the_run_resolver_build_a_layout():
    found = {rel: layout_calls(tree) for rel, tree in _modules() if not rel.startswith(ALLOWED)}
    found = {rel: lines for rel, lines in found.items() if len(lines) > KNOWN.get(rel, 0)}
    assert not found, ("modules that build the results layout themselves (take it from the caller, "
                       f"see core/paths.py): {found}")


def _resolver_calls(fn: ast.AST) -> int:
    """Calls of the run resolver's `layout` (or a layout class) in `fn`."""
    return len(layout_calls(fn)) + sum(1 for n in ast.walk(fn) if isinstance(n, ast.Call)
                                       and getattr(n.func, "id", getattr(n.func, "attr", None)) == "layout")


def test_a_command_builds_the_layout_at_most_once():
    over = [f"{rel}:{fn.name} builds {_resolver_calls(fn)}" for rel, tree in _modules() if rel.startswith("cli/")
            for fn in ast.walk(tree) if isinstance(fn, ast.FunctionDef) and _resolver_calls(fn) > 1]
    assert not over, over
    twice = ast.parse("def cmd(args):\n    P = layout(cfg)\n    return layout(cfg).results\n").body[0]
    assert _resolver_calls(twice) == 2


def test_the_scan_finds_a_call_an_alias_and_a_qualified_name():
    src = ("from sparserl.core.paths import Paths as L, RunPaths\nimport sparserl.core.paths as p\n"
           "a = L(cfg)\nb = p.StudyPaths(\n  P)\nc = RunPaths('d', 'm', 0)\nd = cfg.get('x')\n")
    assert layout_calls(ast.parse(src)) == [3, 4, 6]
