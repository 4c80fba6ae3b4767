"""Evaluation metrics for multi-class predictions made of Monte Carlo / mixture draws.

The multi-class extension of ``pipeline.bayes.metrics`` (same conventions, to be folded into the
``pipeline.bayes.metrics`` package): shapes ``D`` weight draws, ``N`` examples, ``C`` classes. Logits
are (S, K, N, C), or (D, N, C) with D = S·K flattened sample-major then member-major
(docs/architecture.md): draw ``d = s*K + k``. A *member* is one mixture component: its prediction is the
mean probability over its S samples. Probabilities come from logits through log-softmax, so
extreme logits never turn into ``log(0)``; logarithms are natural (nats).

- NLL: of the equal-weight mixture over all D draws, ``-log((1/D) Σ_d p_d(y_n))``.
- Accuracy: of the argmax of the predictive mean E_d p_d.
- ECE: top-label (Guo et al. 2017): each example is binned by its confidence max_c E p_c in 15
  equal-width bins (``pipeline.bayes.metrics.bin_index``) and ``ECE = Σ_b (n_b/N) |acc_b - conf_b|``.
- Brier: Σ_c (E p_c - 1[c = y])², averaged over examples.
- Entropies and mutual information H[E p] - E H[p] per example; disagreement of the members'
  argmax labels, pairwise, normalised by the ensemble's error rate (Fort et al. 2019).
"""

from __future__ import annotations

import numpy as np

from pipeline.bayes.metrics.calibration import N_BINS, EceMode, Reliability, bin_index
from pipeline.bayes.metrics.draws import Disagreement
from pipeline.bayes.metrics.report import _jsonable

# ---------------------------------------------------------------------------- validation


def check_class_labels(labels, n: int | None = None, num_classes: int | None = None,
                       name: str = "labels") -> np.ndarray:
    """Return ``labels`` (N,) as int64 class ids in [0, num_classes); raise naming the first bad row."""
    y = np.asarray(labels)
    if y.ndim != 1 or y.shape[0] == 0:
        raise ValueError(f"{name}: expected a non-empty 1-D array (N,), got shape {y.shape}")
    if n is not None and y.shape[0] != n:
        raise ValueError(f"{name}: {y.shape[0]} examples but the predictions have {n}")
    if y.dtype.kind not in "iu":
        if y.dtype.kind != "f" or not np.all(np.isfinite(y)) or np.any(y != np.round(y)):
            raise ValueError(f"{name}: class ids must be integers, got dtype {y.dtype}")
    yi = y.astype(np.int64)
    high = np.inf if num_classes is None else num_classes
    bad = np.flatnonzero((yi < 0) | (yi >= high))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"{name}[{i}] = {y[i].item()!r}: class ids must lie in [0, {num_classes}) "
                         f"({bad.size} bad rows)")
    return yi


def as_draws(logits) -> np.ndarray:
    """Logits as (D, N, C) float64: (N, C) -> (1, N, C); (S, K, N, C) -> (S*K, N, C) sample-major."""
    x = np.asarray(logits, dtype=np.float64)
    if x.ndim not in (2, 3, 4):
        raise ValueError(f"logits: expected shape (N, C), (D, N, C) or (S, K, N, C), got {x.shape}")
    if 0 in x.shape:
        raise ValueError(f"logits: empty array of shape {x.shape}")
    if x.shape[-1] < 2:
        raise ValueError(f"logits: need at least 2 classes, got shape {x.shape}")
    bad = np.argwhere(~np.isfinite(x))
    if bad.size:  # reported at the caller's index
        where = ", ".join(str(int(i)) for i in bad[0])
        value = x[tuple(bad[0])].item()
        raise ValueError(f"logits[{where}] = {value!r}: logits must be finite ({len(bad)} bad entries)")
    if x.ndim == 2:
        return x[None]  # (N, C) -> (1, N, C)
    return x.reshape(-1, x.shape[-2], x.shape[-1])  # (S, K, N, C) -> (S*K, N, C), d = s*K + k


def as_components(logits, components: int | None = None) -> np.ndarray:
    """Logits as (S, K, N, C). (D, N, C) input is split as D = S*K with K = ``components`` (default 1)."""
    x = np.asarray(logits, dtype=np.float64)
    if x.ndim == 4:
        if components is not None and components != x.shape[1]:
            raise ValueError(f"logits: components={components} but the array has K={x.shape[1]}")
        return as_draws(x).reshape(x.shape)  # validated, (S, K, N, C)
    d = as_draws(x)  # (D, N, C)
    k = 1 if components is None else int(components)
    if k < 1 or d.shape[0] % k:
        raise ValueError(f"logits: {d.shape[0]} draws cannot be split into components={components}")
    return d.reshape(d.shape[0] // k, k, d.shape[1], d.shape[2])  # (D, N, C) -> (S, K, N, C)


# ---------------------------------------------------------------------------- likelihoods


def log_softmax(x) -> np.ndarray:
    """log softmax over the last axis, exact for large logits."""
    a = np.asarray(x, dtype=np.float64)
    m = a.max(axis=-1, keepdims=True)
    return a - m - np.log(np.exp(a - m).sum(axis=-1, keepdims=True))


def softmax(x) -> np.ndarray:
    """softmax over the last axis as exp(log_softmax)."""
    return np.exp(log_softmax(x))


def log_likelihood(logits, labels) -> np.ndarray:
    """log p_d(y_n) per draw and example, shape (D, N)."""
    x = as_draws(logits)
    y = check_class_labels(labels, x.shape[1], x.shape[2])
    return np.take_along_axis(log_softmax(x), y[None, :, None], axis=2)[:, :, 0]  # (D, N)


def mixture_nll_classes_per_example(logits, labels) -> np.ndarray:
    """-log((1/D) Σ_d p_d(y_n)) per example, shape (N,)."""
    ll = log_likelihood(logits, labels)  # (D, N)
    m = ll.max(axis=0)
    return -(m + np.log(np.exp(ll - m).sum(axis=0)) - np.log(ll.shape[0]))


def mixture_nll_classes(logits, labels) -> float:
    """NLL of the equal-weight mixture over all D draws, averaged over examples (sklearn's
    log_loss for D = 1)."""
    return float(mixture_nll_classes_per_example(logits, labels).mean())


def member_nll(logits, labels, components: int | None = None) -> np.ndarray:
    """Mixture NLL of each component over its own S samples, shape (K,)."""
    x = as_components(logits, components)  # (S, K, N, C)
    return np.array([mixture_nll_classes(x[:, k], labels) for k in range(x.shape[1])])


def predictive(logits) -> np.ndarray:
    """Predictive class probabilities E_d[softmax(logit_d)], shape (N, C)."""
    return softmax(as_draws(logits)).mean(axis=0)


def member_predictive(logits, components: int | None = None) -> np.ndarray:
    """Each component's class probabilities averaged over its S samples, shape (K, N, C)."""
    return softmax(as_components(logits, components)).mean(axis=0)


def accuracy(labels, probs) -> float:
    """Fraction of examples whose argmax class (first on ties) is the label; probs (N, C)."""
    p = np.asarray(probs, dtype=np.float64)
    y = check_class_labels(labels, p.shape[0], p.shape[1])
    return float((p.argmax(axis=1) == y).mean())


def brier(labels, probs) -> float:
    """Multi-class Brier score mean_n Σ_c (p_nc - 1[c = y_n])²; probs (N, C)."""
    p = np.asarray(probs, dtype=np.float64)
    y = check_class_labels(labels, p.shape[0], p.shape[1])
    onehot = np.zeros_like(p)
    onehot[np.arange(p.shape[0]), y] = 1.0
    return float(((p - onehot) ** 2).sum(axis=1).mean())


# ---------------------------------------------------------------------------- calibration


def _top_label(labels, probs) -> tuple[np.ndarray, np.ndarray]:
    """(correct (N,) 0/1, confidence (N,)) of the argmax class."""
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim != 2 or p.shape[0] == 0:
        raise ValueError(f"probs: expected a non-empty (N, C) array, got shape {p.shape}")
    bad = np.argwhere(~((p >= 0.0) & (p <= 1.0)))
    if bad.size:
        raise ValueError(f"probs[{int(bad[0][0])}, {int(bad[0][1])}]: probabilities must lie in [0, 1]")
    y = check_class_labels(labels, p.shape[0], p.shape[1])
    return (p.argmax(axis=1) == y).astype(np.float64), np.clip(p.max(axis=1), 0.0, 1.0)


def top_label_ece(labels, probs, n_bins: int = N_BINS) -> float:
    """Top-label expected calibration error with ``n_bins`` equal-width confidence bins."""
    correct, conf = _top_label(labels, probs)
    gap = np.bincount(bin_index(conf, n_bins), weights=correct - conf, minlength=n_bins)  # n_b (acc_b - conf_b)
    return float(np.abs(gap).sum() / correct.shape[0])


def reliability(labels, probs, n_bins: int = N_BINS) -> Reliability:
    """Per-bin counts, mean confidence and accuracy (top-label binning of ``ece``)."""
    correct, conf = _top_label(labels, probs)
    b = bin_index(conf, n_bins)
    counts = np.bincount(b, minlength=n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_conf = np.bincount(b, weights=conf, minlength=n_bins) / counts
        observed = np.bincount(b, weights=correct, minlength=n_bins) / counts
    return Reliability(np.arange(n_bins + 1) / n_bins, counts, mean_conf, observed, EceMode.TOP_LABEL)


# ---------------------------------------------------------------------------- entropies and diversity


def _entropy(p: np.ndarray) -> np.ndarray:
    """Σ_c -p log p over the last axis, 0 log 0 = 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return -np.where(p > 0.0, p * np.log(p), 0.0).sum(axis=-1)


def predictive_entropy(logits) -> np.ndarray:
    """H[E p] in nats per example, shape (N,)."""
    return _entropy(predictive(logits))


def expected_entropy(logits) -> np.ndarray:
    """E_d H[p_d] in nats per example, shape (N,), from log-softmax (exact for confident draws)."""
    lp = log_softmax(as_draws(logits))  # (D, N, C)
    return -(np.exp(lp) * lp).sum(axis=2).mean(axis=0)


def mutual_information(logits) -> np.ndarray:
    """H[E p] - E H[p] per example (nats), shape (N,); clipped at 0 (>= 0 by Jensen)."""
    return np.maximum(predictive_entropy(logits) - expected_entropy(logits), 0.0)


def disagreement(logits, labels, components: int | None = None) -> Disagreement:
    """Pairwise disagreement of the K members' argmax labels, normalised by the error rate.

    Member k predicts the argmax of its mean probabilities over its S samples. ``raw`` is the
    fraction of examples where two members' labels differ, averaged over the K(K-1)/2 pairs;
    ``normalized = raw / (1 - acc)`` with acc the accuracy of the full predictive mean. K = 1
    gives nan.
    """
    x = as_components(logits, components)  # (S, K, N, C)
    k, n, c = x.shape[1:]
    acc = accuracy(labels, predictive(x))
    if k < 2:
        return Disagreement(raw=float("nan"), normalized=float("nan"), accuracy=acc)
    votes = member_predictive(x).argmax(axis=2)  # (K, N) member labels
    counts = np.zeros((n, c))
    np.add.at(counts, (np.arange(n)[None, :].repeat(k, 0), votes), 1.0)  # (N, C) members per label
    agreeing = (counts * (counts - 1.0) / 2.0).sum(axis=1)  # (N,) agreeing pairs
    raw = float((k * (k - 1) / 2.0 - agreeing).sum() / (n * k * (k - 1) / 2.0))
    return Disagreement(raw=raw, normalized=raw / (1.0 - acc) if acc < 1.0 else float("nan"), accuracy=acc)


# ---------------------------------------------------------------------------- reports


def evaluate_predictions(logits, labels, components: int | None = None, n_bins: int = N_BINS) -> dict:
    """All multi-class metrics as a flat JSON-able dict (nan/inf -> None).

    ``logits``: (S, K, N, C), or (D, N, C) split into K = ``components`` (default 1). Point
    metrics use the predictive mean over all draws and the mixture NLL; ``member_*`` are per
    component (mean over its S samples).
    """
    x = as_components(logits, components)  # (S, K, N, C)
    s, k, n, c = x.shape
    y = check_class_labels(labels, n, c)
    p = predictive(x)  # (N, C)
    out: dict = {"n": n, "classes": c, "samples": s, "components": k, "draws": s * k}
    out["nll"] = mixture_nll_classes(x, y)
    out["accuracy"] = accuracy(y, p)
    out["ece"] = top_label_ece(y, p, n_bins)
    out["brier"] = brier(y, p)
    members = member_predictive(x)  # (K, N, C)
    out["member_nll"] = member_nll(x, y).tolist()
    out["member_accuracy"] = [accuracy(y, members[j]) for j in range(k)]
    dis = disagreement(x, y)
    out["disagreement"], out["disagreement_normalized"] = dis.raw, dis.normalized
    out["mean_predictive_entropy"] = float(predictive_entropy(x).mean())
    out["mean_expected_entropy"] = float(expected_entropy(x).mean())
    out["mean_mutual_information"] = float(mutual_information(x).mean())
    rel = reliability(y, p, n_bins)
    out["reliability_counts"] = [int(v) for v in rel.counts]
    out["reliability_mean_confidence"] = rel.mean_score.tolist()
    out["reliability_accuracy"] = rel.observed.tolist()
    out.update({"ece_mode": EceMode.TOP_LABEL.value, "n_bins": n_bins})
    return _jsonable(out)
