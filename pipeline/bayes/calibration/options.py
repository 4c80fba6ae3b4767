"""The recalibration methods, as a ``str`` enum (torch-, numpy- and scipy-free: the command line offers them)."""

from __future__ import annotations

from enum import Enum


class Method(str, Enum):
    """A post-hoc recalibration method (``none``: the model's risk as it is)."""

    NONE = "none"  # the identity
    TEMPERATURE = "temperature"  # sigmoid(logit(p) / T)
    PLATT = "platt"  # sigmoid(a + b logit(p)), b >= 0
    ISOTONIC = "isotonic"  # non-decreasing isotonic regression of y on p
    VENN_ABERS = "venn_abers"  # inductive Venn-Abers: interval [p0, p1], merged p1 / (1 - p0 + p1)
