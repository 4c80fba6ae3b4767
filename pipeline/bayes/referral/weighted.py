"""The importance-weighted refer rule: re-certify the miss-rate promise for a new population without its outcomes,
valid under covariate shift only.

**Assumption.** The new admissions differ from the calibration admissions in their features x alone: P(death | x)
is the same in both (covariate shift), and the likelihood ratio w(x) = p_new(x) / p_calibration(x) is known (from
a domain classifier fitted on admissions apart from the calibration set, ``bayes.shift.fit_domain``; Tibshirani et
al. 2019 carry the same weights to conformal prediction). Then for a cut c, with M_c(x) = [kept at c and not
flagged high risk] (a function of x) and expectations over the calibration population's deaths,

    R_new(c) = P_new(miss at c | death) = E[w M_c | death] / E[w | death],

since under covariate shift the new deaths' features have density proportional to w(x) times the calibration
deaths'. **The bound.** With weights capped at W (``max_weight``; w~ = min(w, W), rescaled so that the calibration
admissions' mean weight is 1), H0_c: R_new(c) > alpha is E[w~ M_c] > alpha E[w~]. Divide by W: V_j = w~_j M_j / W
and w~_j / W lie in [0, 1], i.i.d. over the D calibration deaths. So

1. a lower confidence bound L of E[w~ / W | death] at delta / 2 (Hoeffding-Bentkus, ``bounds.hb_p_value`` inverted
   on 1 - w~ / W), and
2. for each cut, the Hoeffding-Bentkus p-value of H: E[V] > alpha L, tested by fixed-sequence testing at delta / 2
   over the cuts (as ``rule`` does, most referrals first).

On the event that L holds (probability >= 1 - delta / 2), H0_c implies E[V] > alpha E[w~ / W] >= alpha L, and a
p-value of H: E[V] > a is larger at a smaller a, so a false rejection at alpha L is one at the true level: the
family-wise error is at most delta / 2 + delta / 2 = delta. With every weight 1 and W = 1 it is the unweighted
rule, a little weaker (delta / 2, and the Bentkus bound instead of the exact binomial tail).

**What it costs.** With no miss at all the p-value is (1 - alpha L)^D, so a certificate needs about
log(2 / delta) / (alpha mean(w~) / W) deaths: W / mean(w~) times what the unweighted rule needs. The cap is the
price of the guarantee: a death of weight W that was missed is what the bound must allow for. ``needed`` is the
fewest calibration deaths that could certify alpha at delta with no miss at all at these weights' mean (the
smallest D with (1 - alpha L(D))^D <= delta / 2, L(D) the lower bound at this mean weight); fewer refuse (or, not
strict, refer everyone and say so), as ``rule`` does.

**Honesty.** The weights are an estimate and the cap clips: the promise is exact only for the population the
capped weights describe, and only if P(death | x) did not change. A change in the outcome's dependence on x
(a new treatment, a new coding of the features the model reads) is not covariate shift, and no weighting can see
it: re-certification on new labelled admissions (``recertify``) or the outcome monitor (``bayes.monitor``) can.
Only the miss rate, one group.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq

from pipeline.bayes.referral.bounds import cut_grid, hb_p_value
from pipeline.bayes.referral.rule import GroupRule, Reference, ReferRule, _check_inputs, fixed_sequence
from pipeline.bayes.referral.settings import CalibrationTooSmall, ReferralError, ReferSettings, Risk, Status
from pipeline.bayes.referral.text import DEATHS, Outcome, percent

MAX_WEIGHT = 5.0  # the cap W on the weights (the calibration admissions' mean weight is 1)


@dataclass
class WeightedRule:
    """A refer rule certified for a new population by importance weights, with what the weights were."""

    rule: ReferRule  # the rule (its ``overall.empirical_risk``: the weighted calibration miss rate)
    max_weight: float  # the cap W
    clipped: float  # share of the calibration admissions whose weight was capped
    mean_weight_deaths: float  # mean capped weight of the calibration deaths
    lower_mean: float  # L: the lower confidence bound of E[w~ / W | death] (delta / 2)
    ess_deaths: float  # effective number of calibration deaths, (sum w)^2 / sum w^2

    def refer(self, measure) -> np.ndarray:
        return self.rule.refer(measure)

    def to_dict(self) -> dict:
        return {"rule": self.rule.to_dict(), "max_weight": self.max_weight, "clipped": self.clipped,
                "mean_weight_deaths": self.mean_weight_deaths, "lower_mean": self.lower_mean,
                "ess_deaths": self.ess_deaths, "sentence": self.sentence()}

    @classmethod
    def from_dict(cls, d: dict) -> WeightedRule:
        return cls(ReferRule.from_dict(d["rule"]), float(d["max_weight"]), float(d["clipped"]),
                   float(d["mean_weight_deaths"]), float(d["lower_mean"]), float(d["ess_deaths"]))

    def sentence(self, words: Outcome = DEATHS) -> str:
        """The rule in one plain sentence, the outcome in ``words``."""
        s, g, many = self.rule.settings, self.rule.overall, words.many
        conf = percent(1.0 - s.delta)
        assumes = ("it assumes these patients differ from the calibration ones only in their features (covariate "
                   "shift), by importance weights capped at " f"{self.max_weight:g}")
        if g.status is Status.CERTIFIED:
            return (f"refer {percent(g.referral_rate)} of admissions: on the others the model misses at most "
                    f"{percent(s.alpha)} of {many}, with {conf} confidence (re-weighted calibration: {g.n:,} "
                    f"admissions, {g.deaths:,} {many}, worth {self.ess_deaths:,.0f}); {assumes}")
        if g.status is Status.TOO_SMALL:
            return (f"refer every admission: re-weighted for these patients, promising that the model misses at most "
                    f"{percent(s.alpha)} of {many} with {conf} confidence needs at least {g.needed:,} calibration "
                    f"{many} even with no error; the calibration data hold {g.deaths:,}")
        return (f"refer every admission: re-weighted for these patients, no refer threshold could be certified to keep "
                f"the {many} missed at most {percent(s.alpha)} of {many}, with {conf} confidence ({g.n:,} "
                f"calibration admissions, {g.deaths:,} {many})")


def mean_lower_bound(x: np.ndarray, delta: float) -> float:
    """A lower confidence bound (level ``delta``) of the mean of i.i.d. ``x`` in [0, 1]: 1 - the Hoeffding-Bentkus
    upper bound of the mean of 1 - x (0 when nothing can be said)."""
    n, y = x.shape[0], float(np.mean(1.0 - x))
    if n == 0:
        return 0.0
    f = lambda a: float(hb_p_value(y, n, a)) - delta  # noqa: E731  (decreasing in a)
    lo, hi = min(y, 1.0 - 1e-12), 1.0 - 1e-12
    if f(hi) > 0.0:
        return 0.0
    if f(lo) <= 0.0:
        return 1.0 - lo
    return 1.0 - brentq(f, lo, hi, xtol=1e-12)


def needed_deaths(mean_w: float, alpha: float, delta: float, have: int) -> int:
    """The fewest deaths at mean capped weight / W ``mean_w`` whose zero misses certify alpha at delta (docstring)."""
    def ok(d: int) -> bool:
        lower = mean_lower_bound(np.full(d, mean_w), delta / 2.0)
        return lower > 0.0 and d * np.log1p(-alpha * lower) <= np.log(delta / 2.0)

    if mean_w <= 0.0:
        return 10 ** 9
    hi = max(have, 1)
    while not ok(hi):
        hi *= 2
        if hi > 10 ** 9:
            return 10 ** 9
    lo = 1
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def fit_weighted_refer_rule(measure, risk, labels, weights, decision_threshold, settings: ReferSettings | None = None,
                            ordering: str = "risk", reference: Reference | None = None,
                            max_weight: float = MAX_WEIGHT, strict: bool = True) -> WeightedRule:
    """The weighted LTT rule (module docstring) on calibration admissions ``measure``, ``risk``, ``labels`` and their
    likelihood ratios ``weights`` (N,) towards the new population; ``reference``: label-free admissions of the new
    population for the candidate cuts and the referral rate (default: the calibration admissions, re-weighted)."""
    s = settings or ReferSettings()
    if s.risk is not Risk.MISS:
        raise ReferralError("the importance-weighted rule bounds the miss rate only (--risk miss_rate)")
    t = float(getattr(decision_threshold, "threshold", decision_threshold))
    u, r, y = _check_inputs(measure, risk, labels)
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != y.shape or not np.all(np.isfinite(w)) or np.any(w < 0.0):
        bad = np.flatnonzero(~np.isfinite(w) | (w < 0.0)) if w.shape == y.shape else np.array([0])
        raise ReferralError(f"weights: need ({y.shape[0]},) finite non-negative likelihood ratios "
                            f"(shape {w.shape}, row {int(bad[0]) if bad.size else '?'})")
    if not max_weight >= 1.0:
        raise ReferralError(f"max_weight must be at least 1 (the mean weight), got {max_weight!r}")
    if w.mean() <= 0.0:
        raise ReferralError("weights: all zero")
    w = w / w.mean()
    clipped = float((w > max_weight).mean())
    w = np.minimum(w, max_weight)
    dead = y == 1.0
    deaths, n = int(dead.sum()), int(y.shape[0])
    wd = w[dead] / max_weight
    mean_w = float(wd.mean()) if deaths else 0.0
    ess = float(w[dead].sum() ** 2 / (w[dead] ** 2).sum()) if deaths and w[dead].sum() > 0 else 0.0
    needed = needed_deaths(mean_w, s.alpha, s.delta, deaths)
    lower = mean_lower_bound(wd, s.delta / 2.0) if deaths else 0.0
    ref_u = u if reference is None else np.asarray(reference.measure, dtype=np.float64)

    def result(cut: float, status: Status, p: float | None, risk_value: float) -> WeightedRule:
        rate = float((ref_u > cut).mean()) if reference is not None else float((w * (u > cut)).sum() / w.sum())
        g = GroupRule(cut, status, n, deaths, rate if np.isfinite(cut) else 1.0, risk_value, p, needed)
        return WeightedRule(ReferRule(s, ordering, t, g), float(max_weight), clipped, mean_w * max_weight, lower, ess)

    if deaths < needed:
        if strict:
            exc = CalibrationTooSmall(
                f"delta {s.delta:g} at alpha {s.alpha:g}, re-weighted (weights capped at {max_weight:g}, mean "
                f"{mean_w * max_weight:.2f} over the deaths), needs at least {needed:,} calibration deaths even with "
                f"no error; the calibration data hold {deaths:,} (of {n:,} admissions)", needed, deaths)
            exc.config, exc.fields = type(s), ("delta", "alpha")
            raise exc
        return result(-np.inf, Status.TOO_SMALL, None, 0.0)
    cuts = cut_grid(ref_u, s.n_cuts)
    missable = (r < t)[dead]
    ud, order = u[dead], np.argsort(u[dead], kind="stable")
    contrib = np.where(missable, wd, 0.0)[order]  # w~ M / W of each death, by its measure
    cum = np.concatenate([[0.0], np.cumsum(contrib)])
    kept = np.searchsorted(ud[order], cuts, side="right")  # deaths kept at each cut
    mean_v = cum[kept] / deaths
    p = hb_p_value(mean_v, np.full(cuts.shape, deaths), s.alpha * lower) if lower > 0.0 else np.ones(cuts.shape)
    j = fixed_sequence(p, 0, s.delta / 2.0)
    if j is None:
        return result(-np.inf, Status.REFER_ALL, None, 0.0)
    weighted_miss = float(cum[kept[j]] * max_weight / w[dead].sum()) if w[dead].sum() > 0 else 0.0
    return result(float(cuts[j]), Status.CERTIFIED, float(p[j]), weighted_miss)
