"""How a run turns its risks into decisions: ``ReferralConfig`` (numpy- and scipy-free: the command line offers
its fields; ``policy`` fits and applies it)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import Enum

from pipeline.bayes.calibration.options import Method
from pipeline.bayes.referral.options import Ordering, ThresholdRule
from pipeline.bayes.referral.settings import ReferSettings, Risk, RuleMethod
from pipeline.core.configs import check_choice, invalid

AUTO = "auto"
GROUP_FAMILIES = ("age", "gender", "admission_type", "admission_location")  # context families (vocab "family:value")


@dataclass
class ReferralConfig:
    """How a run turns its risks into decisions (one comment per field: the command line's help)."""

    calibration: str = AUTO  # recalibration of the risk: auto (the method of lowest cross-fitted NLL) | none |
        # temperature | platt | isotonic | venn_abers
    threshold_rule: ThresholdRule = ThresholdRule.SENSITIVITY  # the decision threshold: sensitivity | fixed (set by
        # decision_threshold alone)
    sensitivity: float = 0.8  # threshold rule sensitivity: the share of validation positives (the task's outcome:
        # deaths, readmissions ...) flagged high risk
    decision_threshold: float | None = None  # threshold rule fixed: the calibrated risk that counts as high risk
    alpha: float = 0.05  # the refer rule's promise: the kept admissions' risk is at most alpha
    delta: float = 0.1  # with probability at least 1 - delta over the calibration data
    risk: Risk = Risk.MISS  # the risk promised: miss_rate (positives kept and not flagged, over all positives: the
        # task's outcome) | brier
    ordering: str = AUTO  # what the refer flag ranks by: auto (the calibrated risk) | risk | entropy | mi | sd |
        # band | decision | va_decision | va_width
    group: str | None = None  # a context family the promise holds within: age | gender | admission_type |
        # admission_location (Mondrian: a cut per group)
    rule: RuleMethod = RuleMethod.LTT  # ltt (the guarantee) | plugin (the fewest referrals whose calibration risk
        # meets alpha; no guarantee) | fraction (refer a fixed share, --refer-fraction; no guarantee)
    fraction: float = 0.1  # rule fraction: the share of the calibration admissions referred

    def __post_init__(self) -> None:
        if self.calibration != AUTO:
            check_choice(self, "calibration", Method)
        if self.decision_threshold is not None and self.threshold_rule == ThresholdRule.SENSITIVITY.value:
            self.threshold_rule = ThresholdRule.FIXED  # --decision-threshold P alone fixes the threshold at P
        check_choice(self, "threshold_rule", ThresholdRule)
        check_choice(self, "risk", Risk)
        check_choice(self, "rule", RuleMethod)
        if self.ordering != AUTO:
            check_choice(self, "ordering", Ordering)
        if not 0.0 < float(self.sensitivity) <= 1.0:
            raise invalid(self, f"sensitivity must lie in (0, 1], got {self.sensitivity}", "sensitivity")
        if self.threshold_rule is ThresholdRule.FIXED and self.decision_threshold is None:
            raise invalid(self, "threshold_rule fixed needs decision_threshold", "threshold_rule",
                          "decision_threshold")
        if self.decision_threshold is not None and not 0.0 <= float(self.decision_threshold) <= 1.0:
            raise invalid(self, f"decision_threshold must lie in [0, 1], got {self.decision_threshold}",
                          "decision_threshold")
        if self.group is not None and self.group not in GROUP_FAMILIES:
            raise invalid(self, f"group must be one of {list(GROUP_FAMILIES)}, got {self.group!r}", "group")
        self.settings()  # alpha, delta, fraction: their own checks

    def settings(self) -> ReferSettings:
        """The refer rule's settings."""
        try:
            return ReferSettings(alpha=self.alpha, delta=self.delta, risk=self.risk, method=self.rule,
                                 fraction=self.fraction, group_column=self.group)
        except Exception as exc:  # name this config's fields, not ReferSettings'
            if getattr(exc, "fields", None):
                raise invalid(self, str(exc), *exc.fields) from None
            raise

    def to_dict(self) -> dict:
        return {k: (v.value if isinstance(v, Enum) else v) for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_dict(cls, d: dict) -> ReferralConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})
