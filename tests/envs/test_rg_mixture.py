"""The Reasoning Gym mixture: sides, weights, compact prompts, grading and noisy demonstrations."""
from collections import Counter

import numpy as np
import pytest

from sparserl.envs import make_env
from sparserl.envs.rg_mixture import DEFAULT_TASKS, corrupt_answer

SIDES = ("eval", "rl", "pretrain")


@pytest.fixture(scope="module")
def env():
    return make_env("rg_mixture", {}, seed=0)


@pytest.fixture(scope="module")
def sides(env):
    return {s: env.problems(s, 400) for s in SIDES}


def test_sides_are_disjoint_and_deterministic(env, sides):
    texts = {s: {p.prompt for p in ps} for s, ps in sides.items()}
    for a in SIDES:
        assert len(texts[a]) == len(sides[a]) >= 390  # distinct, (almost) as many as asked
        for b in SIDES:
            if a < b:
                assert not texts[a] & texts[b], (a, b)
    again = make_env("rg_mixture", {}, seed=0).problems("eval", 400)
    assert [(p.id, p.prompt, p.answer) for p in again] == [(p.id, p.prompt, p.answer) for p in sides["eval"]]
    other = make_env("rg_mixture", {}, seed=1).problems("eval", 400)
    assert [p.prompt for p in other] != [p.prompt for p in again]
    assert len({p.id for p in again}) == 400 and again[0].id == "rg_mixture/eval/0"


def test_weights_are_respected(env, sides):
    want = {t["name"]: t["weight"] for t in DEFAULT_TASKS}
    got = Counter(p.meta["task"] for p in sides["pretrain"])
    for name, w in want.items():
        assert abs(got[name] / len(sides["pretrain"]) - w) < 0.03, (name, got)
    custom = make_env("rg_mixture", {"tasks": [
        {"name": "g", "generator": "gcd", "weight": 3, "params": {"min_value": 1, "max_value": 50}},
        {"name": "b", "generator": "count_bits", "weight": 1, "params": {"min_n": 1, "max_n": 2000}}]})
    c = Counter(p.meta["task"] for p in custom.problems("rl", 200))
    assert c == {"g": 150, "b": 50}
    rows = env.demonstrations(3000, 0.0, np.random.default_rng(0))
    by_prompt = {p.prompt: p.meta["task"] for p in sides["pretrain"]}
    pool = {p.prompt: p.meta["task"] for p in env.problems("pretrain", 4096)}
    demo = Counter(pool[q] for q, _ in rows)
    for name, w in want.items():
        assert abs(demo[name] / 3000 - w) < 0.04, (name, demo)
    assert set(by_prompt) <= set(pool)


def test_compact_prompts_are_short_and_privileged_is_the_answer(sides):
    for p in sides["eval"]:
        assert p.prompt.startswith("Q: ") and p.prompt.endswith("\nA:")
        assert len(p.prompt) <= 40, p.prompt
        assert p.privileged == p.answer and p.answer and len(p.answer) <= 8
        assert p.meta["task"] in {t["name"] for t in DEFAULT_TASKS}
    tasks = {p.meta["task"]: p for p in sides["eval"]}
    assert tasks["gcd"].prompt.startswith("Q: gcd(")
    assert tasks["reverse"].prompt.startswith("Q: rev(")
    assert "-> base" in tasks["base"].prompt and tasks["bits"].prompt.startswith("Q: bits(")


def test_reference_answers_score_1_and_wrong_ones_0(env, sides):
    ps = sides["rl"]
    assert env.score(ps, [" " + p.answer for p in ps]).tolist() == [1.0] * len(ps)
    assert env.score(ps, [" " + p.answer + "\nQ: more text" for p in ps]).sum() == len(ps)
    rng = np.random.default_rng(0)
    wrong = [" " + corrupt_answer(p.meta["generator"], p.answer, p.meta["metadata"], rng) for p in ps]
    assert env.score(ps, wrong).sum() == 0
    assert env.score(ps, ["" for _ in ps]).sum() == 0
    assert env.score(ps, [" " + p.answer + "x" for p in ps]).sum() == 0  # partial credit is no reward
    rev = [p for p in ps if p.meta["task"] == "reverse"]
    assert env.score(rev, [" " + p.answer[:-1] for p in rev]).sum() == 0  # spell_backward's prefix credit
    with pytest.raises(ValueError, match="responses"):
        env.score(ps, [])


def test_demonstrations_noise_rate_and_systematic_errors(env):
    rows = env.demonstrations(3000, 0.4, np.random.default_rng(1))
    assert len(rows) == 3000
    pool = {p.prompt: p for p in env.problems("pretrain", 4096)}
    held = {p.prompt for s in ("eval", "rl") for p in env.problems(s, 400)}
    assert not {q for q, _ in rows} & held
    probs = [pool[q] for q, _ in rows]
    assert all(t.startswith(" ") for _, t in rows)
    rewards = env.score(probs, [t for _, t in rows])
    assert abs((1 - rewards.mean()) - 0.4) < 0.03
    for p, (_, t), r in zip(probs, rows, rewards):
        if r == 0 and p.meta["generator"] in ("gcd", "count_bits"):
            assert abs(int(t) - int(p.answer)) == 1
        if r == 0 and p.meta["generator"] == "base_conversion":
            md = p.meta["metadata"]
            assert abs(int(t.strip(), md["target_base"]) - md["decimal_value"]) == 1
        if r == 0 and p.meta["generator"] == "spell_backward":
            assert sorted(t.strip()) == sorted(p.answer) or t.strip() == p.answer + p.answer[-1]
    assert rows[:50] == env.demonstrations(50, 0.4, np.random.default_rng(1))[:50]


def test_question_render_uses_the_dataset_text_and_answer_tags():
    env = make_env("rg_mixture", {"render": "question", "tasks": [
        {"name": "gcd", "generator": "gcd", "weight": 1},
        {"name": "sort", "generator": "number_sorting", "weight": 1}]})
    ps = env.problems("eval", 20)
    assert len(ps) == 20 and {p.meta["task"] for p in ps} == {"gcd", "sort"}
    for p in ps:
        assert p.meta["question"].strip() in p.prompt and "<answer>" in p.prompt
    assert env.score(ps, [f"thinking...\n<answer>{p.answer}</answer>" for p in ps]).sum() == 20
    assert env.score(ps, [p.answer for p in ps]).sum() == 0  # no tags, no answer


def test_bad_specs_name_the_field_and_fix():
    with pytest.raises(ValueError, match=r"tasks\[0\].*no generator 'nope'"):
        make_env("rg_mixture", {"tasks": [{"name": "x", "generator": "nope"}]})
    with pytest.raises(ValueError, match="no compact rendering.*render: question"):
        make_env("rg_mixture", {"tasks": [{"generator": "number_sorting"}]})
    with pytest.raises(ValueError, match="weight"):
        make_env("rg_mixture", {"tasks": [{"generator": "gcd", "weight": 0}]})
    with pytest.raises(ValueError, match="min_base < max_base"):
        make_env("rg_mixture", {"tasks": [{"generator": "base_conversion",
                                           "params": {"min_base": 2, "max_base": 2}}]})
    with pytest.raises(ValueError, match="render"):
        make_env("rg_mixture", {"render": "long"})
    e = make_env("rg_mixture", {"tasks": [{"generator": "gcd", "params": {"min_value": 5, "max_value": 1}}]})
    with pytest.raises(ValueError, match="could not build 'gcd'"):
        e.problems("eval", 4)
