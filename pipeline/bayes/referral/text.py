"""The refer rule in one plain sentence, for the console, the cohort report and the pyfunc."""

from __future__ import annotations

from pipeline.bayes.referral.settings import Risk, RuleMethod, Status

ASSUMES = "it assumes the scored patients resemble those"
STATUS_WORDS = {  # what a fitted rule's status means, in words (the console's `evaluate` line)
    Status.CERTIFIED: "certified",
    Status.REFER_ALL: "refers everyone: no cut could be certified on the calibration data",
    Status.TOO_SMALL: "refers everyone: the calibration data are too few to certify its promise",
    Status.UNCERTIFIED: "no guarantee",
}
RANKED_BY = {  # what a rule ranks admissions by (options.Ordering's values), in words
    "risk": "the risk", "entropy": "the predictive entropy", "mi": "the mutual information",
    "sd": "the risk's posterior sd", "band": "the width of the risk's 5-95% band",
    "decision": "the chance that the risk lies across the decision threshold",
    "va_decision": "the Venn-Abers interval across the decision threshold",
    "va_width": "the Venn-Abers interval's width",
}


def rule_words(ordering: str, status: str) -> str:
    """``ranked by the risk; refers everyone: ...``: a rule's ordering and status in words, not as enum values."""
    return f"ranked by {RANKED_BY.get(ordering, ordering)}; {STATUS_WORDS.get(Status(status), status)}"


def promise_words(risk: str, alpha: float, delta: float) -> str:
    """``the model misses at most 5% of deaths, with 90% confidence``: a rule's promise in words."""
    return f"{_promise(Risk(risk), alpha)}, with {percent(1.0 - delta)} confidence"


def percent(x: float) -> str:
    """0.14 -> '14%', 0.005 -> '0.5%', 0.0523 -> '5.2%' (whole percents where exact enough)."""
    v = 100.0 * float(x)
    return f"{v:.0f}%" if abs(v - round(v)) < 0.05 or v >= 10 else f"{v:.1f}%"


def _promise(risk: Risk, alpha: float) -> str:
    if risk is Risk.MISS:
        return f"the model misses at most {percent(alpha)} of deaths"
    return f"the model's Brier score is at most {alpha:.3g}"


def _claim(risk: Risk, alpha: float) -> str:
    if risk is Risk.MISS:
        return f"the deaths missed among the others at most {percent(alpha)} of deaths"
    return f"the others' Brier score at most {alpha:.3g}"


def _calibrated(n: int, deaths: int) -> str:
    return f"calibrated on {n:,} admissions, {deaths:,} deaths"


def _one(g, s, unit_where: str = "") -> str:
    """The sentence of one ``GroupRule`` ``g`` under settings ``s``."""
    conf = percent(1.0 - s.delta)
    if g.status is Status.CERTIFIED:
        return (f"refer {percent(g.referral_rate)} of admissions: on the others {_promise(s.risk, s.alpha)}, with "
                f"{conf} confidence ({_calibrated(g.n, g.deaths)}); {ASSUMES}")
    if g.status is Status.REFER_ALL:
        return (f"refer every admission: no refer threshold could be certified to keep {_claim(s.risk, s.alpha)}, "
                f"with {conf} confidence, on the calibration data ({g.n:,} admissions, {g.deaths:,} deaths)")
    if g.status is Status.TOO_SMALL:
        unit, have = ("deaths", g.deaths) if s.risk is Risk.MISS else ("admissions", g.n)
        return (f"refer every admission: promising that {_promise(s.risk, s.alpha)} with {conf} confidence needs at "
                f"least {g.needed:,} calibration {unit}{unit_where} even with no error; the calibration data hold "
                f"{have:,}")
    if s.method is RuleMethod.FRACTION:
        return (f"refer {percent(g.referral_rate)} of admissions (a fixed share of the calibration admissions): no "
                "bound on the error of the others is promised")
    observed = (f"the model missed {percent(g.empirical_risk)} of deaths among the others" if s.risk is Risk.MISS
                else f"the others' Brier score was {g.empirical_risk:.3g}")
    return (f"refer {percent(g.referral_rate)} of admissions: on the calibration data {observed} (asked: at most "
            f"{percent(s.alpha) if s.risk is Risk.MISS else format(s.alpha, '.3g')}), with no finite-sample guarantee")


def sentence(rule) -> str:
    """One sentence for a ``ReferRule``: what share is referred and what is promised for the others."""
    s = rule.settings
    if rule.groups is None:
        return _one(rule.overall, s)
    column = s.group_column or "group"
    rates = ", ".join(f"{name} {percent(g.referral_rate)}" for name, g in rule.groups.items())
    head = f"refer {percent(rule.overall.referral_rate)} of admissions ({rates}), with a rule per {column}"
    if all(g.status is Status.CERTIFIED for g in rule.groups.values()):
        sizes = "; ".join(f"{name}: {g.n:,} admissions, {g.deaths:,} deaths" for name, g in rule.groups.items())
        return (f"{head}: in each {column}, on the others {_promise(s.risk, s.alpha)}, with {percent(1.0 - s.delta)} "
                f"confidence (calibrated on {sizes}); {ASSUMES}")
    return head + ": " + "; ".join(f"{name}: {_one(g, s, f' in {column} {name!r}')}" for name, g in rule.groups.items())
