"""Re-certification: the importance-weighted refer rule (referral.weighted) checked against the truth of a covariate-
shift world where the unweighted rule breaks its promise, its lower bound against a direct inversion, its refusal of a
set too small; and ``recertify`` (referral.recertify) on new labelled admissions."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pipeline.bayes.referral import (
    CalibrationTooSmall,
    Policy,
    Predictive,
    Reference,
    ReferralConfig,
    ReferralError,
    ReferSettings,
    Risk,
    Status,
    fit_policy,
    fit_refer_rule,
    fit_weighted_refer_rule,
    mean_lower_bound,
    needed_deaths,
    recertify,
    required_size,
)
from pipeline.bayes.referral.bounds import hb_p_value
from pipeline.bayes.referral.check import true_kept_risk


def test_the_weights_mean_lower_bound_inverts_the_hoeffding_bentkus_p_value():
    rng = np.random.default_rng(0)
    for n in (30, 300):
        x = rng.beta(2, 5, n)
        lo = mean_lower_bound(x, 0.05)
        grid = np.linspace(0.0, 1.0, 2001)[1:-1]  # candidate upper bounds of the mean of 1 - x
        p = np.array([float(hb_p_value(np.mean(1 - x), n, a)) for a in grid])
        ucb = grid[np.flatnonzero(p <= 0.05)[0]]
        assert lo == pytest.approx(1 - ucb, abs=1e-3) and lo < x.mean()


def test_equal_weights_cost_a_little_more_than_the_unweighted_rule():
    assert needed_deaths(1.0, 0.05, 0.1, 10) > required_size(0.05, 0.1)
    assert needed_deaths(0.5, 0.05, 0.1, 10) > 2 * required_size(0.05, 0.1)  # W / mean weight 2: about twice
    rng = np.random.default_rng(1)
    n = 8000
    r = 1 / (1 + np.exp(-rng.normal(-2.4, 1.2, n)))
    y = (rng.random(n) < r).astype(float)
    plain = fit_refer_rule(r, r, y, 0.3)
    weighted = fit_weighted_refer_rule(r, r, y, np.ones(n), 0.3, max_weight=1.0)
    assert plain.overall.status is Status.CERTIFIED and weighted.rule.overall.status is Status.CERTIFIED
    assert weighted.rule.overall.cut <= plain.overall.cut and weighted.ess_deaths == pytest.approx(y.sum())


def _world(rng, n: int, mean: float):
    """Covariate x ~ N(mean, 1); true risk q(x) = sigmoid(-2.6 + 1.2 x), the same in every population; the model's
    risk a noisy q."""
    x = rng.normal(mean, 1.0, n)
    q = 1 / (1 + np.exp(-(-2.6 + 1.2 * x)))
    r = np.clip(q * np.exp(rng.normal(0, 0.25, n)), 1e-4, 0.999)
    return x, q, r


def test_under_covariate_shift_the_weighted_rule_keeps_the_promise_where_the_unweighted_breaks_it():
    """Calibration x ~ N(0, 1), the new population N(-0.8, 1) (lower risk: more of its deaths fall among the kept
    admissions). The true likelihood ratio w(x) = exp(-0.8 x - 0.32). Over 100 calibration sets, the share whose
    true new-population kept miss rate exceeds alpha: at most delta (within its Monte Carlo error) for the weighted
    rule, above it for the unweighted one."""
    rng = np.random.default_rng(2)
    x_new, q_new, r_new = _world(rng, 40_000, -0.8)
    t, s = 0.15, ReferSettings(alpha=0.1, delta=0.1)
    ref = Reference(r_new, r_new)  # the new population's label-free risks give the cuts
    above = {"weighted": 0, "plain": 0}
    kept = []
    reps = 100
    for _ in range(reps):
        x, q, r = _world(rng, 8000, 0.0)
        y = (rng.random(x.size) < q).astype(float)
        w = np.exp(-0.8 * x - 0.32)
        wr = fit_weighted_refer_rule(r, r, y, w, t, s, reference=ref, max_weight=5.0)
        plain = fit_refer_rule(r, r, y, t, s, reference=ref)
        for name, referred in (("weighted", wr.refer(r_new)), ("plain", plain.refer(r_new))):
            above[name] += true_kept_risk(q_new, r_new, ~referred, t, Risk.MISS) > s.alpha
        kept.append(float((~wr.refer(r_new)).mean()))
    se = np.sqrt(0.1 * 0.9 / reps)
    assert above["weighted"] / reps <= s.delta + 2 * se, above
    assert above["plain"] / reps > s.delta + 2 * se, above
    assert np.mean(kept) > 0.1  # and it still keeps admissions: a useful promise, not refer-all


def test_a_set_too_small_is_refused_with_the_size_it_needs():
    rng = np.random.default_rng(3)
    x, q, r = _world(rng, 600, 0.0)
    y = (rng.random(x.size) < q).astype(float)
    w = np.exp(-0.8 * x - 0.32)
    with pytest.raises(CalibrationTooSmall, match="re-weighted .* needs at least .* calibration deaths") as exc:
        fit_weighted_refer_rule(r, r, y, w, 0.15)
    assert exc.value.needed > exc.value.have == int(y.sum())
    soft = fit_weighted_refer_rule(r, r, y, w, 0.15, strict=False)
    assert soft.rule.overall.status is Status.TOO_SMALL and soft.refer(r).all()
    assert f"needs at least {exc.value.needed:,} calibration deaths" in soft.sentence()
    again = type(soft).from_dict(json.loads(json.dumps(soft.to_dict())))
    assert again.rule.overall.needed == soft.rule.overall.needed and again.sentence() == soft.sentence()


def test_bad_weights_and_other_risks_are_refused():
    r = np.full(10, 0.1)
    y = np.r_[np.ones(2), np.zeros(8)]
    with pytest.raises(ReferralError, match="weights: need"):
        fit_weighted_refer_rule(r, r, y, np.r_[np.ones(9), -1.0], 0.3)
    with pytest.raises(ReferralError, match="miss rate only"):
        fit_weighted_refer_rule(r, r, y, np.ones(10), 0.3, ReferSettings(risk=Risk.BRIER))


# ---------------------------------------------------------------------------- recertify


def _era(n: int, seed: int, scale: float, shift: float = 0.0):
    """Admissions of true logit z; the model's draws around z / scale + shift (another era: other scale, shift)."""
    rng = np.random.default_rng(seed)
    z = rng.normal(-2.3, 1.3, n)
    y = (rng.random(n) < 1 / (1 + np.exp(-z))).astype(float)
    d = 1 / (1 + np.exp(-(z / scale + shift + 0.3 * rng.normal(size=(20, n)))))
    return Predictive(d.mean(axis=0), draws=d), y


def test_recertify_keeps_the_run_flags_and_refits_the_map_and_the_rule_on_all_new_admissions():
    sel, ys = _era(3000, 0, 1.6)
    cal, yc = _era(3000, 1, 1.6)
    policy = fit_policy(sel, ys, cal, yc, ReferralConfig(calibration="platt"), seed=0)
    new, yn = _era(3000, 2, 1.0, shift=0.8)  # the new era: the model's risks too high
    rest, _ = _era(10000, 3, 1.0, shift=0.8)
    again = recertify(policy, new, yn, reference=rest)
    assert again.calibration["recertified"]["n"] == 3000 and again.rule.overall.deaths == int(yn.sum())
    # the same admissions flagged as by the parent (raw risk >= its raw threshold)
    t_raw = policy.calibrator.raw_threshold(policy.threshold.threshold)
    np.testing.assert_array_equal(again.apply(rest).high_risk, rest.mean >= t_raw)
    assert again.rule.overall.status is Status.CERTIFIED and "calibrated on 3,000 admissions" in again.sentence()
    # the new map moves the too-high risks down
    assert again.apply(rest).risk_calibrated.mean() < policy.apply(rest).risk_calibrated.mean()
    back = Policy.from_dict(json.loads(json.dumps(again.to_dict())))
    np.testing.assert_array_equal(back.apply(rest).refer, again.apply(rest).refer)


def test_recertify_can_refit_the_threshold_through_fit_policy_and_refuses_one_class():
    sel, ys = _era(3000, 0, 1.6)
    cal, yc = _era(3000, 1, 1.6)
    cfg = ReferralConfig(calibration="temperature")
    policy = fit_policy(sel, ys, cal, yc, cfg, seed=0)
    new, yn = _era(3000, 4, 1.0, shift=0.5)
    again = recertify(policy, new, yn, refit_threshold=True, seed=1)
    assert again.threshold.n == 1500 and again.rule.overall.n == 1500
    assert again.calibration["recertified"]["threshold"] == "refitted on half the new admissions"
    with pytest.raises(ReferralError, match="needs deaths and survivors"):
        recertify(policy, new, np.zeros(3000))
