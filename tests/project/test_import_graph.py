"""The sparserl package's import graph has no cycles: no two modules import each other, directly
or through others (a module importing itself, as a file loaded by path finds its canonical copy,
is not a cycle). Every import counts, also those inside functions: a cycle hidden in a function
is still one. grimp builds the graph statically (no sparserl module is executed)."""
from __future__ import annotations

import sys
import textwrap

import grimp
import pytest


def import_cycles(graph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root) - {root})))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.find_modules_directly_imported_by(w) - {w}))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return sorted(out)


def _describe(graph, comp: list[str]) -> str:
    """One cycle's modules and the import lines that tie them (what to move)."""
    members = set(comp)
    lines = []
    for a in comp:
        for b in sorted(graph.find_modules_directly_imported_by(a) & members - {a}):
            for d in graph.get_import_details(importer=a, imported=b):
                lines.append(f"  {a}:{d['line_number']}  {d['line_contents']}")
    return f"{len(comp)} modules: {', '.join(comp)}\n" + "\n".join(lines)


def test_sparserl_has_no_import_cycles():
    graph = grimp.build_graph("sparserl", cache_dir=None)
    cycles = import_cycles(graph)
    assert not cycles, ("import cycles (move the shared code into a module both can import):\n"
                        + "\n".join(_describe(graph, c) for c in cycles))


@pytest.fixture
def planted(tmp_path, monkeypatch):
    """A package `plantedpkg`: a -> b -> c -> a (also through a function-level import), d -> a,
    e imports itself."""
    pkg = tmp_path / "plantedpkg"
    pkg.mkdir()
    files = {
        "__init__.py": "",
        "a.py": "from plantedpkg import b\n",
        "b.py": "def f():\n    from plantedpkg.c import g\n    return g\n",
        "c.py": "import plantedpkg.a\n\ndef g():\n    return 1\n",
        "d.py": "from plantedpkg import a\n",
        "e.py": "from plantedpkg import e as canonical\n",
    }
    for name, text in files.items():
        (pkg / name).write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "plantedpkg"
    for m in [m for m in sys.modules if m.startswith("plantedpkg")]:
        del sys.modules[m]


def test_a_planted_cycle_is_found(planted):
    graph = grimp.build_graph(planted, cache_dir=None)
    assert import_cycles(graph) == [["plantedpkg.a", "plantedpkg.b", "plantedpkg.c"]]
    assert "plantedpkg.b:2" in _describe(graph, import_cycles(graph)[0])  # the import inside f


def test_breaking_the_planted_cycle_clears_it(planted, tmp_path):
    (tmp_path / "plantedpkg" / "c.py").write_text("def g():\n    return 1\n")
    assert import_cycles(grimp.build_graph(planted, cache_dir=None)) == []
