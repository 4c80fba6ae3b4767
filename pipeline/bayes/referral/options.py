"""The choices of referral, as ``str`` enums (numpy- and scipy-free: the command line offers them): how the
decision threshold is chosen and what the refer flag ranks by. The rule's own (``Risk``, ``RuleMethod``) are
``settings``'."""

from __future__ import annotations

from enum import Enum


class ThresholdRule(str, Enum):
    """How the decision threshold is chosen."""

    SENSITIVITY = "sensitivity"  # the highest risk at which the validation sensitivity reaches a level
    FIXED = "fixed"  # a threshold given by the user


class Ordering(str, Enum):
    """What the refer rule ranks admissions by (highest referred first)."""

    RISK = "risk"  # the (calibrated) risk itself
    ENTROPY = "entropy"  # predictive entropy of the risk (metrics.Measure.ENTROPY)
    MI = "mi"  # mutual information between outcome and weights (metrics.Measure.MUTUAL_INFORMATION)
    SD = "sd"  # standard deviation of the risk over the posterior (metrics.Measure.SD)
    BAND = "band"  # width of the 5-95% band of the risk (metrics.Measure.BAND)
    DECISION = "decision"  # posterior probability that the risk lies across the decision threshold
    VA_DECISION = "va_decision"  # share of the Venn-Abers interval across the decision threshold
    VA_WIDTH = "va_width"  # width p1 - p0 of the Venn-Abers interval
