"""Le Critique's Reasoning Gym task: a weighted mixture of single-turn reasoning-gym generators.

Le Critique (Privileged Value Functions for LLM Reinforcement Learning, arXiv 2608.16739; Section
4.1, Appendix D.1) trains on "a weighted mixture of procedural, single-turn reasoning tasks from the
Reasoning Gym suite"; the Pvf receives the ground-truth answer (`Problem.privileged`). The paper
does not list the mixture, so it is configured (`tasks: [{name, generator, weight, params}]`, as the
math levels of configs/tiny.yaml are).

Two renderings (`render`):
  compact   (tiny scale, default) the problem is rebuilt from reasoning-gym's metadata in a few
            characters, since a 0.2M-parameter policy reads about one token per character:
                prompt  "Q: gcd(12,18)\\nA:"     target " 6"
                prompt  "Q: rev(splat)\\nA:"     target " talps"
                prompt  "Q: 11_3 -> base 6\\nA:" target " 4"
                prompt  "Q: bits(13)\\nA:"       target " 3"
            The target is `answer_template` (" {answer}": a leading space, then EOS); the grader
            reads the response's first line, stripped.
  question  (paper scale) the dataset's own question text, with an instruction to answer between
            <answer> and </answer> tags (reasoning-gym's convention); the grader reads the last
            tagged answer (`reasoning_gym.utils.extract_answer`).
Either way a response is graded by the generator's own `score_answer` and earns 1 iff it scores
1.0 (partial credit, as spell_backward's prefix credit, is no reward: the paper's rewards are
binary).

The three sides (eval / rl / pretrain) are a hash of the rendered problem text (`base.side_of`).
`problems(side, n)` splits n over the tasks by weight (largest remainders) and draws each task's
share of distinct problems; a task with too few distinct problems on a side gives fewer.
Demonstrations pick a task by weight, then a pre-training-side problem of it uniformly (with
repetition); a share `noise` of targets is wrong in one systematic way per generator
(`corrupt_answer`: integers off by one, a base conversion of the value +-1, a reversed word with
two adjacent letters swapped), as `tasks.pretrain_noise` does for math.
"""
from __future__ import annotations

import json
from typing import Any, Sequence

import numpy as np

from sparserl.core.config import schema_default, section_setting
from sparserl.envs.base import SIDES, Env, Problem, side_of

# [our choice] the tiny default: four generators outside the math pool whose problems render in
# under 20 characters and whose answers are a few tokens; the ranges keep several hundred distinct
# problems per side (gcd 1,600 pairs, bits 1,023 numbers, base about 1,000 conversions, 16k words)
DEFAULT_TASKS = [
    {"name": "gcd", "generator": "gcd", "weight": 0.3,
     "params": {"min_numbers": 2, "max_numbers": 2, "min_value": 1, "max_value": 40}},
    {"name": "reverse", "generator": "spell_backward", "weight": 0.3,
     "params": {"min_word_len": 3, "max_word_len": 5}},
    {"name": "base", "generator": "base_conversion", "weight": 0.2,
     "params": {"min_base": 2, "max_base": 6, "min_value": 1, "max_value": 47}},
    {"name": "bits", "generator": "count_bits", "weight": 0.2, "params": {"min_n": 1, "max_n": 1023}},
]

RENDERS = ("compact", "question")
PROMPT_TEMPLATES = {
    "compact": "Q: {problem}\nA:",
    "question": "{problem}\n\nThink step by step, then give only your final answer between "
                "<answer> and </answer> tags.",
}
ANSWER_TEMPLATES = {"compact": " {answer}", "question": "<answer>{answer}</answer>"}


def _digits(value: int, base: int) -> str:
    """`value` in `base` as reasoning-gym writes it (lowercase letters above 9)."""
    if value == 0:
        return "0"
    out = []
    while value:
        d = value % base
        out.append(str(d) if d < 10 else chr(ord("a") + d - 10))
        value //= base
    return "".join(reversed(out))


def render_compact(generator: str, md: dict) -> str:
    """The tiny-scale problem text, rebuilt from a reasoning-gym entry's metadata."""
    if generator in ("gcd", "lcm"):
        return f"{generator}(" + ",".join(str(x) for x in md["numbers"]) + ")"
    if generator == "count_bits":
        return f"bits({md['number']})"
    if generator == "base_conversion":
        return f"{md['source_repr']}_{md['source_base']} -> base {md['target_base']}"
    if generator == "spell_backward":
        return f"rev({md['word']})"
    raise KeyError(generator)


COMPACT = ("gcd", "lcm", "count_bits", "base_conversion", "spell_backward")


def corrupt_answer(generator: str, answer: str, md: dict, rng: np.random.Generator) -> str:
    """A wrong target in the generator's systematic way (always != the answer, also lowercased):
    integers +-1 (a fair coin), base conversions of the value +-1 (never 0, which reasoning-gym
    writes as ""), a reversed word with one pair of adjacent (different) letters swapped."""
    if generator == "base_conversion":
        v = int(md["decimal_value"])
        w = v + 1 if v <= 1 or rng.random() < 0.5 else v - 1
        return _digits(w, int(md["target_base"]))
    if generator == "spell_backward":
        a = answer
        spots = [i for i in range(len(a) - 1) if a[i].lower() != a[i + 1].lower()]
        if not spots:  # "aaa": no swap changes it
            return a + a[-1]
        i = spots[int(rng.integers(len(spots)))]
        return a[:i] + a[i + 1] + a[i] + a[i + 2:]
    try:
        value = int(answer)
    except ValueError:
        raise ValueError(f"rg_mixture: no systematic wrong answer for generator {generator!r} "
                         f"(answer {answer!r} is not an integer); give demonstrations only for "
                         f"integer-answer generators or one of {', '.join(COMPACT)}") from None
    return str(value + (1 if rng.random() < 0.5 else -1))


def _jsonable(x: Any) -> Any:
    """reasoning-gym metadata with tuples as lists, so a Problem's meta survives JSON/parquet."""
    return json.loads(json.dumps(x, default=str))


def _apportion(n: int, weights: Sequence[float]) -> list[int]:
    """n split by weight, largest remainders first (ties to the earlier task)."""
    w = np.asarray(weights, float) / float(np.sum(weights))
    raw = w * n
    counts = np.floor(raw).astype(int)
    for i in np.argsort(-(raw - counts), kind="stable")[: n - int(counts.sum())]:
        counts[i] += 1
    return counts.tolist()


class RGMixtureEnv(Env):
    """Single-turn; spec: tasks, render ('compact' | 'question'), prompt_template,
    answer_template, split. Problem.meta: task, generator, question, metadata (reasoning-gym's)."""

    kind = "rg_mixture"
    multi_turn = False
    max_turns = 1

    def __init__(self, spec: dict, seed: int = 0):
        super().__init__(spec, seed)
        self.render = str(self.spec.get("render", "compact"))
        if self.render not in RENDERS:
            raise ValueError(f"critique.envs.rg_mixture.render: {self.render!r} is not one of "
                             f"{', '.join(RENDERS)}")
        self.prompt_template = self.spec.get("prompt_template", PROMPT_TEMPLATES[self.render])
        self.answer_template = self.spec.get("answer_template", ANSWER_TEMPLATES[self.render])
        self.tasks = self._check_tasks(self.spec.get("tasks") or DEFAULT_TASKS)
        self._by_name = {t["name"]: i for i, t in enumerate(self.tasks)}
        self._graders: dict[int, Any] = {}

    # config -------------------------------------------------------------------------------
    def _check_tasks(self, tasks: list) -> list[dict]:
        from reasoning_gym.factory import DATASETS
        out, names = [], set()
        for i, t in enumerate(tasks):
            where = f"critique.envs.rg_mixture.tasks[{i}]"
            if not isinstance(t, dict) or "generator" not in t:
                raise ValueError(f"{where}: each task needs a mapping with 'generator' (and name, "
                                 "weight, params), e.g. {name: gcd, generator: gcd, weight: 1}")
            t = {"name": str(t.get("name", t["generator"])), "generator": str(t["generator"]),
                 "weight": float(t.get("weight", schema_default("$defs", "env_rg_mixture", "task_weight"))),
                 "params": dict(t.get("params") or {})}
            if t["name"] in names:
                raise ValueError(f"{where}: task name {t['name']!r} is used twice; names must be unique")
            names.add(t["name"])
            if t["generator"] not in DATASETS:
                raise ValueError(f"{where}: reasoning-gym has no generator {t['generator']!r}; "
                                 "see reasoning_gym.factory.DATASETS")
            if t["weight"] <= 0:
                raise ValueError(f"{where}: weight must be > 0 (drop the task instead)")
            if self.render == "compact" and t["generator"] not in COMPACT:
                raise ValueError(f"{where}: generator {t['generator']!r} has no compact rendering; "
                                 f"use one of {', '.join(COMPACT)} or set render: question")
            p = t["params"]
            if t["generator"] == "base_conversion" and p.get("min_base", 2) == p.get("max_base", 16):
                raise ValueError(f"{where}: base_conversion needs min_base < max_base (reasoning-gym "
                                 "draws two different bases and loops forever otherwise)")
            out.append(t)
        if not out:
            raise ValueError("critique.envs.rg_mixture.tasks: empty; list at least one task")
        return out

    def _dataset(self, ti: int, size: int, seed: int):
        import reasoning_gym as rg
        t = self.tasks[ti]
        try:
            return rg.create_dataset(t["generator"], size=size, seed=seed, **t["params"])
        except Exception as e:  # rg raises bare asserts/TypeErrors on bad params
            raise ValueError(f"critique.envs.rg_mixture task '{t['name']}': reasoning-gym could not "
                             f"build '{t['generator']}' with params {t['params']}: {e}") from e

    def _grader(self, ti: int):
        if ti not in self._graders:
            self._graders[ti] = self._dataset(ti, 1, 0)
        return self._graders[ti]

    # problems -----------------------------------------------------------------------------
    def problem_text(self, generator: str, entry: dict) -> str:
        """The rendered problem (also the split's hash key)."""
        if self.render == "question":
            return str(entry["question"]).strip()
        return render_compact(generator, entry["metadata"])

    def _distinct(self, ti: int, side: str, want: int, max_tries: int = 8) -> list[dict]:
        """Up to `want` distinct problems of task ti on one side; the generator's stream does not
        depend on the side, so the sides partition one set of problems."""
        t, seen = self.tasks[ti], {}
        size = max(256, 4 * want)
        for k in range(max_tries):
            if len(seen) >= want:
                break
            before = len(seen)
            for e in self._dataset(ti, size, self.seed * 1000 + 7919 * ti + 104_729 * k):
                if not str(e["answer"]).strip():  # rg 0.1.25 writes 0 in bases 3-15 as ""
                    continue
                text = self.problem_text(t["generator"], e)
                if text in seen or side_of(text, self.split) != side:
                    continue
                seen[text] = {"text": text, "answer": str(e["answer"]).strip(), "task": t["name"],
                              "generator": t["generator"], "question": str(e["question"]),
                              "metadata": _jsonable(e["metadata"])}
                if len(seen) >= want:
                    break
            if k and len(seen) == before:  # a round of twice the last found nothing new: exhausted
                break
            size *= 2
        return list(seen.values())

    def _make(self, side: str, n: int) -> list[Problem]:
        rows: list[dict] = []
        for ti, want in enumerate(_apportion(n, [t["weight"] for t in self.tasks])):
            if want:
                rows += self._distinct(ti, side, want)
        order = np.random.default_rng([self.seed, 31, SIDES.index(side)]).permutation(len(rows))
        return [self._problem(rows[j], f"{self.kind}/{side}/{i}") for i, j in enumerate(order)]

    def _problem(self, r: dict, pid: str) -> Problem:
        return Problem(id=pid, prompt=self.prompt_template.format(problem=r["text"]),
                       answer=r["answer"], privileged=r["answer"],
                       meta={"task": r["task"], "generator": r["generator"],
                             "question": r["question"], "metadata": r["metadata"]})

    # grading ------------------------------------------------------------------------------
    def extract(self, response: str) -> str | None:
        """The graded part of a response: compact, its first line stripped; question, the last
        <answer>...</answer> (None without one)."""
        if self.render == "question":
            from reasoning_gym.utils import extract_answer
            return extract_answer(response)
        lines = response.strip().splitlines()
        return lines[0].strip() if lines else ""

    def score(self, problems: Sequence[Problem], responses: Sequence[str]) -> np.ndarray:
        if len(problems) != len(responses):
            raise ValueError(f"score: {len(problems)} problems but {len(responses)} responses")
        out = np.zeros(len(problems), dtype=float)
        for k, (p, r) in enumerate(zip(problems, responses)):
            task = p.meta.get("task")
            if task not in self._by_name:
                raise ValueError(f"problem {p.id}: task {task!r} is not in this env's "
                                 f"critique.envs.rg_mixture.tasks ({', '.join(self._by_name)})")
            ti = self._by_name[task]
            entry = {"question": p.meta.get("question", p.prompt), "answer": p.answer,
                     "metadata": p.meta.get("metadata", {})}
            try:
                s = self._grader(ti).score_answer(self.extract(r), entry)
            except Exception:  # a grader that chokes on an odd response: no reward
                s = 0.0
            out[k] = 1.0 if s == 1.0 else 0.0
        return out

    # demonstrations -----------------------------------------------------------------------
    def demonstrations(self, n: int, noise: float, rng: np.random.Generator) -> list[tuple[str, str]]:
        """n (prompt, target) rows: a task by weight, then one of its pre-training-side problems
        (pool `demo_pool` problems in all, default 4096); a share `noise` of targets wrong."""
        pool = self.problems("pretrain", int(section_setting(self.spec, "$defs", "env_rg_mixture", "demo_pool")))
        by_task: dict[str, list[Problem]] = {}
        for p in pool:
            by_task.setdefault(p.meta["task"], []).append(p)
        tasks = [t for t in self.tasks if by_task.get(t["name"])]
        if not tasks:
            raise ValueError("rg_mixture.demonstrations: no pre-training-side problems; lower "
                             "critique.envs.rg_mixture.split's eval + rl below 1")
        w = np.array([t["weight"] for t in tasks]) / sum(t["weight"] for t in tasks)
        rows = []
        for _ in range(n):
            t = tasks[int(rng.choice(len(tasks), p=w))]
            ps = by_task[t["name"]]
            p = ps[int(rng.integers(len(ps)))]
            ans = p.answer
            if rng.random() < noise:
                ans = corrupt_answer(t["generator"], ans, p.meta["metadata"], rng)
            rows.append((p.prompt, self.answer_template.format(answer=ans)))
        return rows
