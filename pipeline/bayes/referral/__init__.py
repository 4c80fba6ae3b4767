"""Referral with a promise: the decision threshold, ordering measures, and a refer rule with a finite-sample
guarantee, checked against a known truth.

Arrays in, dataclasses out (numpy and scipy; no torch). ``threshold``: the decision threshold chosen on
validation by a named rule (``choose_threshold``). ``measures``: what the refer flag ranks by
(``Ordering``), decision uncertainty from draws or a Gaussian logit, its Venn-Abers counterpart, and the
plain words of each (``describe``). ``rule``: ``fit_refer_rule``, Learn-then-Test over the cuts so that
with probability >= 1 - delta the kept admissions' miss rate or Brier score is <= alpha, per group if asked,
or the plug-in and fixed-fraction rules; ``bounds`` its p-values; ``text`` its sentence. ``check``: the
guarantee's failure rate measured against a known true risk (``check_guarantee``). ``weighted``: the rule
re-certified for a new population by importance weights, without its outcomes (valid under covariate shift only).
``recertification``: ``recertify``, a run's policy refitted on new labelled admissions (the map and the rule;
the flags kept or the threshold refitted). ``power``: what a certified rule can keep on n labelled admissions
(the exact test's floor, from known or trusted risks) and the labelled set that comes within a margin of the oracle.

The calibration admissions of the rule must be apart from whatever chose the decision threshold, fitted
the recalibration map or set the candidate cuts: the guarantee is about admissions exchangeable with them.
"""

from pipeline.core.lazy import lazy

_HOMES = {
    **dict.fromkeys(("binomial_p_value", "cut_grid", "hb_p_value", "required_size"), "bounds"),
    **dict.fromkeys(("REPEATS", "GuaranteeCheck", "Share", "check_guarantee", "true_kept_risk"), "check"),
    **dict.fromkeys(("HIGH_RISK", "WORDS", "decision_uncertainty", "describe", "gaussian_decision_uncertainty",
                     "monotone_in_risk", "va_decision_uncertainty", "va_width"), "measures"),
    **dict.fromkeys(("Ordering", "ThresholdRule"), "options"),
    **dict.fromkeys(("GroupRule", "Reference", "ReferRule", "fit_refer_rule"), "rule"),
    **dict.fromkeys(("N_CUTS", "CalibrationTooSmall", "ReferralError", "ReferSettings", "Risk", "RuleMethod", "Status"),
                    "settings"),
    "sentence": "text",
    **dict.fromkeys(("SENSITIVITY", "DecisionThreshold", "choose_threshold"), "threshold"),
    **dict.fromkeys(("Columns", "Policy", "Predictive", "fit_policy"), "policy"),
    "ReferralConfig": "config",
    **dict.fromkeys(("MAX_WEIGHT", "WeightedRule", "fit_weighted_refer_rule", "mean_lower_bound", "needed_deaths"),
                    "weighted"),
    "recertify": "recertification",
    **dict.fromkeys(("MissCurve", "certifiable_misses", "expected_share", "labelled_needed", "oracle_share"), "power"),
}
__all__ = sorted(_HOMES)
__getattr__, __dir__ = lazy(__name__, _HOMES)
