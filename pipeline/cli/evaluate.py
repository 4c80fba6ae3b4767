"""``cli.py evaluate``: a trained run's splits evaluated (``workflows.evaluate.evaluate_run``). Options:
``EvalOptions`` (below) and ``EvalConfig``, both at a settings file's top level."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import typer

from pipeline.cli.app import command, setup_logging
from pipeline.cli.names import DEVICE_HELP, SAMPLES_SHOWN
from pipeline.cli.options import at_least, with_config_options
from pipeline.cli.settings import Settings
from pipeline.core.configs import invalid
from pipeline.workflows.evaluate_config import EvalConfig, Split


@dataclass
class EvalOptions:
    """The options of ``cli.py evaluate`` besides ``EvalConfig`` (each comment its help)."""

    run: str  # MLflow run id (or runs:/<id>/model).
    split: tuple[Split, ...] = (Split.TEST,)  # Split(s) to evaluate: val | test (repeatable).
    data: Path | None = None  # Features directory (default: the one the run was trained on).
    truth: Path | None = None  # True risk CSV (HADM_ID, TRUE_RISK) (default: SOURCE/_truth/truth.csv.gz when
        # present).
    json_path: Path | None = field(default=None, metadata={"flags": ["--json"]})  # Metrics JSON (one split only)
        # (default: OUT/<split>/metrics.json).
    out: Path | None = None  # Directory for JSON and plots (default: runs/eval/<run id>).
    verbose: bool = field(default=False, metadata={"flags": ["--verbose", "-v"]})  # Log each stage.
    device: str | None = field(default=None, metadata={"help": DEVICE_HELP})  # the torch device
    COMMAND_OPTIONS: ClassVar[bool] = True  # offered as declared (pipeline.cli.options.command_option)

    def __post_init__(self) -> None:
        if self.json_path is not None and len(self.split) > 1:  # a split given twice too
            raise invalid(self, "json_path names one file: give a single split", "json_path", "split")
        self.split = tuple(dict.fromkeys(Split(s) for s in self.split))  # each split once, in order


@command(short_help="Evaluate a run: NLL, AUC-PR, ECE, intervals, plots.",
         on_interrupt="run the command again: it writes the evaluation anew")
@with_config_options(EvalOptions, EvalConfig, rename={"log_to_run": "log_run"},
                     flags={"log_to_run": ["--log/--no-log"]}, shown={"samples": SAMPLES_SHOWN},
                     limits={**at_least(1, "samples", "batch_size", "threads"), **at_least(0, "n_bootstrap")})
def evaluate(settings: Settings = None) -> None:
    """Evaluate a trained run: NLL, AUC-PR, AUC-ROC, ECE, Brier, uncertainty, 95% CIs, plots."""
    o = EvalOptions(**settings[EvalOptions])
    setup_logging(o.verbose)
    from pipeline.workflows.evaluate import evaluate_run

    cfg = EvalConfig(**settings[EvalConfig])
    for s in o.split:
        typer.echo(evaluate_run(o.run, s.value, cfg, data=o.data, truth=o.truth, json_path=o.json_path,
                                out_dir=(o.out / s.value) if o.out else None, device=o.device).summary())
