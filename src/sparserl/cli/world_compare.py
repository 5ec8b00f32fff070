"""`python -m sparserl world-compare`: one or more worlds' RL gains side by side, as Markdown
(sparserl.studies.world_compare). Rule world_compare writes the run's own to
results/<scale>/report/world_compare.md; two worlds:

    sparserl world-compare --results "world 1=results_w1/tiny" "world 2.0=results/tiny" --out results/tiny/report/worlds.md
"""
from __future__ import annotations

import shlex


def _pair(text: str) -> tuple[str, str]:
    label, sep, path = text.partition("=")
    if not sep or not label.strip() or not path.strip():
        raise SystemExit(f"world-compare --results {text!r}: give LABEL=DIR, e.g. 'world 2.0=results/tiny'")
    return label.strip(), path.strip()


def cmd_world_compare(args):
    from sparserl.core.artifacts import atomic_write_text
    from sparserl.core.logs import get_logger
    from sparserl.studies.world_compare import compare, read_world
    worlds = [read_world(*_pair(r)) for r in args.results]
    command = "python -m sparserl world-compare --results " + " ".join(shlex.quote(r) for r in args.results)
    text = compare(worlds, command + (f" --out {args.out}" if args.out else ""))
    if args.out:
        atomic_write_text(args.out, text)
        get_logger("sparserl.cli").info(f"world comparison -> {args.out}")
    else:
        print(text, end="")


def register(sub, add):
    p = sub.add_parser("world-compare", help="RL gains over the start policy in one or more worlds, side by "
                       "side (Markdown; rule world_compare writes the run's own)")
    p.add_argument("--results", nargs="+", required=True, metavar="LABEL=DIR",
                   help="a label and a results/<scale> directory with rl/summary.parquet, per world")
    p.add_argument("--out", default=None, help="write the Markdown here (default: stdout)")
    p.set_defaults(fn=cmd_world_compare)
