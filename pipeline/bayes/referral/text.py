"""The refer rule in one plain sentence, for the console, the cohort report and the pyfunc, in the words of the
run's outcome (``Outcome``: the task's, given by the caller; the toolbox knows no task, so in-hospital mortality's
"death", "deaths" and "survivors" by default)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from pipeline.bayes.referral.settings import Risk, RuleMethod, Status


@dataclass(frozen=True)
class Outcome:
    """The outcome a rule counts, in words."""

    one: str = "death"  # an admission's outcome, singular ("death", "hospital readmission within 30 days")
    many: str = "deaths"  # plural ("deaths", "hospital readmissions within 30 days")
    others: str = "survivors"  # the admissions without it ("survivors", "admissions without a ...")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict | None) -> Outcome:
        """The words ``to_dict`` wrote; the defaults (deaths) for None (a policy recorded before them)."""
        d = d if isinstance(d, dict) else {}
        return cls(**{k: str(d[k]) for k in ("one", "many", "others") if d.get(k)})


DEATHS = Outcome()  # in-hospital mortality's words, every sentence's default

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


def promise_words(risk: str, alpha: float, delta: float, words: Outcome = DEATHS) -> str:
    """``the model misses at most 5% of deaths, with 90% confidence``: a rule's promise in words."""
    return f"{_promise(Risk(risk), alpha, words)}, with {percent(1.0 - delta)} confidence"


def percent(x: float) -> str:
    """0.14 -> '14%', 0.005 -> '0.5%', 0.0523 -> '5.2%' (whole percents where exact enough)."""
    v = 100.0 * float(x)
    return f"{v:.0f}%" if abs(v - round(v)) < 0.05 or v >= 10 else f"{v:.1f}%"


def _promise(risk: Risk, alpha: float, words: Outcome = DEATHS) -> str:
    if risk is Risk.MISS:
        return f"the model misses at most {percent(alpha)} of {words.many}"
    return f"the model's Brier score is at most {alpha:.3g}"


def _claim(risk: Risk, alpha: float, words: Outcome) -> str:
    if risk is Risk.MISS:
        return f"the {words.many} missed among the others at most {percent(alpha)} of {words.many}"
    return f"the others' Brier score at most {alpha:.3g}"


def _calibrated(n: int, positives: int, words: Outcome) -> str:
    return f"calibrated on {n:,} admissions, {positives:,} {words.many}"


def _one(g, s, unit_where: str = "", words: Outcome = DEATHS) -> str:
    """The sentence of one ``GroupRule`` ``g`` under settings ``s``."""
    conf = percent(1.0 - s.delta)
    if g.status is Status.CERTIFIED:
        return (f"refer {percent(g.referral_rate)} of admissions: on the others {_promise(s.risk, s.alpha, words)}, "
                f"with {conf} confidence ({_calibrated(g.n, g.deaths, words)}); {ASSUMES}")
    if g.status is Status.REFER_ALL:
        return (f"refer every admission: no refer threshold could be certified to keep "
                f"{_claim(s.risk, s.alpha, words)}, with {conf} confidence, on the calibration data ({g.n:,} "
                f"admissions, {g.deaths:,} {words.many})")
    if g.status is Status.TOO_SMALL:
        unit, have = (words.many, g.deaths) if s.risk is Risk.MISS else ("admissions", g.n)
        return (f"refer every admission: promising that {_promise(s.risk, s.alpha, words)} with {conf} confidence "
                f"needs at least {g.needed:,} calibration {unit}{unit_where} even with no error; the calibration data "
                f"hold {have:,}")
    if s.method is RuleMethod.FRACTION:
        return (f"refer {percent(g.referral_rate)} of admissions (a fixed share of the calibration admissions): no "
                "bound on the error of the others is promised")
    observed = (f"the model missed {percent(g.empirical_risk)} of {words.many} among the others"
                if s.risk is Risk.MISS else f"the others' Brier score was {g.empirical_risk:.3g}")
    return (f"refer {percent(g.referral_rate)} of admissions: on the calibration data {observed} (asked: at most "
            f"{percent(s.alpha) if s.risk is Risk.MISS else format(s.alpha, '.3g')}), with no finite-sample guarantee")


def sentence(rule, words: Outcome = DEATHS) -> str:
    """One sentence for a ``ReferRule``: what share is referred and what is promised for the others (the outcome in
    ``words``)."""
    s = rule.settings
    if rule.groups is None:
        return _one(rule.overall, s, words=words)
    column = s.group_column or "group"
    rates = ", ".join(f"{name} {percent(g.referral_rate)}" for name, g in rule.groups.items())
    head = f"refer {percent(rule.overall.referral_rate)} of admissions ({rates}), with a rule per {column}"
    if all(g.status is Status.CERTIFIED for g in rule.groups.values()):
        sizes = "; ".join(f"{name}: {g.n:,} admissions, {g.deaths:,} {words.many}" for name, g in rule.groups.items())
        return (f"{head}: in each {column}, on the others {_promise(s.risk, s.alpha, words)}, with "
                f"{percent(1.0 - s.delta)} confidence (calibrated on {sizes}); {ASSUMES}")
    return head + ": " + "; ".join(f"{name}: {_one(g, s, f' in {column} {name!r}', words)}"
                                   for name, g in rule.groups.items())
