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
``labelled_needed`` is the smallest n whose expected share comes within a margin of that oracle. ``MissCurve`` sorts
the ranking once and answers all three; the functions are one-question shorthands for it.

This is the floor of the exact test on a fine grid of cuts (the rule's own grid of ``N_CUTS`` quantiles makes it at
most one grid step lower). It is also the floor of any rule with the same promise: for one cut the binomial test is
the most powerful test of m(c) > alpha from the deaths' outcomes, and fixed-sequence testing loses nothing on a
monotone risk. A rule can only come closer to the oracle with more deaths, a larger alpha or delta, or an
assumption the promise does not make (e.g. that the model's risks are calibrated).
"""

from __future__ import annotations

from dataclasses import dataclass

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


@dataclass(frozen=True)
class MissCurve:
    """A population's ranking as the floor reads it: the cut through each unflagged admission, in ranking order
    (built once by ``of``; the floor's questions below are asked of it without sorting again)."""

    share: np.ndarray  # (L,) share of the population kept and unflagged by the cut through each unflagged admission
    miss: np.ndarray  # (L,) that cut's true miss rate (its kept deaths over all deaths)
    p_death: float  # the population's mean risk: a labelled admission's chance of a death

    @classmethod
    def of(cls, q, rank, threshold: float) -> MissCurve:
        """``q``: (M,) the population's risks; ``rank``: (M,) the ordering measure (kept when at most the cut); an
        admission is flagged (never missed) when its ``rank`` is at least ``threshold`` (the ranking by risk: raw or
        calibrated risk against the threshold on the same scale)."""
        q = np.asarray(q, dtype=np.float64)
        rank = np.asarray(rank, dtype=np.float64)
        if q.shape != rank.shape or q.ndim != 1 or q.size == 0:
            raise ReferralError(f"risks {q.shape} and ranking {rank.shape}: one non-empty vector each")
        if q.sum() <= 0.0:
            raise ReferralError("the population's risks sum to 0: no death to miss")
        low = np.flatnonzero(rank < threshold)
        order = low[np.argsort(rank[low], kind="stable")]
        share = np.arange(1, order.size + 1, dtype=np.float64) / q.size  # (L,)
        return cls(share, np.cumsum(q[order]) / q.sum(), float(q.mean()))

    def oracle(self, alpha: float) -> float:
        """The largest share kept and unflagged by a cut whose true miss rate is at most alpha."""
        k = int(np.searchsorted(self.miss, alpha, side="right"))
        return float(self.share[k - 1]) if k else 0.0

    def expected(self, alpha: float, delta: float, n: int, points: int = POINTS) -> float:
        """The exact-test rule's expected kept-unflagged share when certified on ``n`` labelled admissions drawn
        from the population (module docstring)."""
        if self.share.size == 0 or n < 1:
            return 0.0
        idx = np.unique(np.linspace(0, self.share.size - 1, min(points, self.share.size)).round().astype(np.int64))
        width = np.diff(np.concatenate([[0.0], self.share[idx]]))  # (P,) the share each evaluated position stands for
        lo, hi = binom.ppf([1e-7, 1.0 - 1e-7], n, self.p_death)
        d = np.arange(max(int(lo), 1), int(hi) + 1)  # (nD,) the likely numbers of deaths
        w = binom.pmf(d, n, self.p_death)
        k = certifiable_misses(d, alpha, delta)  # (nD,)
        passed = binom.cdf(k[:, None], d[:, None], self.miss[idx][None, :])  # (nD, P): the cut through i passes
        passed = np.where(k[:, None] >= 0, passed, 0.0)
        return float((w @ (passed @ width)) / w.sum())

    def needed(self, alpha: float, delta: float, margin: float, n_max: int = N_MAX) -> int | None:
        """The fewest labelled admissions (to 1%, by bisection) whose expected kept-unflagged share comes within
        ``margin`` of the oracle's (None: not within ``n_max``)."""
        goal = self.oracle(alpha) - margin
        if goal <= 0.0:
            return 1
        if self.expected(alpha, delta, n_max) < goal:
            return None
        lo, hi = 1, 100
        while self.expected(alpha, delta, hi) < goal:
            lo, hi = hi, min(hi * 2, n_max)
        while hi - lo > max(1, lo // 100):
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if self.expected(alpha, delta, mid) < goal else (lo, mid)
        return hi


def oracle_share(q, rank, threshold: float, alpha: float) -> float:
    """``MissCurve.oracle`` of the ranking ``rank`` of the population ``q``."""
    return MissCurve.of(q, rank, threshold).oracle(alpha)


def expected_share(q, rank, threshold: float, alpha: float, delta: float, n: int, points: int = POINTS) -> float:
    """``MissCurve.expected`` of the ranking ``rank`` of the population ``q``."""
    return MissCurve.of(q, rank, threshold).expected(alpha, delta, n, points)


def labelled_needed(q, rank, threshold: float, alpha: float, delta: float, margin: float,
                    n_max: int = N_MAX) -> int | None:
    """``MissCurve.needed`` of the ranking ``rank`` of the population ``q``."""
    return MissCurve.of(q, rank, threshold).needed(alpha, delta, margin, n_max)
