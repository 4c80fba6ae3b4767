"""Calibration of binary predictions: reliability bins, ECE, the ECE floor by consistency resampling,
and logistic recalibration (calibration slope and intercept)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np

from pipeline.bayes.metrics.draws import _json_list, check_labels, check_probs, log_sigmoid

N_BINS = 15  # default number of equal-width calibration bins


class EceMode(str, Enum):
    """What a calibration bin compares."""

    POSITIVE = "positive"  # bins p = P(death); observed death rate vs mean p
    TOP_LABEL = "top_label"  # bins max(p, 1-p); accuracy of the 0.5-thresholded label vs mean confidence


# ---------------------------------------------------------------------------- calibration


def bin_index(score: np.ndarray, n_bins: int = N_BINS) -> np.ndarray:
    """Bin of each score in [0, 1]: b with edges[b] <= s < edges[b+1], s = 1 in the last bin."""
    edges = np.arange(n_bins + 1) / n_bins  # b / n_bins, correctly rounded
    return np.searchsorted(edges[1:-1], score, side="right")


def _bin_onehot(score: np.ndarray, n_bins: int) -> np.ndarray:
    """One-hot (N, n_bins) of each score's calibration bin (``bin_index``)."""
    onehot = np.zeros((score.shape[0], n_bins))
    onehot[np.arange(score.shape[0]), bin_index(score, n_bins)] = 1.0
    return onehot


def _ece_inputs(y: np.ndarray, p: np.ndarray, mode: EceMode | str) -> tuple[np.ndarray, np.ndarray]:
    """(target, score) binned by ECE: (y, p) or (correct, confidence) for top-label."""
    if EceMode(mode) is EceMode.POSITIVE:
        return y, p
    pred = (p >= 0.5).astype(np.float64)
    return (pred == y).astype(np.float64), np.maximum(p, 1.0 - p)


@dataclass
class Reliability:
    """Reliability-diagram data for equal-width bins over [0, 1]."""

    edges: np.ndarray  # (n_bins + 1,) bin edges b / n_bins for b = 0..n_bins
    counts: np.ndarray  # (n_bins,) admissions per bin
    mean_score: np.ndarray  # (n_bins,) mean p (or confidence) per bin, nan when empty
    observed: np.ndarray  # (n_bins,) observed death rate (or accuracy) per bin, nan when empty
    mode: EceMode  # what was binned

    def to_dict(self) -> dict:
        """JSON-able lists (empty bins -> None)."""
        return {
            "mode": self.mode.value,
            "edges": _json_list(self.edges),
            "counts": [int(c) for c in self.counts],
            "mean_score": _json_list(self.mean_score),
            "observed": _json_list(self.observed),
        }


def reliability(labels, p, n_bins: int = N_BINS, mode: EceMode | str = EceMode.POSITIVE) -> Reliability:
    """Per-bin counts, mean predicted score and observed rate (see ``ece`` for the binning)."""
    y = check_labels(labels)
    target, score = _ece_inputs(y, check_probs(p, y.shape[0]), mode)
    b = bin_index(score, n_bins)
    counts = np.bincount(b, minlength=n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_score = np.bincount(b, weights=score, minlength=n_bins) / counts
        observed = np.bincount(b, weights=target, minlength=n_bins) / counts
    return Reliability(np.arange(n_bins + 1) / n_bins, counts, mean_score, observed, EceMode(mode))


def ece(labels, p, n_bins: int = N_BINS, mode: EceMode | str = EceMode.POSITIVE) -> float:
    """Expected calibration error with ``n_bins`` equal-width bins (default 15).

    Bins are [0, 1/15), [1/15, 2/15), ..., [14/15, 1] (the last one closed).
    ``positive`` (default): the binary, probability-of-death ECE; each admission is binned by p
    and ``ECE = sum_b (n_b / N) |mean(y in b) - mean(p in b)|``. ``top_label``: the usual
    top-label confidence ECE; the predicted label is 1 iff p >= 0.5, the confidence is
    max(p, 1 - p), and ``ECE = sum_b (n_b / N) |accuracy in b - mean(confidence in b)|``.
    """
    y = check_labels(labels)
    target, score = _ece_inputs(y, check_probs(p, y.shape[0]), mode)
    b = bin_index(score, n_bins)
    gap = np.bincount(b, weights=target - score, minlength=n_bins)  # n_b * (mean y - mean p)
    return float(np.abs(gap).sum() / y.shape[0])


@dataclass
class EceFloor:
    """ECE of a calibrated predictor making the same predictions (consistency resampling).

    A finite test set gives even a perfectly calibrated predictor a positive binned ECE. Labels
    drawn as y* ~ Bernoulli(p) from the model's own predictions (Bröcker & Smith 2007,
    "consistency resampling") give the ECE that calibration alone would show at this N and with
    these bins; an observed ECE inside that distribution is no evidence of miscalibration.
    """

    mean: float  # E[ECE(y*, p)]: the floor
    p95: float  # 95th percentile of ECE(y*, p)
    p_value: float  # (1 + #{ECE(y*, p) >= observed}) / (1 + resamples): small = miscalibration beyond chance
    resamples: int  # label draws


def ece_floor(labels, p, n_resamples: int = 1000, seed: int = 0, n_bins: int = N_BINS,
              mode: EceMode | str = EceMode.POSITIVE, chunk: int = 100) -> EceFloor:
    """``EceFloor`` of predictions ``p`` (N,) against their observed ``labels`` (see ``ece``)."""
    y = check_labels(labels)
    q = check_probs(p, y.shape[0])
    n = y.shape[0]
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    target_obs, score = _ece_inputs(y, q, mode)  # the score binned does not depend on the labels
    onehot = _bin_onehot(score, n_bins)  # (N, n_bins)
    observed = float(np.abs((target_obs - score) @ onehot).sum() / n)  # = ece(), rounded as the draws are
    top = EceMode(mode) is EceMode.TOP_LABEL
    rng = np.random.default_rng(seed)
    values = np.empty(n_resamples)
    for start in range(0, n_resamples, chunk):
        b = min(chunk, n_resamples - start)
        y_star = (rng.random((b, n)) < q).astype(np.float64)  # (b, N) labels of a calibrated world
        target = np.where(q >= 0.5, y_star, 1.0 - y_star) if top else y_star  # correct, or y*
        values[start:start + b] = np.abs((target - score) @ onehot).sum(axis=1) / n
    at_least = int((values >= observed - 1e-12 * max(1.0, observed)).sum())  # ties count as "at least"
    return EceFloor(float(values.mean()), float(np.percentile(values, 95.0)),
                    (1.0 + at_least) / (1.0 + n_resamples), n_resamples)


@dataclass
class Recalibration:
    """Logistic recalibration of predictions (the calibration hierarchy of Van Calster et al. 2019).

    ``slope`` b and its intercept from logit P(y = 1) = a + b·logit(p): b < 1 means the
    predictions are too extreme (overconfident), b > 1 too close to the base rate (underconfident).
    ``intercept`` a' from logit P(y = 1) = a' + logit(p) (slope fixed at 1): the calibration in the
    large; a' > 0 means risks are too low on average. All nan when the labels hold one class or
    the fit does not converge (e.g. predictions that separate the classes).
    """

    slope: float
    slope_intercept: float
    intercept: float


def _logistic_fit(z: np.ndarray, y: np.ndarray, free_slope: bool, iters: int = 100) -> np.ndarray:
    """Maximum-likelihood (a, b) of logit P(y) = a + b·z (b fixed at 1 unless ``free_slope``):
    Newton steps, halved until the log-likelihood does not decrease; nan when it does not converge."""

    def loglik(t: np.ndarray) -> float:
        eta = t[0] + t[1] * z
        return float(np.sum(y * log_sigmoid(eta) + (1.0 - y) * log_sigmoid(-eta)))

    theta = np.array([0.0, 1.0])
    ll = loglik(theta)
    for _ in range(iters):
        mu = np.exp(log_sigmoid(theta[0] + theta[1] * z))
        w = mu * (1.0 - mu)
        g = np.array([np.sum(y - mu), np.sum((y - mu) * z)])
        if free_slope:
            h = np.array([[w.sum(), (w * z).sum()], [(w * z).sum(), (w * z * z).sum()]])
            try:
                step = np.linalg.solve(h, g)
            except np.linalg.LinAlgError:
                return np.array([np.nan, np.nan])
        else:
            step = np.array([g[0] / w.sum() if w.sum() > 0 else np.nan, 0.0])
        if not np.all(np.isfinite(step)):
            return np.array([np.nan, np.nan])
        for _ in range(60):  # step halving: the log-likelihood is concave, so some step size increases it
            new_ll = loglik(theta + step)
            if new_ll >= ll - 1e-12 * abs(ll):
                break
            step = step / 2.0
        theta, ll = theta + step, new_ll
        if np.max(np.abs(step)) < 1e-10:
            return theta
    return np.array([np.nan, np.nan])


def recalibration(labels, p) -> Recalibration:
    """``Recalibration`` of probabilities ``p`` (N,) against ``labels``; logits of p clipped to +-30."""
    y = check_labels(labels)
    q = check_probs(p, y.shape[0])
    if y.size == 0 or y.min() == y.max():
        return Recalibration(float("nan"), float("nan"), float("nan"))
    with np.errstate(divide="ignore"):
        z = np.clip(np.log(q) - np.log1p(-q), -30.0, 30.0)
    a, b = _logistic_fit(z, y, free_slope=True)
    a1, _ = _logistic_fit(z, y, free_slope=False)
    return Recalibration(float(b), float(a), float(a1))


