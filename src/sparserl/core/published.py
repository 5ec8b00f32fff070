"""Published tables (`published/<scale>/`): the tables the figures, the ranking, the head-to-head
and the claims read, committed with their manifests, so that anyone re-derives them without training.

This module holds what needs no Snakemake: where a workdir file lies under `published/<scale>/`,
its group, copies that skip equal bytes, the index, the record a rebuild leaves in its results
folder (`origin_line`, which the figures' footers and CLAIMS.md print), and the comparison of two
versions of a table (`compare_tables`). The DAG side (which tables, pack, status, rebuild, verify)
is `sparserl.cli.published`.
"""
from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd

from sparserl.core.artifacts import MANIFEST_SUFFIX, atomic_file, atomic_write_text, manifest_path

INDEX = "index.json"            # published/<scale>/index.json: every published file and its provenance
CONFIGS = "configs"             # published/<scale>/configs/<hash>.json: the resolved configs the tables name
ORIGIN = "published_origin.json"  # results/<scale>/published_origin.json: left by `published rebuild`
# the two roots a published path starts with (the workdir's results/<scale>, paper_figures/<scale>)
ROOTS = ("results", "paper_figures")
# never published: weights, optimiser and resume states, the folders that hold them
CHECKPOINT_SUFFIXES = (".pt", ".safetensors", ".bin", ".pth", ".ckpt")
CHECKPOINT_PARTS = ("checkpoints", "final", "ckpt", "openrlhf", "tensorboard", "models")
# tables a job writes beside a published one that no figure reads: left out (a figure that reads
# one declares it, and so publishes it)
UNREAD_COMPANIONS = ("rollouts",)
# columns that time a run: they differ between any two runs, equal code or not
TIMING_COLUMN = re.compile(r"(^|_)(wall|time|seconds|elapsed)(_|$)|_s$")

# groups of `published status`, by the first folder under results/<scale>/ (paper_figures: studies)
GROUPS = {"rl": "RL runs", "eval": "start policies' evaluations", "values": "V0", "critique": "Le Critique",
          "tuning": "learning-rate tuning", "studies": "studies", "basis": "BASIS", "ood": "BASIS OOD",
          "policies": "policies", "tasks": "tasks", "head_to_head": "head-to-head", "report": "report",
          "paper_figures": "study tables (paper_figures)"}


def is_checkpoint(rel: str) -> bool:
    """A weight file or anything under a checkpoint folder: never published."""
    parts = Path(rel).parts
    return rel.endswith(CHECKPOINT_SUFFIXES) or any(p in CHECKPOINT_PARTS for p in parts[:-1])


def to_key(rel: str, results_dir: str, figures_dir: str, scale: str) -> str | None:
    """A workdir-relative path (`results/small/rl/...`) as its published key (`results/rl/...`),
    None if it lies under neither root."""
    parts = Path(rel).parts
    for root, name in ((results_dir, "results"), (figures_dir, "paper_figures")):
        head = Path(root).parts
        if parts[:len(head) + 1] == (*head, scale):
            return str(Path(name, *parts[len(head) + 1:]))
    return None


def from_key(key: str, results_dir: str, figures_dir: str, scale: str) -> str:
    """The inverse of `to_key`."""
    root, *rest = Path(key).parts
    base = {"results": results_dir, "paper_figures": figures_dir}[root]
    return str(Path(base, scale, *rest))


def group_of(key: str) -> str:
    parts = Path(key).parts
    if parts[0] == "paper_figures":
        return GROUPS["paper_figures"]
    return GROUPS.get(parts[1] if len(parts) > 2 else "", parts[1] if len(parts) > 2 else "results")


def run_of(key: str) -> str | None:
    """The RL run a key belongs to (`grpo_g16/seed0`), None outside rl/<method>/seed<N>/."""
    parts = Path(key).parts
    if len(parts) > 4 and parts[:2] == ("results", "rl") and parts[3].startswith("seed"):
        return f"{parts[2]}/{parts[3]}"
    return None


def sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def copy_file(src: str | Path, dst: str | Path) -> bool:
    """Copy `src` to `dst` atomically (mode from the umask: 0644 under 022), unless `dst` already
    holds the same bytes (its mtime then stays, so Snakemake sees nothing new). True if copied."""
    src, dst = Path(src), Path(dst)
    if dst.is_file() and dst.stat().st_size == src.stat().st_size and sha256(dst) == sha256(src):
        return False
    with atomic_file(dst) as tmp:
        shutil.copyfile(src, tmp)
    return True


def copy_text(text: str, dst: str | Path) -> bool:
    """Write `text` to `dst` atomically unless it already holds it. True if written."""
    dst = Path(dst)
    if dst.is_file() and dst.read_text() == text:
        return False
    atomic_write_text(dst, text)
    return True


def copy_with_manifest(src: str | Path, dst: str | Path) -> bool:
    """A table and its manifest sidecar (when it has one); True if either was copied."""
    copied = copy_file(src, dst)
    if manifest_path(src).is_file():
        copied = copy_file(manifest_path(src), manifest_path(dst)) or copied
    return copied


def read_index(root: str | Path) -> dict:
    path = Path(root) / INDEX
    if not path.is_file():
        return {"files": {}}
    try:
        return json.loads(path.read_text())
    except ValueError as e:
        raise ValueError(f"{path}: not JSON ({e}); restore it from git (`git checkout {path}`) or pack again") from None


def write_index(root: str | Path, index: dict) -> Path:
    return atomic_write_text(Path(root) / INDEX, json.dumps(index, indent=1, sort_keys=True) + "\n")


def published_size(root: str | Path) -> tuple[int, int]:
    """(files, bytes) under a published folder."""
    files = [p for p in Path(root).rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


def origin_line(results: str | Path) -> str:
    """What the figures and CLAIMS.md say when their tables were restored from published/<scale>/
    by `published rebuild` ('' otherwise): the commits and config hashes of those tables, and the
    groups that were stale against the config of the rebuild."""
    path = Path(results) / ORIGIN
    if not path.is_file():
        return ""
    try:
        o = json.loads(path.read_text())
    except ValueError:
        return f"from published tables ({path} is unreadable)"
    commits = ", ".join(c[:12] + ("-dirty" if c.endswith("-dirty") else "") for c in o.get("commits", [])) or "?"
    line = (f"from published tables at commit {commits} ({o.get('published', 'published/')}; "
            f"config {', '.join(o.get('config_hashes', [])) or '?'})")
    stale = o.get("stale_groups") or []
    return line + (f"; STALE against this config: {', '.join(stale)}" if stale else "")


def _numeric(s: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s)


def compare_tables(published: pd.DataFrame, fresh: pd.DataFrame) -> list[str]:
    """How a fresh table differs from its published version, one line per difference ([] when equal):
    columns only one has, the row count, and per shared column the largest absolute difference
    (numbers; NaN against NaN and equal infinities are equal) or the number of rows that differ (anything else). Columns
    that time the run (`wall_time_s`) are named apart: they never match between two runs."""
    out = []
    a, b = published.reset_index(drop=True), fresh.reset_index(drop=True)
    for side, cols in (("published", [c for c in a.columns if c not in b.columns]),
                       ("fresh", [c for c in b.columns if c not in a.columns])):
        if cols:
            out.append(f"columns in the {side} table only: {', '.join(map(str, cols))}")
    if len(a) != len(b):
        out.append(f"rows: {len(a)} published vs {len(b)} fresh")
        return out
    for c in [c for c in a.columns if c in b.columns]:
        x, y = a[c], b[c]
        if _numeric(x) and _numeric(y):
            xv, yv = x.to_numpy(dtype=float), y.to_numpy(dtype=float)
            same = (xv == yv) | (np.isnan(xv) & np.isnan(yv))  # equal infinities too (inf - inf is NaN)
            with np.errstate(invalid="ignore"):
                diff = np.where(same, 0.0, np.abs(xv - yv))
            if np.any(np.isnan(diff)) or np.any(diff > 0):
                worst = float(np.nanmax(diff)) if not np.all(np.isnan(diff)) else float("nan")
                nan_rows = int(np.isnan(diff).sum())
                n = int((diff > 0).sum()) + nan_rows
                timing = " (a timing column: expected to differ)" if TIMING_COLUMN.search(str(c)) else ""
                out.append(f"{c}: max abs difference {worst:.3g} over {n} of {len(a)} rows"
                           + (f" ({nan_rows} NaN on one side only)" if nan_rows else "") + timing)
        else:
            xs, ys = x.map(_plain), y.map(_plain)
            n = int((xs != ys).sum())
            if n:
                out.append(f"{c}: {n} of {len(a)} rows differ")
    return out


def _plain(v):
    """A cell as something `!=` compares: lists and arrays as tuples, NaN as None."""
    if isinstance(v, (list, tuple, np.ndarray)):
        return tuple(_plain(x) for x in v)
    if isinstance(v, float) and np.isnan(v):
        return None
    return v


def unexpected(differences: list[str]) -> list[str]:
    """The differences that are not of a timing column."""
    return [d for d in differences if not d.endswith("(a timing column: expected to differ)")]


def manifests_under(root: str | Path) -> list[Path]:
    return sorted(p for p in Path(root).rglob("*" + MANIFEST_SUFFIX) if p.is_file())
