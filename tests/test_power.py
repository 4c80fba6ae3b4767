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


def _policy_and_new_period(seed: int = 3):
    from pipeline.bayes.referral import Predictive, ReferralConfig, fit_policy, recertify

    rng = np.random.default_rng(seed)

    def admissions(n, era):
        z = rng.normal(-2.3 + 0.4 * era, 1.2, n)
        draws = 1 / (1 + np.exp(-(z / 1.3 + 0.3 * rng.normal(size=(6, n)))))
        return (rng.random(n) < 1 / (1 + np.exp(-z))).astype(float), Predictive(draws.mean(0), draws=draws)

    ys, ps = admissions(2000, 0.0)
    yc, pc = admissions(2000, 0.0)
    policy = fit_policy(ps, ys, pc, yc, ReferralConfig(), seed=0)
    y_new, p_new = admissions(6000, 1.0)
    new = recertify(policy, Predictive(p_new.mean[:1500], draws=p_new.draws[:, :1500]), y_new[:1500],
                    reference=p_new)
    return new, p_new


def test_more_outcomes_of_a_recertified_policy_is_the_floor_on_its_own_risks():
    from pipeline.tasks.mortality.recertify import more_outcomes, more_outcomes_line

    new, pred = _policy_and_new_period()
    m = more_outcomes(new, pred, 1500, 160)
    cols = new.apply(pred)
    q, t = cols.risk_calibrated, new.threshold.threshold
    assert m["misses_allowed"] == int(power.certifiable_misses(160, 0.05, 0.1)[0])
    assert m["kept"] == pytest.approx(float((~cols.refer & ~cols.high_risk).mean()))
    assert m["oracle"] == pytest.approx(power.oracle_share(q, q, t, 0.05)) and m["admissions"] == 6000
    if m["needed"] is not None:
        assert power.expected_share(q, q, t, 0.05, 0.1, m["needed"]) >= m["oracle"] - 0.05
    line = more_outcomes_line(m)
    assert line.startswith(f"what more outcomes would buy: 160 deaths let the exact test pass a cut only if it "
                           f"misses at most {m['misses_allowed']} of them (")
    # a per-group rule is not what the floor describes
    import dataclasses

    grouped = dataclasses.replace(new, config=dataclasses.replace(new.config, group="age"))
    assert more_outcomes(grouped, pred, 1, 1) is None


HEAD = ("what more outcomes would buy: 112 deaths let the exact test pass a cut only if it misses at most 2 of them "
        "(1.8%, ")


@pytest.mark.parametrize("m,says", [
    ({"kept": 0.169, "oracle": 0.289, "needed": 4613},
     "would keep 28.9% of these 7,334 admissions unflagged, the rule keeps 16.9%: about 4,700 labelled admissions "
     "would come within 5% of it, in expectation (these were 1,000)"),
    ({"kept": 0.25, "oracle": 0.289, "needed": None}, "the rule keeps 25.0%: within 5% of it already"),
    ({"kept": 0.263, "oracle": 0.237, "needed": None},
     "would put a perfect cut of the rule's ranking at 23.7% of these 7,334 admissions, below the 26.3% the rule "
     "keeps: they are not right enough at the low risks to say more"),
    ({"kept": 0.1, "oracle": 0.289, "needed": None},
     "no labelled set up to 1,000,000 admissions comes within 5% of it"),
    ({"kept": 0.1, "oracle": None, "needed": None}, "to promise 5%)")])
def test_more_outcomes_line_says_each_case(m, says):
    from pipeline.tasks.mortality.recertify import more_outcomes_line

    line = more_outcomes_line({**m, "margin": 0.05, "admissions": 7334, "labelled": 1000, "deaths": 112,
                               "misses_allowed": 2, "alpha": 0.05})
    assert line.startswith(HEAD) and line.endswith(says), line


def test_more_outcomes_line_when_no_cut_can_pass():
    from pipeline.tasks.mortality.recertify import more_outcomes_line

    line = more_outcomes_line({"kept": 0.0, "oracle": None, "needed": None, "margin": 0.05, "admissions": 10,
                               "labelled": 10, "deaths": 3, "misses_allowed": -1, "alpha": 0.05,
                               "outcomes": "hospital readmissions within 30 days"})
    assert line == ("what more outcomes would buy: 3 hospital readmissions within 30 days let the exact test pass no "
                    "cut at 5%")
