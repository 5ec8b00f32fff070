"""MiniF2F's episode logic and LeanREPL's protocol, crash and timeout handling, against a scripted
fake REPL that speaks the leanprover-community/repl JSON protocol (no Lean here)."""
import json
import sys

import pytest

from helpers.fake_lean_repl import FAKE, STATEMENT
from sparserl.envs import make_env
from sparserl.envs.minif2f import LeanREPL, proof_code


@pytest.fixture
def env_factory(tmp_path):
    script = tmp_path / "fake_repl.py"
    script.write_text(FAKE)
    log = tmp_path / "log.jsonl"
    data = tmp_path / "minif2f.jsonl"
    rows = [{"name": f"t{i}", "formal_statement": STATEMENT.replace("t1", f"t{i}"), "split": "valid"}
            for i in range(40)]
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    made = []

    def make(**kw):
        spec = {"data": str(data), "repl_cmd": [sys.executable, str(script), str(log)],
                "project_dir": str(tmp_path), "timeout_s": 5.0, "header_timeout_s": 5.0, **kw}
        e = make_env("minif2f", spec, seed=0)
        made.append(e)
        return e

    make.log = log
    make.data = data
    yield make
    for e in made:
        e.close()


def _episode(env, responses):
    p = env.problems("pretrain", 1)[0]
    s, obs = env.reset(p), []
    for r in responses:
        obs.append(env.observe(s))
        s, done, reward = env.step(s, r)
        if done:
            return s, obs, reward
    raise AssertionError("the episode did not end")


def _commands(log):
    return [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []


@pytest.mark.parametrize("k", [1, 2, 3])
def test_success_on_attempt_k_gives_1_and_stops(env_factory, k):
    env = env_factory()
    responses = ["```lean4\nsimp\n```"] * (k - 1) + ["```lean4\nexact h -- GOOD\n```"] + ["never read"] * 3
    s, obs, reward = _episode(env, responses)
    assert reward == 1.0 and s.done and s.attempt == k
    assert len(obs) == k
    # the header ran once per process, the proofs against its env
    cmds = _commands(env_factory.log)
    assert sum(c["cmd"].startswith("import") for c in cmds) == 1
    assert all(c["env"] == 0 for c in cmds if not c["cmd"].startswith("import"))


def test_three_failures_give_0_and_feedback_reaches_the_next_observation(env_factory):
    env = env_factory()
    s, obs, reward = _episode(env, ["simp", "linarith", "omega"])
    assert reward == 0.0 and s.done and s.attempt == 3
    assert "unsolved goals" not in obs[0]
    assert "unsolved goals" in obs[1] and "(command 2)" in obs[1] and "Attempt 1 of 3 failed" in obs[1]
    assert "(command 3)" in obs[2] and "Attempt 2 of 3" in obs[2]
    assert "(h : x = 1) : x = 1 := by" in obs[0]  # the statement is shown
    with pytest.raises(ValueError, match="over"):
        env.step(s, "GOOD")


def test_sorry_is_not_a_proof(env_factory):
    env = env_factory(max_attempts=1)
    s, _, reward = _episode(env, ["sorry"])
    assert reward == 0.0 and s.done and "sorry" in s.feedback


def test_feedback_is_truncated(env_factory):
    env = env_factory(feedback_chars=30, max_attempts=2)
    s, obs, _ = _episode(env, ["simp", "simp"])
    assert "(truncated)" in obs[1] and len(s.feedback) < 60


def test_crash_restarts_the_repl_and_retries(env_factory):
    env = env_factory()
    s, obs, reward = _episode(env, ["exact h -- CRASHONCE"])
    assert reward == 1.0 and env.repl.starts == 2  # the retry ran in a fresh process


def test_a_repl_that_always_crashes_ends_cleanly_with_0(env_factory):
    env = env_factory()
    s, obs, reward = _episode(env, ["CRASH"] * 3)
    assert reward == 0.0 and s.done and s.attempt == 3
    assert "crashed" in obs[1] and "PANIC" in obs[1]
    # every attempt: a crash and one retry, each in a new process
    assert env.repl.starts == 6


def test_a_hanging_repl_times_out_and_the_next_attempt_runs(env_factory):
    env = env_factory(timeout_s=0.5)
    s, obs, reward = _episode(env, ["HANG", "HANG", "exact h -- GOOD"])
    assert reward == 1.0 and s.attempt == 3
    assert "timed out" in obs[1] and "timed out" in obs[2]
    # each timeout killed its REPL (the fake would answer after its 60 s sleep): three processes
    assert env.repl.starts == 3
    assert env.repl.starts == 3  # each timeout killed the process


def test_a_hang_to_the_end_gives_0(env_factory):
    env = env_factory(timeout_s=0.3)
    s, _, reward = _episode(env, ["HANG"] * 3)
    assert reward == 0.0 and s.done


def test_proof_code_keeps_the_statement():
    st = "theorem foo (x : Nat) : x = x := by\n  sorry"
    assert proof_code(st, "```lean4\nrfl\n```") == "theorem foo (x : Nat) : x = x := by\n  rfl"
    full = "theorem foo (x : Nat) :\n  x = x := by\n  rfl"
    assert proof_code(st, f"Here:\n```lean\n{full}\n```") == full
    # a different (easier) statement is not checked as such: it becomes the proof body
    assert proof_code(st, "theorem foo : True := trivial").startswith("theorem foo (x : Nat) : x = x := by\n")
    assert proof_code("theorem bar : 1 = 1 :=", "rfl") == "theorem bar : 1 = 1 := rfl"


def test_sides_are_disjoint_and_deterministic(env_factory):
    env = env_factory()
    names = {s: [p.meta["name"] for p in env.problems(s, 100)] for s in ("eval", "rl", "pretrain")}
    assert sum(map(len, names.values())) == 40
    assert not set(names["eval"]) & set(names["rl"]) and not set(names["rl"]) & set(names["pretrain"])
    assert [p.id for p in env.problems("rl", 100)] == [p.id for p in env_factory().problems("rl", 100)]
    mapped = env_factory(sides={"valid": "rl"})
    assert len(mapped.problems("rl", 100)) == 40 and mapped.problems("eval", 10) == []
    with pytest.raises(NotImplementedError):
        env.demonstrations(4, 0.1, None)


def test_data_errors_name_the_file_field_and_fix(tmp_path):
    with pytest.raises(ValueError, match="minif2f.data"):
        make_env("minif2f", {})
    with pytest.raises(FileNotFoundError, match="point data at it"):
        make_env("minif2f", {"data": str(tmp_path / "missing.jsonl")})
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"name": "a", "formal_statement": "theorem a : True := by"}) + "\n"
                   + json.dumps({"name": "b"}) + "\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:2: no 'formal_statement'"):
        make_env("minif2f", {"data": str(bad)})
    bad.write_text(json.dumps({"formal_statement": "theorem a : True := by"}) + "\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:1: no 'name'"):
        make_env("minif2f", {"data": str(bad)})
    ok = tmp_path / "ok.jsonl"
    ok.write_text(json.dumps({"id": "a", "formal_statement": "theorem a : True := by"}) + "\n")
    e = make_env("minif2f", {"data": str(ok), "split": {"eval": 0.0, "rl": 0.0}})
    with pytest.raises(ValueError, match="repl_cmd"):
        e.step(e.reset(e.problems("pretrain", 1)[0]), "trivial")


def test_lean_repl_without_header(tmp_path):
    script = tmp_path / "fake.py"
    script.write_text(FAKE)
    with LeanREPL([sys.executable, str(script), str(tmp_path / "log")], timeout_s=5) as repl:
        assert repl.check("example : True := trivial -- GOOD").ok
        r = repl.check("example : 1 = 2 := rfl")
        assert not r.ok and r.errors and r.errors[0].startswith("line 2:2: unsolved goals")
    assert repl.proc is None
