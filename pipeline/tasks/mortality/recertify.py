"""Re-certification of a mortality run's promise for a new period, without retraining (issue 43, item 2).

``predictions`` gives the new admissions as the run's policy reads them (``Predictive``: the run's scorer's draws,
each admission's context groups), several FeatureSets joined. Two ways to a new policy:

- ``labelled``: labelled admissions of the new period: ``bayes.referral.recertify`` refits the map and the refer
  rule on them (the run's flags kept, or ``refit_threshold``: the run's own fitting on two halves of them); the
  candidate cuts come from every new admission given (label-free), the labelled ones included;
- ``weighted``: no new outcomes: the run's calibration half re-weighted towards the new admissions
  (``bayes.referral.weighted``), the likelihood ratios from a domain classifier (``bayes.shift.fit_domain``) fitted
  on the run's *selection* half against the new admissions (apart from the calibration half it re-weights), on the
  shift check's feature matrix (``shift.feature_matrix``); valid under covariate shift only, which its sentence says.

Both refuse a set too small for the asked alpha and delta, naming the size needed (``refuse_too_small``; the rule's
own ``CalibrationTooSmall``, which the command line says as ``--delta`` and ``--alpha``). ``more_outcomes``: what a
larger labelled set would buy a certified rule (the exact test's floor, ``bayes.referral.power``, on the new map's
risks taken as true). ``reference`` is the new
run's shift reference (the admissions the new promise was certified for) and ``with_policy`` writes the run's
model file with the new policy in it (a torch checkpoint's ``policy`` entry, a baseline file's meta).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from pipeline.bayes.referral import power
from pipeline.bayes.referral.config import GROUP_FAMILIES
from pipeline.bayes.referral.options import Ordering
from pipeline.bayes.referral.settings import CalibrationTooSmall, ReferralError, Risk, RuleMethod, Status
from pipeline.tasks.mortality import risk
from pipeline.tasks.mortality.shift import columns_of, feature_matrix


def predictions(scorer, feature_sets: list, vocab: dict, generator=None):
    """(``Predictive`` of every admission of ``feature_sets`` in order, their feature matrix) through ``scorer``, the
    run's vocabulary ``vocab`` (its context groups, the matrix's columns)."""
    from scipy import sparse

    from pipeline.bayes.referral.policy import Predictive
    from pipeline.data.features import context_groups

    parts, mats = [], []
    for fs in feature_sets:
        groups = {f: context_groups(fs, vocab["context"], f) for f in GROUP_FAMILIES}
        parts.append(risk.predictive(scorer.predictions(fs, generator), groups))
        mats.append(feature_matrix(fs, len(vocab["tokens"]), len(vocab["context"])))
    cat = (lambda xs, axis=0: None if xs[0] is None else np.concatenate(xs, axis=axis))  # noqa: E731
    out = Predictive(np.concatenate([p.mean for p in parts]), cat([p.draws for p in parts], 1),
                     cat([p.mu for p in parts]), cat([p.var for p in parts]),
                     {f: np.concatenate([p.groups[f] for p in parts]) for f in GROUP_FAMILIES})
    return out, sparse.vstack(mats, format="csr")


def subset(pred, rows: np.ndarray):
    """The admissions ``rows`` of a ``Predictive``."""
    from pipeline.bayes.referral.policy import Predictive

    pick = (lambda a, axis=0: None if a is None else np.take(a, rows, axis=axis))  # noqa: E731
    return Predictive(pred.mean[rows], pick(pred.draws, 1), pick(pred.mu), pick(pred.var),
                      {k: v[rows] for k, v in pred.groups.items()})


def with_settings(policy, alpha: float | None, delta: float | None):
    """The policy with the promise asked (alpha, delta; None: the run's)."""
    changes = {k: v for k, v in (("alpha", alpha), ("delta", delta)) if v is not None}
    return dataclasses.replace(policy, config=dataclasses.replace(policy.config, **changes)) if changes else policy


def refuse_too_small(policy, where: str) -> None:
    """Raise ``CalibrationTooSmall`` (naming --delta and --alpha) when the new rule is too small to certify."""
    from pipeline.bayes.referral.config import ReferralConfig

    rule = policy.rule
    groups = rule.groups or {"": rule.overall}
    small = [(name, g) for name, g in groups.items() if g.status is Status.TOO_SMALL]
    if not small:
        return
    name, g = small[0]
    s = rule.settings
    in_group = f" in {s.group_column or 'group'} {name!r}" if name else ""
    exc = CalibrationTooSmall(f"delta {s.delta:g} at alpha {s.alpha:g} needs at least {g.needed:,} deaths{in_group} "
                              f"even with no error; {where} hold {g.deaths:,} (of {g.n:,} admissions)", g.needed,
                              g.deaths)
    exc.config, exc.fields = ReferralConfig, ("delta", "alpha")
    raise exc


def labelled(policy, pred, labels: np.ndarray, reference=None, refit_threshold: bool = False, seed: int = 0):
    """The policy refitted on the labelled new admissions ``pred`` / ``labels`` (module docstring); ``reference``:
    label-free new admissions for the cuts (None: the labelled ones)."""
    from pipeline.bayes.referral.recertification import recertify

    new = recertify(policy, pred, labels, reference=reference, refit_threshold=refit_threshold, strict=True,
                    seed=seed)
    refuse_too_small(new, "the new admissions (half of them with --refit-threshold)" if refit_threshold else
                     "the new admissions")
    return new


MARGIN = 0.05  # more_outcomes: "within 5 points" of the oracle's kept-unflagged share


def more_outcomes(policy, pred, labelled: int, deaths: int, margin: float = MARGIN) -> dict | None:
    """What more labelled admissions would buy a policy re-certified on ``labelled`` of the admissions ``pred``
    (``deaths`` among them; ``bayes.referral.power``). Exact, assuming nothing: the most misses among those deaths
    that the exact test lets a cut have (k*). An estimate, taking the new map's risks as the true ones (a plug-in
    that assumes them calibrated, which the line says): the share a perfect cut of the rule's ranking keeps unflagged
    at the same alpha, against the share the rule keeps, and the labelled set whose rule comes within ``margin`` of
    it in expectation. None for rules the floor does not describe (per group, not the miss rate, not certified by
    LTT, not ranked by the risk, re-weighted)."""
    cfg = policy.config
    if (cfg.group is not None or Risk(cfg.risk) is not Risk.MISS or RuleMethod(cfg.rule) is not RuleMethod.LTT
            or policy.ordering is not Ordering.RISK or policy.calibration.get("weighted")):
        return None
    cols = policy.apply(pred)
    q, t = cols.risk_calibrated, policy.threshold.threshold
    kept = float((~cols.refer & ~cols.high_risk).mean())
    out = {"labelled": int(labelled), "deaths": int(deaths), "outcomes": policy.words.many, "alpha": cfg.alpha,
           "misses_allowed": int(power.certifiable_misses(deaths, cfg.alpha, cfg.delta)[0]), "kept": kept,
           "admissions": len(q), "margin": margin, "oracle": None, "needed": None,
           "risks": "the recalibrated risks, taken as true"}
    if q.sum() > 0.0:
        curve = power.MissCurve.of(q, q, t)
        out["oracle"] = curve.oracle(cfg.alpha)
        if kept < out["oracle"] - margin:
            out["needed"] = curve.needed(cfg.alpha, cfg.delta, margin)
    return out


def more_outcomes_line(m: dict) -> str:
    """``more_outcomes`` in one line, as ``cli.py recertify`` prints it."""
    k, d, w = m["misses_allowed"], m["deaths"], m.get("outcomes", "deaths")
    head = ("what more outcomes would buy: " + (
        f"{d:,} {w} let the exact test pass a cut only if it misses at most {k:,} of them ({k / d:.1%}, to promise "
        f"{m['alpha']:.0%})" if k >= 0 else f"{d:,} {w} let the exact test pass no cut at {m['alpha']:.0%}"))
    o, kept, margin = m["oracle"], m["kept"], m["margin"]
    if o is None:
        return head
    est = (f"; by the recalibrated risks (if they are right), a perfect cut of the rule's ranking would keep "
           f"{o:.1%} of these {m['admissions']:,} admissions unflagged, the rule keeps {kept:.1%}")
    if kept > o:
        return (f"{head}; the recalibrated risks would put a perfect cut of the rule's ranking at {o:.1%} of these "
                f"{m['admissions']:,} admissions, below the {kept:.1%} the rule keeps: they are not right enough at "
                "the low risks to say more")
    if kept >= o - margin:
        return f"{head}{est}: within {margin:.0%} of it already"
    if m["needed"] is None:
        return f"{head}{est}: no labelled set up to {power.N_MAX:,} admissions comes within {margin:.0%} of it"
    return (f"{head}{est}: about {_round(m['needed']):,} labelled admissions would come within {margin:.0%} of it, "
            f"in expectation (these were {m['labelled']:,})")


def _round(n: int) -> int:
    """``n`` to two significant figures, up (the search is to 1% and the risks are an estimate)."""
    scale = 10 ** max(len(str(int(n))) - 2, 0)
    return int(-(-int(n) // scale) * scale)


def weighted_policy(policy, calibration_matrix, selection_matrix, new_pred, new_matrix, max_weight: float,
                    seed: int = 0):
    """(the re-weighted policy, its ``WeightedRule``, the domain classifier) for the new admissions ``new_pred``
    (module docstring): the domain classifier of ``new_matrix`` against the run's selection half
    (``selection_matrix``) weighs the run's kept calibration half (``calibration_matrix``, its rows in the kept
    arrays' order)."""
    from pipeline.bayes.referral.rule import Reference
    from pipeline.bayes.referral.weighted import fit_weighted_refer_rule
    from pipeline.bayes.shift import fit_domain

    cfg = policy.config
    if cfg.group is not None:
        raise ReferralError(f"the run's refer rule is per {cfg.group}: the importance-weighted rule is one rule for "
                            "all admissions; re-certify with outcomes instead (no --weighted)")
    cal = policy.kept.get("calibration") or {}
    if calibration_matrix.shape[0] != len(cal.get("labels", [])):
        raise ReferralError(f"the run's validation split holds {calibration_matrix.shape[0]} calibration admissions, "
                            f"its policy kept {len(cal.get('labels', []))}: not the features the run was trained on")
    domain = fit_domain(selection_matrix, new_matrix, seed=seed)
    w = domain.weights(calibration_matrix)
    order = policy.ordering.value
    cal_new = policy.calibrator.apply(new_pred.mean)
    measures = policy.measures(new_pred, cal_new, policy.threshold.flag(cal_new))
    rule = fit_weighted_refer_rule(cal["measures"][order], cal["risk"], cal["labels"], w, policy.threshold,
                                   cfg.settings(), order, Reference(measures[order], cal_new), max_weight,
                                   strict=True)
    record = {k: v for k, v in rule.to_dict().items() if k != "rule"}
    record.update(n_new=len(new_pred), domain={"n_reference": domain.n_reference, "n_cohort": domain.n_cohort})
    kept = {**policy.kept, "selection": {"risk": cal_new, "measures": measures, "groups": new_pred.groups}}
    new = dataclasses.replace(policy, rule=rule.rule, calibration={**policy.calibration, "weighted": record},
                              kept=kept)
    return new, rule, domain


def reference(policy, pred, matrix, vocab: dict, seed: int = 0):
    """The new run's shift reference: the admissions ``pred`` (matrix ``matrix``) the new promise was certified
    for, their measures by the new ``policy``."""
    from pipeline.bayes.shift import make_reference
    from pipeline.tasks.mortality.shift import MEASURES

    cal = policy.calibrator.apply(pred.mean)
    m = policy.measures(pred, cal, policy.threshold.flag(cal))
    return make_reference({k: m[k] for k in MEASURES if k in m}, matrix, columns_of(vocab), seed=seed,
                          source="the admissions the promise was re-certified on")


def with_policy(src, dst, policy) -> None:
    """Write the model file ``src`` to ``dst`` with ``policy`` in it (a torch checkpoint's ``policy`` entry, a
    classical baseline's meta): the same model, the new promise."""
    from pathlib import Path

    from pipeline.core.contracts import BASELINE_FILE

    if Path(src).name == BASELINE_FILE:
        from pipeline.tasks.mortality.baselines.model import BaselineModel

        model = BaselineModel.load(src)
        model.meta = {**model.meta, "policy": policy.to_dict()}
        model.save(dst)
        return
    import torch

    from pipeline.engine.checkpoints import save_checkpoint

    payload = torch.load(src, map_location="cpu", weights_only=True)  # a training or a Laplace checkpoint
    payload["policy"] = policy.to_dict()
    save_checkpoint(dst, payload)
