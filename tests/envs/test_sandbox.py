"""The CodeIO sandbox (sparserl.envs.sandbox): results come back, and each attack fails inside the
child, gives a clean error result, and the calls after it still run ("the run goes on")."""
import os
import shutil
import signal
import socket
import tempfile
import time
import uuid

import pytest

from sparserl.envs import sandbox
from sparserl.envs.sandbox import (Call, Limits, run_calls, run_jobs, sandbox_info, self_test,
                                   strong_isolation)

GOOD = "def f(x):\n    return x + 1\n"
SECRET = "s3cr3t-value-8c1f"


def _then_good(program, args=(1,), **kw):
    """The attack, then a good call in the same batch: the good one must still work."""
    res = run_jobs([Call(program, "f", args), Call(GOOD, "f", (41,))], **kw)
    assert res[1].ok and res[1].value == 42, res[1]
    return res[0]


def test_a_batch_of_calls_in_one_process():
    prog = "def f(x, y=0):\n    return (x * 3 + 1) % 10 + y\n"
    res = run_calls(prog, "f", [0, 1, (2, 10), 3])
    assert [r.value for r in res] == [1, 4, 17, 0]
    assert all(r.ok and r.error == "" for r in res)
    assert res[0].repr == "1" and res[0].json == "1"
    kw = run_jobs([Call(prog, "f", (1,), {"y": 5}), Call(prog, "g", (1,))])
    assert kw[0].value == 9
    assert not kw[1].ok and "no function 'g'" in kw[1].error


def test_values_come_back_as_literals_and_json():
    prog = "def f(x):\n    return {'a': (x, 1.5), 'b': [None, True, 'z\\n']}\n"
    (r,) = run_calls(prog, "f", [2])
    assert r.value == {"a": (2, 1.5), "b": [None, True, "z\n"]}
    assert r.json == '{"a": [2, 1.5], "b": [null, true, "z\\n"]}'
    (o,) = run_calls("class A:\n    pass\ndef f(x):\n    return A()\n", "f", [1])
    assert o.ok and o.value is None and o.json is None and "A object" in o.repr


def test_bad_programs_give_error_results_not_exceptions():
    assert "SyntaxError" in run_calls("def f(x) return 1", "f", [1])[0].error
    res = run_calls("def f(x):\n    return 1 // x\n", "f", [0, 1])
    assert "ZeroDivisionError" in res[0].error and res[1].value == 1
    bad_args = run_jobs([Call(GOOD, "f", (object(),)), Call(GOOD, "f", (1,))])
    assert "literals" in bad_args[0].error and bad_args[1].value == 2
    top = run_calls("raise RuntimeError('boom')\ndef f(x):\n    return x\n", "f", [1, 2])
    assert all("failed to load" in r.error and "boom" in r.error for r in top)


def test_printed_junk_does_not_break_the_results():
    prog = ("import os, sys\ndef f(x):\n    print('junk\\n' * 100)\n"
            "    sys.stdout.write('{\"i\": 0}')\n    os.write(1, b'noise\\n')\n    os.write(2, b'err')\n"
            "    return x * 2\n")
    assert [r.value for r in run_calls(prog, "f", [1, 2, 3])] == [2, 4, 6]


# ---------------------------------------------------------------------------------------------
# the attacks

def test_an_infinite_loop_times_out_and_the_run_goes_on():
    # the call's own alarm ends it ("timeout"), not the batch's default total limit behind it
    r = _then_good("def f(x):\n    while True:\n        pass\n", time_limit_s=0.3)
    assert not r.ok and r.error.startswith("timeout")


def test_a_loop_that_ignores_the_alarm_is_killed_and_the_run_goes_on():
    prog = "import signal\ndef f(x):\n    signal.signal(signal.SIGALRM, signal.SIG_IGN)\n    while True:\n        pass\n"
    r = _then_good(prog, time_limit_s=0.3, limits=Limits(exec_limit_s=0.3))
    assert not r.ok and "killed" in r.error


def test_a_dying_process_costs_only_its_call():
    r = _then_good("import os\ndef f(x):\n    os._exit(3)\n")
    assert not r.ok and "exited (code 3)" in r.error


def test_the_total_time_limit_bounds_the_batch():
    loop = "def f(x):\n    while True:\n        pass\n"
    res = run_calls(loop, "f", [1, 2, 3, 4], time_limit_s=0.4, total_time_s=1.0)
    assert all(not r.ok for r in res) and "total time limit" in res[-1].error


@pytest.mark.parametrize("body", [
    "import os\n    while True:\n        os.fork()",
    "import subprocess\n    subprocess.Popen(['sh', '-c', ':(){ :|:& };:'])",
    "import os\n    os.system('sh -c \"while true; do :; done\" &')",
    "import os\n    os.posix_spawn('/bin/sh', ['sh'], {})",
    "import multiprocessing\n    multiprocessing.Process(target=print).start()",
    "import threading\n    threading.Thread(target=print).start()",
])
def test_a_fork_bomb_cannot_start_a_process(body):
    r = _then_good(f"def f(x):\n    {body}\n    return 'escaped'\n")
    assert not r.ok and "blocked" in r.error


def test_a_10_gb_allocation_fails_and_the_run_goes_on():
    r = _then_good("def f(x):\n    a = bytearray(10 * 1024 ** 3)\n    return len(a)\n")
    assert not r.ok and "MemoryError" in r.error
    r = _then_good("def f(x):\n    a = [0] * (10 * 1024 ** 3 // 8)\n    return len(a)\n")
    assert not r.ok and "MemoryError" in r.error


@pytest.mark.parametrize("host", ["127.0.0.1", "8.8.8.8"])
def test_a_socket_cannot_connect(host):
    r = _then_good(f"import socket\ndef f(x):\n    s = socket.socket()\n    s.connect(('{host}', 53))\n"
                   "    return 'connected'\n")
    assert not r.ok and "socket" in r.error and "blocked" in r.error
    r = _then_good(f"import urllib.request\ndef f(x):\n    return urllib.request.urlopen('http://{host}/').read()\n")
    assert not r.ok and "blocked" in r.error


def test_writing_outside_the_scratch_directory_is_refused(tmp_path):
    target = tmp_path / "pwned.txt"
    for body in (f"open({str(target)!r}, 'w').write('x')",
                 f"import os\n    os.close(os.open({str(target)!r}, os.O_CREAT | os.O_WRONLY))",
                 f"import os\n    os.symlink({str(target)!r}, 'link')\n    open('link', 'w').write('x')",
                 f"import os\n    os.rename({str(tmp_path)!r}, 'moved')"):
        r = _then_good(f"def f(x):\n    {body}\n    return 'wrote'\n")
        # blocked by the hook, or (strong level: /tmp is the scratch tmpfs) not there at all
        assert not r.ok and ("blocked" in r.error or "No such file" in r.error), body
        assert not target.exists()
    assert tmp_path.exists()
    ok = run_calls("def f(x):\n    open('mine.txt', 'w').write(x)\n    return open('mine.txt').read()\n",
                   "f", ["inside"])[0]
    assert ok.value == "inside"  # the scratch directory itself is writable


def test_the_parents_environment_is_not_visible(monkeypatch):
    monkeypatch.setenv("SPARSERL_TEST_SECRET", SECRET)
    r = _then_good("import os\ndef f(x):\n    return os.environ.get('SPARSERL_TEST_SECRET', 'unset')\n")
    assert r.ok and r.value == "unset"
    r = _then_good("import os\ndef f(x):\n    return repr(dict(os.environ))\n")
    assert SECRET not in r.repr
    for path in (f"/proc/{os.getpid()}/environ", "/proc/self/environ", "/proc/1/environ"):
        r = _then_good(f"def f(x):\n    return open({path!r}, 'rb').read()\n")
        assert not r.ok and SECRET not in r.repr and "blocked" in r.error


def test_the_parent_cannot_be_signalled():
    hits = []
    old = signal.signal(signal.SIGUSR1, lambda *a: hits.append(a))
    try:
        pid = os.getpid()
        for body in ("import os, signal\n    os.kill(x, signal.SIGUSR1)",
                     "import os, signal\n    os.killpg(os.getpgid(x), signal.SIGUSR1)",
                     "import os, signal\n    signal.pidfd_send_signal(os.pidfd_open(x), signal.SIGUSR1)"):
            r = _then_good(f"def f(x):\n    {body}\n    return 'sent'\n", args=(pid,))
            assert not r.ok, body
        time.sleep(0.05)
        assert hits == []
    finally:
        signal.signal(signal.SIGUSR1, old)


def test_ctypes_cannot_call_into_libc():
    r = _then_good("import ctypes\ndef f(x):\n    return ctypes.CDLL(None).getpid()\n")
    assert not r.ok and "blocked" in r.error


def test_one_batch_is_one_process():
    info = sandbox_info()
    assert info["ok"] and info["isolation"] in ("strong", "weak")
    weak = sandbox_info(Limits(isolation="weak"))
    assert weak["ok"] and weak["isolation"] == "weak"
    assert weak["detail"] in ("user+net+pid", "user+net", "net", "audit-only")
    # a module-level counter: one process counts 1..64, a process per call would answer 1 each
    # time (what makes a batch fast: ~30-70 ms on an idle core, perf/sandbox_grading.py)
    prog = "n = 0\ndef f(x):\n    global n\n    n += 1\n    return n\n"
    assert [r.value for r in run_calls(prog, "f", list(range(64)))] == list(range(1, 65))


def test_the_weak_fallback_still_blocks_the_plain_attacks(tmp_path):
    weak = Limits(isolation="weak")
    target = tmp_path / "pwned.txt"
    for body in (f"open({str(target)!r}, 'w').write('x')", "import os\n    os.fork()",
                 "import socket\n    socket.socket().connect(('127.0.0.1', 53))"):
        r = _then_good(f"def f(x):\n    {body}\n    return 'escaped'\n", limits=weak)
        assert not r.ok and "blocked" in r.error, body
    assert not target.exists()


# ---------------------------------------------------------------------------------------------
# strong isolation: the attacks of a program that switches the audit hook off first. Each attack
# program returns 1 only if it got out (CodeIO's target output below), and raises otherwise; the
# host paths are checked afterwards.

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Switch the hook off: its `busy` flag is a one-element list found through the gc. The probe then
# makes sure it is off (ctypes calls are blocked by the hook alone), so what stops the attack after
# it is a kernel layer, not the hook.
FLIP = '''
import gc, ctypes
def _flip():
    for o in gc.get_objects():
        if type(o) is list and len(o) == 1 and o[0] is False:
            o[0] = True
    try:
        ctypes.CDLL(None).getpid()
    except PermissionError as e:
        raise RuntimeError("HOOK_STILL_ON " + str(e))
'''


@pytest.fixture(scope="module")
def strong():
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap (bwrap) is not installed: `apt-get install bubblewrap` (.ci/run does)")
    ok, why = strong_isolation()
    assert ok, why  # bwrap is here: strong isolation must work
    return Limits(isolation="strong")


@pytest.fixture
def host_targets(tmp_path):
    """Paths outside scratch the attacks try to create: in /root, the host's /tmp, the project."""
    tag = f"sparserl-attack-{uuid.uuid4().hex[:8]}"
    paths = [os.path.join(os.path.expanduser("~"), tag), os.path.join("/root", tag),
             os.path.join(tempfile.gettempdir(), tag), str(tmp_path / tag), os.path.join(REPO, tag)]
    paths = list(dict.fromkeys(paths))
    yield paths
    created = [p for p in paths if os.path.lexists(p)]
    for p in created:
        os.remove(p)
    assert created == [], f"created outside scratch: {created}"


def _attack(program, limits, time_limit_s=2.0):
    """Run the attack then a good call in one batch; the attack must not return 1, the hook must
    have been off, and the good call must still work."""
    res = run_jobs([Call(program, "f", (0,)), Call(GOOD, "f", (41,))], time_limit_s=time_limit_s,
                   limits=limits)
    assert res[1].ok and res[1].value == 42, res[1]
    assert not (res[0].ok and res[0].value == 1), res[0]
    assert "HOOK_STILL_ON" not in res[0].error, res[0].error
    return res[0]


@pytest.mark.e2e  # the strong-isolation battery
def test_strong_isolation_is_active_when_bwrap_is_present(strong):
    info = sandbox_info()
    assert info["ok"] and info["isolation"] == "strong"
    prog = ("import os\ndef f(x):\n    return (os.getuid(), os.getgid(), os.path.exists(x), "
            "os.path.exists('/home'), os.path.exists('/work'))\n")
    (r,) = run_calls(prog, "f", [REPO], limits=strong)
    uid = sandbox.HOST_ID if os.geteuid() == 0 else 65534  # a root trainer's program: HOST_ID on the host
    assert r.ok and r.value == (uid, uid, False, False, False), r


@pytest.mark.e2e  # the strong-isolation battery
def test_switching_the_hook_off_is_real(strong):
    """The flip does turn the hook off (in both levels): the attacks below meet the kernel layers."""
    prog = FLIP + "def f(x):\n    _flip()\n    return ctypes.CDLL(None).getpid() > 0\n"
    for lim in (strong, Limits(isolation="weak")):
        (r,) = run_calls(prog, "f", [0], limits=lim)
        assert r.ok and r.value is True, r


@pytest.mark.e2e  # the strong-isolation battery
def test_gc_flag_flip_then_write_outside_scratch(strong, host_targets):
    prog = FLIP + f'''
def f(x):
    _flip()
    wrote = []
    for p in {host_targets!r}:
        try:
            open(p, "w").write("pwned")
            wrote.append(p)
        except OSError:
            pass
    return wrote
'''
    r = _attack(prog, strong)
    # only the sandbox's own /tmp (a tmpfs) takes writes; the fixture checks the host's paths
    assert r.ok and all(p.startswith(tempfile.gettempdir() + "/") for p in r.value), r
    ok = run_calls(FLIP + "def f(x):\n    _flip()\n    open('mine', 'w').write('x')\n"
                   "    return open('mine').read()\n", "f", [0], limits=strong)[0]
    assert ok.value == "x"  # scratch stays writable


@pytest.mark.e2e  # the strong-isolation battery
def test_a_sigprof_handler_during_the_busy_window(strong, host_targets):
    """No flip: a profiling timer's handler runs while the hook is inside its busy window (its
    own checks turned off), and writes from there."""
    prog = f'''
import gc, signal
hits = {{"busy": 0, "fired": 0}}
def f(x):
    flags = [o for o in gc.get_objects() if type(o) is list and len(o) == 1 and o[0] is False]
    def handler(sig, frame):
        hits["fired"] += 1
        if any(o[0] for o in flags):
            hits["busy"] += 1
            for p in {host_targets!r}:
                try:
                    open(p, "w").write("pwned")
                    if not p.startswith("/tmp/"):  # the sandbox's own /tmp is a tmpfs
                        hits["escaped"] = 1
                except OSError:
                    pass
    signal.signal(signal.SIGPROF, handler)
    signal.setitimer(signal.ITIMER_PROF, 0.0005, 0.0005)
    for i in range(20000):
        open("scratch_file", "w").close()
        if hits["busy"] >= 5:
            break
    signal.setitimer(signal.ITIMER_PROF, 0)
    if hits.get("escaped"):
        return 1
    raise PermissionError(f"held: fired {{hits['fired']}}, in the busy window {{hits['busy']}}")
'''
    r = _attack(prog, strong, time_limit_s=5.0)
    assert "held" in r.error and "in the busy window 0" not in r.error, r.error


@pytest.mark.e2e  # the strong-isolation battery
def test_ctypes_system_touch(strong, host_targets):
    cmds = " ; ".join(f"touch {p}" for p in host_targets) + " ; true"
    prog = FLIP + f'''
def f(x):
    _flip()
    rc = ctypes.CDLL(None).system({cmds.encode()!r})
    if rc == 0:
        return 1
    raise OSError(f"system gave {{rc}}")
'''
    _attack(prog, strong)


@pytest.mark.e2e  # the strong-isolation battery
def test_reading_secrets_and_the_project(strong):
    paths = ["/etc/shadow", "/etc/passwd", os.path.join(REPO, "pyproject.toml"), __file__,
             "/root/.bash_history", "/work"]
    prog = FLIP + f'''
import os
def f(x):
    _flip()
    got = []
    for p in {paths!r}:
        try:
            if os.path.isdir(p):
                got.append(os.listdir(p))
            else:
                got.append(open(p, "rb").read(10))
        except OSError:
            pass
    if got:
        return 1
    raise PermissionError("nothing read")
'''
    _attack(prog, strong)


@pytest.mark.e2e  # the strong-isolation battery
def test_forking_20_times(strong):
    prog = FLIP + '''
import os
def f(x):
    _flip()
    libc = ctypes.CDLL(None, use_errno=True)
    n = 0
    for i in range(20):
        pid = libc.fork()
        if pid == 0:
            libc._exit(0)
        if pid > 0:
            n += 1
    if n:
        return 1
    raise OSError(ctypes.get_errno(), "fork failed 20 times")
'''
    r = _attack(prog, strong)
    assert "fork failed 20 times" in r.error


@pytest.mark.e2e  # the strong-isolation battery
def test_a_socket_to_a_local_listener(strong):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    srv.setblocking(False)
    port = srv.getsockname()[1]
    prog = FLIP + f'''
import socket
def f(x):
    _flip()
    for fam, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::ffff:127.0.0.1")):
        try:
            s = socket.socket(fam)
            s.settimeout(1)
            s.connect((host, {port}))
            return 1
        except OSError:
            pass
    raise PermissionError("no socket connected")
'''
    try:
        _attack(prog, strong)
        with pytest.raises(BlockingIOError):
            srv.accept()
    finally:
        srv.close()


@pytest.mark.e2e  # the strong-isolation battery
def test_reading_the_parents_secret_environment(strong, monkeypatch):
    monkeypatch.setenv("SPARSERL_TEST_SECRET", SECRET)
    prog = FLIP + f'''
import os
def f(x):
    _flip()
    seen = [repr(dict(os.environ)), str(ctypes.CDLL(None).getenv)]
    for pid in os.listdir("/proc") + [str({os.getpid()}), str({os.getppid()})]:
        try:
            seen.append(open(f"/proc/{{pid}}/environ", "rb").read().decode("latin-1"))
        except OSError:
            pass
    if any({SECRET!r} in t for t in seen):
        return 1
    raise PermissionError("no secret")
'''
    _attack(prog, strong)


@pytest.mark.e2e  # the strong-isolation battery
def test_signalling_the_parent(strong):
    hits = []
    old = signal.signal(signal.SIGUSR1, lambda *a: hits.append(a))
    try:
        pid = os.getpid()
        prog = FLIP + f'''
import signal
def f(x):
    _flip()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.kill({pid}, int(signal.SIGUSR1)) == 0 or libc.kill(-{os.getpgrp()}, int(signal.SIGUSR1)) == 0:
        return 1
    raise OSError(ctypes.get_errno(), "kill failed")
'''
        _attack(prog, strong)
        time.sleep(0.05)
        assert hits == []
    finally:
        signal.signal(signal.SIGUSR1, old)



# ---------------------------------------------------------------------------------------------
# The attacks of a trainer running as root (CI runs as root): each ran against the earlier design,
# where bwrap's uid 65534 mapped to host root. Docs/sandbox.md says which layer stops which.

def _sbx_dirs():
    return {n for n in os.listdir(tempfile.gettempdir()) if n.startswith("sparserl-sbx")}


@pytest.fixture
def nothing_on_host():
    """The strong level writes nothing on the host's disk: no scratch folder appears, or stays."""
    before = _sbx_dirs()
    yield
    assert _sbx_dirs() - before == set()


@pytest.mark.e2e  # the strong-isolation battery
def test_the_self_test_finds_every_layer(strong):
    layers = self_test()
    required = {"host_uid", "capabilities", "no_new_privs", "seccomp", "proc_read_only", "mounts",
                "tmpfs_caps", "no_memfd", "no_network", "no_fork", "nproc_binds", "no_host_paths",
                "root_hidden"}
    assert required <= set(layers), layers
    assert all(layers[k][0] for k in required), {k: v for k, v in layers.items() if not v[0]}
    if os.geteuid() == 0:
        assert str(sandbox.HOST_ID) in layers["host_uid"][1]


@pytest.mark.e2e  # the strong-isolation battery
@pytest.mark.parametrize("mutation", ["proc_writable", "no_uid_drop"])
def test_the_self_test_refuses_a_missing_layer(strong, monkeypatch, mutation):
    """Take one layer away and the self-test must see it, so `strong` is never recorded falsely."""
    if mutation == "no_uid_drop" and os.geteuid() != 0:
        pytest.skip("only a root trainer drops its uid")
    monkeypatch.setattr(sandbox, "_STRONG", {})
    monkeypatch.setattr(sandbox, "_SELF_TEST", {})
    if mutation == "proc_writable":
        real = sandbox._bwrap_args

        def args(*a, **k):
            out = real(*a, **k)
            i = out.index("--remount-ro")
            return out[:i] + out[i + 2:]
        monkeypatch.setattr(sandbox, "_bwrap_args", args)
        layer = "proc_read_only"
    else:  # bwrap's own user namespace, as before: uid 65534 inside is host root
        monkeypatch.setattr(sandbox, "_trainer_is_root", lambda: False)
        layer = "host_uid"
    ok, why = strong_isolation()
    assert not ok and layer in why, why


def test_a_root_trainer_without_setpriv_refuses_strong(monkeypatch):
    if os.geteuid() != 0:
        pytest.skip("only a root trainer needs setpriv")
    monkeypatch.setattr(sandbox, "_STRONG", {})
    real = shutil.which
    monkeypatch.setattr(sandbox.shutil, "which", lambda n, *a, **k: None if n == "setpriv" else real(n, *a, **k))
    monkeypatch.setattr(sandbox.os.path, "exists", lambda p, _e=os.path.exists: False if p == "/usr/bin/setpriv" else _e(p))
    ok, why = strong_isolation()
    assert not ok and "setpriv" in why


@pytest.mark.e2e  # the strong-isolation battery
def test_attack_1_core_pattern_and_every_sysctl(strong, nothing_on_host):
    """Point kernel.core_pattern at a script in scratch and segfault: /proc is read-only, the host
    uid is not root, and not one of the host's sysctls opens for writing."""
    before = open("/proc/sys/kernel/core_pattern").read()
    prog = FLIP + """
import os
def f(x):
    _flip()
    n = 0
    for root, dirs, files in os.walk("/proc/sys"):
        for name in files:
            try:
                os.close(os.open(os.path.join(root, name), os.O_WRONLY))
                n += 1
            except OSError:
                pass
    try:
        with open("/proc/sys/kernel/core_pattern", "w") as fh:
            fh.write("|/scratch/pwn.sh")
        return 1
    except OSError:
        pass
    if n:
        return 1
    ctypes.string_at(0)  # a segfault: no core handler of ours may run
"""
    r = _attack(prog, strong)
    assert "killed (SIGSEGV)" in r.error, r.error
    assert open("/proc/sys/kernel/core_pattern").read() == before


@pytest.mark.e2e  # the strong-isolation battery
def test_attack_2_a_setuid_copy_never_reaches_the_host(strong, nothing_on_host):
    prog = FLIP + """
import os, shutil
def f(x):
    _flip()
    shutil.copy("/usr/bin/id", "/scratch/id")
    os.chmod("/scratch/id", 0o4755)
    st = os.statvfs("/scratch")
    if not (st.f_flag & os.ST_NOSUID and st.f_flag & os.ST_NODEV):
        return 1
    for line in open("/proc/self/mountinfo"):
        if line.split()[4] == "/scratch" and line.split(" - ")[1].split()[0] != "tmpfs":
            return 1  # scratch is a host folder
    raise PermissionError("the setuid copy lives in a nosuid tmpfs inside the sandbox")
"""
    r = _attack(prog, strong)
    assert "nosuid tmpfs" in r.error, r.error


DEEP = """
import os
def f(x):
    {flip}
    for i in range({depth}):
        os.mkdir("d")
        os.chdir("d")
    open("leaf", "w").write("x")
    os.symlink("/", "root_link")
    return 7
"""


@pytest.mark.e2e  # the strong-isolation battery
def test_attack_3_a_deep_tree_cannot_crash_the_trainer(strong, nothing_on_host):
    (r,) = run_calls(FLIP + DEEP.format(flip="_flip()", depth=3000), "f", [0], time_limit_s=30.0, limits=strong)
    assert r.ok and r.value == 7, r  # it ran; nothing of it is on the host (the fixture)


@pytest.mark.e2e  # the attack battery: a deep tree
def test_attack_3_weak_level_cleanup_never_recurses(nothing_on_host):
    """The weak level's scratch is a host folder: its removal must hold against a tree past Python's
    recursion limit (1500 deep: the hook resolves each path, so 3000 took over 20 s on a loaded CI)."""
    r = _then_good(DEEP.format(flip="pass", depth=1500), time_limit_s=60.0, limits=Limits(isolation="weak"))
    assert r.ok and r.value == 7, r


@pytest.mark.e2e  # the attack battery: a deep tree
def test_remove_tree_is_iterative_and_follows_no_link(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("x")
    top = tmp_path / "scratch"
    top.mkdir()
    os.symlink(outside, top / "link")
    fd = os.open(top, os.O_RDONLY)
    for _ in range(5000):  # far past Python's recursion limit and PATH_MAX
        os.mkdir("d", dir_fd=fd)
        nfd = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = nfd
    os.close(os.open("leaf", os.O_CREAT | os.O_WRONLY, dir_fd=fd))
    os.symlink(outside, "link2", dir_fd=fd)
    os.close(fd)
    sandbox._remove_tree(str(top))
    assert not top.exists() and (outside / "keep").exists()
    sandbox._remove_tree(str(tmp_path / "absent"))  # never raises


@pytest.mark.e2e  # the strong-isolation battery
def test_attack_4_memory_past_the_limit(strong, nothing_on_host):
    """/dev/shm, /scratch, memfd and SysV segments: what RLIMIT_AS does not count is capped."""
    prog = FLIP + """
import os
def f(x):
    _flip()
    total = 0
    chunk = b"x" * (1 << 20)
    for d in ("/dev/shm", "/scratch", "/tmp"):
        try:
            with open(d + "/fill", "wb") as fh:
                for i in range(400):
                    fh.write(chunk)
                    total += len(chunk)
        except OSError:
            pass
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.memfd_create(b"m", 0) >= 0:
        return 1
    if libc.shmget(0, 256 << 20, 0o1600) >= 0:
        return 1
    if total > (16 + 1 + 1) << 20:
        return 1
    raise MemoryError(f"capped at {total >> 20} MB")
"""
    r = _attack(prog, strong, time_limit_s=5.0)
    assert "capped at" in r.error, r.error


@pytest.mark.e2e  # the strong-isolation battery
def test_attack_5_no_host_disk(strong, nothing_on_host):
    prog = FLIP + """
import os, time
def f(x):
    _flip()
    n, t0 = 0, time.monotonic()
    try:
        while time.monotonic() - t0 < 1.0:
            open(f"f{n}", "w").close()
            n += 1
        open("big", "wb").write(b"x" * (200 << 20))
    except (OSError, MemoryError):
        pass
    st = os.statvfs("/scratch")
    if st.f_blocks * st.f_frsize > 16 << 20:
        return 1
    raise OSError(f"{n} files, all in a 16 MB tmpfs")
"""
    r = _attack(prog, strong, time_limit_s=5.0)
    assert "16 MB tmpfs" in r.error, r.error


@pytest.mark.e2e  # the strong-isolation battery
def test_attack_6_threads_and_clones(strong):
    prog = FLIP + """
def f(x):
    _flip()
    libc = ctypes.CDLL(None, use_errno=True)
    pause = ctypes.cast(libc.pause, ctypes.c_void_p)
    started = 0
    for i in range(200):
        t = ctypes.c_ulong()
        if libc.pthread_create(ctypes.byref(t), None, pause, None) == 0:
            started += 1
    if started:
        return 1
    raise OSError(f"0 of 200 threads")
"""
    r = _attack(prog, strong)
    assert "0 of 200 threads" in r.error, r.error


# Find the runner's nonce (the `job` dict, through the gc) and its output pipe, then write framed
# lines there: fake hellos, or results for calls that are not this program's.
FORGE = FLIP + """
import os, stat, time
def _channel():
    job = [o for o in gc.get_objects() if type(o) is dict and "nonce" in o and "calls" in o][0]
    fds = [fd for fd in range(3, 64) if _is_pipe(fd)]
    return job["nonce"].encode(), fds
def _is_pipe(fd):
    try:
        return stat.S_ISFIFO(os.fstat(fd).st_mode)
    except OSError:
        return False
def _send(msg):
    nonce, fds = _channel()
    for fd in fds:
        try:
            os.write(fd, nonce + repr(msg).encode() + b"\\n")
        except OSError:
            pass
"""


@pytest.mark.e2e  # the strong-isolation battery
def test_attack_7_fake_hellos_cannot_extend_the_watchdog(strong):
    prog = FORGE + """
import signal
def f(x):
    _flip()
    signal.signal(signal.SIGALRM, signal.SIG_IGN)  # the child's own alarm is off: only the parent's
    signal.setitimer(signal.ITIMER_REAL, 0)        # watchdog is left
    t0 = time.monotonic()
    while time.monotonic() - t0 < 16:
        _send(("hello", "strong"))
        time.sleep(0.5)
    return 1
"""
    t0 = time.monotonic()
    res = run_jobs([Call(prog, "f", (0,)), Call(GOOD, "f", (41,))], time_limit_s=2.0, limits=strong)
    took = time.monotonic() - t0
    assert not res[0].ok and "timeout" in res[0].error, res[0]
    assert res[1].ok and res[1].value == 42, res[1]
    assert took < 14, f"the attack held the watchdog for {took:.1f}s"  # its own 16 s would pass 16


@pytest.mark.e2e  # the strong-isolation battery
def test_attack_8_one_program_cannot_forge_anothers_grade(strong):
    prog = FORGE + """
def f(x):
    _flip()
    for i in range(8):
        _send((i, True, "1", "", 0.0))    # every call: 'right'
        _send((i, True, "0", "", 0.0))
    return 0
"""
    right, wrong = "def f(x):\n    return 1\n", "def f(x):\n    return 0\n"
    calls = [Call(right, "f", (0,)), Call(prog, "f", (0,)), Call(wrong, "f", (0,)),
             Call(right, "f", (1,)), Call(wrong, "f", (1,))]
    res = run_jobs(calls, time_limit_s=2.0, limits=strong)
    # its own call's result is its to forge (as it is its to return); every other call's is not
    assert [res[i].value for i in (0, 2, 3, 4)] == [1, 0, 1, 0], res


@pytest.mark.e2e  # the strong-isolation battery
def test_attack_9_no_host_paths_and_no_root_listing(strong):
    prog = FLIP + f"""
import os
def f(x):
    _flip()
    seen = []
    for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
        try:
            seen.append(open(f"/proc/{{pid}}/cmdline", "rb").read().decode(errors="replace"))
        except OSError:
            pass
    seen.append(open("/proc/self/mountinfo").read())
    leaks = [s for s in ({REPO!r}, {tempfile.gettempdir() + "/"!r}, "/work", "/home") if any(s in t for t in seen)]
    try:
        leaks.append(os.listdir("/root"))
    except OSError:
        pass
    if leaks:
        return leaks
    raise PermissionError("nothing of the host")
"""
    r = _attack(prog, strong)
    assert "nothing of the host" in r.error, r
