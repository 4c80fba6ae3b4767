"""The refer rule's guarantee checked against a known true risk.

Given a large held-out pool whose true risk q_i is known (a synthetic world), the model's (calibrated) risks
r_i, its ordering measure u_i, the decision threshold t and a calibration size n, repeat R times: draw n
admissions of the pool as the calibration set (without replacement), draw their outcomes y_i ~ Bernoulli(q_i),
fit the rule on them, and compute the risk of the admissions the rule keeps among the rest of the pool
*from the true risk*, which is the population quantity the guarantee bounds:

- miss rate: sum_i q_i [kept_i and r_i < t] / sum_i q_i (expected missed deaths over expected deaths);
- Brier: sum_{i kept} ((r_i - q_i)^2 + q_i (1 - q_i)) / #kept, the expected (r - y)^2 of the kept
  (0 when none is kept: nothing kept, nothing wrong).

The share of repeats whose risk exceeds alpha estimates the rule's failure probability, which LTT bounds by
delta; its Monte Carlo standard error is sqrt(s (1 - s) / R). With groups the same is done within every
group (the risk of a group's kept among that group's rest). The reference of the candidate cuts is the pool
itself (label-free and fixed across repeats) unless ``reference="calibration"`` asks for the calibration
set's own measures, whose effect this check measures.

``evaluate`` says what the kept admissions' risk is computed over. ``"rest"`` (the default, as above): the pool
less the calibration set, a finite sample of its own; when the calibration set is a large share of the pool the
two are anti-correlated (an admission drawn into one is missing from the other), so the rest's risk can stray
from the population's further than a new sample's would and the share above alpha overstate the failure probability
(docs/experiments/2026-12-04-referral-orderings.md measures both ways).
``"pool"``: the calibration set drawn *with* replacement and the risk computed over the whole pool, which is then
exactly the population the calibration admissions are drawn from (i.i.d.), the setting the guarantee is stated for.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.bayes.metrics import check_probs
from pipeline.bayes.referral.rule import Reference, fit_refer_rule
from pipeline.bayes.referral.settings import ReferralError, ReferSettings, Risk, Status

REPEATS = 200  # calibration sets drawn
EVALUATIONS = ("rest", "pool")  # what the kept risk is computed over (module docstring)


@dataclass
class Share:
    """How often the kept admissions' true risk exceeded alpha, over the repeats."""

    above: float  # share of repeats whose kept risk (from the true risk) is > alpha
    se: float  # its Monte Carlo standard error sqrt(above (1 - above) / repeats)
    mean_risk: float  # mean kept risk over the repeats
    mean_referral: float  # mean share of the rest referred
    refer_all: int  # repeats in which the rule referred everyone (no cut certified, or too small)
    n_repeats: int  # repeats

    def holds(self, delta: float, z: float = 2.0) -> bool:
        """Whether ``above`` is at most delta within ``z`` standard errors (the error taken as at least 1/R)."""
        return self.above <= delta + z * max(self.se, 1.0 / self.n_repeats)


@dataclass
class GuaranteeCheck:
    """The share of repeats above alpha, overall and per group."""

    settings: ReferSettings  # alpha, delta, the risk, the method
    n_calibration: int  # admissions per calibration set
    repeats: int  # calibration sets drawn
    overall: Share  # over the whole rest of the pool
    groups: dict[str, Share] | None  # per group (per-group rules), else None


def true_kept_risk(q: np.ndarray, r: np.ndarray, kept: np.ndarray, threshold: float, risk: Risk) -> float:
    """The kept admissions' risk computed from the true risk ``q`` (see the module docstring)."""
    if risk is Risk.MISS:
        total = q.sum()
        return float((q * (kept & (r < threshold))).sum() / total) if total > 0 else 0.0
    n = int(kept.sum())
    if n == 0:
        return 0.0
    return float((((r - q) ** 2 + q * (1.0 - q))[kept]).sum() / n)


def _share(values: list[float], referral: list[float], refer_all: int, alpha: float) -> Share:
    v = np.asarray(values)
    above = float((v > alpha).mean())
    return Share(above, float(np.sqrt(above * (1.0 - above) / v.size)), float(v.mean()), float(np.mean(referral)),
                 refer_all, v.size)


def check_guarantee(true_risk, risk, measure, decision_threshold: float, n_calibration: int,
                    settings: ReferSettings | None = None, groups=None, repeats: int = REPEATS, seed: int = 0,
                    reference: str = "pool", evaluate: str = "rest") -> GuaranteeCheck:
    """Repeat draw-calibrate-fit ``repeats`` times on the pool (true_risk, risk, measure (M,)); see the module."""
    s = settings or ReferSettings()
    q = check_probs(true_risk, name="true_risk")
    r = check_probs(risk, q.shape[0], "risk")
    u = np.asarray(measure, dtype=np.float64)
    m = q.shape[0]
    if u.shape != q.shape or not 0 < int(n_calibration) < m:
        raise ReferralError(f"check_guarantee: measure {u.shape} must match the pool ({m}) and 0 < n_calibration "
                            f"({n_calibration}) < {m}")
    if reference not in ("pool", "calibration"):
        raise ReferralError(f"check_guarantee: reference must be 'pool' or 'calibration', got {reference!r}")
    if evaluate not in EVALUATIONS:
        raise ReferralError(f"check_guarantee: evaluate must be 'rest' or 'pool', got {evaluate!r}")
    g = None if groups is None else np.asarray(groups).astype(str)
    ref = Reference(u, r, g) if reference == "pool" else None
    rng = np.random.default_rng(seed)
    names = [] if g is None else sorted(set(g.tolist()))
    values: dict[str | None, list[float]] = {k: [] for k in [None, *names]}
    referral: dict[str | None, list[float]] = {k: [] for k in [None, *names]}
    refer_all = dict.fromkeys([None, *names], 0)
    t = float(decision_threshold)
    for _ in range(int(repeats)):
        if evaluate == "rest":
            cal = np.zeros(m, dtype=bool)
            cal[rng.choice(m, size=int(n_calibration), replace=False)] = True
            rest = ~cal
        else:  # indices drawn with replacement (i.i.d. from the pool); the risk over the whole pool
            cal = rng.choice(m, size=int(n_calibration), replace=True)
            rest = np.ones(m, dtype=bool)
        y = (rng.random(int(n_calibration)) < q[cal]).astype(np.float64)
        rule = fit_refer_rule(u[cal], r[cal], y, t, s, groups=None if g is None else g[cal], reference=ref,
                              strict=False)
        referred = rule.refer(u[rest], None if g is None else g[rest])
        kept = ~referred
        values[None].append(true_kept_risk(q[rest], r[rest], kept, t, s.risk))
        referral[None].append(float(referred.mean()))
        refer_all[None] += int(bool(referred.all()))
        for name in names:
            inside = g[rest] == name
            values[name].append(true_kept_risk(q[rest][inside], r[rest][inside], kept[inside], t, s.risk))
            referral[name].append(float(referred[inside].mean()))
            refer_all[name] += int(rule.groups[name].status in (Status.REFER_ALL, Status.TOO_SMALL))
    per_group = {k: _share(values[k], referral[k], refer_all[k], s.alpha) for k in names} if names else None
    return GuaranteeCheck(s, int(n_calibration), int(repeats), _share(values[None], referral[None], refer_all[None],
                                                                      s.alpha), per_group)
