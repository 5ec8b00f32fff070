"""No source file may point at a development machine: cite papers by title, arXiv id, section and
equation, never by where a copy of them lies.

Scans every text file git knows (tracked, or new and not ignored) under the folders below and
flags absolute home/work paths and citations of the local paper texts or formula notes.
"""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCANNED = ("src", "tests", "workflow", "configs", "perf", "Snakefile")

# Built from pieces so this file does not match itself.
_S = "/"
FORBIDDEN = [
    (re.compile(re.escape(_S + "work" + _S)), "absolute development-machine path"),
    (re.compile(re.escape(_S + "root" + _S)), "absolute development-machine path"),
    (re.compile(re.escape(_S + "home" + _S)), "absolute development-machine path"),
    (re.compile(re.escape(_S + "Users" + _S)), "absolute development-machine path"),
    (re.compile(re.escape("shared" + _S + "papers")), "citation of a local paper copy"),
    (re.compile(re.escape("shared" + _S + "spec")), "citation of the local formula notes"),
    (re.compile(re.escape("formulas" + ".md")), "citation of the local formula notes"),
]

# (file, exact text) pairs that are not citations: the sandbox tests try to read these paths
# to prove the sandbox hides them.
ALLOWED = {
    ("tests/envs/test_sandbox.py", _S + "root" + _S + ".bash_history"),
}

HINT = ("cite the paper by title and arXiv id (where it has one) with section and equation, e.g. "
        "'V0.5 (arXiv 2603.10848), Theorem 3.6'; never a filesystem path")


def _files() -> list[str]:
    try:
        out = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z", "--", *SCANNED],
            cwd=REPO, capture_output=True, check=True)
        names = [n for n in out.stdout.decode().split("\0") if n]
    except (OSError, subprocess.CalledProcessError):
        names = []
        for top in SCANNED:
            root = REPO / top
            if root.is_file():
                names.append(top)
                continue
            for dirpath, dirnames, filenames in os.walk(root):
                dirnames[:] = [d for d in dirnames if d != "__pycache__" and not d.endswith(".egg-info")]
                names += [str((Path(dirpath) / f).relative_to(REPO)) for f in filenames]
    return sorted(n for n in set(names) if (REPO / n).is_file())


def _text(path: Path) -> str | None:
    data = path.read_bytes()
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def find_machine_paths(names: list[str], root: Path = REPO) -> list[str]:
    hits = []
    for name in names:
        text = _text(root / name)
        if text is None:
            continue
        allowed = [t for f, t in ALLOWED if f == name]
        for lineno, line in enumerate(text.splitlines(), 1):
            for t in allowed:  # blank out the allowed text so only the rest of the line is checked
                line = line.replace(t, " " * len(t))
            for pattern, why in FORBIDDEN:
                for m in pattern.finditer(line):
                    hits.append(f"{name}:{lineno}: {why} ({m.group(0)!r}): {line.strip()[:120]}")
    return hits


def test_scan_covers_the_source_tree():
    names = _files()
    assert "src/sparserl/estimators/shrinkage.py" in names, names[:20]
    assert "tests/project/test_no_machine_paths.py" in names


def test_detector_flags_paths_and_citations(tmp_path):
    # the scanner itself must catch each kind it claims to, else the main test passes vacuously
    lines = ['"""Paper: Le Critique (' + _S + "work" + _S + "shared" + _S + "papers" + _S + '002.txt)."""',
             "# see formulas" + ".md", "x = '" + _S + "Users" + _S + "me'", "ok = 1",
             "# " + "shared" + _S + "spec" + " and " + _S + "home" + _S + "me"]
    (tmp_path / "bad.py").write_text("\n".join(lines) + "\n")
    hits = find_machine_paths(["bad.py"], root=tmp_path)
    assert [h.split(":")[1] for h in hits] == ["1", "1", "2", "3", "5", "5"], hits
    # an allowed (file, text) pair is skipped, the rest of its line is still checked
    (tmp_path / "tests" / "envs").mkdir(parents=True)
    root_path = _S + "root" + _S
    (tmp_path / "tests" / "envs" / "test_sandbox.py").write_text(
        f"paths = ['{root_path}.bash_history', '{root_path}.ssh']\n")
    hits = find_machine_paths(["tests/envs/test_sandbox.py"], root=tmp_path)
    assert len(hits) == 1 and hits[0].startswith("tests/envs/test_sandbox.py:1:"), hits


def test_no_machine_paths_or_local_citations():
    hits = find_machine_paths(_files())
    assert not hits, f"{len(hits)} machine path(s) or local-copy citation(s); {HINT}:\n" + "\n".join(hits)
