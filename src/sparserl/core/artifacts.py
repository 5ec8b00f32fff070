"""Atomic artifact I/O with a manifest sidecar, and `sparserl show`.

Every table the pipeline writes goes through `write_table` / `write_json`: the data lands in a
temporary file in the same directory and is renamed into place, so a killed job never leaves a
half-written artifact that Snakemake would mistake for a finished one. Beside each artifact sits
`<name>.manifest.json` with the config hash, git commit, time, row count and columns.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

MANIFEST_SUFFIX = ".manifest.json"


def manifest_path(path: str | os.PathLike) -> Path:
    p = Path(path)
    return p.with_name(p.name + MANIFEST_SUFFIX)


def git_commit(cwd: str | os.PathLike | None = None) -> str:
    """Short commit of the checkout the code runs from ("unknown" outside git)."""
    here = Path(cwd) if cwd else Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5
        )
        if out.returncode == 0:
            sha = out.stdout.strip()
            dirty = subprocess.run(
                ["git", "status", "--porcelain", "--untracked-files=no"],
                cwd=here, capture_output=True, text=True, timeout=5,
            ).stdout.strip()
            return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        pass
    return "unknown"


def config_hash(cfg: Any) -> str:
    """Stable hash of a JSON-able config (sorted keys)."""
    blob = json.dumps(cfg, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def current_umask() -> int:
    """The process umask (only readable by setting it; restored at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# mkstemp/mkdtemp add 8 characters from [a-z0-9_] between our prefix and suffix
_RAND = r"[a-z0-9_]{8}"


def temp_file_pattern(name: str) -> re.Pattern:
    """Names of `atomic_file` temp files of artifact `name` (and of its manifest sidecar)."""
    return re.compile(rf"\.{re.escape(name)}(?:{re.escape(MANIFEST_SUFFIX)})?\.{_RAND}\.tmp")


def temp_dir_pattern(name: str) -> re.Pattern:
    """Names of `atomic_dir` temp folders of the directory artifact `name`."""
    return re.compile(rf"\.{re.escape(name)}\.{_RAND}")


def remove_leftovers(path: str | os.PathLike) -> list[Path]:
    """Remove what a killed writer of `path` left beside it (temp files, half-written folders).

    Only names that our own atomic writers make for this very artifact are touched: one job
    writes one artifact, so a leftover with its name belongs to a dead writer."""
    path = Path(path)
    if not path.parent.is_dir():
        return []
    f_pat, d_pat = temp_file_pattern(path.name), temp_dir_pattern(path.name)
    gone = []
    for p in path.parent.iterdir():
        if p.is_dir() and not p.is_symlink() and d_pat.fullmatch(p.name):
            shutil.rmtree(p, ignore_errors=True)
            gone.append(p)
        elif p.is_file() and f_pat.fullmatch(p.name):
            p.unlink(missing_ok=True)
            gone.append(p)
    return gone


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike):
    """Yield a temp file beside `path`; on success it replaces `path`. It is always gone afterwards,
    and an OSError names `path` and the fix. The file twin of `atomic_dir`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_leftovers(path)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    # mkstemp creates 0600; a shared results folder needs what the umask allows (0644 under 022)
    os.fchmod(fd, 0o666 & ~current_umask())
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.replace(tmp, path)
    except OSError as e:
        if e.errno is None:
            raise
        raise _name_path(path, e) from e
    finally:
        if tmp.exists():
            tmp.unlink()


def _name_path(path: Path, e: OSError) -> OSError:
    """The same OSError with the artifact's path and the fix in its message."""
    return type(e)(e.errno, f"{path}: could not write ({e.strerror or e}); nothing was left "
                   f"behind; free space or fix permissions in {path.parent} and rerun")


@contextlib.contextmanager
def atomic_dir(out_dir: str | os.PathLike):
    """Yield a temp folder beside `out_dir`; on success it replaces `out_dir`, on error it is
    removed and an OSError names `out_dir` (a full disk must not leave hidden partial copies)."""
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    remove_leftovers(out_dir)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    os.chmod(tmp, 0o777 & ~current_umask())  # mkdtemp makes 0700
    try:
        yield tmp
        if out_dir.exists():
            shutil.rmtree(out_dir)
        tmp.rename(out_dir)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if e.errno is None:
            raise
        raise _name_path(out_dir, e) from e
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    path = Path(path)
    with atomic_file(path) as tmp, open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write_bytes(path, text.encode())


def atomic_torch_save(obj: Any, path: str | os.PathLike) -> Path:
    """torch.save, atomically. Through an open file: given a path, torch names the zip archive
    after the file, so the random temp name would make two identical saves differ in bytes."""
    import torch
    with atomic_file(path) as tmp, open(tmp, "wb") as f:
        torch.save(obj, f)
    return Path(path)


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return _jsonable(x.tolist())
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, float) and not np.isfinite(x):
        return str(x)
    return x


def write_manifest(path: str | os.PathLike, *, rows: int | None, columns: list[str] | None,
                   cfg: Any = None, extra: dict | None = None) -> Path:
    m = {
        "artifact": Path(path).name,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": git_commit(),
        "config_hash": config_hash(cfg) if cfg is not None else None,
        "scale": (cfg or {}).get("scale") if isinstance(cfg, dict) else None,
        "rows": rows,
        "columns": columns,
    }
    if extra:
        m.update(_jsonable(extra))
    return atomic_write_text(manifest_path(path), json.dumps(m, indent=2, sort_keys=True) + "\n")


def write_table(df: pd.DataFrame, path: str | os.PathLike, *, cfg: Any = None,
                extra: dict | None = None) -> Path:
    """Write a DataFrame as parquet (``.parquet``) or JSON lines (``.jsonl``), atomically."""
    path = Path(path)
    with atomic_file(path) as tmp:
        if path.suffix == ".parquet":
            df.to_parquet(tmp, index=False)
        elif path.suffix == ".jsonl":
            df.to_json(tmp, orient="records", lines=True, force_ascii=False)
        elif path.suffix == ".csv":
            df.to_csv(tmp, index=False)
        else:
            raise ValueError(f"{path}: unsupported table suffix {path.suffix!r}; "
                             "use .parquet, .jsonl or .csv")
    write_manifest(path, rows=len(df), columns=[str(c) for c in df.columns], cfg=cfg, extra=extra)
    return path


def write_json(obj: Any, path: str | os.PathLike, *, cfg: Any = None,
               extra: dict | None = None) -> Path:
    path = Path(path)
    atomic_write_text(path, json.dumps(_jsonable(obj), indent=2, sort_keys=True) + "\n")
    rows = len(obj) if isinstance(obj, (list, dict)) else None
    write_manifest(path, rows=rows, columns=None, cfg=cfg, extra=extra)
    return path


def read_table(path: str | os.PathLike) -> pd.DataFrame:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: artifact not found; run the Snakemake rule that makes it")
    if path.suffix == ".parquet":
        return pd.read_parquet(path)
    if path.suffix == ".jsonl":
        return pd.read_json(path, lines=True)
    if path.suffix == ".csv":
        return pd.read_csv(path)
    raise ValueError(f"{path}: unsupported table suffix {path.suffix!r}")


def read_manifest(path: str | os.PathLike) -> dict | None:
    mp = manifest_path(path)
    if mp.exists():
        return json.loads(mp.read_text())
    return None


def _describe_series(s: pd.Series) -> str:
    if pd.api.types.is_bool_dtype(s):
        return f"{'bool':7s} mean={s.mean():.4g}"
    if pd.api.types.is_numeric_dtype(s):
        v = s.dropna()
        if len(v) == 0:
            return "numeric (all missing)"
        # a space after the dtype: "float64" fills the whole 7-character field
        return (f"{str(s.dtype):7s} min={v.min():.4g} mean={v.mean():.4g} "
                f"max={v.max():.4g} nan={s.isna().sum()}")
    first = s.iloc[0] if len(s) else None
    if isinstance(first, (list, np.ndarray)):
        lens = s.map(lambda x: len(x) if x is not None else 0)
        return f"{'list':7s} len min={lens.min()} mean={lens.mean():.3g} max={lens.max()}"
    nun = s.astype(str).nunique()
    ex = str(first)
    ex = ex if len(ex) <= 40 else ex[:37] + "..."
    return f"{str(s.dtype):7s} unique={nun} e.g. {ex!r}"


def summarize(path: str | os.PathLike, head: int = 3) -> str:
    """Human summary of any artifact: manifest, shape, per-column stats and a few rows."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: artifact not found; check the path or run the Snakemake "
                                "rule that makes it")
    lines = [f"artifact: {path}"]
    man = read_manifest(path)
    if man:
        keys = ["created", "git_commit", "config_hash", "scale", "rows"]
        lines.append("manifest: " + ", ".join(f"{k}={man.get(k)}" for k in keys))
        for k, v in man.items():
            if k not in keys + ["artifact", "columns"]:
                lines.append(f"  {k}: {v}")
    else:
        lines.append("manifest: none")
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file())
        total = sum(p.stat().st_size for p in files)
        lines.append(f"directory: {len(files)} files, {total / 1e6:.2f} MB")
        for p in files[:20]:
            lines.append(f"  {p.relative_to(path)}  {p.stat().st_size} B")
        cfgf = path / "config.json"
        if cfgf.exists():
            lines.append("config.json: " + cfgf.read_text()[:400])
        return "\n".join(lines)
    if path.suffix in (".parquet", ".jsonl", ".csv"):
        df = read_table(path)
        lines.append(f"table: {len(df)} rows x {len(df.columns)} columns")
        width = max((len(str(c)) for c in df.columns), default=0)
        for c in df.columns:
            lines.append(f"  {str(c):{width}s}  {_describe_series(df[c])}")
        if head and len(df):
            with pd.option_context("display.width", 120, "display.max_columns", 12,
                                   "display.max_colwidth", 30):
                lines.append(df.head(head).to_string())
        return "\n".join(lines)
    if path.suffix == ".json":
        obj = json.loads(path.read_text())
        text = json.dumps(obj, indent=2, sort_keys=True)
        lines.append(text if len(text) < 4000 else text[:4000] + "\n...")
        return "\n".join(lines)
    lines.append(f"file: {path.stat().st_size} bytes")
    return "\n".join(lines)


def iter_jsonl(path: str | os.PathLike) -> Iterable[tuple[int, dict]]:
    """Yield (line number, record) of a JSON-lines file, naming file and line on a bad row."""
    path = Path(path)
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{lineno}: not valid JSON ({e.msg}); "
                                 "fix or delete that line") from None
            if not isinstance(rec, dict):
                raise ValueError(f"{path}:{lineno}: expected a JSON object, got "
                                 f"{type(rec).__name__}")
            yield lineno, rec
