"""Sudoku's puzzles (unique, disjoint sides), turn logic, privileged grid and demonstrations."""
import numpy as np
import pytest

from sparserl.envs import make_env
from sparserl.envs.sudoku import _peers, count_solutions, parse_move

SPEC = {"size": 4, "blanks": [2, 4]}


@pytest.fixture(scope="module")
def env():
    return make_env("sudoku", SPEC, seed=0)


def _valid(grid: str, n: int = 4) -> bool:
    rows = [grid[r * n:(r + 1) * n] for r in range(n)]
    cols = ["".join(r[c] for r in rows) for c in range(n)]
    boxes = ["".join(rows[br + i][bc + j] for i in range(2) for j in range(2))
             for br in (0, 2) for bc in (0, 2)]
    return all(sorted(u) == list("1234") for u in rows + cols + boxes)


def _move(i: int, v, n: int = 4) -> str:
    return f" {i // n + 1}{i % n + 1}={v}"


def test_puzzles_are_unique_and_sides_disjoint_and_deterministic(env):
    sides = {s: env.problems(s, 150) for s in ("eval", "rl", "pretrain")}
    assert all(len(ps) == 150 for ps in sides.values())
    for field in ("puzzle", "solution"):  # the split is by solution, so puzzles are disjoint too
        sets = [{p.meta[field] for p in ps} for ps in sides.values()]
        assert not sets[0] & sets[1] and not sets[0] & sets[2] and not sets[1] & sets[2], field
    assert [p.prompt for p in env.problems("eval", 150)] == [p.prompt for p in sides["eval"]]
    assert [p.prompt for p in make_env("sudoku", SPEC, seed=1).problems("eval", 20)] != \
        [p.prompt for p in sides["eval"][:20]]
    for p in sides["eval"]:
        m = p.meta
        assert 2 <= m["blanks"] <= 4 and m["puzzle"].count(".") == m["blanks"]
        assert _valid(m["solution"]) and count_solutions(m["puzzle"], 4) == 1
        assert all(a in (".", b) for a, b in zip(m["puzzle"], m["solution"]))
    assert {p.meta["blanks"] for p in sides["eval"]} == {2, 3, 4}
    assert env.max_turns == 4


def test_a_correct_episode_gets_1_after_exactly_blanks_turns(env):
    for p in env.problems("rl", 20):
        sol, s = p.meta["solution"], env.reset(p)
        blanks = [i for i, x in enumerate(p.meta["puzzle"]) if x == "."]
        observations = []
        for t, i in enumerate(reversed(blanks)):  # any order works
            obs = env.observe(s)
            observations.append(obs)
            s, done, reward = env.step(s, _move(i, sol[i]))
            assert done == (t == len(blanks) - 1)
            assert reward == (1.0 if done else 0.0)
        assert s.turn == p.meta["blanks"] and s.outcome == "solved" and s.grid == sol
        # observations update after each move and never show the solved grid
        assert len(set(observations)) == len(observations)
        assert [o.count(".") for o in observations] == list(range(len(blanks), 0, -1))
        assert p.privileged == p.answer == "/".join(sol[r * 4:(r + 1) * 4] for r in range(4))
        assert all(p.privileged not in o for o in observations)
        with pytest.raises(ValueError, match="over"):
            env.observe(s)


def test_format_of_the_tiny_observation_and_move(env):
    p = env.problems("eval", 1)[0]
    grid = "/".join(p.meta["puzzle"][r * 4:(r + 1) * 4] for r in range(4))
    assert p.prompt == env.observe(env.reset(p)) == f"S: {grid}\nA:"
    assert len(p.prompt) < 40
    assert parse_move(" 23=2", "rc=v", 4) == (2, 3, 2)
    assert parse_move(" 23=2\nS: ...", "rc=v", 4) == (2, 3, 2)
    for bad in ("", "23", "2 3 2", "23=5", "53=1", "x23=2", "23=22"):
        assert parse_move(bad, "rc=v", 4) is None, bad
    assert parse_move("so... <answer>3 7 5</answer>", "r c v", 9) == (3, 7, 5)
    assert parse_move("thinking\n3,7,5", "r c v", 9) == (3, 7, 5)


@pytest.mark.parametrize("kind", ["wrong", "filled", "malformed"])
def test_a_bad_move_ends_the_episode_with_0(env, kind):
    for p in env.problems("rl", 10):
        sol, s = p.meta["solution"], env.reset(p)
        blanks = [i for i, x in enumerate(p.meta["puzzle"]) if x == "."]
        s, done, _ = env.step(s, _move(blanks[0], sol[blanks[0]]))  # one good move first
        assert not done
        i = blanks[1]
        if kind == "wrong":
            resp = _move(i, int(sol[i]) % 4 + 1)
        elif kind == "filled":
            resp = _move(blanks[0], sol[blanks[0]])  # the cell just filled (right value, still bad)
        else:
            resp = " 2 3 = 1 please"
        s, done, reward = env.step(s, resp)
        assert done and reward == 0.0 and s.outcome == kind and s.turn == 2
        with pytest.raises(ValueError, match="over"):
            env.step(s, _move(i, sol[i]))


def test_a_given_cell_is_filled(env):
    p = env.problems("eval", 1)[0]
    i = next(i for i, x in enumerate(p.meta["puzzle"]) if x != ".")
    s, done, reward = env.step(env.reset(p), _move(i, p.meta["solution"][i]))
    assert done and reward == 0.0 and s.outcome == "filled"


def test_demonstrations_follow_solution_traces_with_the_noise_rate(env):
    rows = env.demonstrations(4000, 0.3, np.random.default_rng(0))
    assert len(rows) == 4000
    pre = {p.prompt for p in env.problems("pretrain", 2048)}
    held = {p.prompt for s in ("eval", "rl") for p in env.problems(s, 300)}
    wrong = 0
    for obs, target in rows:
        assert obs.startswith("S: ") and target[0] == " " and len(target) == 5
        grid = obs[3:3 + 19].replace("/", "")
        r, c, v = parse_move(target, "rc=v", 4)
        i = (r - 1) * 4 + c - 1
        assert grid[i] == "."  # always the right (an empty) cell
        # the true value: the only one the row, column and box allow when the grid is unique
        cands = [x for x in "1234" if x not in {grid[j] for j in _peers(4)[i]}
                 and count_solutions(grid[:i] + x + grid[i + 1:], 4) >= 1]
        assert len(cands) == 1
        wrong += str(v) != cands[0]
        if str(v) != cands[0]:
            assert str(v) == str(int(cands[0]) % 4 + 1)  # systematic: value + 1, cyclic
    assert abs(wrong / len(rows) - 0.3) < 0.03
    firsts = {o for o, _ in rows}
    assert not firsts & held  # no held-out puzzle, not even as a later turn of a trace
    assert firsts & pre
    clean = env.demonstrations(200, 0.0, np.random.default_rng(1))
    assert clean == env.demonstrations(200, 0.0, np.random.default_rng(1))


def test_reasoning_gym_source_9x9():
    env = make_env("sudoku", {"source": "reasoning_gym", "blanks": [3, 5]}, seed=0)
    ps = env.problems("rl", 3)
    assert len(ps) == 3 and env.max_turns == 5
    p = ps[0]
    sol = p.meta["solution"]
    assert len(sol) == 81 and "\n" in p.privileged and "_" not in p.privileged
    obs = env.observe(env.reset(p))
    assert obs.startswith("Solve this Sudoku puzzle:\n") and "<answer>row column value</answer>" in obs
    assert p.privileged not in obs
    s = env.reset(p)
    blanks = [i for i, x in enumerate(p.meta["puzzle"]) if x == "."]
    for t, i in enumerate(blanks):
        s, done, reward = env.step(s, f"I think... <answer>{i // 9 + 1} {i % 9 + 1} {sol[i]}</answer>")
    assert done and reward == 1.0 and s.turn == len(blanks)


def test_reasoning_gym_first_observation_is_its_puzzle_text():
    import reasoning_gym as rg
    env = make_env("sudoku", {"source": "reasoning_gym", "blanks": [3, 5]}, seed=0)
    p = env.problems("pretrain", 1)[0]
    texts = [e["question"].split("\nRespond with")[0] for e in
             rg.create_dataset("sudoku", size=64, seed=0, min_empty=3, max_empty=5)]
    assert env.observe(env.reset(p)).split("\nFill exactly")[0] in texts


def test_bad_specs_name_the_field():
    with pytest.raises(ValueError, match="sudoku.size"):
        make_env("sudoku", {"size": 5})
    with pytest.raises(ValueError, match="sudoku.blanks"):
        make_env("sudoku", {"blanks": [0, 3]})
    with pytest.raises(ValueError, match="sudoku.source"):
        make_env("sudoku", {"source": "kaggle"})
