"""docs/extending.md is tested as written: every code block it labels with `file=<path>` is that
file of the repository, byte for byte (the example's own test, tests/estimators/test_median.py, runs it)."""
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"^```\w+ file=(\S+)\n(.*?)^```$", re.M | re.S)


def test_the_worked_example_is_the_files_in_the_repo():
    blocks = BLOCK.findall((REPO / "docs/extending.md").read_text())
    assert [p for p, _ in blocks] == ["src/sparserl/estimators/median.py", "configs/methods/grpo_median_g8.yaml",
                                      "tests/estimators/test_median.py"]
    for path, body in blocks:
        assert body == (REPO / path).read_text(), f"docs/extending.md's block differs from {path}"
