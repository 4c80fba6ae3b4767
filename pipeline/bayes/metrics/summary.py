"""Per-admission predictive summaries, and how well each uncertainty measure points at the errors.

A model's prediction for admission n is either a set of D logit draws (``Summary.from_draws``: the
mixture / Monte Carlo models) or a Gaussian logit N(μ_n, σ_n²) (``Summary.from_gaussian``: the
linearized Laplace posterior with the probit predictive). Both give the same per-admission
columns: the risk, its standard deviation, 5th / 95th percentiles, the mutual information between
label and weights, the predictive entropy, and whether the weight posterior reaches the admission
at all (``spread``). Every uncertainty ``Measure`` is read off these columns, so the risk table,
the refer flag and the evaluation rank admissions by the same numbers.

Against a known true risk t_n (synthetic sources), the error of admission n is
KL(Bernoulli(t_n) ‖ Bernoulli(p_n)). ``uncertainty_vs_truth`` gives, per measure, the Spearman
correlation between the measure and that error, and the referral curve against the truth: the mean
error of the admissions kept when the most uncertain 0-50% are referred, beside random referral
(whose expected kept error is the overall mean) and the oracle that refers by the error itself.
``referral_gain`` = area between random's curve and the measure's / area between random's and the
oracle's: 1 when the measure ranks the errors perfectly, 0 for a measure no better than chance
(a constant measure scores exactly 0: ties are referred in expectation), negative when it refers
the admissions the model gets right. Only numpy is imported.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.bayes.metrics.draws import (
    Uncertainty,
    _json_float,
    _json_list,
    _plogp,
    as_draws,
    check_probs,
    log_sigmoid,
    mutual_information,
    predictive,
    predictive_entropy,
    predictive_sd,
    sigmoid,
)

Z95 = 1.6448536269514722  # Φ⁻¹(0.95): the 5th / 95th percentiles of a Gaussian logit are μ ∓ Z95·σ
GH_NODES = 32  # Gauss-Hermite nodes for the moments of sigmoid(f), f ~ N(μ, σ²)
REFERRAL_FRACTIONS = tuple(np.round(np.linspace(0.0, 0.5, 11), 10))  # 0, 0.05, ..., 0.5 referred


# The uncertainty measures a refer flag can rank by, each read off the risk table's columns:
# mi (mutual_info: the weights' part), sd (risk_sd), entropy (entropy: total; a point model's only one),
# band (risk_p95 - risk_p05: width of the 5-95% band).
Measure = Uncertainty


# ---------------------------------------------------------------------------- summaries


@dataclass
class Summary:
    """The predictive of every admission, each field (N,)."""

    mean: np.ndarray  # predictive probability of death
    sd: np.ndarray  # standard deviation of the probability under the weight posterior
    p05: np.ndarray  # 5th percentile of the probability
    p95: np.ndarray  # 95th percentile of the probability
    mutual_info: np.ndarray  # nats, >= 0
    entropy: np.ndarray  # H[mean], nats
    spread: np.ndarray  # bool: the weight posterior moves this admission's logit (False: sd = 0 by construction)

    def __len__(self) -> int:
        return int(self.mean.shape[0])

    def measure(self, measure: Measure | str) -> np.ndarray:
        """The admissions' values of one uncertainty ``measure``, (N,)."""
        m = Measure(measure)
        if m is Measure.MUTUAL_INFORMATION:
            return self.mutual_info
        if m is Measure.SD:
            return self.sd
        if m is Measure.ENTROPY:
            return self.entropy
        return self.p95 - self.p05

    @classmethod
    def from_draws(cls, logits) -> Summary:
        """From D logit draws per admission: (N,), (D, N) or (S, K, N)."""
        x = as_draws(logits)  # (D, N)
        p = sigmoid(x)  # (D, N)
        lo, hi = np.percentile(p, [5.0, 95.0], axis=0)
        spread = (x.max(axis=0) - x.min(axis=0)) > 0.0  # identical draws: no weight uncertainty reaches it
        return cls(mean=predictive(x), sd=np.where(spread, predictive_sd(x), 0.0), p05=np.where(spread, lo, p[0]),
                   p95=np.where(spread, hi, p[0]), mutual_info=np.where(spread, mutual_information(x), 0.0),
                   entropy=predictive_entropy(x), spread=spread)

    @classmethod
    def from_gaussian(cls, mu, var, mean=None, nodes: int = GH_NODES) -> Summary:
        """From a Gaussian logit N(μ, σ²) per admission (μ, σ² (N,)).

        ``mean``: the risk to publish (e.g. the probit predictive sigmoid(μ / sqrt(1 + πσ²/8)), the
        one the model's NLL is computed with); None: E[sigmoid(f)] by quadrature. The standard
        deviation, the mutual information and E[sigmoid(f)] come from ``nodes``-point Gauss-Hermite
        quadrature of the same Gaussian; the percentiles are exact, sigmoid(μ ∓ 1.645σ). An
        admission with σ = 0 has sd = MI = 0 and ``spread`` False.
        """
        mu = np.asarray(mu, dtype=np.float64)
        var = np.asarray(var, dtype=np.float64)
        if mu.ndim != 1 or var.shape != mu.shape:
            raise ValueError(f"from_gaussian: μ and σ² must be (N,) arrays of one shape, got {mu.shape}, {var.shape}")
        if np.any(~np.isfinite(mu)) or np.any(~(var >= 0.0)) or np.any(~np.isfinite(var)):
            i = int(np.flatnonzero(~np.isfinite(mu) | ~(var >= 0.0) | ~np.isfinite(var))[0])
            raise ValueError(f"from_gaussian: admission {i} has μ = {mu[i]!r}, σ² = {var[i]!r} (need finite, σ² >= 0)")
        sigma = np.sqrt(var)
        m1, m2, eh = gaussian_sigmoid_moments(mu, sigma, nodes)
        p = m1 if mean is None else check_probs(mean, mu.shape[0], "mean")
        sd = np.sqrt(np.maximum(m2 - m1 * m1, 0.0))
        h_mean = -(_plogp(m1) + _plogp(1.0 - m1))
        mi = np.maximum(h_mean - eh, 0.0)
        spread = sigma > 0.0
        sd, mi = np.where(spread, sd, 0.0), np.where(spread, mi, 0.0)
        return cls(mean=p, sd=sd, p05=sigmoid(mu - Z95 * sigma), p95=sigmoid(mu + Z95 * sigma), mutual_info=mi,
                   entropy=-(_plogp(p) + _plogp(1.0 - p)), spread=spread)


def gauss_hermite(nodes: int = GH_NODES) -> tuple[np.ndarray, np.ndarray]:
    """Nodes z (n,) and weights w (n,) with Σ w g(z) ≈ E g(Z), Z ~ N(0, 1) (probabilists' Hermite)."""
    if nodes < 1:
        raise ValueError(f"nodes must be >= 1, got {nodes}")
    z, w = np.polynomial.hermite_e.hermegauss(int(nodes))
    return z, w / np.sqrt(2.0 * np.pi)


def gaussian_sigmoid_moments(mu, sigma, nodes: int = GH_NODES) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(E p, E p², E H[p]) for p = sigmoid(f), f ~ N(μ, σ²), each (N,), by Gauss-Hermite quadrature."""
    z, w = gauss_hermite(nodes)
    f = np.asarray(mu, dtype=np.float64)[:, None] + np.asarray(sigma, dtype=np.float64)[:, None] * z  # (N, n)
    p = sigmoid(f)  # (N, n)
    q = sigmoid(-f)
    # H[p] = -p log p - q log q with log p = log_sigmoid(f), log q = log_sigmoid(-f) (exact in the tails)
    h = -(p * log_sigmoid(f) + q * log_sigmoid(-f))
    return p @ w, (p * p) @ w, h @ w


# ---------------------------------------------------------------------------- against the truth


def kl_to_truth(true_risk, p) -> np.ndarray:
    """KL(Bernoulli(t) ‖ Bernoulli(p)) per admission (nats), (N,): the error of a risk against the true risk."""
    t = check_probs(true_risk, name="true_risk")
    q = np.clip(check_probs(p, t.shape[0], "p"), 1e-12, 1.0 - 1e-12)
    return np.maximum(_xlogy_ratio(t, q) + _xlogy_ratio(1.0 - t, 1.0 - q), 0.0)


def _xlogy_ratio(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a·log(a / b) with 0·log 0 = 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(a > 0.0, a * (np.log(a) - np.log(b)), 0.0)


def average_ranks(x) -> np.ndarray:
    """Ranks 1..N of ``x`` with ties given their average rank (as scipy.stats.rankdata 'average')."""
    a = np.asarray(x, dtype=np.float64)
    order = np.argsort(a, kind="stable")
    s = a[order]
    starts = np.r_[0, np.flatnonzero(s[1:] != s[:-1]) + 1]  # first index of each run of equal values
    ends = np.r_[starts[1:], s.size]
    avg = (starts + ends + 1) / 2.0  # mean of the 1-based ranks starts+1 .. ends
    ranks = np.empty(s.size)
    ranks[order] = np.repeat(avg, ends - starts)
    return ranks


def spearman(a, b) -> float:
    """Spearman rank correlation (ties averaged); nan when either side is constant."""
    ra, rb = average_ranks(a), average_ranks(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    den = np.sqrt((ra * ra).sum() * (rb * rb).sum())
    return float((ra * rb).sum() / den) if den > 0 else float("nan")


def kept_error(error, score, fractions=REFERRAL_FRACTIONS) -> np.ndarray:
    """Mean ``error`` of the admissions kept when the round(f·N) highest ``score`` are referred, (F,).

    Ties in ``score`` at the cut are referred in expectation (each tied admission with the same
    probability), so a constant score keeps the overall mean at every fraction.
    """
    e = np.asarray(error, dtype=np.float64)
    u = np.asarray(score, dtype=np.float64)
    n = e.shape[0]
    if u.shape != (n,) or n == 0:
        raise ValueError(f"kept_error: score {u.shape} and error {e.shape} must be the same non-empty (N,)")
    order = np.argsort(-u, kind="stable")  # highest score first
    us, es = u[order], e[order]
    total = es.sum()
    out = []
    for f in fractions:
        m = min(int(round(float(f) * n)), n - 1)  # referred; at least one admission is kept
        if m == 0:
            out.append(total / n)
            continue
        cut = us[m - 1]
        above = us > cut
        tied = us == cut
        n_above, n_tied = int(above.sum()), int(tied.sum())
        removed = es[above].sum() + (m - n_above) * es[tied].sum() / n_tied
        out.append((total - removed) / (n - m))
    return np.array(out)


def referral_gain(error, score, fractions=REFERRAL_FRACTIONS) -> float:
    """(area between random's kept-error curve and ``score``'s) / (area between random's and the oracle's).

    Areas by the trapezoidal rule over ``fractions``; nan when the oracle gains nothing (equal errors).
    """
    f = np.asarray(fractions, dtype=np.float64)
    model, oracle = kept_error(error, score, f), kept_error(error, error, f)
    base = np.full_like(model, float(np.mean(error)))
    den = np.trapezoid(base - oracle, f)
    return float(np.trapezoid(base - model, f) / den) if den > 0 else float("nan")


def uncertainty_vs_truth(summary: Summary, true_risk, fractions=REFERRAL_FRACTIONS) -> dict:
    """JSON-able: each measure's Spearman with the error KL(true ‖ predicted) and its referral gain.

    Keys: ``error`` (its definition), ``mean_error``, ``fractions``, ``random`` and ``oracle`` (kept
    mean error per fraction), ``measures`` {measure: {spearman, referral_gain, kept_error}} and
    ``best`` (the measure of the highest referral gain; ties: the order of ``Measure``).
    """
    t = check_probs(true_risk, len(summary), "true_risk")
    error = kl_to_truth(t, summary.mean)
    f = np.asarray(fractions, dtype=np.float64)
    oracle = kept_error(error, error, f)
    measures = {}
    for m in Measure:
        u = summary.measure(m)
        measures[m.value] = {"spearman": _json_float(spearman(u, error)),
                             "referral_gain": _json_float(referral_gain(error, u, f)),
                             "kept_error": _json_list(kept_error(error, u, f))}
    return {"error": "kl(true || predicted), nats", "mean_error": _json_float(error.mean()), "fractions": _json_list(f),
            "random": _json_list(np.full(f.shape, error.mean())), "oracle": _json_list(oracle), "measures": measures,
            "best": best_measure(measures)}


def best_measure(measures: dict) -> str | None:
    """The measure with the highest finite referral gain in ``uncertainty_vs_truth``'s ``measures``."""
    scored = [(v["referral_gain"], -i, k) for i, (k, v) in enumerate(measures.items())
              if v.get("referral_gain") is not None]
    return max(scored)[2] if scored else None
