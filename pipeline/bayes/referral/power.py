"""What a certified miss-rate rule can keep, given how many labelled admissions certify it: the exact test's floor.

The refer rule keeps the admissions whose ordering measure is at most a cut and certifies the cut when the kept,
unflagged deaths of its calibration set are few enough for the exact binomial test (``bounds``): with D deaths the
test at alpha and delta passes a cut only if its misses are at most k*(D), the largest k with
P(Binomial(D, alpha) <= k) <= delta (k* = 2 of 107 deaths at alpha 0.05, delta 0.1: an empirical miss rate of 1.9%
to certify 5%). For a population whose risks q are known (a synthetic world's truth) or trusted (a recalibrated
model's risks, as a plug-in), the rule's expected kept-unflagged share on n labelled admissions follows without
drawing: the misses of a cut are Binomial(D, m(c)), m(c) its true miss rate, so the cut is passed with probability
P(Binomial(D, m(c)) <= k*(D)) and, the misses growing with the cut, the certified cut reaches admission i of the
ranking exactly when the cut through i is passed:

    E[kept and unflagged] = sum_D P(D | n) sum_i (1 / M) P(Binomial(D, m_i) <= k*(D))

over the M admissions of the population, i running over the unflagged ones in the ranking's order (lowest
measure first) and m_i the true miss rate of the cut through i; D ~ Binomial(n, mean q). The oracle of the ranking
is the largest share it keeps with m_i <= alpha (what an infinite labelled set would certify).
``labelled_needed`` is the smallest n whose expected share comes within a margin of that oracle.

This is the floor of the exact test on a fine grid of cuts (the rule's own grid of ``N_CUTS`` quantiles makes it at
most one grid step lower). It is also the floor of any rule with the same promise: for one cut the binomial test is
the most powerful test of m(c) > alpha from the deaths' outcomes, and fixed-sequence testing loses nothing on a
monotone risk. A rule can only come closer to the oracle with more deaths, a larger alpha or delta, or an
assumption the promise does not make (e.g. that the model's risks are calibrated).
"""

from __future__ import annotations

import numpy as np
from scipy.stats import binom

from pipeline.bayes.referral.settings import ReferralError

POINTS = 512  # the ranking's positions evaluated (quantiles of the unflagged admissions): the sum above, thinned
N_MAX = 1_000_000  # labelled_needed searches up to this many labelled admissions


def certifiable_misses(deaths, alpha: float, delta: float) -> np.ndarray:
    """k*(D): the most misses among ``deaths`` that the exact test at alpha and delta still passes (-1: none)."""
    d = np.atleast_1d(np.asarray(deaths, dtype=np.int64))
    k = binom.ppf(delta, d, alpha)  # the smallest k with P(Bin(D, alpha) <= k) >= delta
    k = np.where(np.isnan(k), -1.0, k)
    k = np.where(binom.cdf(k, d, alpha) <= delta, k, k - 1.0)  # passes: P(Bin <= k) <= delta
    return k.astype(np.int64)


def miss_curve(q, rank, threshold: float) -> tuple[np.ndarray, np.ndarray]:
    """(share kept and unflagged, true miss rate) of the cut through each unflagged admission, in ranking order.

    ``q``: (M,) the population's risks; ``rank``: (M,) the ordering measure (kept when at most the cut); an admission
    is flagged (never missed) when its ``rank`` is at least ``threshold`` (the ranking by risk: raw or calibrated risk
    against the threshold on the same scale).
    """
    q = np.asarray(q, dtype=np.float64)
    rank = np.asarray(rank, dtype=np.float64)
    if q.shape != rank.shape or q.ndim != 1 or q.size == 0:
        raise ReferralError(f"risks {q.shape} and ranking {rank.shape}: one non-empty vector each")
    if q.sum() <= 0.0:
        raise ReferralError("the population's risks sum to 0: no death to miss")
    low = np.flatnonzero(rank < threshold)
    order = low[np.argsort(rank[low], kind="stable")]
    share = np.arange(1, order.size + 1, dtype=np.float64) / q.size  # (L,) kept and unflagged
    return share, np.cumsum(q[order]) / q.sum()  # (L,), (L,)


def oracle_share(q, rank, threshold: float, alpha: float) -> float:
    """The largest share kept and unflagged by a cut of the ranking whose true miss rate is at most alpha."""
    share, miss = miss_curve(q, rank, threshold)
    k = int(np.searchsorted(miss, alpha, side="right"))
    return float(share[k - 1]) if k else 0.0


def expected_share(q, rank, threshold: float, alpha: float, delta: float, n: int, points: int = POINTS) -> float:
    """The exact-test rule's expected kept-unflagged share when certified on ``n`` labelled admissions drawn from
    the population (module docstring)."""
    share, miss = miss_curve(q, rank, threshold)
    if share.size == 0 or n < 1:
        return 0.0
    idx = np.unique(np.linspace(0, share.size - 1, min(points, share.size)).round().astype(np.int64))
    width = np.diff(np.concatenate([[0.0], share[idx]]))  # (P,) the share each evaluated position stands for
    p_death = float(np.mean(np.asarray(q, dtype=np.float64)))
    lo, hi = binom.ppf([1e-7, 1.0 - 1e-7], n, p_death)
    d = np.arange(max(int(lo), 1), int(hi) + 1)  # (nD,) the likely numbers of deaths
    w = binom.pmf(d, n, p_death)
    k = certifiable_misses(d, alpha, delta)  # (nD,)
    passed = binom.cdf(k[:, None], d[:, None], miss[idx][None, :])  # (nD, P): the cut through position i passes
    passed = np.where(k[:, None] >= 0, passed, 0.0)
    return float((w @ (passed @ width)) / w.sum())


def labelled_needed(q, rank, threshold: float, alpha: float, delta: float, margin: float,
                    n_max: int = N_MAX) -> int | None:
    """The fewest labelled admissions (to 1%, by bisection) whose expected kept-unflagged share comes within
    ``margin`` of the oracle's (None: not within ``n_max``)."""
    goal = oracle_share(q, rank, threshold, alpha) - margin
    if goal <= 0.0:
        return 1
    if expected_share(q, rank, threshold, alpha, delta, n_max) < goal:
        return None
    lo, hi = 1, 100
    while expected_share(q, rank, threshold, alpha, delta, hi) < goal:
        lo, hi = hi, min(hi * 2, n_max)
    while hi - lo > max(1, lo // 100):
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if expected_share(q, rank, threshold, alpha, delta, mid) < goal else (lo, mid)
    return hi
