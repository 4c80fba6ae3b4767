"""Re-certification on new labelled admissions: the recalibration map and the refer rule refitted, no retraining.

``recertify(policy, new, labels)`` gives the run's ``Policy`` refitted on labelled admissions of the new period
(``new``: their predictions by the run's model). Two ways:

- **The run's flags kept** (default): the decision threshold stays the same *raw* risk t_raw (the parent's
  threshold through its own map: ``raw_threshold``), so the same admissions are flagged high risk as before; it is
  expressed in the new map's units (t' = new map(t_raw)) and its sensitivity and specificity on the new admissions
  are recorded (its ``summary`` still names the parent's rule, e.g. the validation sensitivity it was chosen for).
  With an isotonic or Venn-Abers new map, whose flat steps can hold raw risks on both sides of t_raw, "calibrated
  >= t'" also flags the admissions below t_raw in t_raw's step. The map (method chosen as the run's config says)
  and the refer rule are fitted on *all* the new labelled admissions, so the rule gets every new death. The flags
  use no new label, so the miss-rate rule's guarantee is exact as in ``fit_policy`` for strictly increasing maps
  (for isotonic and Venn-Abers maps, whose flat steps the new labels place, approximate, as there).
- **The threshold refitted** (``refit_threshold``): the new admissions are split in two halves by a seeded
  permutation and ``fit_policy`` is called on them as on a run's validation (the selection half sets the
  threshold at the run's sensitivity, the calibration half fits the map and the rule): the run's ``Policy``
  fitting, reused as it is, at the cost of half the deaths for the rule.

The candidate cuts come from ``reference`` (label-free predictions of the population to be scored, e.g. the new
period's unlabelled admissions) or else from the new admissions' own measures (label-free use). A set too small for
the asked alpha and delta refers everyone and says the size needed (``strict``: raises ``CalibrationTooSmall``),
as the run's own rule does. The returned policy records where it came from (``calibration["recertified"]``).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from pipeline.bayes.metrics import check_labels
from pipeline.bayes.referral.options import Ordering
from pipeline.bayes.referral.policy import Policy, Predictive, _calibrate, _rule, _venn_abers, fit_policy
from pipeline.bayes.referral.settings import ReferralError
from pipeline.bayes.referral.threshold import DecisionThreshold


def _subset(p: Predictive, idx: np.ndarray) -> Predictive:
    return Predictive(p.mean[idx], None if p.draws is None else p.draws[:, idx], None if p.mu is None else p.mu[idx],
                      None if p.var is None else p.var[idx], {k: np.asarray(v)[idx] for k, v in p.groups.items()})


def _described(threshold: float, parent: DecisionThreshold, risk: np.ndarray, y: np.ndarray) -> DecisionThreshold:
    """The kept threshold with what it does on the new admissions."""
    flagged = risk >= threshold
    deaths = int(y.sum())
    survivors = y.shape[0] - deaths
    sens = float(flagged[y == 1.0].mean()) if deaths else float("nan")
    spec = float((~flagged[y == 0.0]).mean()) if survivors else float("nan")
    return DecisionThreshold(float(threshold), parent.rule, parent.target, sens, spec, float(flagged.mean()),
                             int(y.shape[0]), deaths)


def recertify(policy: Policy, new: Predictive, labels, reference: Predictive | None = None,
              refit_threshold: bool = False, strict: bool = False, seed: int = 0) -> Policy:
    """The run's ``policy`` refitted on the labelled admissions ``new`` (module docstring)."""
    y = check_labels(labels, len(new), "labels")
    cfg = policy.config
    info = {"n": int(y.shape[0]), "deaths": int(y.sum()), "parent_threshold": float(policy.threshold.threshold)}
    if refit_threshold:
        half = np.random.default_rng(seed).permutation(y.shape[0])
        sel, cal = half[: y.shape[0] // 2], half[y.shape[0] // 2:]
        out = fit_policy(_subset(new, sel), y[sel], _subset(new, cal), y[cal], cfg, seed, policy.words)
        out.calibration["recertified"] = {**info, "threshold": "refitted on half the new admissions"}
        return out
    if y.sum() < 1 or y.sum() == y.shape[0]:
        w = policy.words
        raise ReferralError(f"labels: the new admissions hold {int(y.sum())} {w.many} of {y.shape[0]}: "
                            f"re-certification needs {w.many} and {w.others}")
    cmap, record, oof = _calibrate(cfg, new.mean, y, seed, policy.words)
    va = _venn_abers(new.mean, y)
    t_raw = policy.calibrator.raw_threshold(policy.threshold.threshold)
    t_new = float(cmap.apply(np.array([min(t_raw, 1.0)]))[0]) if t_raw <= 1.0 else 1.0 + 1e-12
    cal_new = cmap.apply(new.mean)
    threshold = _described(t_new, policy.threshold, cal_new, y)
    record = {**record, "recertified": {**info, "threshold": "the parent run's flags kept (raw risk >= "
                                        f"{t_raw:.6g})"}}
    draft = Policy(cfg, cmap, record, va, threshold, Ordering.RISK, None, words=policy.words)
    ref = new if reference is None else reference
    cal_ref = cmap.apply(ref.mean)
    kept = {"spread": new.spread or ref.spread,
            "calibration": {"labels": y, "risk": cal_new, "risk_oof": oof,
                            "measures": draft.measures(new, cal_new, threshold.flag(cal_new)), "groups": new.groups},
            "selection": {"risk": cal_ref, "measures": draft.measures(ref, cal_ref, threshold.flag(cal_ref)),
                          "groups": ref.groups}}
    return dataclasses.replace(draft, kept=kept, **_rule(cfg, kept, threshold.threshold, strict, policy.words))
