"""Code, configs and docs describe the tool as it is: a comment or a doc states the reason, not the
tracker issue that asked for it, and a doc's section is named after its subject, not a date.

An issue number tells a reader nothing without the tracker; the sentence it stood for does."""
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCANNED = ("src", "workflow", "configs", "docs", "perf", "Snakefile", "README.md")
# "issue 28", "Issues 28 and 39", "issue #9"; not an upstream tracker's "snakemake#3913"
ISSUE = re.compile(r"\bissues? #?\d+", re.I)
DATED_HEADING = re.compile(r"^#+ .*(\b\d{4}-\d{2}(-\d{2})?\b|\bsession \d+|\bthis week\b)", re.I | re.M)


def scanned_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z", "--", *SCANNED], cwd=REPO, capture_output=True,
                         check=True).stdout.decode()
    # a link (configs/schema.yaml) is read once, as its target
    return [REPO / f for f in out.split("\0") if f and (REPO / f).is_file() and not (REPO / f).is_symlink()]


def issue_references(path: Path, text: str) -> list[str]:
    """'file:line: text' for each line naming a tracker issue."""
    rel = path.relative_to(REPO).as_posix()
    return [f"{rel}:{n}: {line.strip()[:100]}" for n, line in enumerate(text.splitlines(), 1) if ISSUE.search(line)]


def test_the_pattern_finds_issue_numbers_and_passes_their_reasons():
    assert ISSUE.search("# issue 28: greedy beside mean@k") and ISSUE.search("(Issues 28 and 39)")
    assert ISSUE.search("Before issue #9 it scored 0") and ISSUE.search("issues 11 to 27")
    assert not ISSUE.search("snakemake#3913 oversubscribed the cores; the issue is the scheduler")
    assert DATED_HEADING.search("## The tiny DAG (2026-12-06)\n") and DATED_HEADING.search("### Session 4\n")
    assert not DATED_HEADING.search("## The tiny DAG\nMeasured 2026-12-06 at 292a2ea.\n")


def test_no_issue_numbers_in_code_configs_or_docs():
    hits = [h for p in scanned_files() for h in issue_references(p, p.read_text(errors="replace"))]
    assert hits == [], ("issue numbers; state the reason or the fact the issue stood for instead:\n"
                        + "\n".join(hits))


def test_doc_sections_are_named_after_their_subject_not_a_date():
    hits = [f"{p.relative_to(REPO)}: {m.group(0)}" for p in scanned_files() if p.suffix == ".md"
            for m in DATED_HEADING.finditer(re.sub(r"^```.*?^```$", "", p.read_text(), flags=re.M | re.S))]
    assert hits == [], f"dated headings; name the section after its subject:\n" + "\n".join(hits)
