"""The parametric and isotonic recalibration maps of a binary risk, each a monotone map [0, 1] -> [0, 1].

A map is fitted on (predicted probability p, label y) of calibration admissions and applied elementwise to
an array of any shape: the published risk (N,), or the Monte Carlo draws of a risk (S, N) or (S, K, N),
which pass through the same map. Mind the difference: the calibrated risk of an admission is the map of
its predictive mean, m(mean_d p_d), which the map was fitted on; mean_d m(p_d), the mean of the mapped
draws, is another number (equal only for the identity). The draws through the map describe the spread of
the calibrated risk (decision uncertainty), not its value.

- ``none``: the identity.
- ``temperature``: p' = sigmoid(z / T), z = logit(p), T > 0 minimising the NLL (Guo et al. 2017: one
  parameter, no shift; T > 1 softens the risks, T < 1 sharpens them). T is searched in [0.01, 100].
- ``platt``: p' = sigmoid(a + b z), b >= 0 (Platt 1999), fitted by maximum likelihood against Platt's
  smoothed targets (N+ + 1)/(N+ + 2) for deaths and 1/(N- + 2) for survivors, which keep (a, b) finite
  when the calibration data are separable (scikit-learn's sigmoid calibration does the same). b >= 0
  keeps the map non-decreasing, which the decision threshold and the refer rule rely on.
- ``isotonic``: the non-decreasing least-squares fit of y on p (pool-adjacent-violators, scikit-learn's
  IsotonicRegression; tied p pooled), linear between its knots and constant beyond the end knots. It can
  return exactly 0 or 1, which gives an infinite NLL wherever that is wrong.

Logits are computed as log(p) - log1p(-p) and clipped to +-``LOGIT_CLIP`` (probabilities within about
1e-13 of 0 or 1) in fitting and applying alike. Every map serialises to a JSON-able dict (``to_dict``)
and back (``maps.from_dict`` in the package), never by pickle.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize, minimize_scalar
from sklearn.isotonic import IsotonicRegression

from pipeline.bayes.calibration.options import Method
from pipeline.bayes.metrics import check_labels, check_probs, log_sigmoid
from pipeline.core.errors import PipelineError

LOGIT_CLIP = 30.0  # |logit| cap: probabilities within ~1e-13 of 0 or 1 are taken as sigmoid(+-30)
T_RANGE = (0.01, 100.0)  # the temperatures searched


class CalibrationError(PipelineError, ValueError):
    """Calibration data that cannot fit a map (one class only, too few deaths for the folds, ...)."""


def logit(p) -> np.ndarray:
    """log(p / (1 - p)) clipped to +-LOGIT_CLIP, any shape."""
    q = np.asarray(p, dtype=np.float64)
    with np.errstate(divide="ignore"):
        return np.clip(np.log(q) - np.log1p(-q), -LOGIT_CLIP, LOGIT_CLIP)


def expit(z) -> np.ndarray:
    """sigmoid(z) = exp(log_sigmoid(z)), any shape (exact in the tails)."""
    return np.exp(log_sigmoid(np.asarray(z, dtype=np.float64)))


def check_fit_data(p, labels, name: str = "calibration data") -> tuple[np.ndarray, np.ndarray]:
    """(p, y) as float64 (N,) with both classes present; raise ``CalibrationError`` naming what is wrong."""
    y = check_labels(labels)
    q = check_probs(p, y.shape[0])
    deaths = int(y.sum())
    if deaths == 0 or deaths == y.shape[0]:
        raise CalibrationError(f"{name}: {y.shape[0]} admissions with {deaths} deaths; a recalibration map needs "
                               "deaths and survivors")
    return q, y


def _bernoulli_nll(eta: np.ndarray, t: np.ndarray) -> float:
    """Mean cross-entropy of targets t in [0, 1] against sigmoid(eta)."""
    return float(-(t * log_sigmoid(eta) + (1.0 - t) * log_sigmoid(-eta)).mean())


class CalibrationMap:
    """What every map offers; subclasses define ``method``, ``apply_logit`` or ``apply``, and ``to_dict``."""

    method: Method

    def apply(self, p) -> np.ndarray:
        """Calibrated probabilities of probabilities ``p``, same shape."""
        return self.apply_logit(logit(p))

    def apply_logit(self, z) -> np.ndarray:
        """Calibrated probabilities of logits ``z``, same shape."""
        return self.apply(expit(np.clip(np.asarray(z, dtype=np.float64), -LOGIT_CLIP, LOGIT_CLIP)))

    def raw_threshold(self, threshold: float) -> float:
        """The smallest raw probability p with apply(p) >= ``threshold`` (2.0 when no p in [0, 1] reaches it).

        Every map is non-decreasing, so "calibrated risk >= threshold" is "raw risk >= this"; found by
        bisection on [0, 1] to adjacent floating-point numbers.
        """
        t = float(threshold)
        at = (lambda x: float(self.apply(np.array([x]))[0]))  # noqa: E731
        if at(0.0) >= t:
            return 0.0
        if at(1.0) < t:
            return 2.0
        lo, hi = 0.0, 1.0  # at(lo) < t <= at(hi)
        for _ in range(2000):
            mid = (lo + hi) / 2.0
            if mid in (lo, hi):
                break
            lo, hi = (lo, mid) if at(mid) >= t else (mid, hi)
        return hi

    def to_dict(self) -> dict:
        raise NotImplementedError


@dataclass
class Identity(CalibrationMap):
    """The model's risk as it is."""

    method = Method.NONE

    def apply(self, p) -> np.ndarray:
        return np.asarray(p, dtype=np.float64).copy()

    def apply_logit(self, z) -> np.ndarray:
        return expit(z)

    def to_dict(self) -> dict:
        return {"method": self.method.value}


@dataclass
class Temperature(CalibrationMap):
    """p' = sigmoid(logit(p) / temperature)."""

    temperature: float  # T > 0: > 1 softens the risks towards 0.5, < 1 sharpens them
    n_fit: int = 0  # calibration admissions it was fitted on

    method = Method.TEMPERATURE

    def apply_logit(self, z) -> np.ndarray:
        return expit(np.asarray(z, dtype=np.float64) / self.temperature)

    def gaussian(self, mu, var) -> tuple[np.ndarray, np.ndarray]:
        """The calibrated logit of a Gaussian logit N(mu, var): N(mu / T, var / T^2)."""
        return np.asarray(mu) / self.temperature, np.asarray(var) / self.temperature**2

    def to_dict(self) -> dict:
        return {"method": self.method.value, "temperature": float(self.temperature), "n_fit": int(self.n_fit)}

    @classmethod
    def fit(cls, p, labels) -> Temperature:
        """The T in ``T_RANGE`` of the lowest NLL (bounded search on log T)."""
        q, y = check_fit_data(p, labels)
        z = logit(q)
        res = minimize_scalar(lambda s: _bernoulli_nll(z * np.exp(-s), y), bounds=np.log(T_RANGE),
                              method="bounded", options={"xatol": 1e-10})
        return cls(float(np.exp(res.x)), int(y.shape[0]))


@dataclass
class Platt(CalibrationMap):
    """p' = sigmoid(intercept + slope * logit(p)), slope >= 0."""

    intercept: float  # a: the shift of the logit
    slope: float  # b >= 0: < 1 softens the risks, > 1 sharpens them
    n_fit: int = 0  # calibration admissions it was fitted on

    method = Method.PLATT

    def apply_logit(self, z) -> np.ndarray:
        return expit(self.intercept + self.slope * np.asarray(z, dtype=np.float64))

    def gaussian(self, mu, var) -> tuple[np.ndarray, np.ndarray]:
        """The calibrated logit of a Gaussian logit N(mu, var): N(a + b mu, b^2 var)."""
        return self.intercept + self.slope * np.asarray(mu), self.slope**2 * np.asarray(var)

    def to_dict(self) -> dict:
        return {"method": self.method.value, "intercept": float(self.intercept), "slope": float(self.slope),
                "n_fit": int(self.n_fit)}

    @classmethod
    def fit(cls, p, labels) -> Platt:
        """Maximum likelihood against Platt's targets, slope >= 0 (L-BFGS-B from (0, 1))."""
        q, y = check_fit_data(p, labels)
        z = logit(q)
        n1 = float(y.sum())
        n0 = y.shape[0] - n1
        t = np.where(y == 1.0, (n1 + 1.0) / (n1 + 2.0), 1.0 / (n0 + 2.0))

        def loss_grad(ab: np.ndarray) -> tuple[float, np.ndarray]:
            eta = ab[0] + ab[1] * z
            r = expit(eta) - t  # d loss / d eta per admission (times N)
            return _bernoulli_nll(eta, t), np.array([r.mean(), (r * z).mean()])

        res = minimize(loss_grad, np.array([0.0, 1.0]), jac=True, method="L-BFGS-B",
                       bounds=[(None, None), (0.0, None)], options={"gtol": 1e-12, "ftol": 1e-15, "maxiter": 1000})
        return cls(float(res.x[0]), float(res.x[1]), int(y.shape[0]))


@dataclass
class Isotonic(CalibrationMap):
    """Isotonic regression of y on p: linear between the knots (x, y), constant beyond the end knots."""

    x: np.ndarray  # (J,) knots' raw probabilities, increasing
    y: np.ndarray  # (J,) calibrated probabilities at the knots, non-decreasing
    n_fit: int = 0  # calibration admissions it was fitted on

    method = Method.ISOTONIC

    def apply(self, p) -> np.ndarray:
        q = np.asarray(p, dtype=np.float64)
        return np.interp(q.ravel(), self.x, self.y).reshape(q.shape)

    def to_dict(self) -> dict:
        return {"method": self.method.value, "x": [float(v) for v in self.x], "y": [float(v) for v in self.y],
                "n_fit": int(self.n_fit)}

    @classmethod
    def fit(cls, p, labels) -> Isotonic:
        """scikit-learn's IsotonicRegression (increasing, clipped to [0, 1] outside the knots)."""
        q, y = check_fit_data(p, labels)
        iso = IsotonicRegression(y_min=0.0, y_max=1.0, increasing=True, out_of_bounds="clip").fit(q, y)
        return cls(np.asarray(iso.X_thresholds_, dtype=np.float64), np.asarray(iso.y_thresholds_, dtype=np.float64),
                   int(y.shape[0]))
