"""Where the real data shared beside the repo lies (the tests that read it skip without it)."""
import os
from pathlib import Path


def _shared_benchmarks() -> Path:
    """../shared/data/benchmarks beside the repo; SPARSERL_SHARED_DATA may name the data folder
    (holding benchmarks/) or the benchmarks folder itself."""
    base = os.environ.get("SPARSERL_SHARED_DATA")
    if base:
        p = Path(base)
        return p if (p / "math500.jsonl").exists() else p / "benchmarks"
    return Path(__file__).resolve().parents[3] / "shared" / "data" / "benchmarks"


BENCH_DIR = _shared_benchmarks()
