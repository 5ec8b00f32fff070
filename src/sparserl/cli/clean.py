"""`sparserl clean --tmp`: list and remove what killed jobs left behind.

Each artifact's own leftovers go when it is next written (`core.artifacts.remove_leftovers`);
this command finds the rest: temp files of our atomic writers (`.<name>.<8 chars>.tmp`), resume
states half-saved by torch (`last.tmp`) and half-written checkpoint or tokenizer folders
(`.<name>.<8 chars>`), under the config's results and figures folders (or the given paths).
Recent ones are kept (`--min-age`), since a running job may still be writing them.
"""
from __future__ import annotations

import re
import shutil
import sys
import time
from pathlib import Path

TMP_FILE = re.compile(r"\..+\.[a-z0-9_]{8}\.tmp|last\.tmp")
TMP_DIR = re.compile(r"\..+\.[a-z0-9_]{8}")


def find_leftovers(roots, min_age_s: float = 0.0) -> list[Path]:
    """Leftover temp files and folders under `roots`, at least `min_age_s` old, sorted."""
    now, found = time.time(), []
    for root in map(Path, roots):
        if not root.is_dir():
            continue
        stack = [root]
        while stack:
            d = stack.pop()
            for p in d.iterdir():
                if p.is_symlink():
                    continue
                if p.is_dir():
                    # a half-written folder is removed whole; look inside the others
                    if TMP_DIR.fullmatch(p.name) and not p.name.endswith(".parts"):
                        if now - p.stat().st_mtime >= min_age_s:
                            found.append(p)
                    elif p.name != ".snakemake":
                        stack.append(p)
                elif TMP_FILE.fullmatch(p.name) and now - p.stat().st_mtime >= min_age_s:
                    found.append(p)
    return sorted(found)


def _size(p: Path) -> int:
    if p.is_dir():
        return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
    return p.stat().st_size


def cmd_clean(args) -> int:
    if not args.tmp:
        print("sparserl clean: say what to clean; `--tmp` removes killed jobs' leftovers",
              file=sys.stderr)
        return 2
    if args.paths:
        roots = args.paths
    else:
        from sparserl.core.config import load_config, setting
        cfg = load_config(args.config)
        roots = [setting(cfg, "results_dir"), setting(cfg, "figures_dir")]
    found = find_leftovers(roots, args.min_age * 60)
    total = 0
    for p in found:
        size = _size(p)
        total += size
        print(f"{'would remove' if args.dry_run else 'removed'} {p}{'/' if p.is_dir() else ''} "
              f"({size / 1e6:.2f} MB)")
        if not args.dry_run:
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    verb = "found" if args.dry_run else "removed"
    print(f"{verb} {len(found)} leftovers ({total / 1e6:.2f} MB) under {', '.join(map(str, roots))}")
    return 0


def register(sub, add) -> None:
    p = add("clean", cmd_clean, "list and remove what killed jobs left (temp files, half-written "
            "checkpoints)")
    p.add_argument("--tmp", action="store_true",
                   help="temp files and half-written folders of atomic writes")
    p.add_argument("paths", nargs="*",
                   help="folders to search (default: the config's results and figures folders)")
    p.add_argument("--dry-run", "-n", action="store_true", help="list only")
    p.add_argument("--min-age", type=float, default=10.0,
                   help="minutes: keep younger leftovers, a running job may own them (default 10)")
