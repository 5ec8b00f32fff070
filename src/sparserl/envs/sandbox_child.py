"""The sandbox's child: the code `sandbox.py` runs as `python -I -S -B -c <this file's text>` inside
the isolation it builds (bubblewrap + seccomp, or the weak fallback). It reads one marshalled job
from stdin (the limits, the programs, the calls), applies the limits and hooks, and writes each
call's result framed by the job's nonce. It imports nothing of sparserl (the sandbox mounts none)
and keeps all state inside `_main()`, so a program's `import __main__` finds no runner state by
name. Never imported for use; linted and read as text.
"""
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


if __name__ == "__main__":  # `python -I -S -B -c <this file>`
    _main()
