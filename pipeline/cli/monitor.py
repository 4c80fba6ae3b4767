"""``cli.py monitor``: a scored cohort's promise watched as its outcomes arrive (``serving.monitor.monitor``).
Options: ``MonitorOptions`` (below)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import typer

from pipeline.cli.app import command, setup_logging
from pipeline.cli.options import with_config_options
from pipeline.cli.settings import Settings

ALARM_EXIT = 3  # --fail-on-alarm's exit status while the alarm is raised (bad input exits 2)


@dataclass
class MonitorOptions:
    """The options of ``cli.py monitor`` (each comment its help)."""

    run: str  # MLflow run id (or runs:/<id>/model) that scored --scores.
    scores: Path  # The scores Parquet file `score` wrote for the run.
    outcomes: Path  # The outcomes received since the last call, by pseudonym: a CSV of key,label (0/1), or MEDS label
        # files (a Parquet file or folder: subject_id, prediction_time, boolean_value).
    state: Path | None = None  # The monitor's state file, continued by each call (default: beside --scores,
        # SCORES.monitor.json).
    json_path: Path | None = field(default=None, metadata={"flags": ["--json"]})  # Also write the report as JSON
        # (the counts, the bounds, alarm, alarm_at, the sentence) to this file.
    fail_on_alarm: bool = False  # Exit with status 3 while the alarm is raised (after the state and the JSON are
        # written), so that a scheduled job fails; default 0 (bad input: 2).
    verbose: bool = field(default=False, metadata={"flags": ["--verbose", "-v"]})  # Log each stage.
    COMMAND_OPTIONS: ClassVar[bool] = True  # offered as declared (pipeline.cli.options.command_option)


@command(short_help="Watch a scored cohort's promise as outcomes arrive.",
         on_interrupt="the state file is written whole or not at all; run the command again")
@with_config_options(MonitorOptions)
def monitor(settings: Settings = None) -> None:
    """Watch the refer rule's promise on a scored cohort as its outcomes arrive.

    Each call adds the outcomes of --outcomes to the stream of the scores' admissions (in the file's order) and
    tracks the kept miss rate (deaths neither referred nor flagged high risk, over the deaths) and the flagged
    sensitivity with anytime-valid confidence sequences. Once the miss rate's lower bound exceeds the promise at the
    run's confidence, the alarm is raised and stays: "since admission N of this stream the model misses more than
    5% of deaths on the kept admissions, with 90% confidence". Outcomes for keys the scores do not hold, a key twice,
    a key already received, or the scores of another run are refused, and nothing is written."""
    o = MonitorOptions(**settings[MonitorOptions])
    setup_logging(o.verbose)
    from pipeline.serving.monitor import monitor as run_monitor

    result = run_monitor(o.run, o.scores, o.outcomes, o.state)
    if o.json_path is not None:
        from pipeline.core import fileio

        fileio.write_json(o.json_path, result.report)
    typer.echo(result.summary())
    if o.fail_on_alarm and result.alarm:
        raise typer.Exit(ALARM_EXIT)
