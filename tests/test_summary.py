"""pipeline.bayes.metrics.summary: summaries of draws and of a Gaussian logit; uncertainty against the truth."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from pipeline.bayes import metrics
from pipeline.bayes.metrics.summary import Summary, gaussian_sigmoid_moments, kept_error, referral_gain


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


@pytest.mark.parametrize("mu,sigma", [(0.0, 1.0), (-3.0, 0.5), (2.5, 3.0), (-6.0, 2.0), (0.3, 0.01)])
def test_gauss_hermite_moments_match_monte_carlo(mu, sigma):
    rng = np.random.default_rng(0)
    f = mu + sigma * rng.standard_normal(2_000_000)
    p = _sigmoid(f)
    h = -(p * np.log(p) + (1 - p) * np.log1p(-p))
    m1, m2, eh = gaussian_sigmoid_moments(np.array([mu]), np.array([sigma]))
    se = lambda v: 5 * v.std() / np.sqrt(v.size) + 1e-12  # noqa: E731  (5 standard errors of the MC mean)
    assert abs(m1[0] - p.mean()) < se(p)
    assert abs(m2[0] - (p * p).mean()) < se(p * p)
    assert abs(eh[0] - h.mean()) < se(h)


def test_from_gaussian_percentiles_exact_and_zero_spread_is_said():
    mu = np.array([-2.0, 0.5, 1.0])
    var = np.array([0.64, 2.25, 0.0])
    s = Summary.from_gaussian(mu, var)
    sigma = np.sqrt(var)
    assert np.allclose(s.p05, _sigmoid(mu - 1.6448536269514722 * sigma), rtol=0, atol=1e-15)
    assert np.allclose(s.p95, _sigmoid(mu + 1.6448536269514722 * sigma), rtol=0, atol=1e-15)
    assert list(s.spread) == [True, True, False]
    assert s.sd[2] == 0.0 and s.mutual_info[2] == 0.0 and s.p05[2] == s.p95[2]
    assert np.all(s.sd[:2] > 0) and np.all(s.mutual_info[:2] > 0)
    assert np.all(s.p05[:2] < s.mean[:2]) and np.all(s.mean[:2] < s.p95[:2])
    # the published mean can be another predictive (the probit); the entropy follows it
    probit = _sigmoid(mu / np.sqrt(1 + np.pi * var / 8))
    sp = Summary.from_gaussian(mu, var, mean=probit)
    assert np.array_equal(sp.mean, probit) and np.array_equal(sp.sd, s.sd)
    assert np.allclose(sp.entropy, -(probit * np.log(probit) + (1 - probit) * np.log1p(-probit)))


def test_from_gaussian_matches_monte_carlo_draws():
    rng = np.random.default_rng(1)
    mu, var = np.array([-1.5, 0.2]), np.array([1.0, 0.25])
    draws = mu + np.sqrt(var) * rng.standard_normal((400_000, 2))  # (D, N)
    a, b = Summary.from_gaussian(mu, var), Summary.from_draws(draws)
    assert np.allclose(a.mean, b.mean, atol=2e-3)
    assert np.allclose(a.sd, b.sd, atol=2e-3)
    assert np.allclose(a.mutual_info, b.mutual_info, atol=2e-3)
    assert np.allclose(a.p05, b.p05, atol=3e-3) and np.allclose(a.p95, b.p95, atol=3e-3)


@pytest.mark.parametrize("bad", [(np.array([np.nan]), np.array([1.0])), (np.array([0.0]), np.array([-1.0]))])
def test_from_gaussian_rejects_bad_moments(bad):
    with pytest.raises(ValueError, match="admission 0"):
        Summary.from_gaussian(*bad)


def test_from_draws_identical_draws_have_no_spread():
    x = np.tile(np.array([[-1.0, 0.0, 2.0]]), (5, 1))
    s = Summary.from_draws(x)
    assert not s.spread.any() and np.all(s.sd == 0) and np.all(s.mutual_info == 0)
    assert np.all(s.entropy > 0)
    assert np.array_equal(s.measure("band"), np.zeros(3))
    y = x.copy()
    y[0, 1] += 0.1
    assert list(Summary.from_draws(y).spread) == [False, True, False]


def test_measures_read_the_columns():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(40, 7))
    s = Summary.from_draws(x)
    assert np.array_equal(s.measure("mi"), metrics.mutual_information(x))
    assert np.array_equal(s.measure("sd"), metrics.predictive_sd(x))
    assert np.array_equal(s.measure("entropy"), metrics.predictive_entropy(x))
    assert np.allclose(s.measure("band"), metrics.predictive_band(x))
    with pytest.raises(ValueError):
        s.measure("nope")


def test_kl_to_truth():
    t = np.array([0.1, 0.5, 0.0, 1.0])
    assert np.allclose(metrics.kl_to_truth(t, t), 0.0, atol=1e-9)
    p = np.array([0.2, 0.4, 0.1, 0.9])
    expect = [0.1 * np.log(0.1 / 0.2) + 0.9 * np.log(0.9 / 0.8), 0.5 * np.log(0.5 / 0.4) + 0.5 * np.log(0.5 / 0.6),
              np.log(1 / 0.9), np.log(1 / 0.9)]
    assert np.allclose(metrics.kl_to_truth(t, p), expect)


def test_spearman_matches_scipy_with_ties():
    rng = np.random.default_rng(3)
    a = rng.integers(0, 5, 300).astype(float)
    b = a + rng.normal(size=300)
    assert metrics.spearman(a, b) == pytest.approx(stats.spearmanr(a, b).statistic, abs=1e-12)
    assert np.isnan(metrics.spearman(np.ones(5), np.arange(5.0)))


def test_referral_gain_is_one_when_uncertainty_is_the_error_and_zero_for_noise():
    rng = np.random.default_rng(4)
    error = rng.gamma(0.5, 1.0, 20_000)
    assert referral_gain(error, error) == pytest.approx(1.0)
    assert referral_gain(error, 3 * error + 1) == pytest.approx(1.0)  # any increasing function: same ranking
    noise = [referral_gain(error, rng.random(error.size)) for _ in range(5)]
    assert abs(float(np.mean(noise))) < 0.02
    assert referral_gain(error, np.zeros_like(error)) == pytest.approx(0.0, abs=1e-12)  # ties: in expectation
    assert referral_gain(error, -error) < -0.5  # refers the admissions the model gets right


def test_kept_error_ties_are_referred_in_expectation():
    error = np.array([4.0, 0.0, 2.0, 2.0])
    score = np.array([1.0, 1.0, 0.0, 0.0])  # two tied at the top
    # refer 1 of 4: half of each top admission's error leaves: (8 - 2) / 3
    assert kept_error(error, score, [0.25])[0] == pytest.approx(6.0 / 3.0)
    assert kept_error(error, score, [0.5])[0] == pytest.approx(2.0)
    assert kept_error(error, score, [0.0])[0] == pytest.approx(2.0)


def test_uncertainty_vs_truth_report():
    rng = np.random.default_rng(5)
    truth = rng.uniform(0.01, 0.6, 500)
    logits = np.log(truth / (1 - truth)) + rng.normal(0, 0.3, (20, 500))  # (D, N)
    out = metrics.uncertainty_vs_truth(Summary.from_draws(logits), truth)
    assert set(out["measures"]) == {"mi", "sd", "entropy", "band"}
    for m in out["measures"].values():
        assert -1 <= m["spearman"] <= 1 and m["referral_gain"] is not None
        assert len(m["kept_error"]) == len(out["fractions"]) == 11
    assert out["best"] == max(out["measures"], key=lambda k: out["measures"][k]["referral_gain"])
    assert out["oracle"][0] == pytest.approx(out["mean_error"]) and out["oracle"][-1] < out["mean_error"]
