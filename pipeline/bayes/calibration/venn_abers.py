"""Inductive Venn-Abers (Vovk, Petej & Fedorova 2015): a calibrated interval [p0, p1] per admission.

Given calibration scores s_i (the model's risks) with labels y_i, and a new admission of score s: p0 is the
value at s of the isotonic regression of the labels on the scores fitted to the calibration data plus
(s, 0), and p1 the same with (s, 1). Under exchangeability one of the two is a perfectly calibrated
probability (the Venn predictor's multiprobability), so p1 - p0 says how far the calibration data pin the
risk down at that score. The single merged probability p1 / (1 - p0 + p1) is the one that minimises the
worst-case log loss over the two (the paper's section 4); it lies in (0, 1) and is non-decreasing in s.

p0 and p1 depend on the new score only through where it falls among the k distinct calibration scores
c_1 < ... < c_k: in a gap (below c_1, between two, above c_k: k + 1 slots) or on a tie with some c_j (k
slots; the new point is then pooled with c_j's admissions, as isotonic regression pools tied scores). So
the fit is a table of p0 and p1 for those 2k + 1 slots, one weighted isotonic regression (scipy's PAVA)
per slot and label, O(k n) in all; applying it is a binary search per value, for an array of any shape
(the draws of a risk included). The table is what ``to_dict`` writes.

MAPIE's ``VennAbersCalibrator`` computes the same gap slots by the paper's convex-minorant algorithm and is
this module's test oracle; it is not used here because the project must apply the map to draws it holds
alone, serialise it as plain numbers and treat ties exactly (MAPIE puts a tied score in the gap above for
p0 and below for p1).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import isotonic_regression

from pipeline.bayes.calibration.maps import CalibrationMap, Method, check_fit_data


@dataclass
class VennAbers(CalibrationMap):
    """The inductive Venn-Abers predictor of a calibration set, as a table over score slots."""

    scores: np.ndarray  # (k,) distinct calibration scores, increasing
    p0_gap: np.ndarray  # (k + 1,) p0 of a score in gap g (g calibration scores below it)
    p1_gap: np.ndarray  # (k + 1,) p1 of a score in gap g
    p0_tie: np.ndarray  # (k,) p0 of a score equal to scores[j]
    p1_tie: np.ndarray  # (k,) p1 of a score equal to scores[j]
    n_fit: int = 0  # calibration admissions it was fitted on

    method = Method.VENN_ABERS

    def interval(self, p) -> tuple[np.ndarray, np.ndarray]:
        """(p0, p1) of raw risks ``p`` (any shape), p0 <= p1."""
        s = np.asarray(p, dtype=np.float64)
        k = self.scores.shape[0]
        g = np.searchsorted(self.scores, s, side="left")  # calibration scores strictly below s
        j = np.minimum(g, k - 1)
        tie = (g < k) & (self.scores[j] == s)
        p0 = np.where(tie, self.p0_tie[j], self.p0_gap[g])
        p1 = np.where(tie, self.p1_tie[j], self.p1_gap[g])
        return p0, p1

    def apply(self, p) -> np.ndarray:
        """The merged probability p1 / (1 - p0 + p1)."""
        p0, p1 = self.interval(p)
        return p1 / (1.0 - p0 + p1)

    def width(self, p) -> np.ndarray:
        """p1 - p0: how far the calibration data leave the risk at that score open."""
        p0, p1 = self.interval(p)
        return p1 - p0

    def to_dict(self) -> dict:
        out = {"method": self.method.value, "n_fit": int(self.n_fit)}
        for name in ("scores", "p0_gap", "p1_gap", "p0_tie", "p1_tie"):
            out[name] = [float(v) for v in getattr(self, name)]
        return out

    @classmethod
    def from_dict(cls, d: dict) -> VennAbers:
        arrays = {name: np.asarray(d[name], dtype=np.float64) for name in
                  ("scores", "p0_gap", "p1_gap", "p0_tie", "p1_tie")}
        return cls(**arrays, n_fit=int(d.get("n_fit", 0)))

    @classmethod
    def fit(cls, p, labels) -> VennAbers:
        """The table of p0 and p1 over the 2k + 1 slots of the calibration scores ``p``."""
        q, y = check_fit_data(p, labels)
        scores, inv = np.unique(q, return_inverse=True)
        w = np.bincount(inv).astype(np.float64)  # admissions per distinct score
        pos = np.bincount(inv, weights=y)  # deaths per distinct score
        mean = pos / w
        k = scores.shape[0]
        gap = np.empty((2, k + 1))
        tie = np.empty((2, k))
        for label in (0, 1):
            for g in range(k + 1):  # a new group of one admission between scores[g - 1] and scores[g]
                fit = isotonic_regression(np.insert(mean, g, float(label)), weights=np.insert(w, g, 1.0)).x
                gap[label, g] = fit[g]
            for j in range(k):  # the new admission pooled with the admissions of scores[j]
                wj, mj = w.copy(), mean.copy()
                wj[j] += 1.0
                mj[j] = (pos[j] + label) / wj[j]
                tie[label, j] = isotonic_regression(mj, weights=wj).x[j]
        return cls(scores, gap[0], gap[1], tie[0], tie[1], int(y.shape[0]))
