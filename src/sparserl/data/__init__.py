"""Datasets: paper benchmark loaders (`benchmarks`) and the hub download (`download`)."""
from sparserl.data.benchmarks import (
    BENCHMARKS, PAPER_BENCHMARKS, RECORD_COLUMNS, TRAIN_SETS, load_benchmark, load_benchmark_dir,
    load_dapo_math, load_hmmt_feb_2025,
)

__all__ = [
    "BENCHMARKS", "PAPER_BENCHMARKS", "RECORD_COLUMNS", "TRAIN_SETS", "load_benchmark",
    "load_benchmark_dir", "load_dapo_math", "load_hmmt_feb_2025",
]
