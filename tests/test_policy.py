"""The run's policy (bayes.referral.policy): a recalibration map, a decision threshold and a refer rule fitted
on two validation halves, applied to new admissions, kept as JSON and re-derived under other settings."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pipeline.bayes.calibration import Identity, Temperature
from pipeline.bayes.referral.config import ReferralConfig
from pipeline.bayes.referral.measures import Ordering
from pipeline.bayes.referral.policy import Policy, Predictive, fit_policy
from pipeline.bayes.referral.settings import CalibrationTooSmall, ReferralError, Status
from pipeline.bayes.referral.text import DEATHS, Outcome
from pipeline.core.errors import ConfigError


def _world(n: int, seed: int, draws: int = 30, spread: float = 0.6, scale: float = 1.6):
    """Admissions whose true logit is z; the model's draws are z / ``scale`` (too flat: a temperature < 1
    fixes it) plus per-admission noise of sd ``spread``; labels from the truth. Two context groups."""
    rng = np.random.default_rng(seed)
    z = rng.normal(-2.3, 1.3, n)
    y = (rng.random(n) < 1 / (1 + np.exp(-z))).astype(float)
    d = 1 / (1 + np.exp(-(z / scale + spread * rng.normal(size=(draws, n)))))  # (D, N)
    groups = {"gender": np.where(rng.random(n) < 0.5, "F", "M")}
    return Predictive(d.mean(axis=0), draws=d, groups=groups), y


@pytest.fixture(scope="module")
def fitted():
    sel, ys = _world(6000, 0)
    cal, yc = _world(6000, 1)
    return fit_policy(sel, ys, cal, yc, ReferralConfig(ordering="decision"), seed=0), (sel, ys, cal, yc)


def test_auto_orders_by_the_calibrated_risk_whatever_the_model(fitted):
    """``ordering auto`` is the risk for a posterior, a point and a Gaussian-logit model alike (the orderings
    report's decision, docs/experiments/2026-12-04-referral-orderings.md)."""
    _, (sel, ys, cal, yc) = fitted
    posterior = fit_policy(sel, ys, cal, yc, seed=0)
    point = fit_policy(Predictive(sel.mean, groups=sel.groups), ys, Predictive(cal.mean, groups=cal.groups), yc)
    for policy in (posterior, point):
        assert policy.ordering is Ordering.RISK and policy.reason() == "referred because the risk is high"
    c = posterior.apply(cal)
    kept = posterior.kept["calibration"]["measures"]["risk"]
    np.testing.assert_array_equal(c.refer, kept > posterior.rule.overall.cut)
    assert posterior.rule.overall.status is Status.CERTIFIED and posterior.spread and not point.spread


def test_a_fitted_policy_refers_by_decision_uncertainty_with_a_certified_miss_rate(fitted):
    policy, (sel, ys, cal, yc) = fitted
    assert policy.ordering is Ordering.DECISION  # asked for: a posterior that moves the risk
    assert policy.rule.overall.status is Status.CERTIFIED and policy.rule.overall.deaths == int(yc.sum())
    assert policy.calibration["method"] != "none" and policy.calibration["n"] == len(yc)
    # the sentence states the share referred, the promise, the confidence and the calibration size
    s = policy.sentence()
    assert s.startswith("refer ") and "misses at most 5% of deaths, with 90% confidence" in s
    assert f"calibrated on {len(yc):,} admissions, {int(yc.sum()):,} deaths" in s
    assert policy.reason() == ("referred because the model cannot tell which side of the decision threshold "
                               "the risk lies on")
    # the threshold was chosen on the selection half: its sensitivity there reaches the level asked
    cols = policy.apply(sel)
    assert (cols.high_risk[ys == 1]).mean() >= 0.8 and cols.high_risk.mean() == pytest.approx(
        policy.threshold.flagged_rate)
    # on the calibration half the flags are the kept measures' and the miss rate is the rule's own number
    c = policy.apply(cal)
    kept = policy.kept["calibration"]["measures"]["decision"]
    np.testing.assert_allclose(c.decision_uncertainty, kept)
    np.testing.assert_array_equal(c.refer, kept > policy.rule.overall.cut)
    missed = ((yc == 1) & ~c.refer & ~c.high_risk).sum() / yc.sum()
    assert missed == pytest.approx(policy.rule.overall.empirical_risk) and missed <= 0.05
    assert c.refer.mean() == pytest.approx(policy.rule.overall.referral_rate)


def test_decision_uncertainty_is_the_share_of_draws_across_the_threshold(fitted):
    policy, (sel, *_rest) = fitted
    c = policy.apply(sel)
    t_raw = policy.calibrator.raw_threshold(policy.threshold.threshold)
    other = np.where(c.high_risk, sel.draws < t_raw, sel.draws >= t_raw).mean(axis=0)
    np.testing.assert_allclose(c.decision_uncertainty, other)


def test_json_round_trip_applies_the_same(fitted):
    policy, (sel, *_rest) = fitted
    back = Policy.from_dict(json.loads(json.dumps(policy.to_dict())))
    a, b = policy.apply(sel), back.apply(sel)
    for name in ("risk_calibrated", "high_risk", "decision_uncertainty", "refer"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    np.testing.assert_allclose(a.va_low, b.va_low) and np.testing.assert_allclose(a.va_high, b.va_high)
    assert back.sentence() == policy.sentence() and back.reason() == policy.reason()
    summary = policy.to_dict(arrays=False)  # model_info.json's: no per-admission array
    assert "kept" not in summary and "venn_abers" not in summary and len(json.dumps(summary)) < 100_000
    with pytest.raises(ReferralError, match="summary"):
        Policy.from_dict(summary)


def test_rederive_refits_the_rule_only(fitted):
    policy, (sel, *_rest) = fitted
    looser = policy.rederive(alpha=0.1)
    assert looser.calibrator.to_dict() == policy.calibrator.to_dict() and looser.threshold == policy.threshold
    assert looser.rule.settings.alpha == 0.1 and looser.config.alpha == 0.1
    assert looser.rule.overall.referral_rate < policy.rule.overall.referral_rate  # a looser promise refers fewer
    assert "misses at most 10% of deaths" in looser.sentence()
    brier = policy.rederive(risk="brier", alpha=0.12, ordering="risk")
    assert brier.ordering is Ordering.RISK and "Brier score is at most 0.12" in brier.sentence()
    assert brier.reason() == "referred because the risk is high"
    per_sex = policy.rederive(group="gender")
    assert set(per_sex.rule.groups) == {"F", "M"} and "with a rule per gender" in per_sex.sentence()
    with pytest.raises(ReferralError, match="gender"):
        per_sex.apply(Predictive(sel.mean, draws=sel.draws))  # a per-group rule needs each admission's group
    assert per_sex.apply(sel).refer.shape == sel.mean.shape
    with pytest.raises(ConfigError, match="group admission_type: the run kept no such context family"):
        policy.rederive(group="admission_type")
    import dataclasses

    with pytest.raises(ReferralError, match="keeps no calibration scores"):
        dataclasses.replace(policy, kept={}).rederive(alpha=0.1)


def test_settings_the_calibration_half_cannot_certify(fitted):
    policy, _ = fitted
    deaths = policy.rule.overall.deaths
    with pytest.raises(CalibrationTooSmall, match=r"delta 1e-05 at alpha 0.001 needs at least [\d,]+ calibration "
                       rf"deaths even with no error; the calibration data hold {deaths:,}") as info:
        policy.rederive(strict=True, alpha=0.001, delta=1e-5)
    assert info.value.config is ReferralConfig and set(info.value.fields) == {"alpha", "delta"}
    lax = policy.rederive(alpha=0.001, delta=1e-5)  # not strict (training): refer everyone and say why
    assert lax.rule.overall.status is Status.TOO_SMALL and lax.rule.overall.referral_rate == 1.0
    assert "needs at least" in lax.sentence() and lax.apply(_world(50, 3)[0]).refer.all()


def test_the_refer_flag_line_is_true_of_the_rule(fitted):
    """A certified rule's flag line says what it ranks by; a rule that refers everyone says so, not that each
    admission is referred because its risk is high (make main's run printed that of 2,165 referred admissions)."""
    _, (sel, ys, cal, yc) = fitted
    certified = fit_policy(sel, ys, cal, yc, seed=0)
    assert not certified.refers_all() and certified.lines()[-1] == "the refer flag: referred because the risk is high"
    everyone = certified.rederive(alpha=0.001, delta=1e-5)
    assert everyone.refers_all() and everyone.apply(cal).refer.all()
    assert everyone.lines()[-1] == ("the refer flag: every admission, by the rule above (a certified rule would rank "
                                    "them: referred because the risk is high)")
    grouped = fit_policy(sel, ys, cal, yc, ReferralConfig(group="gender"), seed=0)
    assert grouped.rule.groups and grouped.refers_all() is all(g.cut == -np.inf for g in grouped.rule.groups.values())


def test_a_small_calibration_half_says_what_it_would_need():
    sel, ys = _world(300, 4)
    cal, yc = _world(120, 5)
    policy = fit_policy(sel, ys, cal, yc)
    assert policy.rule.overall.status is Status.TOO_SMALL and policy.rule.overall.needed == 45
    assert policy.sentence().startswith("refer every admission: promising that the model misses at most 5% of deaths "
                                        "with 90% confidence needs at least 45 calibration deaths")


def test_temperature_keeps_the_decision_exact():
    """A strictly increasing map: calibrated >= t is raw >= t_raw, t_raw fixed by the selection half."""
    sel, ys = _world(3000, 6)
    cal, yc = _world(3000, 7)
    policy = fit_policy(sel, ys, cal, yc, ReferralConfig(calibration="temperature"))
    assert isinstance(policy.calibrator, Temperature) and policy.calibrator.temperature < 1.0  # the draws were flat
    t_raw = policy.calibrator.raw_threshold(policy.threshold.threshold)
    c = policy.apply(cal)
    np.testing.assert_array_equal(c.high_risk, cal.mean >= t_raw)


def test_a_point_model_refers_by_its_venn_abers_interval():
    sel, ys = _world(3000, 8)
    cal, yc = _world(3000, 9)
    point = [Predictive(p.mean, groups=p.groups) for p in (sel, cal)]
    policy = fit_policy(point[0], ys, point[1], yc, ReferralConfig(ordering="va_decision"))
    assert policy.ordering is Ordering.VA_DECISION and not policy.spread
    c = policy.apply(point[1])
    assert (c.va_low <= c.va_high).all() and np.isfinite(c.va_low).all()
    straddles = (c.va_low < policy.threshold.threshold) & (c.va_high >= policy.threshold.threshold)
    assert (c.refer[straddles].mean() >= c.refer[~straddles].mean())
    assert (c.decision_uncertainty == 0).all()  # a point model has no posterior to be unsure with
    with pytest.raises(ConfigError, match="ordering va_width needs a Venn-Abers interval"):
        fit_policy(point[0], ys, Predictive(point[1].mean[:40]), np.zeros(40), ReferralConfig(ordering="va_width"))


def test_a_gaussian_logit_model_uses_its_closed_form():
    rng = np.random.default_rng(10)
    halves = []
    for _ in range(2):
        mu, var = rng.normal(-2.2, 1.3, 3000), rng.uniform(0.0, 0.5, 3000)
        y = (rng.random(3000) < 1 / (1 + np.exp(-mu))).astype(float)
        halves.append((Predictive(1 / (1 + np.exp(-mu / np.sqrt(1 + np.pi * var / 8))), mu=mu, var=var), y))
    policy = fit_policy(halves[0][0], halves[0][1], halves[1][0], halves[1][1],
                        ReferralConfig(calibration="none", ordering="decision"))
    assert isinstance(policy.calibrator, Identity) and policy.ordering is Ordering.DECISION
    from scipy.stats import norm

    pred = halves[1][0]
    c = policy.apply(pred)
    t = policy.threshold.threshold
    above = norm.sf((np.log(t / (1 - t)) - pred.mu) / np.sqrt(np.maximum(pred.var, 1e-300)))
    expected = np.where(c.high_risk, 1 - above, above)
    expected = np.where(pred.var > 0, expected, 0.0)
    np.testing.assert_allclose(c.decision_uncertainty, expected, atol=1e-9)


def test_calibration_data_without_a_death_fall_back_to_no_map_and_say_why():
    sel, ys = _world(400, 11)
    cal, _ = _world(200, 12)
    yc = np.zeros(200)
    yc[0] = 1.0
    policy = fit_policy(sel, ys, cal, yc)
    assert policy.calibration["method"] == "none" and "risks not recalibrated" in policy.calibration_line()
    assert policy.rule.overall.status is Status.TOO_SMALL


def test_fixed_decision_threshold_from_the_threshold_alone():
    cfg = ReferralConfig(decision_threshold=0.3)
    assert cfg.threshold_rule.value == "fixed"
    sel, ys = _world(1500, 13)
    cal, yc = _world(1500, 14)
    policy = fit_policy(sel, ys, cal, yc, cfg)
    assert policy.threshold.threshold == 0.3
    np.testing.assert_array_equal(policy.apply(sel).high_risk, policy.calibrator.apply(sel.mean) >= 0.3)


class _Half:
    """A validation half as fit_run_policy first reads it: its labels and its size."""

    def __init__(self, labels):
        self.label = np.asarray(labels, dtype=float)

    def __len__(self) -> int:
        return len(self.label)


@pytest.mark.parametrize("selection, calibration", [([0, 0, 0], [0, 1, 0]), ([0, 1, 0], [0, 0, 0]),
                                                    ([1, 1], [0, 1]), ([0, 1], [])])
def test_a_run_whose_validation_halves_lack_a_class_has_no_policy(selection, calibration):
    """A toy world's few validation admissions: no death (or no survivor) in a half leaves the run without a
    policy (it scores with no promise) instead of failing after training; before any prediction is made."""
    from pipeline.tasks.mortality.validation import fit_run_policy

    got = fit_run_policy(None, _Half(selection), _Half(calibration), samples=1, batch_size=1, max_bags=None,
                         max_tokens=None, seed=0, context_vocab=[])
    assert got is None


def test_an_infinite_cross_fitted_nll_is_said_in_words(fitted):
    """Issue 46, item 2: the recalibration line printed "isotonic inf"; an infinite held-out NLL (isotonic gave a
    held-out admission risk 0 or 1 against its outcome) is said as what it means."""
    import dataclasses

    policy, _ = fitted
    calibration = {**policy.calibration, "nll": {"none": 0.4297, "isotonic": None}, "rule": "one_se", "folds": 5}
    line = dataclasses.replace(policy, calibration=calibration).calibration_line()
    assert "isotonic inf," not in line and not line.endswith("isotonic inf)")
    assert line.endswith("(none 0.4297, isotonic infinite: on a held-out fold it gave an admission a risk of exactly "
                         "0 or 1 against its outcome, so it cannot be chosen)")


def test_the_evaluate_line_says_the_rule_in_words():
    """Issue 46, item 2: `evaluate` printed `refer rule (risk, too_small)` and `miss_rate <= 0.05`: enum values."""
    from pipeline.workflows.evaluate_policy import format_lines

    report = {"calibrated": {"ece": 0.0262}, "calibration": {"method": "none"},
              "decision": {"threshold": 0.0701, "flagged_rate": 0.386, "sensitivity": 0.7333, "specificity": 0.6437},
              "refer_rule": {"ordering": "risk", "status": "too_small", "referral_rate": 1.0, "miss_rate": 0.0,
                             "brier_kept": None, "true_kept_risk": 0.0, "risk": "miss_rate", "alpha": 0.05,
                             "delta": 0.1}}
    (line,) = [ln for ln in format_lines(report) if ln.startswith("refer rule")]
    assert line == ("refer rule (ranked by the risk; refers everyone: the calibration data are too few to certify its "
                    "promise): refers 100.0% here; kept miss rate 0.0000, kept Brier n/a, from the true risk 0.0000 "
                    "(promised: the model misses at most 5% of deaths, with 90% confidence)")


READMISSION = Outcome("readmission", "readmissions", "admissions without a readmission")


def test_a_policy_speaks_its_outcome_and_keeps_its_words(fitted):
    """Issue 44, item 2: the policy's sentences count the outcome it was fitted with (the run's task's); its JSON keeps
    the words, so a run read back says them; a policy recorded before them says the caller's, else the deaths."""
    import re

    _, (sel, ys, cal, yc) = fitted
    policy = fit_policy(sel, ys, cal, yc, ReferralConfig(ordering="decision"), seed=0, words=READMISSION)
    text = " ".join(policy.lines()) + policy.sentence()
    assert "misses at most 5% of readmissions, with 90% confidence" in policy.sentence()
    assert f"({int(yc.sum()):,} readmissions)" in policy.calibration_line()
    assert not re.search(r"death|surviv", text, re.I)
    back = Policy.from_dict(json.loads(json.dumps(policy.to_dict())))
    assert back.words == READMISSION and back.sentence() == policy.sentence()
    assert back.rederive(alpha=0.1).sentence().startswith("refer ") and "of readmissions" in back.rederive(
        alpha=0.1).sentence()
    older = {k: v for k, v in policy.to_dict().items() if k != "outcome"}  # a policy recorded before its words
    assert Policy.from_dict(older).words == DEATHS and "of deaths" in Policy.from_dict(older).sentence()
    assert Policy.from_dict(older, READMISSION).words == READMISSION
    small = fit_policy(sel, ys, Predictive(cal.mean[:60]), yc[:60], ReferralConfig(), words=READMISSION)
    with pytest.raises(CalibrationTooSmall, match="calibration readmissions"):
        small.rederive(strict=True, alpha=0.001, delta=0.001)


def test_too_few_outcomes_for_the_cross_fitted_choice_are_said_in_words():
    """The line said "select_method: 5 folds need at least 2 folds and as many deaths and survivors" (an internal name,
    a mortality word for every task): it says the counts in the outcome's words."""
    sel, ys = _world(400, 11)
    cal, _ = _world(40, 12)
    yc = np.zeros(40)
    yc[:3] = 1.0
    line = fit_policy(sel, ys, cal, yc, words=READMISSION).calibration_line()
    assert line == ("risks not recalibrated: the calibration data hold 3 readmissions and 37 admissions without a "
                    "readmission; choosing a map by 5-fold cross-fitted NLL needs at least 5 of each")
    assert "3 deaths and 37 survivors" in fit_policy(sel, ys, cal, yc).calibration_line()


@pytest.mark.parametrize("selection, calibration, share, fixed, expected", [
    ([0, 1], [], 0.0, None, "the run kept no validation admissions apart for calibration (--calibration-share 0)"),
    ([0, 1, 0], [0, 0, 0], 0.5, None, "the 3 validation admissions kept apart for calibration (the calibration "
     "half, --calibration-share 0.5) held no {one}; a recalibration map and a refer rule need both outcomes"),
    ([0, 1], [1, 1], 0.5, None, "the 2 validation admissions kept apart for calibration (the calibration half, "
     "--calibration-share 0.5) held only {many}; a recalibration map and a refer rule need both outcomes"),
    ([0, 0, 0], [0, 1, 0], 0.3, None, "the 3 validation admissions that choose the decision threshold (the "
     "selection half) held no {one}; the decision threshold's sensitivity rule needs both outcomes "
     "(--decision-threshold fixes one)"),
    ([0, 0, 0], [0, 1, 0], 0.3, 0.2, None),  # a fixed threshold needs no outcome in the selection half
    ([0, 1, 0], [], 0.5, None, "none of the 3 validation admissions fell in the calibration half "
     "(--calibration-share 0.5 keeps each apart by a hash of its pseudonym); a recalibration map and a refer rule need "
     "both outcomes"),
    ([], [1, 0], 0.5, None, "none of the 2 validation admissions fell in the selection half, which chooses the "
     "decision threshold (all were kept apart for calibration, --calibration-share 0.5); the decision threshold's "
     "sensitivity rule needs both outcomes (--decision-threshold fixes one)"),
    ([0], [0, 1], 0.5, None, "the 1 validation admission that chooses the decision threshold (the selection half) held "
     "no {one}; the decision threshold's sensitivity rule needs both outcomes (--decision-threshold fixes one)"),
    ([0, 0], [0, 0, 0, 0], 0.5, None, "the 6 validation admissions held no {one}, in both halves (4 kept apart for "
     "calibration, --calibration-share 0.5; 2 that choose the decision threshold); a recalibration map and a refer "
     "rule need both outcomes, and the decision threshold's sensitivity rule needs both outcomes "
     "(--decision-threshold fixes one)"),
    ([1, 1], [0, 0], 0.5, None, "the 2 validation admissions kept apart for calibration (the calibration half, "
     "--calibration-share 0.5) held no {one}; a recalibration map and a refer rule need both outcomes; and the 2 "
     "validation admissions that choose the decision threshold (the selection half) held only {many}; the decision "
     "threshold's sensitivity rule needs both outcomes (--decision-threshold fixes one)"),
])
@pytest.mark.parametrize("task", ["mortality", "readmission"])
def test_a_run_without_a_policy_says_which_condition_held(selection, calibration, share, fixed, expected, task):
    """Issue 46, item 2: `train` said "the run kept no validation admissions apart (calibration_share 0), or a
    validation half holds no death ..." (which one? and an internal name): the reason names the half, what it held
    (in the task's words) and the option as typed; fit_run_policy fits a policy exactly when there is none."""
    from pipeline.data.task import MORTALITY, TaskWords
    from pipeline.tasks.mortality.validation import fit_run_policy, no_policy

    words = None if task == "mortality" else TaskWords("r", "readmission", "readmissions", "at discharge", "meds:X")
    config = ReferralConfig(decision_threshold=fixed)
    said = no_policy(_Half(selection), _Half(calibration), config, share, words)
    w = words or MORTALITY
    assert said == (None if expected is None else expected.format(one=w.event, many=w.events))
    if said is not None:
        assert "calibration_share" not in said and "or a validation half" not in said
        assert fit_run_policy(None, _Half(selection), _Half(calibration), samples=1, batch_size=1, max_bags=None,
                              max_tokens=None, seed=0, context_vocab=[], config=config) is None


@pytest.mark.parametrize("recorded, train_config, expected", [
    ("the 20 validation admissions kept apart for calibration (the calibration half, --calibration-share 0.5) held no "
     "death; a recalibration map and a refer rule need both outcomes", {"calibration_share": 0.5}, None),
    (None, {}, "this run was trained before risks were recalibrated"),
    (None, {"calibration_share": 0.0}, "the run kept no validation admissions apart for calibration "
     "(--calibration-share 0)"),
    (None, {"calibration_share": 0.5}, "a validation half of the run (--calibration-share 0.5) held a single outcome "
     "(the run, trained before the reason was recorded, does not say which half)"),
])
def test_score_says_why_a_run_has_no_policy(recorded, train_config, expected):
    """Issue 46, item 2: `score` and the report said "this run was trained before risks were recalibrated" of a run
    trained minutes earlier: they say the reason the run recorded, else what its settings tell."""
    from types import SimpleNamespace

    from pipeline.serving.decisions import policy_lines
    from pipeline.tasks.mortality.finish import policy_lines as train_lines
    from pipeline.tasks.mortality.validation import said_no_policy

    why = said_no_policy(SimpleNamespace(no_policy=recorded, train_config=train_config))
    assert why == (expected or recorded)
    assert policy_lines(None, 0, why) == [f"no calibration: {why}; risk_calibrated is empty and refer is its refer "
                                          "measure above its validation threshold, with no promise"]
    assert train_lines(None, why) == [f"no calibration: {why}; the run has no recalibration, decision threshold or "
                                      "refer rule and scores with no promise"]


def test_only_the_merged_venn_abers_map_is_promised_inside_the_interval():
    """The promise docs/referral.md states (issue 46, item 2), on every row of a census of 5,000 admissions: the
    interval is the Venn-Abers pair of the raw risk, p0 <= p1; the calibrated risk lies inside it when the map is
    venn_abers (p1 / (1 - p0 + p1)); another map's value need not (here the raw risk, too flat a risk, leaves many
    outside)."""
    sel, ys = _world(1500, 21)
    cal, yc = _world(1500, 22)
    census, _ = _world(5000, 23)
    outside = {}
    for method in ("venn_abers", "none"):
        c = fit_policy(sel, ys, cal, yc, ReferralConfig(calibration=method)).apply(census)
        assert (c.va_low <= c.va_high).all() and np.isfinite(c.va_low).all()
        outside[method] = int(((c.risk_calibrated < c.va_low - 1e-12) | (c.risk_calibrated > c.va_high + 1e-12)).sum())
    assert outside["venn_abers"] == 0 and outside["none"] > 0, outside
