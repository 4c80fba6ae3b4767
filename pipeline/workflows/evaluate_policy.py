"""What a run's policy does on an evaluated split: the calibrated risk beside the raw one, the decision
threshold, the refer rule's referral and risk, and the selective-prediction metrics of the refer flag's
ordering (``evaluate``'s JSON keys ``calibrated``, ``decision``, ``refer_rule``, ``selective``,
``augrc_by_ordering``, ``retention`` and, on synthetic data, ``retention_truth``).

Selective metrics (``bayes.metrics.selective``) rank the admissions as the refer flag does (the policy's
ordering; a run without a policy: its refer measure) and use the published risk (calibrated when the run has
a map): AURC, AUGRC, the selective risk at 80% and 90% coverage and the coverage at ``EvalConfig.target_risk``,
each for the Brier loss and the 0/1 loss of the decision at the run's threshold, with bootstrap intervals.
The retention curve is the AUC-PR and NLL of the kept against the share referred; against a known true risk,
the mean KL(true || predicted) and expected NLL of the kept. On the val split, the admissions of the run's
calibration half fitted the map and the rule (``in_calibration`` counts them): only the test split is apart.
"""

from __future__ import annotations

import numpy as np

from pipeline.bayes import metrics
from pipeline.bayes.referral.text import Outcome, promise_words, rule_words

CALIBRATED_KEYS = ("nll", "auc_pr", "auc_roc", "ece", "brier", "ece_floor", "ece_floor_p95", "ece_p_value",
                   "calibration_slope", "calibration_intercept", "ece_debiased")  # the calibrated risk's numbers
    # kept, with _ci


def _logit(p: np.ndarray) -> np.ndarray:
    q = np.clip(np.asarray(p, dtype=np.float64), 1e-12, 1.0 - 1e-12)
    return np.log(q) - np.log1p(-q)


def calibrated_metrics(risk, labels, true_risk, n_bootstrap: int, seed: int) -> dict:
    """``metrics.evaluate_predictions`` of a point risk (N,): the calibrated risk's NLL, AUC-PR, ECE and its
    floor, Brier, calibration slope (each with its interval) and, with ``true_risk``, its gaps to the truth."""
    full = metrics.evaluate_predictions(_logit(risk)[None, None, :], labels, true_risk=true_risk,
                                        n_bootstrap=n_bootstrap, seed=seed)
    out = {k: full.get(k) for k in CALIBRATED_KEYS}
    out.update({f"{k}_ci": full.get(f"{k}_ci") for k in metrics.METRICS if full.get(f"{k}_ci") is not None})
    out.update({f"{k}_gap": full[f"{k}_gap"] for k in metrics.METRICS if full.get(f"{k}_gap") is not None})
    return out


def selective_section(labels, risk, measure, threshold: float | None, cfg) -> dict:
    """AURC, AUGRC, risk at coverage and coverage at ``cfg.target_risk`` for the Brier loss and, with a decision
    threshold, the 0/1 loss of the decision (each with its bootstrap interval)."""
    out = {"brier": metrics.selective_metrics(labels, risk, measure, "brier", target_risk=cfg.target_risk,
                                              n_bootstrap=cfg.n_bootstrap, seed=cfg.seed)}
    if threshold is not None:
        out["zero_one"] = metrics.selective_metrics(labels, risk, measure, "zero_one", threshold=threshold,
                                                    target_risk=cfg.target_risk, n_bootstrap=cfg.n_bootstrap,
                                                    seed=cfg.seed)
    return out


def truth_retention(true_risk, risk, measure) -> dict:
    """The kept admissions' mean KL(true || predicted) and expected NLL (under the true risk) against the share
    referred (``metrics.REFERRAL_FRACTIONS``, highest ``measure`` first)."""
    q = np.clip(np.asarray(true_risk, dtype=np.float64), 1e-12, 1.0 - 1e-12)
    p = np.clip(np.asarray(risk, dtype=np.float64), 1e-12, 1.0 - 1e-12)
    expected_nll = -(q * np.log(p) + (1.0 - q) * np.log1p(-p))
    kl = expected_nll + (q * np.log(q) + (1.0 - q) * np.log1p(-q))
    f = metrics.REFERRAL_FRACTIONS
    return {"fractions": [float(v) for v in f], "kl": metrics.kept_mean(kl, measure, f).tolist(),
            "expected_nll": metrics.kept_mean(expected_nll, measure, f).tolist()}


def policy_section(policy, pred, labels, true_risk, groups: dict, cfg, in_calibration: int) -> dict:
    """The JSON sections of a run with a policy (``bayes.referral.policy.Policy``) on one split's predictions
    ``pred`` (``tasks.mortality.predict.Predictions``; ``groups``: the admissions' context groups)."""
    from pipeline.bayes.referral.check import true_kept_risk
    from pipeline.bayes.referral.settings import Risk
    from pipeline.tasks.mortality import risk as risk_mod

    y = np.asarray(labels, dtype=np.float64)
    view = risk_mod.predictive(pred, groups)
    cols = policy.apply(view)
    cal = cols.risk_calibrated
    cal_c = policy.calibrator.apply(view.mean)
    measures = policy.measures(view, cal_c, cols.high_risk)
    u = measures[policy.ordering.value]
    t = policy.threshold.threshold
    kept = ~cols.refer
    deaths = y.sum()
    s = policy.rule.settings
    rule = {"sentence": policy.sentence(), "reason": policy.reason(), "ordering": policy.ordering.value,
            "alpha": s.alpha, "delta": s.delta, "risk": s.risk.value, "method": s.method.value,
            "status": policy.rule.overall.status.value, "calibration_n": policy.rule.overall.n,
            "calibration_deaths": policy.rule.overall.deaths, "referral_rate": float(cols.refer.mean()),
            "miss_rate": float(((y == 1) & kept & ~cols.high_risk).sum() / deaths) if deaths else None,
            "outcome": policy.words.to_dict(),
            "brier_kept": float(((cal - y) ** 2)[kept].mean()) if kept.any() else None}
    if true_risk is not None:
        q = np.asarray(true_risk, dtype=np.float64)
        rule["true_kept_risk"] = true_kept_risk(q, cal, kept, t, Risk(s.risk))
    flagged = cols.high_risk
    decision = {"threshold": t, "rule": policy.threshold.rule.value, "flagged_rate": float(flagged.mean()),
                "sensitivity": float(flagged[y == 1].mean()) if deaths else None,
                "specificity": float((~flagged[y == 0]).mean()) if (y == 0).any() else None}
    by_ordering = {o: {"brier": metrics.augrc(metrics.selective_loss(y, cal, "brier"), m),
                       "zero_one": metrics.augrc(metrics.selective_loss(y, cal, "zero_one", t), m)}
                   for o, m in measures.items()}
    out = {"calibration": {**policy.calibration, "line": policy.calibration_line()},
           "calibrated": calibrated_metrics(cal, y, true_risk, cfg.n_bootstrap, cfg.seed),
           "decision": decision, "refer_rule": rule, "in_calibration": int(in_calibration),
           "selective": {"ordering": policy.ordering.value, "risk": "calibrated",
                         **selective_section(y, cal, u, t, cfg)},
           "augrc_by_ordering": by_ordering,
           "retention": {"ordering": policy.ordering.value,
                         **metrics.retention_curve(y, cal, u, n_bootstrap=cfg.n_bootstrap, seed=cfg.seed).to_dict()}}
    if true_risk is not None:
        out["retention_truth"] = {"ordering": policy.ordering.value, **truth_retention(true_risk, cal, u)}
    return out


def legacy_section(summary, labels, true_risk, measure, cfg) -> dict:
    """The selective sections of a run without a policy: its raw risk, ranked by its refer measure, the Brier
    loss only (it has no decision threshold)."""
    y = np.asarray(labels, dtype=np.float64)
    u = summary.measure(measure)
    m = metrics.Measure(measure).value
    out = {"calibrated": None, "selective": {"ordering": m, "risk": "raw", **selective_section(y, summary.mean, u,
                                                                                               None, cfg)},
           "retention": {"ordering": m, **metrics.retention_curve(y, summary.mean, u, n_bootstrap=cfg.n_bootstrap,
                                                                  seed=cfg.seed).to_dict()}}
    if true_risk is not None:
        out["retention_truth"] = {"ordering": m, **truth_retention(true_risk, summary.mean, u)}
    return out


def format_lines(report: dict) -> list[str]:
    """The evaluation table's lines on the policy: the calibrated ECE against its floor, the decision, the
    refer rule on this split, the selective metrics."""
    def num(v) -> str:
        return "n/a" if v is None else f"{v:.4f}"

    lines = []
    c = report.get("calibrated")
    if c:
        lines.append(f"calibrated ({report['calibration'].get('method')}): ece {num(c.get('ece'))}; a calibrated "
                     f"predictor's mean {num(c.get('ece_floor'))}, 95th percentile {num(c.get('ece_floor_p95'))}; "
                     f"P(>= observed) = {num(c.get('ece_p_value'))}; slope {num(c.get('calibration_slope'))}")
        if report.get("in_calibration"):
            lines.append(f"note: {report['in_calibration']} of these admissions are the run's calibration half "
                         "(they fitted the map and the rule)")
        d = report["decision"]
        lines.append(f"decision threshold {d['threshold']:.4g}: flags {d['flagged_rate']:.1%}, sensitivity "
                     f"{num(d.get('sensitivity'))}, specificity {num(d.get('specificity'))}")
        r = report["refer_rule"]
        true = f", from the true risk {num(r['true_kept_risk'])}" if r.get("true_kept_risk") is not None else ""
        promised = promise_words(r['risk'], r['alpha'], r['delta'], Outcome.from_dict(r.get("outcome")))
        lines.append(f"refer rule ({rule_words(r['ordering'], r['status'])}): refers {r['referral_rate']:.1%} "
                     f"here; kept miss rate {num(r.get('miss_rate'))}, kept Brier {num(r.get('brier_kept'))}{true} "
                     f"(promised: {promised})")
    sel = report.get("selective")
    if sel:
        for loss in ("brier", "zero_one"):
            v = sel.get(loss)
            if v:
                lines.append(f"selective ({loss} loss, by {sel['ordering']}): AUGRC {num(v['augrc'])} "
                             f"{_ci(v.get('augrc_ci'))}, AURC {num(v['aurc'])}, risk at 80%/90% coverage "
                             f"{num(v.get('risk_at_0.8'))}/{num(v.get('risk_at_0.9'))}, coverage at risk "
                             f"{v.get('target_risk')}: {num(v.get('coverage_at_risk'))}")
    return lines


def _ci(ci) -> str:
    if not ci or ci[0] is None:
        return ""
    return f"[{ci[0]:.4f}, {ci[1]:.4f}]"
