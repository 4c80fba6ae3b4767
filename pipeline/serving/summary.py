"""What ``score`` wrote (``ScoreSummary``: its counts, the policy it scored with, the shift check, the files) and
how the command line says it (``summary``; ``to_dict``, its JSON); ``ScoreError``, bad scoring input. The scores
file records which run scored it and under which promise (``scores_schema``: Parquet key-value metadata under
``SCORES_META``, read back by ``scores_meta``), so that ``monitor`` refuses another run's scores."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.core.errors import PipelineError
from pipeline.serving.decisions import policy_lines

SCORES_META = b"mimic_risk.scores"  # the scores file's metadata key: run_id, the promise (alpha, delta, risk), samples


class ScoreError(PipelineError, ValueError):
    """Bad scoring input; the message names the file (and column or line)."""


def scores_schema(run, policy, samples: int):
    """The risk table's Arrow schema with what scored it (``SCORES_META``: the run id, the promise of the refer flags
    it wrote, the draws per component)."""
    from pipeline.core.contracts import RISK

    settings = policy.rule.settings if policy is not None else None
    meta = {"run_id": run.run_id, "samples": int(samples),
            "promise": None if settings is None else {"alpha": settings.alpha, "delta": settings.delta,
                                                      "risk": settings.risk.value}}
    return RISK.arrow_schema().with_metadata({SCORES_META: json.dumps(meta).encode()})


def scores_meta(path: Path) -> dict | None:
    """What scored the scores file ``path`` (``scores_schema``), or None for a file written before it was recorded."""
    import pyarrow.parquet as pq

    raw = (pq.read_schema(path).metadata or {}).get(SCORES_META)
    return None if raw is None else json.loads(raw)


@dataclass
class ScoreSummary:
    """What a scoring run wrote."""

    out: Path  # the scores Parquet file
    admissions: int  # rows written
    referred: int  # rows with refer = True
    no_events: int  # rows whose admission had no events (scored on context alone)
    samples: int  # samples per component used
    components: int  # K of the model
    inputs: list[Path] = field(default_factory=list)  # feature files scored
    not_scored: int = 0  # admissions of the census with no score (listed in unscored.csv)
    before_prediction_time: int = 0  # rows whose data ended before the prediction time (partial window)
    oov_share: float | None = None  # scored across MIMIC releases (cross_release): share of out-of-vocabulary tokens
    not_scored_by: dict | None = None  # not_scored per reason (cohort.CATEGORIES); None: not known (features input)
    link_file: Path | None = None  # _private/link.csv (pseudonym -> HADM_ID), when written
    unscored_file: Path | None = None  # _private/unscored.csv (HADM_ID, reason), when written
    report: Path | None = None  # the cohort report (pseudonyms)
    private_report: Path | None = None  # the data owner's copy of the report (HADM_IDs), in _private/
    high_risk: int = 0  # rows at or above the run's decision threshold (0: the run has none)
    policy: object | None = None  # the bayes.referral.policy.Policy scored with (None: a run without calibration)
    predictions_file: Path | None = None  # MEDS: _private/predictions.parquet, meds-evaluation's schema (serving.meds)
    predictions_note: str = ""  # what the prediction file holds (probability, decision threshold), in words
    shift: object | None = None  # the shift check of the cohort (tasks.mortality.shift.CohortCheck; None: not run)
    no_policy: str | None = None  # why the run has no policy, in words (decisions.no_policy; None: it has one)

    def policy_lines(self) -> list[str]:
        """How the risks became decisions (``decisions.policy_lines``)."""
        return policy_lines(self.policy, self.high_risk, self.no_policy)

    def summary(self, cross_release: bool = False) -> str:
        """What ``cli.py score`` prints: the counts, the policy, what was not scored and why, the files written."""
        lines = [f"scores written to {self.out}: {self.admissions} admissions, {self.referred} referred, "
                 f"{self.no_events} without events, {self.samples}x{self.components} draws"
                 + (f", {self.before_prediction_time} before their prediction time (partial window)"
                    if self.before_prediction_time else "")]
        if self.shift is not None:  # the patients against the calibration admissions, before the promise
            lines.append(f"  shift check: {self.shift.sentence()}")
        lines += ["  " + line for line in self.policy_lines()]
        if self.not_scored_by is not None:
            lines.append(f"  not scored: {self.not_scored}" + (
                " (" + ", ".join(f"{k} {v}" for k, v in self.not_scored_by.items()) + ")" if self.not_scored else ""))
        if cross_release and self.oov_share is not None:
            lines.append(f"  across MIMIC releases: {self.oov_share:.1%} of the bag tokens are out of the model's "
                         "vocabulary")
        for what, path in (("report", self.report), ("link file (data owner only)", self.link_file),
                           ("unscored admissions (data owner only)", self.unscored_file),
                           ("report by HADM_ID (data owner only)", self.private_report),
                           (f"MEDS predictions (data owner only; {self.predictions_note})", self.predictions_file)):
            if path is not None:
                lines.append(f"  {what}: {path}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        """The summary as JSON (``score --json``): the counts, the promise, the shift check (``shift``), the files."""
        p = self.policy
        return {"scores": str(self.out), "admissions": self.admissions, "referred": self.referred,
                "high_risk": self.high_risk, "no_events": self.no_events,
                "before_prediction_time": self.before_prediction_time, "samples": self.samples,
                "components": self.components, "not_scored": self.not_scored, "not_scored_by": self.not_scored_by,
                "promise": None if p is None else p.sentence(), "policy_lines": self.policy_lines(),
                "shift": None if self.shift is None else self.shift.to_dict(), "oov_share": self.oov_share,
                "report": None if self.report is None else str(self.report)}
