"""CodeIO (Le Critique: Privileged Value Functions for LLM Reinforcement Learning,
arXiv 2608.16739; Section 4.1 and Appendix D).

A single-turn program-reasoning task: the policy predicts a program's output from an input
("output" direction) or a feasible input from an output ("input" direction). Le Critique trains
Qwen3-4B-Instruct on it with K=4 and a leave-one-out Pvf; the env's privileged context is the
reference answer (`Problem.privileged`). The policy's text is never executed: a predicted input
is parsed with `ast.literal_eval` (or JSON) and handed as data to the REFERENCE program, which runs
in `sandbox` (one sandboxed process per `score` batch); ANY input that makes the program give the
target output is accepted. The sandbox must give strong isolation (bubblewrap, docs/sandbox.md);
without it CodeIO refuses to grade unless the env's spec says `sandbox: {allow_weak: true}`, and
`sandbox_isolation` tells runs which level graded them.

Two sources (`spec["source"]`):

* "procedural" (tiny scale, the default): one-line integer programs short enough for a 0.2M
  byte-level policy, about one token per character:
      output direction  prompt "P:(x*3+1)%10 x=4 ->"   target " 3"
      input direction   prompt "P:(x*3+1)%10 ->3 x="   target " 4" (the smallest feasible x in
                        0..x_max; any integer x with f(x) = 3 scores 1, e.g. 14 or -6)
  The target is " " + answer: the response is generated right after the prompt, and a space
  separates it from "->" / "=" as in the math task's " \\boxed{..}". Grading reads the response's
  LEADING INTEGER (after optional whitespace; what follows it is ignored, so " 3\nP:..." is 3,
  but " 3.5" is not 3); a response that does not start with an integer scores 0. Output
  direction: that integer must equal the reference output. Input direction: it must parse with
  ast.literal_eval as an int (so "07" is malformed) and the reference program, run in the
  sandbox, must return the target.
  Knobs: templates, x_max, const_max, mod_range, input_fraction, max_prompt_chars (defaults:
  the schema's $defs/env_codeio).
* "reasoning_gym" (paper scale): reasoning-gym 0.1.25's bundled CodeIO data (codeio.jsonl.gz,
  3002 entries: task_description, input_output_spec, code_sample with `main_solution`,
  input_generator with `generate_inputs(rng)`). reasoning-gym's own `__getitem__` exec's that
  code in-process; here the input generator and the program run in the sandbox instead, and the
  prompt is reasoning-gym's question template filled with them (input_fraction means what it
  says: reasoning-gym's input_prediction_probability picks the OUTPUT template with that
  probability). The answer is read from the
  response's last <answer>...</answer> (reasoning-gym's extract_answer), else the whole response.
  Output direction: reward 1 iff reasoning-gym's `score_answer` gives full credit (its partial
  credit for near-miss JSON is cut to 0, Le Critique's reward is binary). Input direction: the
  predicted JSON object is the keyword arguments of `main_solution`, run in the sandbox; 1 iff
  it returns the target output (JSON-equal), or the prediction is the reference input itself
  (some programs draw random numbers, so the reference may not reproduce its own output).

Sides: a hash of the problem's canonical text (`base.side_of`) decides. split_by "problem" (the
tiny default): the prompt, so the eval side holds unseen (program, input) pairs of programs the
demonstrations also show with other inputs. split_by "program" (the paper default): the program
source, so eval programs are never trained on.
"""
from __future__ import annotations

import ast
import dataclasses
import json
import os
import re
import warnings
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from sparserl.core.config import schema_defaults, section_setting
from sparserl.envs.base import SIDES, Env, Problem, side_of
from sparserl.envs.sandbox import Call, Limits, SandboxUnavailable, run_jobs, strong_isolation


@dataclass(frozen=True)
class _Template:
    expr: str  # Python expression over x; {a} {b} {c} in 1..const_max, {m} in mod_range
    fn: Callable[..., int]  # the same expression, for the reference answers

    def render(self, k: dict) -> str:
        return self.expr.format(**k)


TEMPLATES: dict[str, _Template] = {
    "affine_mod": _Template("(x*{a}+{b})%{m}", lambda x, a, b, c, m: (x * a + b) % m),
    "square_mod": _Template("(x*x+{a})%{m}", lambda x, a, b, c, m: (x * x + a) % m),
    "branch": _Template("x+{a} if x<{b} else x-{c}", lambda x, a, b, c, m: x + a if x < b else x - c),
    "xor": _Template("x^{a}", lambda x, a, b, c, m: x ^ a),
    "digits": _Template("x%{m}+x//{m}", lambda x, a, b, c, m: x % m + x // m),
    "minmax": _Template("max(x,{a})-min(x,{b})", lambda x, a, b, c, m: max(x, a) - min(x, b)),
}

_LEAD_INT = re.compile(r"\s*([+-]?\d{1,18})(?!\d|\.\d)")  # "3.5" is not 3
_GEN_FUNC = "__sparserl_io__"
_GEN_HELPER = f'''

def {_GEN_FUNC}(seed):
    import json as _json
    inputs = generate_inputs(Random(seed))
    shown = _json.dumps(inputs, allow_nan=False)  # before the call: main_solution may mutate it
    outputs = main_solution(**inputs)
    return _json.dumps({{"input": _json.loads(shown), "output": outputs}}, allow_nan=False)
'''


def _err(field: str, msg: str) -> ValueError:
    return ValueError(f"codeio env spec field '{field}': {msg}")


class CodeIOEnv(Env):
    """Le Critique's CodeIO env; see the module docstring for the formats."""

    kind = "codeio"
    multi_turn = False

    def __init__(self, spec: dict, seed: int = 0):
        super().__init__(spec, seed)
        defaults = schema_defaults("$defs", "env_codeio")
        cfg = {**defaults, **{k: v for k, v in self.spec.items() if k in defaults}}
        self.source = str(cfg["source"])
        if self.source not in ("procedural", "reasoning_gym"):
            raise _err("source", f"unknown source {self.source!r}; use 'procedural' or 'reasoning_gym'")
        paper = self.source == "reasoning_gym"
        self.input_fraction = float(cfg["input_fraction"])
        if not 0.0 <= self.input_fraction <= 1.0:
            raise _err("input_fraction", f"{self.input_fraction} is not in [0, 1]")
        self.split_by = cfg["split_by"] or ("program" if paper else "problem")
        if self.split_by not in ("problem", "program"):
            raise _err("split_by", f"{self.split_by!r}; use 'problem' or 'program'")
        self.time_limit_s = float(cfg["time_limit_s"] or (5.0 if paper else 1.0))
        self.limits = Limits(memory_mb=int(cfg["memory_mb"] or (1024 if paper else 256)),
                             site_packages=paper, exec_limit_s=10.0 if paper else 2.0)
        sb = self.spec.get("sandbox", {})
        allow_weak = section_setting(sb, "critique", "envs", self.kind, "sandbox", "allow_weak")
        if not isinstance(sb, dict) or set(sb) - {"allow_weak"} or not isinstance(allow_weak, bool):
            raise _err("sandbox", f"{sb!r}; use a mapping {{allow_weak: true|false}} (default false)")
        self.allow_weak = allow_weak
        self._isolation: str | None = None
        self.cfg = cfg
        if paper:
            self._rg_ds = None
        else:
            names = list(cfg["templates"])
            bad = [t for t in names if t not in TEMPLATES]
            if bad or not names:
                raise _err("templates", f"unknown {bad} (or empty); known: {', '.join(TEMPLATES)}")
            self.templates = names
            self.x_max, self.const_max = int(cfg["x_max"]), int(cfg["const_max"])
            lo, hi = (int(v) for v in cfg["mod_range"])
            if self.x_max < 1 or self.const_max < 1 or not 2 <= lo <= hi:
                raise _err("x_max/const_max/mod_range",
                           "need x_max >= 1, const_max >= 1 and 2 <= mod_range[0] <= mod_range[1]")
            self.mod_range = (lo, hi)
            self.max_prompt_chars = int(cfg["max_prompt_chars"])

    @property
    def sandbox_isolation(self) -> str:
        """The level the sandbox grades at, "strong" or "weak" (sparserl.envs.sandbox; runs record
        it in their manifest). Checked before the first sandboxed call, not at construction: envs
        are also built only to make problems and demonstrations, which run no program."""
        if self._isolation is None:
            ok, why = strong_isolation(self.limits.python)
            if not ok and not self.allow_weak:
                raise SandboxUnavailable(
                    f"codeio env: strong sandbox isolation is not available here ({why}), and CodeIO "
                    "runs reference programs that were LLM-written. Fix: install bubblewrap "
                    "(apt-get install bubblewrap), or set `sandbox: {allow_weak: true}` in this env's "
                    "spec (config key critique.envs.<name>.sandbox.allow_weak) to grade with the weak "
                    "fallback (audit hook + namespaces; see docs/sandbox.md)")
            level = "strong" if ok else "weak"
            if not ok:
                who = "host root" if os.geteuid() == 0 else f"host uid {os.geteuid()}"
                warnings.warn(f"codeio env: grading with the WEAK sandbox ({why}); sandbox.allow_weak "
                              f"is set, so this gives up: the programs run as {who} (the trainer's "
                              "uid), see the host's files through an audit hook they can switch off, "
                              "write to a host folder, and have no seccomp filter, no read-only /proc "
                              "and no memory cgroup (docs/sandbox.md)", RuntimeWarning, stacklevel=2)
            self.limits = dataclasses.replace(self.limits, isolation=level)
            self._isolation = level
        return self._isolation

    def _run(self, calls: list[Call]):
        self.sandbox_isolation  # refuses, or pins the level, before any program runs
        return run_jobs(calls, time_limit_s=self.time_limit_s, limits=self.limits)

    # problems -----------------------------------------------------------------------------
    def problems(self, side: str, n: int) -> list[Problem]:
        if side not in SIDES:
            raise ValueError(f"codeio: side {side!r} is not one of {SIDES}")
        if n <= 0:
            return []
        if self.source == "reasoning_gym":
            return self._rg_problems(side, n)
        return self._tiny_problems(side, n)

    def _tiny_candidates(self):
        """An endless deterministic stream of (prompt, program key, answer, meta)."""
        rng = np.random.default_rng([self.seed, 0xC0DE10])
        domain = range(self.x_max + 1)
        while True:
            name = self.templates[int(rng.integers(len(self.templates)))]
            t = TEMPLATES[name]
            k = {v: int(rng.integers(1, self.const_max + 1)) for v in "abc"}
            k["m"] = int(rng.integers(self.mod_range[0], self.mod_range[1] + 1))
            x0 = int(rng.integers(self.x_max + 1))
            direction = "input" if rng.random() < self.input_fraction else "output"
            values = [t.fn(x, **k) for x in domain]
            if len(set(values)) < 2:
                continue  # a constant program has no wrong input to learn from
            expr = t.render(k)
            y = values[x0]
            program = f"def f(x):\n    return {expr}\n"
            meta = {"source": "procedural", "direction": direction, "program": program, "func": "f",
                    "expr": expr, "template": name, "consts": k, "output": y}
            if direction == "output":
                prompt, answer = f"P:{expr} x={x0} ->", str(y)
                meta["input"] = x0
            else:
                feasible = [x for x in domain if values[x] == y]
                prompt, answer = f"P:{expr} ->{y} x=", str(feasible[0])
                meta.update(input=feasible[0], feasible=feasible)
            yield prompt, program, answer, meta

    def _tiny_problems(self, side: str, n: int) -> list[Problem]:
        out: list[Problem] = []
        seen: set[str] = set()
        misses, too_long = 0, 0
        for prompt, program, answer, meta in self._tiny_candidates():
            if misses > 10_000:
                break  # the side has run out of new problems
            misses += 1
            if len(prompt) > self.max_prompt_chars:
                too_long += 1
                continue
            if prompt in seen:
                continue
            seen.add(prompt)
            key = prompt if self.split_by == "problem" else program
            if side_of(key, self.split) != side:
                continue
            misses = 0
            out.append(Problem(f"codeio/{side}/{len(out)}", prompt, answer, answer, meta))
            if len(out) >= n:
                break
        if not out and too_long:
            raise _err("max_prompt_chars", f"every prompt is longer than {self.max_prompt_chars} "
                                           "chars; raise it or use smaller templates/constants")
        return out

    # paper scale --------------------------------------------------------------------------
    def _rg(self):
        if self._rg_ds is None:
            try:
                import reasoning_gym as rg
            except ImportError as e:
                raise ImportError("codeio source 'reasoning_gym' needs reasoning-gym==0.1.25 "
                                  "(pip install -e '.[cpu]')") from e
            try:
                self._rg_ds = rg.create_dataset("codeio", size=1, seed=self.seed,
                                                difficulty=self.cfg["difficulty"])
            except AssertionError as e:
                raise _err("difficulty", f"reasoning-gym's codeio has no entries for difficulty "
                                         f"{self.cfg['difficulty']!r} ({e}); use None or 1..10") from e
        return self._rg_ds

    def _rg_problems(self, side: str, n: int) -> list[Problem]:
        from reasoning_gym.code.codeio import INPUT_PREDICTION_PROMPT_TEMPLATE as IN_T
        from reasoning_gym.code.codeio import OUTPUT_PREDICTION_PROMPT_TEMPLATE as OUT_T
        ds = self._rg()
        data = type(ds)._jsonl_data
        rng = np.random.default_rng([self.seed, 0xC0DE20])
        out: list[Problem] = []
        seen: set[str] = set()
        for _round in range(12):
            want = max(16, 2 * (n - len(out)))
            cand = []
            for _ in range(want):
                e = int(rng.integers(len(data)))
                gen_seed = int(rng.integers(2**31))
                direction = "input" if rng.random() < self.input_fraction else "output"
                entry = data[e]
                if self.split_by == "program" and side_of(entry["code_sample"], self.split) != side:
                    continue
                cand.append((e, gen_seed, direction))
            calls = [Call("from random import Random\n" + data[e]["code_sample"] + "\n\n"
                          + data[e]["input_generator"] + _GEN_HELPER, _GEN_FUNC, (s,))
                     for e, s, _ in cand]
            for (e, s, direction), res in zip(cand, self._run(calls)):
                if not (res.ok and isinstance(res.value, str)):
                    continue
                try:
                    io = json.loads(res.value)
                except ValueError:
                    continue
                inp, outp = io.get("input"), io.get("output")
                if not isinstance(inp, dict):
                    continue
                entry = data[e]
                t = IN_T if direction == "input" else OUT_T
                q = t.format(entry["task_description"], entry["input_output_spec"],
                             outp if direction == "input" else inp, entry["code_sample"])
                key = q if self.split_by == "problem" else entry["code_sample"]
                if q in seen or side_of(key, self.split) != side:
                    continue
                seen.add(q)
                answer = json.dumps(inp if direction == "input" else outp)
                meta = {"source": "reasoning_gym", "direction": direction,
                        "program": entry["code_sample"], "func": "main_solution", "input": inp,
                        "output": outp, "entry": e, "seed": s, "difficulty": entry.get("difficulty")}
                out.append(Problem(f"codeio/{side}/{len(out)}", q, answer, answer, meta))
                if len(out) >= n:
                    return out
        return out

    # demonstrations -----------------------------------------------------------------------
    def demonstrations(self, n: int, noise: float, rng: np.random.Generator) -> list[tuple[str, str]]:
        """(prompt, " " + answer) rows sampled from the pre-training side; with probability `noise`
        the answer is off by one (output: y +- 1; input: x0 +- 1 when infeasible, else the nearest
        infeasible x), the wrong mass RL can take back."""
        if self.source != "procedural":
            raise NotImplementedError("codeio: demonstrations exist only for source 'procedural' (the "
                                      "paper-scale policy is Qwen3-4B-Instruct, not pre-trained here)")
        pool = self.problems("pretrain", int(self.cfg["demo_pool"]))
        if not pool:
            raise RuntimeError("codeio: the pretrain side has no problems; check split/templates")
        rows = []
        for k in rng.integers(len(pool), size=n):
            p = pool[int(k)]
            answer = p.answer
            if rng.random() < noise:
                answer = self._wrong(p, rng)
            rows.append((p.prompt, " " + answer))
        return rows

    def _wrong(self, p: Problem, rng: np.random.Generator) -> str:
        m = p.meta
        step = 1 if rng.random() < 0.5 else -1
        if m["direction"] == "output":
            return str(int(m["output"]) + step)
        t, k = TEMPLATES[m["template"]], m["consts"]
        x0 = int(m["input"])
        for x in (x0 + step, x0 - step):
            if t.fn(x, **k) != m["output"]:
                return str(x)
        for x in sorted(range(-1, self.x_max + 2), key=lambda v: abs(v - x0)):
            if t.fn(x, **k) != m["output"]:
                return str(x)
        return str(x0)  # unreachable: constant programs are not generated

    # grading ------------------------------------------------------------------------------
    def score(self, problems: Sequence[Problem], responses: Sequence[str]) -> np.ndarray:
        if len(problems) != len(responses):
            raise ValueError(f"codeio score: {len(problems)} problems but {len(responses)} responses")
        out = np.zeros(len(problems), dtype=float)
        jobs: list[tuple[int, Call]] = []
        for k, (p, r) in enumerate(zip(problems, responses)):
            m = p.meta
            src = m.get("source", self.source)
            if src == "reasoning_gym":
                v, call = self._grade_rg(p, r if isinstance(r, str) else "")
            else:
                v, call = self._grade_tiny(p, r if isinstance(r, str) else "")
            out[k] = v
            if call is not None:
                jobs.append((k, call))
        if jobs:
            results = self._run([c for _, c in jobs])
            for (k, _), res in zip(jobs, results):
                out[k] = float(_matches(problems[k], res))
        return out

    def _grade_tiny(self, p: Problem, response: str) -> tuple[float, Call | None]:
        m = _LEAD_INT.match(response)
        if m is None:
            return 0.0, None
        if p.meta["direction"] == "output":
            return float(int(m.group(1)) == int(p.meta["output"])), None
        try:
            x = ast.literal_eval(m.group(1))
        except (ValueError, SyntaxError):
            return 0.0, None  # e.g. "07"
        if type(x) is not int:
            return 0.0, None
        return 0.0, Call(p.meta["program"], p.meta.get("func", "f"), (x,))

    def _grade_rg(self, p: Problem, response: str) -> tuple[float, Call | None]:
        from reasoning_gym.utils import extract_answer
        ans = extract_answer(response)
        ans = (response if ans is None else ans).strip()
        if not ans:
            return 0.0, None
        if p.meta["direction"] == "output":
            return float(self._rg().score_answer(ans, {"answer": p.answer}) >= 1.0), None
        pred = _parse_obj(ans)
        if not isinstance(pred, dict) or not all(isinstance(k, str) for k in pred):
            return 0.0, None
        if _json_equal(pred, p.meta["input"]):
            return 1.0, None
        return 0.0, Call(p.meta["program"], p.meta.get("func", "main_solution"), (), pred)


def _parse_obj(text: str):
    """A JSON value, else a Python literal (models write {'a': True}); None if neither. Data only."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    if len(text) > 100_000:
        return None
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None


def _json_equal(a, b) -> bool:
    try:
        return json.loads(json.dumps(a)) == json.loads(json.dumps(b))
    except (TypeError, ValueError, RecursionError):
        return False


def _matches(p: Problem, res) -> bool:
    """Whether a sandboxed run of the reference program on the predicted input gave the target."""
    if not res.ok:
        return False
    target = p.meta["output"]
    if p.meta.get("source", "procedural") == "reasoning_gym":
        return res.json is not None and _json_equal(json.loads(res.json), target)
    return type(res.value) is int and type(target) is int and res.value == target
