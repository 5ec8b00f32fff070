"""The machine's numerics, recorded in every manifest (`machine`), and whether two artifacts'
bytes are expected to match (`compare`, `sparserl provenance A B`).

Floating-point results depend on more than the config and the code: the SIMD path torch and
numpy dispatch to (from the CPU's instruction set), the BLAS/oneDNN builds, the thread counts
(reduction order) and the library versions. `machine_record()` records what this process knows
of each; torch is described only if this process imported it already, so that writing a manifest
never costs a torch import.

The build and CPU parts are computed once per process; the thread counts are read at each call,
since jobs set them (`torch.set_num_threads`) after start.
"""
from __future__ import annotations

import os
import platform
import re
import sys
import warnings
from typing import Any

CPUINFO = "/proc/cpuinfo"

# flags whose presence changes which kernels run, hence float results (FMA contracts a*b+c into
# one rounding; AVX-512/AMX change reduction widths and allow bf16 paths)
NUMERIC_FLAGS = (
    "sse4_1", "sse4_2", "avx", "f16c", "fma", "avx2", "avx512f", "avx512dq", "avx512bw",
    "avx512vl", "avx512_vnni", "avx512_bf16", "avx512_fp16", "avx_vnni", "amx_tile", "amx_bf16",
    "amx_int8", "asimd", "sve", "sve2", "bf16", "i8mm",  # the last five: arm64
)

# environment variables that change thread counts or force a kernel path
ENV_VARS = (
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS",
    "MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS", "ATEN_CPU_CAPABILITY", "DNNL_MAX_CPU_ISA",
    "ONEDNN_MAX_CPU_ISA", "OPENBLAS_CORETYPE", "NPY_DISABLE_CPU_FEATURES", "SPARSERL_EMULATED_BF16",
)

# flags of CPUs with bf16 matmul kernels; elsewhere torch emulates them, about 10x slower than
# float32 (perf/pretrain_step.py, an AVX2 EPYC: 9.8 s against 0.76 s a step of tiny's policy m)
BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")

# packages whose version can change an artifact's bytes (pyarrow/pandas write parquet), recorded
# when this process imported them
PACKAGES = ("numpy", "pandas", "pyarrow", "torch", "transformers", "tokenizers", "safetensors")

_cache: dict[str, Any] = {}


def _once(key: str, fn):
    """fn() once per process; a failure is not kept (torch may be half-imported at first)."""
    if key not in _cache:
        value = fn()
        if value is None or "error" not in value:
            _cache[key] = value
        return value
    return _cache[key]


def _cpu() -> dict:
    model, vendor, flags, source = None, None, None, None
    try:
        with open(CPUINFO, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in ("model name", "Processor", "cpu model") and model is None:
                    model = value.strip()
                elif key in ("vendor_id", "CPU implementer") and vendor is None:
                    vendor = value.strip()  # MKL picks kernels by vendor as well as by flags
                elif key in ("flags", "Features") and flags is None:
                    flags = set(value.split())
                if model is not None and vendor is not None and flags is not None:
                    break
        source = CPUINFO
    except OSError:
        pass
    if model is None:
        model = platform.processor() or None
    return {
        "model": model,
        "vendor": vendor,
        "arch": platform.machine() or None,
        # None: unknown here (no /proc/cpuinfo), not "none of them"
        "flags": sorted(f for f in NUMERIC_FLAGS if f in flags) if flags is not None else None,
        "flags_source": source,
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
    }


def _platform() -> dict:
    libc = " ".join(x for x in platform.libc_ver() if x) or None  # libm's exp/log differ by version
    return {"system": platform.platform(), "python": platform.python_version(), "libc": libc}


def _find(pattern: str, text: str) -> str | None:
    m = re.search(pattern, text)
    return m.group(1).strip() if m else None


def _torch_build() -> dict:
    try:
        torch = sys.modules["torch"]
        show = torch.__config__.show()
        parallel = torch.__config__.parallel_info()
        return {
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "blas": _find(r"BLAS_INFO=([^,\s]+)", show),
            "lapack": _find(r"LAPACK_INFO=([^,\s]+)", show),
            "mkl": _find(r"Math Kernel Library Version ([^\s-]+)", show),
            "mkldnn": _find(r"(?:MKL-DNN|oneDNN) v([\d.]+)", show),
            "openmp": _find(r"OpenMP (\d+)", show),
            "parallel_backend": _find(r"ATen parallel backend: (.+)", parallel),
            "commit": _find(r"COMMIT_SHA=([0-9a-f]+)", show),
        }
    except Exception as e:  # a stub or half-imported torch: say so, do not fail the write
        return {"error": f"{type(e).__name__}: {e}"[:200]}


def _numpy_build() -> dict | None:
    np = sys.modules.get("numpy")
    if np is None:
        return None
    out: dict[str, Any] = {"blas": None, "simd": None}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cfg = np.show_config(mode="dicts")
        blas = (cfg.get("Build Dependencies") or {}).get("blas") or {}
        out["blas"] = " ".join(str(blas[k]) for k in ("name", "version") if blas.get(k)) or None
        out["simd"] = (cfg.get("SIMD Extensions") or {}).get("found")
    except Exception:  # numpy < 1.25 has no mode="dicts"; the BLAS libraries below still say
        pass
    return out


def _blas_libs() -> dict | None:
    """The BLAS/OpenMP libraries loaded now, with the kernel set each picked at run time
    (OpenBLAS's DYNAMIC_ARCH chooses by CPU) and its thread count."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return None
    with warnings.catch_warnings():  # it warns when two OpenMP runtimes are loaded
        warnings.simplefilter("ignore")
        info = threadpool_info()
    libs = {}
    for lib in info:
        name = f"{lib.get('internal_api')} ({os.path.basename(lib.get('prefix') or '?')})"
        libs[name] = {k: lib.get(k) for k in ("version", "architecture", "threading_layer",
                                              "num_threads") if lib.get(k) is not None}
    return libs


def _versions() -> dict:
    out = {}
    for name in PACKAGES:
        mod = sys.modules.get(name)
        if mod is not None:
            out[name] = str(getattr(mod, "__version__", "unknown"))
    return out


def native_bf16() -> bool | None:
    """Whether this CPU has bf16 matmul kernels (`BF16_FLAGS`); None when its flags are unknown."""
    flags = _once("cpu", _cpu)["flags"]
    return None if flags is None else any(f in flags for f in BF16_FLAGS)


def matmul_precision(precision: str, setting: str, log=None) -> str:
    """The precision a `precision: bf16` setting runs at here: bf16 where the CPU multiplies it
    natively (or its flags are unknown), float32 where torch would emulate it, unless
    SPARSERL_EMULATED_BF16=1 asks for bf16 anyway. The choice follows from the CPU flags and that
    variable, both in every manifest's machine record; artifacts of CPUs with other flags differ in
    their bytes anyway."""
    if precision != "bf16" or native_bf16() is not False or os.environ.get("SPARSERL_EMULATED_BF16") == "1":
        return precision
    if log is not None:
        log(f"{setting}: bf16, but this CPU has no bf16 matmul kernels (none of {', '.join(BF16_FLAGS)}): "
            "float32 here, about 10x faster than emulated bf16 (SPARSERL_EMULATED_BF16=1 keeps bf16)")
    return "fp32"


def machine_record() -> dict:
    """What this process's numerics depend on (see the module doc). torch's part is null when
    this process has not imported torch: the artifact was then made without it."""
    rec: dict[str, Any] = {
        "cpu": _once("cpu", _cpu),
        "platform": _once("platform", _platform),
        "versions": _versions(),
        "torch": None,
        "numpy": _once("numpy", _numpy_build) if "numpy" in sys.modules else None,
        "blas_libs": _blas_libs(),
        "env": {k: os.environ[k] for k in ENV_VARS if k in os.environ},
    }
    torch = sys.modules.get("torch")
    if torch is not None:
        t = dict(_once("torch", _torch_build))
        try:  # set at run time: read at each call
            t["threads"] = torch.get_num_threads()
            t["interop_threads"] = torch.get_num_interop_threads()
            t["matmul_precision"] = torch.get_float32_matmul_precision()  # "medium" allows bf16
        except Exception as e:
            t.setdefault("error", f"{type(e).__name__}: {e}"[:200])
        rec["torch"] = t
    return rec


# --- comparison ------------------------------------------------------------------------------

# recorded for the reader, but they do not change results by themselves
INFO_KEYS = {"cpu.model", "cpu.cores", "cpu.flags_source", "platform.system",
             "torch.interop_threads", "torch.commit", "torch.error"}
# manifest keys outside `machine` that decide the bytes too
MANIFEST_KEYS = ("git_commit", "config_hash")


def _flatten(x: Any, prefix: str = "") -> dict:
    if isinstance(x, dict):
        out = {}
        for k, v in x.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if x is None and prefix.count(".") == 0:
        return {}  # a section not recorded (torch not imported)
    return {prefix: x}


def _show(v: Any) -> str:
    if isinstance(v, list):
        return "[" + ", ".join(map(str, v)) + "]"
    return "unset" if v is None else str(v)


def compare(a: dict, b: dict, names: tuple[str, str] = ("A", "B")) -> tuple[bool | None, list[str], list[str]]:
    """Whether two manifests' artifacts are expected to have equal bytes: (verdict, differences,
    notes). The verdict is True when the config, the commit and every recorded numerics key
    agree, False when one differs, None when a side has no machine record (an older manifest).
    Notes say what was not compared (a key one side did not record) or does not matter alone."""
    na, nb = names
    diffs, notes = [], []
    for k in MANIFEST_KEYS:
        if k in a and k in b and a[k] != b[k]:
            diffs.append(f"{k}: {_show(a[k])} ({na}) vs {_show(b[k])} ({nb})")
    for side, m in ((na, a), (nb, b)):
        if str(m.get("git_commit", "")).endswith("-dirty"):
            notes.append(f"{side} was made from a checkout with uncommitted changes: its code is "
                         "not pinned by the commit")
    ma, mb = a.get("machine"), b.get("machine")
    if not isinstance(ma, dict) or not isinstance(mb, dict):
        missing = [s for s, m in ((na, ma), (nb, mb)) if not isinstance(m, dict)]
        notes.append(f"no machine record in {' and '.join(missing)} (written before manifests "
                     "recorded it); rerun the rule that makes it to compare")
        return (False if diffs else None), diffs, notes
    fa, fb = _flatten(ma), _flatten(mb)
    absent = {sec for sec in ("torch", "numpy", "blas_libs") if ma.get(sec) is None or mb.get(sec) is None}
    for sec in sorted(absent):
        if ma.get(sec) is not None or mb.get(sec) is not None:
            side = na if ma.get(sec) is None else nb
            notes.append(f"{side} did not record {sec} (not loaded in the process that made it): "
                         "not compared")
    for k in sorted(set(fa) | set(fb)):
        if k.split(".")[0] in absent:
            continue
        if not k.startswith("env.") and (k not in fa or k not in fb):  # an unset env var is a value
            side = na if k in fa else nb
            notes.append(f"machine.{k}: recorded in {side} only ({_show(fa.get(k, fb.get(k)))})")
            continue
        va, vb = fa.get(k), fb.get(k)
        if isinstance(va, list) and isinstance(vb, list):
            sa, sb = set(map(str, va)), set(map(str, vb))
            if sa != sb:
                parts = [f"{', '.join(sorted(o))} in {s} only" for o, s in ((sa - sb, na), (sb - sa, nb)) if o]
                diffs.append(f"machine.{k}: {'; '.join(parts)}")
            continue
        if va == vb:
            continue
        line = f"machine.{k}: {_show(va)} ({na}) vs {_show(vb)} ({nb})"
        if k in INFO_KEYS:
            notes.append(line + " (does not change results by itself)")
        else:
            diffs.append(line)
    return (not diffs), diffs, notes


def summary(m: dict | None) -> str:
    """One line for `sparserl show`: CPU, ISA path, threads, versions."""
    if not isinstance(m, dict):
        return "not recorded"
    cpu, t = m.get("cpu") or {}, m.get("torch")
    parts = [f"{cpu.get('model') or '?'} ({cpu.get('arch') or '?'})"]
    if t:
        parts.append(f"torch {m.get('versions', {}).get('torch', '?')} {t.get('cpu_capability')} "
                     f"threads={t.get('threads')}")
    else:
        parts.append("no torch")
    env = m.get("env") or {}
    parts.append(" ".join(f"{k}={env[k]}" for k in sorted(env)) or "no thread env")
    parts.append(f"numpy {m.get('versions', {}).get('numpy', '?')}")
    return ", ".join(parts) + "; `sparserl provenance A B` compares two"
