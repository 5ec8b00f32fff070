"""The sandbox's self-test probe (`sandbox.self_test`): it runs inside the real sandbox with no
audit hook, as a hostile program would, and checks each layer of docs/sandbox.md from inside. The
parent runs `python -I -S -c <this file's text + a call of probe(...)>` and checks the host uid from
outside meanwhile. Never imported for use; linted and read as text.
"""
import os, sys, json, socket, resource, _thread


def probe(devices, scratch_mb, shm_mb, allowed):
    res = {}
    def chk(name, ok, detail=""):
        res[name] = [bool(ok), str(detail)]
    st = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)
    caps = {k: int(st[k], 16) for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")}
    chk("capabilities", not any(caps.values()), "none" if not any(caps.values()) else caps)
    chk("no_new_privs", st["NoNewPrivs"].strip() == "1", st["NoNewPrivs"].strip())
    chk("seccomp", st["Seccomp"].strip() == "2", "filter mode" if st["Seccomp"].strip() == "2" else st["Seccomp"].strip())
    writable = []
    for root, dirs, files in os.walk("/proc/sys"):
        for f in files:
            try:
                os.close(os.open(os.path.join(root, f), os.O_WRONLY))
                writable.append(os.path.join(root, f))
            except OSError:
                pass
    for p in ("/proc/sysrq-trigger", "/proc/self/oom_score_adj", "/proc/self/attr/current"):
        try:
            os.close(os.open(p, os.O_WRONLY))
            writable.append(p)
        except OSError:
            pass
    chk("proc_read_only", not writable, f"{len(writable)} writable: {writable[:3]}")
    bad, rw = [], []
    for line in open("/proc/self/mountinfo"):
        f = line.split(" - ")[0].split()
        mnt, opts = f[4], f[5].split(",")
        if "rw" not in opts:
            continue
        rw.append(mnt)
        need = ("nosuid",) if mnt in devices else ("nosuid", "nodev")
        if any(o not in opts for o in need):
            bad.append(f"{mnt} ({f[5]})")
    extra = sorted(set(rw) - set(devices) - {"/scratch", "/dev/shm"})
    chk("mounts", not bad and not extra, f"writable: {sorted(rw)}" + (f"; without nosuid/nodev: {bad}" if bad else "") + (f"; unexpected: {extra}" if extra else ""))
    caps_ok = []
    for m, cap in (("/scratch", scratch_mb), ("/dev/shm", shm_mb)):
        v = os.statvfs(m)
        caps_ok.append(v.f_blocks * v.f_frsize <= cap << 20 and v.f_flag & os.ST_NOSUID and v.f_flag & os.ST_NODEV)
    chk("tmpfs_caps", all(caps_ok), f"/scratch {scratch_mb} MB, /dev/shm {shm_mb} MB")
    def denied(fn):
        try:
            fn()
        except OSError:
            return True
        return False
    chk("no_memfd", denied(lambda: os.memfd_create("x")), "memfd_create refused")
    chk("no_network", denied(lambda: socket.socket(socket.AF_INET)), "AF_INET refused")
    def fork():
        if os.fork() == 0:
            os._exit(0)
    chk("no_fork", denied(fork), "fork refused")
    resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
    try:
        _thread.start_new_thread(lambda: None, ())
        chk("nproc_binds", False, "a thread started under RLIMIT_NPROC 0")
    except RuntimeError:
        chk("nproc_binds", True, "RLIMIT_NPROC 0 refuses a thread")
    cmd = open("/proc/1/cmdline", "rb").read().split(b"\0")
    leak = [a.decode() for a in cmd if a.startswith(b"/") and not a.startswith(tuple(p.encode() for p in allowed))]
    chk("no_host_paths", not leak, f"/proc/1/cmdline: {leak[:3]}" if leak else "/proc/1/cmdline names the interpreter only")
    try:
        os.listdir("/root")
        chk("root_hidden", not os.path.exists("/root"), "/root lists")
    except OSError:
        chk("root_hidden", True, "/root absent or not listable")
    sys.stdout.write(json.dumps(res) + "\n")
    sys.stdout.flush()
    sys.stdin.read()  # the parent checks the host uid of this process meanwhile
