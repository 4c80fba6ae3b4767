"""``cli.py score``: a census scored (``serving.score.score``). Options: ``ScoreOptions`` (below) and
``ScoreConfig``, both at a settings file's top level."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import typer

from pipeline.cli.app import command, setup_logging
from pipeline.cli.names import DEVICE_HELP, SAMPLES_SHOWN
from pipeline.cli.options import at_least, with_config_options
from pipeline.cli.settings import Settings
from pipeline.serving.config import ScoreConfig


@dataclass
class ScoreOptions:
    """The options of ``cli.py score`` besides ``ScoreConfig`` (each comment its help); ``score_kwargs()``:
    ``serving.score.score``'s keyword arguments."""

    model: str  # MLflow model URI (runs:/<id>/model) or run id.
    out: Path  # Scores Parquet file FILE.parquet (one row per admission), or a directory (DIR/scores.parquet,
        # DIR/_private/).
    data: Path | None = None  # Features Parquet file or directory (written by `extract`).
    source: str | None = None  # MIMIC-III or MIMIC-IV CSV directory or postgresql:// DSN, or a MEDS dataset
        # (extracted with the training vocabulary).
    cohort: Path | None = None  # With --source: HADM_IDs (one per line) or a SQL condition on the cohort columns.
    schema: str = "mimiciii"  # PostgreSQL schema of --source.
    cross_release: bool = field(default=False, metadata={"flags": ["--cross-release"]})  # Score features (or a
        # source) of another MIMIC release than the model's; the share of out-of-vocabulary tokens is reported.
    as_of: str | None = None  # With --source: when its data ends, 'YYYY-MM-DD HH:MM[:SS]' on its clock (default:
        # the newest ADMITTIME/DISCHTIME). Open admissions whose prediction time is later are flagged
        # before_prediction_time.
    times: Path | None = None  # With a MEDS --source: the census's prediction times, a Parquet (MEDS label schema)
        # or CSV file of subject_id and prediction_time.
    task: Path | None = None  # With a MEDS --source: an ACES task config; the census is its prediction times without
        # its label window (default, without --times: the shipped config for the dataset).
    decision_threshold: float | None = field(default=None, metadata={"min": 0.0, "max": 1.0})  # MEDS prediction
        # file: the risk at or above which predicted_boolean_value is true (default: the run's decision threshold;
        # a run without one: no predicted_boolean_value).
    report: Path | None = None  # Also write a self-contained HTML cohort report (keyed by pseudonym) to this file.
    json_path: Path | None = field(default=None, metadata={"flags": ["--json"]})  # Also write the summary as JSON to
        # this file: the counts, the promise, the shift check of the cohort against the run's calibration admissions
        # (key shift: verdict, p_value, measures and their AUROCs, sentence).
    link: bool = True  # Write the data owner's _private/ files beside --out: link.csv, unscored.csv and the
        # report by HADM_ID (MEDS: link.parquet, unscored.csv and predictions.parquet, meds-evaluation's schema).
    meds_dev_result: Path | None = None  # With --data of a MEDS-DEV task (extract --task meds-dev:TASK): also
        # score the prediction file with meds-evaluation (DIR/evaluation.json) and package it as meds-dev-pack-result
        # does, for meds-dev-validate-result (DIR/result.json).
    meds_dev_model: str | None = None  # With --meds-dev-result: the model's name in MEDS-DEV (one of its models).
    verbose: bool = field(default=False, metadata={"flags": ["--verbose", "-v"]})  # Log each stage.
    device: str | None = field(default=None, metadata={"help": DEVICE_HELP})  # the torch device
    COMMAND_OPTIONS: ClassVar[bool] = True  # offered as declared (pipeline.cli.options.command_option)

    def score_kwargs(self) -> dict:
        """``serving.score.score``'s keyword arguments besides the config (model and out go first)."""
        names = ("data", "source", "cohort", "schema", "as_of", "report", "link", "cross_release", "device", "times",
                 "task", "decision_threshold")
        return {k: getattr(self, k) for k in names}


@command(short_help="Score a census: risk, interval, refer flag, report.",
         on_interrupt="each file is written whole or not at all; run the command again")
@with_config_options(ScoreOptions, ScoreConfig, limits=at_least(1, "samples", "batch_size", "chunk_rows", "threads"),
                     shown={"samples": SAMPLES_SHOWN})
def score(settings: Settings = None) -> None:
    """Score a census: risk mean/sd/p05/p95, mutual information, refer flag per admission."""
    o = ScoreOptions(**settings[ScoreOptions])
    setup_logging(o.verbose)
    from pipeline.serving.score import score as run_score

    package = None
    if o.meds_dev_result is not None or o.meds_dev_model is not None:  # checked before anything is scored
        from pipeline.serving.meds import MedsDevResult

        package = MedsDevResult.check(o.meds_dev_result, o.meds_dev_model, o.data, o.link)
    s = run_score(o.model, o.out, cfg=ScoreConfig(**settings[ScoreConfig]), **o.score_kwargs())
    if o.json_path is not None:
        from pipeline.core import fileio

        fileio.write_json(o.json_path, s.to_dict())
    typer.echo(s.summary(o.cross_release))
    if package is not None:
        typer.echo(package.write(s.predictions_file))
