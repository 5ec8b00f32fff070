"""Verifier: extraction bounds, fast exact path, math-verify equivalences, process isolation."""
from __future__ import annotations

import time

import numpy as np
import pytest

from sparserl.grading.verifier import (
    Verifier, extract_boxed, fast_compare, score_reasoning_gym, score_responses,
)

pytest.importorskip("math_verify", reason="math-verify not installed (pip install math-verify)")

TIMEOUT = 2.0


@pytest.fixture(scope="module")
def verifier():
    with Verifier(workers=2, timeout_s=TIMEOUT) as v:
        yield v


# --------------------------------------------------------------------------- extraction

def test_extract_last_boxed_with_nested_braces():
    text = r"first \boxed{1} then \boxed{\frac{a^{2}}{b_{1}}} done"
    assert extract_boxed(text) == r"\frac{a^{2}}{b_{1}}"


def test_extract_escaped_braces_and_space():
    assert extract_boxed(r"so \boxed {\{1, 2\}}.") == r"\{1, 2\}"


@pytest.mark.parametrize("text", [
    "no box here", "", None, r"\boxed{unclosed", r"\boxed 5", r"\boxedx{3}",
])
def test_extract_none(text):
    assert extract_boxed(text) is None


def test_extract_caps():
    assert extract_boxed(r"\boxed{" + "1" * 600 + "}") is None
    assert extract_boxed(r"\boxed{" + "1" * 600 + "}", max_len=1000) == "1" * 600
    assert extract_boxed(r"\boxed{" + "{" * 40 + "}" * 40 + "}") is None


def test_extract_brace_bomb_is_refused():
    # the scan stops at max_len characters past `\boxed{` (test_extract_caps), so the bomb costs
    # no more than a short answer; perf/verifier_bounds.py times it
    bomb = "\\boxed{" + "{" * 2_000_000 + "}" * 2_000_000 + "}"
    assert extract_boxed(bomb) is None
    assert extract_boxed(bomb, scan_tail=10 ** 9) is None  # even scanning it all


def test_extract_only_tail_of_huge_response():
    big = "x" * 1_000_000 + r"\boxed{42}"
    assert extract_boxed(big) == "42"
    early = r"\boxed{42}" + "x" * 1_000_000
    assert extract_boxed(early) is None  # outside the scanned tail by design


# --------------------------------------------------------------------------- fast path

@pytest.mark.parametrize("pred,gold,expected", [
    ("27", "27", True), ("025", "25", True), ("-3", "-3", True), ("+3", "3", True),
    ("1,000", "1000", True), ("10{,}000", "10000", True), ("28", "27", False),
    ("1 000", "1000", True), ("$7$", "7", True), ("x+1", "x+1", True),
])
def test_fast_compare(pred, gold, expected):
    assert fast_compare(pred, gold) is expected


@pytest.mark.parametrize("pred,gold", [("27.0", "27"), ("1/2", "0.5"), (r"\frac{4}{2}", "2")])
def test_fast_compare_defers(pred, gold):
    assert fast_compare(pred, gold) is None


def test_integer_batch_never_starts_workers():
    v = Verifier(workers=1, timeout_s=TIMEOUT)
    try:
        r = v.score([rf"\boxed{{{i}}}" for i in range(2000)], [str(i % 7) for i in range(2000)])
        assert v._slots == [] and v.n_math_verify == 0
        assert r.dtype == np.float32
        np.testing.assert_array_equal(r, [1.0 if i == i % 7 else 0.0 for i in range(2000)])
    finally:
        v.close()


# --------------------------------------------------------------------------- math-verify

HALF_FORMS = ["0.5", "1/2", r"\frac12", r"\frac{1}{2}", r"\dfrac{1}{2}"]


@pytest.mark.parametrize("gold", ["1/2", r"\frac{1}{2}"])
def test_equivalent_forms_of_a_half(verifier, gold):
    resp = [f"The answer is $\\boxed{{{p}}}$." for p in HALF_FORMS]
    r = verifier.score(resp, [gold] * len(resp))
    np.testing.assert_array_equal(r, np.ones(len(resp), dtype=np.float32))


@pytest.mark.parametrize("pred,gold", [
    ("1/3", "1/2"), ("0.51", "1/2"), (r"\frac{2}{1}", "1/2"), ("x^2", "x^3"), ("26", "27"),
])
def test_wrong_answers_score_zero(verifier, pred, gold):
    assert verifier.score([rf"\boxed{{{pred}}}"], [gold])[0] == 0.0


def test_no_boxed_scores_zero(verifier):
    r = verifier.score(["The answer is 1/2.", "", "27"], ["1/2", "1/2", "27"])
    np.testing.assert_array_equal(r, [0, 0, 0])


def test_other_equivalences(verifier):
    resp = [r"\boxed{27.0}", r"\boxed{1+x^2}", r"\boxed{(3,\pi/2)}", r"\boxed{\sqrt{2}/2}"]
    gold = ["27", "x^2+1", r"\left( 3, \frac{\pi}{2} \right)", r"\frac{\sqrt{2}}{2}"]
    np.testing.assert_array_equal(verifier.score(resp, gold), [1, 1, 1, 1])


def test_order_preserved_in_mixed_batch():
    rng = np.random.default_rng(0)
    kinds = [
        (r"\boxed{\frac{1}{2}}", "0.5", 1), (r"\boxed{\frac{1}{3}}", "0.5", 0),
        (r"\boxed{12}", "12", 1), (r"\boxed{13}", "12", 0), ("none", "3", 0),
        (r"\boxed{2x+2}", "2(x+1)", 1), (r"\boxed{2x+1}", "2(x+1)", 0),
    ]
    idx = rng.integers(0, len(kinds), size=150)
    resp = [kinds[k][0] for k in idx]
    gold = [kinds[k][1] for k in idx]
    want = np.array([kinds[k][2] for k in idx], dtype=np.float32)
    with Verifier(workers=2, timeout_s=TIMEOUT, chunk_size=7) as v:
        np.testing.assert_array_equal(v.score(resp, gold), want)


def test_length_mismatch_raises(verifier):
    with pytest.raises(ValueError, match="2 responses but 1 answers"):
        verifier.score(["a", "b"], ["1"])


# --------------------------------------------------------------------------- adversarial

def test_adversarial_inputs_bounded():
    bomb = "\\boxed{" + "{" * 2_000_000 + "}" * 2_000_000 + "}"
    garbage = np.random.default_rng(1).integers(32, 127, size=5_000_000, dtype=np.uint8)
    garbage = garbage.tobytes().decode("ascii")
    tower = r"so \boxed{9^{9^{9^{9^{9}}}}}"
    resp = [bomb, tower, tower, garbage, r"\boxed{1/2}", r"\boxed{41}", r"\boxed{\frac{1}{2}}"]
    gold = ["1", r"9^{9^{9^{9^{9}}}}+1", r"10^{10^{10^{10}}}", "1", "0.5", "41", "1/2"]
    # bounded by the verifier's own timeout_s (its hard kill); perf/verifier_bounds.py times it
    with Verifier(workers=2, timeout_s=TIMEOUT) as v:
        r = v.score(resp, gold)
    np.testing.assert_array_equal(r, [0, 0, 0, 0, 1, 1, 1])


def test_hung_worker_is_killed_and_rest_scored():
    resp = [r"\boxed{1/2}", r"\boxed{HANG}", r"\boxed{\frac{2}{4}}", r"\boxed{0.25}",
            r"\boxed{HANG}", r"\boxed{1/3}", r"\boxed{\dfrac12}"]
    gold = ["0.5"] * len(resp)
    with Verifier(workers=1, timeout_s=1.0, chunk_size=len(resp), _hang_marker="HANG") as v:
        r = v.score(resp, gold)
        killed = v.n_killed
        # The pool still works after the kills.
        r2 = v.score([r"\boxed{\frac{1}{2}}"], ["0.5"])
    np.testing.assert_array_equal(r, [1, 0, 1, 0, 0, 0, 1])
    assert killed == 2  # each hang ended by the 1 s timeout's kill, not by the hang
    assert r2[0] == 1.0


def test_crashed_worker_is_replaced(monkeypatch):
    import os
    import signal
    import threading

    v = Verifier(workers=1, timeout_s=60.0, chunk_size=8, _hang_marker="HANG")
    resp = [r"\boxed{1/2}", r"\boxed{HANG}", r"\boxed{\frac{2}{4}}", r"\boxed{0.3}"]

    def killer():  # SIGKILL the worker while it sits on item 1, as the OOM killer would
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            slots = list(v._slots)
            if slots and slots[0].state is not None and slots[0].state[0] >= 1 \
                    and int(slots[0].state[1]) == 1 and slots[0].proc is not None:
                os.kill(slots[0].proc.pid, signal.SIGKILL)
                return
            time.sleep(0.01)

    # Death is seen at once, as the dead worker's pipe closing wakes the wait: no wait runs out
    # (returns nothing ready) unless it is a short poll of a worker still starting.
    import multiprocessing.connection as mpc
    waits, real_wait = [], mpc.wait

    def spy(conns, timeout=None):
        ready = real_wait(conns, timeout=timeout)
        waits.append((timeout, bool(ready)))
        return ready
    monkeypatch.setattr(mpc, "wait", spy)
    th = threading.Thread(target=killer, daemon=True)
    th.start()
    try:
        r = v.score(resp, ["0.5"] * 4)
    finally:
        monkeypatch.undo()  # close()'s joins wait too
        v.close()
    th.join(timeout=1)
    np.testing.assert_array_equal(r, [1, 0, 1, 0])
    assert v.n_killed == 1
    assert [t for t, ready in waits if not ready and t > 1.0] == [], waits


def test_score_responses_convenience():
    r = score_responses([r"\boxed{\frac{1}{2}}", r"\boxed{5}", "x"], ["0.5", "5", "1"],
                        workers=1, timeout_s=TIMEOUT)
    np.testing.assert_array_equal(r, [1, 1, 0])


# --------------------------------------------------------------------------- reasoning-gym

def test_reasoning_gym_scoring():
    rg = pytest.importorskip("reasoning_gym")
    ds = rg.create_dataset("basic_arithmetic", size=3, seed=7)
    e = ds[0]
    assert score_reasoning_gym("basic_arithmetic", e["answer"], e) == 1.0
    assert score_reasoning_gym("basic_arithmetic", str(int(e["answer"]) + 1), e) == 0.0
    assert score_reasoning_gym("basic_arithmetic", None, e) == 0.0

    ws = rg.create_dataset("word_sorting", size=3, seed=7)
    e = ws[0]
    assert score_reasoning_gym("word_sorting", e["answer"], e) == 1.0
    words = [w.strip() for w in e["answer"].split(",")]
    wrong = ", ".join(reversed(words))
    assert score_reasoning_gym("word_sorting", wrong, e) < 1.0


def test_reasoning_gym_unknown_task():
    pytest.importorskip("reasoning_gym")
    with pytest.raises(Exception):
        score_reasoning_gym("no_such_task_xyz", "1", {})


def test_stale_job_from_interrupted_call_is_discarded():
    with Verifier(workers=1, timeout_s=TIMEOUT) as v:
        v._ensure_started()
        s = v._slots[0]
        # As if a previous score() was interrupted with this chunk in flight.
        v._seq += 1
        s.seq, s.job, s.sent_at = v._seq, [(999, "1/3", "0.5")], time.monotonic()
        s.conn.send((s.seq, [("1/3", "0.5")]))
        r = v.score([r"\boxed{\frac{1}{2}}", r"\boxed{0.4}"], ["0.5", "0.5"])
    np.testing.assert_array_equal(r, [1, 0])


# ------------------------------------------------------------------------------------ real golds

@pytest.mark.parametrize("pred,gold,expected", [
    # e notation: math-verify alone reads 4.5e33 as 4.5*e*33 (Euler's number)
    (r"4.5 \times 10^{33}", "4.5e33", 1), ("4.5E33", "4.5e33", 1), ("4.5e+33", "4.5e33", 1),
    (r"4.5\cdot10^{33}", "4.5e33", 1), ("0.00001", "1e-5", 1), (r"10^{-5}", "1e-5", 1),
    ("4.5e34", "4.5e33", 0), ("4.6e33", "4.5e33", 0), ("0.0001", "1e-5", 0),
    ("4.5e33", r"4.5 \times 10^{33}", 1),
    # number bases keep their base
    ("52_8", "52_8", 1), ("52_{8}", "52_8", 1), ("52_9", "52_8", 0), ("52", "52_8", 0),
    ("4210_5", "4210_{5}", 1), ("4210", "4210_{5}", 0), ("2516_{9}", "2516_8", 0),
    # unit powers; units may be dropped, trailing variables may not
    (r"864 \mbox{ inches}^3", r"864 \mbox{ inches}^2", 0),
    (r"864 \text{ inches}^2", r"864 \mbox{ inches}^2", 1), ("864", r"864 \mbox{ inches}^2", 1),
    (r"5.4 \text{ cents}^2", r"5.4 \text{ cents}", 0),
    (r"\frac{1}{\sqrt{2}}", r"\frac{1}{\sqrt{2}}c", 0), (r"\frac{c}{\sqrt{2}}", r"\frac{1}{\sqrt{2}}c", 1),
    ("6", "6m", 1), (r"\frac{37}{4}", r"\frac{37}{4} m", 1), ("2", "2t", 0),
])
def test_real_gold_forms(verifier, pred, gold, expected):
    assert verifier.score([rf"\boxed{{{pred}}}"], [gold])[0] == expected


GARBLED = [r"\hbar \omega(v+1 / 2)-\frac{E_{0}^{2} e^{2}}{2 m \omega^{2}}",
           r"f(x)=a x+b, where b is an arbitrary integer, and a is an arbitrary positive integer "
           r"with \mho(a)=0"]


def test_garbled_golds_detected_and_string_matched(verifier):
    golds = GARBLED + ["k=1", r"\frac12", "x^2+1", r"\begin{pmatrix} -1/3 \\ 2/3 \end{pmatrix}",
                       r"864 \mbox{ inches}^2", "52_8", "17"]
    found = verifier.check_golds(golds)
    assert [f["index"] for f in found] == [0, 1]
    assert all("trivial answer" in f["reason"] for f in found)
    # The parse of each is a constant; by string match only the gold itself scores 1.
    resp = [r"\boxed{2}", r"\boxed{0}", r"\boxed{" + GARBLED[0] + "}",
            r"\boxed{" + GARBLED[0].replace(" ", "").replace(r"\frac", r"\dfrac") + "}"]
    np.testing.assert_array_equal(verifier.score(resp, [GARBLED[0], GARBLED[1], GARBLED[0],
                                                        GARBLED[0]]), [0, 0, 1, 1])
    assert verifier.score([r"\boxed{1}"], ["k=1"])[0] == 1.0  # not garbled: k=1 means 1


@pytest.mark.parametrize("pred,gold,expected", [
    ("３", "3", True), ("１３", "13", True), ("٣", "3", None), ("1٣", "13", None),
    ("３", "٣", None),
])
def test_lookalike_digits_fast_path(pred, gold, expected):
    # NFKC makes fullwidth digits ASCII; any other script's digit is not a digit
    assert fast_compare(pred, gold) is expected


def test_lookalike_digits_same_rule_on_both_paths(verifier):
    resp = [r"\boxed{３}", r"\boxed{３.0}", r"\boxed{\frac{６}{2}}", r"\boxed{٣}", r"\boxed{٣.0}",
            r"\boxed{1٣}"]
    gold = ["3", "3", "3", "3", "3", "13"]
    np.testing.assert_array_equal(verifier.score(resp, gold), [1, 1, 1, 0, 0, 0])


def test_integer_fast_path_unchanged_on_ascii_integers():
    """The tiny world's answers (plain ASCII integers) grade exactly as 72e8761's integer fast path
    did."""
    import re as _re
    rng = np.random.default_rng(3)
    ints = [str(v) for v in rng.integers(-10 ** 6, 10 ** 6, size=300)] + ["0", "-0", "007", "+5"]

    def old(p, g):  # the fast path as of 72e8761 on integers
        p, g = "".join(p.split()), "".join(g.split())
        if p == g and p:
            return True
        if _re.fullmatch(r"[+-]?\d+", p) and _re.fullmatch(r"[+-]?\d+", g):
            return int(p) == int(g)
        return None

    for k in range(len(ints)):
        p, g = ints[k], ints[(k * 7) % len(ints)]
        assert fast_compare(p, g) is old(p, g) is not None
        assert fast_compare(g, g) is True


def test_soft_timeout_is_retried_and_counted():
    # SLOW sleeps 1.5 s under math-verify's own signal timeout: over the first 1 s limit, within
    # the retry's 3 s: a slow grader must not score a right answer 0.
    with Verifier(workers=1, timeout_s=3.0, _slow_marker=("SLOW", 1.5)) as v:
        r = v.score([r"\boxed{SLOW}", r"\boxed{\frac{1}{2}}", r"\boxed{7}"], ["0.5", "0.5", "7"])
        counts = v.timeout_counts()
    np.testing.assert_array_equal(r, [1, 1, 1])
    assert counts["soft_timeouts"] == 1 and counts["retry_resolved"] == 1
    assert counts["timeouts"] == 0 and counts["items"] == 3


@pytest.mark.e2e  # ~8 s of grader timeouts
def test_timeouts_past_the_share_fail_the_job():
    from sparserl.grading.verifier import VerifierTimeoutError
    with Verifier(workers=1, timeout_s=3.0, max_timeout_share=0.0, timeout_allowance=0,
                  _slow_marker=("SLOW", 60)) as v:
        with pytest.raises(VerifierTimeoutError, match="1 of 2 items timed out.*max_timeout_share"):
            v.score([r"\boxed{SLOW}", r"\boxed{\frac{1}{2}}"], ["0.5", "0.5"])
        assert v.timeout_counts()["timeouts"] == 1
    with Verifier(workers=1, timeout_s=3.0, _slow_marker=("SLOW", 60)) as v:  # default share
        assert v.score([r"\boxed{SLOW}"], ["0.5"])[0] == 0.0  # within the allowance: counted
        assert v.timeout_counts()["timeouts"] == 1


def test_hard_kills_are_counted_as_timeouts():
    with Verifier(workers=1, timeout_s=1.0, _hang_marker="HANG") as v:
        r = v.score([r"\boxed{HANG}", r"\boxed{0.5}"], ["0.5", "0.5"])
        assert v.timeout_counts()["timeouts"] == 1 and v.n_killed == 1
    np.testing.assert_array_equal(r, [0, 1])


def test_fast_path_off_sends_integers_to_math_verify():
    with Verifier(workers=1, timeout_s=TIMEOUT, fast_path=False) as v:
        np.testing.assert_array_equal(v.score([r"\boxed{12}", r"\boxed{13}"], ["12", "12"]), [1, 0])
        assert v.n_math_verify == 2
