"""Referral with a promise: the decision threshold, ordering measures, and a refer rule with a finite-sample
guarantee, checked against a known truth.

Arrays in, dataclasses out (numpy and scipy; no torch). ``threshold``: the decision threshold chosen on
validation by a named rule (``choose_threshold``). ``measures``: what the refer flag ranks by
(``Ordering``), decision uncertainty from draws or a Gaussian logit, its Venn-Abers counterpart, and the
plain words of each (``describe``). ``rule``: ``fit_refer_rule``, Learn-then-Test over the cuts so that
with probability >= 1 - delta the kept admissions' miss rate or Brier score is <= alpha, per group if asked,
or the plug-in and fixed-fraction rules; ``bounds`` its p-values; ``text`` its sentence. ``check``: the
guarantee's failure rate measured against a known true risk (``check_guarantee``).

The calibration admissions of the rule must be apart from whatever chose the decision threshold, fitted
the recalibration map or set the candidate cuts: the guarantee is about admissions exchangeable with them.
"""

from pipeline.bayes.referral.bounds import binomial_p_value, cut_grid, hb_p_value, required_size
from pipeline.bayes.referral.check import REPEATS, GuaranteeCheck, Share, check_guarantee, true_kept_risk
from pipeline.bayes.referral.measures import (
    HIGH_RISK,
    WORDS,
    Ordering,
    decision_uncertainty,
    describe,
    gaussian_decision_uncertainty,
    monotone_in_risk,
    va_decision_uncertainty,
    va_width,
)
from pipeline.bayes.referral.rule import GroupRule, Reference, ReferRule, fit_refer_rule
from pipeline.bayes.referral.settings import (
    N_CUTS,
    CalibrationTooSmall,
    ReferralError,
    ReferSettings,
    Risk,
    RuleMethod,
    Status,
)
from pipeline.bayes.referral.text import sentence
from pipeline.bayes.referral.threshold import SENSITIVITY, DecisionThreshold, ThresholdRule, choose_threshold

__all__ = [
    "HIGH_RISK", "N_CUTS", "REPEATS", "SENSITIVITY", "WORDS", "CalibrationTooSmall", "DecisionThreshold",
    "GroupRule", "GuaranteeCheck", "Ordering", "Reference", "ReferRule", "ReferSettings", "ReferralError", "Risk",
    "RuleMethod", "Share", "Status", "ThresholdRule", "binomial_p_value", "check_guarantee", "choose_threshold",
    "cut_grid", "decision_uncertainty", "describe", "fit_refer_rule", "gaussian_decision_uncertainty",
    "hb_p_value", "monotone_in_risk", "required_size", "sentence", "true_kept_risk", "va_decision_uncertainty",
    "va_width",
]
