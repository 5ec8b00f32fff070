"""Answer verification for math rollouts (and reasoning-gym tasks).

Design
------
* **Extraction** (`extract_boxed`): the content of the *last* ``\\boxed{...}`` of a response, found
  by one linear scan with brace matching.  Work is bounded: a huge response is only searched in its
  tail, and the scan gives up (returns None, scored 0) on content longer than ``max_len`` characters
  or nested deeper than ``max_depth``.  So a megabyte brace bomb costs microseconds.
* **Fast exact path** (in the calling process): when the boxed content and the gold answer are
  both plain integers they are compared as Python ints (exact, no sympy); an exact match of the
  normalised strings also scores 1.  Tiny-scale runs score tens of thousands of completions whose
  answers are mostly integers, so most items never reach math-verify.
* **math-verify in worker processes** (`Verifier`): everything else goes to
  ``math_verify.parse``/``verify``.  math-verify relies on ``signal.alarm``, which only works in a
  main thread and cannot interrupt C-level work (sympy evaluating ``9^{9^{9^{9^9}}}+1`` computes a
  gigantic integer and never returns).  So it runs in N worker processes, each fed whole chunks of
  items over its own pipe (one send and one reply per chunk).
* **Timeout semantics**: each item gets at most ``timeout_s`` seconds of worker time.  A worker
  publishes, in shared memory, which item of its chunk it is on and when it started it, so the
  parent knows the culprit without extra IPC.  When an item overruns, the parent kills the worker,
  scores that item 0, starts a replacement, and resubmits the rest of the chunk (items before the
  culprit are recomputed: their replies were lost with the worker).  A worker that dies (crash,
  memory limit) is treated the same way.  Results are always returned in input order.
* **Timeouts are counted, never silent**: math-verify's own (signal) timeout makes an item
  "unknown", not wrong.  Such items are retried once with a longer limit; what still times out,
  and items killed at the hard limit, score 0 and are counted (`timeout_counts`, for manifests).
  When they pass ``max_timeout_share`` of the items scored, `score` raises `VerifierTimeoutError`,
  since grades that depend on machine load cannot be trusted.
* **Forms math-verify gets wrong** (e notation, number bases, unit powers, lookalike digits,
  garbled golds) are decided or rewritten first; see `sparserl.grading.golds`.
"""
from __future__ import annotations

import collections
import functools
import logging
import math
import multiprocessing as mp
import re
import time
from typing import Any, Iterable, Sequence

import numpy as np

from sparserl.core.config import setting
from sparserl.grading import golds as G

# Bounds for extraction; answers in the paper benchmarks are far below these.
MAX_BOXED_LEN = 512
MAX_BOXED_DEPTH = 32
SCAN_TAIL_CHARS = 200_000

_BOXED = "\\boxed"
# ASCII digits only: after NFKC, another script's digit is not a digit (see golds.nfkc).
_INT_RE = re.compile(r"[+-]?\d+", re.ASCII)
_THOUSANDS_RE = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+", re.ASCII)

# Worker reply codes, one byte per item.
WRONG, RIGHT, TIMED_OUT = 0, 1, 2
TIMED_OUT_HARD = 3  # killed at the hard limit: counted, not retried (C-level runaway sympy)
# Gold-check reply bits.
_GARBLED, _UNPARSED = 4, 8


def extract_boxed(text: str | None, max_len: int = MAX_BOXED_LEN,
                  max_depth: int = MAX_BOXED_DEPTH,
                  scan_tail: int = SCAN_TAIL_CHARS) -> str | None:
    """Content of the last ``\\boxed{...}`` in ``text``, or None.

    None when there is no ``\\boxed{``, when its braces do not close, when the content is longer
    than ``max_len`` characters or nests deeper than ``max_depth``.  Only the last ``scan_tail``
    characters are searched, so the cost is bounded whatever the response length.  Escaped braces
    (``\\{``, ``\\}``) do not count for matching.
    """
    if not text:
        return None
    if len(text) > scan_tail:
        text = text[-scan_tail:]
    pos = text.rfind(_BOXED)
    while pos >= 0:
        j = pos + len(_BOXED)
        # \boxedfoo is another macro; keep looking further left.
        if j < len(text) and (text[j].isalpha()):
            pos = text.rfind(_BOXED, 0, pos)
            continue
        break
    if pos < 0:
        return None
    j = pos + len(_BOXED)
    n = len(text)
    while j < n and text[j] in " \t":
        j += 1
    if j >= n or text[j] != "{":
        return None
    start = j + 1
    end_limit = min(n, start + max_len + 1)
    depth = 1
    k = start
    while k < end_limit:
        c = text[k]
        if c == "\\":
            k += 2  # an escaped char (\{, \}, \\) never opens or closes a group
            continue
        if c == "{":
            depth += 1
            if depth > max_depth:
                return None
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[start:k].strip()
        k += 1
    return None  # unclosed, or longer than max_len


def _as_int(s: str) -> int | None:
    if _INT_RE.fullmatch(s):
        return int(s)
    if _THOUSANDS_RE.fullmatch(s):
        return int(s.replace(",", ""))
    return None


def fast_compare(pred: str, gold: str) -> bool | None:
    """Exact decision without math-verify: True/False, or None when math-verify is needed.

    Both plain integers -> compared as ints (exact; "025" == "25").  Equal normalised strings ->
    True.  Anything else (fractions, decimals, expressions) -> None.  Both sides are NFKC-normalised
    first, and only ASCII digits count as digits (``３`` is 3; ``٣`` goes to math-verify, which
    rejects it).
    """
    p, g = G.compact(G.nfkc(pred)), G.compact(G.nfkc(gold))
    if p == g and p:
        return True
    pi, gi = _as_int(p), _as_int(g)
    if pi is not None and gi is not None:
        return pi == gi
    return None


# ----------------------------------------------------------------------------- worker side

def _gold_latex(gold: str) -> str:
    g = gold.strip()
    if "\\boxed" in g or (g.startswith("$") and g.endswith("$")):
        return g
    return f"${g}$"


class _TimeoutSeen(logging.Handler):
    """math-verify reports its signal timeouts only as a log line ("Timeout during ..."), then
    returns "not equal"; this handler turns that line into a flag (and keeps it off stderr)."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.hit = False

    def emit(self, record: logging.LogRecord) -> None:
        if str(record.msg).startswith("Timeout during"):
            self.hit = True


class _Gold:
    """A gold's parse and, once asked, why it is garbled ("" when it is not)."""

    __slots__ = ("parsed", "garbled")

    def __init__(self, parsed, garbled=None):
        self.parsed, self.garbled = parsed, garbled


def _slow_hook(soft_timeout: int, seconds: float) -> None:
    """Test hook: work that takes ``seconds`` under math-verify's own signal timeout."""
    from math_verify.utils import timeout

    timeout(timeout_seconds=soft_timeout)(time.sleep)(seconds)


class _Checker:
    """Per-worker grading state: the gold cache and the timeout flag."""

    def __init__(self, flag: _TimeoutSeen):
        self.flag = flag
        self.cache: dict[str, _Gold] = {}

    def gold(self, gold: str, soft: int, check: bool) -> _Gold:
        from math_verify import parse, verify

        g = self.cache.get(gold)
        if g is None:
            g = _Gold(parse(_gold_latex(gold), parsing_timeout=soft))
            if self.flag.hit:
                return g  # not cached: a retry with a longer limit parses it again
            if len(self.cache) > 4096:
                self.cache.clear()
            self.cache[gold] = g
        if check and g.garbled is None and g.parsed:
            hits = [t for t in G.TRIVIAL_ANSWERS
                    if verify(g.parsed, parse(f"${t}$", parsing_timeout=soft), timeout_seconds=soft)]
            if not self.flag.hit:
                g.garbled = G.garbled_reason(gold, str(g.parsed[0]), hits) or ""
        return g

    def equal(self, pred: str, gold: str, soft: int) -> bool:
        from math_verify import parse, verify

        g = self.gold(gold, soft, check=True)
        if not g.parsed or g.garbled:
            # A parse that throws most of the gold away (or none at all) cannot grade it.
            return G.loose_form(pred) == G.loose_form(gold)
        pp = parse("\\boxed{" + pred + "}", parsing_timeout=soft)
        if not pp:
            return False
        return bool(verify(g.parsed, pp, timeout_seconds=soft))

    def item(self, pred: str | None, gold: str, soft: int, slow: tuple | None) -> int:
        from math_verify.errors import TimeoutException

        self.flag.hit = False
        try:
            if slow is not None and pred == slow[0]:
                _slow_hook(soft, slow[1])
                return RIGHT
            if pred is None:  # a gold check, no answer
                g = self.gold(gold, soft, check=True)
                code = (_UNPARSED if not g.parsed else 0) | (_GARBLED if g.garbled else 0)
            else:
                code = RIGHT if self.equal(pred, gold, soft) else WRONG
        except TimeoutException:
            return TIMED_OUT
        except MemoryError:
            self.cache.clear()
            return WRONG
        except Exception:  # a parse/verify error means "not verified", never a crash
            return WRONG
        # "Equal" is final even if another pairing timed out; "not equal" after a timeout is unknown.
        if self.flag.hit and code != RIGHT:
            return TIMED_OUT
        return code


def _worker_main(conn, state, max_memory_mb: int | None, hang_marker: str | None,
                 slow: tuple | None) -> None:
    """Worker loop: receive (job_seq, soft_timeout, [(pred, gold), ...]), reply (job_seq, bytes of
    codes: WRONG, RIGHT, TIMED_OUT; or gold-check bits when pred is None).

    ``state`` is shared memory [job_seq, item_index, start_monotonic] that the parent reads to
    find an overrunning item; it is written before each item starts.
    """
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    if max_memory_mb:
        try:
            import resource

            vm_kb = 0
            with open("/proc/self/status") as f:
                for line in f:
                    if line.startswith("VmSize:"):
                        vm_kb = int(line.split()[1])
            limit = vm_kb * 1024 + max_memory_mb * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        except (ImportError, OSError, ValueError):
            pass
    import math_verify  # noqa: F401  (import once, before the first item)

    G.patch_math_verify_units()
    flag = _TimeoutSeen()
    mv_log = logging.getLogger("math_verify")
    mv_log.addHandler(flag)
    mv_log.propagate = False  # timeouts are counted by the parent, not printed per item
    checker = _Checker(flag)
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        seq, soft, items = msg
        out = bytearray(len(items))
        for k, (pred, gold) in enumerate(items):
            state[2] = time.monotonic()
            state[1] = k
            state[0] = seq
            if hang_marker is not None and pred == hang_marker:
                time.sleep(3600)  # test hook: simulate a hung item
            out[k] = checker.item(pred, gold, soft, slow)
        try:
            conn.send((seq, bytes(out)))
        except (BrokenPipeError, OSError):
            return


# ----------------------------------------------------------------------------- parent side

class VerifierTimeoutError(RuntimeError):
    """Too many items timed out for the grades to be trusted (they would depend on machine load)."""


class _Slot:
    __slots__ = ("proc", "conn", "state", "job", "seq", "sent_at")

    def __init__(self):
        self.proc = None
        self.conn = None
        self.state = None
        self.job = None  # list of (index, pred, gold) in flight
        self.seq = 0
        self.sent_at = 0.0


class Verifier:
    """Score responses against gold answers: fast exact path + isolated math-verify workers.

    Use as a context manager (``with Verifier(workers=4) as v: v.score(responses, answers)``) or
    call `close` yourself.  Workers start lazily, at the first item the fast path cannot decide.

    Parameters
    ----------
    workers: number of worker processes.
    timeout_s: hard limit of worker time per item; an overrunning worker is killed and the item
        scores 0.  math-verify's own soft (signal) timeouts are set below it.
    chunk_size: items per message to a worker (default: spread the batch ~4 chunks per worker,
        at most 64).
    max_memory_mb: address-space allowance of each worker above its size at start (a runaway
        sympy integer then raises MemoryError instead of exhausting the node); None for no limit.
    mp_context: multiprocessing start method; "forkserver" (default) keeps workers independent of
        the threads and GPU state of the parent, "fork" starts faster.
    startup_grace_s: how long a fresh worker may take to import math-verify before its first item.
    fast_path: decide plain integers and equal strings without math-verify (default).  Off, every
        item goes to math-verify (the audit's self-match check).
    retry_factor: an item that hit math-verify's soft timeout is retried once with a soft limit
        this many times longer (and a hard limit to match).
    max_timeout_share: `score` raises `VerifierTimeoutError` once the items that timed out for
        good (after the retry, or killed at the hard limit) exceed this share of all items scored
        so far ...
    timeout_allowance: ... and this many items, so one pathological answer in a small batch does
        not fail a job.
    """

    def __init__(self, workers: int = 2, timeout_s: float = 5.0, chunk_size: int | None = None,
                 max_len: int = MAX_BOXED_LEN, max_memory_mb: int | None = 2048,
                 mp_context: str | None = None, startup_grace_s: float = 60.0,
                 fast_path: bool = True, retry_factor: float = 3.0,
                 max_timeout_share: float = 0.01, timeout_allowance: int = 5,
                 _hang_marker: str | None = None, _slow_marker: tuple | None = None):
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.workers = int(workers)
        self.timeout_s = float(timeout_s)
        self.chunk_size = chunk_size
        self.max_len = max_len
        self.max_memory_mb = max_memory_mb
        self.startup_grace_s = float(startup_grace_s)
        self._hang_marker = _hang_marker
        self._slow_marker = _slow_marker
        if not 0 <= max_timeout_share <= 1:
            raise ValueError(f"max_timeout_share must be in [0, 1], got {max_timeout_share}")
        if retry_factor < 1:
            raise ValueError(f"retry_factor must be >= 1, got {retry_factor}")
        self.fast_path = bool(fast_path)
        self.max_timeout_share = float(max_timeout_share)
        self.timeout_allowance = int(timeout_allowance)
        # Soft (signal) timeout per parse/verify call, in whole seconds as signal.alarm needs.
        self._soft_timeout = max(1, int(self.timeout_s // 3))
        self._retry_soft = max(self._soft_timeout + 1, int(round(self._soft_timeout * retry_factor)))
        if mp_context is None:
            mp_context = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
        self._ctx = mp.get_context(mp_context)
        if mp_context == "forkserver":
            # the fork server imports math-verify once and every worker forks from it, instead of
            # each worker importing it (~0.4 s of CPU a job; tiny jobs start a verifier each)
            self._ctx.set_forkserver_preload(["sparserl.grading.verifier", "math_verify"])
        self._slots: list[_Slot] = []
        self._seq = 0
        self.n_killed = 0  # workers killed for overrunning or dying (for logs and tests)
        self.n_math_verify = 0  # items sent to math-verify (the rest took the fast path)
        self.n_scored = 0  # items scored (denominator of the timeout share)
        self.n_soft_timeouts = 0  # items that hit math-verify's soft timeout at the first try
        self.n_retry_resolved = 0  # ... and were graded on the retry with a longer limit
        self.n_timeouts = 0  # items scored 0 because they timed out for good (retry or hard kill)
        self._closed = False

    # -- lifecycle
    def __enter__(self) -> "Verifier":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def _spawn(self, slot: _Slot) -> None:
        parent_conn, child_conn = self._ctx.Pipe(duplex=True)
        state = self._ctx.RawArray("d", 3)
        state[0] = -1.0
        proc = self._ctx.Process(
            target=_worker_main,
            args=(child_conn, state, self.max_memory_mb, self._hang_marker, self._slow_marker),
            daemon=True, name="sparserl-verifier",
        )
        proc.start()
        child_conn.close()
        slot.proc, slot.conn, slot.state, slot.job = proc, parent_conn, state, None

    def _ensure_started(self) -> None:
        if self._closed:
            raise RuntimeError("Verifier is closed")
        while len(self._slots) < self.workers:
            slot = _Slot()
            self._spawn(slot)
            self._slots.append(slot)

    def _kill(self, slot: _Slot) -> None:
        if slot.proc is not None:
            if slot.proc.is_alive():
                slot.proc.kill()
            slot.proc.join(timeout=5)
        if slot.conn is not None:
            slot.conn.close()
        slot.proc = slot.conn = None
        slot.job = None

    def close(self) -> None:
        """Stop all workers (politely, then by kill)."""
        if self._closed:
            return
        self._closed = True
        for s in self._slots:
            try:
                if s.conn is not None and s.job is None:
                    s.conn.send(None)
            except (BrokenPipeError, OSError):
                pass
        deadline = time.monotonic() + 2.0
        for s in self._slots:
            if s.proc is not None:
                s.proc.join(timeout=max(0.0, deadline - time.monotonic()))
            self._kill(s)
        self._slots = []

    # -- scoring
    def score(self, responses: Sequence[str], answers: Sequence[Any]) -> np.ndarray:
        """0/1 float32 per response, in input order."""
        if len(responses) != len(answers):
            raise ValueError(f"{len(responses)} responses but {len(answers)} answers")
        out = np.zeros(len(responses), dtype=np.float32)
        pending: list[tuple[int, str, str]] = []
        for i, (resp, ans) in enumerate(zip(responses, answers)):
            if ans is None or resp is None:
                continue
            gold = G.nfkc(str(ans).strip())
            pred = extract_boxed(resp, max_len=self.max_len)
            if pred is None or not gold:
                continue
            pred = G.nfkc(pred)
            decided = fast_compare(pred, gold) if self.fast_path else None
            if decided is None:
                decided = G.structural_compare(pred, gold)
            if decided is not None:
                out[i] = 1.0 if decided else 0.0
            else:
                pending.append((i, *G.to_math_verify(pred, gold)))
        self.n_scored += len(responses)
        if pending:
            self.n_math_verify += len(pending)
            for i, code in self._run_with_retry(pending):
                out[i] = 1.0 if code == RIGHT else 0.0
        self._check_timeouts()
        return out

    def check_golds(self, golds: Sequence[Any]) -> list[dict]:
        """Golds that cannot be graded by their parse: ``[{"index", "gold", "reason"}]``.

        Garbled (see `golds.garbled_reason`) or unparseable golds; both are graded by normalised
        string match.  Golds that the exact rules decide (integers, number bases, e notation)
        never are.
        """
        items = []
        for i, g in enumerate(golds):
            g = G.nfkc(str(g).strip()) if g is not None else ""
            if not g or _as_int(G.compact(g)) is not None or G.base_number(g) is not None:
                continue
            items.append((i, None, G.to_math_verify("", g)[1]))
        found = []
        for i, code in sorted(self._run_with_retry(items)):
            if code in (TIMED_OUT, TIMED_OUT_HARD):
                raise VerifierTimeoutError(f"gold {i} ({golds[i]!r}) timed out twice while "
                                           "checking it; give the verifier a larger timeout_s "
                                           "(the config key verifier.timeout_s)")
            if code & _UNPARSED:
                found.append({"index": i, "gold": str(golds[i]),
                              "reason": "math-verify cannot parse it"})
            elif code & _GARBLED:
                found.append({"index": i, "gold": str(golds[i]),
                              "reason": "its parse throws most of it away, or a trivial answer "
                                        "(0, 1, 2) satisfies it"})
        return found

    def timeout_counts(self) -> dict[str, int]:
        """Counts for a manifest: items scored, sent to math-verify, soft timeouts at the first
        try, resolved by the retry, timed out for good, workers killed."""
        return {"items": self.n_scored, "math_verify": self.n_math_verify,
                "soft_timeouts": self.n_soft_timeouts, "retry_resolved": self.n_retry_resolved,
                "timeouts": self.n_timeouts, "workers_killed": self.n_killed}

    def _check_timeouts(self) -> None:
        limit = max(self.timeout_allowance, self.max_timeout_share * self.n_scored)
        if self.n_timeouts > limit:
            raise VerifierTimeoutError(
                f"verifier: {self.n_timeouts} of {self.n_scored} items timed out even after a "
                f"retry with a {self._retry_soft} s limit (more than max_timeout_share="
                f"{self.max_timeout_share:g} of them, and more than {self.timeout_allowance}); "
                "such grades depend on machine load. Give the verifier a larger timeout_s or "
                "fewer workers per core, or raise max_timeout_share")

    def _run_with_retry(self, items: list[tuple[int, str | None, str]]) -> list[tuple[int, int]]:
        """Worker codes for items; soft timeouts are retried once with the longer limit."""
        if not items:
            return []
        results = self._run_workers(items, self._soft_timeout, self.timeout_s)
        by_index = {i: (p, g) for i, p, g in items}
        again = [(i, *by_index[i]) for i, c in results if c == TIMED_OUT]
        self.n_soft_timeouts += len(again)
        if again:
            final = dict(results)
            # Each parse/verify call may take the soft limit; the hard one must cover all three.
            hard = max(self.timeout_s, 3.0 * self._retry_soft + 1.0)
            for i, c in self._run_workers(again, self._retry_soft, hard):
                final[i] = c
                self.n_retry_resolved += c != TIMED_OUT
            results = list(final.items())
        self.n_timeouts += sum(c in (TIMED_OUT, TIMED_OUT_HARD) for _, c in results)
        return results

    def _run_workers(self, items: list[tuple[int, str | None, str]], soft: int,
                     hard: float) -> list[tuple[int, int]]:
        from multiprocessing.connection import wait

        self._ensure_started()
        for s in self._slots:  # left busy by an interrupted call: its reply is stale
            if s.job is not None:
                self._kill(s)
                self._spawn(s)
        size = self.chunk_size or max(1, min(64, math.ceil(len(items) / (4 * self.workers))))
        queue = collections.deque(items[k:k + size] for k in range(0, len(items), size))
        results: list[tuple[int, int]] = []
        startup_failures = 0

        def dispatch(slot: _Slot) -> None:
            job = queue.popleft()
            self._seq += 1
            slot.seq, slot.job, slot.sent_at = self._seq, job, time.monotonic()
            slot.conn.send((slot.seq, soft, [(p, g) for _, p, g in job]))

        def fail(slot: _Slot) -> None:
            # Kill the worker, count its current item as timed out, requeue the rest of its chunk.
            nonlocal startup_failures
            job = slot.job or []
            st = slot.state
            started = st is not None and int(st[0]) == slot.seq
            k = int(st[1]) if started else -1
            self._kill(slot)
            self.n_killed += 1
            if 0 <= k < len(job):
                results.append((job[k][0], TIMED_OUT_HARD))
                rest = job[:k] + job[k + 1:]
            else:
                startup_failures += 1
                if startup_failures > 3 * self.workers:
                    raise RuntimeError(
                        "verifier workers keep dying before their first item. With the "
                        f"{self._ctx.get_start_method()!r} start method each worker re-imports the "
                        "main script: guard it with `if __name__ == '__main__':` (scripts read "
                        "from stdin cannot work), or pass mp_context='fork'; also check that "
                        "`import math_verify` works in a fresh Python")
                rest = job
            if rest:
                queue.appendleft(rest)
            self._spawn(slot)

        while True:
            for s in self._slots:
                if s.job is None and queue:
                    try:
                        dispatch(s)
                    except (BrokenPipeError, OSError):
                        queue.appendleft(s.job)
                        s.job = None
                        self._kill(s)
                        self._spawn(s)
            busy = [s for s in self._slots if s.job is not None]
            if not busy:
                break
            now = time.monotonic()
            deadlines = []
            for s in busy:
                if int(s.state[0]) == s.seq:
                    deadlines.append(s.state[2] + hard)
                else:
                    # Not started yet (still importing): poll, since once it starts it stays
                    # silent until the chunk is done.
                    deadlines.append(min(s.sent_at + hard + self.startup_grace_s,
                                         now + min(0.5, max(0.02, hard / 10))))
            wait_for = max(0.0, min(deadlines) - now) + 0.01
            ready = wait([s.conn for s in busy], timeout=wait_for)
            for s in busy:
                if s.conn in ready:
                    try:
                        seq, scores = s.conn.recv()
                    except (EOFError, OSError):
                        fail(s)
                        continue
                    if seq != s.seq or len(scores) != len(s.job):
                        fail(s)
                        continue
                    results.extend((idx, b) for (idx, _, _), b in zip(s.job, scores))
                    s.job = None
                    startup_failures = 0
            now = time.monotonic()
            for s in busy:
                if s.job is None:
                    continue
                if s.proc is None or not s.proc.is_alive():
                    if not s.conn.poll():
                        fail(s)
                    continue
                # Read index, start time, index: a changed index means progress, not a hang.
                seq0, k0 = int(s.state[0]), int(s.state[1])
                t0 = s.state[2]
                if int(s.state[0]) != seq0 or int(s.state[1]) != k0:
                    continue
                overran = (now - t0 > hard if seq0 == s.seq
                           else now - s.sent_at > hard + self.startup_grace_s)
                if overran and not s.conn.poll():  # a reply that just arrived wins
                    fail(s)
        return results


def score_responses(responses: Sequence[str], answers: Sequence[Any], workers: int = 2,
                    timeout_s: float = 5.0, **kwargs) -> np.ndarray:
    """One-shot `Verifier.score` with its own short-lived worker pool."""
    with Verifier(workers=workers, timeout_s=timeout_s, **kwargs) as v:
        return v.score(responses, answers)


# ----------------------------------------------------------------------------- reasoning-gym

@functools.lru_cache(maxsize=None)
def _rg_score_fn(dataset_name: str):
    import reasoning_gym

    return reasoning_gym.get_score_answer_fn(dataset_name)


def score_reasoning_gym(dataset_name: str, answer_text: str | None, entry: dict) -> float:
    """Score an extracted answer with reasoning-gym's own ``score_answer`` for that task.

    Returns a float in [0, 1] (some tasks give partial credit).  A missing answer, or a scorer
    that raises on malformed input, scores 0.0.  Unknown task names raise (a config error).
    """
    fn = _rg_score_fn(dataset_name)
    if answer_text is None:
        return 0.0
    try:
        r = float(fn(answer_text, entry))
    except Exception:
        return 0.0
    if not math.isfinite(r):
        return 0.0
    return min(1.0, max(0.0, r))


def open_verifier(cfg: dict):
    """A `Verifier` with the config's `verifier` settings (workers, timeout_s), as a context manager."""
    return Verifier(workers=setting(cfg, "verifier", "workers"), timeout_s=setting(cfg, "verifier", "timeout_s"),
                    max_timeout_share=setting(cfg, "verifier", "max_timeout_share"))


__all__ = [
    "MAX_BOXED_LEN", "Verifier", "VerifierTimeoutError", "extract_boxed", "fast_compare", "open_verifier", "score_reasoning_gym",
    "score_responses",
]
