"""The rank test of one measure: a cohort against a reference sample, by Mann-Whitney U.

For a measure (the calibrated risk, the posterior's mutual information, ...) of n cohort admissions and m
reference admissions, the effect size is the AUROC of cohort against reference: P(X > Y) + P(X = Y) / 2 for X a
cohort value and Y a reference value (0.5: no difference in location; 1: every cohort value above every
reference one). It is U / (n m), U the Mann-Whitney statistic of the cohort, so the test and the effect size are
one computation (``scipy.stats.rankdata`` with mid-ranks for ties).

The p-value is the two-sided normal approximation with the tie correction of the variance and the continuity
correction (as ``scipy.stats.mannwhitneyu(method="asymptotic")``, the test's oracle in
tests/test_shift.py): valid, and accurate, for cohorts of ``MIN_COHORT`` admissions or more against a reference of
hundreds (the null false-alarm rate is measured there at the sizes the study uses). A measure constant over both
samples (a point model's mutual information) has no test: p = 1, AUROC 0.5.

**The smallest testable cohort** (``min_size``): the fewest cohort admissions at which the test *can* reach
p < level at all, i.e. whose most extreme outcome (every cohort value above, or below, every reference value, no
ties) has a p-value below it. It is a floor, not a recommendation: at that size only a complete separation is
detected. ``size_for`` is the size with a stated power for a stated AUROC (Noether's formula for the
Mann-Whitney test: n m / (n + m) >= (z_{1 - level/2} + z_{power})^2 / (12 (AUROC - 0.5)^2)).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr, ndtri
from scipy.stats import rankdata

MIN_COHORT = 20  # below this the normal approximation is not trusted: a cohort this small is not tested


@dataclass
class RankTest:
    """One measure's comparison: effect size and p-value."""

    auroc: float  # P(cohort value > reference value) + ties / 2 (0.5: no shift in location)
    z: float  # the standardized U statistic (continuity-corrected towards 0)
    p_value: float  # two-sided
    n: int  # cohort admissions
    m: int  # reference admissions

    def to_dict(self) -> dict:
        return {"auroc": float(self.auroc), "z": float(self.z), "p_value": float(self.p_value), "n": self.n,
                "m": self.m}


def _as_finite(x, name: str) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64).ravel()
    bad = np.flatnonzero(~np.isfinite(a))
    if bad.size:
        raise ValueError(f"{name}[{int(bad[0])}] = {float(a[bad[0]])!r}: a measure must be finite "
                         f"({bad.size} bad rows)")
    if a.size == 0:
        raise ValueError(f"{name}: no admissions")
    return a


def u_test(cohort, reference, name: str = "measure") -> RankTest:
    """The Mann-Whitney comparison of ``cohort`` (n,) against ``reference`` (m,) (module docstring)."""
    x = _as_finite(cohort, f"{name} of the cohort")
    y = _as_finite(reference, f"{name} of the reference")
    n, m = x.size, y.size
    both = np.concatenate([x, y])
    ranks = rankdata(both)  # mid-ranks for ties
    u = float(ranks[:n].sum() - n * (n + 1) / 2.0)
    auroc = u / (n * m)
    _, counts = np.unique(both, return_counts=True)
    big = n + m
    tie = float((counts.astype(np.float64) ** 3 - counts).sum())
    var = n * m / 12.0 * ((big + 1) - tie / (big * (big - 1)))
    if var <= 0.0:  # every value the same: nothing to test
        return RankTest(0.5, 0.0, 1.0, n, m)
    d = u - n * m / 2.0
    z = math.copysign(max(abs(d) - 0.5, 0.0), d) / math.sqrt(var)
    p = float(min(1.0, 2.0 * ndtr(-abs(z))))
    return RankTest(float(auroc), float(z), p, n, m)


def smallest_p(n: int, m: int) -> float:
    """The smallest two-sided p-value ``u_test`` can give n cohort and m reference admissions (complete separation,
    no ties)."""
    big = n + m
    z = (n * m / 2.0 - 0.5) / math.sqrt(n * m * (big + 1) / 12.0)
    return float(min(1.0, 2.0 * ndtr(-z)))


def min_size(m: int, level: float) -> int:
    """The fewest cohort admissions (at least ``MIN_COHORT``) whose complete separation from ``m`` reference
    admissions reaches p < ``level`` (module docstring); a reference too small for any cohort raises."""
    if smallest_p(10 ** 7, m) >= level:
        raise ValueError(f"a reference of {m} admissions cannot reach p < {level:g} with any cohort")
    lo, hi = 1, 1
    while smallest_p(hi, m) >= level:
        hi *= 2
    while lo < hi:  # smallest_p decreases in n
        mid = (lo + hi) // 2
        if smallest_p(mid, m) < level:
            hi = mid
        else:
            lo = mid + 1
    return max(lo, MIN_COHORT)


def size_for(auroc: float, m: int, level: float, power: float = 0.8) -> int | None:
    """The cohort size at which the two-sided test at ``level`` detects ``auroc`` against ``m`` reference
    admissions with probability ``power`` (Noether); None: no cohort size is enough with this reference."""
    gap = abs(float(auroc) - 0.5)
    if gap == 0.0:
        return None
    need = (ndtri(1.0 - level / 2.0) + ndtri(power)) ** 2 / (12.0 * gap * gap)  # n m / (n + m) >= need
    if need >= m:
        return None
    return max(int(math.ceil(need * m / (m - need))), MIN_COHORT)
