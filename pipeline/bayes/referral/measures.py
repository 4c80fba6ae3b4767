"""Ordering measures of the refer rule, decision uncertainty among them, and what each says in plain words.

The refer rule refers the admissions whose measure is highest. Besides the risk itself and the uncertainty
measures of the risk table (``entropy``, ``mi``, ``sd``, ``band``: ``pipeline.bayes.metrics.Measure``), two
measures are about the decision threshold t:

- ``decision`` (decision uncertainty): the posterior probability that the admission's risk lies on the
  other side of t from the decision taken (high risk iff the risk >= t). From S draws of the risk:
  the share of draws on the other side, mean_d [p_d < t] for a flagged admission and mean_d [p_d >= t] for
  the others. For a Gaussian logit f ~ N(mu, sigma^2) (the linearized Laplace posterior) in closed form:
  P(sigmoid(f) >= t) = Phi((mu - logit t) / sigma), so the measure is Phi(-|.|)-like: 1 - that for a
  flagged admission, that for the others (0 when sigma = 0 and the decision agrees with mu).
- ``va_decision``: its Venn-Abers counterpart, the share of the interval [p0, p1] on the other side of t
  from the decision taken with the merged probability (0 when the interval does not straddle t); and
  ``va_width``, p1 - p0.

A threshold on the calibrated risk through a non-decreasing map m is a threshold on the raw risk:
m(p) >= t iff p >= m.raw_threshold(t); so pass the mapped draws, or the raw Gaussian with that raw
threshold and the calibrated decision as ``decided``.

``describe`` gives the plain words of an ordering: "referred because the risk is high" whenever the
measure ranks the admissions as the risk does (the risk itself, or e.g. the entropy where every risk is
below 0.5), "referred because the model cannot tell which side of the decision threshold the risk lies
on" for decision uncertainty.
"""

from __future__ import annotations

import numpy as np
from scipy.special import ndtr

from pipeline.bayes.referral.options import Ordering  # noqa: F401 (re-exported: the orderings)

HIGH_RISK = "referred because the risk is high"
WORDS = {
    Ordering.RISK: HIGH_RISK,
    Ordering.ENTROPY: "referred because the outcome is least predictable (the predictive entropy is high)",
    Ordering.MI: "referred because the model's weight draws disagree most (mutual information)",
    Ordering.SD: "referred because the risk varies most across the model's posterior (its sd)",
    Ordering.BAND: "referred because the 5-95% band of the risk is widest",
    Ordering.DECISION: "referred because the model cannot tell which side of the decision threshold the risk "
                       "lies on",
    Ordering.VA_DECISION: "referred because the calibrated interval of the risk straddles the decision threshold",
    Ordering.VA_WIDTH: "referred because the calibration data pin the risk down least (widest Venn-Abers interval)",
}


def _decided(decided, risk: np.ndarray, threshold: float) -> np.ndarray:
    return risk >= threshold if decided is None else np.asarray(decided, dtype=bool)


def decision_uncertainty(draws, threshold: float, decided=None) -> np.ndarray:
    """Share of the draws on the other side of ``threshold`` from the decision, (N,).

    ``draws``: probabilities (S, N) or (S, K, N) (admissions last). ``decided`` (N,) bool: the decision
    taken (high risk); default: the mean of the draws >= threshold. A draw equal to the threshold is on
    the high-risk side.
    """
    p = np.asarray(draws, dtype=np.float64)
    if p.ndim < 2:
        raise ValueError(f"draws: expected (S, N) or (S, K, N) probabilities, got shape {p.shape}")
    p = p.reshape(-1, p.shape[-1])
    high = _decided(decided, p.mean(axis=0), threshold)
    above = (p >= threshold).mean(axis=0)
    return np.where(high, 1.0 - above, above)


def gaussian_decision_uncertainty(mu, var, threshold: float, decided=None) -> np.ndarray:
    """Decision uncertainty of a Gaussian logit N(mu, var) per admission, in closed form, (N,).

    P(sigmoid(f) >= threshold) = Phi((mu - logit threshold) / sigma); ``decided`` default: the probit
    predictive sigmoid(mu / sqrt(1 + pi var / 8)) >= threshold. sigma = 0 gives 0 or 1 (a point risk).
    """
    m = np.asarray(mu, dtype=np.float64)
    v = np.asarray(var, dtype=np.float64)
    if m.shape != v.shape or np.any(~(v >= 0.0)):
        raise ValueError(f"mu and var must be arrays of one shape with var >= 0, got {m.shape}, {v.shape}")
    t = float(threshold)
    with np.errstate(divide="ignore"):
        zt = np.log(t) - np.log1p(-t)
    sigma = np.sqrt(v)
    with np.errstate(divide="ignore", invalid="ignore"):
        above = np.where(sigma > 0.0, ndtr((m - zt) / np.where(sigma > 0.0, sigma, 1.0)), (m >= zt).astype(float))
    probit = 1.0 / (1.0 + np.exp(-m / np.sqrt(1.0 + np.pi * v / 8.0)))
    high = _decided(decided, probit, t)
    return np.where(high, 1.0 - above, above)


def va_decision_uncertainty(p0, p1, threshold: float, decided=None) -> np.ndarray:
    """Share of the Venn-Abers interval [p0, p1] on the other side of ``threshold`` from the decision.

    ``decided`` default: the merged probability p1 / (1 - p0 + p1) >= threshold. 0 where the interval
    does not straddle the threshold (p0 = p1 included).
    """
    a = np.asarray(p0, dtype=np.float64)
    b = np.asarray(p1, dtype=np.float64)
    high = _decided(decided, b / (1.0 - a + b), threshold)
    width = b - a
    with np.errstate(divide="ignore", invalid="ignore"):
        below = np.where(width > 0.0, np.clip((threshold - a) / width, 0.0, 1.0), (b < threshold).astype(float))
    return np.where(high, below, 1.0 - below)


def va_width(p0, p1) -> np.ndarray:
    """p1 - p0."""
    return np.asarray(p1, dtype=np.float64) - np.asarray(p0, dtype=np.float64)


def monotone_in_risk(measure, risk) -> bool:
    """Whether ``measure`` is a non-decreasing function of ``risk`` on these admissions (ranks as the risk)."""
    u = np.asarray(measure, dtype=np.float64)
    r = np.asarray(risk, dtype=np.float64)
    if u.shape != r.shape or u.ndim != 1:
        raise ValueError(f"measure {u.shape} and risk {r.shape} must be (N,) arrays of one shape")
    order = np.lexsort((u, r))  # by risk, then measure
    du, dr = np.diff(u[order]), np.diff(r[order])
    return bool(np.all(du >= 0.0) and np.all(du[dr == 0.0] == 0.0))


def describe(ordering: Ordering | str, measure=None, risk=None) -> str:
    """The plain words of a refer flag ranked by ``ordering``.

    With ``measure`` and ``risk`` (N,), an ordering other than the risk that ranks these admissions as the
    risk does is said to be what it is: "referred because the risk is high (the ... ranks these
    admissions as the risk does)".
    """
    o = Ordering(ordering)
    if o is Ordering.RISK:
        return HIGH_RISK
    if measure is not None and risk is not None and monotone_in_risk(measure, risk):
        return f"{HIGH_RISK} (the {o.value} ranks these admissions as the risk does)"
    return WORDS[o]
