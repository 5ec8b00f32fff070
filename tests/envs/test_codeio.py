"""Le Critique's CodeIO env (sparserl.envs.codeio): problems, grading, demonstrations, the
paper-scale path on reasoning-gym's bundled data, and malicious reference programs."""
import gzip
import importlib.util
import json
import shutil

import numpy as np
import pytest

from sparserl.envs import Problem, make_env, side_of
from sparserl.envs.codeio import TEMPLATES, CodeIOEnv
from sparserl.envs.sandbox import Call, SandboxUnavailable, run_jobs


@pytest.fixture(scope="module")
def env():
    return make_env("codeio", {"source": "procedural"}, seed=0)


def _fn(p):
    return lambda x: TEMPLATES[p.meta["template"]].fn(x, **p.meta["consts"])


def test_problems_are_deterministic_and_prefix_stable(env):
    a = env.problems("eval", 50)
    b = CodeIOEnv({"source": "procedural"}, seed=0).problems("eval", 50)
    assert a == b
    assert env.problems("eval", 20) == a[:20]
    assert [p.id for p in a[:3]] == ["codeio/eval/0", "codeio/eval/1", "codeio/eval/2"]
    assert a != CodeIOEnv({}, seed=1).problems("eval", 50)
    assert len({p.prompt for p in a}) == 50


@pytest.mark.parametrize("split_by", ["problem", "program"])
def test_sides_are_disjoint(split_by):
    e = CodeIOEnv({"split_by": split_by}, seed=3)
    sides = {s: e.problems(s, 300) for s in ("eval", "rl", "pretrain")}
    key = (lambda p: p.prompt) if split_by == "problem" else (lambda p: p.meta["program"])
    for s, ps in sides.items():
        assert len(ps) == 300
        assert all(side_of(key(p), e.split) == s for p in ps)
    keys = {s: {key(p) for p in ps} for s, ps in sides.items()}
    assert not keys["eval"] & keys["rl"] and not keys["eval"] & keys["pretrain"]
    assert not keys["rl"] & keys["pretrain"]


def test_tiny_prompts_are_short_and_answers_are_the_reference(env):
    ps = env.problems("rl", 400)
    assert max(len(p.prompt) for p in ps) <= 40
    for p in ps:
        f = _fn(p)
        assert p.privileged == p.answer
        if p.meta["direction"] == "output":
            assert p.prompt == f"P:{p.meta['expr']} x={p.meta['input']} ->"
            assert p.answer == str(f(p.meta["input"]))
        else:
            assert p.prompt == f"P:{p.meta['expr']} ->{p.meta['output']} x="
            x = int(p.answer)
            assert f(x) == p.meta["output"] and x == min(p.meta["feasible"])
    frac = np.mean([p.meta["direction"] == "input" for p in ps])
    assert 0.4 < frac < 0.6
    # the sandbox runs the program text to the same values the parent computed
    res = run_jobs([Call(p.meta["program"], "f", (p.meta["input"],)) for p in ps[:50]])
    assert [r.value for r in res] == [p.meta["output"] for p in ps[:50]]


def test_input_fraction_and_templates_are_knobs():
    assert all(p.meta["direction"] == "output" for p in CodeIOEnv({"input_fraction": 0}).problems("eval", 50))
    assert all(p.meta["direction"] == "input" for p in CodeIOEnv({"input_fraction": 1}).problems("eval", 50))
    ps = CodeIOEnv({"templates": ["xor"], "x_max": 5}).problems("eval", 20)
    assert {p.meta["template"] for p in ps} == {"xor"} and all(p.meta["input"] <= 5 for p in ps)
    with pytest.raises(ValueError, match="templates"):
        CodeIOEnv({"templates": ["nope"]})
    with pytest.raises(ValueError, match="source"):
        CodeIOEnv({"source": "web"})


@pytest.mark.e2e  # sandboxed grading, ~3 s
def test_correct_answers_score_1_and_wrong_or_malformed_score_0(env):
    ps = env.problems("eval", 64)
    assert env.score(ps, [" " + p.answer for p in ps]).tolist() == [1.0] * 64
    assert env.score(ps, [p.answer + "\nP:(x*3" for p in ps]).tolist() == [1.0] * 64  # junk after
    wrong = []
    for p in ps:
        if p.meta["direction"] == "output":
            wrong.append(" " + str(p.meta["output"] + 1))
        else:
            f = _fn(p)
            wrong.append(" " + str(next(x for x in range(-20, 20) if f(x) != p.meta["output"])))
    assert env.score(ps, wrong).tolist() == [0.0] * 64
    p = next(p for p in ps if p.meta["direction"] == "input")
    q = next(p for p in ps if p.meta["direction"] == "output")
    for bad in ["", "   ", "abc", " x=" + p.answer, " 0" + p.answer, " " + p.answer + ".0",
                " " + "9" * 40, None]:
        assert env.score([p, q], [bad, bad]).tolist() == [0.0, 0.0], bad
    with pytest.raises(ValueError, match="responses"):
        env.score([p], [])


def test_any_feasible_input_is_accepted(env):
    ps = [p for p in env.problems("eval", 400) if p.meta["direction"] == "input"]
    checked = 0
    for p in ps:
        f = _fn(p)
        feasible = [x for x in range(-30, 31) if f(x) == p.meta["output"]]
        others = [x for x in feasible if x != int(p.answer)]
        if not others:
            continue
        got = env.score([p] * len(others), [f" {x}" for x in others])
        assert got.tolist() == [1.0] * len(others), (p.prompt, others)
        checked += 1
        if checked >= 10:
            break
    assert checked >= 5


@pytest.mark.e2e  # ~13 s at 1,500 rows (each input-side row runs its program in the sandbox)
@pytest.mark.parametrize("noise,n", [(0.0, 300), (0.3, 1500)])
def test_demonstrations_have_the_asked_noise_rate(env, noise, n):
    rows = env.demonstrations(n, noise, np.random.default_rng(0))
    assert len(rows) == n
    pool = {p.prompt: p for p in env.problems("pretrain", 2000)}
    assert all(prompt in pool and target.startswith(" ") for prompt, target in rows)
    assert all(side_of(prompt, env.split) == "pretrain" for prompt, _ in rows)
    reward = env.score([pool[pr] for pr, _ in rows], [t for _, t in rows])
    wrong = 1 - reward.mean()
    if noise == 0.0:
        assert wrong == 0.0, wrong  # no noise asked: not one wrong demonstration
    else:
        assert abs(wrong - noise) < 0.04, wrong  # 1,500 rows: 0.04 is 3.4 binomial sd
    off = [abs(int(t) - int(pool[pr].answer)) for pr, t in rows if t.strip() != pool[pr].answer]
    assert all(d == 1 for d in off)  # systematic: off by one


# ---------------------------------------------------------------------------------------------
# malicious reference programs, graded through CodeIOEnv.score

ATTACKS = {
    "infinite_loop": "def f(x):\n    while True:\n        pass\n",
    "fork_bomb": "import os\ndef f(x):\n    while True:\n        os.fork()\n",
    "alloc_10gb": "def f(x):\n    return len(bytearray(10 * 1024 ** 3))\n",
    "socket": "import socket\ndef f(x):\n    socket.create_connection(('8.8.8.8', 53), timeout=1)\n    return 3\n",
    "write_outside": "def f(x):\n    open(PATH, 'w').write('x')\n    return 3\n",
    "env_secret": "import os\ndef f(x):\n    return 3 if os.environ.get('SPARSERL_TEST_SECRET') else -1\n",
    # switches the audit hook off (its busy flag, found through the gc), then forks and writes:
    # the kernel layers of strong isolation hold (tests/envs/test_sandbox.py has one test per attack)
    "hook_off": ("import gc, ctypes\ndef f(x):\n    for o in gc.get_objects():\n"
                 "        if type(o) is list and len(o) == 1 and o[0] is False:\n            o[0] = True\n"
                 "    libc = ctypes.CDLL(None)\n    pid = libc.fork()\n    if pid == 0:\n        libc._exit(0)\n"
                 "    open(PATH, 'w').write('x')\n    return 3\n"),
}


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_a_malicious_reference_program_scores_0_and_the_batch_goes_on(name, tmp_path, monkeypatch):
    monkeypatch.setenv("SPARSERL_TEST_SECRET", "hunter2")
    target = tmp_path / "pwned.txt"
    program = ATTACKS[name].replace("PATH", repr(str(target)))
    env = CodeIOEnv({"time_limit_s": 0.5})
    evil = Problem("codeio/eval/evil", "P:evil ->3 x=", "4", "4",
                   {"source": "procedural", "direction": "input", "program": program, "func": "f",
                    "output": 3})
    good = [p for p in env.problems("eval", 40) if p.meta["direction"] == "input"][:3]
    got = env.score([evil] + good, [" 4"] + [" " + p.answer for p in good])
    assert got.tolist() == [0.0, 1.0, 1.0, 1.0]
    assert not target.exists()
    assert env.score(good, [" " + p.answer for p in good]).tolist() == [1.0] * 3  # the next batch


# Finds the runner's nonce and its output pipe (hook off) and writes framed results for the
# batch's other calls: the right answers 'wrong', the wrong ones 'right'.
FORGE = """import gc, os, stat
def f(x):
    for o in gc.get_objects():
        if type(o) is list and len(o) == 1 and o[0] is False:
            o[0] = True
    job = [o for o in gc.get_objects() if type(o) is dict and "nonce" in o and "calls" in o][0]
    nonce = job["nonce"].encode()
    for fd in range(3, 64):
        try:
            if not stat.S_ISFIFO(os.fstat(fd).st_mode):
                continue
            for i in range(16):
                os.write(fd, nonce + repr((i, True, "-999", "", 0.0)).encode() + b"\\n")
        except OSError:
            pass
    return -1
"""


def test_a_reference_program_cannot_forge_the_other_problems_grades():
    env = CodeIOEnv({"time_limit_s": 1.0})
    evil = Problem("codeio/eval/forge", "P:forge ->3 x=", "4", "4",
                   {"source": "procedural", "direction": "input", "program": FORGE, "func": "f",
                    "output": 3})
    good = [p for p in env.problems("eval", 60) if p.meta["direction"] == "input"][:4]
    wrong = [str(int(p.answer) + 1) for p in good]  # x+1 gives another output for these templates
    honest = env.score(good + good, [" " + p.answer for p in good] + [" " + w for w in wrong])
    got = env.score([evil] + good + good, [" 4"] + [" " + p.answer for p in good] + [" " + w for w in wrong])
    assert got[1:].tolist() == honest.tolist() and honest[:4].tolist() == [1.0] * 4, (got, honest)


# ---------------------------------------------------------------------------------------------
# paper scale: reasoning-gym's bundled CodeIO data

def _rg_data_path():
    if importlib.util.find_spec("reasoning_gym") is None:
        return None
    from reasoning_gym.data import get_data_file_path
    try:
        p = get_data_file_path("codeio.jsonl.gz")
    except Exception:
        return None
    return p if p.exists() else None


needs_rg = pytest.mark.skipif(_rg_data_path() is None,
                              reason="reasoning-gym 0.1.25 with its bundled codeio.jsonl.gz is not installed "
                                     "(pip install -e '.[cpu]')")


@pytest.fixture(scope="module")
def rg_env():
    return CodeIOEnv({"source": "reasoning_gym", "input_fraction": 0.5}, seed=0)


@needs_rg
def test_paper_scale_builds_problems_from_the_bundled_data(rg_env):
    with gzip.open(_rg_data_path(), "rt") as fh:
        first = json.loads(fh.readline())
    assert {"code_sample", "input_generator", "task_description", "input_output_spec"} <= set(first)
    ps = rg_env.problems("eval", 6)
    assert len(ps) == 6 and ps == CodeIOEnv({"source": "reasoning_gym"}, seed=0).problems("eval", 6)
    for p in ps:
        assert p.meta["program"] in p.prompt and "main_solution" in p.meta["program"]
        assert side_of(p.meta["program"], rg_env.split) == "eval"
        assert p.privileged == p.answer
        want = p.meta["input"] if p.meta["direction"] == "input" else p.meta["output"]
        assert json.loads(p.answer) == want
        assert ("predict a feasible input" in p.prompt) == (p.meta["direction"] == "input")
    assert rg_env.score(ps, [f"reasoning...<answer>{p.answer}</answer>" for p in ps]).tolist() == [1.0] * 6
    assert rg_env.score(ps, ['<answer>{"no_such_arg": 1}</answer>'] * 6).tolist() == [0.0] * 6
    assert rg_env.score(ps, ["I do not know"] * 6).tolist() == [0.0] * 6


@needs_rg
def test_paper_scale_input_prediction_runs_the_reference_program(rg_env):
    prog = "def main_solution(a, b):\n    return {'s': a + b}\n"
    p = Problem("codeio/eval/x", "q", '{"a": 1, "b": 2}', '{"a": 1, "b": 2}',
                {"source": "reasoning_gym", "direction": "input", "program": prog,
                 "func": "main_solution", "input": {"a": 1, "b": 2}, "output": {"s": 3}})
    responses = ['<answer>{"a": 2, "b": 1}</answer>', '<answer>{"a": 0, "b": 3}</answer>',
                 "<answer>{'a': -1, 'b': 4}</answer>", '<answer>{"a": 5, "b": 1}</answer>',
                 '<answer>{"a": 1}</answer>', "<answer>[1, 2]</answer>", "<answer>{oops</answer>"]
    assert rg_env.score([p] * len(responses), responses).tolist() == [1, 1, 1, 0, 0, 0, 0]
    evil = Problem("codeio/eval/y", "q", "{}", "{}",
                   {"source": "reasoning_gym", "direction": "input",
                    "program": "import os\ndef main_solution(a):\n    os.system('true')\n    return 1\n",
                    "func": "main_solution", "input": {"a": 0}, "output": 1})
    assert rg_env.score([evil, p], ['<answer>{"a": 1}</answer>', '<answer>{"a": 3, "b": 0}</answer>']).tolist() == [0, 1]


# ---------------------------------------------------------------------------------------------
# the sandbox's isolation level

def _input_problem(env):
    return next(p for p in env.problems("eval", 40) if p.meta["direction"] == "input")


def test_codeio_grades_with_strong_isolation_when_bwrap_is_present():
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap (bwrap) is not installed: `apt-get install bubblewrap` (.ci/run does)")
    env = CodeIOEnv({})
    p = _input_problem(env)
    assert env.score([p], [" " + p.answer]).tolist() == [1.0]
    assert env.sandbox_isolation == "strong" and env.limits.isolation == "strong"


def test_codeio_refuses_weak_isolation_unless_allowed(monkeypatch):
    import sparserl.envs.codeio as codeio
    monkeypatch.setattr(codeio, "strong_isolation", lambda python="": (False, "bubblewrap (bwrap) is not installed"))
    env = CodeIOEnv({})
    p = _input_problem(env)
    with pytest.raises(SandboxUnavailable, match=r"sandbox\.allow_weak.*") as e:
        env.score([p], [" " + p.answer])
    assert "apt-get install bubblewrap" in str(e.value) and "bwrap) is not installed" in str(e.value)
    assert env.score([p], [" x"]).tolist() == [0.0]  # nothing to run: no refusal needed
    weak = CodeIOEnv({"sandbox": {"allow_weak": True}})
    with pytest.warns(RuntimeWarning, match="WEAK sandbox"):
        assert weak.score([p], [" " + p.answer]).tolist() == [1.0]
    assert weak.sandbox_isolation == "weak" and weak.limits.isolation == "weak"
    for bad in ({"allow_weak": "yes"}, {"allow_wek": True}, True):
        with pytest.raises(ValueError, match="sandbox"):
            CodeIOEnv({"sandbox": bad})
