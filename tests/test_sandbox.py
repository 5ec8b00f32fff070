"""The CodeIO sandbox (sparserl.envs.sandbox): results come back, and each attack fails inside the
child, gives a clean error result, and the calls after it still run ("the run goes on")."""
import os
import signal
import time

import pytest

from sparserl.envs.sandbox import Call, Limits, run_calls, run_jobs, sandbox_info

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
    assert info["ok"] and info["isolation"] in ("user+net+pid", "user+net", "net", "audit-only")
    prog = "def f(x):\n    return (x * 3 + 1) % 10\n"
    t0 = time.perf_counter()
    run_calls(prog, "f", list(range(64)))
    assert time.perf_counter() - t0 < 2.0  # ~30-70 ms on an idle core
