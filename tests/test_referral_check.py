"""pipeline.bayes.referral.check: the refer rule's guarantee against a known true risk, and a constructed case in
which a plug-in rule without the finite-sample correction fails the delta level while Learn-then-Test holds."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.bayes import referral as rf
from pipeline.bayes.referral import ReferSettings, Risk, RuleMethod

THRESHOLD = 0.12  # the decision threshold of the pool below (flags about a third of it)


def _pool(m: int = 20_000, seed: int = 0):
    """True risks q with logit ~ N(-2.6, 1.2) (about 11% deaths); the model's risk is the true risk and the
    refer measure is the risk itself, so the miss rate rises smoothly with the cut up to the threshold."""
    rng = np.random.default_rng(seed)
    q = 1.0 / (1.0 + np.exp(-rng.normal(-2.6, 1.2, m)))
    return q, np.where(np.arange(m) % 3 == 0, "SICU", "MICU")


def test_true_kept_risk_by_hand():
    q = np.array([0.1, 0.2, 0.5, 0.4])
    r = np.array([0.1, 0.3, 0.6, 0.2])
    kept = np.array([True, True, False, True])
    # miss (t = 0.25): kept and r < t are admissions 0 and 3: (0.1 + 0.4) / (0.1 + 0.2 + 0.5 + 0.4) = 0.5 / 1.2
    assert rf.true_kept_risk(q, r, kept, 0.25, Risk.MISS) == pytest.approx(0.5 / 1.2)
    # Brier of the kept: ((r - q)^2 + q (1 - q)) = 0.09, 0.01 + 0.16 = 0.17, 0.04 + 0.24 = 0.28 -> 0.54 / 3
    assert rf.true_kept_risk(q, r, kept, 0.25, Risk.BRIER) == pytest.approx(0.54 / 3)
    assert rf.true_kept_risk(q, r, np.zeros(4, bool), 0.25, Risk.BRIER) == 0.0


@pytest.mark.parametrize("risk,alpha", [(Risk.MISS, 0.1), (Risk.BRIER, 0.08)])
@pytest.mark.parametrize("grouped", [False, True])
def test_ltt_holds_delta_at_a_small_calibration_size(risk, alpha, grouped):
    q, groups = _pool()
    s = ReferSettings(alpha=alpha, delta=0.1, risk=risk, n_cuts=500)
    chk = rf.check_guarantee(q, q, q, THRESHOLD, 1000, s, groups=groups if grouped else None, repeats=200, seed=1)
    shares = [chk.overall] if not grouped else list(chk.groups.values())
    assert chk.repeats == 200 and (chk.groups is not None) == grouped
    for share in shares:
        assert share.holds(0.1), share
        assert 0.05 < share.mean_referral < 0.95 and share.refer_all < 100, "the rule must keep admissions to be tested"


def test_a_plug_in_rule_fails_the_delta_level_where_ltt_holds():
    q, _ = _pool()
    common = dict(alpha=0.1, delta=0.1, n_cuts=500)
    plug = rf.check_guarantee(q, q, q, THRESHOLD, 1000, ReferSettings(method=RuleMethod.PLUGIN, **common), seed=2)
    ltt = rf.check_guarantee(q, q, q, THRESHOLD, 1000, ReferSettings(**common), seed=2)
    # the plug-in cut sits where the empirical miss rate reaches alpha: the true one is above alpha about half the time
    assert plug.overall.above > 0.1 + 3 * plug.overall.se
    assert ltt.overall.holds(0.1) and ltt.overall.above < plug.overall.above
    assert ltt.overall.mean_referral > plug.overall.mean_referral  # the price of the guarantee


def test_cuts_from_the_calibration_set_itself_still_hold_delta():
    q, _ = _pool()
    s = ReferSettings(alpha=0.1, delta=0.1, n_cuts=500)
    own = rf.check_guarantee(q, q, q, THRESHOLD, 1000, s, seed=3, reference="calibration")
    assert own.overall.holds(0.1) and 0.05 < own.overall.mean_referral < 0.95


def test_check_rejects_a_calibration_size_outside_the_pool():
    q, _ = _pool(100)
    with pytest.raises(rf.ReferralError, match="0 < n_calibration"):
        rf.check_guarantee(q, q, q, THRESHOLD, 100)


def test_iid_calibration_over_the_whole_pool_holds_delta_at_half_the_pool():
    """evaluate="pool": calibration admissions drawn with replacement, the kept risk over the whole pool (the exact
    i.i.d. setting), here with a calibration set as large as half the pool, where the rest's own sampling error is
    as large as the calibration set's."""
    q, _ = _pool(4000, seed=4)
    s = ReferSettings(alpha=0.1, delta=0.1, n_cuts=500)
    chk = rf.check_guarantee(q, q, q, THRESHOLD, 2000, s, repeats=200, seed=5, evaluate="pool")
    assert chk.overall.holds(0.1) and 0.05 < chk.overall.mean_referral < 0.95
    with pytest.raises(rf.ReferralError, match="evaluate must be 'rest' or 'pool'"):
        rf.check_guarantee(q, q, q, THRESHOLD, 2000, s, evaluate="population")
