"""An anytime-valid confidence sequence for a rate, from counts: the mixture of constant bets.

For outcomes X_1, X_2, ... in {0, 1} and a level m, the bettor who stakes a share c of its wealth on X = 1 at the
fair odds of H0: E[X_i | past] <= m multiplies its wealth by 1 - c + c / m when X_i = 1 and by 1 - c when X_i = 0
(the betting martingale of Waudby-Smith & Ramdas 2023 with lambda = c / m). Under H0 each factor has expectation
1 - c + c p_i / m <= 1, so the wealth is a non-negative supermartingale and, by Ville's inequality, the chance it
*ever* reaches 1 / delta is at most delta: a test valid at every stopping time, under any dependence between the
outcomes, as long as each one's conditional probability is at most m.

No single c is right for every alternative, so the wealth is mixed over c ~ Beta(1, b) (a mixture of
supermartingales is one). With p = m + (1 - m) c the mixture is a Beta integral, closed in the counts S (ones) and
F (zeros) (Robbins' mixture; Howard et al. 2021's one-sided beta-binomial boundary is the same construction):

    K(m) = b B(S + 1, F + b) Ibar_m(S + 1, F + b) / (m^S (1 - m)^(F + b)),

Ibar the regularised upper incomplete Beta function. K(m) decreases in m (each bet's factor does, and the mixing
does not depend on m), so the lower confidence bound L = inf{m : K(m) < 1 / delta} is one root, and "L > m0" is
"K(m0) >= 1 / delta". The upper bound is the same for 1 - X. Each bound alone holds with probability 1 - delta at
every time at once.

b sets which alternatives the mixture expects: the growth-optimal bet against a true rate p is c* = (p - m) / (1 -
m), and ``prior_b(m, ratio)`` gives the Beta(1, b) whose mean is c* for p = ratio m (ratio 2: a promise broken
twice over). Any b > 0 is valid; b only moves the power.
"""

from __future__ import annotations

import numpy as np
from scipy.special import betaincc, betaln


def prior_b(m: float, ratio: float = 2.0) -> float:
    """The Beta(1, b) mixing prior's b whose mean bet is growth-optimal against a rate of ``ratio`` m."""
    if not 0.0 < m < 1.0 or ratio <= 1.0 or ratio * m >= 1.0:
        raise ValueError(f"prior_b: need 0 < m < ratio m < 1 and ratio > 1, got m {m!r}, ratio {ratio!r}")
    c = (ratio * m - m) / (1.0 - m)
    return 1.0 / c - 1.0


def log_wealth(ones, zeros, m, b: float) -> np.ndarray:
    """log K(m) of the mixture against H0: rate <= ``m`` after ``ones`` and ``zeros`` outcomes (elementwise)."""
    s = np.asarray(ones, dtype=np.float64)
    f = np.asarray(zeros, dtype=np.float64)
    m = np.asarray(m, dtype=np.float64)
    with np.errstate(divide="ignore"):
        tail = np.log(betaincc(s + 1.0, f + b, m))
    return np.log(b) + betaln(s + 1.0, f + b) + tail - s * np.log(m) - (f + b) * np.log1p(-m)


def lower_bound(ones: int, zeros: int, delta: float, b: float, iterations: int = 60) -> float:
    """inf{m : K(m) < 1 / delta}: the rate's lower confidence bound (0 when no level is rejected)."""
    target = np.log(1.0 / delta)
    lo, hi = 1e-12, 1.0 - 1e-12
    if log_wealth(ones, zeros, lo, b) < target:
        return 0.0
    if log_wealth(ones, zeros, hi, b) >= target:
        return 1.0
    for _ in range(iterations):  # K decreases in m: bisection on the rejected side
        mid = 0.5 * (lo + hi)
        if log_wealth(ones, zeros, mid, b) >= target:
            lo = mid
        else:
            hi = mid
    return float(lo)


def upper_bound(ones: int, zeros: int, delta: float, b: float) -> float:
    """The rate's upper confidence bound: 1 - the lower bound of 1 - X."""
    return 1.0 - lower_bound(zeros, ones, delta, b)
