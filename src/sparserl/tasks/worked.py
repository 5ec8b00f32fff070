"""World 2.0: worked solutions with systematic, problem-dependent slips, so that
RL has something to unlearn beyond sharpening the start policy's mode.

A problem's *template* is its operator sequence and the kind of its first pitfall: `p` when
evaluating left to right would give another value than the usual precedence (`2 + 3 * 4`: 14,
left to right 20), else the flag of the first evaluation step that has one (`c` a carry out of the
units, `b` a borrow, `n` a negative result), else none: `+*:p`, `+-:c`, `-:`. Coarse on purpose:
a tiny policy sees each template often enough in pre-training to learn its slip. A hash of the template (with `tasks.world.salt`)
makes a share `slip_share` of the templates that admit a slip *slip templates*: in the
pre-training corpus, a share `slip_rate` of their worked solutions carry the template's one slip:
- `p`: the steps go left to right, ignoring precedence (2+3=5, 5*4=20);
- else at the first flagged step: a dropped carry (the step's result less 10), a forgotten borrow
  (plus 10) or a dropped minus sign (the absolute value); the later steps carry the wrong value on.
So the start policy's likeliest answer is wrong on every problem of those templates (the same slip
each time) while real mass stays on the right one. Other templates' worked solutions have the
final step off by one with probability `noise`, so sampling has spread everywhere.

The worked text shows each operation in evaluation order and ends in the answer template:
` 3*4=12, 2+12=14, so \\boxed{14}`. Gold answers are the usual-precedence value of the expression
(`value`), not reasoning-gym's `basic_arithmetic` answer, which evaluates left to right once the
expression is printed without its parentheses.
"""
from __future__ import annotations

import hashlib
import re

import numpy as np

from sparserl.core.config import ConfigError, schema_defaults

_TOKEN = re.compile(r"\s*(\d+|[-+*])")


def settings(tasks: dict) -> dict | None:
    """`tasks.world` over its schema defaults, or None (world 1). ConfigError for a bad value."""
    w = tasks.get("world")
    if w is None:
        return None
    if not isinstance(w, dict):
        raise ConfigError(f"tasks.world must be a mapping (slip_share, slip_rate, noise, salt), got {w!r}; "
                          "fix tasks.world in the config")
    defaults = schema_defaults("tasks", "world")  # the schema: slip_share, slip_rate, noise, salt
    unknown = sorted(set(w) - set(defaults))
    if unknown:
        raise ConfigError(f"tasks.world.{unknown[0]}: unknown key; remove it (allowed: "
                          f"{', '.join(sorted(defaults))})")
    out = {**defaults, **w}
    for k in ("slip_share", "slip_rate", "noise"):
        v = out[k]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v <= 1.0:
            raise ConfigError(f"tasks.world.{k} = {v!r}: must be a number in [0, 1]; fix tasks.world.{k}")
    if isinstance(out["salt"], bool) or not isinstance(out["salt"], int):
        raise ConfigError(f"tasks.world.salt = {out['salt']!r}: must be an integer; fix tasks.world.salt")
    return out


def parse(problem: str) -> tuple[list[int], list[str]]:
    """Terms and operators of `a op b op c ...` with op in + - * and non-negative integer terms."""
    toks = _TOKEN.findall(problem)
    if "".join(toks) != re.sub(r"\s+", "", problem) or len(toks) < 3 or len(toks) % 2 == 0:
        raise ValueError(f"world 2.0 worked solutions need 'a op b ...' with + - * and non-negative "
                         f"integers; got problem {problem!r} (use chain_sum or basic_arithmetic "
                         "without parentheses or negation)")
    terms, ops = [int(t) for t in toks[0::2]], toks[1::2]
    if any(not t.isdigit() for t in toks[0::2]) or any(o not in "+-*" for o in ops):
        raise ValueError(f"world 2.0: cannot read problem {problem!r} as 'a op b ...' (+ - *)")
    return terms, ops


def _apply(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b if op == "-" else a * b


def _flag(a: int, op: str, b: int, c: int) -> str:
    if op == "*":
        return ""
    if c < 0:
        return "n"
    if a >= 0 and b >= 0 and op == "+" and a % 10 + b % 10 >= 10:
        return "c"
    if a >= 0 and b >= 0 and op == "-" and a % 10 < b % 10:
        return "b"
    return ""


def _slipped(c: int, flag: str) -> int:
    return {"c": c - 10, "b": c + 10, "n": -c}[flag]


def steps(terms: list[int], ops: list[str], *, left_to_right: bool = False,
          slip_at: int | None = None) -> list[tuple[int, str, int, int]]:
    """(a, op, b, result) per operation in evaluation order: products first, left to right, then
    sums; `left_to_right` ignores precedence. `slip_at` (a step index) replaces that step's result
    by its slip (the step's flag must be set)."""
    vals, os_ = list(terms), list(ops)
    out: list[tuple[int, str, int, int]] = []
    while os_:
        i = 0 if left_to_right or "*" not in os_ else os_.index("*")
        a, op, b = vals[i], os_[i], vals[i + 1]
        c = _apply(a, op, b)
        if slip_at == len(out):
            c = _slipped(c, _flag(a, op, b, c))
        out.append((a, op, b, c))
        vals[i:i + 2] = [c]
        del os_[i]
    return out


def value(problem: str) -> int:
    terms, ops = parse(problem)
    return steps(terms, ops)[-1][3]


def template(problem: str) -> str:
    """Operators ':' first pitfall, e.g. '+*:p' for '2 + 3 * 4', '+:c' for '7 + 5', '-:' for '9 - 3'."""
    terms, ops = parse(problem)
    st = steps(terms, ops)
    if steps(terms, ops, left_to_right=True)[-1][3] != st[-1][3]:
        kind = "p"
    else:
        kind = next((f for f in (_flag(*s) for s in st) if f), "")
    return "".join(ops) + ":" + kind


def slip_kind(tmpl: str) -> str | None:
    """'p' (left to right) or 'c'/'b'/'n' (at the first flagged step), or None."""
    return tmpl.partition(":")[2] or None


def is_slip_template(tmpl: str, share: float, salt: int = 0) -> bool:
    """Whether a template that admits a slip is one of the `share` the hash chooses."""
    if slip_kind(tmpl) is None:
        return False
    h = int(hashlib.sha1(f"{salt}:{tmpl}".encode()).hexdigest()[:8], 16) % 10_000
    return h < share * 10_000


def slipped_steps(problem: str) -> list[tuple[int, str, int, int]]:
    """The steps carrying the problem's template slip (ValueError if its template has none)."""
    terms, ops = parse(problem)
    kind = slip_kind(template(problem))
    if kind is None:
        raise ValueError(f"template of {problem!r} admits no slip")
    if kind == "p":
        return steps(terms, ops, left_to_right=True)
    st = steps(terms, ops)
    first = next(i for i, (a, op, b, c) in enumerate(st) if _flag(a, op, b, c))
    return steps(terms, ops, slip_at=first)


def worked_text(st: list[tuple[int, str, int, int]], closing: str) -> str:
    """' 3*4=12, 2+12=14, so' + closing (the answer template of the final result)."""
    return " " + ", ".join(f"{a}{op}{b}={c}" for a, op, b, c in st) + ", so" + closing


def corpus_solution(problem: str, w: dict, rng: np.random.Generator,
                    fmt) -> tuple[str, str, bool, bool, str]:
    """(worked target text, its final answer, slipped, slip template, template) of one corpus row.
    `fmt(answer)` renders the answer template."""
    terms, ops = parse(problem)
    tmpl = template(problem)
    slip_t = is_slip_template(tmpl, w["slip_share"], w["salt"])
    st = steps(terms, ops)
    slipped = False
    if slip_t and rng.random() < w["slip_rate"]:
        st, slipped = slipped_steps(problem), True
    elif not slip_t and rng.random() < w["noise"]:
        a, op, b, c = st[-1]  # the last step off by one, the boxed answer with it
        st = st[:-1] + [(a, op, b, c + (1 if rng.random() < 0.5 else -1))]
    final = str(st[-1][3])
    return worked_text(st, fmt(final)), final, slipped, slip_t, tmpl
