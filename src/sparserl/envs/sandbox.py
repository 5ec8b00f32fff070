"""Run untrusted Python functions in a sandboxed subprocess, a whole batch per process.

Why: the CodeIO task of Le Critique (Privileged Value Functions for LLM Reinforcement Learning,
arXiv 2608.16739; Section 4.1) grades a predicted input by running the task's reference program on
it, and reasoning-gym's CodeIO programs are LLM-rewritten code that its own docs say to run "with
caution". An RL step grades a batch of responses, so the batch pays for ONE process (~30 ms), not
one per response: `run_jobs` sends every call to a single child that runs them in order, each under
its own alarm, and streams one result line per call back. A call that fails, hangs or kills its
process costs only that call: the parent marks it and restarts a fresh child for the calls after it.
Bad programs never raise here; they give error `CallResult`s.

Two isolation levels (`Limits.isolation`; docs/sandbox.md lists each layer and the attacks it
stops). "strong": the child runs under bubblewrap as uid 65534 in new user/mount/pid/net/ipc/uts
namespaces, sees read-only only /usr, the interpreter's install and site-packages (no project,
/work, /home or /root), writes only its scratch folder (and a small private /tmp), and has a
seccomp filter (no sockets but AF_UNIX, no fork, no ptrace/mount/unshare/setns/keyctl/bpf/perf);
the layers below stay on as extra walls. "weak" (the fallback where bwrap is missing) is the
layers below alone. CodeIO refuses the weak level unless its config allows it.

The weak level's layers, from the kernel up (each a fallback for the ones above it):
  * rlimits set in the child itself (not in a `preexec_fn`, which is unsafe when the trainer has
    threads): RLIMIT_AS (memory), RLIMIT_CPU, RLIMIT_FSIZE, RLIMIT_NOFILE, RLIMIT_NPROC = 0
    (no new processes or threads; note the kernel does not enforce NPROC for root), RLIMIT_CORE = 0;
  * namespaces where the kernel lets an unprivileged process make them: a new user + network
    namespace (no network device but a down loopback) and a new PID namespace (the program runs as
    pid 1 of its own namespace, so it cannot signal the trainer or anything outside);
  * Python audit hooks (PEP 578) in the child: fork/exec/spawn/subprocess/kill/socket/rlimit
    events and ctypes' function lookups and raw memory access raise (ctypes itself may load:
    sympy imports it); `open` and the os.* path events may write only under the scratch
    directory (and not create extension modules there) and read only there and in Python's own
    install (so not /proc/<pid>/environ); directories cannot be opened as fds (so no `dir_fd`
    escapes); imports of dbm, readline, sub-interpreters and test modules are refused; the
    unaudited escape hatches (os.pidfd_open, signal.pidfd_send_signal, _posixsubprocess.fork_exec,
    _thread.start_new_thread, _imp.create_builtin, ...) are replaced by stubs that raise;
  * the process: `python -I -S -B` (isolated: no site, no user env), env cleared (a few thread
    knobs, TMPDIR = HOME = the scratch dir), stdin and stdout/stderr on /dev/null once the job is
    read (results go through a private dup of the pipe, one repr'd tuple a line framed by a
    random nonce and parsed with ast.literal_eval, so a program's prints cannot break or fake the
    framing by accident), a fresh scratch cwd removed afterwards, its own process group killed
    on timeout.

The audit hook is not a boundary: a program can switch it off (its `busy` flag is reachable
through gc.get_objects(), and a signal handler can run inside its busy window), which is why the
weak level is refused by default. Programs of one batch share one interpreter, so a hostile one
can spoil the later results of its own batch. Le Critique never runs the policy's text: it only
becomes data (`ast.literal_eval`) passed to a reference program.
"""
from __future__ import annotations

import ast
import ctypes
import ctypes.util
import json
import marshal
import os
import secrets
import selectors
import shutil
import signal
import site
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

__all__ = ["Call", "CallResult", "Limits", "SandboxUnavailable", "run_calls", "run_jobs",
           "isolation_of", "sandbox_info", "strong_isolation"]


@dataclass(frozen=True)
class Call:
    """One function call: `program` is exec'd once per process, then `func(*args, **kwargs)`.
    args and kwargs travel by marshal, so they must be Python literals (numbers, str, bytes,
    tuples, lists, dicts, sets, bools, None); others give an error result."""
    program: str
    func: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)


@dataclass(frozen=True)
class CallResult:
    ok: bool
    value: Any = None  # the result rebuilt from `repr` with ast.literal_eval (None if not a literal)
    repr: str = ""  # repr() of the returned value, as the child computed it
    json: str | None = None  # json.dumps(value, allow_nan=False) when value is a literal that has one
    error: str = ""  # "" when ok; "timeout: ...", "MemoryError: ...", "PermissionError: sandbox: ..."
    seconds: float = 0.0


@dataclass(frozen=True)
class Limits:
    """What a sandboxed process may use. Defaults suit the tiny programs; paper-scale CodeIO
    programs import numpy/sympy and want `site_packages=True` and more memory."""
    memory_mb: int = 512  # RLIMIT_AS
    file_size_mb: int = 8  # RLIMIT_FSIZE (per file)
    nofile: int = 64  # RLIMIT_NOFILE
    exec_limit_s: float = 5.0  # to run a program's top level once (its imports)
    startup_s: float = 10.0  # to start the interpreter and report ready (a loaded machine is slow)
    isolation: str = "auto"  # "strong" (bwrap, see module doc), "weak" (the fallback), "auto": strong if available
    isolate: bool = True  # weak level: try the user/net/pid namespaces
    site_packages: bool = False  # put the parent's site-packages on the child's sys.path (read-only)
    preload: tuple[str, ...] = ()  # modules imported before the hooks go in (e.g. ("numpy",))
    max_result_chars: int = 100_000  # a longer repr is an error ("result too large")
    python: str = ""  # interpreter; "" is sys.executable


_ENV = {"LC_ALL": "C.UTF-8", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
_GRACE_S = 1.0  # the parent's watchdog waits this long past the child's own alarms

# The child's code. It runs as `python -I -S -B -c _BOOT`; everything lives inside _main() so the
# program's `import __main__` finds no runner state by name.
_BOOT = r'''
def _main():
    import os, sys, marshal, _signal, resource, builtins, _imp
    from time import perf_counter
    chunks = []
    while True:
        b = os.read(0, 1 << 20)
        if not b:
            break
        chunks.append(b)
    job = marshal.loads(b"".join(chunks))
    lim = job["limits"]
    nonce = job["nonce"].encode()
    isolation = "none"
    if lim["mode"] == "strong":
        isolation = "strong"  # bwrap made the namespaces and installed the syscall filter
    elif lim["isolate"]:
        isolation = "audit-only"
        try:
            import ctypes
            libc = ctypes.CDLL(None, use_errno=True)
            USER, NET, PID = 0x10000000, 0x40000000, 0x20000000
            if libc.unshare(USER | NET | PID) == 0:
                isolation = "user+net+pid"
            elif libc.unshare(USER | NET) == 0:
                isolation = "user+net"
            elif libc.unshare(NET) == 0:
                isolation = "net"
        except Exception:
            pass
        for k in [k for k in sys.modules if k == "ctypes" or k.startswith("ctypes.") or k == "_ctypes"]:
            del sys.modules[k]
        ctypes = libc = None
        if isolation == "user+net+pid":
            # the new PID namespace starts at our first child: it becomes pid 1 and runs the calls
            pid = os.fork()
            if pid:
                null = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
                os._exit(code if code >= 0 else 128 - code)
    out_fd = os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    _repr, _write = builtins.repr, os.write

    def emit(obj):
        data = nonce + _repr(obj).encode("utf-8", "backslashreplace") + b"\n"
        while data:
            data = data[_write(out_fd, data):]

    def setlim(res, v, extra=0):
        try:
            hard = resource.getrlimit(res)[1]
            if hard != resource.RLIM_INFINITY:
                v = min(v, hard)
                extra = 0 if v + extra > hard else extra
            resource.setrlimit(res, (v, v + extra))
        except (ValueError, OSError):
            pass

    setlim(resource.RLIMIT_AS, int(lim["memory_mb"]) << 20)
    setlim(resource.RLIMIT_FSIZE, int(lim["file_size_mb"]) << 20)
    setlim(resource.RLIMIT_CPU, int(lim["cpu_s"]), 1)
    setlim(resource.RLIMIT_CORE, 0)
    setlim(resource.RLIMIT_NOFILE, int(lim["nofile"]))
    setlim(resource.RLIMIT_NPROC, 0)
    _signal.signal(_signal.SIGXFSZ, _signal.SIG_IGN)  # a too-big write raises OSError, not a kill
    sys.path.extend(lim["sys_path"])
    sys.dont_write_bytecode = True
    ext_suffixes = tuple(_imp.extension_suffixes())
    for name in list(sys.builtin_module_names) + ["_posixsubprocess"] + list(lim["preload"]):
        try:  # builtins first, so that _imp.create_builtin (it rebuilds posix intact) can go
            __import__(name)
        except Exception:
            pass

    def no_threads(*a, **k):
        raise PermissionError("sandbox: starting a thread is blocked")

    # unaudited escape hatches: remove them (the audited ones are also blocked by the hook)
    strip = {
        "posix": ("kill", "killpg", "pidfd_open", "fork", "forkpty", "system", "setpriority",
                  "execv", "execve", "posix_spawn", "posix_spawnp", "sched_setscheduler",
                  "sched_setparam", "setns", "unshare"),
        "os": ("kill", "killpg", "pidfd_open", "fork", "forkpty", "system", "popen", "setpriority",
               "execv", "execve", "execl", "execle", "execlp", "execlpe", "execvp", "execvpe",
               "posix_spawn", "posix_spawnp", "spawnl", "spawnle", "spawnlp", "spawnlpe",
               "spawnv", "spawnve", "spawnvp", "spawnvpe", "sched_setscheduler", "sched_setparam",
               "setns", "unshare"),
        "_signal": ("pidfd_send_signal", "pthread_kill"),
        "signal": ("pidfd_send_signal", "pthread_kill"),
        "resource": ("setrlimit", "prlimit"),
        "_posixsubprocess": ("fork_exec",),
        "_imp": ("create_builtin",),
    }
    def stub(what):
        def blocked_call(*a, **k):
            raise PermissionError(f"sandbox: {what} is blocked")
        return blocked_call

    for mod, names in strip.items():
        m = sys.modules.get(mod)
        for n in names if m is not None else ():
            if hasattr(m, n):
                try:  # a stub, not a hole: `from _posixsubprocess import fork_exec` still imports
                    setattr(m, n, stub(f"{mod}.{n}"))
                except Exception:
                    pass
    th = sys.modules["_thread"]
    th.start_new_thread = th.start_new = no_threads  # so `import threading` still works
    if "threading" in sys.modules:
        sys.modules["threading"]._start_new_thread = no_threads

    scratch = os.path.realpath(os.getcwd())
    roots = {scratch}
    for p in [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix] + list(sys.path):
        if p:
            roots.add(os.path.realpath(p))
    read_roots = tuple(sorted(roots))
    write_roots = (scratch,)
    dev_ok = ("/dev/null", "/dev/urandom", "/dev/random")
    WFLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
    realpath, fsdecode, isdir = os.path.realpath, os.fsdecode, os.path.isdir
    blocked = ("socket.", "ctypes.dlsym", "ctypes.call_function", "ctypes.cdata",
               "ctypes.string_at", "ctypes.wstring_at", "ctypes.PyObj_FromPtr",
               "ctypes.set_exception", "subprocess.", "os.exec", "os.spawn", "os.posix_spawn",
               "os.fork", "os.system", "os.kill", "os.killpg", "os.startfile", "signal.pthread_kill",
               "resource.", "pty.", "webbrowser.", "urllib.", "http.", "ftplib.", "smtplib.",
               "imaplib.", "poplib.", "nntplib.", "telnetlib.", "syslog.", "winreg.", "_winapi.",
               "cpython.PyInterpreterState_New", "sqlite3.enable_load_extension",
               "sqlite3.load_extension")
    lib_roots = read_roots + ("/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib")
    no_import = {"_xxsubinterpreters", "_xxinterpchannels",
                 "_testcapi", "_testinternalcapi", "_testbuffer", "_testmultiphase",
                 "_testimportmultiple", "_testsinglephase", "_testclinic", "cffi", "_cffi_backend",
                 "dbm", "_dbm", "_gdbm", "readline", "posix", "_signal", "_imp", "_thread",
                 "resource", "_multiprocessing"}
    write_events = {  # event: (indices of path args, indices of dir_fd args)
        "os.remove": ((0,), (1,)), "os.rmdir": ((0,), (1,)), "os.mkdir": ((0,), (2,)),
        "os.rename": ((0, 1), (2, 3)), "os.link": ((0, 1), (2, 3)), "os.symlink": ((1,), (2,)),
        "os.chmod": ((0,), (2,)), "os.chown": ((0,), (3,)), "os.utime": ((0,), (3,)),
        "os.truncate": ((0,), ()), "os.mkfifo": ((0,), (2,)), "os.mknod": ((0,), (3,)),
        "os.setxattr": ((0,), ()), "os.removexattr": ((0,), ()), "os.chflags": ((0,), ()),
        "os.lchflags": ((0,), ()), "shutil.chown": ((0,), ()),
    }
    busy = [False]

    def under(p, rs):
        for r in rs:
            if p == r or p.startswith(r + "/") or r == "/":
                return True
        return False

    def resolve(p, what):
        if not isinstance(p, (str, bytes)):
            pl = sys.modules.get("pathlib")  # only pathlib's own (deterministic) path objects
            if pl is None or type(p) not in (pl.PosixPath, pl.PurePosixPath):
                raise PermissionError(f"sandbox: {what}: only str, bytes or pathlib paths")
            p = str(p)
        if isinstance(p, bytes):
            p = fsdecode(p)
        return realpath(p)

    def deny(what):
        raise PermissionError(f"sandbox: {what} is blocked")

    def check_write(p, what):
        if isinstance(p, int):
            deny(f"{what} on a file descriptor")
        rp = resolve(p, what)
        if not under(rp, write_roots):
            deny(f"{what} outside the scratch directory ({rp})")
        if rp.endswith(ext_suffixes):
            deny(f"{what} of an extension module ({rp})")

    def check_read(p, what):
        if p is None or isinstance(p, int):
            return None
        rp = resolve(p, what)
        if not (under(rp, read_roots) or rp in dev_ok):
            deny(f"{what} outside the scratch directory and Python's install ({rp})")
        return rp

    def hook(event, args):
        if busy[0]:
            return
        if event == "import":
            name = args[0] if args else ""
            if isinstance(name, str) and name.split(".")[0] in no_import:
                raise ImportError(f"sandbox: import of {name} is blocked")
            return
        if event.startswith(blocked):
            deny(event)
        if event == "open":
            busy[0] = True
            try:
                path, mode, flags = (tuple(args) + (None, None, None))[:3]
                writing = ((isinstance(mode, str) and any(c in mode for c in "wax+"))
                           or (isinstance(flags, int) and flags & WFLAGS))
                if writing:
                    check_write(path, "open for writing")
                else:
                    rp = check_read(path, "open")
                    if mode is None and rp is not None and isdir(rp):
                        deny("opening a directory as a file descriptor")
            finally:
                busy[0] = False
        elif event in write_events:
            busy[0] = True
            try:
                paths, dirfds = write_events[event]
                for k in dirfds:
                    if k < len(args) and args[k] not in (None, -1):
                        deny(f"{event} with dir_fd")
                for k in paths:
                    if k < len(args):
                        check_write(args[k], event)
            finally:
                busy[0] = False
        elif event in ("os.listdir", "os.scandir"):
            busy[0] = True
            try:
                check_read(args[0] if args else None, event)
            finally:
                busy[0] = False
        elif event == "ctypes.dlopen":  # ctypes may load (sympy imports it) but never call
            name = args[0] if args else None
            if name is not None and "/" in (fsdecode(name) if isinstance(name, bytes) else str(name)):
                busy[0] = True
                try:
                    rp = resolve(name, event)
                    if under(rp, write_roots) or not under(rp, lib_roots):
                        deny(f"{event} of {rp}")
                finally:
                    busy[0] = False
        elif event == "sqlite3.connect":
            db = args[0] if args else None
            if db not in (":memory:", b":memory:", ""):
                busy[0] = True
                try:
                    check_write(db, event)
                finally:
                    busy[0] = False

    class _Timeout(BaseException):
        pass

    class _CpuLimit(BaseException):
        pass

    armed = [False]

    def on_alarm(signum, frame):
        if armed[0]:
            armed[0] = False
            raise _Timeout()

    def on_xcpu(signum, frame):
        raise _CpuLimit()

    def arm(t):
        armed[0] = True
        _signal.setitimer(_signal.ITIMER_REAL, max(float(t), 1e-3))

    def disarm():
        armed[0] = False
        _signal.setitimer(_signal.ITIMER_REAL, 0)

    def fmt(e):
        try:
            s = str.__str__(str(e))[:300]
        except BaseException:
            s = ""
        return str.__str__(type(e).__name__) + (": " + s if s else "")

    _signal.signal(_signal.SIGALRM, on_alarm)
    _signal.signal(_signal.SIGXCPU, on_xcpu)  # pid 1 of a namespace ignores a default SIGXCPU
    sys.addaudithook(hook)

    programs = job["programs"]
    exec_limit, call_limit = float(lim["exec_limit_s"]), float(job["time_limit_s"])
    max_chars = int(lim["max_result_chars"])
    spaces = {}

    def load(pi):
        if pi in spaces:
            return spaces[pi]
        ent = (None, "program failed to load")
        try:
            arm(exec_limit)
            try:
                ns = {"__name__": "__sandbox__", "__builtins__": dict(builtins.__dict__)}
                exec(compile(programs[pi], "<program>", "exec"), ns)
                ent = (ns, "")
            except (_Timeout, _CpuLimit):
                raise
            except BaseException as e:
                ent = (None, "program failed to load: " + fmt(e))
            finally:
                disarm()
        except _Timeout:
            ent = (None, f"timeout: the program took over {exec_limit:g}s to load")
        except _CpuLimit:
            ent = (None, "CPU time limit reached")
        spaces[pi] = ent
        return ent

    emit(("hello", isolation))
    for i, pi, fname, args, kwargs in job["calls"]:
        t0 = perf_counter()
        ok, r, err = False, "", ""
        ns, err = load(pi)
        if not err:
            try:
                arm(call_limit)
                try:
                    fn = ns.get(fname)
                    if not callable(fn):
                        raise NameError(f"the program defines no function {fname!r}")
                    r = _repr(fn(*args, **kwargs))
                    if type(r) is not str:
                        raise TypeError("__repr__ returned a non-string")
                    if len(r) > max_chars:
                        raise ValueError(f"result too large ({len(r)} > {max_chars} chars)")
                    ok = True
                except (_Timeout, _CpuLimit):
                    raise
                except BaseException as e:
                    err = fmt(e)
                finally:
                    disarm()
            except _Timeout:
                disarm()
                ok, err = False, f"timeout: the call took over {call_limit:g}s"
            except _CpuLimit:
                disarm()
                ok, err = False, "CPU time limit reached"
        emit((i, ok, str.__str__(r) if ok else "", err, perf_counter() - t0))


_main()
'''


# ---------------------------------------------------------------------------------------------
# strong isolation: bubblewrap + a seccomp filter (docs/sandbox.md lists what each layer stops)

class SandboxUnavailable(RuntimeError):
    """Strong isolation was asked for (Limits.isolation="strong") and this machine cannot give it."""


_SANDBOX_UID = 65534  # nobody: the uid the program runs as inside the user namespace
_SCMP_ACT_ALLOW = 0x7FFF0000
_EPERM, _ENOSYS = 1, 38
_AF_UNIX, _CLONE_THREAD = 1, 0x00010000
_SCMP_CMP_NE, _SCMP_CMP_MASKED_EQ = 1, 7
# Syscalls the program never needs and an escape would: tracing and reading other processes, new
# namespaces and mounts, kernel keyrings, eBPF, perf, io_uring (it bypasses seccomp), modules.
_DENY = ("ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
         "mount", "umount2", "pivot_root", "chroot", "mount_setattr", "move_mount", "open_tree",
         "fsopen", "fsconfig", "fsmount", "fspick", "unshare", "setns",
         "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
         "io_uring_setup", "io_uring_enter", "io_uring_register",
         "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
         "reboot", "swapon", "swapoff", "acct", "syslog", "quotactl", "open_by_handle_at",
         "name_to_handle_at", "fork", "vfork")


class _ScmpArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int),
                ("datum_a", ctypes.c_uint64), ("datum_b", ctypes.c_uint64)]


def _build_seccomp() -> bytes:
    """The filter as a compiled BPF program (what `bwrap --seccomp FD` reads), made with libseccomp
    through ctypes: pip has no maintained binding, Debian's python3-seccomp is not in the venv."""
    name = ctypes.util.find_library("seccomp") or "libseccomp.so.2"
    lib = ctypes.CDLL(name, use_errno=True)
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int,
                                           ctypes.c_uint, ctypes.POINTER(_ScmpArgCmp)]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    ctx = lib.seccomp_init(_SCMP_ACT_ALLOW)
    if not ctx:
        raise OSError("seccomp_init failed")
    try:
        def rule(sys_name, errno_, *cmps):
            nr = lib.seccomp_syscall_resolve_name(sys_name.encode())
            if nr < 0:
                return  # not on this architecture
            arr = (_ScmpArgCmp * len(cmps))(*cmps) if cmps else None
            rc = lib.seccomp_rule_add_array(ctx, 0x00050000 | errno_, nr, len(cmps), arr)
            if rc != 0:
                raise OSError(-rc, f"seccomp rule for {sys_name}")

        for n in _DENY:
            rule(n, _EPERM)
        # sockets: only AF_UNIX (no network family at all, whatever the namespace holds)
        rule("socket", _EPERM, _ScmpArgCmp(0, _SCMP_CMP_NE, _AF_UNIX, 0))
        rule("socketpair", _EPERM, _ScmpArgCmp(0, _SCMP_CMP_NE, _AF_UNIX, 0))
        # clone of a new process (no CLONE_THREAD) is a fork; threads stay possible for libraries
        rule("clone", _EPERM, _ScmpArgCmp(0, _SCMP_CMP_MASKED_EQ, _CLONE_THREAD, 0))
        rule("clone3", _ENOSYS)  # its flags are in memory a filter cannot read; libc falls back to clone
        fd = os.memfd_create("sparserl-seccomp")
        try:
            rc = lib.seccomp_export_bpf(ctx, fd)
            if rc != 0:
                raise OSError(-rc, "seccomp_export_bpf")
            return os.pread(fd, 1 << 20, 0)
        finally:
            os.close(fd)
    finally:
        lib.seccomp_release(ctx)


def _interpreter(limits: Limits) -> str:
    return os.path.realpath(limits.python or sys.executable)


def _ro_roots(python: str, site_paths: Sequence[str]) -> list[str]:
    """Host folders the child sees read-only besides /usr: the interpreter's install and the
    site-packages it is given, never their parents (so not the project, /root, /home or /work)."""
    roots = [os.path.dirname(os.path.dirname(python))]
    if python == os.path.realpath(sys.executable):
        roots += [sys.base_prefix, sys.base_exec_prefix]
    out: list[str] = []
    for r in sorted({os.path.realpath(p) for p in [*roots, *site_paths]}):
        if r in ("/", "") or r == "/usr" or r.startswith("/usr/") or not os.path.isdir(r):
            continue
        if not any(r == o or r.startswith(o + "/") for o in out):
            out.append(r)
    return out


def _bwrap_argv(bwrap: str, python: str, scratch: str, site_paths: Sequence[str], seccomp_fd: int,
                env: dict, tmp_mb: int = 16) -> list[str]:
    a = [bwrap, "--unshare-all", "--unshare-user", "--uid", str(_SANDBOX_UID),
         "--gid", str(_SANDBOX_UID), "--die-with-parent", "--new-session", "--cap-drop", "ALL",
         "--ro-bind", "/usr", "/usr"]
    for d in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(d):
            a += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            a += ["--ro-bind", d, d]
    if os.path.exists("/etc/ld.so.cache"):  # the loader finds libc's multiarch folder through it
        a += ["--ro-bind", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    for r in _ro_roots(python, site_paths):
        a += ["--ro-bind", r, r]
    # /tmp: a private tmpfs, capped (tmpfs pages are not charged to RLIMIT_AS); then the root
    # tmpfs bwrap builds (with /root, /work made as mount points) goes read-only
    a += ["--proc", "/proc", "--dev", "/dev", "--size", str(tmp_mb << 20), "--tmpfs", "/tmp",
          "--bind", scratch, _SCRATCH, "--remount-ro", "/", "--chdir", _SCRATCH, "--clearenv"]
    for k, v in env.items():
        a += ["--setenv", k, v]
    return a + ["--seccomp", str(seccomp_fd), "--", python]


_SCRATCH = "/scratch"  # where the scratch folder appears inside bwrap
_STRONG: dict = {}  # python -> (ok, reason); probed once per process
_STRONG_LOCK = threading.Lock()


def _spawn_strong(python: str, scratch: str, site_paths: Sequence[str], argv: list[str],
                  tmp_mb: int = 16, **popen) -> subprocess.Popen:
    bpf = _STRONG["bpf"]
    fd = os.memfd_create("sparserl-seccomp", 0)  # bwrap reads it from its offset: one per start
    try:
        os.write(fd, bpf)
        os.lseek(fd, 0, os.SEEK_SET)
        env = dict(_ENV, TMPDIR=_SCRATCH, HOME=_SCRATCH)
        cmd = _bwrap_argv(_STRONG["bwrap"], python, scratch, site_paths, fd, env, tmp_mb) + argv
        # bwrap itself gets only _ENV: pid 1 of the sandbox is bwrap, and its environ is readable
        return subprocess.Popen(cmd, pass_fds=(fd,), env=dict(_ENV), close_fds=True, **popen)
    finally:
        os.close(fd)


def strong_isolation(python: str = "") -> tuple[bool, str]:
    """Whether this machine gives strong isolation (bwrap + uid 65534 + seccomp), and if not why;
    probed once per interpreter by running it under the real command."""
    python = os.path.realpath(python or sys.executable)
    with _STRONG_LOCK:
        if python in _STRONG:
            return _STRONG[python]
        res = (False, "")
        bwrap = shutil.which("bwrap")
        if bwrap is None:
            res = (False, "bubblewrap (bwrap) is not installed")
        else:
            _STRONG["bwrap"] = bwrap
            try:
                _STRONG.setdefault("bpf", _build_seccomp())
            except (OSError, AttributeError) as e:
                res = (False, f"no seccomp filter: libseccomp is missing or failed ({e})")
            else:
                res = _probe(python)
        _STRONG[python] = res
        return res


def _probe(python: str) -> tuple[bool, str]:
    scratch = tempfile.mkdtemp(prefix="sparserl-sbx-")
    try:
        proc = _spawn_strong(python, scratch, [], ["-I", "-S", "-c",
                             "import os, socket\n"
                             "try:\n    socket.socket(socket.AF_INET)\nexcept PermissionError:\n"
                             "    print(os.getuid())\n"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            return False, "bwrap did not start a Python within 30 s"
    except OSError as e:
        return False, f"could not start bwrap: {e}"
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if proc.returncode != 0 or out.decode(errors="replace").strip() != str(_SANDBOX_UID):
        msg = err.decode(errors="replace").strip()[-300:] or f"exit code {proc.returncode}"
        return False, f"bwrap failed here ({msg}); the kernel may refuse user namespaces"
    return True, ""


_NOT_LITERAL = object()
_LITERAL_TYPES = (int, float, complex, str, bytes, bool, type(None))


def _literal(text: str) -> Any:
    """ast.literal_eval, safe on the child's (untrusted) text; _NOT_LITERAL when it is not one."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return _NOT_LITERAL


def _is_literal(x: Any, depth: int = 0) -> bool:
    """Whether x is made of Python literals only (what `Call` args may be; marshal carries them)."""
    if depth > 50:
        return False
    if type(x) in _LITERAL_TYPES:
        return True
    if type(x) in (tuple, list, set, frozenset):
        return all(_is_literal(v, depth + 1) for v in x)
    if type(x) is dict:
        return all(_is_literal(k, depth + 1) and _is_literal(v, depth + 1) for k, v in x.items())
    return False


def _site_paths() -> list[str]:
    paths = list(site.getsitepackages())
    try:
        paths.append(site.getusersitepackages())
    except Exception:
        pass
    return [p for p in dict.fromkeys(paths) if os.path.isdir(p)]


@dataclass
class _Fate:
    hello: bool = False
    isolation: str = ""
    reason: str = ""


def _run_child(pending: list, programs: list[str], time_limit_s: float, limits: Limits,
               deadline: float, got: dict, strong: bool) -> _Fate:
    """One child process over `pending` calls (in order); fills `got` with the results it streams
    back and says how it ended. `strong`: run it under bwrap (`_bwrap_argv`)."""
    fate = _Fate()
    left = deadline - time.monotonic()
    scratch = tempfile.mkdtemp(prefix="sparserl-sbx-")
    nonce = secrets.token_hex(16)
    site_paths = _site_paths() if limits.site_packages else []
    payload = marshal.dumps({
        "nonce": nonce, "programs": programs, "calls": pending, "time_limit_s": float(time_limit_s),
        "limits": {"memory_mb": int(limits.memory_mb), "file_size_mb": int(limits.file_size_mb),
                   "nofile": int(limits.nofile), "cpu_s": max(1, int(left) + 1),
                   "exec_limit_s": float(limits.exec_limit_s), "isolate": bool(limits.isolate),
                   "mode": "strong" if strong else "weak", "sys_path": site_paths,
                   "preload": [str(m) for m in limits.preload],
                   "max_result_chars": int(limits.max_result_chars)},
    })
    argv = ["-I", "-S", "-B", "-c", _BOOT]
    pipes = dict(stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                 process_group=0)
    try:
        if strong:
            proc = _spawn_strong(_interpreter(limits), scratch, site_paths, argv,
                                 tmp_mb=max(1, int(limits.file_size_mb)), **pipes)
        else:
            proc = subprocess.Popen([limits.python or sys.executable, *argv], cwd=scratch,
                                    env=dict(_ENV, TMPDIR=scratch, HOME=scratch),
                                    close_fds=True, **pipes)
    except OSError as e:
        shutil.rmtree(scratch, ignore_errors=True)
        fate.reason = f"could not start the sandbox process: {e}"
        return fate
    wfd, rfd = proc.stdin.fileno(), proc.stdout.fileno()
    os.set_blocking(wfd, False)
    sel = selectors.DefaultSelector()
    sel.register(wfd, selectors.EVENT_WRITE)
    sel.register(rfd, selectors.EVENT_READ)
    todo = {c[0] for c in pending}
    nb = nonce.encode()
    buf, total_read, sent, eof = b"", 0, 0, False
    line_cap = 4 * limits.max_result_chars + 65_536
    step = limits.startup_s + (limits.exec_limit_s if limits.preload else 0.0)
    step_deadline = time.monotonic() + step
    # the watchdog's allowance for the k-th call: its alarm, its program's load if first, a grace
    seen: set = set()
    allowance = []
    for c in pending:
        allowance.append(time_limit_s + _GRACE_S + (0.0 if c[1] in seen else limits.exec_limit_s))
        seen.add(c[1])
    done = 0
    per_call = allowance[0]
    reason, rc = "", None
    try:
        while True:
            now = time.monotonic()
            dl = min(step_deadline, deadline)
            if now >= dl:
                if not fate.hello:
                    reason = f"the sandbox did not start within {step:g}s"
                elif dl == deadline:
                    reason = "timeout: the batch's total time limit ran out (killed)"
                else:
                    reason = f"timeout: no result within {per_call:g}s (killed)"
                break
            for key, _ in sel.select(dl - now):
                if key.fd == wfd:
                    try:
                        sent += os.write(wfd, payload[sent:sent + (1 << 16)])
                    except BlockingIOError:
                        continue
                    except OSError:  # the child is gone; its exit says why
                        sent = len(payload)
                    if sent >= len(payload):
                        sel.unregister(wfd)
                        proc.stdin.close()
                    continue
                data = os.read(rfd, 1 << 16)
                if not data:
                    eof = True
                    break
                total_read += len(data)
                buf += data
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if not line.startswith(nb):
                        continue  # junk a program wrote to our fd
                    msg = _literal(line[len(nb):].decode("utf-8", "replace"))
                    if type(msg) is not tuple or not msg:
                        continue
                    if msg[0] == "hello" and len(msg) == 2:
                        fate.hello, fate.isolation = True, str(msg[1])
                    elif len(msg) == 5 and msg[0] in todo and msg[0] not in got:
                        got[msg[0]] = _result(msg)
                        done += 1
                    else:
                        continue
                    per_call = allowance[min(done, len(allowance) - 1)]
                    step_deadline = time.monotonic() + per_call
                if len(buf) > line_cap:
                    buf = b""
            if eof:
                break
            if total_read > 256 << 20:
                reason = "the sandbox wrote too much output (killed)"
                break
    finally:
        sel.close()
        rc = _poll_exit(proc.pid, 0.5 if eof else 0.0)
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the leader is not reaped yet: the pgid is still ours
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()
        for f in (proc.stdin, proc.stdout):
            try:
                f.close()
            except OSError:
                pass
        shutil.rmtree(scratch, ignore_errors=True)
    if not reason:
        if rc is None:
            reason = "the sandbox process closed its output before the call finished"
        elif rc > 128:
            try:
                name = signal.Signals(rc - 128).name
            except ValueError:
                name = f"signal {rc - 128}"
            reason = (f"the sandbox process was killed ({name}) during the call: "
                      "memory or CPU limit, or a crash")
        else:
            reason = f"the sandbox process exited (code {rc}) during the call"
        if not fate.hello:
            reason = "the sandbox failed to start: " + reason
    fate.reason = reason
    return fate


def _poll_exit(pid: int, wait_s: float) -> int | None:
    """The child's exit code (128 + signal when killed) without reaping it, so its process group
    id cannot be reused before we kill the group; None while it runs."""
    end = time.monotonic() + wait_s
    while True:
        try:
            info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return None
        if info is not None:
            return info.si_status if info.si_code == os.CLD_EXITED else 128 + info.si_status
        if time.monotonic() >= end:
            return None
        time.sleep(0.0005)


def _result(msg: tuple) -> CallResult:
    _, ok, r, err, t = msg
    t = float(t) if type(t) in (int, float) else 0.0
    if ok is True and type(r) is str:
        value = _literal(r)
        if value is _NOT_LITERAL:
            return CallResult(True, None, r, None, "", t)
        try:
            j = json.dumps(value, allow_nan=False)
        except (TypeError, ValueError, RecursionError):
            j = None
        return CallResult(True, value, r, j, "", t)
    return CallResult(False, error=str(err) if err else "error", seconds=t)


_LAST_ISOLATION = {"isolation": "", "detail": ""}


def isolation_of(limits: Limits | None = None) -> str:
    """The level `run_jobs` gives with these limits: "strong" or "weak". Raises SandboxUnavailable
    when limits.isolation is "strong" and the machine cannot give it."""
    limits = limits or Limits()
    if limits.isolation not in ("auto", "strong", "weak"):
        raise ValueError(f"sandbox Limits.isolation {limits.isolation!r}: use 'auto', 'strong' or 'weak'")
    if limits.isolation == "weak":
        return "weak"
    ok, why = strong_isolation(_interpreter(limits))
    if ok:
        return "strong"
    if limits.isolation == "strong":
        raise SandboxUnavailable(f"strong sandbox isolation is not available: {why}; "
                                 "install bubblewrap (apt-get install bubblewrap)")
    return "weak"


def run_jobs(calls: Sequence[Call], *, time_limit_s: float = 1.0, total_time_s: float | None = None,
             limits: Limits | None = None) -> list[CallResult]:
    """Run every call in one sandboxed process (a new one only after a call killed the last): one
    CallResult per call, in order. Never raises for what the programs do.

    time_limit_s: each call's own alarm (a program's first call also gets limits.exec_limit_s to
    load it); total_time_s: the whole batch (default: every call using its limit, plus startup);
    calls not run when it runs out get errors."""
    limits = limits or Limits()
    n = len(calls)
    results: list[CallResult | None] = [None] * n
    if n == 0:
        return []
    strong = isolation_of(limits) == "strong"
    programs = list(dict.fromkeys(str(c.program) for c in calls))
    pidx = {p: i for i, p in enumerate(programs)}
    pending = []
    for i, c in enumerate(calls):
        args, kwargs = tuple(c.args), dict(c.kwargs)
        if not (_is_literal(args) and _is_literal(kwargs) and all(type(k) is str for k in kwargs)):
            results[i] = CallResult(False, error="bad arguments: Call args/kwargs must be Python "
                                                 "literals (numbers, str, bytes, containers of them)")
            continue
        pending.append((i, pidx[str(c.program)], str(c.func), args, kwargs))
    if total_time_s is None:
        total_time_s = (limits.startup_s + n * time_limit_s
                        + len(programs) * min(limits.exec_limit_s, 1.0))
    deadline = time.monotonic() + float(total_time_s)
    failed_starts = 0
    while pending:
        if deadline - time.monotonic() <= 0.05:
            for c in pending:
                results[c[0]] = CallResult(False, error=f"timeout: the batch's total time limit "
                                                         f"({total_time_s:g}s) ran out before this call")
            break
        got: dict[int, CallResult] = {}
        fate = _run_child(pending, programs, time_limit_s, limits, deadline, got, strong)
        if fate.isolation:
            _LAST_ISOLATION.update(isolation="strong" if fate.isolation == "strong" else "weak",
                                   detail=fate.isolation)
        for i, r in got.items():
            results[i] = r
        rest = [c for c in pending if results[c[0]] is None]
        if not rest:
            break
        if not fate.hello:
            failed_starts += 1
            if failed_starts >= 2:
                for c in rest:
                    results[c[0]] = CallResult(False, error=fate.reason)
                break
            pending = rest
            continue
        results[rest[0][0]] = CallResult(False, error=fate.reason)  # the call that was running
        pending = rest[1:]
    return [r if r is not None else CallResult(False, error="no result") for r in results]


def run_calls(program: str, func_name: str, args_list: Sequence, time_limit_s: float = 1.0,
              total_time_s: float | None = None, limits: Limits | None = None) -> list[CallResult]:
    """`func_name(*args)` of one program for each args in args_list, in one sandboxed process.
    An element that is a tuple is the positional arguments; anything else is the single argument."""
    calls = [Call(program, func_name, a if isinstance(a, tuple) else (a,)) for a in args_list]
    return run_jobs(calls, time_limit_s=time_limit_s, total_time_s=total_time_s, limits=limits)


def sandbox_info(limits: Limits | None = None) -> dict:
    """The isolation a one-call batch got here ("strong" or "weak"), its detail ("strong", or the
    weak level's kernel part: "user+net+pid", "user+net", "net", "audit-only"), and how long the
    batch took: for logs and tests."""
    t0 = time.perf_counter()
    r = run_calls("def f(x):\n    return x\n", "f", [1], limits=limits)
    return {"isolation": _LAST_ISOLATION["isolation"], "detail": _LAST_ISOLATION["detail"],
            "ok": r[0].ok, "seconds": time.perf_counter() - t0}
