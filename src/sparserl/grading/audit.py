"""Verifier audit: does each gold answer of a benchmark grade as it should?

For every gold of a benchmark, through one `Verifier` (its worker processes):

* **self-match** with the fast path off: the gold, boxed, must score 1 against itself through
  math-verify (or the exact rules of `sparserl.grading.golds`), not by string equality;
* **variants**: forms that are truly equal for *that* gold (`variants`) must score 1;
* **near misses**: answers that are truly different (`near_misses`) must score 0, except on
  golds reported as garbled.

`audit_benchmarks` returns one row per benchmark and the failures; `sparserl verifier-audit` prints
the table.  The goal is 100% self-match, >= 99% variant match, and no near miss scored 1 on a
gold that is not reported as garbled.
"""
from __future__ import annotations

import re
from decimal import Decimal
from fractions import Fraction
from typing import Any, Mapping, Sequence

from sparserl.grading import golds as G
from sparserl.grading.verifier import Verifier

#: Goals the audit checks (`meets_goal`).
GOAL_SELF = 1.0
GOAL_VARIANT = 0.99

_INT = re.compile(r"-?\d+", re.ASCII)
_THOUSANDS = re.compile(r"-?\d{1,3}(?:,\d{3})+", re.ASCII)
_DEC = re.compile(r"-?\d+\.\d+", re.ASCII)
_WHOLE_FRAC = re.compile(r"(-?)\\[dt]?frac\{(\d+)\}\{(\d+)\}", re.ASCII)
_DEGREE = re.compile(r"\^\s*\{?\\circ\}?")
_UNIT_TAIL = re.compile(r"\s*\\(?:text|mbox|textrm|mathrm)\s*\{[^{}]*\}(?:\^\{?\d+\}?)?\s*$")
_LAST_INT = re.compile(r"\d+(?!.*\d)", re.ASCII | re.DOTALL)
_NOT_A_VALUE = re.compile(r"=|<|>|\\le|\\ge|\\in|\\cup|\\text|\\mbox|,|\\infty|;")


def _top_level_split(s: str) -> list[str] | None:
    """Items of a comma list that is not inside brackets, or None."""
    parts, depth, cur = [], 0, ""
    for ch in s:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    parts = [p.strip() for p in parts]
    if len(parts) < 2 or not all(parts):
        return None
    if all(re.fullmatch(r"\d{3}", G.compact(p)) for p in parts[1:]):  # 10,\!080: thousands
        return None
    return parts


def _terminating_decimal(num: int, den: int) -> str | None:
    d = den
    for p in (2, 5):
        while d % p == 0:
            d //= p
    if d != 1:
        return None
    return format(Decimal(num) / Decimal(den), "f")


def _letters(s: str) -> bool:
    s = re.sub(r"\\[A-Za-z]+", "", s)
    return re.search(r"[A-Za-z]", s) is not None


def variants(gold: str) -> list[str]:
    """Forms truly equal to ``gold``: ``\\dfrac``/``\\frac``, ``a/b``, decimals, e notation vs
    ``\\times 10^{k}``, ``^\\circ``, ``\\text{}`` units, ``\\left``/``\\right``, reordered sets,
    thousands separators and ``x = v``.  Only the kinds that apply to this gold; never the gold."""
    g = gold.strip()
    c = G.compact(g)
    out: list[str] = []
    if _INT.fullmatch(c) or _THOUSANDS.fullmatch(c):
        n = int(c.replace(",", ""))
        if abs(n) >= 1000:
            out += [f"{n:,}", f"{n:,}".replace(",", "{,}")]
        out += [f"{n}.0", f"x = {n}"]
        return out
    if G.base_number(g) is not None:
        digits, base = c.split("_", 1)
        out.append(f"{digits}_{{{base.strip('{}')}}}" if "{" not in base else f"{digits}_{base[1:-1]}")
        return out
    if G.is_sci(g):
        m = re.fullmatch(r"([+-]?[\d.]+)[eE]([+-]?\d+)", c)
        mant, k = m.group(1), int(m.group(2))
        out += [f"{mant} \\times 10^{{{k}}}", f"{mant}E{k}", f"{mant} \\cdot 10^{{{k}}}"]
        if k >= 0:
            out.append(f"{mant}e+{k}")
        if abs(k) <= 12:
            out.append(format(G.sci_value(g), "f"))
        out.append(f"x = {mant}\\times10^{{{k}}}")
        return out
    m = re.fullmatch(r"([+-]?[\d.]+)\\(?:times|cdot)10\^\{?([+-]?\d+)\}?", c)
    if m:  # 4.5\times10^{33} -> 4.5e33
        out.append(f"{m.group(1)}e{int(m.group(2))}")
    if _DEC.fullmatch(c):
        f = Fraction(Decimal(c))
        sign = "-" if f < 0 else ""
        out += [f"{sign}\\frac{{{abs(f.numerator)}}}{{{f.denominator}}}", f"{f.numerator}/{f.denominator}"]
    m = _WHOLE_FRAC.fullmatch(c)
    if m:
        sign, a, b = m.group(1), int(m.group(2)), int(m.group(3))
        out.append(f"{sign}{a}/{b}")
        dec = _terminating_decimal(a, b) if b else None
        if dec is not None:
            out.append(sign + dec)
    if "\\dfrac" in g:
        out.append(g.replace("\\dfrac", "\\frac"))
    elif "\\frac" in g:
        out.append(g.replace("\\frac", "\\dfrac"))
    if _DEGREE.search(g):
        form = "^{\\circ}" if "^\\circ" in g else "^\\circ"
        out.append(_DEGREE.sub(lambda _: form, g))
        out.append(_DEGREE.sub("", g).strip())
    if G.unit_suffix(g) is not None:
        out.append(_UNIT_TAIL.sub("", g).strip())
        swapped = re.sub(r"\\mbox\{", r"\\text{", g) if "\\mbox" in g else \
            re.sub(r"\\text\{", r"\\mbox{", g)
        out.append(swapped)
    if "\\left" in g:
        out.append(re.sub(r"\\(?:left|right)(?![A-Za-z])\s*", "", g))
    elif re.fullmatch(r"\(.*\)", g) and _top_level_split(g[1:-1]) and "(" not in g[1:-1]:
        out.append("\\left" + g[:-1] + "\\right)")
    items = _top_level_split(g)
    if items is None and re.fullmatch(r"\\\{.*\\\}", g):
        inner = _top_level_split(g[2:-2])
        if inner:
            out.append("\\{" + ", ".join(reversed(inner)) + "\\}")
    elif items is not None and not _letters(c):
        # Numeric lists are solution sets; a list with symbols may be ordered (E_1, E_2).
        out.append(", ".join(reversed(items)))
    if not _letters(c) and not _NOT_A_VALUE.search(g):
        out.append(f"x = {g}")
    return [v for v in dict.fromkeys(out) if v and G.compact(v) != c]


def near_misses(gold: str) -> list[str]:
    """Answers truly different from ``gold``: another base (and the bare digits) for a based
    number, another power of a text unit, else the last integer + 1."""
    g = gold.strip()
    base = G.base_number(g)
    if base is not None:
        digits = G.compact(g).split("_", 1)[0]
        return [f"{digits}_{{{base[0] + 1}}}", digits]
    out = []
    u = G.unit_suffix(g)
    if u is not None:
        tail = _UNIT_TAIL.search(g)
        unit = re.sub(r"\^\{?\d+\}?\s*$", "", tail.group(0))
        out.append(g[:tail.start()] + unit + f"^{u[1] + 1}")
    m = _LAST_INT.search(g)
    if m:
        out.append(g[:m.start()] + str(int(m.group(0)) + 1) + g[m.end():])
    return out


def _boxed(answers: Sequence[str]) -> list[str]:
    return ["The answer is $\\boxed{" + a + "}$." for a in answers]


def audit_golds(name: str, golds: Sequence[Any], verifier: Verifier) -> dict:
    """One benchmark's audit row, with its failures and garbled golds."""
    golds = [str(g).strip() for g in golds]
    counts0 = verifier.timeout_counts()
    garbled = verifier.check_golds(golds)
    garbled_idx = {g["index"] for g in garbled}

    verifier.fast_path = False
    try:
        self_scores = verifier.score(_boxed(golds), golds)
    finally:
        verifier.fast_path = True
    var = [(i, v) for i, g in enumerate(golds) for v in variants(g)]
    miss = [(i, v) for i, g in enumerate(golds) for v in near_misses(g)]
    var_scores = verifier.score(_boxed([v for _, v in var]), [golds[i] for i, _ in var])
    miss_scores = verifier.score(_boxed([v for _, v in miss]), [golds[i] for i, _ in miss])
    counts1 = verifier.timeout_counts()

    fp = [(i, v) for (i, v), s in zip(miss, miss_scores) if s == 1.0]
    return {
        "benchmark": name,
        "golds": len(golds),
        "self_match": float(self_scores.mean()) if len(golds) else 1.0,
        "variants": len(var),
        "variant_match": float(var_scores.mean()) if var else 1.0,
        "near_misses": len(miss),
        "near_miss_scored_1": len(fp),
        "near_miss_fp_not_garbled": sum(i not in garbled_idx for i, _ in fp),
        "garbled": len(garbled),
        "timeouts": counts1["timeouts"] - counts0["timeouts"],
        "garbled_golds": [dict(g, benchmark=name) for g in garbled],
        "failures": (
            [{"kind": "self", "gold": golds[i], "answer": golds[i]}
             for i, s in enumerate(self_scores) if s != 1.0]
            + [{"kind": "variant", "gold": golds[i], "answer": v}
               for (i, v), s in zip(var, var_scores) if s != 1.0]
            + [{"kind": "near_miss", "gold": golds[i], "answer": v, "garbled": i in garbled_idx}
               for i, v in fp]),
    }


def audit_benchmarks(benchmarks: Mapping[str, Sequence[Any]], workers: int = 2,
                     timeout_s: float = 5.0) -> list[dict]:
    """`audit_golds` for each benchmark (name -> gold answers), sharing one verifier pool."""
    with Verifier(workers=workers, timeout_s=timeout_s) as v:
        return [audit_golds(name, golds, v) for name, golds in benchmarks.items()]


def meets_goal(row: dict) -> bool:
    """100% self-match, >= 99% variant match, no near miss scored 1 on a non-garbled gold."""
    return (row["self_match"] >= GOAL_SELF and row["variant_match"] >= GOAL_VARIANT
            and row["near_miss_fp_not_garbled"] == 0)


def format_table(rows: Sequence[dict]) -> str:
    """The audit as a Markdown table, one line per benchmark."""
    head = ("| benchmark | golds | self-match (fast path off) | variants | variant match | "
            "near misses | near misses scored 1 | garbled | timeouts | goal |")
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        lines.append(
            f"| {r['benchmark']} | {r['golds']} | {100 * r['self_match']:.1f}% | {r['variants']} | "
            f"{100 * r['variant_match']:.1f}% | {r['near_misses']} | "
            f"{r['near_miss_scored_1']} ({r['near_miss_fp_not_garbled']} not garbled) | "
            f"{r['garbled']} | {r['timeouts']} | {'met' if meets_goal(r) else 'MISSED'} |")
    return "\n".join(lines)


__all__ = ["GOAL_SELF", "GOAL_VARIANT", "audit_benchmarks", "audit_golds", "format_table",
           "meets_goal", "near_misses", "variants"]
