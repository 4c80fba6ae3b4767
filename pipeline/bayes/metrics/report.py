"""Bootstrap intervals, the uncertainty referral curve, and the full evaluation report of a set of draws."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.bayes.metrics.calibration import (
    N_BINS,
    EceMode,
    _bin_onehot,
    _ece_inputs,
    ece,
    ece_floor,
    recalibration,
    reliability,
)
from pipeline.bayes.metrics.draws import (
    Uncertainty,
    _json_float,
    _json_list,
    as_components,
    as_draws,
    check_labels,
    check_probs,
    disagreement,
    expected_entropy,
    member_nll,
    member_predictive,
    mixture_nll_per_example,
    mutual_information,
    nll_from_probs,
    predictive,
    predictive_entropy,
    uncertainty,
)
from pipeline.bayes.metrics.ranking import (
    _ap_from_counts,
    _curve_counts,
    _ranking,
    _roc_from_counts,
    average_precision,
    brier,
    roc_auc,
)

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


def debiased_interval(value: float, replicates: np.ndarray, level: float = 0.95) -> tuple[float, list[float]]:
    """The bootstrap-debiased estimate of a statistic biased upward (the binned ECE) and its basic bootstrap
    interval: ``max(0, 2 value - mean(replicates))`` and ``[2 value - q_hi, 2 value - q_lo]`` clipped at 0. The
    replicates of a plug-in ECE repeat its upward bias (resampling adds every bin's noise again), so their percentile
    interval sits above the estimate; reflected around it, the interval covers the population ECE far more often
    and always holds the debiased estimate (docs/experiments/2026-12-06-ece-interval.md)."""
    v = np.asarray(replicates, dtype=np.float64)
    v = v[~np.isnan(v)]
    if v.size == 0 or value != value:
        return float("nan"), [float("nan"), float("nan")]
    lo, hi = percentile_interval(v, level)
    return max(0.0, 2.0 * value - float(v.mean())), [max(0.0, 2.0 * value - hi), max(0.0, 2.0 * value - lo)]


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
    logits, labels, fractions=None, measure: Uncertainty | str = Uncertainty.MUTUAL_INFORMATION, scores=None
) -> ReferralCurve:
    """Refer the ``round(f*N)`` most uncertain admissions to a clinician for each f; score the rest.

    ``fractions`` default to 0, 0.05, ..., 0.5; each must lie in [0, 1) and leave one admission.
    Ties in uncertainty are broken by admission order (stable sort). ``scores`` (N,): the values of
    ``measure`` when the draws do not carry them (a Gaussian-logit model's ``Summary``).
    """
    x = as_draws(logits)
    y = check_labels(labels, x.shape[1])
    n = y.shape[0]
    f = np.linspace(0.0, 0.5, 11) if fractions is None else np.asarray(fractions, dtype=np.float64)
    if f.ndim != 1 or np.any(~((f >= 0.0) & (f < 1.0))):
        raise ValueError(f"fractions: expected values in [0, 1), got {f!r}")
    u = uncertainty(x, measure) if scores is None else np.asarray(scores, dtype=np.float64)
    if u.shape != (n,):
        raise ValueError(f"scores: expected shape ({n},), got {u.shape}")
    order = np.argsort(-u, kind="stable")  # most uncertain first
    p, nll = predictive(x), mixture_nll_per_example(x, y)
    kept_n, ap, mean_nll = [], [], []
    for frac in f:
        keep = order[min(int(round(frac * n)), n - 1) :]
        kept_n.append(keep.size)
        ap.append(average_precision(y[keep], p[keep]))
        mean_nll.append(float(nll[keep].mean()))
    return ReferralCurve(f, np.array(kept_n), np.array(ap), np.array(mean_nll), Uncertainty(measure))


# ---------------------------------------------------------------------------- reports


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
    drawn with ``default_rng(seed)`` (0 disables them), but the ECE's: ``ece_debiased`` and its basic bootstrap
    interval ``ece_ci`` (``debiased_interval``; ``ece`` stays the plug-in). ``member_*`` are per component (mean
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
    if reps:
        out["ece_debiased"], out["ece_ci"] = debiased_interval(out["ece"], reps["ece"], level)
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
        if r_reps:
            ref["ece_debiased"], ref["ece_ci"] = debiased_interval(ref["ece"], r_reps["ece"], level)
            out["ece_debiased_gap"] = out["ece_debiased"] - ref["ece_debiased"]
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
