"""Ranking metrics of binary predictions: AUC-PR (average precision), AUC-ROC, Brier, PR points."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.bayes.metrics.draws import check_labels, check_probs

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


