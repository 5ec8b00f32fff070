"""The manifests' `machine` record and `sparserl provenance` (sparserl.core.machine)."""
import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import sparserl
from sparserl.cli import main
from sparserl.core import machine
from sparserl.core.artifacts import (
    manifest_path,
    read_manifest,
    write_json,
    write_table,
)

SRC = str(Path(sparserl.__file__).resolve().parents[1])

# a record as a torch job on an AVX-512 machine writes it; tests edit copies
RECORD = {
    "cpu": {"model": "Intel(R) Xeon(R) Processor", "vendor": "GenuineIntel", "arch": "x86_64", "cores": 2,
            "flags": ["avx", "avx2", "avx512f", "fma"], "flags_source": "/proc/cpuinfo"},
    "platform": {"system": "Linux-6", "python": "3.11.7", "libc": "glibc 2.36"},
    "versions": {"numpy": "2.3.5", "torch": "2.13.0+cpu"},
    "torch": {"cpu_capability": "AVX512", "blas": "mkl", "lapack": "mkl", "mkl": "2024.2",
              "mkldnn": "3.12.0", "openmp": "201511", "parallel_backend": "OpenMP",
              "threads": 1, "interop_threads": 2, "matmul_precision": "highest"},
    "numpy": {"blas": "scipy-openblas 0.3.30", "simd": ["AVX2", "AVX512F"]},
    "blas_libs": {"openblas (libscipy_openblas)": {"version": "0.3.30", "architecture": "SkylakeX",
                                                   "num_threads": 1}},
    "env": {"OMP_NUM_THREADS": "1"},
}
MANIFEST = {"artifact": "s.parquet", "git_commit": "abc", "config_hash": "h1", "rows": 3,
            "machine": RECORD}


def _edit(path: str, value):
    """A copy of MANIFEST with machine.<path> set to value (None deletes it)."""
    m = copy.deepcopy(MANIFEST)
    *head, last = path.split(".")
    d = m["machine"]
    for k in head:
        d = d[k]
    if value is None:
        del d[last]
    else:
        d[last] = value
    return m


def test_the_record_has_the_numerics_keys_and_follows_torchs_thread_count(tmp_path):
    torch = pytest.importorskip("torch")
    rec = machine.machine_record()
    assert set(rec) == {"cpu", "platform", "versions", "torch", "numpy", "blas_libs", "env"}
    assert {"model", "vendor", "arch", "flags"} <= set(rec["cpu"])
    assert {"cpu_capability", "blas", "mkldnn", "openmp", "threads", "matmul_precision"} <= set(rec["torch"])
    assert rec["torch"]["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert rec["versions"]["torch"] == torch.__version__ and "numpy" in rec["versions"]
    if os.path.exists("/proc/cpuinfo"):
        assert isinstance(rec["cpu"]["flags"], list)
        assert set(rec["cpu"]["flags"]) <= set(machine.NUMERIC_FLAGS)
    before = torch.get_num_threads()
    try:  # a job sets its threads after start: each manifest reads them then
        torch.set_num_threads(2 if before != 2 else 1)
        assert machine.machine_record()["torch"]["threads"] == torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


def test_manifests_keep_their_keys_and_add_machine_and_tables_keep_their_bytes(tmp_path):
    df = pd.DataFrame({"a": [1.0, 2.5], "b": ["x", "y"]})
    p = write_table(df, tmp_path / "t.parquet", cfg={"scale": "tiny"})
    man = read_manifest(p)
    assert set(man) == {"artifact", "created", "git_commit", "config_hash", "scale", "rows",
                        "columns", "machine", "process_wall_s"}
    assert 0 <= man["process_wall_s"] < 24 * 3600  # this test process's age, not an epoch
    assert list(man) == sorted(man)  # written with sorted keys, as before
    df.to_parquet(tmp_path / "plain.parquet", index=False)
    assert p.read_bytes() == (tmp_path / "plain.parquet").read_bytes()
    assert oct(manifest_path(p).stat().st_mode & 0o777) == oct(0o666 & ~_umask())


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def test_the_build_and_cpu_parts_are_computed_once_per_process(tmp_path, monkeypatch):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("vendor_id\t: FakeVendor\nmodel name\t: Fake CPU\nflags\t\t: fpu sse avx fma\n")
    monkeypatch.setattr(machine, "CPUINFO", str(cpuinfo))
    monkeypatch.setattr(machine, "_cache", {})
    calls = []
    real = machine._torch_build
    monkeypatch.setattr(machine, "_torch_build", lambda: calls.append(1) or real())
    monkeypatch.setitem(sys.modules, "torch", pytest.importorskip("torch"))
    first = machine.machine_record()
    assert first["cpu"]["model"] == "Fake CPU" and first["cpu"]["flags"] == ["avx", "fma"]
    assert first["cpu"]["vendor"] == "FakeVendor"
    cpuinfo.write_text("model name\t: Other CPU\nflags\t\t: avx512f\n")
    second = machine.machine_record()
    assert second["cpu"] == first["cpu"] and len(calls) == 1


def test_a_process_without_torch_records_none_and_does_not_import_it(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    code = f"""
import json, sys
from sparserl.core.artifacts import write_json, read_manifest
from sparserl.cli import main
for d in ({str(a)!r}, {str(b)!r}):
    write_json({{"x": 1}}, d + "/m.json")
rc = main(["provenance", {str(a)!r} + "/m.json", {str(b)!r} + "/m.json"])
m = read_manifest({str(a)!r} + "/m.json")["machine"]
print(json.dumps({{"rc": rc, "torch": "torch" in sys.modules, "record": m}}))
"""
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         check=True, timeout=120)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["torch"] is False and got["rc"] == 0
    assert got["record"]["torch"] is None and "torch" not in got["record"]["versions"]
    assert got["record"]["cpu"]["arch"] and "numpy" in got["record"]["versions"]
    assert "expected equal" in out.stdout


def test_identical_records_are_expected_equal():
    equal, diffs, notes = machine.compare(MANIFEST, copy.deepcopy(MANIFEST))
    assert equal is True and diffs == [] and notes == []
    # another CPU model with the same flags and paths: equal, said in a note
    equal, diffs, notes = machine.compare(MANIFEST, _edit("cpu.model", "AMD EPYC"))
    assert equal is True and diffs == [] and any("cpu.model" in n for n in notes)


@pytest.mark.parametrize("path,value,expect", [
    ("torch.cpu_capability", "AVX2", "machine.torch.cpu_capability: AVX512 (A) vs AVX2 (B)"),
    ("cpu.flags", ["avx", "avx2", "fma"], "machine.cpu.flags: avx512f in A only"),
    ("blas_libs.openblas (libscipy_openblas).architecture", "Haswell", "SkylakeX (A) vs Haswell (B)"),
    ("cpu.vendor", "AuthenticAMD", "machine.cpu.vendor: GenuineIntel (A) vs AuthenticAMD (B)"),
    ("torch.threads", 4, "machine.torch.threads: 1 (A) vs 4 (B)"),
    ("env.OMP_NUM_THREADS", None, "machine.env.OMP_NUM_THREADS: 1 (A) vs unset (B)"),
    ("env.MKL_NUM_THREADS", "2", "machine.env.MKL_NUM_THREADS: unset (A) vs 2 (B)"),
    ("versions.torch", "2.12.0+cpu", "machine.versions.torch: 2.13.0+cpu (A) vs 2.12.0+cpu (B)"),
    ("platform.libc", "glibc 2.39", "machine.platform.libc"),
])
def test_a_differing_isa_thread_count_or_version_is_named(path, value, expect):
    equal, diffs, _ = machine.compare(MANIFEST, _edit(path, value))
    assert equal is False
    assert len(diffs) == 1 and expect in diffs[0]


def test_commit_config_and_missing_records_decide_too():
    other = {**MANIFEST, "config_hash": "h2"}
    assert machine.compare(MANIFEST, other)[1] == ["config_hash: h1 (A) vs h2 (B)"]
    old = {k: v for k, v in MANIFEST.items() if k != "machine"}
    equal, diffs, notes = machine.compare(MANIFEST, old)
    assert equal is None and diffs == [] and any("no machine record in B" in n for n in notes)
    # made without torch on one side: torch's path is not compared, and the note says so
    equal, _, notes = machine.compare(MANIFEST, _edit("torch", None))
    assert equal is True and any("B did not record torch" in n for n in notes)


def test_provenance_cli_on_artifacts_and_trees(tmp_path, capsys):
    a, b = tmp_path / "a" / "t.parquet", tmp_path / "b" / "t.parquet"
    for p in (a, b):
        write_table(pd.DataFrame({"x": [1.0]}), p, cfg={"scale": "tiny"})
    assert main(["provenance", str(a), str(b) + ".manifest.json"]) == 0
    assert "expected equal" in capsys.readouterr().out
    m = read_manifest(b)
    m["machine"]["env"]["OMP_NUM_THREADS"] = "7"
    manifest_path(b).write_text(json.dumps(m))
    assert main(["provenance", str(a), str(b)]) == 1
    out = capsys.readouterr().out
    assert "not expected equal (1 difference)" in out and "OMP_NUM_THREADS" in out and "vs 7 (B)" in out
    write_json({"y": 1}, tmp_path / "a" / "only_a.json")
    assert main(["provenance", str(a.parent), str(b.parent)]) == 1
    out = capsys.readouterr().out
    assert "not expected equal: 1 of 1 artifacts" in out and "[1: t.parquet]" in out
    assert "in A only (not compared): [1: only_a.json]" in out
    assert main(["provenance", str(a), str(tmp_path / "nothing")]) == 1  # named by main's OSError line
    assert main(["show", str(a)]) == 0
    assert "machine: " in capsys.readouterr().out
