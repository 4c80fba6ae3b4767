"""pipeline.bayes.referral: the decision threshold, decision uncertainty, the p-values against MAPIE, the refer rule
(Learn-then-Test against MAPIE's controller, statuses, groups, settings errors, sentences, JSON)."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest
from scipy.stats import binom

from pipeline.bayes import referral as rf
from pipeline.bayes.referral import Ordering, ReferSettings, Risk, RuleMethod, Status
from pipeline.core.errors import ConfigError, PipelineError


def _world(m: int, seed: int):
    """A pool whose model risk is the true risk, ordered by the risk itself; outcomes drawn from it."""
    rng = np.random.default_rng(seed)
    q = 1.0 / (1.0 + np.exp(-rng.normal(-2.6, 1.2, m)))
    y = (rng.random(m) < q).astype(float)
    return q, y


# ---------------------------------------------------------------------------- the decision threshold


def test_sensitivity_rule_by_hand():
    risk = np.array([0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.05])
    labels = np.array([1, 0, 1, 1, 0, 1, 0, 1, 0, 0])  # 5 deaths at 0.9, 0.7, 0.6, 0.4, 0.2
    d = rf.choose_threshold(risk, labels, sensitivity=0.8)  # ceil(0.8 * 5) = 4 deaths: the 4th highest, 0.4
    assert d.threshold == 0.4 and d.sensitivity == 0.8 and d.deaths == 5 and d.n == 10
    assert d.flagged_rate == 0.6 and d.specificity == 0.6  # flagged 0.9..0.4; survivors 0.8, 0.5 flagged of 5
    assert list(d.flag(np.array([0.39, 0.4]))) == [False, True]
    fixed = rf.choose_threshold(risk, labels, "fixed", threshold=0.65)
    assert fixed.threshold == 0.65 and fixed.sensitivity == 0.4 and fixed.target is None
    back = rf.DecisionThreshold.from_dict(json.loads(json.dumps(d.to_dict())))
    assert back == d
    assert "sensitivity reaches 80%" in d.summary()


@pytest.mark.parametrize("kwargs,message", [
    ({"sensitivity": 0.0}, "--sensitivity must lie in"),
    ({"rule": "youden"}, "--threshold-rule must be one of"),
    ({"rule": "fixed", "threshold": 1.5}, "--decision-threshold must lie in"),
])
def test_threshold_settings_errors_name_the_option(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        rf.choose_threshold([0.1, 0.5], [0, 1], **kwargs)


# ---------------------------------------------------------------------------- decision uncertainty


def test_decision_uncertainty_from_draws_by_hand():
    draws = np.array([[0.1, 0.3, 0.25], [0.3, 0.4, 0.19], [0.15, 0.2, 0.21], [0.05, 0.5, 0.2]])  # (S=4, N=3)
    # t = 0.2: means 0.15 (not flagged; draws >= 0.2: 1 of 4), 0.35 (flagged; below: 0 of 4),
    # 0.2125 (flagged; below: 0.19 -> 1 of 4)
    assert np.allclose(rf.decision_uncertainty(draws, 0.2), [0.25, 0.0, 0.25])
    decided = np.array([True, False, True])  # the decision taken elsewhere (e.g. on the calibrated risk)
    assert np.allclose(rf.decision_uncertainty(draws, 0.2, decided), [0.75, 1.0, 0.25])
    assert np.allclose(rf.decision_uncertainty(draws.reshape(2, 2, 3), 0.2), [0.25, 0.0, 0.25])  # (S, K, N)


def test_gaussian_decision_uncertainty_is_the_probit_of_the_draws():
    mu, var = np.array([-2.0, -1.0, 0.5, -1.4]), np.array([1.0, 0.25, 2.0, 0.0])
    t = 0.2
    du = rf.gaussian_decision_uncertainty(mu, var, t)
    f = mu + np.sqrt(var) * np.random.default_rng(0).standard_normal((400_000, 4))
    p = 1.0 / (1.0 + np.exp(-f))
    probit = 1.0 / (1.0 + np.exp(-mu / np.sqrt(1 + np.pi * var / 8)))
    mc = rf.decision_uncertainty(p, t, decided=probit >= t)
    assert np.allclose(du, mc, atol=3e-3)
    assert du[3] == 0.0  # sigma 0: sigmoid(-1.4) = 0.198 < 0.2, decided below: no uncertainty


def test_venn_abers_decision_uncertainty_by_hand():
    p0, p1 = np.array([0.1, 0.15, 0.3, 0.05]), np.array([0.3, 0.18, 0.5, 0.25])
    # t = 0.2; merged p1/(1-p0+p1): 0.25 (flag; [0.1, 0.3] below t: 0.1/0.2 = 0.5), 0.175 (no; no straddle),
    # 0.4167 (flag; no straddle), 0.2083 (flag; [0.05, 0.25] below t: 0.15/0.2 = 0.75)
    assert np.allclose(rf.va_decision_uncertainty(p0, p1, 0.2), [0.5, 0.0, 0.0, 0.75])
    assert np.allclose(rf.va_width(p0, p1), [0.2, 0.03, 0.2, 0.2])


def test_plain_words():
    risk = np.array([0.05, 0.1, 0.3, 0.45])
    entropy = -(risk * np.log(risk) + (1 - risk) * np.log1p(-risk))  # increasing below 0.5
    assert rf.describe("risk") == rf.HIGH_RISK
    said = rf.describe(Ordering.ENTROPY, entropy, risk)
    assert said.startswith("referred because the risk is high") and "entropy" in said
    wider = np.array([0.05, 0.1, 0.3, 0.9])  # 0.9's entropy is below 0.3's: no longer the risk's order
    h = -(wider * np.log(wider) + (1 - wider) * np.log1p(-wider))
    assert rf.describe(Ordering.ENTROPY, h, wider) == rf.WORDS[Ordering.ENTROPY]
    assert rf.describe("decision") == ("referred because the model cannot tell which side of the decision "
                                       "threshold the risk lies on")


# ---------------------------------------------------------------------------- p-values


def test_required_size_is_the_no_miss_p_value():
    assert rf.required_size(0.05, 0.1) == 45  # log(0.1) / log(0.95) = 44.9
    assert 0.95**45 <= 0.1 < 0.95**44
    assert rf.required_size(0.5, 0.25) == 2  # exactly 0.5^2 = 0.25
    assert rf.binomial_p_value(0, 45, 0.05) == pytest.approx(0.95**45)


def test_hoeffding_bentkus_matches_mapie():
    from mapie.risk_control.methods import compute_hoeffding_bentkus_p_value

    r = np.array([0.0, 0.01, 0.03, 0.05, 0.08, 0.2])
    n = np.array([45, 500, 1000, 300, 2000, 60])
    for alpha in (0.05, 0.1):
        ours = rf.hb_p_value(r, n, alpha)
        theirs = compute_hoeffding_bentkus_p_value(r, n.astype(float), alpha, binary=False)[:, 0]
        assert np.allclose(ours, theirs, rtol=1e-12, atol=0)
    assert rf.hb_p_value(0.0, 0, 0.05) == 1.0


# ---------------------------------------------------------------------------- the rule


def _calibration(n: int = 1500, seed: int = 0):
    q, y = _world(20_000, seed)
    rng = np.random.default_rng(seed + 100)
    idx = rng.choice(q.shape[0], n, replace=False)
    rest = np.setdiff1d(np.arange(q.shape[0]), idx)
    return q[idx], y[idx], rf.Reference(q[rest], q[rest])


def test_ltt_miss_rate_matches_mapies_binary_controller():
    from mapie.risk_control import BinaryClassificationController

    r, y, ref = _calibration()
    t, alpha, delta = 0.12, 0.1, 0.1
    s = ReferSettings(alpha=alpha, delta=delta, n_cuts=400)
    rule = rf.fit_refer_rule(r, r, y, t, s, reference=ref)
    assert rule.overall.status is Status.CERTIFIED and 0.0 < rule.overall.referral_rate < 1.0
    cuts = rf.cut_grid(ref.measure, s.n_cuts)

    def score(x):  # MAPIE "predicts death" at lambda when this score >= lambda: when referred or flagged
        w = np.where(x[:, 1] >= t, np.inf, x[:, 0])  # a flagged death is never missed
        return np.column_stack([1.0 - w, w])

    lambdas = np.nextafter(cuts, np.inf)  # u >= nextafter(c) is u > c: referred
    bcc = BinaryClassificationController(score, "recall", target_level=1.0 - alpha, confidence_level=1.0 - delta,
                                         list_predict_params=lambdas, fwer_method="fixed_sequence")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bcc.calibrate(np.column_stack([r, r]), y.astype(int))
    valid = np.sort(np.asarray(bcc.valid_predict_params, dtype=float))
    ours = lambdas[cuts <= rule.overall.cut]  # fixed-sequence accepts every cut up to the chosen one
    assert valid.size > 1 and np.array_equal(valid, ours)
    assert rule.overall.p_value == pytest.approx(float(bcc.p_values[np.flatnonzero(cuts == rule.overall.cut)[0], 0]))
    missed = ((y == 1) & (r <= rule.overall.cut) & (r < t)).sum()
    assert rule.overall.empirical_risk == missed / y.sum()
    assert rule.overall.p_value == pytest.approx(binom.cdf(missed, int(y.sum()), alpha))


def test_brier_rule_certifies_its_kept_admissions_and_round_trips():
    r, y, ref = _calibration(3000, 1)
    s = ReferSettings(alpha=0.06, delta=0.1, risk="brier")
    rule = rf.fit_refer_rule(r, r, y, 0.12, s, reference=ref)
    g = rule.overall
    assert g.status is Status.CERTIFIED and 0.0 < g.referral_rate < 1.0
    kept = r <= g.cut
    assert g.empirical_risk == pytest.approx(float(((r[kept] - y[kept]) ** 2).mean()))
    assert g.p_value == pytest.approx(float(rf.hb_p_value(g.empirical_risk, kept.sum(), 0.06))) and g.p_value <= 0.1
    back = rf.ReferRule.from_dict(json.loads(json.dumps(rule.to_dict())))
    assert np.array_equal(back.refer(r), rule.refer(r)) and back.sentence() == rule.sentence()
    assert "Brier score is at most 0.06, with 90% confidence" in rule.sentence()


def test_certified_sentence_says_what_is_promised():
    r, y, ref = _calibration()
    rule = rf.fit_refer_rule(r, r, y, 0.12, ReferSettings(alpha=0.1, delta=0.1), reference=ref)
    g = rule.overall
    assert rule.sentence() == (f"refer {rf.text.percent(g.referral_rate)} of admissions: on the others the model "
                               f"misses at most 10% of deaths, with 90% confidence (calibrated on {g.n:,} admissions, "
                               f"{g.deaths:,} deaths); it assumes the scored patients resemble those")
    assert np.array_equal(rule.refer(r), r > g.cut)


def test_no_cut_meeting_alpha_refers_everyone_and_says_so():
    r, y, _ = _calibration()
    flat = np.zeros_like(r)  # one value: the only cut keeps everyone, and most deaths are below the threshold
    rule = rf.fit_refer_rule(flat, r, y, 0.5, ReferSettings(alpha=0.1, delta=0.1), ordering="mi")
    assert rule.overall.status is Status.REFER_ALL and rule.overall.referral_rate == 1.0 and rule.ordering == "mi"
    assert rule.refer(np.array([-1.0, 0.0, 5.0])).all()
    assert rule.sentence().startswith("refer every admission: no refer threshold could be certified")


def test_too_small_calibration_says_the_size_it_needs():
    r, y, _ = _calibration(200, 2)
    deaths = int(y.sum())
    assert deaths < 45
    with pytest.raises(rf.CalibrationTooSmall, match=f"delta 0.1 at alpha 0.05 needs at least 45 calibration "
                                                     f"deaths even with no error; the calibration data hold {deaths}"):
        rf.fit_refer_rule(r, r, y, 0.12)
    rule = rf.fit_refer_rule(r, r, y, 0.12, strict=False)
    assert rule.overall.status is Status.TOO_SMALL and rule.overall.needed == 45 and rule.refer(r).all()
    assert "needs at least 45 calibration deaths" in rule.sentence()


@pytest.mark.parametrize("field,value", [("alpha", 0.0), ("alpha", 1.0), ("alpha", 1.5), ("delta", -0.1),
                                         ("delta", 1.0), ("fraction", 1.0), ("risk", "auc"), ("method", "crc")])
def test_bad_settings_are_one_line_errors_naming_the_setting(field, value):
    with pytest.raises(ConfigError) as err:
        ReferSettings(**{field: value})
    assert str(err.value).startswith(field) and "\n" not in str(err.value)  # the field; the CLI says the flag
    assert isinstance(err.value, PipelineError) and err.value.fields == (field,)


def test_fraction_and_plugin_rules_promise_nothing():
    r, y, ref = _calibration()
    frac = rf.fit_refer_rule(r, r, y, 0.12, ReferSettings(method="fraction", fraction=0.1))
    assert frac.overall.status is Status.UNCERTIFIED and frac.overall.referral_rate == pytest.approx(0.1, abs=1e-3)
    assert "no bound on the error of the others is promised" in frac.sentence()
    plug = rf.fit_refer_rule(r, r, y, 0.12, ReferSettings(alpha=0.1, method=RuleMethod.PLUGIN), reference=ref)
    ltt = rf.fit_refer_rule(r, r, y, 0.12, ReferSettings(alpha=0.1), reference=ref)
    assert plug.overall.status is Status.UNCERTIFIED and plug.overall.empirical_risk <= 0.1
    assert plug.overall.referral_rate < ltt.overall.referral_rate  # no correction: fewer referrals
    assert "with no finite-sample guarantee" in plug.sentence()


def test_per_group_rules_hold_in_every_group_and_report_each_rate():
    r, y, ref = _calibration(3000, 3)
    g = np.where(np.arange(r.shape[0]) % 3 == 0, "SICU", "MICU")
    ref_g = np.where(np.arange(ref.measure.shape[0]) % 3 == 0, "SICU", "MICU")
    s = ReferSettings(alpha=0.1, delta=0.1, group_column="icu")
    rule = rf.fit_refer_rule(r, r, y, 0.12, s, groups=g, reference=rf.Reference(ref.measure, ref.risk, ref_g))
    assert set(rule.groups) == {"MICU", "SICU"}
    for name, gr in rule.groups.items():
        inside = g == name
        alone = rf.fit_refer_rule(r[inside], r[inside], y[inside], 0.12, s,
                                  reference=rf.Reference(ref.measure[ref_g == name], ref.risk[ref_g == name]))
        assert gr.cut == alone.overall.cut and gr.referral_rate == alone.overall.referral_rate
    referred = rule.refer(r, g)
    assert rule.overall.referral_rate == pytest.approx(referred.mean())
    assert rule.refer(np.array([0.0]), np.array(["CCU"]))[0], "a group never calibrated is referred"
    rates = {k: rf.text.percent(v.referral_rate) for k, v in rule.groups.items()}
    assert rule.sentence().startswith(f"refer {rf.text.percent(referred.mean())} of admissions (MICU {rates['MICU']}, "
                                      f"SICU {rates['SICU']}), with a rule per icu: in each icu, on the others the "
                                      "model misses at most 10% of deaths, with 90% confidence (calibrated on MICU: ")
    back = rf.ReferRule.from_dict(json.loads(json.dumps(rule.to_dict())))
    assert np.array_equal(back.refer(r, g), referred)
    with pytest.raises(ConfigError, match="icu 'CCU' has no calibration admissions"):
        with_ccu = rf.Reference(np.append(ref.measure, 0.1), np.append(ref.risk, 0.1), np.append(ref_g, "CCU"))
        rf.fit_refer_rule(r, r, y, 0.12, s, groups=g, reference=with_ccu)
    tiny = np.where(np.arange(r.shape[0]) < 60, "SICU", "MICU")
    five = ReferSettings(alpha=0.05, delta=0.1, group_column="icu")
    with pytest.raises(rf.CalibrationTooSmall, match="needs at least 45 calibration deaths in icu 'SICU'"):
        rf.fit_refer_rule(r, r, y, 0.12, five, groups=tiny)
    said = rf.fit_refer_rule(r, r, y, 0.12, five, groups=tiny, strict=False)
    assert said.groups["SICU"].status is Status.TOO_SMALL and said.overall.status is Status.TOO_SMALL
    assert "SICU: refer every admission: promising that the model misses at most 5% of deaths" in said.sentence()


def test_simultaneous_groups_split_delta():
    r, y, ref = _calibration(3000, 4)
    g = np.where(np.arange(r.shape[0]) % 2 == 0, "a", "b")
    each = rf.fit_refer_rule(r, r, y, 0.12, ReferSettings(alpha=0.1), groups=g)
    both = rf.fit_refer_rule(r, r, y, 0.12, ReferSettings(alpha=0.1, simultaneous=True), groups=g)
    assert both.overall.needed == rf.required_size(0.1, 0.05) > each.overall.needed == rf.required_size(0.1, 0.1)
    for name in ("a", "b"):
        assert both.groups[name].cut <= each.groups[name].cut  # a smaller delta refers at least as much


def test_bad_inputs_name_the_row():
    with pytest.raises(rf.ReferralError, match=r"measure\[1\] = nan: the ordering measure must be finite"):
        rf.fit_refer_rule([0.1, math.nan], [0.1, 0.2], [0, 1], 0.2)
    with pytest.raises(ConfigError, match="--decision-threshold"):
        rf.fit_refer_rule([0.1, 0.2], [0.1, 0.2], [0, 1], 1.2)


@pytest.mark.parametrize("risk", [Risk.MISS, Risk.BRIER])
def test_the_fitted_rule_never_reads_the_labels_of_the_reference(risk):
    r, y, ref = _calibration(2000, 5)
    s = ReferSettings(alpha=0.1 if risk is Risk.MISS else 0.06, risk=risk)
    a = rf.fit_refer_rule(r, r, y, 0.12, s, reference=ref)
    b = rf.fit_refer_rule(r, r, y, 0.12, s, reference=rf.Reference(ref.measure.copy(), ref.risk.copy()))
    assert a.overall == b.overall
    flipped = rf.fit_refer_rule(r, r, 1.0 - y, 0.12, s, reference=ref, strict=False)
    assert flipped.overall != a.overall  # the calibration labels, and only they, decide
