"""What a scored census's decisions rest on: the run's policy (``bayes.referral.policy.Policy``: the
recalibration map, the decision threshold, the refer rule), re-derived under the scoring run's settings, and
the words and curves ``score`` prints and the cohort report shows."""

from __future__ import annotations

from pipeline.serving.config import ScoreConfig
from pipeline.tasks.mortality import risk


def run_policy(run, cfg: ScoreConfig):
    """The run's policy (``tasks.mortality.risk.policy_of``), its refer rule re-derived under ``cfg``'s alpha, delta,
    risk, ordering and refer_group when set (settings its calibration half cannot certify: an error naming
    them); a run without one refuses them (it kept nothing to derive from)."""
    from pipeline.core.configs import invalid

    changes = cfg.referral_changes()
    if changes and not run.info.policy:
        names = [{"group": "refer_group"}.get(k, k) for k in changes]
        raise invalid(ScoreConfig, f"{', '.join(names)}: this run has no refer rule to re-derive "
                      f"({no_policy(run)})", *names)
    return risk.policy_of(run.info, strict=True, words=run.words, **changes)


def no_policy(run) -> str:
    """Why ``run`` has no policy, in words: the reason it recorded at training, else what its settings tell
    (``tasks.mortality.validation.said_no_policy``)."""
    from pipeline.tasks.mortality.validation import said_no_policy

    return said_no_policy(run.info)


def policy_lines(policy, high_risk: int, why: str | None = None) -> list[str]:
    """How the risks became decisions: the recalibration, the decision threshold (``high_risk``: the census's
    count above it), the refer rule's sentence and what the flag ranks by; for a run without a policy, that it
    has none and why (``why``: ``no_policy``'s words)."""
    if policy is None:
        return [f"no calibration: {why or 'this run records no policy'}; risk_calibrated is empty and refer is its "
                "refer measure above its validation threshold, with no promise"]
    return policy.lines(high_risk)


def policy_report(policy) -> dict:
    """The cohort report's policy entries (``report.ReportInput``): the sentence, the reason, the calibration and
    threshold lines, and the retention curve of the run's calibration admissions by its ordering ({}: none)."""
    if policy is None:
        return {}
    from pipeline.bayes.metrics.selective import retention_curve

    cal = policy.kept.get("calibration") or {}
    measure = (cal.get("measures") or {}).get(policy.ordering.value)
    retention = None
    if measure is not None and len(cal.get("labels", [])) > 1:
        curve = retention_curve(cal["labels"], cal["risk"], measure, n_bootstrap=0)
        retention = {**curve.to_dict(), "ordering": policy.ordering.value, "n": int(len(cal["labels"]))}
    return {"promise": policy.sentence(), "reason": policy.flag_words(),
            "policy_lines": [policy.calibration_line(), policy.threshold.summary()], "retention": retention}
