"""The refer rule with a finite-sample guarantee: refer as few admissions as possible so that, with
probability at least 1 - delta over the calibration data, the risk of the kept ones is at most alpha.

An admission is referred when its ordering measure u is above the cut c (kept when u <= c). The risks
(``Risk``), for the population the calibration data are drawn from:

- miss rate: P(kept and risk < t | death), t the decision threshold: the deaths the team would not see
  (neither referred nor flagged high risk) over all deaths;
- Brier: E[(risk - y)^2 | kept], the Brier score of the kept admissions.

**Learn-then-Test (LTT), by fixed-sequence testing** (Angelopoulos, Bates, Candès, Jordan & Lei 2021).
Each candidate cut c_j (increasing: from most referrals to fewest) is a null hypothesis R(c_j) > alpha with
a valid p-value (``bounds``: the exact binomial tail for the miss rate, Hoeffding-Bentkus for the Brier
score). The cuts are tested in that fixed order at level delta until the first that fails; the rule takes
the last cut rejected (the fewest referrals certified). Family-wise error control of fixed-sequence testing
needs no correction for the number of cuts, so the grid can be fine (``N_CUTS``), and needs no monotone risk
for validity (the miss rate is monotone, so the order costs it no power). If the first cut fails, every
admission is referred (``Status.REFER_ALL``): referring everyone keeps nobody and misses nothing.

Why LTT and not conformal risk control: conformal risk control bounds the *expected* risk over the draw of
the calibration data (E[R] <= alpha), while the promise asked is a high-probability one (R <= alpha with
probability >= 1 - delta) and must say how many deaths it needs; LTT gives exactly that, for a miss rate
whose denominator is the deaths as well as for the bounded Brier loss.

**The Brier score's start.** Certifying a cut that keeps few admissions is hopeless (the p-value of n
losses is at least (1 - alpha)^n), so a sequence started at the most referrals would stop at once. Its
tests start instead at the cut most likely to be certified by the model's own account: the one of the
lowest predicted p-value, computed on the reference admissions from the kept Brier score a calibrated
model expects, mean r(1 - r), and the kept count the calibration set would have in expectation; from
there they go on towards fewer referrals. Cuts before the start refer more than it does and are never
wanted. The start uses no calibration label, so the order is fixed before the test and the guarantee holds
whatever the start (a poor start, e.g. from a miscalibrated model, only costs power).

**The grid and the reference.** The cuts are quantiles of the measure on reference admissions
(``Reference``: e.g. the validation split, or the census to be scored): the argument above needs cuts
fixed before the calibration labels are seen. Without a reference the calibration set's own measures and
risks are used: they carry no label, but then the grid depends on the calibration admissions' features,
a departure from the argument that ``check.check_guarantee`` can measure.

**Per group (Mondrian).** With ``groups``, each group gets its own cut from its own calibration admissions
at the same alpha and delta, so the promise holds within every group (each with probability 1 - delta;
``simultaneous`` uses delta / G so that all hold at once); each group's referral rate is reported.

Why by hand: MAPIE's ``BinaryClassificationController`` runs LTT for a binary classifier's probability
threshold and is this module's test oracle where the setups coincide (the miss rate of one group); it
cannot take a continuous bounded loss (its binary p-value is used for every risk), per-group rules, a
start for the Brier score, the size a setting would need, or arrays without a fitted estimator.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.bayes.metrics import check_labels, check_probs
from pipeline.bayes.referral.bounds import binomial_p_value, cut_grid, hb_p_value, required_size
from pipeline.bayes.referral.measures import Ordering
from pipeline.bayes.referral.settings import (
    CalibrationTooSmall,
    ReferralError,
    ReferSettings,
    Risk,
    RuleMethod,
    Status,
)
from pipeline.bayes.referral.text import DEATHS, Outcome, sentence
from pipeline.core.errors import ConfigError


@dataclass
class Reference:
    """Label-free admissions apart from the calibration set, for the candidate cuts (and the Brier start)."""

    measure: np.ndarray  # (M,) their ordering measure
    risk: np.ndarray  # (M,) their (calibrated) risks
    groups: np.ndarray | None = None  # (M,) their groups, for per-group rules


@dataclass
class GroupRule:
    """The cut of one group (or of all admissions) and what it does on the calibration data."""

    cut: float  # refer iff measure > cut (-inf: every admission, +inf: none)
    status: Status  # certified, refer_all, too_small or uncertified
    n: int  # calibration admissions
    deaths: int  # calibration deaths
    referral_rate: float  # share of the calibration admissions referred
    empirical_risk: float  # the risk on the calibration admissions (nan: Brier with none kept)
    p_value: float | None  # LTT: the p-value of the chosen cut (None: no cut certified, or no LTT)
    needed: int  # the fewest deaths (miss rate) or kept admissions (Brier) that can certify alpha at delta

    def to_dict(self) -> dict:
        f = (lambda v: None if v is None or not np.isfinite(v) else float(v))  # noqa: E731
        cut = "-inf" if self.cut == -np.inf else "inf" if self.cut == np.inf else f(self.cut)
        return {"cut": cut, "status": self.status.value, "n": self.n, "deaths": self.deaths,
                "referral_rate": f(self.referral_rate), "empirical_risk": f(self.empirical_risk),
                "p_value": f(self.p_value), "needed": self.needed}

    @classmethod
    def from_dict(cls, d: dict) -> GroupRule:
        nan = float("nan")
        cut = d["cut"]
        return cls(float(cut) if cut is not None else nan, Status(d["status"]), int(d["n"]), int(d["deaths"]),
                   nan if d["referral_rate"] is None else float(d["referral_rate"]),
                   nan if d["empirical_risk"] is None else float(d["empirical_risk"]), d["p_value"], int(d["needed"]))


@dataclass
class ReferRule:
    """A fitted refer rule: refer iff the ordering measure is above the (group's) cut."""

    settings: ReferSettings  # alpha, delta, the risk, the method
    ordering: str  # what the measure is (an ``Ordering`` value)
    decision_threshold: float  # high risk: risk >= this (the miss rate counts kept deaths below it)
    overall: GroupRule  # all calibration admissions (with groups: their pooled numbers, cut nan)
    groups: dict[str, GroupRule] | None = None  # per-group rules, keyed by the group's value as text

    def refer(self, measure, groups=None) -> np.ndarray:
        """Referred (N,) bool: measure > cut (of the admission's group; a group never calibrated: referred)."""
        u = np.asarray(measure, dtype=np.float64)
        if self.groups is None:
            return u > self.overall.cut
        if groups is None:
            raise ReferralError(f"this refer rule is per {self.settings.group_column or 'group'}: give each "
                                "admission's group")
        g = np.asarray(groups).astype(str)
        if g.shape != u.shape:
            raise ReferralError(f"groups {g.shape} and measure {u.shape} must have one shape")
        keys, inv = np.unique(g, return_inverse=True)
        cut_of = np.array([self.groups[k].cut if k in self.groups else -np.inf for k in keys.tolist()])
        return u > cut_of[inv].reshape(u.shape)

    def to_dict(self) -> dict:
        return {"settings": self.settings.to_dict(), "ordering": self.ordering,
                "decision_threshold": float(self.decision_threshold), "overall": self.overall.to_dict(),
                "groups": None if self.groups is None else {k: v.to_dict() for k, v in self.groups.items()}}

    @classmethod
    def from_dict(cls, d: dict) -> ReferRule:
        groups = None if d.get("groups") is None else {k: GroupRule.from_dict(v) for k, v in d["groups"].items()}
        return cls(ReferSettings.from_dict(d["settings"]), d["ordering"], float(d["decision_threshold"]),
                   GroupRule.from_dict(d["overall"]), groups)

    def sentence(self, words: Outcome = DEATHS) -> str:
        """The rule in one plain sentence (``text.sentence``; the outcome in ``words``)."""
        return sentence(self, words)


# ---------------------------------------------------------------------------- the risks along the grid


def risk_curve(u: np.ndarray, r: np.ndarray, y: np.ndarray, threshold: float, cuts: np.ndarray,
               risk: Risk) -> tuple[np.ndarray, np.ndarray]:
    """(loss sum, units) of the kept admissions at every cut: misses and deaths, or Brier sum and kept count."""
    if risk is Risk.MISS:
        missable = np.sort(u[(y == 1.0) & (r < threshold)])  # deaths that would be missed if kept
        return np.searchsorted(missable, cuts, side="right").astype(np.float64), np.full(cuts.shape, y.sum())
    order = np.argsort(u, kind="stable")
    cum = np.concatenate([[0.0], np.cumsum(((r - y) ** 2)[order])])
    kept = np.searchsorted(u[order], cuts, side="right")
    return cum[kept], kept.astype(np.float64)


def p_values(loss: np.ndarray, units: np.ndarray, alpha: float, risk: Risk) -> np.ndarray:
    """The p-value of R(c) > alpha at every cut (``bounds``)."""
    if risk is Risk.MISS:
        return binomial_p_value(loss, int(units[0]), alpha)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(units > 0, loss / np.maximum(units, 1.0), 0.0)
    return hb_p_value(mean, units, alpha)


def brier_start(cuts: np.ndarray, ref_u: np.ndarray, ref_r: np.ndarray, n: int, alpha: float) -> int:
    """The cut of the lowest p-value the reference's risks predict for the Brier null (the first of ties)."""
    order = np.argsort(ref_u, kind="stable")
    cum = np.concatenate([[0.0], np.cumsum((ref_r * (1.0 - ref_r))[order])])
    kept = np.searchsorted(ref_u[order], cuts, side="right")
    with np.errstate(invalid="ignore", divide="ignore"):
        predicted = np.where(kept > 0, cum[kept] / np.maximum(kept, 1), 0.0)
    expected_n = np.floor(n * kept / ref_u.shape[0])
    return int(np.argmin(hb_p_value(predicted, expected_n, alpha)))


def fixed_sequence(p: np.ndarray, start: int, delta: float) -> int | None:
    """The last index of the run of p-values <= delta from ``start`` on (None: the first fails)."""
    fails = np.flatnonzero(p[start:] > delta)
    last = start + (int(fails[0]) if fails.size else p.shape[0] - start) - 1
    return last if last >= start else None


def _empirical(loss: float, units: float, risk: Risk) -> float:
    if units == 0:
        return 0.0 if risk is Risk.MISS else float("nan")
    return float(loss / units)


def fit_group(u: np.ndarray, r: np.ndarray, y: np.ndarray, threshold: float, s: ReferSettings, delta: float,
              ref_u: np.ndarray, ref_r: np.ndarray, strict: bool, where: str = "", words: Outcome = DEATHS
              ) -> GroupRule:
    """The ``GroupRule`` of one set of calibration admissions (see the module docstring)."""
    n, deaths = int(u.shape[0]), int(y.sum())
    needed = required_size(s.alpha, delta)
    if s.method is RuleMethod.FRACTION:
        cut = float(np.quantile(u, 1.0 - s.fraction)) if s.fraction > 0 else float(u.max())
        loss, units = risk_curve(u, r, y, threshold, np.array([cut]), s.risk)
        return GroupRule(cut, Status.UNCERTIFIED, n, deaths, float((u > cut).mean()),
                         _empirical(loss[0], units[0], s.risk), None, needed)
    cuts = cut_grid(ref_u, s.n_cuts)
    loss, units = risk_curve(u, r, y, threshold, cuts, s.risk)
    have = deaths if s.risk is Risk.MISS else n
    if s.method is RuleMethod.PLUGIN:
        with np.errstate(invalid="ignore", divide="ignore"):
            emp = np.where(units > 0, loss / np.maximum(units, 1.0), 0.0)
        ok = np.flatnonzero(emp <= s.alpha)
        j = int(ok[-1]) if ok.size else None
        status = Status.UNCERTIFIED
        p_chosen = None
    elif have < needed:
        unit = words.many if s.risk is Risk.MISS else "admissions"
        if strict:
            exc = CalibrationTooSmall(
                f"delta {s.delta:g} at alpha {s.alpha:g} needs at least {needed:,} "
                f"calibration {unit}{where} even with no error; the calibration data hold {have:,} "
                f"(of {n:,} admissions)", needed, have)
            exc.config, exc.fields = type(s), ("delta", "alpha")  # the command line says them as typed
            raise exc
        return GroupRule(-np.inf, Status.TOO_SMALL, n, deaths, 1.0, _empirical(0.0, 0.0, s.risk), None, needed)
    else:
        p = p_values(loss, units, s.alpha, s.risk)
        start = 0 if s.risk is Risk.MISS else brier_start(cuts, ref_u, ref_r, n, s.alpha)
        j = fixed_sequence(p, start, delta)
        status = Status.REFER_ALL if j is None else Status.CERTIFIED
        p_chosen = None if j is None else float(p[j])
    if j is None:
        return GroupRule(-np.inf, Status.REFER_ALL if s.method is RuleMethod.LTT else status, n, deaths, 1.0,
                         _empirical(0.0, 0.0, s.risk), None, needed)
    cut = float(cuts[j])
    return GroupRule(cut, status, n, deaths, float((u > cut).mean()), _empirical(loss[j], units[j], s.risk), p_chosen,
                     needed)


# ---------------------------------------------------------------------------- the rule


def _check_inputs(measure, risk, labels) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    y = check_labels(labels)
    r = check_probs(risk, y.shape[0], "risk")
    u = np.asarray(measure, dtype=np.float64)
    if u.shape != y.shape:
        raise ReferralError(f"measure: {u.shape} for {y.shape[0]} admissions")
    bad = np.flatnonzero(~np.isfinite(u))
    if bad.size:
        raise ReferralError(f"measure[{int(bad[0])}] = {float(u[bad[0]])!r}: the ordering measure must be finite "
                            f"({bad.size} bad rows)")
    return u, r, y


def fit_refer_rule(measure, risk, labels, decision_threshold, settings: ReferSettings | None = None,
                   ordering: Ordering | str = Ordering.RISK, groups=None, reference: Reference | None = None,
                   strict: bool = True, words: Outcome = DEATHS) -> ReferRule:
    """Fit the refer rule on calibration admissions: ``measure``, ``risk`` (the published, calibrated risk) and
    ``labels`` (N,); ``decision_threshold`` a float or a ``DecisionThreshold``.

    ``groups`` (N,): per-group rules (every group of ``reference.groups`` must have calibration admissions).
    ``strict``: a calibration set too small for the asked alpha and delta raises ``CalibrationTooSmall``
    (naming the size needed, the outcome in ``words``); otherwise the rule says so (``Status.TOO_SMALL``) and refers
    everyone.
    """
    s = settings or ReferSettings()
    t = float(getattr(decision_threshold, "threshold", decision_threshold))
    if not 0.0 <= t <= 1.0:
        raise ConfigError(f"--decision-threshold must lie in [0, 1], got {t}")
    u, r, y = _check_inputs(measure, risk, labels)
    ref_u = u if reference is None else np.asarray(reference.measure, dtype=np.float64)
    ref_r = r if reference is None else check_probs(reference.risk, ref_u.shape[0], "reference risk")
    order = Ordering(ordering).value
    if groups is None:
        rule = fit_group(u, r, y, t, s, s.delta, ref_u, ref_r, strict, words=words)
        return ReferRule(s, order, t, rule)
    g = np.asarray(groups).astype(str)
    if g.shape != y.shape:
        raise ReferralError(f"groups: {g.shape} for {y.shape[0]} admissions")
    names = sorted(set(g.tolist()))
    ref_g = None if reference is None or reference.groups is None else np.asarray(reference.groups).astype(str)
    column = s.group_column or "group"
    if ref_g is not None:
        empty = sorted(set(ref_g.tolist()) - set(names))
        if empty:
            raise ConfigError(f"{column} {empty[0]!r} has no calibration admissions ({len(empty)} such group(s)); "
                              "a per-group rule needs calibration data in every group")
    delta = s.delta / len(names) if s.simultaneous else s.delta
    rules = {}
    for name in names:
        cal = g == name
        ref = ref_g == name if ref_g is not None else (cal if reference is None else np.ones(ref_u.shape, bool))
        rules[name] = fit_group(u[cal], r[cal], y[cal], t, s, delta, ref_u[ref], ref_r[ref], strict,
                                f" in {column} {name!r}", words)
    referred = np.zeros(u.shape, dtype=bool)
    for name, rule in rules.items():
        referred[g == name] = u[g == name] > rule.cut
    loss, units = risk_curve(np.where(referred, 1.0, 0.0), r, y, t, np.array([0.5]), s.risk)
    statuses = {rule.status for rule in rules.values()}
    status = Status.CERTIFIED if statuses == {Status.CERTIFIED} else sorted(statuses - {Status.CERTIFIED})[0]
    overall = GroupRule(float("nan"), status, int(y.shape[0]), int(y.sum()), float(referred.mean()),
                        _empirical(loss[0], units[0], s.risk), None, required_size(s.alpha, delta))
    return ReferRule(s, order, t, overall, rules)
