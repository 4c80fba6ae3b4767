"""The shift check: does a scored cohort differ from the reference (the run's calibration half), label-free?

Per measure, a valid p-value and an effect size (the AUROC of cohort against reference):

- each model output the reference holds (``reference.measures``: the calibrated risk; for a posterior model its
  mutual information, sd and decision uncertainty) by the Mann-Whitney test (``ranks.u_test``, two-sided); a
  measure constant over the reference (a point model's posterior measures) is not tested, a choice made from the
  reference alone so that the number of tests is fixed before the cohort is seen;
- the features, when the reference keeps a feature sample and the caller gives the cohort's matrix: the kernel
  MMD permutation test (``kernel.mmd_test``, the default ``FeatureTest.MMD``; its AUROC is the held-out witness
  function's) or the cross-fitted domain classifier (``domain.domain_test``, one-sided). The MMD is the default
  because it was measured as valid and at least as powerful on every synthetic shift (``experiments.shift_detectors``:
  3 of 50 Gaussian columns shifted by 0.3 sd, cohorts of 100 against 1,000: flagged 72% against 45%; every column's
  sd 1.2: 100% against 3-8%, at the level), at a similar cost.

**One verdict at ``level``, multiple testing by Holm** (step-down Bonferroni): the K p-values are sorted, the i-th
smallest compared with level / (K - i + 1). The cohort "differs" when the smallest passes (level / K): that is the
Bonferroni test of the global null, valid whatever the dependence between the measures (risk, mutual information
and sd of one model are strongly dependent, which rules out Fisher's combination; the Cauchy combination is valid
under dependence only asymptotically in the level and gains over Bonferroni when many weak signals add up, which
four or five measures of one model are not). Holm also says which measures differ, each at family-wise level
``level``. The combined p-value is the smallest Holm-adjusted one, min(1, K min p). The **strongest** measure, the
one the sentence names, is that of the smallest adjusted p-value (ties: the AUROC farthest from 0.5).

**Too small**: a cohort under ``ranks.min_size(m, level / K)`` admissions cannot reach the verdict's threshold even
if it were completely separated from the reference: the check says so and that size (the floor), and the size at
which an AUROC of ``DESIGN_AUROC`` is detected with 80% power (Noether; a recommendation, not a floor). The
feature test is one-sided on folds of half the admissions: its floor is about the same (complete separation of
both folds gives z about 1/sqrt(2) of the whole sample's, against a one-sided instead of a two-sided tail), and it is
not refused separately.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

import numpy as np

from pipeline.bayes.shift.domain import as_matrix, domain_test
from pipeline.bayes.shift.kernel import mmd_test
from pipeline.bayes.shift.ranks import min_size, size_for, u_test
from pipeline.bayes.shift.reference import ShiftReference

LEVEL = 0.05  # the verdict's family-wise level
DESIGN_AUROC = 0.6  # the effect size the recommended cohort size is computed for (80% power)
FEATURES = "features"  # the feature test's name among the measures
WORDS = {"risk": "the calibrated risk", "mi": "the posterior's mutual information", "sd": "the posterior's sd",
         "decision": "the decision uncertainty", "entropy": "the entropy of the risk",
         FEATURES: "the features"}


class FeatureTest(str, Enum):
    """How the features are compared."""

    MMD = "mmd"  # the kernel two-sample test (permutation p; AUROC of its held-out witness) - the default
    CLASSIFIER = "classifier"  # the cross-fitted domain classifier (AUROC, one-sided p)
    NONE = "none"  # the features are not compared


class Verdict(str, Enum):
    """What the check says."""

    SHIFTED = "shifted"  # the cohort differs from the reference at the level
    NOT_DETECTED = "not_detected"  # no difference detected at the level (not: no difference)
    TOO_SMALL = "too_small"  # too few cohort admissions to reach the level at all


@dataclass
class MeasureShift:
    """One measure's comparison."""

    name: str  # the measure ("risk", "mi", ..., "features")
    test: str  # mann_whitney | domain_classifier | mmd
    auroc: float | None  # cohort against reference
    p_value: float  # the test's own p-value
    adjusted: float  # Holm-adjusted p-value (family-wise over the measures tested)
    differs: bool  # adjusted <= level

    def to_dict(self) -> dict:
        return {"name": self.name, "test": self.test, "auroc": self.auroc, "p_value": float(self.p_value),
                "adjusted": float(self.adjusted), "differs": bool(self.differs)}


@dataclass
class ShiftReport:
    """The check's result: per measure, the verdict, what the sentence says."""

    verdict: Verdict  # shifted | not_detected | too_small
    n: int  # cohort admissions
    m: int  # reference admissions
    level: float  # the family-wise level
    p_value: float | None  # combined: the smallest Holm-adjusted p-value (None: too small)
    strongest: str | None  # the measure of the smallest adjusted p-value (None: too small)
    needed: int  # the fewest cohort admissions that can reach the level at all (module docstring)
    recommended: int | None  # admissions to detect AUROC DESIGN_AUROC with 80% power (None: not with this reference)
    measures: dict[str, MeasureShift] = field(default_factory=dict)  # name -> its comparison
    skipped: list[str] = field(default_factory=list)  # measures constant over the reference (not tested)
    source: str = "the calibration admissions"  # the reference, in words

    def to_dict(self) -> dict:
        return {"verdict": self.verdict.value, "n": self.n, "m": self.m, "level": self.level,
                "p_value": self.p_value, "strongest": self.strongest, "needed": self.needed,
                "recommended": self.recommended, "design_auroc": DESIGN_AUROC,
                "measures": {k: v.to_dict() for k, v in self.measures.items()}, "skipped": list(self.skipped),
                "source": self.source, "sentence": self.sentence()}

    def sentence(self, hint: str = "") -> str:
        """The check in one sentence; ``hint`` (e.g. "; see `recertify`") is appended to a shift."""
        ref = self.source
        if self.verdict is Verdict.TOO_SMALL:
            rec = "" if self.recommended is None else (f", and about {self.recommended:,} to detect an AUROC of "
                                                       f"{DESIGN_AUROC:g} with 80% power")
            return (f"{self.n:,} admissions are too few to compare with {ref}: the check needs at least "
                    f"{self.needed:,}{rec}")
        s = self.measures[self.strongest]
        p = "p < 0.001" if self.p_value < 0.001 else f"p = {self.p_value:.2g}"
        what = WORDS.get(s.name, s.name)
        effect = "" if s.auroc is None else (f", {'higher' if s.auroc >= 0.5 else 'lower'} here: AUROC "
                                             f"{s.auroc:.2f}")
        if self.verdict is Verdict.SHIFTED:
            return (f"these {self.n:,} admissions differ from {ref} ({p}; {what}{effect}): the promise assumes they "
                    f"do not{hint}")
        return (f"these {self.n:,} admissions do not differ detectably from {ref} ({p} at level {self.level:g}; the "
                f"strongest difference: {what}{effect})")


def holm(p: np.ndarray) -> np.ndarray:
    """Holm-adjusted p-values (step-down, monotone, capped at 1)."""
    p = np.asarray(p, dtype=np.float64)
    k = p.shape[0]
    order = np.argsort(p, kind="stable")
    adj = np.minimum(1.0, np.maximum.accumulate(p[order] * (k - np.arange(k))))
    out = np.empty(k)
    out[order] = adj
    return out


def testable(reference: ShiftReference) -> list[str]:
    """The reference's measures the check tests: those not constant over the reference."""
    return [k for k, v in reference.measures.items() if v.size and float(np.ptp(v)) > 0.0]


def check_shift(reference: ShiftReference, cohort: dict, features=None, columns: list[str] | None = None,
                level: float = LEVEL, feature_test: FeatureTest | str = FeatureTest.MMD,
                seed: int = 0) -> ShiftReport:
    """Compare a cohort's ``cohort`` measures (name -> (n,), every measure the reference tests) and optionally
    its ``features`` (n, d; ``columns`` their names) with ``reference`` (module docstring)."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie strictly between 0 and 1, got {level!r}")
    feature_test = FeatureTest(feature_test)
    names = testable(reference)
    missing = [k for k in names if k not in cohort]
    if missing:
        raise ValueError(f"cohort: no {missing[0]!r} measure, which the reference holds ({len(missing)} missing)")
    sizes = {np.asarray(cohort[k]).size for k in names}
    use_features = feature_test is not FeatureTest.NONE and features is not None and reference.features is not None
    if use_features:
        reference.check_columns(columns)
        f = as_matrix(features, "cohort features")
        sizes.add(f.shape[0])
    if len(sizes) > 1:
        raise ValueError(f"cohort: measures and features of different lengths {sorted(sizes)}")
    if not sizes:
        raise ValueError("cohort: nothing to compare (no measure varies over the reference and no features)")
    n = sizes.pop()
    m = min([reference.measures[k].size for k in names] + ([reference.features.shape[0]] if use_features else []))
    k_tests = len(names) + int(use_features)
    needed = min_size(m, level / k_tests)
    recommended = size_for(DESIGN_AUROC, m, level / k_tests)
    skipped = [k for k in reference.measures if k not in names]
    if n < needed:
        return ShiftReport(Verdict.TOO_SMALL, n, m, level, None, None, needed, recommended, {}, skipped,
                           reference.source)
    rows: list[tuple[str, str, float | None, float]] = []
    for k in names:
        t = u_test(cohort[k], reference.measures[k], k)
        rows.append((k, "mann_whitney", t.auroc, t.p_value))
    if use_features:
        if feature_test is FeatureTest.CLASSIFIER:
            d = domain_test(reference.features, f, seed=seed)
            rows.append((FEATURES, "domain_classifier", d.auroc, d.p_value))
        else:
            kt = mmd_test(reference.features, f, seed=seed)
            rows.append((FEATURES, "mmd", kt.auroc, kt.p_value))
    adj = holm(np.array([r[3] for r in rows]))
    results = {r[0]: MeasureShift(r[0], r[1], r[2], r[3], float(a), bool(a <= level)) for r, a in zip(rows, adj)}
    strongest = min(results.values(), key=lambda s: (s.adjusted, -abs((s.auroc if s.auroc is not None else 0.5)
                                                                      - 0.5))).name
    p = float(adj.min())
    verdict = Verdict.SHIFTED if p <= level else Verdict.NOT_DETECTED
    return ShiftReport(verdict, n, m, level, p, strongest, needed, recommended, results, skipped, reference.source)
