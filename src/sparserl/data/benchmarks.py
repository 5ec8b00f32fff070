"""Loaders for the paper's math benchmarks and training pool, normalised to one record schema.

Every loader returns a pandas DataFrame with exactly the columns of `RECORD_COLUMNS`:

* ``id``      str, unique within the table: ``"<source>/<the file's own id>"`` (``id``,
  ``unique_id``, ``idx``, ``problem_idx`` or ``extra_info.index``), else ``"<source>/<row index>"``.
* ``problem`` str, the problem statement as given (no prompt template).
* ``answer``  str, the gold answer: stripped; integral floats and zero-padded integers written as
  plain integers (``27.0`` -> ``"27"``, ``"025"`` -> ``"25"``); surrounding ``$...$`` removed;
  a list of answers joined with ``", "``.
* ``source``  str, the benchmark name (a key of `BENCHMARKS`).

The source files disagree on field names (``problem``/``question``, ``answer``/``final_answer``,
no answer at all for Minerva, chat-formatted prompts for DAPO); each benchmark has a small spec
below that says where to look.  Local files may be JSON lines or parquet, in the original schema
or already normalised (as `sparserl.data.download` writes them).  A row that cannot be read raises
ValueError naming the file, the line (or parquet row), the field and the fix.

Files may be JSON lines, a JSON array (``.json``) or parquet; a folder may hold the benchmark's file
or the math-evaluation-harness layout ``<folder>/<name>/test.jsonl``.  What a load did besides
reading rows (duplicates dropped, gold conflicts and how they were resolved, garbled golds once
`check_golds` ran) is in ``df.attrs["load_info"]``, which the data stage writes to the manifest.
"""
from __future__ import annotations

import json
import math
import os
import re
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import pandas as pd

from sparserl.core.records import RECORD_COLUMNS
from sparserl.grading.verifier import extract_boxed


#: name -> default file name (in the shared benchmark folder or a download folder).
BENCHMARKS: dict[str, str] = {
    "math500": "math500.jsonl",
    "aime24": "aime24.jsonl",
    "aime25": "aime25.jsonl",
    "amc23": "amc23.jsonl",
    "minerva_math": "minerva_math.jsonl",
    "olympiadbench": "olympiadbench.jsonl",
    "hmmt_feb_2025": "hmmt_feb_2025.parquet",
    "dapo_math_17k": "dapo_math_17k.parquet",
}
#: The six evaluation benchmarks of the V0.5 / BASIS papers (the files in shared/data/benchmarks).
PAPER_BENCHMARKS = ("math500", "aime24", "aime25", "amc23", "minerva_math", "olympiadbench")
#: Training pool(s), not evaluation sets.
TRAIN_SETS = ("dapo_math_17k",)

# DAPO-Math-17k wraps each problem in this instruction; the record keeps the bare problem.
DAPO_PREFIX = ("Solve the following math problem step by step. The last line of your response "
               "should be of the form Answer: $Answer (without quotes) where $Answer is the "
               "answer to the problem.\n\n")
DAPO_SUFFIX = '\n\nRemember to put your answer on its own line after "Answer:".'

_ID_KEYS = ("id", "unique_id", "idx", "problem_idx")
_PLAIN_INT = re.compile(r"[+-]?\d{1,60}")
_BARE_DOLLAR = re.compile(r"(?<!\\)\$")
# Minerva solutions box long expressions; allow more than the verifier's response cap.
_GOLD_BOXED_MAX = 4096
# Files of the math-evaluation-harness layout: data/<name>/test.jsonl.
_HARNESS_FILES = ("test.jsonl", "test.json", "test.parquet")
#: What de-duplication does with one problem text that carries different golds.
CONFLICT_POLICY = ("keep the majority gold (the first row carrying it); drop the problem when "
                   "the most common golds tie")


class _Row:
    """One input row and where it came from, for error messages."""

    __slots__ = ("rec", "where", "index")

    def __init__(self, rec: dict, where: str, index: int):
        self.rec, self.where, self.index = rec, where, index

    def fail(self, field: str, what: str, fix: str) -> ValueError:
        return ValueError(f"{self.where}: field {field!r} {what}; {fix}")


# ----------------------------------------------------------------------------- value cleaning

def clean_answer(value: Any) -> str:
    """Canonical answer string ("" when there is none).

    Integral floats -> integer text (amc23 stores 27.0); zero-padded integers -> plain (AIME
    "025"); one pair of surrounding ``$`` (or ``$$``) delimiters removed, and ``$69$,$84$`` ->
    ``69,84``; lists -> the cleaned items joined with ", ".
    """
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return ""
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, (list, tuple)):
        parts = [clean_answer(v) for v in value]
        return ", ".join(p for p in parts if p)
    if hasattr(value, "tolist"):  # numpy array from parquet
        return clean_answer(value.tolist())
    s = str(value).strip()
    if s.startswith("$") and s.endswith("$."):  # a sentence period after the math
        s = s[:-1]
    if len(s) >= 2 and s.startswith("$") and s.endswith("$"):
        # Every $ is a math delimiter here ($a$,$b$ lists); answers contain no literal dollars.
        s = s.replace("$", "").strip()
    if _PLAIN_INT.fullmatch(s):
        s = str(int(s))
    else:
        try:  # "27.0" as text
            f = float(s)
            if f.is_integer() and abs(f) < 1e15 and re.fullmatch(r"[+-]?\d+\.0*", s):
                s = str(int(f))
        except ValueError:
            pass
    return s


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and not math.isfinite(value):
        return ""
    return str(value).strip()


def _first(rec: dict, keys: Iterable[str]) -> tuple[str | None, Any]:
    for k in keys:
        if k in rec and rec[k] is not None and _text(rec[k]) != "":
            return k, rec[k]
    return None, None


# ----------------------------------------------------------------------------- per-benchmark specs
# Each spec maps one input row to (own_id or None, problem, answer) or raises via row.fail.

def _problem(row: _Row, keys=("problem", "question")) -> str:
    _, v = _first(row.rec, keys)
    p = _text(v)
    if not p:
        raise row.fail(keys[0], "is missing or empty",
                       f"give the row a non-empty {' or '.join(map(repr, keys))}, or delete it")
    return p


def _own_id(row: _Row, keys=_ID_KEYS) -> str | None:
    _, v = _first(row.rec, keys)
    if v is None:
        return None
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    return _text(v)


def _check_gold_type(row: _Row, field: str, value: Any) -> None:
    """Golds are strings or numbers (a list of them for multi-answer rows); anything else would be
    stored as its Python repr ("{'value': 2}", "True")."""
    items = value.tolist() if hasattr(value, "tolist") and not isinstance(value, str) else value
    listed = isinstance(items, (list, tuple))
    items = items if listed else [items]
    for v in items:
        if isinstance(v, float) and not math.isfinite(v):  # NaN in the file is not a missing gold
            raise row.fail(field, f"is {_short_repr(value)}, not a gold answer" if not listed else
                           f"holds {v!r} ({_short_repr(items)}), not a gold answer",
                           "write the gold as a string or a finite number, or delete the row")
        if v is None and listed:  # [1, null] would silently grade as "1"
            raise row.fail(field, f"holds a null item ({_short_repr(items)})",
                           "remove the null from the list or give its answer, or delete the row")
        if v is None or (isinstance(v, (str, int, float)) and not isinstance(v, bool)):
            continue
        raise row.fail(field, f"is a {type(v).__name__} ({_short_repr(v)}), not a gold answer",
                       "write the gold as a string or a number (a list of them for several answers)")


def _short_repr(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."


def _clean_gold(row: _Row, field: str, value: Any) -> str:
    _check_gold_type(row, field, value)
    try:
        return clean_answer(value)
    except ValueError as e:  # an integer too long to print (over 4300 digits)
        raise row.fail(field, f"cannot be read as a gold answer ({e})",
                       "write a huge number as a string, or delete the row") from None


def _answer(row: _Row, keys=("answer",)) -> str:
    k, v = _first(row.rec, keys)
    if k is None:  # _first skips NaN as empty: name it rather than call it missing
        k = next((key for key in keys if isinstance(row.rec.get(key), float)), None)
        v = row.rec.get(k) if k else None
    a = _clean_gold(row, k or keys[0], v)
    if not a:
        raise row.fail(keys[0], "is missing or empty",
                       f"put the gold answer in {keys[0]!r} (a non-empty string), "
                       "or delete the row")
    return a


def _spec_plain(row: _Row) -> tuple[str | None, str, str]:
    return _own_id(row), _problem(row), _answer(row)


def _spec_aime24(row: _Row) -> tuple[str | None, str, str]:
    # Some hub copies keep the answer only as \boxed{} in `solution`.
    if _first(row.rec, ("answer",))[0] is None and isinstance(row.rec.get("solution"), str):
        boxed = extract_boxed(row.rec["solution"], max_len=_GOLD_BOXED_MAX, scan_tail=10 ** 9)
        if boxed:
            return _own_id(row), _problem(row), _clean_gold(row, "solution", boxed)
    return _spec_plain(row)


def _spec_minerva(row: _Row) -> tuple[str | None, str, str]:
    if _first(row.rec, ("answer",))[0] is not None:  # hub copy (math-ai/minervamath)
        return _own_id(row), _problem(row), _answer(row)
    sol = row.rec.get("solution")
    if not isinstance(sol, str) or not sol.strip():
        raise row.fail("solution", "is missing (and there is no 'answer')",
                       "give the row an 'answer', or a 'solution' ending in \\boxed{answer}")
    boxed = extract_boxed(sol, max_len=_GOLD_BOXED_MAX, scan_tail=10 ** 9)
    if not boxed:
        raise row.fail("solution", "has no complete \\boxed{...} to take the answer from",
                       "add \\boxed{answer} to the solution or an 'answer' field to the row")
    # A bare $ inside \boxed{} is a delimiter slip in the source (one Minerva row has "+$ $").
    return _own_id(row), _problem(row), clean_answer(_BARE_DOLLAR.sub("", boxed))


def _spec_olympiad(row: _Row) -> tuple[str | None, str, str]:
    problem = _problem(row, ("question", "problem"))
    ctx = _text(row.rec.get("context"))
    if ctx:
        problem = ctx + "\n\n" + problem
    return _own_id(row), problem, _answer(row, ("final_answer", "answer"))


def _spec_dapo(row: _Row) -> tuple[str | None, str, str]:
    rec = row.rec
    prompt = rec.get("prompt")
    if hasattr(prompt, "tolist"):
        prompt = prompt.tolist()
    if isinstance(prompt, (list, tuple)):
        users = [m.get("content") for m in prompt if isinstance(m, dict)
                 and m.get("role", "user") == "user"]
        text = _text(users[-1]) if users else ""
        if not text:
            raise row.fail("prompt", "has no user message with content",
                           "use the hub schema: prompt = [{'role': 'user', 'content': ...}]")
        problem = text
    elif isinstance(prompt, str) and prompt.strip():
        problem = prompt.strip()
    else:
        problem = _problem(row)
    if problem.startswith(DAPO_PREFIX.strip()):
        problem = problem[len(DAPO_PREFIX.strip()):]
    if problem.endswith(DAPO_SUFFIX.strip()):
        problem = problem[: -len(DAPO_SUFFIX.strip())]
    problem = problem.strip()
    if not problem:
        raise row.fail("prompt", "is empty once the DAPO instruction is removed",
                       "delete the row")
    rm = rec.get("reward_model")
    gt = rm.get("ground_truth") if isinstance(rm, dict) else None
    answer = _clean_gold(row, "reward_model.ground_truth", gt)
    if not answer:
        k, v = _first(rec, ("answer", "solution"))
        answer = _clean_gold(row, k or "answer", v)
    if not answer:
        raise row.fail("reward_model.ground_truth", "is missing or empty",
                       "give the row reward_model = {'ground_truth': <answer>}, or delete it")
    extra = rec.get("extra_info")
    own = None
    if isinstance(extra, dict) and extra.get("index") is not None:
        own = _text(extra["index"])
    if own is None:
        own = _own_id(row)
    return own, problem, answer


def _spec_hmmt(row: _Row) -> tuple[str | None, str, str]:
    return _own_id(row, ("problem_idx", "id", "idx")), _problem(row), _answer(row)


_SPECS: dict[str, Callable[[_Row], tuple[str | None, str, str]]] = {
    "math500": _spec_plain,
    "aime24": _spec_aime24,
    "aime25": _spec_plain,
    "amc23": _spec_plain,
    "minerva_math": _spec_minerva,
    "olympiadbench": _spec_olympiad,
    "hmmt_feb_2025": _spec_hmmt,
    "dapo_math_17k": _spec_dapo,
}
assert set(_SPECS) == set(BENCHMARKS)


# ----------------------------------------------------------------------------- reading

def _check_name(name: str) -> None:
    if name not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {name!r}; known: {', '.join(sorted(BENCHMARKS))}")


def _not_utf8(path: Path, lineno: int, byte: int, column: int) -> ValueError:
    return ValueError(f"{path}:{lineno}: byte {byte:#04x} at column {column} is not UTF-8; "
                      "re-save the file as UTF-8 (e.g. iconv -f latin1 -t utf-8) or fix that line")


def _decode(path: Path, data: bytes, lineno: int) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _not_utf8(path, lineno, data[e.start], e.start + 1) from None


def _json_value(path: Path, where: str, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{where}: not valid JSON ({e.msg}); fix or delete that line") from None
    except ValueError as e:  # an integer of more than 4300 digits
        raise ValueError(f"{where}: {e.args[0].split(';')[0]}; write such a number as a string "
                         "(in quotes), or delete that line") from None


def _iter_jsonl(path: Path) -> Iterator[tuple[str, dict]]:
    with open(path, "rb") as f:  # bytes, so a bad byte is reported with its line
        for lineno, raw in enumerate(f, 1):
            line = _decode(path, raw, lineno)
            if not line.strip():
                continue
            rec = _json_value(path, f"{path}:{lineno}", line)
            if not isinstance(rec, dict):
                raise ValueError(f"{path}:{lineno}: expected a JSON object, got "
                                 f"{type(rec).__name__}; one object per line")
            yield f"{path}:{lineno}", rec


def _iter_json_array(path: Path) -> Iterator[tuple[str, dict]]:
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line_start = raw.rfind(b"\n", 0, e.start) + 1
        raise _not_utf8(path, raw.count(b"\n", 0, e.start) + 1, raw[e.start],
                        e.start - line_start + 1) from None
    data = _json_value(path, str(path), text)
    if isinstance(data, dict) and isinstance(data.get("data"), list):
        data = data["data"]  # {"data": [...]} wrappers of some releases
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a JSON array of objects, got {type(data).__name__}; "
                         "use a JSON array, or JSON lines (.jsonl)")
    for i, rec in enumerate(data, 1):
        if not isinstance(rec, dict):
            raise ValueError(f"{path}: item {i}: expected a JSON object, got "
                             f"{type(rec).__name__}")
        yield f"{path}: item {i}", rec


def iter_rows(path: str | os.PathLike) -> Iterator[tuple[str, dict]]:
    """(location, record) of each row of a .jsonl, .json (array) or .parquet file; location is
    ``file:line`` for JSON lines, ``file: item N`` for a JSON array and ``file: row N``
    (1-based) for parquet."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: benchmark file not found")
    suffix = "".join(path.suffixes[-1:]).lower()
    if suffix == ".jsonl":
        yield from _iter_jsonl(path)
    elif suffix == ".json":
        yield from _iter_json_array(path)
    elif suffix == ".parquet":
        import pyarrow.parquet as pq

        for i, rec in enumerate(pq.read_table(path).to_pylist(), 1):
            yield f"{path}: row {i}", rec
    else:
        raise ValueError(f"{path}: unsupported benchmark file type {path.suffix!r}; "
                         "use .jsonl, .json or .parquet")


def normalise_records(name: str, rows: Iterable[tuple[str, dict]], *,
                      origin: str | None = None, dedup_problems: bool = False) -> pd.DataFrame:
    """Normalise (location, record) pairs of benchmark ``name`` into the record schema.

    Rows already in the record schema (with ``source == name``) pass through unchanged, so a
    normalised parquet reloads to the same table.  ``dedup_problems`` keeps one row per distinct
    problem text (the hub DAPO-Math-17k repeats each prompt many times); where the copies carry
    different golds, `CONFLICT_POLICY` applies and ``df.attrs["load_info"]`` counts them.
    """
    _check_name(name)
    spec = _SPECS[name]
    parsed = []
    for index, (where, rec) in enumerate(rows):
        row = _Row(rec, where, index)
        if rec.get("source") == name and all(k in rec for k in RECORD_COLUMNS):
            rid = _text(rec["id"])
            problem, answer = _problem(row, ("problem",)), _answer(row)
            if not rid:
                raise row.fail("id", "is empty", "give every normalised row a non-empty id")
        else:
            own, problem, answer = spec(row)
            rid = f"{name}/{own if own not in (None, '') else index}"
        parsed.append((row, rid, problem, answer))
    info: dict[str, Any] = {"rows_read": len(parsed)}
    if dedup_problems:
        parsed, info_dedup = _dedup(parsed)
        info.update(info_dedup)
    ids, problems, answers = [], [], []
    where_of_id: dict[str, str] = {}
    for row, rid, problem, answer in parsed:
        if rid in where_of_id:
            raise row.fail("id", f"repeats id {rid!r} (first at {where_of_id[rid]})",
                           "make the ids unique or drop the duplicate row")
        where_of_id[rid] = row.where
        ids.append(rid)
        problems.append(problem)
        answers.append(answer)
    if not ids:
        raise ValueError(f"{origin or name}: no rows; expected the {name} benchmark")
    df = pd.DataFrame({"id": ids, "problem": problems, "answer": answers,
                       "source": [name] * len(ids)}, columns=list(RECORD_COLUMNS))
    df.attrs["load_info"] = info
    return df


def _dedup(parsed: list) -> tuple[list, dict]:
    """One row per problem text.  Copies that agree: the first is kept.  Copies whose golds differ
    (DAPO-Math-17k has such, e.g. 6 vs 64): `CONFLICT_POLICY`."""
    groups: dict[str, list] = {}
    for item in parsed:
        groups.setdefault(item[2], []).append(item)
    kept, conflicts, dropped = [], [], 0
    for problem, items in groups.items():
        counts = Counter(it[3] for it in items).most_common()
        if len(counts) > 1:
            tie = counts[0][1] == counts[1][1]
            conflicts.append({"row": items[0][0].where, "golds": dict(counts),
                              "kept": None if tie else counts[0][0]})
            if tie:
                dropped += 1
                continue
        gold = counts[0][0]
        kept.append(next(it for it in items if it[3] == gold))
    order = {id(it): k for k, it in enumerate(parsed)}
    kept.sort(key=lambda it: order[id(it)])
    # conflicts: problems whose copies disagree; dropped: those with a tie, gone entirely.
    return kept, {"duplicate_rows_dropped": len(parsed) - len(groups),
                  "gold_conflicts": len(conflicts), "gold_conflicts_dropped": dropped,
                  "conflict_policy": CONFLICT_POLICY, "conflicts": conflicts[:50]}


def resolve_path(name: str, path: str | os.PathLike) -> Path:
    """A file path as given, or, for a folder, the benchmark's file in it: its default file name,
    ``<stem>``/``<name>`` with .parquet, .jsonl or .json, or the math-evaluation-harness layout
    (``test.jsonl``/``test.json``/``test.parquet`` in the folder or in ``<name>/``)."""
    _check_name(name)
    p = Path(path)
    if not p.is_dir():
        return p
    default = BENCHMARKS[name]
    stem = Path(default).stem
    cands = [default, f"{stem}.parquet", f"{stem}.jsonl", f"{stem}.json", f"{name}.parquet",
             f"{name}.jsonl", f"{name}.json"]
    # math-evaluation-harness: data/<name>/test.jsonl, given as data/<name>/ or as data/
    cands += list(_HARNESS_FILES) + [f"{name}/{f}" for f in _HARNESS_FILES]
    for c in dict.fromkeys(cands):
        if (p / c).exists():
            return p / c
    raise FileNotFoundError(
        f"{p}: no file for benchmark {name!r} (looked for {', '.join(dict.fromkeys(cands))}); "
        f"download it with sparserl.data.download or set tasks.local_paths.{name}")


def load_benchmark(name: str, path: str | os.PathLike) -> pd.DataFrame:
    """Load benchmark ``name`` from a .jsonl/.parquet file (or a folder holding its default file)
    into the record schema (columns `RECORD_COLUMNS`)."""
    _check_name(name)
    file = resolve_path(name, path)
    return normalise_records(name, iter_rows(file), origin=str(file),
                             dedup_problems=name in TRAIN_SETS)


def load_benchmark_dir(dirpath: str | os.PathLike,
                       names: Iterable[str] | None = None) -> dict[str, pd.DataFrame]:
    """Load several benchmarks from one folder: ``names``, or every known benchmark whose file
    is present (at least one must be)."""
    d = Path(dirpath)
    if not d.is_dir():
        raise FileNotFoundError(f"{d}: benchmark folder not found")
    if names is None:
        found = {}
        for n in BENCHMARKS:
            try:  # only the benchmark's own names here: a bare test.jsonl belongs to none of them
                found[n] = resolve_path(n, d)
            except FileNotFoundError:
                continue
            if found[n].parent == d and found[n].name in _HARNESS_FILES:
                del found[n]
        if not found:
            raise FileNotFoundError(
                f"{d}: none of the benchmark files ({', '.join(BENCHMARKS.values())}) is there")
        return {n: load_benchmark(n, f) for n, f in found.items()}
    names = list(names)
    for n in names:
        _check_name(n)
    return {n: load_benchmark(n, d) for n in names}


def check_golds(df: pd.DataFrame, workers: int = 2, timeout_s: float = 10.0) -> list[dict]:
    """Garbled or unparseable golds of a loaded benchmark (see `Verifier.check_golds`), each
    ``{"id", "gold", "reason"}``; also stored in ``df.attrs["load_info"]["garbled_golds"]``.
    They are graded by normalised string match, not by their parse."""
    from sparserl.grading.verifier import Verifier

    with Verifier(workers=workers, timeout_s=timeout_s) as v:
        found = v.check_golds(df["answer"].tolist())
    out = [{"id": df["id"].iloc[f["index"]], "gold": f["gold"], "reason": f["reason"]}
           for f in found]
    df.attrs.setdefault("load_info", {})["garbled_golds"] = out
    return out


def load_dapo_math(path: str | os.PathLike, dedup: bool = True) -> pd.DataFrame:
    """DAPO-Math-17k training pool (hub schema: ``prompt`` chat list, ``reward_model.ground_truth``,
    ``extra_info.index``).  The problem is the user message without DAPO's "Answer:" instruction;
    ``dedup`` keeps one row per distinct problem (the hub file repeats each prompt)."""
    file = resolve_path("dapo_math_17k", path)
    return normalise_records("dapo_math_17k", iter_rows(file), origin=str(file),
                             dedup_problems=dedup)


def load_hmmt_feb_2025(path: str | os.PathLike) -> pd.DataFrame:
    """HMMT February 2025 (hub MathArena/hmmt_feb_2025: ``problem_idx``, ``problem``,
    ``answer``)."""
    return load_benchmark("hmmt_feb_2025", path)


__all__ = [
    "BENCHMARKS", "CONFLICT_POLICY", "DAPO_PREFIX", "DAPO_SUFFIX", "PAPER_BENCHMARKS",
    "RECORD_COLUMNS", "TRAIN_SETS", "check_golds", "clean_answer", "iter_rows", "load_benchmark",
    "load_benchmark_dir", "load_dapo_math",
    "load_hmmt_feb_2025", "normalise_records", "resolve_path",
]
