"""A kernel two-sample test of the features: the maximum mean discrepancy (MMD, Gretton et al. 2012) with a Gaussian
kernel approximated by random Fourier features (Rahimi & Recht 2007), its p-value by permutation.

The features are scaled by their pooled standard deviation; the bandwidth is the median pairwise distance of a
pooled subsample (the median heuristic; the pooled sample carries no sample label, so the permutation argument
holds). With Phi (N, D) the random features, MMD^2 ~ ||mean Phi(cohort) - mean Phi(reference)||^2; the p-value is
(1 + #{permutations with MMD^2 >= observed}) / (1 + B), exact for any sample size (the sample labels are
exchangeable under the null) up to its resolution 1 / (1 + B). The permutations are a (B, N) matrix product, so the
test costs one pass over the features plus B N D multiply-adds.

Its effect size is an AUROC too: the kernel's witness function (the difference of the two samples' mean random
features, whose inner product with Phi(x) scores an admission) is fitted on one half of each sample and scores the
other half, both ways; the AUROC of cohort against reference of those held-out scores, averaged over the two halves
(0.5: the witness learned nothing that carries over).

It was measured against the cross-fitted domain classifier (``domain``) on synthetic shifts
(``experiments.shift_detectors``) and became the shift check's default feature test: as valid (exactly, by
permutation), at least as powerful on every shift measured, and the only one of the two that sees a change of
spread (docs/referral.md, "When the patients change").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import sparse

from pipeline.bayes.shift.domain import _scale, _scaled, _stack, as_matrix, fold_ids
from pipeline.bayes.shift.ranks import u_test

FEATURES = 256  # random Fourier features
PERMUTATIONS = 200  # permutations of the sample labels
SUBSAMPLE = 500  # pooled rows for the median heuristic


@dataclass
class KernelTest:
    """The MMD permutation test."""

    mmd2: float  # the observed squared MMD (random-feature estimate)
    auroc: float  # the held-out witness scores' AUROC of cohort against reference (module docstring)
    p_value: float  # (1 + #{permuted >= observed}) / (1 + permutations)
    n: int  # cohort admissions
    m: int  # reference admissions

    def to_dict(self) -> dict:
        return {"mmd2": float(self.mmd2), "auroc": float(self.auroc), "p_value": float(self.p_value), "n": self.n,
                "m": self.m}


def _dense(x) -> np.ndarray:
    return x.toarray() if sparse.issparse(x) else x


def mmd_test(reference, cohort, seed: int = 0, features: int = FEATURES,
             permutations: int = PERMUTATIONS) -> KernelTest:
    """The MMD permutation test of ``cohort`` (n, d) against ``reference`` (m, d) (module docstring)."""
    r, c = as_matrix(reference, "reference features"), as_matrix(cohort, "cohort features")
    if r.shape[1] != c.shape[1]:
        raise ValueError(f"cohort features: {c.shape[1]} columns, the reference has {r.shape[1]}")
    rng = np.random.default_rng(seed)
    x = _stack(r, c)
    x = _scaled(x, _scale(x))
    big = x.shape[0]
    sub = _dense(x[rng.choice(big, size=min(SUBSAMPLE, big), replace=False)])
    sq = (sub * sub).sum(axis=1)
    dist2 = np.maximum(sq[:, None] + sq[None, :] - 2.0 * sub @ sub.T, 0.0)
    med = float(np.sqrt(np.median(dist2[np.triu_indices(sub.shape[0], 1)])))
    bandwidth = med if med > 0.0 else 1.0
    omega = rng.normal(0.0, 1.0 / bandwidth, size=(x.shape[1], features))
    phase = rng.uniform(0.0, 2.0 * np.pi, size=features)
    phi = np.sqrt(2.0 / features) * np.cos(np.asarray(x @ omega) + phase)  # (N, D)
    n, m = c.shape[0], r.shape[0]
    signs = np.r_[np.full(m, -1.0 / m), np.full(n, 1.0 / n)]  # mean of the cohort minus mean of the reference
    observed = float(((signs @ phi) ** 2).sum())
    perm = np.stack([rng.permutation(signs) for _ in range(permutations)])  # (B, N)
    null = ((perm @ phi) ** 2).sum(axis=1)
    p = (1.0 + float((null >= observed - 1e-15).sum())) / (1.0 + permutations)
    return KernelTest(observed, _witness_auroc(phi, m, rng), p, int(n), int(m))


def _witness_auroc(phi: np.ndarray, m: int, rng: np.random.Generator) -> float:
    """The held-out witness AUROC (module docstring): rows [0, m) reference, [m, N) cohort."""
    is_cohort = np.arange(phi.shape[0]) >= m
    half = np.r_[fold_ids(m, 2, rng), fold_ids(phi.shape[0] - m, 2, rng)]
    aucs = []
    for k in range(2):
        fit = half != k
        witness = phi[fit & is_cohort].mean(axis=0) - phi[fit & ~is_cohort].mean(axis=0)
        score = phi[~fit] @ witness
        aucs.append(u_test(score[is_cohort[~fit]], score[~is_cohort[~fit]], "witness score").auroc)
    return float(np.mean(aucs))
