"""Likelihoods, entropies and member disagreement of Monte Carlo / mixture draws (shapes: see
``pipeline.bayes.metrics``)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np


class Uncertainty(str, Enum):
    """Per-admission uncertainty used to rank admissions for referral."""

    MUTUAL_INFORMATION = "mi"  # H[E p] - E H[p] (epistemic part)
    ENTROPY = "entropy"  # H[E p] (total predictive entropy)
    SD = "sd"  # standard deviation of p over draws
    BAND = "band"  # 95th - 5th percentile of p over draws (width of the 5-95% band)


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


def _json_float(v) -> float | None:
    v = float(v)
    return v if np.isfinite(v) else None


def _json_list(a) -> list:
    return [_json_float(v) for v in np.asarray(a, dtype=np.float64).ravel()]


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


def predictive_band(logits) -> np.ndarray:
    """Width of the 5-95% band of p over draws (95th - 5th percentile), shape (N,)."""
    lo, hi = np.percentile(sigmoid(as_draws(logits)), [5.0, 95.0], axis=0)
    return hi - lo


def uncertainty(logits, measure: Uncertainty | str = Uncertainty.MUTUAL_INFORMATION) -> np.ndarray:
    """Per-admission uncertainty of the chosen ``measure``, shape (N,)."""
    fn = {
        Uncertainty.MUTUAL_INFORMATION: mutual_information,
        Uncertainty.ENTROPY: predictive_entropy,
        Uncertainty.SD: predictive_sd,
        Uncertainty.BAND: predictive_band,
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


