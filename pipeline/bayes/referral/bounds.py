"""The p-values of the refer rule's tests, the fewest calibration units that can certify a level, the cut grid.

For one candidate cut c, the null hypothesis is H_c: R(c) > alpha, R(c) the population risk of the
admissions the cut keeps. Rejecting H_c at level delta certifies R(c) <= alpha.

- Miss rate (a binary loss per death): given the D calibration deaths, each is missed at c (kept and not
  flagged) independently with probability R(c), so the misses are Binomial(D, R(c)) and
  p = P(Binomial(D, alpha) <= misses) is exact (the binomial tail; it is the Bentkus bound with the factor
  1 that Learn-then-Test gives binary losses, and always below the Hoeffding one).
- A loss bounded in [0, 1] (the Brier score of the kept): given the n kept admissions, their losses are
  independent with mean R(c); the Hoeffding-Bentkus p-value of Bates et al. (2021), used by Learn-then-Test
  (Angelopoulos et al. 2021, section 3), is min(exp(-n h(min(r, alpha), alpha)),
  e * P(Binomial(n, alpha) <= ceil(n r))), r the mean loss and h(a, b) = a log(a/b) + (1-a) log((1-a)/(1-b)).
  With no admission kept it is 1 (nothing can be said).

The fewest units that can certify alpha at delta is the smallest n with (1 - alpha)^n <= delta, the
p-value of n units with no loss at all: log(delta) / log(1 - alpha) rounded up (45 at alpha = 0.05,
delta = 0.1). For the miss rate the units are deaths; for the Brier score, kept admissions.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import binom


def binomial_p_value(misses, deaths: int, alpha: float) -> np.ndarray:
    """P(Binomial(deaths, alpha) <= misses), elementwise over ``misses``."""
    return binom.cdf(np.asarray(misses, dtype=np.float64), int(deaths), float(alpha))


def _h1(a: np.ndarray, b: float) -> np.ndarray:
    """a log(a/b) + (1-a) log((1-a)/(1-b)) with 0 log 0 = 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        left = np.where(a > 0.0, a * np.log(a / b), 0.0)
        right = np.where(a < 1.0, (1.0 - a) * np.log((1.0 - a) / (1.0 - b)), 0.0)
    return left + right


def hb_p_value(mean_loss, n, alpha: float) -> np.ndarray:
    """The Hoeffding-Bentkus p-value of H: mean > alpha, from ``n`` losses in [0, 1] of mean ``mean_loss``.

    Elementwise over ``mean_loss`` and ``n`` (broadcast); 1 where n = 0.
    """
    r = np.asarray(mean_loss, dtype=np.float64)
    m = np.asarray(n, dtype=np.float64)
    r, m = np.broadcast_arrays(r, m)
    hoeffding = np.exp(-m * _h1(np.minimum(r, alpha), float(alpha)))
    bentkus = math.e * binom.cdf(np.ceil(m * r - 1e-9), m, float(alpha))  # the tolerance: n r exact counts
    return np.where(m > 0, np.minimum(hoeffding, bentkus), 1.0)


def required_size(alpha: float, delta: float) -> int:
    """The fewest units (deaths, or kept admissions) that can certify ``alpha`` at ``delta``: (1-alpha)^n <= delta."""
    return int(math.ceil(math.log(delta) / math.log1p(-alpha) - 1e-9))


def cut_grid(reference, n_cuts: int) -> np.ndarray:
    """Candidate cuts, increasing: the distinct ``n_cuts`` quantiles of ``reference`` (values it holds), then +inf.

    A cut c keeps the admissions whose measure is <= c; +inf keeps every one.
    """
    u = np.asarray(reference, dtype=np.float64)
    q = np.quantile(u, np.linspace(0.0, 1.0, int(n_cuts)), method="inverted_cdf")
    return np.append(np.unique(q), np.inf)
