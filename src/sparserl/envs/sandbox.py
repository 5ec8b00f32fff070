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
import atexit
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
import warnings
from pathlib import Path
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
    scratch_mb: int = 16  # strong level: the scratch tmpfs (/tmp is a link to it), the program's whole disk
    python: str = ""  # interpreter; "" is sys.executable


_ENV = {"LC_ALL": "C.UTF-8", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
_GRACE_S = 1.0  # the parent's watchdog waits this long past the child's own alarms

# The child's code (envs/sandbox_child.py), read once as text: it runs as `python -I -S -B -c _BOOT`.
_BOOT = (Path(__file__).parent / "sandbox_child.py").read_text()


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
         "name_to_handle_at", "fork", "vfork",
         # memory no rlimit counts: memfd files, SysV segments and queues, POSIX queues
         "memfd_create", "memfd_secret", "shmget", "msgget", "semget", "mq_open",
         "mknod", "mknodat")


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


def _ro_roots(python: str) -> list[str]:
    """Host folders the child sees read-only, at their own paths, besides /usr: the interpreter's
    install, never its parents (so not the project, /root, /home or /work). Site-packages are
    bound at /site/N instead (`_bwrap_args`)."""
    roots = [os.path.dirname(os.path.dirname(python))]
    if python == os.path.realpath(sys.executable):
        roots += [sys.base_prefix, sys.base_exec_prefix]
    out: list[str] = []
    for r in sorted({os.path.realpath(p) for p in roots}):
        if r in ("/", "") or r == "/usr" or r.startswith("/usr/") or not os.path.isdir(r):
            continue
        if not any(r == o or r.startswith(o + "/") for o in out):
            out.append(r)
    return out


_SCRATCH = "/scratch"  # where the scratch tmpfs is mounted inside bwrap (also /tmp, a link to it)
_DEVICES = ("/dev/null", "/dev/zero", "/dev/random", "/dev/urandom")  # the whole /dev
_SHM_MB = 1  # /dev/shm's cap
_CGROUP_SLACK_MB, _CGROUP_PIDS = 64, 8  # the interpreter's own page tables and files; bwrap + python
# The unprivileged host uid and gid a root trainer drops to (setpriv, inside bwrap). Dedicated: no
# account uses it, no host file is owned by it, so the program owns nothing outside its sandbox.
HOST_ID = int(os.environ.get("SPARSERL_SANDBOX_UID", "64064"))


def _site_dest(i: int) -> str:
    return f"/site/{i}"


def _trainer_is_root() -> bool:
    return 0 in os.getresuid()


def _bwrap_args(python: str, site_paths: Sequence[str], env: dict, scratch_mb: int,
                as_root: bool) -> list[str]:
    """bwrap's options (passed through `--args FD`, so they are not in the sandbox's /proc/1/cmdline).

    as_root: the trainer is root. bwrap then makes no user namespace (its uid inside one would map
    to host root) and the command is `setpriv` dropping to HOST_ID with no capabilities; otherwise
    bwrap makes a user namespace whose uid 65534 maps to the trainer's own unprivileged uid."""
    if as_root:
        a = ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
    else:
        a = ["--unshare-all", "--unshare-user", "--uid", str(_SANDBOX_UID), "--gid", str(_SANDBOX_UID),
             "--cap-drop", "ALL"]
    a += ["--die-with-parent", "--new-session", "--ro-bind", "/usr", "/usr"]
    for d in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(d):
            a += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            a += ["--ro-bind", d, d]
    # mount-point parents: searchable, not listable (bwrap run by root would make them 0700)
    if os.path.exists("/etc/ld.so.cache"):  # the loader finds libc's multiarch folder through it
        a += ["--perms", "0111", "--dir", "/etc", "--ro-bind", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    made: set = set()
    if site_paths:  # at neutral paths: no host path (a venv under /tmp, say)
        a += ["--perms", "0111", "--dir", "/site"]
    for i, sp in enumerate(site_paths):
        a += ["--ro-bind", sp, _site_dest(i)]
    for r in _ro_roots(python):
        parents, p = [], os.path.dirname(r)
        while p not in ("/", "") and p not in made:
            parents.append(p)
            p = os.path.dirname(p)
        for p in reversed(parents):  # so no `ls /root`
            a += ["--perms", "0111", "--dir", p]
            made.add(p)
        a += ["--ro-bind", r, r]
    # /proc: its own (the sandbox's pids only), all of it read-only, /proc/sys included
    a += ["--proc", "/proc", "--remount-ro", "/proc"]
    # /dev: four device files in the read-only root, and a capped /dev/shm; no tty, no pts
    a += ["--dir", "/dev"]
    for d in _DEVICES:
        a += ["--dev-bind", d, d]
    a += ["--symlink", "/proc/self/fd", "/dev/fd",
          "--perms", "1777", "--size", str(_SHM_MB << 20), "--tmpfs", "/dev/shm"]
    # the only other writable place: a capped tmpfs (nosuid, nodev), gone with the sandbox; nothing
    # the program writes ever reaches the host's disk
    a += ["--perms", "1777", "--size", str(max(1, int(scratch_mb)) << 20), "--tmpfs", _SCRATCH]
    if "/tmp" not in made:  # an interpreter installed under /tmp keeps /tmp as its parent
        a += ["--symlink", _SCRATCH, "/tmp"]
    a += ["--remount-ro", "/", "--chdir", _SCRATCH, "--clearenv"]
    for k, v in env.items():
        a += ["--setenv", k, v]
    return a


def _sandbox_command(python: str, argv: list[str], as_root: bool) -> list[str]:
    """What bwrap runs: the interpreter, behind setpriv when the trainer is root."""
    if not as_root:
        return [python, *argv]
    i = str(HOST_ID)
    return [_STRONG["setpriv"], f"--reuid={i}", f"--regid={i}", "--clear-groups", "--inh-caps=-all",
            "--bounding-set=-all", "--no-new-privs", "--", python, *argv]


_STRONG: dict = {}  # python -> (ok, reason); probed once per process
_SELF_TEST: dict = {}  # python -> {layer: [ok, detail]}, the last self-test
_STRONG_LOCK = threading.Lock()


class _Cgroup:
    """A pids + memory cgroup for one sandbox, where this process may make one (root, with a v1
    hierarchy or a v2 tree whose subtree has the controllers): memory counts what RLIMIT_AS does
    not (tmpfs pages, inodes, page tables). Best effort: `paths` is empty where none is delegated."""

    def __init__(self, memory_mb: int, pids: int):
        self.dirs: list[str] = []
        self.procs: list[str] = []
        if not _trainer_is_root():
            return
        tag = f"sparserl-sandbox/{os.getpid()}-{secrets.token_hex(4)}"
        for base, files in _cgroup_bases():
            _sweep(os.path.join(base, "sparserl-sandbox"))
            d = os.path.join(base, tag)
            try:
                os.makedirs(d, exist_ok=True)
                for name, value in files(memory_mb, pids):
                    if os.path.exists(os.path.join(d, name)):
                        with open(os.path.join(d, name), "w") as f:
                            f.write(str(value))
            except OSError:
                self._rmdir(d)
                continue
            self.dirs.append(d)
            self.procs.append(os.path.join(d, "cgroup.procs"))

    def wrap(self, cmd: list[str]) -> list[str]:
        """cmd run from a shell that first joins the cgroups, so every process bwrap forks is in."""
        if not self.procs:
            return cmd
        join = " && ".join(f'echo $$ > "${i + 1}"' for i in range(len(self.procs)))
        n = len(self.procs)
        return ["/bin/sh", "-c", f'{join} && shift {n} && exec "$@"', "sh", *self.procs, *cmd]

    @staticmethod
    def _rmdir(d: str) -> bool:
        try:
            os.rmdir(d)
        except FileNotFoundError:
            pass
        except OSError:  # its last tasks are still exiting: removed at the next sandbox or at exit
            return False
        return True

    def close(self) -> None:
        global _STALE_CGROUPS
        _STALE_CGROUPS = [d for d in _STALE_CGROUPS + self.dirs if not self._rmdir(d)]
        self.dirs = []


_STALE_CGROUPS: list[str] = []
_SWEPT: set = set()


def _sweep(folder: str) -> None:
    """Once per process: remove the cgroups of trainers that died (killed before their cleanup)."""
    if folder in _SWEPT:
        return
    _SWEPT.add(folder)
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for n in names:
        pid = n.split("-", 1)[0]
        if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            _Cgroup._rmdir(os.path.join(folder, n))


@atexit.register
def _remove_stale_cgroups() -> None:
    for d in _STALE_CGROUPS:
        for _ in range(100):
            if _Cgroup._rmdir(d):
                break
            time.sleep(0.01)


def _cgroup_bases() -> list:
    """(folder, settings) for each writable cgroup hierarchy with memory or pids control."""
    out = []
    try:
        lines = open("/proc/self/mountinfo").read().splitlines()
    except OSError:
        return out
    for line in lines:
        left, _, right = line.partition(" - ")
        f, g = left.split(), right.split()
        if len(f) < 5 or not g:
            continue
        mnt, fstype, opts = f[4], g[0], g[-1].split(",")
        if not os.access(mnt, os.W_OK):
            continue
        if fstype == "cgroup" and "memory" in opts:
            out.append((mnt, lambda m, p: [("memory.limit_in_bytes", m << 20),
                                            ("memory.memsw.limit_in_bytes", m << 20)]))
        elif fstype == "cgroup" and "pids" in opts:
            out.append((mnt, lambda m, p: [("pids.max", p)]))
        elif fstype == "cgroup2":
            try:
                sub = open(os.path.join(mnt, "cgroup.subtree_control")).read().split()
            except OSError:
                continue
            if {"memory", "pids"} <= set(sub):
                out.append((mnt, lambda m, p: [("memory.max", m << 20), ("memory.swap.max", 0),
                                                ("pids.max", p)]))
    return out


def _spawn_strong(python: str, site_paths: Sequence[str], argv: list[str], *, scratch_mb: int,
                  cgroup: _Cgroup | None = None, **popen) -> subprocess.Popen:
    as_root = _trainer_is_root()
    env = dict(_ENV, TMPDIR=_SCRATCH, HOME=_SCRATCH)
    opts = _bwrap_args(python, site_paths, env, scratch_mb, as_root)
    bpf = _STRONG["bpf"]
    fds = []
    try:
        for data in (bpf, b"".join(o.encode() + b"\0" for o in opts)):
            fd = os.memfd_create("sparserl-sandbox", 0)  # bwrap reads each from its offset: one per start
            fds.append(fd)
            os.write(fd, data)
            os.lseek(fd, 0, os.SEEK_SET)
        # bwrap by its full path: the cgroup's shell execs it with _ENV, which has no PATH
        cmd = [_STRONG["bwrap"], "--args", str(fds[1]), "--seccomp", str(fds[0]), "--",
               *_sandbox_command(python, argv, as_root)]
        if cgroup is not None:
            cmd = cgroup.wrap(cmd)
        # bwrap itself gets only _ENV: pid 1 of the sandbox is bwrap, and its environ is readable
        return subprocess.Popen(cmd, pass_fds=tuple(fds), env=dict(_ENV), close_fds=True, **popen)
    finally:
        for fd in fds:
            os.close(fd)


def strong_isolation(python: str = "") -> tuple[bool, str]:
    """Whether this machine gives strong isolation, and if not why: the self-test (`self_test`)
    runs once per interpreter, under the real command, and every layer must hold."""
    python = os.path.realpath(python or sys.executable)
    with _STRONG_LOCK:
        if python in _STRONG:
            return _STRONG[python]
        res = (False, "")
        bwrap = shutil.which("bwrap")
        setpriv = shutil.which("setpriv") or ("/usr/bin/setpriv" if os.path.exists("/usr/bin/setpriv") else None)
        if bwrap is None:
            res = (False, "bubblewrap (bwrap) is not installed")
        elif _trainer_is_root() and setpriv is None:
            res = (False, "the trainer runs as root and setpriv (util-linux) is missing, so the "
                          "sandbox cannot drop to an unprivileged host uid")
        else:
            _STRONG["bwrap"], _STRONG["setpriv"] = bwrap, setpriv
            try:
                _STRONG.setdefault("bpf", _build_seccomp())
            except (OSError, AttributeError) as e:
                res = (False, f"no seccomp filter: libseccomp is missing or failed ({e})")
            else:
                layers = _self_test(python)
                _SELF_TEST[python] = layers
                failed = [f"{k} ({d})" for k, (ok, d) in layers.items() if not ok and k not in _OPTIONAL]
                res = (not failed, "self-test failed: " + "; ".join(failed) if failed else "")
        _STRONG[python] = res
        return res


def self_test(python: str = "") -> dict:
    """The strong sandbox's layers as its self-test found them: {layer: [held, detail]} (empty
    when bwrap or libseccomp is missing: `strong_isolation` says why)."""
    python = os.path.realpath(python or sys.executable)
    strong_isolation(python)
    return {k: list(v) for k, v in _SELF_TEST.get(python, {}).items()}


_OPTIONAL = ("cgroup",)  # recorded, not required: only where a cgroup hierarchy is delegated
_PROBE_SCRATCH_MB, _PROBE_MEMORY_MB = 4, 256

# The self-test probe (envs/sandbox_probe.py), read once as text; `_self_test` appends its call.
_PROBE = (Path(__file__).parent / "sandbox_probe.py").read_text()


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            kids = open(f"/proc/{p}/task/{p}/children").read().split()
        except OSError:
            continue
        out += [int(k) for k in kids]
        todo += [int(k) for k in kids]
    return out


def _host_uids(pid: int) -> tuple[int, ...]:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("Uid:"):
            return tuple(int(x) for x in line.split()[1:])
    return ()


def _self_test(python: str) -> dict:
    """Start the real sandbox on _PROBE and collect each layer's result."""
    allowed = ["/usr/", "/bin/", python] + [r + "/" for r in _ro_roots(python)]
    code = _PROBE + f"\nprobe({list(_DEVICES)!r}, {_PROBE_SCRATCH_MB}, {_SHM_MB}, {allowed!r})\n"
    cg = _Cgroup(_PROBE_MEMORY_MB, 8)
    layers: dict = {}
    try:
        try:
            proc = _spawn_strong(python, [], ["-I", "-S", "-c", code], scratch_mb=_PROBE_SCRATCH_MB,
                                 cgroup=cg, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE)
        except OSError as e:
            return {"start": [False, f"could not start bwrap: {e}"]}
        line, err = b"", b""
        try:
            sel = selectors.DefaultSelector()
            sel.register(proc.stdout, selectors.EVENT_READ)
            end = time.monotonic() + 30
            while not line.endswith(b"\n") and time.monotonic() < end:
                if sel.select(end - time.monotonic()):
                    b = os.read(proc.stdout.fileno(), 1 << 16)
                    if not b:
                        break
                    line += b
            sel.close()
            if line.endswith(b"\n"):
                uids = {p: _host_uids(p) for p in _descendants(proc.pid)}
                pys = [p for p in uids if os.path.realpath(f"/proc/{p}/exe") == python] if uids else []
                if not pys:
                    pys = [p for p in uids]
                root = [p for p in pys if 0 in uids[p]]
                layers["host_uid"] = [bool(pys) and not root,
                                      f"program runs as host uid {sorted({uids[p][0] for p in pys})}"]
        finally:
            try:
                _, err = proc.communicate(timeout=10)  # closes stdin: the probe exits
            except (subprocess.TimeoutExpired, OSError):
                proc.kill()
                proc.communicate()
        if not line.endswith(b"\n"):
            msg = err.decode(errors="replace").strip()[-300:] or f"exit code {proc.returncode}"
            return {"start": [False, f"bwrap failed here ({msg}); the kernel may refuse namespaces"]}
        try:
            layers.update(json.loads(line))
        except ValueError:
            return {"start": [False, "the self-test printed no result"]}
        layers["cgroup"] = [bool(cg.dirs), ("pids + memory: " + ", ".join(cg.dirs)) if cg.dirs
                            else "none delegated (memory is bounded by RLIMIT_AS and the tmpfs caps)"]
        return layers
    finally:
        cg.close()


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


def _run_child(pending: list, program: str, time_limit_s: float, limits: Limits,
               deadline: float, got: dict, strong: bool) -> _Fate:
    """One child process running ONE program over its `pending` calls (in order); fills `got` with
    the results it streams back and says how it ended. `strong`: run it under bwrap.

    The watchdog is the parent's: the child's whole life is capped when it starts (its startup,
    its program's load and every call's limit), a call's own timer starts when the call before it
    ended, and only the first hello and the next call's result in order count. So nothing a
    program sends can extend any timer, and what it forges can only be its own calls' results."""
    fate = _Fate()
    left = deadline - time.monotonic()
    scratch = None if strong else tempfile.mkdtemp(prefix="sparserl-sbx-")
    nonce = secrets.token_hex(16)
    site_paths = _site_paths() if limits.site_packages else []
    payload = marshal.dumps({
        "nonce": nonce, "programs": [program], "calls": [(c[0], 0, *c[2:]) for c in pending],
        "time_limit_s": float(time_limit_s),
        "limits": {"memory_mb": int(limits.memory_mb), "file_size_mb": int(limits.file_size_mb),
                   "nofile": int(limits.nofile), "cpu_s": max(1, int(left) + 1),
                   "exec_limit_s": float(limits.exec_limit_s), "isolate": bool(limits.isolate),
                   "mode": "strong" if strong else "weak",
                   "sys_path": [_site_dest(i) for i in range(len(site_paths))] if strong else site_paths,
                   "preload": [str(m) for m in limits.preload],
                   "max_result_chars": int(limits.max_result_chars)},
    })
    argv = ["-I", "-S", "-B", "-c", _BOOT]
    pipes = dict(stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                 process_group=0)
    cgroup = None
    try:
        if strong:
            cgroup = _Cgroup(int(limits.memory_mb) + int(limits.scratch_mb) + _SHM_MB + _CGROUP_SLACK_MB,
                             _CGROUP_PIDS)
            proc = _spawn_strong(_interpreter(limits), site_paths, argv, scratch_mb=limits.scratch_mb,
                                 cgroup=cgroup, **pipes)
        else:
            proc = subprocess.Popen([limits.python or sys.executable, *argv], cwd=scratch,
                                    env=dict(_ENV, TMPDIR=scratch, HOME=scratch),
                                    close_fds=True, **pipes)
    except OSError as e:
        if cgroup is not None:
            cgroup.close()
        if scratch is not None:
            _remove_tree(scratch)
        fate.reason = f"could not start the sandbox process: {e}"
        return fate
    wfd, rfd = proc.stdin.fileno(), proc.stdout.fileno()
    os.set_blocking(wfd, False)
    sel = selectors.DefaultSelector()
    sel.register(wfd, selectors.EVENT_WRITE)
    sel.register(rfd, selectors.EVENT_READ)
    order = [c[0] for c in pending]
    nb = nonce.encode()
    buf, total_read, sent, eof = b"", 0, 0, False
    line_cap = 4 * limits.max_result_chars + 65_536
    startup = limits.startup_s + (limits.exec_limit_s if limits.preload else 0.0)
    # each call's allowance: its alarm and a grace; the first also loads the program
    allowance = [time_limit_s + _GRACE_S + (limits.exec_limit_s if k == 0 else 0.0)
                 for k in range(len(pending))]
    life_end = min(deadline, time.monotonic() + startup + sum(allowance))
    step_deadline = time.monotonic() + startup
    done = 0
    reason, rc = "", None
    try:
        while True:
            now = time.monotonic()
            dl = min(step_deadline, life_end)
            if now >= dl:
                if not fate.hello:
                    reason = f"the sandbox did not start within {startup:g}s"
                elif dl == deadline:
                    reason = "timeout: the batch's total time limit ran out (killed)"
                else:
                    reason = f"timeout: no result within {allowance[min(done, len(allowance) - 1)]:g}s (killed)"
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
                    if not fate.hello:
                        if msg[0] == "hello" and len(msg) == 2:
                            fate.hello, fate.isolation = True, str(msg[1])
                            step_deadline = time.monotonic() + allowance[0]
                        continue
                    if done < len(order) and len(msg) == 5 and msg[0] == order[done]:
                        got[msg[0]] = _result(msg)
                        done += 1
                        if done < len(order):
                            step_deadline = time.monotonic() + allowance[done]
                if len(buf) > line_cap:
                    buf = b""
            if eof or done == len(order):
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
        if cgroup is not None:
            cgroup.close()
        if scratch is not None:
            _remove_tree(scratch)
    if done == len(order):
        return fate
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


def _remove_tree(path: str) -> None:
    """Remove a folder the program wrote (the weak level's scratch) without recursing, without
    following a link, and without raising: a hostile tree (thousands deep, links, no permissions)
    must not turn the trainer. What cannot be removed is left and reported once."""
    try:
        top = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return
    stack = [(top, None, None)]  # (dir fd, parent fd, name in parent)
    failed = False
    try:
        while stack:
            fd, parent, name = stack[-1]
            sub = None
            try:
                with os.scandir(fd) as it:
                    for e in it:
                        try:
                            if e.is_dir(follow_symlinks=False):
                                sub = e.name
                                break
                            os.unlink(e.name, dir_fd=fd)
                        except OSError:
                            failed = True
            except OSError:
                failed = True
            if sub is not None:
                try:
                    child = os.open(sub, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                    stack.append((child, fd, sub))
                    continue
                except OSError:
                    try:  # not openable: an empty folder without permissions, or a race
                        os.rmdir(sub, dir_fd=fd)
                        continue
                    except OSError:
                        failed = True
            stack.pop()
            os.close(fd)
            if parent is not None:
                try:
                    os.rmdir(name, dir_fd=parent)
                except OSError:
                    failed = True
            if failed and sub is not None:
                break
        try:
            os.rmdir(path)
        except OSError:
            failed = True
    except BaseException:  # noqa: BLE001 - cleanup must never raise into the trainer
        failed = True
    finally:
        for fd, _, _ in stack:
            try:
                os.close(fd)
            except OSError:
                pass
    if failed and os.path.lexists(path):
        warnings.warn(f"sandbox: could not remove the scratch folder {path}; remove it by hand",
                      RuntimeWarning, stacklevel=2)


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
    """Run every call in a sandboxed process, one process per program (a new one only after a call
    killed the last): one CallResult per call, in order. Never raises for what the programs do.

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
    # one process per program: a program's output channel carries its own calls' results only,
    # so no program can touch another's grade (docs/sandbox.md)
    for pi, program in enumerate(programs):
        _run_program([c for c in pending if c[1] == pi], program, time_limit_s, limits, deadline,
                     total_time_s, results, strong)
    return [r if r is not None else CallResult(False, error="no result") for r in results]


def _run_program(pending: list, program: str, time_limit_s: float, limits: Limits, deadline: float,
                 total_time_s: float, results: list, strong: bool) -> None:
    """One program's calls, in order, in as many processes as its crashes take."""
    failed_starts = 0
    while pending:
        if deadline - time.monotonic() <= 0.05:
            for c in pending:
                results[c[0]] = CallResult(False, error=f"timeout: the batch's total time limit "
                                                         f"({total_time_s:g}s) ran out before this call")
            return
        got: dict[int, CallResult] = {}
        fate = _run_child(pending, program, time_limit_s, limits, deadline, got, strong)
        if fate.hello:  # the level is the parent's to say; the weak child reports its namespaces
            _LAST_ISOLATION.update(isolation="strong" if strong else "weak",
                                   detail="strong" if strong else fate.isolation)
        for i, r in got.items():
            results[i] = r
        rest = [c for c in pending if results[c[0]] is None]
        if not rest:
            return
        if not fate.hello:
            failed_starts += 1
            if failed_starts >= 2:
                for c in rest:
                    results[c[0]] = CallResult(False, error=fate.reason)
                return
            pending = rest
            continue
        results[rest[0][0]] = CallResult(False, error=fate.reason)  # the call that was running
        pending = rest[1:]


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
