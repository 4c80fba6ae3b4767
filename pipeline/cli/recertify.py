"""``cli.py recertify``: a run's promise re-certified for a new period, as a new run pointing at its parent
(``workflows.recertify.recertify_run``). Options: ``RecertifyOptions`` (below) and ``RecertifyConfig``."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import typer

from pipeline.cli.app import command, setup_logging
from pipeline.cli.names import DEVICE_HELP, SAMPLES_SHOWN
from pipeline.cli.options import at_least, with_config_options
from pipeline.cli.settings import Settings
from pipeline.workflows.recertify import RecertifyConfig


@dataclass
class RecertifyOptions:
    """The options of ``cli.py recertify`` besides ``RecertifyConfig`` (each comment its help)."""

    run: str  # MLflow run id (or runs:/<id>/model) whose promise is re-certified.
    data: Path | None = None  # Features of the new period (a Parquet file or a features directory, MIMIC or MEDS)
        # in the run's vocabulary, with their outcomes (column label) unless --labels gives them.
    source: str | None = None  # Instead of --data: a MIMIC-III/IV source (its outcomes extracted with it) or a MEDS
        # dataset (its outcomes from --labels), extracted with the run's vocabulary as score --source does.
    labels: Path | None = None  # The new admissions' outcomes by pseudonym: a CSV of key,label (0/1), or MEDS label
        # files (a Parquet file or folder). Admissions without one are left out and counted.
    cohort: Path | None = None  # With a MIMIC --source: HADM_IDs (one per line) or a SQL condition on the cohort
        # columns.
    schema: str = "mimiciii"  # PostgreSQL schema of --source.
    as_of: str | None = None  # With a MIMIC --source: when its data ends, 'YYYY-MM-DD HH:MM[:SS]' on its clock.
    times: Path | None = None  # With a MEDS --source: the prediction times (subject_id, prediction_time).
    task: Path | None = None  # With a MEDS --source: an ACES task config whose prediction times make the census.
    run_data: Path | None = None  # With --weighted: the run's training features, for its validation selection half
        # (default: the folder the run was trained on).
    out: Path | None = None  # Directory of the new run's files (default: runs/recertify/<new run id>).
    experiment: str | None = None  # MLflow experiment of the new run (default: the parent run's).
    verbose: bool = field(default=False, metadata={"flags": ["--verbose", "-v"]})  # Log each stage.
    device: str | None = field(default=None, metadata={"help": DEVICE_HELP})  # the torch device
    COMMAND_OPTIONS: ClassVar[bool] = True  # offered as declared (pipeline.cli.options.command_option)

    def kwargs(self) -> dict:
        """``workflows.recertify.recertify_run``'s keyword arguments besides the run and the config."""
        names = ("data", "source", "labels", "cohort", "schema", "as_of", "times", "task", "run_data", "experiment",
                 "device")
        return {**{k: getattr(self, k) for k in names}, "out_dir": self.out}


@command(short_help="Re-certify a run's promise for a new period: a new run.",
         on_interrupt="nothing was recorded unless the new run's id was printed; run the command again")
@with_config_options(RecertifyOptions, RecertifyConfig, shown={"samples": SAMPLES_SHOWN},
                     limits={**at_least(1, "samples", "batch_size", "threads"), "max_weight": {"min": 1.0},
                             "alpha": {"min": 0.0, "max": 1.0}, "delta": {"min": 0.0, "max": 1.0}})
def recertify(settings: Settings = None) -> None:
    """Re-certify a run's refer rule for a new period without retraining.

    On labelled admissions of the new period (--data, or --source; outcomes from the features or --labels) the
    recalibration map and the refer rule are refitted (the decision threshold too with --refit-threshold). Without
    outcomes, --weighted re-weights the run's calibration half towards the new admissions: valid under covariate
    shift only (the patients differ in their features, not in how those features relate to the outcome). A set too
    small for --alpha and --delta is refused with the size it needs. Few deaths certify little: with 107 deaths a cut
    may miss at most 2 of them at --alpha 0.05 and --delta 0.1, so the rule keeps far fewer admissions than the
    best cut of the ranking would; the command says what more outcomes would buy (in the study's synthetic world,
    1,000 labelled admissions kept 17% where the best cut keeps 29%, and the test needs about 4,600 to come within 5
    points of it: docs/referral.md). The result is a new MLflow run whose parent is the run (tags mlflow.parentRunId and
    recertified_from); score it to apply the new promise."""
    o = RecertifyOptions(**settings[RecertifyOptions])
    setup_logging(o.verbose)
    from pipeline.workflows.recertify import recertify_run

    result = recertify_run(o.run, cfg=RecertifyConfig(**settings[RecertifyConfig]), **o.kwargs())
    typer.echo(result.summary())
