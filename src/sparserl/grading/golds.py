"""Answer forms that math-verify gets wrong, decided or rewritten before it sees them.

Pure string work (no sympy, no signals), so it runs in the calling process:

* **Lookalike digits**: answers are NFKC-normalised (fullwidth ``３`` -> ``3``); a digit that is
  still not ASCII (Arabic-Indic ``٣``) is not a digit, on every path.
* **Scientific notation**: math-verify reads ``4.5e33`` as 4.5·e·33 (e = Euler's number).  A gold
  in e notation is compared exactly as a decimal number with a plain-number answer (``4.5E33``,
  ``4.5e+33``, ``4.5 \\times 10^{33}``, ``0.00001``), and rewritten as ``\\times 10^{k}`` for
  math-verify otherwise.
* **Number bases**: math-verify drops ``_8`` from ``52_8``; a gold with a base subscript is
  matched only by the same value written in the same base.
* **Units**: math-verify drops ``\\text{...}^2``; when gold and answer both carry a text unit,
  its words and power must agree (``inches^2`` is not ``inches^3``).
* **Garbled golds** (`garbled_reason`): a gold whose parse keeps far less than its text, or that
  a trivial answer satisfies although it is symbolic.  Such golds are graded by `loose_form`
  string match instead of their parse.
"""
from __future__ import annotations

import re
import unicodedata
from decimal import Decimal, InvalidOperation

# Single-letter "units" math-verify strips from the end of an answer that are far more often a
# variable or constant (c, h: speed of light, Planck; t, d, l: time, distance, length).
VARIABLE_LETTERS_NOT_UNITS = ("c", "h", "t", "d", "l")
#: Answers a garbled gold is tested against.
TRIVIAL_ANSWERS = ("0", "1", "2")

_NUM = r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)"
_SCI_RE = re.compile(rf"({_NUM})[eE]([+-]?\d+)", re.ASCII)
_TIMES10_RE = re.compile(rf"(?:({_NUM})(?:\\times|\\cdot|\*|×))?10\^(?:\{{([+-]?\d+)\}}|([+-]?\d))",
                         re.ASCII)
_THOUSANDS_NUM_RE = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?", re.ASCII)
_BASE_RE = re.compile(r"([0-9A-Za-z]+)_(?:\{\(?(\d{1,2})\)?\}|(\d))", re.ASCII)
_UNIT_RE = re.compile(r"\\(?:text|mbox|textrm|mathrm)\{([^{}]*)\}(?:\^\{?(\d+)\}?)?$")
# \text{...} words and \begin{pmatrix} environment names are not math content.
_TEXT_GROUP_RE = re.compile(r"\\(?:text|mbox|textrm|mathrm|operatorname|begin|end)\s*\{[^{}]*\}")
_COMMAND_RE = re.compile(r"\\[A-Za-z]+")
_SYMPY_WORD_RE = re.compile(r"[A-Za-z_]{2,}")
_LHS_RE = re.compile(r"^[^=<>]{1,12}=(?!=)")


def nfkc(s: str) -> str:
    """The one rule for lookalike characters: NFKC (fullwidth digits and letters become ASCII).
    Other scripts' digits stay as they are, and the ASCII-only numeric patterns reject them."""
    return unicodedata.normalize("NFKC", s) if not s.isascii() else s


def compact(s: str) -> str:
    """No spaces, $ or trailing period; ``\\!``/``\\,`` and ``{,}`` separators removed."""
    s = s.strip().strip("$").strip()
    s = s.replace("\\!", "").replace("\\,", "").replace("{,}", ",")
    s = "".join(s.split())
    s = s.rstrip(".")
    if s.startswith("\\text{") and s.endswith("}") and s.count("{") == 1:
        s = s[6:-1]
    return s


def loose_form(s: str) -> str:
    """Normalised string for golds graded by string match: `compact`, ``\\dfrac`` -> ``\\frac``,
    no ``\\left``/``\\right``, no spacing commands or ``\\text`` wrappers."""
    s = compact(nfkc(s))
    s = re.sub(r"\\[dt]frac", r"\\frac", s)
    s = re.sub(r"\\(?:left|right)(?![A-Za-z])", "", s)
    s = re.sub(r"\\[;:]|~|\\quad|\\qquad", "", s)
    s = re.sub(r"\\(?:text|mbox|textrm|mathrm)\{([^{}]*)\}", r"\1", s)
    return s.lower()


# ----------------------------------------------------------------------------- numbers

def sci_value(s: str) -> Decimal | None:
    """Exact value of a plain number in any of the forms a scientific answer takes: ``4.5e33``,
    ``4.5E+33``, ``4.5\\times10^{33}``, ``10^{-5}``, ``0.00001``, ``12,000``; else None."""
    s = compact(s)
    m = _SCI_RE.fullmatch(s)
    try:
        if m:
            return Decimal(m.group(1)) * Decimal(10) ** int(m.group(2))
        m = _TIMES10_RE.fullmatch(s)
        if m:
            mant = Decimal(m.group(1)) if m.group(1) else Decimal(1)
            return mant * Decimal(10) ** int(m.group(2) or m.group(3))
        if _THOUSANDS_NUM_RE.fullmatch(s):
            s = s.replace(",", "")
        if re.fullmatch(_NUM, s, re.ASCII):
            return Decimal(s)
    except (InvalidOperation, ValueError, OverflowError):
        return None
    return None


def is_sci(s: str) -> bool:
    """A plain number in e notation (``4.5e33``, ``1e-5``)."""
    return _SCI_RE.fullmatch(compact(s)) is not None


def sci_to_latex(s: str) -> str:
    """``4.5e33`` -> ``4.5\\times10^{33}`` (what math-verify reads as intended); other text as is."""
    m = _SCI_RE.fullmatch(compact(s))
    return f"{m.group(1)}\\times10^{{{int(m.group(2))}}}" if m else s


def base_number(s: str) -> tuple[int, int] | None:
    """(base, value) of ``52_8`` / ``4210_{5}`` / ``A3_{16}``, or None (also for digits that are
    not valid in that base)."""
    m = _BASE_RE.fullmatch(compact(s))
    if not m:
        return None
    base = int(m.group(2) or m.group(3))
    if not 2 <= base <= 36:
        return None
    try:
        return base, int(m.group(1), base)
    except ValueError:
        return None


def unit_suffix(s: str) -> tuple[str, int] | None:
    """(unit words, power) of a trailing ``\\text{ inches}^2`` / ``\\mbox{cm}``; None if none."""
    m = _UNIT_RE.search(compact(s))
    if not m:
        return None
    words = re.sub(r"[^a-z]", "", m.group(1).lower())
    if not words:
        return None
    words = re.sub(r"(?:es|s)$", "", words) or words  # inch/inches, cent/cents
    return words, int(m.group(2) or 1)


def structural_compare(pred: str, gold: str) -> bool | None:
    """Decide the forms math-verify gets wrong (True/False), or None to leave it to math-verify."""
    gb = base_number(gold)
    if gb is not None:
        return base_number(pred) == gb  # a bare 52 or 52_9 is not 52_8
    if is_sci(gold):
        pv = sci_value(pred)
        if pv is not None:
            return pv == sci_value(gold)
    gu = unit_suffix(gold)
    if gu is not None:
        pu = unit_suffix(pred)
        if pu is not None and pu != gu:
            return False
    return None


def to_math_verify(pred: str, gold: str) -> tuple[str, str]:
    """(pred, gold) as math-verify should see them: e notation written as ``\\times 10^{k}``.
    Integer golds are left alone, so integer grading (the tiny world's) is unchanged."""
    if is_sci(gold):
        gold = sci_to_latex(gold)
    if is_sci(pred) and not re.fullmatch(r"[+-]?\d+", compact(gold), re.ASCII):
        pred = sci_to_latex(pred)
    return pred, gold


# ----------------------------------------------------------------------------- garbled golds

def _text_content(gold: str) -> tuple[int, bool]:
    """(number of letters and digits that carry math, whether any letter does)."""
    s = _TEXT_GROUP_RE.sub("", gold)
    s = _COMMAND_RE.sub("", s)
    return sum(c.isascii() and c.isalnum() for c in s), bool(re.search(r"[A-Za-z]", s))


def _parse_content(parsed_str: str) -> int:
    s = _SYMPY_WORD_RE.sub("", parsed_str)  # sqrt, pi, Eq, Interval: names, not content
    return sum(c.isascii() and c.isalnum() for c in s)


def garbled_reason(gold: str, parsed_str: str, trivial_hits: list[str]) -> str | None:
    """Why a gold is garbled, or None.

    ``parsed_str`` is the sympy text of the gold's parse; ``trivial_hits`` the trivial answers
    (`TRIVIAL_ANSWERS`) that math-verify says equal the gold.  Garbled: the parse keeps under a
    third of the gold's letters and digits although the gold has letters (words or variables were
    thrown away), or a trivial answer satisfies a gold that is symbolic after its ``x =`` part.
    """
    n_text, has_letters = _text_content(gold)
    n_parse = _parse_content(parsed_str)
    if has_letters and n_text >= 4 and 3 * n_parse < n_text:
        return f"parse {parsed_str!r} keeps {n_parse} of the gold's {n_text} letters and digits"
    if trivial_hits:
        rhs = _LHS_RE.sub("", compact(gold), count=1)
        if _text_content(rhs)[1]:
            return f"the trivial answer {trivial_hits[0]} satisfies it (parse {parsed_str!r})"
    return None


def patch_math_verify_units() -> None:
    """Stop math-verify from dropping a trailing single-letter variable (``\\frac{1}{\\sqrt{2}}c``)
    as a unit; real units (``6m``, ``\\frac{37}{4} m``, ``\\text{ cm}``) are still dropped.
    Called once in each verifier worker, before its first parse."""
    from latex2sympy2_extended import math_normalization as mn

    keep = [u for u in mn.units if u.strip() not in VARIABLE_LETTERS_NOT_UNITS]
    pattern = f"(?:{'|'.join(keep)})(?:s|es)?"
    mn.units_regex = re.compile(f"(\\d|\\}}|\\s)\\s*(?:{pattern})\\s*$")


__all__ = [
    "TRIVIAL_ANSWERS", "VARIABLE_LETTERS_NOT_UNITS", "base_number", "compact", "garbled_reason",
    "is_sci", "loose_form", "nfkc", "patch_math_verify_units", "sci_to_latex", "sci_value",
    "structural_compare", "to_math_verify", "unit_suffix",
]
