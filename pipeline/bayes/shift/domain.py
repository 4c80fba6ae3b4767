"""A domain classifier: does a feature matrix tell the cohort from the reference, and by what likelihood ratio?

The features are whatever matrix the caller gives (rows: admissions, columns: de-identified features such as token
counts and context; dense or ``scipy.sparse``), the same columns for both samples. The classifier is an
L2-regularised logistic regression (``C`` = 1, classes weighted to balance, so its logit estimates the log density
ratio log p_cohort(x) / p_reference(x) with equal priors) on the features scaled by the pooled standard deviation
and, when there are more than ``COMPONENTS`` columns, projected on the pooled matrix's first ``COMPONENTS`` right
singular vectors (randomized SVD, one power iteration). Both steps use the pooled features without the sample
labels, so the tests' null distribution is untouched; the projection keeps the fit fast and well-conditioned (a
bag-of-tokens matrix of 1,693 columns, 4,054 admissions: 12 s without it, 0.5 s with it, measured by
``benchmarks.promise_checks``) and the logit stays linear in the scaled features (``DomainModel`` keeps the composed
coefficients).

**The test** (``domain_test``): 2-fold cross-fitting, stratified by sample. Each fold's classifier is fitted on the
other fold and scores its own held-out admissions; their Mann-Whitney z (cohort above reference: one-sided, a
classifier that learned nothing scores at random, one that learned the shift ranks the cohort higher) is exact
given the other fold. The two folds' z are combined by their mean, z = (z_1 + z_2) / 2, not the sum over
sqrt(2): each fold's classifier is fitted on the other fold, so under the null both z measure nearly the same
chance alignment (a linear classifier is close to the mean difference d_k of its training fold, and z_1 and z_2
are both close to <d_1, d_2>): their correlation is high, and the sum over sqrt(2) false-alarmed in 8.5-9.5% of
null cohorts at level 5% (``experiments.shift_detectors``'s first run, 200 cohorts of 50, 100 and 250). The mean
of two N(0, 1) has variance (2 + 2 rho) / 4 <= 1 whatever their correlation rho, so its one-sided normal p-value
is valid (conservative when rho < 1). The effect size is the mean of the folds' held-out AUROC.

**The weights** (``fit_domain`` -> ``DomainModel.weights``): the likelihood ratio w(x) = p_cohort(x) /
p_reference(x) of the classifier fitted on all of both samples, for importance weighting
(``referral.weighted``). Weights used to re-certify a refer rule must come from a classifier fitted on
admissions apart from the calibration set it re-weights (e.g. the other half of validation): then they are a
fixed function of the calibration admissions' features. ``DomainModel`` is plain JSON (``to_dict`` /
``from_dict``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import sparse
from scipy.special import ndtr

from pipeline.bayes.shift.ranks import u_test

FOLDS = 2  # cross-fitting folds of the test
C = 1.0  # inverse L2 strength of the logistic regression, on standardized features
COMPONENTS = 64  # wider matrices are projected on this many singular vectors before the fit


def as_matrix(x, name: str):
    """``x`` as a float64 2-D array or CSR matrix, finite; a clear error naming ``name`` otherwise."""
    if sparse.issparse(x):
        a = sparse.csr_matrix(x, dtype=np.float64)
        values = a.data
    else:
        a = np.asarray(x, dtype=np.float64)
        if a.ndim == 1:
            a = a[:, None]
        values = a
    if a.ndim != 2 or a.shape[0] == 0:
        raise ValueError(f"{name}: expected a matrix (admissions x features), got shape {a.shape}")
    bad = np.flatnonzero(~np.isfinite(np.asarray(values).ravel()))
    if bad.size:
        raise ValueError(f"{name}: {bad.size} non-finite feature values")
    return a


def _stack(a, b):
    return sparse.vstack([a, b], format="csr") if sparse.issparse(a) or sparse.issparse(b) else np.vstack([a, b])


def _scale(x) -> np.ndarray:
    """Per-column pooled standard deviation (1 where a column is constant)."""
    if sparse.issparse(x):
        mean = np.asarray(x.mean(axis=0)).ravel()
        sq = np.asarray(x.multiply(x).mean(axis=0)).ravel()
        sd = np.sqrt(np.maximum(sq - mean * mean, 0.0))
    else:
        sd = x.std(axis=0)
    return np.where(sd > 1e-12, sd, 1.0)


def _scaled(x, scale: np.ndarray):
    return x.multiply(1.0 / scale).tocsr() if sparse.issparse(x) else x / scale


@dataclass
class DomainModel:
    """A fitted domain classifier: logit(P(cohort | x)) = x / scale . coef + intercept, classes balanced."""

    scale: np.ndarray  # (d,) the features' pooled standard deviation
    coef: np.ndarray  # (d,) logistic coefficients on the scaled features
    intercept: float  # the intercept (balanced classes: the log density ratio's offset)
    n_reference: int  # admissions it was fitted on: reference
    n_cohort: int  # and cohort

    def log_ratio(self, x) -> np.ndarray:
        """(N,) log p_cohort(x) / p_reference(x), the classifier's logit."""
        a = as_matrix(x, "features")
        if a.shape[1] != self.coef.shape[0]:
            raise ValueError(f"features: {a.shape[1]} columns, the domain classifier was fitted on "
                             f"{self.coef.shape[0]}")
        return np.asarray(_scaled(a, self.scale) @ self.coef).ravel() + self.intercept

    def weights(self, x) -> np.ndarray:
        """(N,) likelihood ratios p_cohort(x) / p_reference(x) (module docstring)."""
        return np.exp(np.clip(self.log_ratio(x), -700.0, 700.0))

    def to_dict(self) -> dict:
        return {"scale": self.scale.tolist(), "coef": self.coef.tolist(), "intercept": float(self.intercept),
                "n_reference": self.n_reference, "n_cohort": self.n_cohort}

    @classmethod
    def from_dict(cls, d: dict) -> DomainModel:
        return cls(np.asarray(d["scale"], dtype=np.float64), np.asarray(d["coef"], dtype=np.float64),
                   float(d["intercept"]), int(d["n_reference"]), int(d["n_cohort"]))


def _projection(z, seed: int) -> np.ndarray | None:
    """(d, COMPONENTS) the pooled scaled matrix's first right singular vectors (None: narrow enough as it is)."""
    if z.shape[1] <= COMPONENTS:
        return None
    from sklearn.utils.extmath import randomized_svd
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        _, _, vt = randomized_svd(z, COMPONENTS, n_iter=1, random_state=seed)  # one power iteration: 0.35 s
    return vt.T


def _fit(z, y: np.ndarray, seed: int):
    """Logistic coefficients and intercept on the (scaled, projected) matrix ``z``."""
    from sklearn.linear_model import LogisticRegression
    from threadpoolctl import threadpool_limits

    clf = LogisticRegression(C=C, class_weight="balanced", max_iter=500, random_state=seed)
    with threadpool_limits(1):  # a few thousand rows: threads only contend (the check runs beside scoring)
        clf.fit(z, y)
    return clf.coef_.ravel().astype(np.float64), float(clf.intercept_[0])


def _design(x, seed: int):
    """(scale, projection, the scaled and projected pooled matrix as a dense array)."""
    scale = _scale(x)
    z = _scaled(x, scale)
    proj = _projection(z, seed)
    z = np.asarray(z @ proj) if proj is not None else (z.toarray() if sparse.issparse(z) else z)
    return scale, proj, z


def fit_domain(reference, cohort, seed: int = 0) -> DomainModel:
    """The domain classifier of ``cohort`` (n, d) against ``reference`` (m, d) on all of both (module docstring)."""
    r, c = as_matrix(reference, "reference features"), as_matrix(cohort, "cohort features")
    if r.shape[1] != c.shape[1]:
        raise ValueError(f"cohort features: {c.shape[1]} columns, the reference has {r.shape[1]}")
    x = _stack(r, c)
    y = np.r_[np.zeros(r.shape[0]), np.ones(c.shape[0])]
    scale, proj, z = _design(x, seed)
    coef, intercept = _fit(z, y, seed)
    return DomainModel(scale, coef if proj is None else proj @ coef, intercept, int(r.shape[0]), int(c.shape[0]))


@dataclass
class DomainTest:
    """The cross-fitted domain classifier's test."""

    auroc: float  # mean held-out AUROC of cohort against reference over the folds
    z: float  # combined z, the mean of the folds' z (variance <= 1 whatever their correlation)
    p_value: float  # one-sided: the cohort ranked above the reference
    n: int  # cohort admissions
    m: int  # reference admissions

    def to_dict(self) -> dict:
        return {"auroc": float(self.auroc), "z": float(self.z), "p_value": float(self.p_value), "n": self.n,
                "m": self.m}


def fold_ids(n: int, folds: int, rng: np.random.Generator) -> np.ndarray:
    """(n,) fold of each of ``n`` admissions, balanced, in a random order."""
    return rng.permutation(np.arange(n) % folds)


def domain_test(reference, cohort, seed: int = 0, folds: int = FOLDS) -> DomainTest:
    """The cross-fitted domain classifier test of ``cohort`` against ``reference`` (module docstring)."""
    r, c = as_matrix(reference, "reference features"), as_matrix(cohort, "cohort features")
    if r.shape[1] != c.shape[1]:
        raise ValueError(f"cohort features: {c.shape[1]} columns, the reference has {r.shape[1]}")
    rng = np.random.default_rng(seed)
    x = _stack(r, c)
    y = np.r_[np.zeros(r.shape[0]), np.ones(c.shape[0])]
    fold = np.r_[fold_ids(r.shape[0], folds, rng), fold_ids(c.shape[0], folds, rng)]
    _, _, z = _design(x, seed)
    zs, aucs = [], []
    for k in range(folds):
        held = fold == k
        coef, intercept = _fit(z[~held], y[~held], seed)
        s = z[held] @ coef + intercept
        t = u_test(s[y[held] == 1.0], s[y[held] == 0.0], "domain score")
        zs.append(t.z)
        aucs.append(t.auroc)
    z = float(np.mean(zs))
    return DomainTest(float(np.mean(aucs)), z, float(ndtr(-z)), int(c.shape[0]), int(r.shape[0]))
