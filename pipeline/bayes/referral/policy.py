"""What a run records to turn its risks into decisions: a recalibration map, a decision threshold, and a refer
rule with a finite-sample guarantee (``Policy``), fitted on validation admissions split in two.

**Two halves of validation** (the caller splits them, ``data.features.calibration_mask``): the *selection* half
chose the checkpoint (early stopping) and the refer measure, and sets the decision threshold and the refer
rule's candidate cuts (label-free); the *calibration* half is kept apart from all of that and fits the
recalibration map (its method chosen by cross-fitted NLL, the simplest within one standard error of the
lowest: ``bayes.calibration.select_method``) and the refer rule (Learn-then-Test, ``rule.fit_refer_rule``).
Why so: a map fitted on the admissions that chose the checkpoint would be fitted to the checkpoint's own
luck, and the rule's guarantee is about admissions exchangeable with the calibration half.

**The decision threshold** is chosen on the selection half in calibrated units (the sensitivity rule: the
highest calibrated risk at which the selection half's sensitivity reaches the level asked; or fixed). With a
strictly increasing map (none, temperature, Platt) "calibrated risk >= t" is "raw risk >= t_raw" with t_raw
fixed by the selection half alone, so the miss-rate rule's flags on the calibration half use no label of it
and its guarantee is exact; with isotonic or Venn-Abers maps (flat steps) the calibration half also fitted
the map the flags come through, so the guarantee is approximate (the Brier score uses cross-fitted risks).

**Orderings** (what the refer flag ranks by, ``Ordering``): the calibrated risk, its entropy, the posterior's
mutual information, sd and 5-95% band (of the draws passed through the map), *decision uncertainty* (the
share of the posterior across the decision threshold: of the draws, or of a Gaussian logit in closed form),
and the Venn-Abers interval's counterpart and width (any model, a point model included). ``auto`` is the
calibrated risk for every model: by the rule written before its results
(docs/experiments/2026-12-04-referral-orderings.md), decision uncertainty, the former default for a model whose
posterior moves its risks, kept 21 to 32 percentage points fewer admissions at the same promise (these
posteriors leave most admissions' draws on one side of the threshold), and so did every other posterior measure.

``Policy.apply`` gives a census's columns; ``Policy.rederive`` refits the rule from the arrays the run keeps
(other alpha, delta, risk, ordering or group: ``score --alpha ...``); ``to_dict`` / ``from_dict`` are plain
JSON (the arrays are per-admission risks, measures, labels and context groups: no identifier). Its sentences count
the outcome in the words it was fitted with (``words``: the run's task's, given by the caller; in-hospital
mortality's by default, and for a policy recorded before them).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from pipeline.bayes.calibration import (
    FOLDS,
    CalibrationError,
    CalibrationMap,
    Identity,
    Method,
    VennAbers,
    select_method,
    stratified_folds,
)
from pipeline.bayes.calibration import fit as fit_map
from pipeline.bayes.calibration import from_dict as map_from_dict
from pipeline.bayes.metrics import Summary
from pipeline.bayes.referral.config import AUTO, GROUP_FAMILIES, ReferralConfig  # noqa: F401 (re-exported)
from pipeline.bayes.referral.measures import (
    Ordering,
    decision_uncertainty,
    describe,
    gaussian_decision_uncertainty,
    va_decision_uncertainty,
)
from pipeline.bayes.referral.rule import Reference, ReferRule, fit_refer_rule
from pipeline.bayes.referral.settings import CalibrationTooSmall, ReferralError, Risk
from pipeline.bayes.referral.text import DEATHS, Outcome
from pipeline.bayes.referral.threshold import DecisionThreshold, choose_threshold
from pipeline.core.configs import invalid

INFINITE = ("infinite: on a held-out fold it gave an admission a risk of exactly 0 or 1 against its outcome, so it "
            "cannot be chosen")  # a map's cross-fitted NLL that is inf (isotonic on few deaths), in words


@dataclass
class Predictive:
    """One set of admissions' predictions, as the policy reads them."""

    mean: np.ndarray  # (N,) the raw predictive risk (risk_mean)
    draws: np.ndarray | None = None  # (D, N) raw probability draws of the posterior (None: Gaussian or point)
    mu: np.ndarray | None = None  # (N,) a Gaussian-logit model's logit mean (Laplace's probit predictive)
    var: np.ndarray | None = None  # (N,) its variance
    groups: dict[str, np.ndarray] = field(default_factory=dict)  # context family -> (N,) group of each admission

    def __len__(self) -> int:
        return int(self.mean.shape[0])

    @property
    def spread(self) -> bool:
        """Whether any admission's risk moves under the posterior (else a point model)."""
        if self.draws is not None:
            return bool(np.any(self.draws.max(axis=0) > self.draws.min(axis=0)))
        return self.var is not None and bool(np.any(self.var > 0.0))


@dataclass
class Columns:
    """What the policy adds to the risk table of a set of admissions, each (N,)."""

    risk_calibrated: np.ndarray  # the calibrated risk
    va_low: np.ndarray  # Venn-Abers interval, low end (nan without one)
    va_high: np.ndarray  # high end
    high_risk: np.ndarray  # calibrated risk >= the decision threshold
    decision_uncertainty: np.ndarray  # the posterior's share across the decision threshold
    refer: np.ndarray  # the refer rule's flag
    measures: dict = field(default_factory=dict, repr=False)  # every ordering's measure (``Policy.measures``)


def entropy(p: np.ndarray) -> np.ndarray:
    """Binary entropy (nats) of risks p."""
    q = np.clip(np.asarray(p, dtype=np.float64), 1e-300, 1.0 - 1e-16)
    return -(q * np.log(q) + (1.0 - q) * np.log1p(-q))


def _mi(draws: np.ndarray) -> np.ndarray:
    """Mutual information between outcome and weights of probability draws (D, N)."""
    return np.maximum(entropy(draws.mean(axis=0)) - entropy(draws).mean(axis=0), 0.0)


@dataclass
class Policy:
    """A fitted policy: the map, the threshold, the rule and the arrays a new rule is fitted from."""

    config: ReferralConfig  # the settings fitted with
    calibrator: CalibrationMap  # the recalibration map (Identity: none)
    calibration: dict  # how it was chosen: method, held-out NLL per method, n, deaths (or why none)
    venn_abers: VennAbers | None  # the Venn-Abers interval's table (None: too few calibration deaths)
    threshold: DecisionThreshold  # the decision threshold, in calibrated units, chosen on the selection half
    ordering: Ordering  # what the refer flag ranks by (``auto`` resolved)
    rule: ReferRule  # the refer rule
    kept: dict = field(repr=False, default_factory=dict)  # the halves' arrays (``rederive``)
    words: Outcome = DEATHS  # the outcome its sentences count (the run's task's)

    # ------------------------------------------------------------------ applying

    def measures(self, pred: Predictive, cal: np.ndarray, high: np.ndarray) -> dict[str, np.ndarray]:
        """Every ordering's measure of ``pred`` (calibrated risks ``cal``, decisions ``high``)."""
        t = self.threshold.threshold
        t_raw = self.calibrator.raw_threshold(t)
        out = {Ordering.RISK.value: cal, Ordering.ENTROPY.value: entropy(cal)}
        if pred.draws is not None:
            cd = self.calibrator.apply(pred.draws)  # (D, N): the draws through the same map
            lo, hi = np.percentile(cd, [5.0, 95.0], axis=0)
            out.update({Ordering.MI.value: _mi(cd), Ordering.SD.value: cd.std(axis=0), Ordering.BAND.value: hi - lo,
                        Ordering.DECISION.value: decision_uncertainty(pred.draws, min(t_raw, 1.0), high)})
        elif pred.mu is not None:  # the Gaussian logit's own summary (uncalibrated), its decision in closed form
            g = Summary.from_gaussian(pred.mu, pred.var, mean=pred.mean)
            z = float(np.clip(t_raw, 1e-12, 1.0 - 1e-12))
            out.update({Ordering.MI.value: g.mutual_info, Ordering.SD.value: g.sd, Ordering.BAND.value: g.p95 - g.p05,
                        Ordering.DECISION.value: gaussian_decision_uncertainty(pred.mu, pred.var, z, high)})
        else:
            zero = np.zeros(len(pred))
            out.update({o.value: zero for o in (Ordering.MI, Ordering.SD, Ordering.BAND, Ordering.DECISION)})
        if self.venn_abers is not None:
            p0, p1 = self.venn_abers.interval(pred.mean)
            out[Ordering.VA_DECISION.value] = va_decision_uncertainty(p0, p1, t, high)
            out[Ordering.VA_WIDTH.value] = p1 - p0
        return out

    def apply(self, pred: Predictive) -> Columns:
        """The policy's columns for ``pred`` (the refer flag needs its ``groups`` when the rule is per group)."""
        cal = self.calibrator.apply(pred.mean)
        high = self.threshold.flag(cal)
        m = self.measures(pred, cal, high)
        if self.venn_abers is not None:
            low, up = self.venn_abers.interval(pred.mean)
        else:
            low = up = np.full(len(pred), np.nan)
        groups = None if self.config.group is None else pred.groups.get(self.config.group)
        refer = self.rule.refer(m[self.ordering.value], groups)
        return Columns(cal, low, up, high, m[Ordering.DECISION.value], refer, m)

    # ------------------------------------------------------------------ text

    def sentence(self) -> str:
        """The refer rule in one plain sentence (an importance-weighted rule's says what it assumes)."""
        weighted = self.calibration.get("weighted")
        if weighted:
            from pipeline.bayes.referral.weighted import WeightedRule

            return WeightedRule.from_dict({**weighted, "rule": self.rule.to_dict()}).sentence(self.words)
        return self.rule.sentence(self.words)

    def reason(self) -> str:
        """What the flag ranks by, in plain words (``referred because ...``)."""
        kept = self.kept.get("calibration", {})
        risk = kept.get("risk")
        measure = (kept.get("measures") or {}).get(self.ordering.value)
        return describe(self.ordering, None if measure is None else np.asarray(measure),
                        None if risk is None else np.asarray(risk))

    def calibration_line(self) -> str:
        """How the risk was recalibrated, one line."""
        c = self.calibration
        if c.get("method") == Method.NONE.value and c.get("why"):
            return f"risks not recalibrated: {c['why']}"
        nll = c.get("nll") or {}
        shown = ", ".join(f"{k} {v:.4f}" if v is not None else f"{k} {INFINITE}" for k, v in nll.items())
        rule = ("the simplest within one standard error of the lowest " if c.get("rule") == "one_se" else
                "the lowest ")
        how = f"{rule}{c.get('folds')}-fold cross-fitted NLL ({shown})" if nll else "as asked"
        again = c.get("recertified") or {}
        when = (f"; re-certified on {again['n']:,} admissions of a new period ({again['deaths']:,} "
                f"{self.words.many}), {again.get('threshold', '')}" if again.get("n") else "")
        return (f"risks recalibrated by {c.get('method')} on {c.get('n'):,} calibration admissions "
                f"({c.get('deaths'):,} {self.words.many}), {how}{when}")

    def lines(self, high_risk: int | None = None) -> list[str]:
        """How the risks become decisions, as train and score print it: the recalibration, the decision threshold
        (``high_risk``: a census's count at or above it, when given), the rule's sentence, what the flag ranks by."""
        here = "" if high_risk is None else f"; here {high_risk} high risk"
        return [self.calibration_line(), self.threshold.summary() + here, f"refer rule: {self.sentence()}",
                f"the refer flag: {self.flag_words()}"]

    def refers_all(self) -> bool:
        """Whether the rule refers every admission (no cut certified, in any group)."""
        cuts = [g.cut for g in (self.rule.groups or {}).values()] or [self.rule.overall.cut]
        return all(c == -np.inf for c in cuts)

    def flag_words(self) -> str:
        """Why an admission is referred, true of this rule: the ordering's words (``reason``), or, for a rule that
        refers everyone, that every admission is (and what a certified rule would rank by)."""
        if self.refers_all():
            return f"every admission, by the rule above (a certified rule would rank them: {self.reason()})"
        return self.reason()

    # ------------------------------------------------------------------ new rules from the kept arrays

    def rederive(self, strict: bool = False, **changes) -> Policy:
        """The policy with a refer rule refitted from the kept halves under ``changes`` of the config (alpha,
        delta, risk, ordering, group, rule, fraction); the map and the threshold stay. ``strict``: settings the
        calibration half is too small to certify raise ``CalibrationTooSmall`` (naming alpha and delta) instead
        of a rule that refers everyone and says so."""
        if not self.kept:
            raise ReferralError("this run's policy keeps no calibration scores (its model_info summary only): the "
                                "refer rule cannot be re-derived; score with the run's model file")
        if self.calibration.get("weighted"):
            raise ReferralError("this run's refer rule is importance-weighted for a new population (recertify "
                                "--weighted): re-derive it by re-certifying the parent run with the settings asked")
        cfg = dataclasses.replace(self.config, **changes)
        return dataclasses.replace(self, config=cfg, **_rule(cfg, self.kept, self.threshold.threshold, strict,
                                                             self.words))

    @property
    def spread(self) -> bool:
        return bool(self.kept.get("spread", True))

    # ------------------------------------------------------------------ JSON

    def to_dict(self, arrays: bool = True) -> dict:
        """Plain JSON; ``arrays`` False: a summary for reading (model_info.json), without the halves' arrays and
        the Venn-Abers table (``from_dict`` refuses it: the model file holds the policy itself)."""
        out = {"config": self.config.to_dict(), "calibrator": self.calibrator.to_dict(),
               "calibration": self.calibration, "threshold": self.threshold.to_dict(), "ordering": self.ordering.value,
               "rule": self.rule.to_dict(), "sentence": self.sentence(), "reason": self.reason(),
               "outcome": self.words.to_dict()}
        if arrays:
            out["venn_abers"] = None if self.venn_abers is None else self.venn_abers.to_dict()
            out["kept"] = _plain(self.kept)
        else:
            out["summary"] = True
            out["venn_abers_fitted"] = self.venn_abers is not None
        return out

    @classmethod
    def from_dict(cls, d: dict, words: Outcome | None = None) -> Policy:
        """The policy ``to_dict`` wrote; its sentences in the words it records, else ``words`` (a policy recorded
        before its words: the caller's, the run's task's), else in-hospital mortality's."""
        if d.get("summary"):
            raise ReferralError("a policy summary (model_info.json) cannot be applied: load the run's model file")
        va = d.get("venn_abers")
        return cls(ReferralConfig.from_dict(d["config"]), map_from_dict(d["calibrator"]), d["calibration"],
                   None if va is None else VennAbers.from_dict(va), DecisionThreshold.from_dict(d["threshold"]),
                   Ordering(d["ordering"]), ReferRule.from_dict(d["rule"]), _arrays(d.get("kept") or {}),
                   Outcome.from_dict(d["outcome"]) if d.get("outcome") else (words or DEATHS))


def _plain(x):
    if isinstance(x, np.ndarray):
        return [None if isinstance(v, float) and not np.isfinite(v) else v for v in x.tolist()]
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    return x


def _arrays(x):
    if isinstance(x, list):
        if x and isinstance(x[0], str):
            return np.asarray(x)
        return np.asarray([np.nan if v is None else v for v in x], dtype=np.float64)
    if isinstance(x, dict):
        return {k: _arrays(v) for k, v in x.items()}
    return x


# ---------------------------------------------------------------------------- fitting


def _calibrate(cfg: ReferralConfig, p: np.ndarray, y: np.ndarray, seed: int, words: Outcome = DEATHS
               ) -> tuple[CalibrationMap, dict, np.ndarray]:
    """(map, its record, cross-fitted calibrated risks of the fit admissions) on the calibration half."""
    deaths, n = int(y.sum()), int(y.shape[0])
    if cfg.calibration == AUTO and min(deaths, n - deaths) < FOLDS:  # no choice by cross-fitting: said in words
        return Identity(), {"method": Method.NONE.value, "n": n, "deaths": deaths, "why": (
            f"the calibration data hold {deaths:,} {words.many} and {n - deaths:,} {words.others}; choosing a map by "
            f"{FOLDS}-fold cross-fitted NLL needs at least {FOLDS} of each")}, p.copy()
    try:
        if cfg.calibration == AUTO:
            sel = select_method(p, y, seed=seed)
            kept = ("nll", "folds", "n", "deaths", "rule", "se")
            cmap, record = sel.calibrator, {"method": sel.chosen.value,
                                            **{k: v for k, v in sel.to_dict().items() if k in kept}}
        else:
            cmap = fit_map(cfg.calibration, p, y)
            record = {"method": Method(cfg.calibration).value, "n": n, "deaths": deaths, "folds": None, "nll": None}
        folds = 5 if min(deaths, n - deaths) >= 5 else 0
    except CalibrationError as exc:
        return Identity(), {"method": Method.NONE.value, "n": n, "deaths": deaths, "why": str(exc)}, p.copy()
    if not folds or isinstance(cmap, Identity):
        return cmap, record, cmap.apply(p)
    fold = stratified_folds(y, folds, seed)
    oof = np.empty_like(p)
    for f in range(folds):
        test = fold == f
        oof[test] = fit_map(cmap.method, p[~test], y[~test]).apply(p[test])
    return cmap, record, oof


def _venn_abers(p: np.ndarray, y: np.ndarray) -> VennAbers | None:
    if y.sum() < 1 or (1 - y).sum() < 1:
        return None
    return VennAbers.fit(p, y)


def _resolve(ordering: str) -> Ordering:
    """The ordering ``ordering`` names; ``auto``: the calibrated risk, whatever the model (module docstring)."""
    return Ordering.RISK if ordering == AUTO else Ordering(ordering)


def _rule(cfg: ReferralConfig, kept: dict, t: float, strict: bool = False, words: Outcome = DEATHS) -> dict:
    """The refer rule (and its resolved ordering) of ``cfg`` on the kept halves."""
    cal, sel = kept["calibration"], kept["selection"]
    order = _resolve(cfg.ordering)
    if order.value not in cal["measures"]:
        raise invalid(cfg, f"ordering {order.value} needs a Venn-Abers interval, which the calibration data could "
                      f"not fit (too few {words.many})", "ordering")
    groups_c = groups_s = None
    if cfg.group is not None:
        groups_c, groups_s = (cal.get("groups") or {}).get(cfg.group), (sel.get("groups") or {}).get(cfg.group)
        if groups_c is None or groups_s is None:
            raise invalid(cfg, f"group {cfg.group}: the run kept no such context family of its validation "
                          "admissions", "group")
    risk = cal["risk_oof"] if cfg.risk is Risk.BRIER else cal["risk"]
    ref = Reference(sel["measures"][order.value], sel["risk"], groups_s)
    try:
        rule = fit_refer_rule(cal["measures"][order.value], risk, cal["labels"], t, cfg.settings(), order, groups_c,
                              ref, strict=strict, words=words)
    except CalibrationTooSmall as exc:
        exc.config = ReferralConfig  # alpha and delta, as the command line spells them
        raise
    return {"ordering": order, "rule": rule}


def fit_policy(selection: Predictive, y_selection, calibration: Predictive, y_calibration,
               cfg: ReferralConfig | None = None, seed: int = 0, words: Outcome = DEATHS) -> Policy:
    """The policy of a run from its validation halves (see the module docstring): ``selection`` chose the
    checkpoint and sets the threshold and the cuts, ``calibration`` is kept apart for the map and the rule;
    ``words``: the outcome its sentences count."""
    cfg = cfg or ReferralConfig()
    ys = np.asarray(y_selection, dtype=np.float64)
    yc = np.asarray(y_calibration, dtype=np.float64)
    cmap, record, oof = _calibrate(cfg, calibration.mean, yc, seed, words)
    va = _venn_abers(calibration.mean, yc)
    cal_s = cmap.apply(selection.mean)
    threshold = choose_threshold(cal_s, ys, cfg.threshold_rule, cfg.sensitivity, cfg.decision_threshold, words)
    draft = Policy(cfg, cmap, record, va, threshold, Ordering.RISK, None, words=words)  # measures need no rule
    cal_c = cmap.apply(calibration.mean)
    kept = {"spread": selection.spread or calibration.spread,
            "calibration": {"labels": yc, "risk": cal_c, "risk_oof": oof,
                            "measures": draft.measures(calibration, cal_c, threshold.flag(cal_c)),
                            "groups": calibration.groups},
            "selection": {"risk": cal_s, "measures": draft.measures(selection, cal_s, threshold.flag(cal_s)),
                          "groups": selection.groups}}
    return dataclasses.replace(draft, kept=kept, **_rule(cfg, kept, threshold.threshold, words=words))
