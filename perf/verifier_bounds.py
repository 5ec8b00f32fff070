"""The verifier's cost on hostile answers, timed: the brace bomb `extract_boxed` refuses and an
adversarial batch (the bomb, power towers, 5 MB of garbage) through `Verifier.score`.

    python perf/verifier_bounds.py [--timeout 2.0] [--repeat 3]

The unit tests (tests/grading/test_verifier.py) check what these inputs score; the times live here
because a loaded machine stretches any wall-clock bound. Prints the best of --repeat runs of each
against its bound (the bomb: 0.5 s; the batch: 3 x timeout + 5 s) and exits 1 when one is over.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # run from a checkout

from sparserl.grading.verifier import Verifier, extract_boxed  # noqa: E402

BOMB = "\\boxed{" + "{" * 2_000_000 + "}" * 2_000_000 + "}"


def bomb_s() -> float:
    t = time.perf_counter()
    assert extract_boxed(BOMB) is None and extract_boxed(BOMB, scan_tail=10 ** 9) is None
    return time.perf_counter() - t


def adversarial_s(timeout: float) -> float:
    garbage = np.random.default_rng(1).integers(32, 127, size=5_000_000, dtype=np.uint8).tobytes().decode("ascii")
    tower = r"so \boxed{9^{9^{9^{9^{9}}}}}"
    resp = [BOMB, tower, tower, garbage, r"\boxed{1/2}", r"\boxed{41}", r"\boxed{\frac{1}{2}}"]
    gold = ["1", r"9^{9^{9^{9^{9}}}}+1", r"10^{10^{10^{10}}}", "1", "0.5", "41", "1/2"]
    t = time.perf_counter()
    with Verifier(workers=2, timeout_s=timeout) as v:
        r = v.score(resp, gold)
    took = time.perf_counter() - t
    np.testing.assert_array_equal(r, [0, 0, 0, 0, 1, 1, 1])
    return took


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--timeout", type=float, default=2.0, help="the verifier's timeout_s per item")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args(argv)
    rows = [("extract_boxed brace bomb", min(bomb_s() for _ in range(a.repeat)), 0.5),
            ("adversarial batch", min(adversarial_s(a.timeout) for _ in range(a.repeat)), 3 * a.timeout + 5.0)]
    for name, took, bound in rows:
        print(f"{name:26s} {took:7.3f} s   bound {bound:5.1f} s   {'ok' if took < bound else 'OVER'}")
    return int(any(took >= bound for _, took, bound in rows))


if __name__ == "__main__":  # guarded: the verifier's spawned workers re-import this script
    sys.exit(main())
