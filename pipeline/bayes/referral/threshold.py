"""The decision threshold: the risk at or above which an admission counts as high risk.

Chosen on validation admissions (the calibrated risk and the outcome) by a named rule and recorded as a
``DecisionThreshold``. Rules:

- ``sensitivity`` (default): the highest threshold t at which the sensitivity, the share of deaths with
  risk >= t, is at least ``sensitivity`` (0.8 by default). With D deaths, t is the ceil(level * D)-th
  highest risk among the deaths; every admission tied with it is flagged too.
- ``fixed``: a threshold the user gives (``threshold``), recorded with the sensitivity it reaches.

An admission is high risk when its risk >= t (ties at t are flagged).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from pipeline.bayes.metrics import check_labels, check_probs
from pipeline.bayes.referral.options import ThresholdRule
from pipeline.bayes.referral.text import DEATHS, Outcome
from pipeline.core.errors import ConfigError

SENSITIVITY = 0.8  # the default sensitivity the threshold must reach on validation


@dataclass
class DecisionThreshold:
    """The decision threshold and what it does on the admissions it was chosen on."""

    threshold: float  # high risk: risk >= threshold
    rule: ThresholdRule  # how it was chosen
    target: float | None  # the sensitivity asked for (rule sensitivity), else None
    sensitivity: float  # share of deaths flagged, on the admissions it was chosen on
    specificity: float  # share of survivors not flagged (nan without survivors)
    flagged_rate: float  # share of all admissions flagged
    n: int  # admissions it was chosen on
    deaths: int  # deaths among them

    def flag(self, risk) -> np.ndarray:
        """High risk: ``risk >= threshold``, same shape."""
        return np.asarray(risk, dtype=np.float64) >= self.threshold

    def to_dict(self) -> dict:
        d = asdict(self)
        d["rule"] = self.rule.value
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()}

    @classmethod
    def from_dict(cls, d: dict) -> DecisionThreshold:
        nan = float("nan")
        return cls(float(d["threshold"]), ThresholdRule(d["rule"]), d.get("target"),
                   nan if d["sensitivity"] is None else float(d["sensitivity"]),
                   nan if d["specificity"] is None else float(d["specificity"]), float(d["flagged_rate"]),
                   int(d["n"]), int(d["deaths"]))

    def summary(self) -> str:
        """One line: the threshold and what it flags."""
        why = (f"the highest risk at which validation sensitivity reaches {self.target:.0%}"
               if self.rule is ThresholdRule.SENSITIVITY else "fixed")
        return (f"decision threshold {self.threshold:.4g} ({why}): flags {self.flagged_rate:.1%} of {self.n:,} "
                f"admissions, sensitivity {self.sensitivity:.1%}, specificity {self.specificity:.1%}")


def choose_threshold(risk, labels, rule: ThresholdRule | str = ThresholdRule.SENSITIVITY,
                     sensitivity: float = SENSITIVITY, threshold: float | None = None,
                     words: Outcome = DEATHS) -> DecisionThreshold:
    """The ``DecisionThreshold`` of ``rule`` on risks (N,) and labels (N,) (see the module docstring; an error
    names the outcome in ``words``)."""
    y = check_labels(labels)
    r = check_probs(risk, y.shape[0], "risk")
    try:
        rule = ThresholdRule(rule)
    except ValueError:
        raise ConfigError(f"--threshold-rule must be one of {[e.value for e in ThresholdRule]}, got {rule!r}") from None
    deaths = int(y.sum())
    if rule is ThresholdRule.SENSITIVITY:
        if not 0.0 < sensitivity <= 1.0:
            raise ConfigError(f"--sensitivity must lie in (0, 1], got {sensitivity}")
        if deaths == 0:
            raise ConfigError(f"--threshold-rule sensitivity: the admissions hold no {words.one}, so no sensitivity "
                              "can be reached; give --decision-threshold instead")
        need = math.ceil(sensitivity * deaths - 1e-9)  # deaths to flag; the tolerance keeps 0.8 * 10 at 8
        t = float(np.sort(r[y == 1.0])[::-1][need - 1])
        target = float(sensitivity)
    else:
        if threshold is None or not 0.0 <= float(threshold) <= 1.0:
            raise ConfigError(f"--decision-threshold must lie in [0, 1], got {threshold}")
        t, target = float(threshold), None
    flagged = r >= t
    survivors = y.shape[0] - deaths
    sens = float(flagged[y == 1.0].sum() / deaths) if deaths else float("nan")
    spec = float((~flagged[y == 0.0]).sum() / survivors) if survivors else float("nan")
    return DecisionThreshold(t, rule, target, sens, spec, float(flagged.mean()), int(y.shape[0]), deaths)
