"""The README and docs/ name only paths and commands that exist, and the README keeps its two
set-up commands, the second of which is what .ci/run runs."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
GENERATED = ("results/", "paper_figures/", "models/", "report.png", "CLAIMS.", "RESULTS.",
             "docs/results_")  # made by the DAG (docs/results_<scale>.md: `sparserl reading --copy-to`)
TOP = {p.name for p in ROOT.iterdir()}
PACKAGE_DIRS = [ROOT / "src" / "sparserl", ROOT / "src"]


def code_spans(text: str) -> list[str]:
    text = re.sub(r"```.*?```", lambda m: "\n".join("`" + ln + "`" for ln in m.group(0).splitlines()[1:-1]), text, flags=re.S)
    return re.findall(r"`([^`\n]+)`", text)


def tracked_names() -> set[str]:
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, text=True).stdout.split()
    return {Path(f).name for f in files}


def is_repo_path(tok: str) -> bool:
    """A token names a file of ours if it starts at the repo root or inside the package."""
    first = tok.split("/")[0]
    return "/" in tok and (first in TOP or any((d / first).is_dir() for d in PACKAGE_DIRS))


def path_candidates(span: str) -> list[str]:
    out = []
    for tok in re.split(r"[\s,;()=]+", span):
        tok = tok.strip("'\"").rstrip(".:")
        if len(tok) < 5 or "://" in tok or tok.startswith(("-", "$", "~", "/", "../")):
            continue
        if re.search(r"[<>*{}\[\]|\\]", tok) or tok.startswith(GENERATED):
            continue  # placeholders, globs, outputs of the DAG
        bare_file = "/" not in tok and re.search(r"\.(py|yaml|yml|md|smk|toml|txt)$", tok)
        if is_repo_path(tok) or bare_file:
            out.append(tok)
    return out


def exists(tok: str) -> bool:
    if "/" not in tok:
        return tok in tracked_names()
    return (ROOT / tok).exists() or any((d / tok).exists() for d in PACKAGE_DIRS)


def test_every_named_path_exists():
    missing = [f"{doc.relative_to(ROOT)}: `{tok}`" for doc in DOCS for span in code_spans(doc.read_text())
               for tok in path_candidates(span) if not exists(tok)]
    assert not missing, "paths named in the docs that do not exist:\n" + "\n".join(missing)


def cli_commands() -> set[str]:
    out = subprocess.run([sys.executable, "-m", "sparserl", "--help"], capture_output=True, text=True, cwd=ROOT).stdout
    return set(re.search(r"\{([^}]+)\}", out).group(1).split(","))


def rule_names() -> set[str]:
    """Rules of the default (tiny) and the paper config: some exist only at paper scale (fetch_models)."""
    out = set()
    for extra in ([], ["--configfile", "configs/paper.yaml"]):
        r = subprocess.run([sys.executable, "-m", "snakemake", "--list-rules", *extra], capture_output=True,
                           text=True, cwd=ROOT)
        assert r.returncode == 0, r.stderr[-2000:]
        out |= {ln.strip() for ln in r.stdout.splitlines() if ln.strip()}
    return out


ONE_VALUE = {"--cores", "-c", "-j", "--jobs", "--profile", "--report", "--directory", "-d"}
MANY_VALUES = {"--configfile", "--configfiles", "--config", "-C"}


def snakemake_targets(command: str) -> list[str]:
    words, targets, i = command.split("#")[0].split(), [], 1
    while i < len(words):
        w = words[i]
        if w in ONE_VALUE:
            i += 2
            continue
        if w in MANY_VALUES:
            i += 1
            while i < len(words) and not words[i].startswith("-"):
                i += 1
            continue
        if not w.startswith("-"):
            targets.append(w)
        i += 1
    return targets


@pytest.mark.e2e  # two `snakemake --list-rules`, ~5 s
def test_every_named_command_exists():
    commands, rules, problems = cli_commands(), rule_names(), []
    for doc in DOCS:
        for span in code_spans(doc.read_text()):
            for part in re.split(r"&&|\|", span.split("#")[0]):
                m = re.search(r"(?:python -m )?sparserl ([a-z][a-z0-9-]*)(?![*\w-])", part)
                if m and m.group(1) not in commands and "pip" not in part:
                    problems.append(f"{doc.name}: sparserl {m.group(1)}")
                if part.split()[:1] == ["snakemake"]:
                    problems += [f"{doc.name}: snakemake target {t!r} is no rule" for t in snakemake_targets(part)
                                 if "/" not in t and "<" not in t and t not in rules]
    assert not problems, "\n".join(problems)


def setup_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Set-up: the two commands", 1)[1].split("\n## ", 1)[0]
    return [b.strip() for b in re.findall(r"```bash\n(.*?)```", section, flags=re.S)]


def test_two_setup_commands_and_ci_runs_the_second():
    cmds = setup_commands()
    assert len(cmds) == 2 and all("\n" not in c for c in cmds), cmds
    assert cmds[0].endswith("snakemake --cores 2 all")
    # both lanes: the fast one (pyproject's addopts deselect e2e), then the end-to-end one
    assert cmds[1].endswith("python -m pytest -q && python -m pytest -q -m e2e")
    ci = (ROOT / ".ci" / "run").read_text()
    assert cmds[1] in ci.splitlines(), ".ci/run must run the README's test command verbatim"
    assert re.search(r"python3? -m venv \"\$venv\"", ci) and "--system-site-packages" not in ci.replace("no --system-site-packages", "")


def test_readme_is_short():
    n = len((ROOT / "README.md").read_text().splitlines())
    assert n <= 220, f"README.md has {n} lines: move detail to docs/"


@pytest.mark.parametrize("tok,ok", [("src/sparserl/cli/__init__.py", True), ("tests/test_smoke_dag.py", False),
                                    ("values/v0/", True), ("configs/nothere.yaml", False)])
def test_the_path_check_is_live(tok, ok):
    assert path_candidates(f"see {tok}") == [tok] and exists(tok) is ok
