"""What the refer rule promises and how it is chosen: its settings, statuses and errors."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from pipeline.core.configs import check_choice, invalid
from pipeline.core.errors import ConfigError, PipelineError


class Risk(str, Enum):
    """The risk of the kept (not referred) admissions that the rule bounds."""

    MISS = "miss_rate"  # deaths kept and not flagged at the decision threshold, over all deaths
    BRIER = "brier"  # mean (risk - outcome)^2 over the kept admissions


class RuleMethod(str, Enum):
    """How the refer cut is chosen."""

    LTT = "ltt"  # Learn-then-Test by fixed-sequence testing: the kept risk <= alpha with probability >= 1 - delta
    PLUGIN = "plugin"  # the largest cut whose calibration risk is <= alpha: no finite-sample correction, no guarantee
    FRACTION = "fraction"  # a fixed share of the calibration admissions referred (the former rule): no guarantee


class Status(str, Enum):
    """What a fitted rule can say."""

    CERTIFIED = "certified"  # a cut whose kept risk is <= alpha with confidence 1 - delta
    REFER_ALL = "refer_all"  # no cut met alpha on the calibration data: every admission is referred
    TOO_SMALL = "too_small"  # the calibration data are too few to certify alpha at delta: every admission referred
    UNCERTIFIED = "uncertified"  # a rule without a guarantee (plugin, fraction)


class ReferralError(PipelineError, ValueError):
    """Input the refer rule cannot use (shapes, non-finite measures, missing groups)."""


class CalibrationTooSmall(ConfigError):
    """The calibration data cannot certify the asked alpha at the asked delta (the message says what would)."""

    def __init__(self, message: str, needed: int, have: int):
        super().__init__(message)
        self.needed = needed  # the fewest deaths (miss rate) or admissions (Brier) that could certify
        self.have = have  # what the calibration data hold


N_CUTS = 2000  # candidate cuts: quantiles of the reference measure (fixed-sequence testing pays nothing for more)


@dataclass
class ReferSettings:
    """The promise asked of the refer rule and how its cut is chosen."""

    alpha: float = 0.05  # the largest risk promised for the kept admissions (miss rate: share of all deaths)
    delta: float = 0.1  # the chance, over the calibration data, that the promise fails: confidence 1 - delta
    risk: Risk = Risk.MISS  # the risk bounded: miss_rate or brier
    method: RuleMethod = RuleMethod.LTT  # ltt (the guarantee), plugin (none: for comparison), fraction (none)
    fraction: float = 0.1  # method fraction: the share of the calibration admissions referred
    n_cuts: int = N_CUTS  # candidate cuts, quantiles of the reference measure
    group_column: str | None = None  # the context column of per-group (Mondrian) rules, as recorded
    simultaneous: bool = False  # per-group rules: split delta over the groups so that all hold at once

    def __post_init__(self):
        check_choice(self, "risk", Risk)
        check_choice(self, "method", RuleMethod)
        for name in ("alpha", "delta"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0.0 < float(value) < 1.0:
                raise invalid(self, f"{name} must lie strictly between 0 and 1, got {value!r}", name)
            setattr(self, name, float(value))
        if not 0.0 <= float(self.fraction) < 1.0:
            raise invalid(self, f"fraction must lie in [0, 1), got {self.fraction!r}", "fraction")
        if int(self.n_cuts) < 2:
            raise invalid(self, f"n_cuts must be >= 2, got {self.n_cuts!r}", "n_cuts")

    def to_dict(self) -> dict:
        return {"alpha": self.alpha, "delta": self.delta, "risk": self.risk.value, "method": self.method.value,
                "fraction": self.fraction, "n_cuts": int(self.n_cuts), "group_column": self.group_column,
                "simultaneous": bool(self.simultaneous)}

    @classmethod
    def from_dict(cls, d: dict) -> ReferSettings:
        return cls(**d)
