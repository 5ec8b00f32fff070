"""`python -m sparserl verifier-audit <benchmark files>`: is each gold graded as it should be?

    sparserl verifier-audit ../shared/data/benchmarks/*.jsonl
    sparserl verifier-audit data/                      # math-evaluation-harness data/<name>/test.jsonl

Prints, per benchmark, the self-match rate (fast path off), the variant-match rate on equal
forms, the near misses scored 1, and the garbled golds; exits 1 when a benchmark misses the goal
(100% self-match, >= 99% variants, no near miss scored 1 on a gold not reported as garbled).
"""
from __future__ import annotations

import json
from pathlib import Path


def benchmark_name(path: Path) -> str:
    """The benchmark a file or folder holds: ``math500.jsonl``, ``data/math500/test.jsonl`` and
    ``data/math500/`` are all math500."""
    from sparserl.data.benchmarks import BENCHMARKS
    for cand in (path.stem, path.name, path.parent.name):
        if cand in BENCHMARKS:
            return cand
    raise SystemExit(f"{path}: cannot tell which benchmark this is; name the file or its folder "
                     f"after one of: {', '.join(sorted(BENCHMARKS))}")


def _golds(paths: list[str]) -> dict[str, list[str]]:
    from sparserl.data.benchmarks import BENCHMARKS, load_benchmark, load_benchmark_dir
    out: dict[str, list[str]] = {}
    for p in map(Path, paths):
        if p.is_dir() and p.name not in BENCHMARKS:  # a folder of benchmarks
            for n, df in load_benchmark_dir(p).items():
                out[n] = df["answer"].tolist()
        else:
            n = benchmark_name(p)
            out[n] = load_benchmark(n, p)["answer"].tolist()
    return out


def cmd_verifier_audit(args):
    from sparserl.grading.audit import audit_benchmarks, format_table, meets_goal
    rows = audit_benchmarks(_golds(args.paths), workers=args.workers, timeout_s=args.timeout_s)
    print(format_table(rows))
    garbled = [g for r in rows for g in r["garbled_golds"]]
    print(f"\ngarbled golds (graded by normalised string match): {len(garbled)}")
    for g in garbled:
        print(f"  {g['benchmark']}[{g['index']}] {g['gold']!r}: {g['reason']}")
    for r in rows:
        for f in r["failures"][:args.show_failures]:
            print(f"  {r['benchmark']} {f['kind']}: gold {f['gold']!r}, answer {f['answer']!r}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    if not all(meets_goal(r) for r in rows):
        raise SystemExit("verifier-audit: goal missed (see the table)")


def register(sub, add) -> None:
    p = sub.add_parser("verifier-audit", help="self-match, variant-match and near-miss rates of "
                       "the verifier on benchmark files (.jsonl/.json/.parquet or folders)")
    p.add_argument("paths", nargs="+", help="benchmark files or folders")
    p.add_argument("--workers", type=int, default=2, help="verifier worker processes")
    p.add_argument("--timeout-s", type=float, default=5.0, help="verifier timeout per item")
    p.add_argument("--show-failures", type=int, default=5, help="failures listed per benchmark")
    p.add_argument("--json", help="also write the rows (with failures) to this JSON file")
    p.set_defaults(fn=cmd_verifier_audit)
