"""Evaluation metrics for binary mortality predictions made of Monte Carlo / mixture draws.

Shapes: ``D`` weight draws, ``N`` admissions. A rank-1 model evaluated with ``S`` Monte Carlo
samples per mixture component and ``K`` components gives ``D = S*K`` draws. Flattened draws are
sample-major then member-major (DESIGN.md): draw ``d = s*K + k``, so ``(D, N) <-> (S, K, N)``.
A *member* is one mixture component: its prediction is the mean probability over its S samples.

All logarithms are natural (NLL, entropies and mutual information are in nats). Only numpy is
imported; probabilities come from logits through log-sigmoid so that extreme logits never turn
into ``log(0)``.

Degenerate inputs: AUC-PR and AUC-ROC are ``nan`` when ``labels`` hold a single class (both are
undefined or trivial there; sklearn would return 1.0 for AUC-PR with all-positive labels).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np

N_BINS = 15  # default number of equal-width calibration bins


class EceMode(str, Enum):
    """What a calibration bin compares."""

    POSITIVE = "positive"  # bins p = P(death); observed death rate vs mean p
    TOP_LABEL = "top_label"  # bins max(p, 1-p); accuracy of the 0.5-thresholded label vs mean confidence


class Uncertainty(str, Enum):
    """Per-admission uncertainty used to rank admissions for referral."""

    MUTUAL_INFORMATION = "mi"  # H[E p] - E H[p] (epistemic part)
    ENTROPY = "entropy"  # H[E p] (total predictive entropy)
    SD = "sd"  # standard deviation of p over draws


# ---------------------------------------------------------------------------- validation


def check_labels(labels, n: int | None = None, name: str = "labels") -> np.ndarray:
    """Return ``labels`` (N,) as float64 0/1; raise naming the first bad row otherwise."""
    y = np.asarray(labels)
    if y.ndim != 1 or y.shape[0] == 0:
        raise ValueError(f"{name}: expected a non-empty 1-D array (N,), got shape {y.shape}")
    if n is not None and y.shape[0] != n:
        raise ValueError(f"{name}: {y.shape[0]} admissions but the predictions have {n}")
    try:
        yf = y.astype(np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name}: not numeric ({y.dtype})") from exc
    bad = np.flatnonzero((yf != 0.0) & (yf != 1.0))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"{name}[{i}] = {y[i].item()!r}: labels must be 0 or 1 ({bad.size} bad rows)")
    return yf


def check_probs(p, n: int | None = None, name: str = "p") -> np.ndarray:
    """Return probabilities ``p`` (N,) as float64 in [0, 1]; raise naming the first bad row."""
    a = np.asarray(p, dtype=np.float64)
    if a.ndim != 1 or a.shape[0] == 0:
        raise ValueError(f"{name}: expected a non-empty 1-D array (N,), got shape {a.shape}")
    if n is not None and a.shape[0] != n:
        raise ValueError(f"{name}: {a.shape[0]} admissions but labels have {n}")
    bad = np.flatnonzero(~((a >= 0.0) & (a <= 1.0)))  # also catches NaN
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"{name}[{i}] = {a[i].item()!r}: probabilities must lie in [0, 1] ({bad.size} bad rows)")
    return a


def _check_finite(x: np.ndarray, name: str) -> np.ndarray:
    bad = np.argwhere(~np.isfinite(x))
    if bad.size:
        where = ", ".join(str(int(i)) for i in bad[0])
        value = x[tuple(bad[0])].item()
        raise ValueError(f"{name}[{where}] = {value!r}: logits must be finite ({len(bad)} bad entries)")
    return x


def as_draws(logits) -> np.ndarray:
    """Logits as (D, N) float64: (N,) -> (1, N); (S, K, N) -> (S*K, N) sample-major."""
    x = np.asarray(logits, dtype=np.float64)
    if x.ndim == 1:
        x = x[None, :]  # (N,) -> (1, N)
    elif x.ndim == 3:
        x = x.reshape(-1, x.shape[-1])  # (S, K, N) -> (S*K, N), d = s*K + k
    elif x.ndim != 2:
        raise ValueError(f"logits: expected shape (N,), (D, N) or (S, K, N), got {x.shape}")
    if x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(f"logits: empty array of shape {x.shape}")
    return _check_finite(x, "logits")


def as_components(logits, components: int | None = None) -> np.ndarray:
    """Logits as (S, K, N). (D, N) input is split as D = S*K with K = ``components`` (default 1)."""
    x = np.asarray(logits, dtype=np.float64)
    if x.ndim == 3:
        if components is not None and components != x.shape[1]:
            raise ValueError(f"logits: components={components} but the array has K={x.shape[1]}")
        return as_draws(x).reshape(x.shape)  # validated, (S, K, N)
    d = as_draws(x)  # (D, N)
    k = 1 if components is None else int(components)
    if k < 1 or d.shape[0] % k:
        raise ValueError(f"logits: {d.shape[0]} draws cannot be split into components={components}")
    return d.reshape(d.shape[0] // k, k, d.shape[1])  # (D, N) -> (S, K, N), d = s*K + k


# ---------------------------------------------------------------------------- likelihoods


def log_sigmoid(x) -> np.ndarray:
    """log(sigmoid(x)) = -log(1 + exp(-x)), exact for large |x|."""
    return -np.logaddexp(0.0, -np.asarray(x, dtype=np.float64))


def sigmoid(x) -> np.ndarray:
    """sigmoid(x) computed as exp(log_sigmoid(x)) (no overflow, full relative precision)."""
    return np.exp(log_sigmoid(x))


def _logsumexp0(a: np.ndarray) -> np.ndarray:
    """log(sum(exp(a), axis=0)) for finite ``a``."""
    m = a.max(axis=0)
    return m + np.log(np.exp(a - m).sum(axis=0))


def log_likelihood(logits, labels) -> np.ndarray:
    """log p_d(y_n) per draw and admission, shape (D, N), from logits via log-sigmoid."""
    x = as_draws(logits)
    y = check_labels(labels, x.shape[1])
    return np.where(y == 1.0, log_sigmoid(x), log_sigmoid(-x))


def mixture_nll_per_example(logits, labels) -> np.ndarray:
    """-log((1/D) sum_d p_d(y_n)) per admission, shape (N,)."""
    ll = log_likelihood(logits, labels)  # (D, N)
    return -(_logsumexp0(ll) - np.log(ll.shape[0]))


def mixture_nll(logits, labels) -> float:
    """NLL of the equal-weight mixture over all D draws, averaged over admissions.

    ``mean_n -(logsumexp_d log p_d(y_n) - log D)``; for D = 1 it equals sklearn's log_loss.
    """
    return float(mixture_nll_per_example(logits, labels).mean())


def draw_nll(logits, labels) -> np.ndarray:
    """NLL of each single draw, shape (D,)."""
    return -log_likelihood(logits, labels).mean(axis=1)


def member_nll(logits, labels, components: int | None = None) -> np.ndarray:
    """Mixture NLL of each component over its own S samples, shape (K,)."""
    x = as_components(logits, components)  # (S, K, N)
    return np.array([mixture_nll(x[:, k], labels) for k in range(x.shape[1])])


def predictive(logits) -> np.ndarray:
    """Predictive probability of death E_d[sigmoid(logit_d)], shape (N,)."""
    return sigmoid(as_draws(logits)).mean(axis=0)


def member_predictive(logits, components: int | None = None) -> np.ndarray:
    """Each component's probability averaged over its S samples, shape (K, N)."""
    return sigmoid(as_components(logits, components)).mean(axis=0)


def nll_from_probs(labels, p) -> np.ndarray:
    """Per-admission NLL of probabilities (inf where a certain prediction is wrong), shape (N,)."""
    y = check_labels(labels)
    q = check_probs(p, y.shape[0])
    with np.errstate(divide="ignore"):
        return -np.where(y == 1.0, np.log(q), np.log1p(-q))


# ---------------------------------------------------------------------------- entropies


def _plogp(p: np.ndarray) -> np.ndarray:
    """p*log(p) with 0*log(0) = 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(p > 0.0, p * np.log(p), 0.0)


def predictive_entropy(logits) -> np.ndarray:
    """H[E p] in nats per admission, shape (N,); 1-p is averaged separately for precision."""
    x = as_draws(logits)
    p, q = sigmoid(x).mean(axis=0), sigmoid(-x).mean(axis=0)
    return -(_plogp(p) + _plogp(q))


def expected_entropy(logits) -> np.ndarray:
    """E_d H[p_d] in nats per admission, shape (N,); H = p*softplus(-x) + (1-p)*softplus(x)."""
    x = as_draws(logits)
    h = sigmoid(x) * np.logaddexp(0.0, -x) + sigmoid(-x) * np.logaddexp(0.0, x)  # (D, N)
    return h.mean(axis=0)


def mutual_information(logits) -> np.ndarray:
    """H[E p] - E H[p] per admission (nats), shape (N,); clipped at 0 (>= 0 by Jensen)."""
    return np.maximum(predictive_entropy(logits) - expected_entropy(logits), 0.0)


def predictive_sd(logits) -> np.ndarray:
    """Standard deviation (ddof=0) of p over draws, shape (N,)."""
    return sigmoid(as_draws(logits)).std(axis=0)


def uncertainty(logits, measure: Uncertainty | str = Uncertainty.MUTUAL_INFORMATION) -> np.ndarray:
    """Per-admission uncertainty of the chosen ``measure``, shape (N,)."""
    fn = {
        Uncertainty.MUTUAL_INFORMATION: mutual_information,
        Uncertainty.ENTROPY: predictive_entropy,
        Uncertainty.SD: predictive_sd,
    }[Uncertainty(measure)]
    return fn(logits)


# ---------------------------------------------------------------------------- disagreement


@dataclass
class Disagreement:
    """Member diversity (Fort et al. 2019, as in Dusenberry et al. 2020, Sec. 5)."""

    raw: float  # fraction of admissions where two members' 0.5-thresholded labels differ, mean over pairs
    normalized: float  # raw / (1 - accuracy); nan when accuracy == 1 or K == 1
    accuracy: float  # accuracy of the ensemble prediction (E p >= 0.5) against labels


def disagreement(logits, labels, components: int | None = None) -> Disagreement:
    """Pairwise disagreement of the K members, normalised by the ensemble error rate.

    Member k predicts death iff its mean probability over its S samples is >= 0.5. For each
    unordered pair (k, l) the disagreement is the fraction of admissions where the predictions
    differ; ``raw`` averages it over all K(K-1)/2 pairs. ``normalized = raw / (1 - acc)`` where
    acc is the accuracy of the full predictive mean thresholded at 0.5. K = 1 gives nan.
    """
    x = as_components(logits, components)  # (S, K, N)
    y = check_labels(labels, x.shape[2])
    k, n = x.shape[1], x.shape[2]
    acc = float(((predictive(x) >= 0.5) == (y == 1.0)).mean())
    if k < 2:
        return Disagreement(raw=float("nan"), normalized=float("nan"), accuracy=acc)
    votes = (member_predictive(x) >= 0.5).sum(axis=0)  # (N,) members predicting death
    raw = float((votes * (k - votes)).sum() / (n * k * (k - 1) / 2))  # disagreeing pairs per admission
    norm = raw / (1.0 - acc) if acc < 1.0 else float("nan")
    return Disagreement(raw=raw, normalized=norm, accuracy=acc)


# ---------------------------------------------------------------------------- ranking metrics


@dataclass
class _Ranking:
    """Scores sorted once (descending) with the last position of every tied group."""

    order: np.ndarray  # (N,) permutation sorting scores in descending order (stable)
    ends: np.ndarray  # (G,) index into the sorted array of the last element of each tie group
    y: np.ndarray  # (N,) labels in sorted order


def _ranking(labels: np.ndarray, p: np.ndarray) -> _Ranking:
    order = np.argsort(-p, kind="stable")
    ps = p[order]
    ends = np.flatnonzero(np.append(ps[1:] != ps[:-1], True))
    return _Ranking(order=order, ends=ends, y=labels[order])


def _curve_counts(r: _Ranking, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Weighted true/false positives at each threshold; ``w`` (B, N) -> two (B, G) arrays."""
    ws = w[:, r.order]  # (B, N) weights in sorted order
    tp = np.cumsum(ws * r.y, axis=1)[:, r.ends]  # (B, G)
    fp = np.cumsum(ws * (1.0 - r.y), axis=1)[:, r.ends]  # (B, G)
    return tp, fp


def _ap_from_counts(tp: np.ndarray, fp: np.ndarray) -> np.ndarray:
    """Average precision sum_i (R_i - R_{i-1}) P_i per row (sklearn's definition); nan if one class."""
    pos, neg = tp[:, -1:], fp[:, -1:]  # (B, 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        recall = tp / pos
        precision = np.where(tp + fp > 0, tp / np.maximum(tp + fp, 1e-300), 0.0)
        d_recall = np.diff(recall, axis=1, prepend=0.0)  # (B, G)
        ap = (d_recall * precision).sum(axis=1)
    return np.where((pos[:, 0] > 0) & (neg[:, 0] > 0), ap, np.nan)


def _roc_from_counts(tp: np.ndarray, fp: np.ndarray) -> np.ndarray:
    """Trapezoidal area under (FPR, TPR) from (0, 0) per row; nan if one class."""
    pos, neg = tp[:, -1:], fp[:, -1:]  # (B, 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        tpr = np.concatenate([np.zeros_like(pos), tp / pos], axis=1)  # (B, G+1)
        fpr = np.concatenate([np.zeros_like(neg), fp / neg], axis=1)  # (B, G+1)
        auc = (np.diff(fpr, axis=1) * (tpr[:, 1:] + tpr[:, :-1]) / 2.0).sum(axis=1)
    return np.where((pos[:, 0] > 0) & (neg[:, 0] > 0), auc, np.nan)


def average_precision(labels, p) -> float:
    """AUC-PR as average precision (step-wise, ties grouped, as sklearn); nan for a single class."""
    y = check_labels(labels)
    q = check_probs(p, y.shape[0])
    return float(_ap_from_counts(*_curve_counts(_ranking(y, q), np.ones((1, y.shape[0]))))[0])


def roc_auc(labels, p) -> float:
    """AUC-ROC (trapezoidal, ties grouped); nan for a single class."""
    y = check_labels(labels)
    q = check_probs(p, y.shape[0])
    return float(_roc_from_counts(*_curve_counts(_ranking(y, q), np.ones((1, y.shape[0]))))[0])


def precision_recall_points(labels, p) -> tuple[np.ndarray, np.ndarray]:
    """(recall, precision) at each distinct threshold, highest first, starting at (0, 1)."""
    y = check_labels(labels)
    q = check_probs(p, y.shape[0])
    tp, fp = _curve_counts(_ranking(y, q), np.ones((1, y.shape[0])))
    tp, fp = tp[0], fp[0]  # (G,)
    recall = tp / tp[-1] if tp[-1] > 0 else np.zeros_like(tp)
    return np.append(0.0, recall), np.append(1.0, tp / (tp + fp))


def brier(labels, p) -> float:
    """Brier score mean_n (p_n - y_n)^2."""
    y = check_labels(labels)
    q = check_probs(p, y.shape[0])
    return float(((q - y) ** 2).mean())


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


# ---------------------------------------------------------------------------- bootstrap


METRICS = ("nll", "auc_pr", "auc_roc", "ece", "brier")  # metrics with bootstrap intervals


def bootstrap_indices(n: int, n_bootstrap: int = 1000, seed: int = 0) -> np.ndarray:
    """Admission indices of each bootstrap resample, shape (B, N), from ``default_rng(seed)``."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, n, size=(n_bootstrap, n), dtype=np.int64)


def bootstrap_replicates(
    labels,
    p,
    nll_per_example,
    indices: np.ndarray,
    n_bins: int = N_BINS,
    ece_mode: EceMode | str = EceMode.POSITIVE,
    chunk: int = 100,
) -> dict[str, np.ndarray]:
    """Metrics of every resample in ``indices`` (B, N), each key -> (B,), in blocks of ``chunk``.

    A resample is represented by how often it draws each admission (weights (b, N)), so the
    scores are sorted and binned once and every metric is a weighted sum or cumulative sum.
    """
    y = check_labels(labels)
    q = check_probs(p, y.shape[0])
    nll = np.asarray(nll_per_example, dtype=np.float64)
    n = y.shape[0]
    if nll.shape != (n,):
        raise ValueError(f"nll_per_example: expected shape ({n},), got {nll.shape}")
    idx = np.asarray(indices)
    if idx.ndim != 2 or idx.shape[1] != n:
        raise ValueError(f"indices: expected shape (B, {n}), got {idx.shape}")
    rank = _ranking(y, q)
    target, score = _ece_inputs(y, q, ece_mode)
    onehot = _bin_onehot(score, n_bins)  # (N, n_bins)
    out = {m: np.empty(idx.shape[0]) for m in METRICS}
    for start in range(0, idx.shape[0], chunk):
        rows = idx[start : start + chunk]  # (b, N)
        b = rows.shape[0]
        flat = (rows + np.arange(b)[:, None] * n).ravel()  # (b*N,) row-offset indices
        w = np.bincount(flat, minlength=b * n).reshape(b, n).astype(np.float64)  # (b, N) counts
        sl = slice(start, start + b)
        tp, fp = _curve_counts(rank, w)
        out["auc_pr"][sl] = _ap_from_counts(tp, fp)
        out["auc_roc"][sl] = _roc_from_counts(tp, fp)
        out["ece"][sl] = np.abs(w @ (onehot * (target - score)[:, None])).sum(axis=1) / n
        out["brier"][sl] = w @ ((q - y) ** 2) / n
        with np.errstate(invalid="ignore"):  # inf NLL times zero weight
            out["nll"][sl] = np.where(w > 0, w * nll, 0.0).sum(axis=1) / n
    return out


def percentile_interval(values: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """Percentile interval of the finite replicates (nan-nan when none is finite)."""
    v = np.asarray(values, dtype=np.float64)
    v = v[~np.isnan(v)]
    if v.size == 0:
        return float("nan"), float("nan")
    a = (1.0 - level) / 2.0 * 100.0
    lo, hi = np.percentile(v, [a, 100.0 - a])
    return float(lo), float(hi)


# ---------------------------------------------------------------------------- referral


@dataclass
class ReferralCurve:
    """Metrics on the admissions kept after referring the most uncertain ones."""

    fractions: np.ndarray  # (F,) fraction of admissions referred
    n_retained: np.ndarray  # (F,) admissions kept
    auc_pr: np.ndarray  # (F,) AUC-PR on the kept admissions (nan when one class is left)
    nll: np.ndarray  # (F,) mixture NLL on the kept admissions
    measure: Uncertainty  # uncertainty used to rank

    def to_dict(self) -> dict:
        """JSON-able lists."""
        return {
            "measure": self.measure.value,
            "fractions": _json_list(self.fractions),
            "n_retained": [int(v) for v in self.n_retained],
            "auc_pr": _json_list(self.auc_pr),
            "nll": _json_list(self.nll),
        }


def referral_curve(
    logits, labels, fractions=None, measure: Uncertainty | str = Uncertainty.MUTUAL_INFORMATION
) -> ReferralCurve:
    """Refer the ``round(f*N)`` most uncertain admissions to a clinician for each f; score the rest.

    ``fractions`` default to 0, 0.05, ..., 0.5; each must lie in [0, 1) and leave one admission.
    Ties in uncertainty are broken by admission order (stable sort).
    """
    x = as_draws(logits)
    y = check_labels(labels, x.shape[1])
    n = y.shape[0]
    f = np.linspace(0.0, 0.5, 11) if fractions is None else np.asarray(fractions, dtype=np.float64)
    if f.ndim != 1 or np.any(~((f >= 0.0) & (f < 1.0))):
        raise ValueError(f"fractions: expected values in [0, 1), got {f!r}")
    order = np.argsort(-uncertainty(x, measure), kind="stable")  # most uncertain first
    p, nll = predictive(x), mixture_nll_per_example(x, y)
    kept_n, ap, mean_nll = [], [], []
    for frac in f:
        keep = order[min(int(round(frac * n)), n - 1) :]
        kept_n.append(keep.size)
        ap.append(average_precision(y[keep], p[keep]))
        mean_nll.append(float(nll[keep].mean()))
    return ReferralCurve(f, np.array(kept_n), np.array(ap), np.array(mean_nll), Uncertainty(measure))


# ---------------------------------------------------------------------------- reports


def _json_float(v) -> float | None:
    v = float(v)
    return v if np.isfinite(v) else None


def _json_list(a) -> list:
    return [_json_float(v) for v in np.asarray(a, dtype=np.float64).ravel()]


def _point_metrics(y: np.ndarray, p: np.ndarray, nll: np.ndarray, n_bins: int, mode: EceMode) -> dict:
    return {
        "nll": float(nll.mean()),
        "auc_pr": average_precision(y, p),
        "auc_roc": roc_auc(y, p),
        "ece": ece(y, p, n_bins, mode),
        "brier": brier(y, p),
    }


def evaluate_predictions(
    logits,
    labels,
    true_risk=None,
    n_bootstrap: int = 1000,
    seed: int = 0,
    components: int | None = None,
    n_bins: int = N_BINS,
    ece_mode: EceMode | str = EceMode.POSITIVE,
    level: float = 0.95,
) -> dict:
    """All evaluation metrics as a flat JSON-able dict (nan/inf -> None).

    ``logits``: (S, K, N), or (D, N) split into K = ``components`` (default 1) as D = S*K.
    Point metrics use the predictive mean over all draws and the mixture NLL. ``*_ci`` are
    percentile bootstrap intervals (``level``) over ``n_bootstrap`` resamples of admissions
    drawn with ``default_rng(seed)`` (0 disables them). ``member_*`` are per component (mean
    over its S samples). With ``true_risk`` (N,) probabilities, the same metrics for it go under
    ``"true_risk"`` and ``<metric>_gap`` = model - true risk, with a paired bootstrap interval.
    """
    x = as_components(logits, components)  # (S, K, N)
    s, k, n = x.shape
    y = check_labels(labels, n)
    mode = EceMode(ece_mode)
    p, nll = predictive(x), mixture_nll_per_example(x, y)
    out: dict = {"n": n, "positives": int(y.sum()), "samples": s, "components": k, "draws": s * k}
    out.update(_point_metrics(y, p, nll, n_bins, mode))
    out["accuracy"] = float(((p >= 0.5) == (y == 1.0)).mean())
    members = member_predictive(x)  # (K, N)
    out["member_nll"] = member_nll(x, y).tolist()
    out["member_auc_pr"] = [average_precision(y, members[j]) for j in range(k)]
    dis = disagreement(x, y)
    out["disagreement"], out["disagreement_normalized"] = dis.raw, dis.normalized
    mi, h = mutual_information(x), predictive_entropy(x)
    out["mean_predictive_entropy"] = float(h.mean())
    out["mean_expected_entropy"] = float(expected_entropy(x).mean())
    out["mean_mutual_information"] = float(mi.mean())
    rel = reliability(y, p, n_bins, mode)
    out["reliability_counts"] = [int(c) for c in rel.counts]
    out["reliability_mean_p"] = rel.mean_score.tolist()
    out["reliability_observed"] = rel.observed.tolist()
    out.update({"ece_mode": mode.value, "n_bins": n_bins, "n_bootstrap": n_bootstrap, "seed": seed, "ci_level": level})
    floor = ece_floor(y, p, seed=seed, n_bins=n_bins, mode=mode)
    out.update(ece_floor=floor.mean, ece_floor_p95=floor.p95, ece_p_value=floor.p_value)
    cal = recalibration(y, p)
    out.update(calibration_slope=cal.slope, calibration_intercept=cal.intercept)
    idx = bootstrap_indices(n, n_bootstrap, seed) if n_bootstrap > 0 else None
    reps = bootstrap_replicates(y, p, nll, idx, n_bins, mode) if idx is not None else None
    for m in METRICS:
        out[f"{m}_ci"] = list(percentile_interval(reps[m], level)) if reps else [None, None]
    if true_risk is not None:
        r = check_probs(true_risk, n, "true_risk")
        r_nll = nll_from_probs(y, r)
        ref = _point_metrics(y, r, r_nll, n_bins, mode)
        r_floor = ece_floor(y, r, seed=seed, n_bins=n_bins, mode=mode)
        ref.update(ece_floor=r_floor.mean, ece_floor_p95=r_floor.p95, ece_p_value=r_floor.p_value)
        r_cal = recalibration(y, r)
        ref.update(calibration_slope=r_cal.slope, calibration_intercept=r_cal.intercept)
        r_reps = bootstrap_replicates(y, r, r_nll, idx, n_bins, mode) if idx is not None else None
        for m in METRICS:
            ref[f"{m}_ci"] = list(percentile_interval(r_reps[m], level)) if r_reps else [None, None]
            out[f"{m}_gap"] = out[m] - ref[m]
            gap = list(percentile_interval(reps[m] - r_reps[m], level)) if reps else [None, None]
            out[f"{m}_gap_ci"] = gap
        out["true_risk"] = ref
    return _jsonable(out)


def _jsonable(v):
    """Recursively turn numpy scalars into Python ones and non-finite floats into None."""
    if isinstance(v, dict):
        return {key: _jsonable(val) for key, val in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(val) for val in v]
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return _json_float(v)
    return v
