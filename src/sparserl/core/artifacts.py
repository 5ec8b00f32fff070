"""Atomic artifact I/O with a manifest sidecar, and `sparserl show`.

Every table the pipeline writes goes through `write_table` / `write_json`: the data lands in a
temporary file in the same directory and is renamed into place, so a killed job never leaves a
half-written artifact that Snakemake would mistake for a finished one. Beside each artifact sits
`<name>.manifest.json` with the config hash, git commit, time, the writing job's wall time
(`process_wall_s`), row count and columns, and the machine's numerics (`machine`: CPU flags,
torch's SIMD path, BLAS, threads, versions; `sparserl.core.machine`), which say whether another
run's bytes are expected to match.

Every atomic write fsyncs the data before the rename and the folder after it, gives files and
folders the modes the umask allows (0644 / 0755 under 022, weights included), and on an OSError
names the artifact, the cause and the fix, leaving no temp file. Resume states go through
`save_checkpoint` / `load_checkpoint`, which keep the previous state (a file of its own, never a
link to the last) for a truncated one to fall back on.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import hashlib
import io
import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from sparserl.core.machine import machine_record, summary as machine_summary

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
    """The process umask. Read from /proc where it can be: setting it to read it (the fallback)
    would, for an instant, give files another thread creates the wrong mode."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def file_mode(executable: bool = False) -> int:
    """The mode a plain `open()` would give a new file under the current umask (0644 under 022)."""
    return (0o777 if executable else 0o666) & ~current_umask()


def dir_mode() -> int:
    """The mode `mkdir` gives a new folder under the current umask (0755 under 022)."""
    return 0o777 & ~current_umask()


def fsync_file(path: str | os.PathLike) -> None:
    """Flush a written file's data to disk (writers such as pyarrow close it without fsync)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: str | os.PathLike) -> None:
    """Flush a folder's entries (a rename into it) to disk. Filesystems that cannot fsync a
    folder say EINVAL; there is nothing more to do on those."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


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


def _discard(tmp: Path | None) -> bool:
    """Remove a temp file or folder; False if some of it could not be removed."""
    if tmp is None:
        return True
    try:
        if tmp.is_dir() and not tmp.is_symlink():
            shutil.rmtree(tmp)
        else:
            tmp.unlink(missing_ok=True)
    except OSError:
        return False
    return True


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike, previous: str | os.PathLike | None = None):
    """Yield a temp file beside `path`; on success it is fsynced and replaces `path`, and the
    folder is fsynced. The temp file is always gone afterwards, and an OSError (from making the
    folder or the temp file too) names `path`, the cause and the fix. The twin of `atomic_dir`.

    `previous`: where the file `path` held goes, renamed just before the new one takes its name
    (no copy, no hard link: the two names never share a file); when `path` held none, a file
    there is of an earlier run and is removed once the new one is in place."""
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_leftovers(path)
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        tmp = Path(name)
        try:
            # mkstemp creates 0600; a shared results folder needs what the umask allows
            os.fchmod(fd, file_mode())
        finally:
            os.close(fd)
        yield tmp
        fsync_file(tmp)
        had = previous is not None and path.exists()
        if had:
            # a kill between the two renames leaves `path` missing and `previous` whole
            os.replace(path, previous)
        os.replace(tmp, path)
        tmp = None
        if previous is not None and not had:
            Path(previous).unlink(missing_ok=True)
        fsync_dir(path.parent)
    except OSError as e:
        cleaned = _discard(tmp)
        tmp = None
        if e.errno is None:
            raise
        raise _name_path(path, e, cleaned) from e
    finally:
        _discard(tmp)


def write_fix(path: Path, e: OSError) -> str:
    """What to do about a failed write of `path` (or of an entry of its folder), by its cause."""
    where = path.parent
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"free space on the disk that holds {where} (or point results_dir elsewhere)"
    if e.errno == errno.EFBIG:
        return ("raise the file-size limit this job runs under (`ulimit -f`, or the cluster "
                "job's file-size limit)")
    if e.errno in (errno.EACCES, errno.EPERM):
        return f"make {where} writable for this user (or point results_dir elsewhere)"
    if e.errno == errno.EROFS:
        return f"{where} is on a read-only filesystem; point results_dir at a writable one"
    if e.errno in (errno.ENOTDIR, errno.EEXIST):
        return f"a file stands where a folder on the way to {where} should be; move it away"
    return f"check that {where} is writable and has space"


# the causes of a failed write: named with their fix wherever they surface (`name_os_error`)
WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EACCES, errno.EPERM, errno.EROFS})


def name_os_error(e: OSError, path: str | os.PathLike | None = None) -> OSError:
    """A write failure outside the atomic writers (TensorBoard's event file, a removal, a log) as
    one line with the path, the cause and the fix, like theirs; an OSError already named, or of
    another cause, as it is. `path`: the file, when the error does not name one."""
    if getattr(e, "write_cause", None) is not None or e.errno not in WRITE_ERRNOS:
        return e
    where = e.filename if e.filename is not None else path
    if where is None:
        return e
    where = Path(os.fsdecode(where))
    code = errno.errorcode.get(e.errno, str(e.errno))
    err = type(e)(e.errno, f"{where}: could not write ({os.strerror(e.errno)}, {code}); "
                           f"{write_fix(where, e)}, then rerun")
    err.write_cause = e
    return err


def _name_path(path: Path, e: OSError, cleaned: bool = True) -> OSError:
    """The same OSError with the artifact's path, the cause and the fix in its message. An error
    already named by a nested writer (a file inside an `atomic_dir`) is named again from its
    cause, so the message names the artifact, not a temp path."""
    e = getattr(e, "write_cause", e)
    code = errno.errorcode.get(e.errno, str(e.errno))
    left = "nothing of it was left behind" if cleaned else \
        "its temp file could not be removed (`sparserl clean --tmp` removes it)"
    # os.strerror: pyarrow's strerror wraps the same text in its own detail
    err = type(e)(e.errno, f"{path}: could not write ({os.strerror(e.errno)}, {code}); {left}; "
                           f"{write_fix(path, e)}, then rerun")
    err.write_cause = e
    return err


def _settle_tree(root: Path) -> None:
    """Give every file and folder under `root` the umask's mode and fsync them: writers inside an
    `atomic_dir` (safetensors' save_file, transformers) may make 0600 files and close them
    without fsync."""
    fmode, dmode = file_mode(), dir_mode()
    for d, dirs, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            if os.path.islink(p):
                continue
            st = os.stat(p)
            want = file_mode(executable=True) if st.st_mode & 0o100 else fmode
            if st.st_mode & 0o7777 != want:
                os.chmod(p, want)
            fsync_file(p)
        for sub in dirs:
            p = os.path.join(d, sub)
            if not os.path.islink(p) and os.stat(p).st_mode & 0o7777 != dmode:
                os.chmod(p, dmode)
        fsync_dir(d)


@contextlib.contextmanager
def atomic_dir(out_dir: str | os.PathLike):
    """Yield a temp folder beside `out_dir`; on success its files get the umask's modes and are
    fsynced, and it replaces `out_dir`. On error it is removed and an OSError names `out_dir`,
    the cause and the fix (a full disk must not leave hidden partial copies)."""
    out_dir = Path(out_dir)
    tmp = None
    try:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        remove_leftovers(out_dir)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
        os.chmod(tmp, dir_mode())  # mkdtemp makes 0700
        yield tmp
        _settle_tree(tmp)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        tmp.rename(out_dir)
        tmp = None
        fsync_dir(out_dir.parent)
    except OSError as e:
        cleaned = _discard(tmp)
        tmp = None
        if e.errno is None:
            raise
        raise _name_path(out_dir, e, cleaned) from e
    finally:
        _discard(tmp)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    path = Path(path)
    with atomic_file(path) as tmp, open(tmp, "wb") as f:
        f.write(data)
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write_bytes(path, text.encode())


class _WriteErrors(io.RawIOBase):
    """A file that remembers the OSError of a failed write: torch.save turns it into a bare
    RuntimeError ("unexpected pos ..."), which would hide the cause (a full disk)."""

    def __init__(self, f):
        super().__init__()
        self.f, self.error = f, None

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        try:
            return self.f.write(b)
        except OSError as e:
            self.error = self.error or e
            raise

    def flush(self) -> None:
        self.f.flush()


def atomic_torch_save(obj: Any, path: str | os.PathLike, previous: str | os.PathLike | None = None) -> Path:
    """torch.save, atomically (`previous`: as `atomic_file`'s). Through an open file: given a
    path, torch names the zip archive after the file, so the random temp name would make two
    identical saves differ in bytes."""
    import torch
    with atomic_file(path, previous) as tmp, open(tmp, "wb") as f:
        w = _WriteErrors(f)
        try:
            torch.save(obj, w)
            f.flush()
        except RuntimeError:
            if w.error is not None:
                raise w.error from None
            raise
    return Path(path)


class CorruptCheckpointError(RuntimeError):
    """A resume checkpoint cannot be read (truncated or corrupt) and no good previous one is kept."""


def previous_checkpoint(path: str | os.PathLike) -> Path:
    """Where `save_checkpoint` keeps the state that `path` held before (ckpt/last.pt -> ckpt/prev.pt)."""
    path = Path(path)
    return path.with_name(("prev" if path.stem == "last" else path.stem + ".prev") + path.suffix)


def save_checkpoint(obj: Any, path: str | os.PathLike) -> Path:
    """Save a resume state atomically (`atomic_torch_save`), keeping the one it replaces as
    `previous_checkpoint(path)` for `load_checkpoint` to fall back on. The new state is written
    and fsynced under a temp name; then the current one is renamed to the previous one's name and
    the new one to `path`. Renames only: the two names never share a file, so one truncation
    cannot damage both, and a kill at any instant leaves a whole state under one of them (under
    the previous name alone between the renames). A state of an earlier run (no `path`) is
    dropped once the new one is in place."""
    path = Path(path)
    return atomic_torch_save(obj, path, previous=previous_checkpoint(path))


def load_checkpoint(path: str | os.PathLike, *, what: str = "this job",
                    log=None) -> dict | None:
    """The resume state `save_checkpoint` wrote at `path`; None if there is none. A truncated or
    corrupt one, or none where a save was cut off between its renames (the previous one is then
    the last), falls back on the previous state (which then becomes `path`, so the next save keeps
    it), or raises `CorruptCheckpointError` naming the file and how to start over."""
    import pickle
    import zipfile
    import torch
    path = Path(path)
    prev = previous_checkpoint(path)
    if not path.exists() and not prev.exists():
        return None
    bad = []
    for cand in (path, prev):
        if not cand.exists():
            continue
        try:
            st = torch.load(cand, map_location="cpu", weights_only=False)
            if not isinstance(st, dict):
                raise ValueError(f"holds a {type(st).__name__}, not a state dict")
        except (EOFError, RuntimeError, ValueError, pickle.UnpicklingError,
                zipfile.BadZipFile) as e:
            first = (str(e).splitlines() or ["no detail"])[0].split(". ")[0]  # torch adds a paragraph
            bad.append(f"{type(e).__name__}: {first}")
            continue
        if cand == prev:
            why = (f"is truncated or corrupt ({bad[0]})" if bad else
                   "is missing (a save was cut off before the new state took its name)")
            (log or logging.getLogger(__name__).warning)(f"{path} {why}; resuming {what} from the "
                                                         f"previous checkpoint {prev} (step {st.get('step', '?')})")
            os.replace(prev, path)
            fsync_dir(path.parent)
        return st
    if not path.exists():
        raise CorruptCheckpointError(
            f"{prev}: the previous resume checkpoint is truncated or corrupt ({bad[0]}) and {path} is "
            f"missing; delete it (`rm {prev}`) and rerun to start {what} over from step 0")
    if len(bad) == 1:
        raise CorruptCheckpointError(
            f"{path}: the resume checkpoint is truncated or corrupt ({bad[0]}) and no previous "
            f"checkpoint is kept beside it; delete it (`rm {path}`) and rerun to start {what} over "
            "from step 0")
    raise CorruptCheckpointError(
        f"{path}: the resume checkpoint is truncated or corrupt ({bad[0]}), and so is the previous "
        f"one, {prev} ({bad[1]}); delete both (`rm {path} {prev}`) and rerun to start {what} over "
        "from step 0")


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


_IMPORTED = time.time()


def process_started() -> float:
    """When this process started (epoch seconds), from /proc; else when this module was imported."""
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22: start time, clock ticks after boot
        with open("/proc/stat", encoding="ascii") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return _IMPORTED


def write_manifest(path: str | os.PathLike, *, rows: int | None, columns: list[str] | None,
                   cfg: Any = None, extra: dict | None = None) -> Path:
    m = {
        "artifact": Path(path).name,
        # the wall time of the job that wrote it, up to this write: one job is one process
        "process_wall_s": round(time.time() - process_started(), 1),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": git_commit(),
        "config_hash": config_hash(cfg) if cfg is not None else None,
        "scale": (cfg or {}).get("scale") if isinstance(cfg, dict) else None,
        "rows": rows,
        "columns": columns,
        "machine": machine_record(),
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
        try:
            return pd.read_json(path, lines=True)
        except ValueError:  # e.g. integers past int64 (an RNG state), which pandas' parser refuses
            return _jsonl_rows(path)
    if path.suffix == ".csv":
        return pd.read_csv(path)
    raise ValueError(f"{path}: unsupported table suffix {path.suffix!r}")


def _jsonl_rows(path: Path) -> pd.DataFrame:
    """JSON lines read one by one, nested objects flattened to dotted columns; a line that is not
    JSON is named."""
    rows = []
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}: line {i} is not JSON ({e.msg}); a kill during an append "
                                 "leaves such a last line, which the run that wrote it drops") from None
    return pd.json_normalize(rows)


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
            if k not in keys + ["artifact", "columns", "machine"]:
                lines.append(f"  {k}: {v}")
        lines.append(f"  machine: {machine_summary(man.get('machine'))}")
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
