"""Reading results: `sparserl show` (any artifact), `sparserl methods` (every method file) and
`sparserl --version`.

    sparserl show results/tiny/rl/grpo_g4/seed0/final              # sparserl.json first, then files
    sparserl show results/tiny/rl/runs.parquet --columns method,seed,final_acc
    sparserl methods                                                # estimator, G, paper per file
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

CONFIG_LINES = 40  # lines of a checkpoint's config.json shown before a pointer to the rest


def _width() -> int:
    return max(60, shutil.get_terminal_size((120, 24)).columns)


def _json_lines(path: Path) -> list[str]:
    try:
        return json.dumps(json.loads(path.read_text()), indent=2, sort_keys=True).splitlines()
    except (OSError, ValueError) as e:
        return [f"(not readable as JSON: {e})"]


def summarize_dir(path: Path) -> str:
    """A checkpoint or run folder: its sparserl.json (method, step, ...) first, the files without
    dotfiles (Snakemake's .snakemake_timestamp), then config.json cut at a line, never mid-word."""
    from sparserl.core.artifacts import read_manifest
    lines = [f"artifact: {path}"]
    meta = path / "sparserl.json"
    if meta.is_file():
        lines.append("sparserl.json:")
        lines += ["  " + line for line in _json_lines(meta)]
    man = read_manifest(path)
    if man:
        from sparserl.core.machine import summary
        lines.append("manifest: " + ", ".join(f"{k}={v}" for k, v in man.items()
                                              if k not in ("columns", "artifact", "machine")))
        lines.append(f"  machine: {summary(man.get('machine'))}")
    files = sorted(p for p in path.rglob("*") if p.is_file()
                   and not any(part.startswith(".") for part in p.relative_to(path).parts))
    total = sum(p.stat().st_size for p in files)
    lines.append(f"files: {len(files)}, {total / 1e6:.2f} MB")
    for p in files[:20]:
        lines.append(f"  {str(p.relative_to(path)):40s} {p.stat().st_size:>12,d} B")
    if len(files) > 20:
        lines.append(f"  ... {len(files) - 20} more")
    cfg = path / "config.json"
    if cfg.is_file():
        body = _json_lines(cfg)
        lines.append("config.json:")
        lines += ["  " + line for line in body[:CONFIG_LINES]]
        if len(body) > CONFIG_LINES:
            lines.append(f"  ... {len(body) - CONFIG_LINES} more lines: sparserl show {cfg}")
    return "\n".join(lines)


def summarize_table(path: Path, head: int, columns: list[str] | None) -> str:
    """A table's manifest and per-column stats (`core.artifacts.summarize`), then its first rows
    wrapped to the terminal's width; `columns` keeps those columns only."""
    import pandas as pd

    from sparserl.core.artifacts import read_table, summarize
    df = read_table(path)
    if columns:
        unknown = [c for c in columns if c not in df.columns]
        if unknown:
            raise ValueError(f"{path}: no column {', '.join(map(repr, unknown))}; its columns: "
                             f"{', '.join(map(str, df.columns))}")
        df = df[columns]
    lines = summarize(path, head=0).splitlines()
    if columns:  # the stats lines of the kept columns only
        lines = [ln for ln in lines if not ln.startswith("  ") or ln.split()[0] in columns]
    if head and len(df):
        with pd.option_context("display.max_colwidth", 40):
            lines.append(df.head(head).to_string(line_width=_width()))  # wide tables wrap in blocks
    return "\n".join(lines)


def cmd_show(args):
    from sparserl.core.artifacts import summarize
    columns = [c.strip() for c in args.columns.split(",") if c.strip()] if args.columns else None
    failed = 0
    for p in map(Path, args.paths):
        try:
            if not p.exists():
                summarize(p)  # its FileNotFoundError names the path and the fix
            if p.is_dir():
                text = summarize_dir(p)
            elif p.suffix in (".parquet", ".jsonl", ".csv"):
                text = summarize_table(p, args.head, columns)
            else:
                text = summarize(p, head=args.head)
        except (FileNotFoundError, ValueError) as e:  # the message names the path and the fix
            print(f"sparserl show: {e}", file=sys.stderr)
            failed += 1
            continue
        print(text)
        print()
    return 1 if failed else 0


def method_paper(m) -> str:
    """The paper of a method: that of the module behind each piece it uses (estimator, OSLA,
    budget allocation, `PAPER` in sparserl.estimators), the common baselines only if nothing else."""
    from sparserl.estimators import budget, osla
    from sparserl.estimators.registry import estimator_paper
    papers = [estimator_paper(m.estimator) or "?"]
    if m.osla is not None:
        papers.append(osla.PAPER)
    if m.budget is not None:
        papers.append(budget.PAPER)
    specific = [p for p in dict.fromkeys(papers) if p != "baselines"]
    return "+".join(specific) or "baselines"


def cmd_methods(args):
    from sparserl.core.config import ConfigError
    from sparserl.methods.spec import load_method, method_names
    rows, bad = [], 0
    for name in method_names():
        try:
            m = load_method(name)
        except ConfigError as e:
            print(f"sparserl methods: {e}", file=sys.stderr)
            bad += 1
            continue
        extra = [x for x, on in (("osla", m.osla), ("budget", m.budget), ("critic", m.critic),
                                 (f"prior={m.prior.kind}" if m.prior else "", m.prior)) if on]
        rows.append((name, m.estimator, str(m.group_size), method_paper(m), m.loss.type, " ".join(extra)))
    head = ("method", "estimator", "G", "paper", "loss", "also")
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    for r in [head] + rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    print(f"\n{len(rows)} methods in configs/methods/; run one: snakemake --cores 2 rl/<method>")
    return 1 if bad else 0


def version() -> str:
    """The installed version, and the commit when running from a git checkout."""
    import importlib.metadata

    from sparserl.core.artifacts import git_commit
    try:
        v = importlib.metadata.version("sparserl")
    except importlib.metadata.PackageNotFoundError:
        v = "(not installed)"
    root = Path(__file__).resolve().parents[3]
    commit = git_commit(root) if (root / ".git").exists() else "unknown"
    return f"sparserl {v}" + ("" if commit == "unknown" else f" (git {commit})")


def register(sub, add) -> None:
    """Add `show` and `methods` to the `sparserl` parser (`add` is cli.build_parser's helper)."""
    p = sub.add_parser("show", help="print a summary of any artifact (parquet, jsonl, json, checkpoint dir)")
    p.add_argument("paths", nargs="+")
    p.add_argument("--head", type=int, default=3, help="rows of a table to print (0: none)")
    p.add_argument("--columns", help="a table's columns to keep, comma-separated (e.g. method,seed,final_acc)")
    p.set_defaults(fn=cmd_show)
    p = sub.add_parser("methods", help="list every method file (configs/methods/) with its estimator, "
                                       "group size and paper")
    p.set_defaults(fn=cmd_methods)
