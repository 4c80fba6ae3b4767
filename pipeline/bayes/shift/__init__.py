"""The shift check: is a scored cohort still like the admissions the run's promise was certified on? Label-free.

Arrays in, dataclasses out (numpy, scipy, scikit-learn; no torch). ``ranks``: the Mann-Whitney test of one measure
with its AUROC as the effect size, the smallest testable cohort and the size for a stated power. ``domain``: the
cross-fitted domain classifier of a feature matrix (a test) and its likelihood-ratio weights (for the weighted
refer rule, ``referral.weighted``). ``kernel``: the MMD permutation test, the alternative feature test.
``reference``: what a run keeps for the check (``ShiftReference``: the calibration half's measures and a feature
sample, de-identified; JSON and .npz round trips). ``check``: ``check_shift``, every measure's p-value and AUROC,
one verdict at a stated level (Holm), the strongest measure and the sentence, or "too small" with the size needed.
"""

from pipeline.core.lazy import lazy

_HOMES = {
    **dict.fromkeys(("MIN_COHORT", "RankTest", "min_size", "size_for", "smallest_p", "u_test"), "ranks"),
    **dict.fromkeys(("DomainModel", "DomainTest", "domain_test", "fit_domain"), "domain"),
    **dict.fromkeys(("KernelTest", "mmd_test"), "kernel"),
    **dict.fromkeys(("MAX_ROWS", "ShiftReference", "make_reference"), "reference"),
    **dict.fromkeys(("DESIGN_AUROC", "LEVEL", "FeatureTest", "MeasureShift", "ShiftReport", "Verdict", "check_shift",
                     "holm", "testable"), "check"),
}
__all__ = sorted(_HOMES)
__getattr__, __dir__ = lazy(__name__, _HOMES)
