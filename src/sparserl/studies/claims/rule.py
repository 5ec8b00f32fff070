"""The claims' rule: statuses, the records a claim is made of, and the intervals (the package
docstring, `sparserl.studies.claims`, says how each status is decided).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np
import pandas as pd

from sparserl.core.stats import LEVEL, normal_quantile, t_interval, welch_interval

if TYPE_CHECKING:  # the measures' and the inputs' arguments (context.py imports nothing of this module)
    from sparserl.core.paths import Paths

    from .context import Context



REPRODUCED, INCONCLUSIVE, UNTESTABLE, CONTRADICTED, NOT_RUN = (
    "reproduced", "inconclusive", "untestable (single run)", "contradicted", "not run at this scale")
DIRECTION_ONLY, PREMISE_ABSENT = "direction only", "premise absent"
DIRECTION_STATUSES = (REPRODUCED, INCONCLUSIVE, UNTESTABLE, CONTRADICTED, NOT_RUN)
STATUSES = (REPRODUCED, DIRECTION_ONLY, INCONCLUSIVE, UNTESTABLE, PREMISE_ABSENT, CONTRADICTED, NOT_RUN)
# A scale-free quantity (an AUC, a % change of MSE, a coefficient) agrees with the paper's number
# when their ratio is within this factor; accuracy points never do (a 4B model's +10 points and a
# tiny policy's +2 are not one effect at two sizes), only the paper's number inside our interval.
MAGNITUDE_FACTOR = 2.0
IN_CI, WITHIN, OPPOSITE, NO_PAPER, NOT_MEASURED = (
    "in CI", f"within {MAGNITUDE_FACTOR:g}x", "opposite sign", "no paper number", "not measured")
PRESENT, ABSENT, UNCLEAR = "present", "absent", "unclear"
NI_FRACTION = 0.25  # a non-inferiority margin: a quarter of the compared method's own gain
POWER = 0.80        # the power of an inconclusive row's smallest detectable effect
BOOT = 2000
BOOT_SEED = 0

PAPERS = {"V0": "V0 (001)", "V0.5": "V0.5 (000)", "BASIS": "BASIS (004)", "Le Critique": "Le Critique (002)"}


@dataclass(frozen=True)
class Interval:
    value: float
    lo: float
    hi: float
    method: str          # how the interval was made
    detail: str = ""     # the arms' own numbers, for the reader


@dataclass(frozen=True)
class Claim:
    id: str
    paper: str                       # a key of PAPERS
    claim: str                       # the paper's wording (short quote)
    paper_number: str                # the paper's number, as it states it
    quantity: str                    # what we measure
    relation: str                    # ">" or "<"
    threshold: float
    target: str                      # figure id prefix (e.g. "basis/f3a"), resolved by the caller
    inputs: Callable[["Paths"], list]   # the tree's Paths -> artifact paths, or raise NotRun
    measure: Callable[["Context"], Interval]
    fmt: str = "{:.3f}"
    # the paper's number (or (lo, hi) range) on our scale, for magnitude_status; None where it gives none
    paper_value: float | tuple | None = None
    scale_free: bool = False         # an AUC, a % change, a coefficient: `magnitude` may use the factor
    premise: "Premise | None" = None  # the mechanism the claim rests on, measured
    margin: "Margin | None" = None   # a non-inferiority claim: its threshold, from the compared method


@dataclass(frozen=True)
class Premise:
    """A mechanism a claim rests on, measured here: `quantity relation threshold` must hold for the
    claim to be judged (`decide` on its interval: present, absent, or unclear)."""
    text: str
    quantity: str
    relation: str
    threshold: float
    inputs: Callable[["Paths"], list]
    measure: Callable[["Context"], Interval]
    fmt: str = "{:+.3f}"


@dataclass(frozen=True)
class Margin:
    """`A matches B` as non-inferiority: A - B > -NI_FRACTION x B's own gain (B over the start
    policy, or over chance), so the margin scales with what B achieves at this scale."""
    of: str                                     # whose gain, in words
    inputs: Callable[["Paths"], list]
    gain: Callable[["Context"], Interval]


def decide(lo: float, hi: float, relation: str, threshold: float) -> str:
    """The status of a claim `quantity <relation> threshold` given its interval [lo, hi]: reproduced
    or contradicted only when the interval excludes the threshold; no interval is untestable."""
    if relation not in (">", "<"):
        raise ValueError(f"relation must be '>' or '<', got {relation!r}")
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return UNTESTABLE
    if lo > hi:
        raise ValueError(f"interval [{lo}, {hi}] has lo > hi")
    above, below = lo > threshold, hi < threshold
    if relation == ">":
        return REPRODUCED if above else CONTRADICTED if below else INCONCLUSIVE
    return REPRODUCED if below else CONTRADICTED if above else INCONCLUSIVE


def _paper_range(value) -> tuple[float, float]:
    lo, hi = (value, value) if np.isscalar(value) else value
    lo, hi = float(lo), float(hi)
    if not (np.isfinite(lo) and np.isfinite(hi) and lo <= hi):
        raise ValueError(f"paper_value must be a finite number or a (lo, hi) range with lo <= hi, got {value!r}")
    return lo, hi


def magnitude(value: float, lo: float, hi: float, paper_value, scale_free: bool = True) -> tuple[str, float]:
    """The magnitude status of a measurement `value` [lo, hi] against the paper's number (or range),
    and measured / paper (the range's nearest end; NaN when undefined). The factor applies to
    scale-free quantities only; an accuracy gap agrees only when the paper's lies in our CI."""
    if paper_value is None:
        return NO_PAPER, np.nan
    plo, phi = _paper_range(paper_value)
    if not np.isfinite(value):
        return NOT_MEASURED, np.nan
    nearest = min(max(value, plo), phi)
    ratio = value / nearest if nearest != 0 else np.nan
    if np.isfinite(lo) and np.isfinite(hi) and phi >= lo and plo <= hi:
        return IN_CI, ratio
    if not np.isfinite(ratio) or ratio == 0:
        return f"off (measured {value:.3g}, paper {nearest:.3g})", ratio
    if ratio < 0:
        return OPPOSITE, ratio
    factor = max(ratio, 1 / ratio)
    if scale_free and factor <= MAGNITUDE_FACTOR:
        return WITHIN, ratio
    return f"off by {factor:.1f}x", ratio


def premise_status(iv: Interval, premise: Premise) -> str:
    """present when the premise's interval lies on its side of the threshold, absent when it lies
    on the other side, unclear otherwise (or with no interval)."""
    d = decide(iv.lo, iv.hi, premise.relation, premise.threshold)
    return PRESENT if d == REPRODUCED else ABSENT if d == CONTRADICTED else UNCLEAR


def overall(direction: str, magnitude_status: str, premise: str = "") -> str:
    """The row's status: not run; premise absent (the mechanism the claim rests on does not occur
    here, so the data cannot judge it); reproduced when the interval excludes the threshold on the
    claim's side and the paper's number is in our CI (or, scale-free, within the factor); direction
    only when the side is right but the paper gives no number or its number is off; otherwise
    inconclusive, untestable or contradicted, as `decide` said."""
    if direction not in DIRECTION_STATUSES:
        raise ValueError(f"direction status must be one of {DIRECTION_STATUSES}, got {direction!r}")
    if direction == NOT_RUN:
        return NOT_RUN
    if premise == ABSENT:
        return PREMISE_ABSENT
    if direction != REPRODUCED:
        return direction
    return REPRODUCED if magnitude_status in (IN_CI, WITHIN) else DIRECTION_ONLY


def detectable(lo: float, hi: float) -> float:
    """The smallest effect this interval's precision detects at POWER (two-sided, 95%):
    (z_.975 + z_power) x s.e., the s.e. read off the interval's half-width."""
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return np.nan
    z = normal_quantile(0.5 + LEVEL / 2)
    return float((z + normal_quantile(POWER)) * (hi - lo) / (2 * z))


# --------------------------------------------------------------------------- intervals

def seed_interval(a: pd.Series, b: pd.Series | None = None) -> Interval:
    """t interval over seeds of `a` (indexed by seed), or of a - b: paired on common seeds when
    both ran the same ones, Welch otherwise. One seed, or seeds that agree exactly (a handful of
    quantised rewards can), give no interval: NaN bounds, so `decide` says untestable."""
    if b is None:
        x, how = a.to_numpy(float), f"t over {len(a)} seeds"
    elif set(a.index) == set(b.index):
        x, how = (a - b.reindex(a.index)).to_numpy(float), f"paired t over {len(a)} seeds"
    else:
        x, how = None, f"Welch t over {len(a)} and {len(b)} seeds"
    if x is not None and len(x) < 2:
        return Interval(float(x.mean()), np.nan, np.nan, "1 seed: no interval")
    if x is None and min(len(a), len(b)) < 2:
        return Interval(float(a.mean() - b.mean()), np.nan, np.nan, how + " (1 seed in an arm: no interval)")
    m, lo, hi = t_interval(x) if x is not None else welch_interval(a.to_numpy(), b.to_numpy())
    if not hi - lo > 1e-9 * max(1.0, abs(m)):  # float noise of equal values is no spread
        return Interval(m, np.nan, np.nan, how + " (no spread across seeds: no interval)")
    return Interval(m, lo, hi, how)


def _percentile(boots: np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    q = (1 - level) / 2
    lo, hi = np.percentile(boots, [100 * q, 100 * (1 - q)])
    return float(lo), float(hi)


def stratified_bootstrap_diff(a: pd.DataFrame, b: pd.DataFrame | None, *, strata="benchmark", unit="id",
                              col="p", n_boot: int = BOOT, seed: int = BOOT_SEED) -> tuple[float, float, float]:
    """Mean over strata of the per-stratum mean of `col` in a (minus b's, paired on (stratum, unit)),
    with a percentile bootstrap that resamples units within each stratum."""
    rng = np.random.default_rng(seed)
    key = [strata, unit]
    if b is not None:
        m = a[key + [col]].merge(b[key + [col]], on=key, suffixes=("_a", "_b"), how="outer", indicator=True)
        if (m["_merge"] != "both").any():
            raise ValueError(f"the two per-problem tables hold different problems "
                             f"({int((m['_merge'] != 'both').sum())} unmatched)")
        m["_x"] = m[f"{col}_a"] - m[f"{col}_b"]
    else:
        m = a.assign(_x=a[col])
    point, boots = [], np.zeros(n_boot)
    groups = sorted(m.groupby(strata), key=lambda kv: str(kv[0]))
    for _, g in groups:
        x = g["_x"].to_numpy(float)
        point.append(x.mean())
        boots += x[rng.integers(0, len(x), size=(n_boot, len(x)))].mean(axis=1)
    boots /= len(groups)
    return float(np.mean(point)), *_percentile(boots)


def group_bootstrap(values_a: np.ndarray, values_b: np.ndarray | None = None, *, n_boot: int = BOOT,
                    seed: int = BOOT_SEED) -> tuple[float, float, float]:
    """Mean of per-group values (of a - b), percentile bootstrap over groups."""
    x = np.asarray(values_a, float) - (0.0 if values_b is None else np.asarray(values_b, float))
    rng = np.random.default_rng(seed)
    boots = x[rng.integers(0, len(x), size=(n_boot, len(x)))].mean(axis=1)
    return float(x.mean()), *_percentile(boots)
