"""Le Critique's MiniF2F: multi-turn Lean 4 theorem proving with compiler feedback (cluster only).

Le Critique (Privileged Value Functions for LLM Reinforcement Learning, arXiv 2608.16739; Section
6.1, Appendix D.2) adds MiniF2F (Zheng et al. 2022) to the Tether experiments: "The policy receives
compiler feedback after each turn for up to 3 attempts". Here an episode is up to `max_attempts` (3)
proof attempts: reward 1 as soon as one compiles without errors and without `sorry`, 0 after the
last failed one; after a failed attempt the next observation is the theorem again with the Lean
messages of the failure (errors only, truncated to `feedback_chars`). There is no privileged context
(the paper runs VF and Tether here, not Pvf) and no tiny-scale demonstrations: it needs a Lean 4 +
Mathlib project.

Spec (`critique.envs.minif2f`):
  data          JSONL of theorems: name (or id), formal_statement, optionally header and split
  repl_cmd      the leanprover-community/repl command, e.g. ["lake", "exe", "repl"]
  project_dir   where to run it (the Lean project with Mathlib and the repl built)
  timeout_s     per proof check (default 120); header_timeout_s for a header's first import (600)
  max_attempts  3; feedback_chars 1500; header (default: MiniF2F's usual Mathlib header)
  sides         optional {split value: side}, e.g. {valid: rl, test: eval}, instead of the hash
What is checked [our choice]: the theorem as the dataset states it. If the response's code (its last
```lean block, else the whole response) starts with the statement, it is checked as it is;
otherwise it is taken as the proof that follows the statement's `:= by` (indented) or `:=`.
So a policy cannot prove an easier statement. Code containing `sorry` or `admit`, a `sorries`
entry, or a "declaration uses 'sorry'" warning fails.

`LeanREPL` speaks the REPL's JSON protocol (commands and replies separated by blank lines): a
header is run once per process ({"cmd": header} -> env id), each proof against it ({"cmd": code,
"env": id}). A check that outlives `timeout_s` kills the REPL's process group and fails with a
timeout message; a REPL that dies is restarted (and the check retried `crash_retries` times); the
next check starts a fresh process either way.
"""
from __future__ import annotations

import json
import os
import queue
import re
import shlex
import signal
import subprocess
import threading
import time
from collections import deque
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from sparserl.core.config import section_setting
from sparserl.envs.base import SIDES, Env, Problem, side_of

DEFAULT_HEADER = ("import Mathlib\nimport Aesop\n\nset_option maxHeartbeats 400000\n\n"
                  "open BigOperators Real Nat Topology Rat\n\n")
PROMPT = ("Complete the following Lean 4 theorem (Mathlib is imported). Reply with the full "
          "theorem and its proof in one ```lean4 code block; the Lean compiler checks it, and you "
          "have {attempts} attempts.\n\n```lean4\n{header}{statement}\n```")
FEEDBACK = ("\n\nAttempt {k} of {attempts} failed. Lean says:\n{feedback}\n\nReply with a "
            "corrected full proof in one ```lean4 code block.")


@dataclass
class CheckResult:
    """One compiler check: ok iff no errors, no sorry, no timeout, no crash."""
    ok: bool
    errors: list[str] = field(default_factory=list)  # formatted "line L:C: message"
    sorry: bool = False
    timed_out: bool = False
    crashed: bool = False
    raw: Any = None

    def feedback(self, limit: int = 1500) -> str:
        if self.timed_out:
            text = "The Lean check timed out."
        elif self.crashed:
            text = "The Lean REPL crashed while checking this proof." + (
                f"\n{self.errors[0]}" if self.errors else "")
        else:
            parts = list(self.errors)
            if self.sorry:
                parts.append("The proof uses `sorry` (or `admit`), which is not allowed.")
            text = "\n".join(parts) or "The proof was not accepted."
        return text if len(text) <= limit else text[:limit] + "\n... (truncated)"


class LeanREPL:
    """A leanprover-community/repl process over stdin/stdout, with a timeout per check and a
    restart after a crash or a timeout. Not thread-safe: one per worker."""

    def __init__(self, cmd, cwd: str | os.PathLike | None = None, timeout_s: float = 120.0,
                 header_timeout_s: float = 600.0, crash_retries: int = 1,
                 env: dict | None = None):
        self.cmd = shlex.split(cmd) if isinstance(cmd, str) else [str(c) for c in cmd]
        if not self.cmd:
            raise ValueError("critique.envs.minif2f.repl_cmd: empty; set it to the REPL command, "
                             'e.g. ["lake", "exe", "repl"]')
        self.cwd = str(cwd) if cwd else None
        self.timeout_s, self.header_timeout_s = float(timeout_s), float(header_timeout_s)
        self.crash_retries = int(crash_retries)
        self.env = env
        self.proc: subprocess.Popen | None = None
        self.starts = 0  # processes started (tests and logs read it)
        self._envs: dict[str, int] = {}

    # process ------------------------------------------------------------------------------
    def start(self) -> None:
        self.close()
        try:
            self.proc = subprocess.Popen(
                self.cmd, cwd=self.cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True, encoding="utf-8", bufsize=1,
                start_new_session=True, env=self.env)  # its own group: a timeout kills lake's children too
        except OSError as e:
            raise RuntimeError(f"critique.envs.minif2f.repl_cmd: cannot start {self.cmd} in "
                               f"{self.cwd or os.getcwd()}: {e}; set repl_cmd and project_dir to a "
                               "built leanprover-community/repl") from e
        self.starts += 1
        self._envs = {}
        self._out: queue.Queue = queue.Queue()
        self._err: deque = deque(maxlen=50)
        threading.Thread(target=self._pump, args=(self.proc.stdout, self._out.put), daemon=True).start()
        self._err_thread = threading.Thread(target=self._pump, args=(self.proc.stderr, self._err.append),
                                            daemon=True)
        self._err_thread.start()

    @staticmethod
    def _pump(stream, put) -> None:
        try:
            for line in stream:
                put(line)
        except (ValueError, OSError):
            pass
        put(None)  # EOF

    def close(self) -> None:
        p, self.proc = self.proc, None
        if p is None:
            return
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                p.kill()
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        for s in (p.stdin, p.stdout, p.stderr):
            try:
                s.close()
            except Exception:
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # protocol -----------------------------------------------------------------------------
    def _send(self, payload: dict, timeout: float) -> dict:
        """One command -> its JSON reply. Raises TimeoutError, or EOFError when the REPL died."""
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        try:
            self.proc.stdin.write(json.dumps(payload, ensure_ascii=False) + "\n\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError) as e:
            raise EOFError(f"the REPL's stdin closed: {e}") from e
        deadline, buf = time.monotonic() + timeout, []
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            try:
                line = self._out.get(timeout=left)
            except queue.Empty:
                raise TimeoutError from None
            if line is None:
                self._err_thread.join(timeout=1.0)  # let its last words reach the message
                err = "".join(x for x in self._err if x).strip()[-500:]
                raise EOFError("the REPL exited" + (f" (stderr: {err})" if err else ""))
            if line.strip():
                buf.append(line)
                continue
            # a blank line ends a reply; skip any non-JSON chatter before the reply's "{"
            text = "".join(buf)
            start = text.find("{")
            if start < 0:
                buf = []
                continue
            try:
                return json.loads(text[start:])
            except json.JSONDecodeError:
                continue  # a blank line inside the reply: read on

    def _header_env(self, header: str) -> int | None:
        """The env id of `header` in this process (run on first use), None for no header."""
        if not header.strip():
            return None
        if header not in self._envs:
            reply = self._send({"cmd": header}, self.header_timeout_s)
            errs = _errors(reply)
            if errs or "env" not in reply:
                raise RuntimeError("critique.envs.minif2f: the Lean header does not compile "
                                   f"({'; '.join(errs) or reply}); fix the rows' header or the "
                                   "spec's header, or the project's Mathlib")
            self._envs[header] = int(reply["env"])
        return self._envs[header]

    def check(self, code: str, header: str = "") -> CheckResult:
        """Compile `code` after `header`. A timeout kills the process (the next check starts a
        new one) and fails; a crash restarts it and retries `crash_retries` times, then fails."""
        for attempt in range(self.crash_retries + 1):
            try:
                env = self._header_env(header)
                reply = self._send({"cmd": code} if env is None else {"cmd": code, "env": env},
                                   self.timeout_s)
                break
            except TimeoutError:
                self.close()
                return CheckResult(ok=False, timed_out=True)
            except EOFError as e:
                self.close()
                if attempt == self.crash_retries:
                    return CheckResult(ok=False, crashed=True, errors=[str(e)])
        errs = _errors(reply)
        sorry = bool(reply.get("sorries")) or bool(re.search(r"\b(sorry|admit)\b", code)) or any(
            "declaration uses 'sorry'" in str(m.get("data", "")) for m in reply.get("messages") or [])
        return CheckResult(ok=not errs and not sorry, errors=errs, sorry=sorry, raw=reply)


def _errors(reply: dict) -> list[str]:
    """The reply's errors as 'line L:C: message' (a top-level 'message' is a REPL-level error)."""
    out = []
    if "message" in reply and "messages" not in reply:
        out.append(f"REPL error: {reply['message']}")
    for m in reply.get("messages", []) or []:
        if m.get("severity") == "error":
            pos = m.get("pos") or {}
            out.append(f"line {pos.get('line', '?')}:{pos.get('column', '?')}: {m.get('data', '')}")
    return out


_LEAN_BLOCK = re.compile(r"```(?:lean4|lean)?[ \t]*\n(.*?)```", re.DOTALL)


def proof_code(statement: str, response: str) -> str:
    """The theorem the compiler checks: the response's code if it starts with `statement`
    (whitespace aside), else `statement` followed by the response as its proof."""
    blocks = _LEAN_BLOCK.findall(response)
    code = (blocks[-1] if blocks else response).strip("\n")
    stub = re.sub(r"\s*\bsorry\s*$", "", statement.rstrip())  # "... := by sorry" -> "... := by"
    norm = lambda s: " ".join(s.split())  # noqa: E731
    if norm(code).startswith(norm(stub)):
        return code
    body = code.strip()
    if stub.endswith("by"):
        return stub + "\n" + "\n".join("  " + ln if ln.strip() else ln for ln in body.splitlines())
    return stub + " " + body


@dataclass(frozen=True)
class MiniF2FState:
    problem: Problem
    attempt: int = 0  # attempts made
    feedback: str = ""  # of the last failed attempt
    done: bool = False
    reward: float = 0.0


class MiniF2FEnv(Env):
    """Multi-turn, paper scale only; see the module docstring for the spec."""

    kind = "minif2f"
    multi_turn = True

    def __init__(self, spec: dict, seed: int = 0):
        super().__init__(spec, seed)
        self.max_attempts = int(self._setting("max_attempts"))
        if self.max_attempts < 1:
            raise ValueError("critique.envs.minif2f.max_attempts: must be >= 1 (the paper uses 3)")
        self.max_turns = self.max_attempts
        self.feedback_chars = int(self._setting("feedback_chars"))
        self.prompt_template = self.spec.get("prompt_template", PROMPT)
        self.feedback_template = self.spec.get("feedback_template", FEEDBACK)
        self.rows = self._load()
        self._repl: LeanREPL | None = None

    def _setting(self, key: str):
        """The spec's value, else the schema's default ($defs/env_minif2f)."""
        return section_setting(self.spec, "$defs", "env_minif2f", key)

    def _load(self) -> list[dict]:
        path = self.spec.get("data")
        if not path:
            raise ValueError("critique.envs.minif2f.data: no path set; set it to a MiniF2F JSONL "
                             "(one theorem a line: name, formal_statement, optionally header)")
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"critique.envs.minif2f.data: {p} does not exist; download a "
                                    "MiniF2F Lean 4 JSONL (e.g. DeepSeek-Prover's minif2f.jsonl) "
                                    "and point data at it")
        rows = []
        for ln, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{p}:{ln}: not a JSON object ({e}); each line must be one theorem") from e
            name = r.get("name", r.get("id"))
            if name is None:
                raise ValueError(f"{p}:{ln}: no 'name' (or 'id') field; add each theorem's name")
            if not str(r.get("formal_statement", "")).strip():
                raise ValueError(f"{p}:{ln}: no 'formal_statement' field; add the Lean 4 statement "
                                 "(e.g. 'theorem foo ... := by')")
            rows.append({"name": str(name), "formal_statement": str(r["formal_statement"]),
                         "header": str(r["header"]) if r.get("header") is not None
                         else str(self.spec.get("header", DEFAULT_HEADER)),
                         "split": r.get("split")})
        if not rows:
            raise ValueError(f"critique.envs.minif2f.data: {p} has no theorems")
        return rows

    def _side(self, r: dict) -> str:
        sides = self.spec.get("sides")
        if sides:
            if r["split"] not in sides:
                raise ValueError(f"critique.envs.minif2f.sides: theorem {r['name']} has split "
                                 f"{r['split']!r}, which sides ({sides}) does not map")
            return str(sides[r["split"]])
        return side_of(r["name"] + "\n" + r["formal_statement"], self.split)

    def problems(self, side: str, n: int) -> list[Problem]:
        if side not in SIDES:
            raise ValueError(f"side {side!r} is not one of {', '.join(SIDES)}")
        rows = [r for r in self.rows if self._side(r) == side]
        order = np.random.default_rng([self.seed, 613, SIDES.index(side)]).permutation(len(rows))
        out = []
        for i, j in enumerate(order[:n]):
            r = rows[j]
            prompt = self.prompt_template.format(attempts=self.max_attempts, header=r["header"],
                                                 statement=r["formal_statement"].rstrip())
            out.append(Problem(id=f"{self.kind}/{side}/{i}", prompt=prompt, answer="",
                               meta={"name": r["name"], "formal_statement": r["formal_statement"],
                                     "header": r["header"]}))
        return out

    @property
    def repl(self) -> LeanREPL:
        if self._repl is None:
            cmd = self.spec.get("repl_cmd")
            if not cmd:
                raise ValueError("critique.envs.minif2f.repl_cmd: not set; set it to the Lean REPL "
                                 'command, e.g. ["lake", "exe", "repl"], and project_dir to its project')
            self._repl = LeanREPL(cmd, cwd=self.spec.get("project_dir"),
                                  timeout_s=float(self._setting("timeout_s")),
                                  header_timeout_s=float(self._setting("header_timeout_s")),
                                  crash_retries=int(self._setting("crash_retries")))
        return self._repl

    # episode ------------------------------------------------------------------------------
    def reset(self, problem: Problem) -> MiniF2FState:
        return MiniF2FState(problem=problem)

    def observe(self, state: MiniF2FState) -> str:
        if state.done:
            raise ValueError(f"minif2f episode {state.problem.id} is over: no next observation")
        if state.attempt == 0:
            return state.problem.prompt
        return state.problem.prompt + self.feedback_template.format(
            k=state.attempt, attempts=self.max_attempts, feedback=state.feedback)

    def step(self, state: MiniF2FState, response: str) -> tuple[MiniF2FState, bool, float]:
        if state.done:
            raise ValueError(f"minif2f episode {state.problem.id} is over; reset it")
        m = state.problem.meta
        res = self.repl.check(proof_code(m["formal_statement"], response), m["header"])
        attempt = state.attempt + 1
        if res.ok:
            return replace(state, attempt=attempt, feedback="", done=True, reward=1.0), True, 1.0
        done = attempt >= self.max_attempts
        new = replace(state, attempt=attempt, feedback=res.feedback(self.feedback_chars), done=done)
        return new, done, 0.0

    def close(self) -> None:
        if self._repl is not None:
            self._repl.close()
            self._repl = None
