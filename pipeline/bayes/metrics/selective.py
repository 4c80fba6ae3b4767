"""Selective-prediction metrics of a binary risk: what keeping the admissions a measure ranks most certain
costs, for a named loss.

The measure u ranks admissions for referral (highest referred first); the others are kept. Kept first are
the lowest u. With the per-admission loss l_i (``SelectiveLoss``: the Brier loss (r - y)^2, or the 0/1 loss
of the decision at a threshold t, [(r >= t) != y]) and N admissions:

- L(k), the total loss of the k admissions kept first, for k in [0, N]. **Ties** in u are handled by
  expectation over their order: within a run of tied admissions every one counts with the run's mean loss,
  so L is linear between the runs' ends (the knots), and every number below is deterministic and does not
  depend on the admissions' order in the input.
- Coverage c = k / N; selective risk R(c) = L(cN) / (cN), the mean loss of the kept; generalized risk
  GR(c) = L(cN) / N, the joint probability of being kept and wrong (Traub et al., NeurIPS 2024,
  "Overcoming common flaws in the evaluation of selective classification systems").
- AURC = (1/N) sum_{k=1..N} R(k/N), the mean selective risk over the N coverages (Geifman et al. 2019).
- AUGRC = integral over c in [0, 1] of GR(c), exact for the piecewise-linear GR (the trapezoid over the
  knots): the average risk of an undetected failure. For the 0/1 loss it equals
  pi^2 / 2 + pi (1 - pi) (1 - AUROC_f), pi the error rate and AUROC_f the AUROC of -u separating correct
  from wrong admissions (ties half), an identity the tests use.
- Selective risk at a coverage c: R(c) on the linear L (80% and 90% by default).
- Coverage at a risk a: the largest k / N (k = 1..N) with R(k / N) <= a; 0 when none.
- Retention curves (uncertainty baselines' referral curves): AUC-PR and NLL of the admissions kept after
  referring round(f N) of the highest u, for each referred fraction f; the tied run at the cut is referred
  in expectation, each of its admissions kept with the same fractional weight.

Every number comes with a percentile bootstrap interval over resamples of admissions
(``report.bootstrap_indices``; a resample is a weight per admission, so the sort is done once and a
resampled duplicate is a tie of its admission).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np

from pipeline.bayes.metrics.draws import _json_float, _json_list, check_labels, check_probs, nll_from_probs
from pipeline.bayes.metrics.ranking import _ap_from_counts, _curve_counts, _ranking
from pipeline.bayes.metrics.report import _jsonable, bootstrap_indices, percentile_interval
from pipeline.bayes.metrics.summary import REFERRAL_FRACTIONS

COVERAGES = (0.8, 0.9)  # coverages whose selective risk is reported


class SelectiveLoss(str, Enum):
    """The per-admission loss of the selective metrics."""

    BRIER = "brier"  # (risk - outcome)^2
    ZERO_ONE = "zero_one"  # 1 when the decision at the threshold (risk >= t: death) is wrong


def selective_loss(labels, risk, loss: SelectiveLoss | str = SelectiveLoss.BRIER, threshold: float | None = None
                   ) -> np.ndarray:
    """The per-admission loss (N,) of ``loss``; ``threshold`` is required by the 0/1 loss."""
    y = check_labels(labels)
    r = check_probs(risk, y.shape[0], "risk")
    if SelectiveLoss(loss) is SelectiveLoss.BRIER:
        return (r - y) ** 2
    if threshold is None:
        raise ValueError("the zero_one loss needs the decision threshold")
    return ((r >= float(threshold)) != (y == 1.0)).astype(np.float64)


# ---------------------------------------------------------------------------- the curves, weighted


@dataclass
class _Runs:
    """Admissions sorted by the measure (increasing, stable), cut into runs of equal measure."""

    order: np.ndarray  # (N,) the sort
    starts: np.ndarray  # (G,) first sorted position of every run
    run_of: np.ndarray  # (N,) run of every admission (in input order)


def _runs(measure: np.ndarray) -> _Runs:
    order = np.argsort(measure, kind="stable")
    s = measure[order]
    starts = np.r_[0, np.flatnonzero(s[1:] != s[:-1]) + 1]
    run_sorted = np.repeat(np.arange(starts.shape[0]), np.diff(np.r_[starts, s.shape[0]]))
    run_of = np.empty(s.shape[0], dtype=np.int64)
    run_of[order] = run_sorted
    return _Runs(order, starts, run_of)


def _knots(runs: _Runs, losses: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cumulative weight K and loss S at the runs' ends, each (B, G + 1) from 0, for weights w (B, N)."""
    ws = w[:, runs.order]
    wg = np.add.reduceat(ws, runs.starts, axis=1)
    sg = np.add.reduceat(ws * losses[runs.order], runs.starts, axis=1)
    zero = np.zeros((w.shape[0], 1))
    return np.concatenate([zero, np.cumsum(wg, axis=1)], axis=1), np.concatenate([zero, np.cumsum(sg, axis=1)], axis=1)


def _curve_metrics(k_cum: np.ndarray, s_cum: np.ndarray, n: int, coverages, target_risk) -> dict[str, np.ndarray]:
    """AURC, AUGRC, risk at each coverage and coverage at the target risk, each (B,), from the knots."""
    b = k_cum.shape[0]
    ks = np.arange(1, n + 1, dtype=np.float64)
    aurc, covr = np.empty(b), np.empty(b)
    risk_at = {c: np.empty(b) for c in coverages}
    for i in range(b):
        lk = np.interp(ks, k_cum[i], s_cum[i])  # L(k), k = 1..N
        rk = lk / ks
        aurc[i] = rk.mean()
        for c in coverages:
            risk_at[c][i] = np.interp(c * n, k_cum[i], s_cum[i]) / (c * n)
        if target_risk is not None:
            ok = np.flatnonzero(rk <= target_risk + 1e-12)
            covr[i] = (ok[-1] + 1) / n if ok.size else 0.0
    dk = np.diff(k_cum, axis=1)
    augrc = (dk * (s_cum[:, 1:] + s_cum[:, :-1]) / 2.0).sum(axis=1) / (n * n)
    out = {"aurc": aurc, "augrc": augrc}
    out.update({f"risk_at_{c:g}": v for c, v in risk_at.items()})
    if target_risk is not None:
        out["coverage_at_risk"] = covr
    return out


def _weights(indices: np.ndarray, n: int) -> np.ndarray:
    """Resample indices (B, N) as counts per admission (B, N)."""
    b = indices.shape[0]
    flat = (indices + np.arange(b)[:, None] * n).ravel()
    return np.bincount(flat, minlength=b * n).reshape(b, n).astype(np.float64)


def _check(measure, losses) -> tuple[np.ndarray, np.ndarray]:
    u = np.asarray(measure, dtype=np.float64)
    e = np.asarray(losses, dtype=np.float64)
    if u.ndim != 1 or u.shape != e.shape or u.size == 0:
        raise ValueError(f"measure {u.shape} and losses {e.shape} must be the same non-empty (N,)")
    if np.any(~np.isfinite(u)) or np.any(~np.isfinite(e)):
        raise ValueError("measure and losses must be finite")
    return u, e


def _point(measure, losses, coverages=COVERAGES, target_risk=None) -> dict[str, float]:
    u, e = _check(measure, losses)
    k_cum, s_cum = _knots(_runs(u), e, np.ones((1, u.shape[0])))
    return {k: float(v[0]) for k, v in _curve_metrics(k_cum, s_cum, u.shape[0], coverages, target_risk).items()}


def aurc(losses, measure) -> float:
    """AURC: the mean selective risk over coverages 1/N, ..., 1 (module docstring)."""
    return _point(measure, losses)["aurc"]


def augrc(losses, measure) -> float:
    """AUGRC: the area under the generalized risk-coverage curve (module docstring)."""
    return _point(measure, losses)["augrc"]


def selective_risk(losses, measure, coverage: float) -> float:
    """The mean loss of the ``coverage`` share of admissions kept first (lowest measure)."""
    if not 0.0 < coverage <= 1.0:
        raise ValueError(f"coverage must lie in (0, 1], got {coverage}")
    return _point(measure, losses, (coverage,))[f"risk_at_{coverage:g}"]


def coverage_at_risk(losses, measure, risk: float) -> float:
    """The largest coverage k / N at which the selective risk is <= ``risk`` (0 when none)."""
    return _point(measure, losses, (), float(risk))["coverage_at_risk"]


def selective_metrics(labels, risk, measure, loss: SelectiveLoss | str = SelectiveLoss.BRIER,
                      threshold: float | None = None, coverages=COVERAGES, target_risk: float | None = None,
                      n_bootstrap: int = 1000, seed: int = 0, level: float = 0.95) -> dict:
    """JSON-able: AURC, AUGRC, risk at ``coverages`` and, with ``target_risk``, the coverage at it, each with
    its percentile bootstrap interval (``<name>_ci``; ``n_bootstrap`` resamples from ``default_rng(seed)``,
    0: none), for ``loss`` (``threshold``: the decision threshold of the 0/1 loss)."""
    e = selective_loss(labels, risk, loss, threshold)
    u, _ = _check(measure, e)
    n = u.shape[0]
    runs = _runs(u)
    point = _curve_metrics(*_knots(runs, e, np.ones((1, n))), n, coverages, target_risk)
    reps = None
    if n_bootstrap > 0:
        reps = _curve_metrics(*_knots(runs, e, _weights(bootstrap_indices(n, n_bootstrap, seed), n)), n, coverages,
                              target_risk)
    out = {"loss": SelectiveLoss(loss).value, "threshold": threshold, "n": n, "coverages": list(coverages),
           "target_risk": target_risk, "n_bootstrap": n_bootstrap, "seed": seed, "ci_level": level}
    for name, v in point.items():
        out[name] = float(v[0])
        out[f"{name}_ci"] = list(percentile_interval(reps[name], level)) if reps else [None, None]
    return _jsonable(out)


# ---------------------------------------------------------------------------- retention curves


@dataclass
class RetentionCurve:
    """AUC-PR and NLL of the kept admissions against the share referred (highest measure first)."""

    fractions: np.ndarray  # (F,) share of admissions referred
    n_kept: np.ndarray  # (F,) admissions kept, N - round(f N)
    auc_pr: np.ndarray  # (F,) average precision of the kept (nan: one class kept)
    nll: np.ndarray  # (F,) mean NLL of the kept, nats
    auc_pr_ci: np.ndarray  # (F, 2) percentile bootstrap interval (nan without resamples)
    nll_ci: np.ndarray  # (F, 2) percentile bootstrap interval

    def to_dict(self) -> dict:
        return {"fractions": _json_list(self.fractions), "n_kept": [int(v) for v in self.n_kept],
                "auc_pr": _json_list(self.auc_pr), "nll": _json_list(self.nll),
                "auc_pr_ci": [[_json_float(a), _json_float(b)] for a, b in self.auc_pr_ci],
                "nll_ci": [[_json_float(a), _json_float(b)] for a, b in self.nll_ci]}


def _kept_weights(runs: _Runs, w: np.ndarray, keep: float) -> np.ndarray:
    """Weights (B, N) of the ``keep`` units kept first, the run at the cut kept pro rata."""
    ws = w[:, runs.order]
    wg = np.add.reduceat(ws, runs.starts, axis=1)  # (B, G)
    before = np.cumsum(wg, axis=1) - wg
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(wg > 0, np.clip((keep - before) / np.where(wg > 0, wg, 1.0), 0.0, 1.0), 0.0)
    return w * share[:, runs.run_of]


def _retention_rows(runs, rank, nll, y, w: np.ndarray, kept: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(AUC-PR, NLL) of each weight row after keeping ``kept`` units, each (B,)."""
    kw = _kept_weights(runs, w, float(kept))
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        total = kw.sum(axis=1)
        mean_nll = np.where(kw > 0, kw * nll, 0.0).sum(axis=1) / total
    return _ap_from_counts(*_curve_counts(rank, kw)), mean_nll


def retention_curve(labels, risk, measure, fractions=REFERRAL_FRACTIONS, n_bootstrap: int = 1000, seed: int = 0,
                    level: float = 0.95) -> RetentionCurve:
    """AUC-PR and NLL of the admissions kept when round(f N) of the highest ``measure`` are referred, for each
    f in ``fractions`` (each in [0, 1), leaving one admission), with bootstrap intervals (module docstring)."""
    y = check_labels(labels)
    r = check_probs(risk, y.shape[0], "risk")
    u, _ = _check(measure, r)
    n = y.shape[0]
    f = np.asarray(fractions, dtype=np.float64)
    if f.ndim != 1 or np.any(~((f >= 0.0) & (f < 1.0))):
        raise ValueError(f"fractions: expected values in [0, 1), got {f!r}")
    kept = np.array([n - min(int(round(v * n)), n - 1) for v in f])
    runs, rank, nll = _runs(u), _ranking(y, r), nll_from_probs(y, r)
    ones = np.ones((1, n))
    w = _weights(bootstrap_indices(n, n_bootstrap, seed), n) if n_bootstrap > 0 else None
    ap, mean_nll = np.empty(f.shape), np.empty(f.shape)
    ap_ci, nll_ci = np.full((f.shape[0], 2), np.nan), np.full((f.shape[0], 2), np.nan)
    for i, k in enumerate(kept):
        a, b = _retention_rows(runs, rank, nll, y, ones, k)
        ap[i], mean_nll[i] = a[0], b[0]
        if w is not None:
            a, b = _retention_rows(runs, rank, nll, y, w, k)
            ap_ci[i], nll_ci[i] = percentile_interval(a, level), percentile_interval(b, level)
    return RetentionCurve(f, kept, ap, mean_nll, ap_ci, nll_ci)


def kept_mean(values, measure, fractions=REFERRAL_FRACTIONS) -> np.ndarray:
    """(F,) mean of per-admission ``values`` (any loss: e.g. the KL divergence from a known true risk) over the
    admissions kept when round(f N) of the highest ``measure`` are referred, for each f in ``fractions`` (the
    tied run at the cut kept pro rata, as ``retention_curve`` does)."""
    v = np.asarray(values, dtype=np.float64)
    u, _ = _check(measure, v)
    n = u.shape[0]
    f = np.asarray(fractions, dtype=np.float64)
    if f.ndim != 1 or np.any(~((f >= 0.0) & (f < 1.0))):
        raise ValueError(f"fractions: expected values in [0, 1), got {f!r}")
    runs, ones = _runs(u), np.ones((1, n))
    out = np.empty(f.shape)
    for i, frac in enumerate(f):
        kw = _kept_weights(runs, ones, float(n - min(int(round(frac * n)), n - 1)))[0]
        out[i] = float((kw * v).sum() / kw.sum())
    return out
