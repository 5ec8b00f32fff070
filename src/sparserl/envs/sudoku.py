"""Le Critique's Sudoku: a multi-turn env where the policy fills one missing cell per turn.

Le Critique (Privileged Value Functions for LLM Reinforcement Learning, arXiv 2608.16739; Section
4.1, Appendix D.1): "the policy reasons and fills one missing grid cell per turn. The Pvf receives
the complete solved grid, while the policy observes only the standard interaction." So
`Problem.privileged` (and `answer`) is the solved grid, and no observation ever shows it: an
observation is the current, incomplete grid.

Episode rules [our choice; the paper does not state them]: each turn the policy names one empty
cell and a value. A move that cannot be parsed, that targets a filled cell, or whose value differs
from the puzzle's solution ends the episode with reward 0 (every puzzle has a unique solution, so
"wrong" is "differs from the solution", also for a value the row, column and box would still
allow). The episode ends with reward 1 when the last blank is filled correctly, so a solved
episode takes exactly as many turns as the puzzle has blanks; `max_turns` is the most blanks a
puzzle of the spec has.

Two sources (`source`):
  procedural     (tiny scale, default) `size` x `size` grids (4: 2x2 boxes; 9 also works) from a
                 seeded random backtracking fill, `blanks: [lo, hi]` cells removed one at a time
                 while the solution stays unique. Observation and move:
                     prompt  "S: 12.4/3..1/4312/2143\\nA:"   (rows by "/", "." empty)
                     target  " 23=2"                          (row 2, column 3, value 2; 1-based)
                 the move is read from the response's first line: RC=V, nothing else.
  reasoning_gym  (paper scale) reasoning-gym's `sudoku` generator (9x9, unique solutions,
                 `blanks` = its min/max_empty); the first observation is its puzzle text ("Solve
                 this Sudoku puzzle:" and the grid, "_" empty), later ones the same text of the
                 current grid, each with the move format (`RG_INSTRUCTION`): the last
                 <answer>row column value</answer> of the response, e.g. <answer>3 7 5</answer>.
The three sides are a hash of the puzzle's SOLVED grid (`base.side_of`), not of the puzzle: every
grid a pre-training trace passes through completes to a pre-training solution, so no held-out
puzzle (4x4 has only 288 solved grids, and a 3-blank eval puzzle could otherwise be the second
turn of a 4-blank pre-training trace) is ever rehearsed. Demonstrations are solution traces:
the blanks of a pre-training-side puzzle in a random order, one (observation, move) row per turn;
a share `noise` of moves name the right cell with a wrong value (the solution's value + 1,
cyclically), the trace going on from the correct grid.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from sparserl.core.config import section_setting
from sparserl.envs.base import Env, Problem, side_of

SOURCES = ("procedural", "reasoning_gym")
MOVE_FORMATS = ("rc=v", "r c v")
TINY_PROMPT = "S: {grid}\nA:"
RG_INSTRUCTION = ("Fill exactly one empty cell (_) per turn; a wrong value ends the game. Reason "
                  "as you like, then end your reply with the move as <answer>row column "
                  "value</answer>, rows and columns numbered from 1 at the top left, e.g. "
                  "<answer>3 7 5</answer>.")
RG_PROMPT = "Solve this Sudoku puzzle:\n{grid}\n" + RG_INSTRUCTION


# grids: a flat string of n*n characters, "1".."n" or "." for an empty cell ---------------------
def _box(n: int) -> int:
    b = int(round(n ** 0.5))
    if b * b != n or not 2 <= b <= 3:
        raise ValueError(f"critique.envs.sudoku.size: {n} is not 4 or 9 (a square of 2 or 3)")
    return b


@functools.lru_cache(maxsize=None)
def _peers(n: int) -> list[list[int]]:
    """For each cell, the other cells of its row, column and box."""
    b = _box(n)
    out = []
    for i in range(n * n):
        r, c = divmod(i, n)
        ps = {r * n + k for k in range(n)} | {k * n + c for k in range(n)}
        br, bc = b * (r // b), b * (c // b)
        ps |= {(br + dr) * n + bc + dc for dr in range(b) for dc in range(b)}
        ps.discard(i)
        out.append(sorted(ps))
    return out


def _candidates(g: list[str], i: int, peers: list[list[int]], n: int) -> list[str]:
    used = {g[j] for j in peers[i]}
    return [str(v) for v in range(1, n + 1) if str(v) not in used]


def solved_grid(n: int, rng: np.random.Generator) -> str:
    """A random complete grid: backtracking fill with the values of each cell in random order."""
    peers, g = _peers(n), ["."] * (n * n)

    def fill(i: int) -> bool:
        if i == n * n:
            return True
        cands = _candidates(g, i, peers, n)
        for j in rng.permutation(len(cands)):
            g[i] = cands[j]
            if fill(i + 1):
                return True
        g[i] = "."
        return False

    fill(0)
    return "".join(g)


def count_solutions(grid: str, n: int, limit: int = 2) -> int:
    """Solutions of a consistent partial grid (its filled cells are not re-checked), counted up to
    `limit` (most-constrained cell first)."""
    peers, g = _peers(n), list(grid)

    def count() -> int:
        best, best_c = -1, None
        for i, x in enumerate(g):
            if x == ".":
                c = _candidates(g, i, peers, n)
                if best_c is None or len(c) < len(best_c):
                    best, best_c = i, c
                    if not c:
                        return 0
        if best_c is None:
            return 1
        total = 0
        for v in best_c:
            g[best] = v
            total += count()
            if total >= limit:
                break
        g[best] = "."
        return total

    return count()


def make_puzzle(n: int, blanks: int, rng: np.random.Generator, tries: int = 20) -> tuple[str, str]:
    """(puzzle, solution) with `blanks` empty cells and a unique solution: cells are emptied in a
    random order, each kept only if the solution stays unique; a fresh grid if `blanks` is not
    reached."""
    for _ in range(tries):
        sol = solved_grid(n, rng)
        g, k = list(sol), 0
        for i in rng.permutation(n * n):
            if k == blanks:
                break
            keep, g[i] = g[i], "."
            if count_solutions("".join(g), n) == 1:
                k += 1
            else:
                g[i] = keep
        if k == blanks:
            return "".join(g), sol
    raise ValueError(f"critique.envs.sudoku.blanks: could not make a {n}x{n} puzzle with {blanks} "
                     "blanks and a unique solution; lower blanks")


def render_compact(grid: str, n: int) -> str:
    """'12.4/3..1/4312/2143': rows by '/', '.' empty."""
    return "/".join(grid[r * n:(r + 1) * n] for r in range(n))


def render_rg(grid: str, n: int) -> str:
    """reasoning-gym's grid text: values by spaces, rows by newlines, '_' empty."""
    return "\n".join(" ".join("_" if x == "." else x for x in grid[r * n:(r + 1) * n])
                     for r in range(n))


def parse_move(response: str, fmt: str, n: int) -> tuple[int, int, int] | None:
    """(row, column, value), 1-based, or None for a malformed move (also out of 1..n).
    'rc=v': the first line of the response is exactly RC=V (spaces around it allowed);
    'r c v': the last <answer>...</answer> (else the last line) holds three integers."""
    if fmt == "rc=v":
        lines = response.strip().splitlines()
        m = re.fullmatch(r"\s*(\d)(\d)=(\d)\s*", lines[0]) if lines else None
    else:
        from reasoning_gym.utils import extract_answer
        text = extract_answer(response)
        if text is None:
            lines = [ln for ln in response.strip().splitlines() if ln.strip()]
            text = lines[-1] if lines else ""
        m = re.fullmatch(r"\s*(\d+)\s*[ ,]\s*(\d+)\s*[ ,=:]\s*(\d+)\s*", text)
    if m is None:
        return None
    r, c, v = (int(x) for x in m.groups())
    if not (1 <= r <= n and 1 <= c <= n and 1 <= v <= n):
        return None
    return r, c, v


def format_move(r: int, c: int, v: int, fmt: str) -> str:
    return f"{r}{c}={v}" if fmt == "rc=v" else f"{r} {c} {v}"


@dataclass(frozen=True)
class SudokuState:
    """One episode's state (immutable: `step` returns a new one, so states can branch)."""
    problem: Problem
    grid: str  # flat, "." empty
    turn: int = 0
    done: bool = False
    reward: float = 0.0
    outcome: str = ""  # when done: solved | malformed | filled | wrong


class SudokuEnv(Env):
    """Multi-turn; spec: source, size, blanks [lo, hi], move_format, prompt_template,
    answer_template, split, demo_pool. Problem.meta: n, blanks, puzzle, solution (flat strings)."""

    kind = "sudoku"
    multi_turn = True

    def __init__(self, spec: dict, seed: int = 0):
        super().__init__(spec, seed)
        self.source = str(section_setting(self.spec, "$defs", "env_sudoku", "source"))
        if self.source not in SOURCES:
            raise ValueError(f"critique.envs.sudoku.source: {self.source!r} is not one of "
                             f"{', '.join(SOURCES)}")
        rg = self.source == "reasoning_gym"
        self.n = 9 if rg else int(section_setting(self.spec, "$defs", "env_sudoku", "size"))
        _box(self.n)
        if rg and "size" in self.spec and int(self.spec["size"]) != 9:
            raise ValueError("critique.envs.sudoku.size: reasoning-gym's sudoku is 9x9; drop size "
                             "or use source: procedural")
        lo, hi = (int(x) for x in self.spec.get("blanks", [30, 50] if rg else [2, 4]))
        if not 1 <= lo <= hi <= (64 if rg else self.n * self.n - 1):
            raise ValueError(f"critique.envs.sudoku.blanks: [{lo}, {hi}] is not a range 1 <= lo <= hi "
                             f"<= {64 if rg else self.n * self.n - 1}")
        self.blanks = (lo, hi)
        self.max_turns = hi
        self.move_format = str(self.spec.get("move_format", "r c v" if rg else "rc=v"))
        if self.move_format not in MOVE_FORMATS:
            raise ValueError(f"critique.envs.sudoku.move_format: {self.move_format!r} is not one of "
                             f"{', '.join(MOVE_FORMATS)}")
        self.prompt_template = self.spec.get("prompt_template", RG_PROMPT if rg else TINY_PROMPT)
        self.answer_template = self.spec.get("answer_template",
                                             "<answer>{move}</answer>" if rg else " {move}")

    def render(self, grid: str) -> str:
        return render_rg(grid, self.n) if self.source == "reasoning_gym" else render_compact(grid, self.n)

    # problems -----------------------------------------------------------------------------
    def _stream(self):
        """(puzzle, solution) pairs in one seeded order shared by all sides."""
        if self.source == "procedural":
            rng = np.random.default_rng([self.seed, 4_241])
            while True:
                yield make_puzzle(self.n, int(rng.integers(self.blanks[0], self.blanks[1] + 1)), rng)
        import reasoning_gym as rg
        chunk, k = 64, 0
        while True:
            ds = rg.create_dataset("sudoku", size=chunk, seed=self.seed * 1000 + 104_729 * k,
                                   min_empty=self.blanks[0], max_empty=self.blanks[1])
            for e in ds:
                md = e["metadata"]
                flat = lambda b: "".join(str(x) if x else "." for row in b for x in row)  # noqa: E731
                yield flat(md["puzzle"]), flat(md["solution"])
            k += 1

    def _make(self, side: str, n: int) -> list[Problem]:
        out, seen = [], set()
        budget = 40 * n + 1000  # draws before giving up (a small space runs out)
        for puzzle, sol in self._stream():
            if len(out) >= n or budget <= 0:
                break
            budget -= 1
            if puzzle in seen or side_of(render_compact(sol, self.n), self.split) != side:
                continue
            seen.add(puzzle)
            solved = self.render(sol)
            out.append(Problem(
                id=f"{self.kind}/{side}/{len(out)}",
                prompt=self.prompt_template.format(grid=self.render(puzzle)),
                answer=solved, privileged=solved,
                meta={"n": self.n, "blanks": puzzle.count("."), "puzzle": puzzle, "solution": sol}))
        return out

    # episode ------------------------------------------------------------------------------
    def reset(self, problem: Problem) -> SudokuState:
        return SudokuState(problem=problem, grid=problem.meta["puzzle"])

    def observe(self, state: SudokuState) -> str:
        if state.done:
            raise ValueError(f"sudoku episode {state.problem.id} is over ({state.outcome}): "
                             "there is no next observation")
        return self.prompt_template.format(grid=self.render(state.grid))

    def step(self, state: SudokuState, response: str) -> tuple[SudokuState, bool, float]:
        if state.done:
            raise ValueError(f"sudoku episode {state.problem.id} is over ({state.outcome}); reset it")
        n, sol = self.n, state.problem.meta["solution"]
        move = parse_move(response, self.move_format, n)
        end = lambda outcome, reward, grid=state.grid: (  # noqa: E731
            replace(state, grid=grid, turn=state.turn + 1, done=True, reward=reward, outcome=outcome),
            True, reward)
        if move is None:
            return end("malformed", 0.0)
        r, c, v = move
        i = (r - 1) * n + (c - 1)
        if state.grid[i] != ".":
            return end("filled", 0.0)
        if sol[i] != str(v):
            return end("wrong", 0.0)
        grid = state.grid[:i] + str(v) + state.grid[i + 1:]
        if "." not in grid:
            return end("solved", 1.0, grid)
        return replace(state, grid=grid, turn=state.turn + 1), False, 0.0

    # demonstrations -----------------------------------------------------------------------
    def demonstrations(self, n: int, noise: float, rng: np.random.Generator) -> list[tuple[str, str]]:
        """n (observation, move) rows from solution traces of pre-training-side puzzles (a pool
        of `demo_pool` puzzles, default 2048, drawn with repetition; each trace in a new random
        order of its blanks); a share `noise` of moves has a wrong value for the right cell."""
        pool = self.problems("pretrain", int(section_setting(self.spec, "$defs", "env_sudoku", "demo_pool")))
        if not pool:
            raise ValueError("sudoku.demonstrations: no pre-training-side puzzles; lower "
                             "critique.envs.sudoku.split's eval + rl below 1")
        rows: list[tuple[str, str]] = []
        while len(rows) < n:
            p = pool[int(rng.integers(len(pool)))]
            grid, sol = p.meta["puzzle"], p.meta["solution"]
            blanks = [i for i, x in enumerate(grid) if x == "."]
            for j in rng.permutation(len(blanks)):
                if len(rows) >= n:
                    break
                i = blanks[j]
                v = int(sol[i])
                shown = v % self.n + 1 if rng.random() < noise else v
                move = format_move(i // self.n + 1, i % self.n + 1, shown, self.move_format)
                rows.append((self.prompt_template.format(grid=self.render(grid)),
                             self.answer_template.format(move=move)))
                grid = grid[:i] + sol[i] + grid[i + 1:]
        return rows

    def state_info(self, state: SudokuState) -> dict[str, Any]:
        """What a log wants of a state: turn, done, reward, outcome, the grid."""
        return {"turn": state.turn, "done": state.done, "reward": state.reward,
                "outcome": state.outcome, "grid": render_compact(state.grid, self.n)}
