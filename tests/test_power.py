"""The exact test's floor (pipeline.bayes.referral.power): k*(D) by brute force, the oracle by a loop, and the
expected kept-unflagged share against the real rule (``fit_refer_rule``) fitted on drawn labelled sets."""

import numpy as np
import pytest
from scipy.stats import binom

from pipeline.bayes.referral import Reference, ReferralError, fit_refer_rule, power


def _world(m: int = 6000, seed: int = 0):
    rng = np.random.default_rng(seed)
    q = rng.beta(0.6, 6.0, size=m)  # (M,) true risks, mean about 0.09
    rank = np.clip(q * np.exp(rng.normal(0.0, 0.5, size=m)), 0.0, 1.0)  # (M,) a noisy model's risks
    return q, rank


@pytest.mark.parametrize("deaths,alpha,delta", [(107, 0.05, 0.1), (45, 0.05, 0.1), (44, 0.05, 0.1), (500, 0.1, 0.05),
                                                (10, 0.05, 0.1), (214, 0.05, 0.1)])
def test_certifiable_misses_is_the_largest_k_the_test_passes(deaths, alpha, delta):
    passing = [k for k in range(deaths + 1) if binom.cdf(k, deaths, alpha) <= delta]
    assert int(power.certifiable_misses(deaths, alpha, delta)[0]) == (passing[-1] if passing else -1)


def test_certifiable_misses_at_the_issue_numbers():
    # 107 deaths at alpha 0.05, delta 0.1: 2 misses (1.9%) to certify 5%; 44 deaths cannot certify at all
    assert power.certifiable_misses([107, 44, 45], 0.05, 0.1).tolist() == [2, -1, 0]


def test_oracle_share_by_a_loop():
    q, rank = _world(800, 1)
    t = 0.3
    best = 0.0
    for c in np.sort(rank):
        kept = (rank <= c) & (rank < t)
        if q[kept].sum() / q.sum() <= 0.05:
            best = max(best, kept.mean())
    assert power.oracle_share(q, rank, t, 0.05) == pytest.approx(best)


def test_expected_share_matches_the_rule_fitted_on_drawn_labelled_sets():
    q, rank = _world()
    t, alpha, delta, n, draws = 0.35, 0.05, 0.1, 1500, 300
    rng = np.random.default_rng(7)
    kept = []
    for _ in range(draws):
        idx = rng.permutation(q.size)
        cal, rest = idx[:n], idx[n:]
        y = (rng.random(n) < q[cal]).astype(np.float64)
        rule = fit_refer_rule(rank[cal], rank[cal], y, t, reference=Reference(rank[rest], rank[rest]), strict=False)
        keep = ~rule.refer(rank) & (rank < t)
        kept.append(keep.mean())
    kept = np.asarray(kept)
    expected = power.expected_share(q, rank, t, alpha, delta, n)
    # Monte Carlo error of the mean plus one grid step of the rule's 2,000 quantile cuts
    assert abs(kept.mean() - expected) <= 3 * kept.std(ddof=1) / np.sqrt(draws) + 1.0 / 2000 + 0.003
    assert 0.0 < expected < power.oracle_share(q, rank, t, alpha)


def test_expected_share_grows_with_the_labelled_set_towards_the_oracle():
    q, rank = _world()
    t = 0.35
    shares = [power.expected_share(q, rank, t, 0.05, 0.1, n) for n in (300, 1000, 3000, 10000, 100000)]
    assert shares[0] == pytest.approx(0.0, abs=0.02)  # about 27 deaths: fewer than the 45 that can certify
    assert all(b > a for a, b in zip(shares[1:], shares[2:]))
    assert power.oracle_share(q, rank, t, 0.05) - shares[-1] < 0.02


def test_labelled_needed_is_the_first_size_within_the_margin():
    q, rank = _world()
    t, margin = 0.35, 0.05
    goal = power.oracle_share(q, rank, t, 0.05) - margin
    n = power.labelled_needed(q, rank, t, 0.05, 0.1, margin)
    assert n is not None
    assert power.expected_share(q, rank, t, 0.05, 0.1, n) >= goal
    assert power.expected_share(q, rank, t, 0.05, 0.1, int(n * 0.97)) < goal
    assert power.labelled_needed(q, rank, t, 0.05, 0.1, margin, n_max=n // 2) is None


def test_bad_input_says_what():
    with pytest.raises(ReferralError, match="one non-empty vector each"):
        power.oracle_share(np.ones(3), np.ones(4), 0.5, 0.05)
    with pytest.raises(ReferralError, match="sum to 0"):
        power.expected_share(np.zeros(3), np.ones(3), 0.5, 0.05, 0.1, 100)
