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

from sparserl.envs.sandbox import (Call, Limits, run_calls, run_jobs, sandbox_info,
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
    t0 = time.perf_counter()
    r = _then_good("def f(x):\n    while True:\n        pass\n", time_limit_s=0.3)
    assert not r.ok and r.error.startswith("timeout")
    assert time.perf_counter() - t0 < 5


def test_a_loop_that_ignores_the_alarm_is_killed_and_the_run_goes_on():
    prog = "import signal\ndef f(x):\n    signal.signal(signal.SIGALRM, signal.SIG_IGN)\n    while True:\n        pass\n"
    r = _then_good(prog, time_limit_s=0.3, limits=Limits(exec_limit_s=0.3))
    assert not r.ok and "killed" in r.error


def test_a_dying_process_costs_only_its_call():
    r = _then_good("import os\ndef f(x):\n    os._exit(3)\n")
    assert not r.ok and "exited (code 3)" in r.error


def test_the_total_time_limit_bounds_the_batch():
    loop = "def f(x):\n    while True:\n        pass\n"
    t0 = time.perf_counter()
    res = run_calls(loop, "f", [1, 2, 3, 4], time_limit_s=0.4, total_time_s=1.0)
    assert time.perf_counter() - t0 < 4
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
        assert not r.ok and "blocked" in r.error, body
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


def test_one_batch_is_one_fast_process():
    info = sandbox_info()
    assert info["ok"] and info["isolation"] in ("strong", "weak")
    weak = sandbox_info(Limits(isolation="weak"))
    assert weak["ok"] and weak["isolation"] == "weak"
    assert weak["detail"] in ("user+net+pid", "user+net", "net", "audit-only")
    prog = "def f(x):\n    return (x * 3 + 1) % 10\n"
    t0 = time.perf_counter()
    run_calls(prog, "f", list(range(64)))
    assert time.perf_counter() - t0 < 2.0  # ~30-70 ms on an idle core


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

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

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


def test_strong_isolation_is_active_when_bwrap_is_present(strong):
    info = sandbox_info()
    assert info["ok"] and info["isolation"] == "strong"
    prog = ("import os\ndef f(x):\n    return (os.getuid(), os.getgid(), os.path.exists(x), "
            "os.path.exists('/home'), os.path.exists('/work'))\n")
    (r,) = run_calls(prog, "f", [REPO], limits=strong)
    assert r.ok and r.value == (65534, 65534, False, False, False), r


def test_switching_the_hook_off_is_real(strong):
    """The flip does turn the hook off (in both levels): the attacks below meet the kernel layers."""
    prog = FLIP + "def f(x):\n    _flip()\n    return ctypes.CDLL(None).getpid() > 0\n"
    for lim in (strong, Limits(isolation="weak")):
        (r,) = run_calls(prog, "f", [0], limits=lim)
        assert r.ok and r.value is True, r


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
