import json
import os

import pandas as pd
import pytest

from sparserl.core.artifacts import (iter_jsonl, read_manifest, read_table, summarize, write_json,
                                write_table)
from sparserl.cli import main


def test_write_table_is_atomic_and_has_manifest(tmp_path):
    df = pd.DataFrame({"prompt_id": ["a", "b"], "n": [64, 64], "successes": [3, 60]})
    p = write_table(df, tmp_path / "x" / "cache.parquet", cfg={"scale": "tiny", "seed": 0})
    assert read_table(p).equals(df)
    man = read_manifest(p)
    assert man["rows"] == 2 and man["scale"] == "tiny" and man["columns"] == list(df.columns)
    assert man["config_hash"] and man["git_commit"] and man["created"]
    # no temporary files left behind
    assert sorted(os.listdir(p.parent)) == ["cache.parquet", "cache.parquet.manifest.json"]


def test_failed_write_keeps_previous_artifact(tmp_path):
    p = write_table(pd.DataFrame({"a": [1]}), tmp_path / "t.parquet")

    class Boom(pd.DataFrame):
        def to_parquet(self, *a, **k):
            raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        write_table(Boom({"a": [2]}), p)
    assert read_table(p)["a"].tolist() == [1]
    assert sorted(os.listdir(tmp_path)) == ["t.parquet", "t.parquet.manifest.json"]


def test_show_prints_summary(tmp_path, capsys):
    p = write_table(pd.DataFrame({"prompt_id": ["a", "b", "c"], "p": [0.1, 0.5, 0.9]}),
                    tmp_path / "t.parquet", cfg={"scale": "tiny"})
    j = write_json({"mean": 0.5}, tmp_path / "m.json")
    assert main(["show", str(p), str(j)]) == 0
    out = capsys.readouterr().out
    assert "3 rows x 2 columns" in out and "mean=0.5" in out and "scale=tiny" in out
    assert '"mean": 0.5' in out


def test_iter_jsonl_names_file_and_line(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text(json.dumps({"a": 1}) + "\n{oops\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:2"):
        list(iter_jsonl(p))


def test_atomic_torch_save_is_byte_deterministic(tmp_path):
    """Two identical saves give the same bytes (torch names the archive after the file it writes,
    and atomic_file's temp name is random): the tiny DAG's .pt artifacts agree across runs."""
    import torch
    from sparserl.core.artifacts import atomic_torch_save
    obj = {"w": torch.arange(6.0).reshape(2, 3), "extra": {"epochs": 1}}
    a = atomic_torch_save(obj, tmp_path / "a.pt").read_bytes()
    b = atomic_torch_save(obj, tmp_path / "a.pt").read_bytes()
    assert a == b
    assert torch.equal(torch.load(tmp_path / "a.pt")["w"], obj["w"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.pt"]  # no temp file left


# durability, modes and named write failures ----------------------------------------
def _leftovers(root):
    """Temp files and hidden temp folders of the atomic writers under `root`."""
    return sorted(str(p) for p in root.rglob("*") if p.name.endswith(".tmp") or p.name.startswith("."))


def test_atomic_writes_fsync_the_file_before_the_rename_and_the_folder_after(tmp_path, monkeypatch):
    from pathlib import Path
    from sparserl.core.artifacts import atomic_dir, atomic_write_text
    events = []
    fsync, replace = os.fsync, os.replace

    def counting_fsync(fd):
        events.append(("fsync", os.fstat(fd).st_ino))
        fsync(fd)

    def recording_replace(src, dst, **kw):
        events.append(("replace", Path(dst).name))
        replace(src, dst, **kw)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    monkeypatch.setattr(os, "replace", recording_replace)
    p = atomic_write_text(tmp_path / "a.txt", "x")
    assert events == [("fsync", p.stat().st_ino), ("replace", "a.txt"), ("fsync", tmp_path.stat().st_ino)]
    events.clear()
    t = write_table(pd.DataFrame({"a": [1]}), tmp_path / "t.parquet")  # pyarrow closes without fsync
    assert ("fsync", t.stat().st_ino) in events
    events.clear()
    with atomic_dir(tmp_path / "policy") as d:
        (d / "sub").mkdir()
        (d / "sub" / "w.bin").write_bytes(b"1")
    out = tmp_path / "policy"
    synced = {i for kind, i in events if kind == "fsync"}
    assert {(out / "sub" / "w.bin").stat().st_ino, (out / "sub").stat().st_ino, out.stat().st_ino} <= synced
    assert events[-1] == ("fsync", tmp_path.stat().st_ino)  # the rename itself, after it


def test_files_and_folders_get_the_umasks_modes_weights_included(tmp_path, umask022):
    """safetensors' save_file writes 0600; inside an atomic_dir (transformers' save_pretrained uses
    it) the checkpoint still ends 0644, folders 0755, and a stricter umask is respected."""
    import torch
    from safetensors.torch import save_file
    from sparserl.core.artifacts import atomic_dir, save_checkpoint
    with atomic_dir(tmp_path / "ckpt") as d:
        save_file({"w": torch.zeros(3)}, str(d / "model.safetensors"))
        (d / "sub").mkdir(mode=0o700)
    save_checkpoint({"step": 1}, tmp_path / "state" / "last.pt")
    save_checkpoint({"step": 2}, tmp_path / "state" / "last.pt")
    write_json({"a": 1}, tmp_path / "m.json")
    modes = {str(p.relative_to(tmp_path)): p.stat().st_mode & 0o777 for p in tmp_path.rglob("*")}
    assert modes == {"ckpt": 0o755, "ckpt/model.safetensors": 0o644, "ckpt/sub": 0o755, "state": 0o755,
                     "state/last.pt": 0o644, "state/prev.pt": 0o644, "m.json": 0o644,
                     "m.json.manifest.json": 0o644}
    os.umask(0o027)
    with atomic_dir(tmp_path / "group") as d:
        save_file({"w": torch.zeros(3)}, str(d / "model.safetensors"))
    p = write_json({"a": 1}, tmp_path / "g.json")
    assert (tmp_path / "group").stat().st_mode & 0o777 == 0o750
    assert (tmp_path / "group" / "model.safetensors").stat().st_mode & 0o777 == 0o640
    assert p.stat().st_mode & 0o777 == 0o640


def test_a_full_disk_names_the_artifact_the_cause_and_the_fix_and_leaves_nothing(tmp_path, monkeypatch):
    import errno
    p = write_json({"a": 1}, tmp_path / "m.json")

    def full(*a, **k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(OSError) as e:
        write_json({"a": 2}, p)
    assert e.value.errno == errno.ENOSPC
    assert str(e.value) == (f"[Errno 28] {p}: could not write (No space left on device, ENOSPC); nothing of it "
                            f"was left behind; free space on the disk that holds {tmp_path} (or point "
                            "results_dir elsewhere), then rerun")
    assert json.loads(p.read_text()) == {"a": 1}
    assert sorted(os.listdir(tmp_path)) == ["m.json", "m.json.manifest.json"]


def test_a_temp_file_or_folder_that_cannot_be_made_is_named_too(tmp_path, monkeypatch):
    """Making the temp file or folder is inside the guarded block: its failure gets the message."""
    import errno
    import tempfile
    from sparserl.core.artifacts import atomic_dir

    def refuse(code):
        def f(*a, **k):
            raise OSError(code, os.strerror(code))
        return f

    monkeypatch.setattr(tempfile, "mkstemp", refuse(errno.EACCES))
    with pytest.raises(PermissionError, match=rf"{tmp_path / 't.parquet'}: could not write \(Permission "
                                              rf"denied, EACCES\).*make {tmp_path} writable"):
        write_table(pd.DataFrame({"a": [1]}), tmp_path / "t.parquet")
    monkeypatch.setattr(tempfile, "mkdtemp", refuse(errno.EROFS))
    with pytest.raises(OSError, match=rf"{tmp_path / 'policy'}: could not write \(Read-only file system, "
                                      rf"EROFS\).*{tmp_path} is on a read-only filesystem"):
        with atomic_dir(tmp_path / "policy"):
            pass
    monkeypatch.undo()
    (tmp_path / "file").write_text("x")  # a file where a folder of the artifact's path should be
    with pytest.raises(OSError, match=rf"{tmp_path / 'file' / 'x.parquet'}: could not write .*a file stands "
                                      "where a folder"):
        write_table(pd.DataFrame({"a": [1]}), tmp_path / "file" / "x.parquet")
    assert sorted(os.listdir(tmp_path)) == ["file"]


def test_writes_past_the_file_size_limit_name_the_artifact_and_leave_no_temp_files(tmp_path):
    """RLIMIT_FSIZE in a child (root passes every permission check, not this limit): a table, a
    resume state (torch.save hides the cause in a RuntimeError) and a checkpoint folder each fail
    with the path, the cause and the fix; no temp file stays, and the state saved before is kept."""
    import subprocess
    import sys
    import textwrap
    script = textwrap.dedent("""
        import resource, sys
        from pathlib import Path
        import numpy as np, pandas as pd, torch
        from sparserl.core.artifacts import atomic_dir, atomic_write_bytes, save_checkpoint, write_table
        out = Path(sys.argv[1])
        save_checkpoint({"step": 1}, out / "ckpt" / "last.pt")
        resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000))
        writes = [lambda: write_table(pd.DataFrame({"a": np.arange(100000.0)}), out / "t.parquet"),
                  lambda: save_checkpoint({"step": 2, "w": torch.zeros(100000)}, out / "ckpt" / "last.pt")]
        def folder():
            with atomic_dir(out / "policy") as tmp:
                atomic_write_bytes(tmp / "model.safetensors", bytes(100000))
        for write in writes + [folder]:
            try:
                write()
            except OSError as e:
                print(e)
    """)
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 3, out.stdout
    for line, name in zip(lines, ["t.parquet", "ckpt/last.pt", "policy"]):
        assert f"{tmp_path / name}: could not write (File too large, EFBIG); nothing of it was left behind; " \
               "raise the file-size limit this job runs under (`ulimit -f`" in line, line
    assert _leftovers(tmp_path) == []
    import torch
    assert torch.load(tmp_path / "ckpt" / "last.pt", weights_only=False)["step"] == 1
    assert not (tmp_path / "t.parquet").exists() and not (tmp_path / "policy").exists()


def test_load_checkpoint_falls_back_on_the_previous_state_or_names_the_fix(tmp_path):
    from sparserl.core.artifacts import (CorruptCheckpointError, load_checkpoint, previous_checkpoint,
                                         save_checkpoint)
    last = tmp_path / "ckpt" / "last.pt"
    prev = previous_checkpoint(last)
    assert prev == tmp_path / "ckpt" / "prev.pt" and load_checkpoint(last) is None
    save_checkpoint({"step": 2}, last)
    save_checkpoint({"step": 4}, last)
    last.write_bytes(last.read_bytes()[:50])
    said = []
    assert load_checkpoint(last, what="the run x", log=said.append)["step"] == 2
    assert said and f"resuming the run x from the previous checkpoint {prev} (step 2)" in said[0]
    assert sorted(os.listdir(last.parent)) == ["last.pt"]
    save_checkpoint({"step": 6}, last)
    last.write_bytes(b"junk")
    prev.write_bytes(b"")
    with pytest.raises(CorruptCheckpointError, match=rf"and so is the previous one, {prev} \(EOFError.*delete "
                                                     rf"both \(`rm {last} {prev}`\) and rerun to start the run x "
                                                     "over from step 0"):
        load_checkpoint(last, what="the run x")
    last.unlink()
    save_checkpoint({"step": 1}, last)  # a fresh start drops the old run's previous state
    assert not prev.exists()


def test_saves_keep_the_previous_state_in_a_file_of_its_own(tmp_path):
    """last.pt and prev.pt are two files, never two names of one (a hard link), so truncating the
    last leaves the previous whole; a save cut off between its two renames (last.pt missing)
    resumes from prev.pt, and a damaged prev.pt alone is named with the fix."""
    from sparserl.core.artifacts import (CorruptCheckpointError, load_checkpoint, previous_checkpoint,
                                         save_checkpoint)
    last = tmp_path / "ckpt" / "last.pt"
    prev = previous_checkpoint(last)
    for step in (1, 2, 3):
        save_checkpoint({"step": step}, last)
        assert last.stat().st_nlink == 1
    assert prev.stat().st_nlink == 1 and prev.stat().st_ino != last.stat().st_ino
    with open(last, "r+b") as f:
        f.truncate(10)
    said = []
    assert load_checkpoint(last, log=said.append)["step"] == 2
    os.replace(last, prev)  # as a kill between the renames leaves it
    assert load_checkpoint(last, what="the run x", log=said.append)["step"] == 2
    assert said[-1] == (f"{last} is missing (a save was cut off before the new state took its name); "
                        f"resuming the run x from the previous checkpoint {prev} (step 2)")
    assert sorted(os.listdir(last.parent)) == ["last.pt"]
    os.replace(last, prev)
    prev.write_bytes(b"")
    with pytest.raises(CorruptCheckpointError) as e:
        load_checkpoint(last, what="the run x")
    assert str(e.value) == (f"{prev}: the previous resume checkpoint is truncated or corrupt (EOFError: Ran out "
                            f"of input) and {last} is missing; delete it (`rm {prev}`) and rerun to start the "
                            "run x over from step 0")


# --------------------------------------------------------------------------- writes that fail mid-run


def _unshare_works() -> bool:
    """Whether this process may mount in a mount namespace of its own (root, or a user namespace)."""
    import shutil
    import subprocess
    if shutil.which("unshare") is None:
        return False
    try:
        return subprocess.run(["unshare", "-m", "true"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _fill_event_file(logdir):
    """Point the run log's event file at /dev/full: the kernel fails each append with ENOSPC."""
    [event] = logdir.glob("events.out.tfevents.*")
    event.unlink()
    event.symlink_to("/dev/full")
    return event


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_tensorboard_write_that_fails_in_its_thread_is_one_line_in_the_main_flow(tmp_path, capfd):
    """TensorBoard writes in a thread of its own: its failure is raised once, named, in the main
    flow, and Python prints no "Exception in thread" for it."""
    from sparserl.core.runlog import RunLog
    logdir = tmp_path / "tensorboard"
    tb = RunLog({}, logdir, "x")
    tb.scalars({"a": 1.0}, 1)
    tb.tb.flush()
    event = _fill_event_file(logdir)
    with pytest.raises(OSError) as e:
        for step in range(2, 500):  # the thread's error reaches a later write, or the close
            tb.scalars({"a": 1.0}, step)
        tb.close()
    assert str(e.value) == (f"[Errno 28] {event}: could not write (No space left on device, ENOSPC); free "
                            f"space on the disk that holds {logdir} (or point results_dir elsewhere), then rerun")
    tb.close()  # said once: the writer is gone
    err = capfd.readouterr().err
    assert "Exception in thread" not in err and "Traceback" not in err, err


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_run_that_fails_keeps_its_own_error_over_the_event_files(tmp_path, capfd):
    from sparserl.core.runlog import RunLog
    logdir = tmp_path / "tensorboard"
    with pytest.raises(ValueError, match="the run's own error"):
        with RunLog({}, logdir, "x") as tb:
            tb.scalars({"a": 1.0}, 1)
            tb.tb.flush()
            _fill_event_file(logdir)
            tb.scalars({"a": 2.0}, 2)
            raise ValueError("the run's own error")
    err = capfd.readouterr().err
    assert "Exception in thread" not in err and "Traceback" not in err, err


@pytest.mark.e2e  # a child in its own mount namespace
@pytest.mark.skipif(not _unshare_works(), reason="needs `unshare -m` (root or user namespaces)")
def test_a_run_log_folder_that_turns_read_only_mid_run_is_named_with_the_fix(tmp_path):
    """A real read-only filesystem: the folder is bind-mounted read-only on itself mid-run, in a
    mount namespace of the child's own."""
    import subprocess
    import sys
    import textwrap
    script = textwrap.dedent("""
        import subprocess, sys
        from pathlib import Path
        from sparserl.core.runlog import RunLog
        logdir = Path(sys.argv[1])
        tb = RunLog({}, logdir, "x")
        tb.scalars({"a": 1.0}, 1)
        tb.tb.flush()
        subprocess.run(["mount", "--bind", "-o", "ro", str(logdir), str(logdir)], check=True)
        try:
            for step in range(2, 500):
                tb.scalars({"a": 1.0}, step)
            tb.close()
        except OSError as e:
            print(e)
    """)
    logdir = tmp_path / "tensorboard"
    out = subprocess.run(["unshare", "-m", sys.executable, "-c", script, str(logdir)], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    [event] = logdir.glob("events.out.tfevents.*")
    assert out.stdout == (f"[Errno 30] {event}: could not write (Read-only file system, EROFS); {logdir} is on "
                          "a read-only filesystem; point results_dir at a writable one, then rerun\n")
    assert "Exception in thread" not in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_an_os_error_outside_the_atomic_writers_gets_the_path_and_the_fix(tmp_path):
    import errno
    from sparserl.core.artifacts import name_os_error
    e = name_os_error(PermissionError(errno.EACCES, "Permission denied", os.fsencode(tmp_path / "x.log")))
    assert isinstance(e, PermissionError)
    assert str(e) == (f"[Errno 13] {tmp_path / 'x.log'}: could not write (Permission denied, EACCES); make "
                      f"{tmp_path} writable for this user (or point results_dir elsewhere), then rerun")
    assert name_os_error(e) is e  # named once
    other = FileNotFoundError(errno.ENOENT, "No such file or directory", "x")
    assert name_os_error(other) is other  # not a write failure: as it is
