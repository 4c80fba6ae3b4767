"""Settings of an evaluation (``EvalConfig``: one comment per field, the CLI help), the split it reads
and the rest of ``cli.py evaluate``'s options (``EvalOptions``); torch- and numpy-free, so ``cli.py``
builds its options from them without loading either."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import ClassVar

from pipeline.core.configs import check_at_least
from pipeline.core.contracts import DEFAULT_BATCH
from pipeline.core.devices import DEVICE_HELP
from pipeline.core.errors import ConfigError


class Split(str, Enum):
    """Feature split evaluated."""

    VAL = "val"
    TEST = "test"


@dataclass
class EvalConfig:
    """Settings of one evaluation."""

    samples: int | None = None  # Monte Carlo samples per mixture component (S·K draws in all)
    batch_size: int = DEFAULT_BATCH  # admissions per forward pass (memory grows with it; the draws depend on it)
    n_bootstrap: int = 1000  # bootstrap resamples for the 95% intervals (0: none)
    seed: int = 0  # torch seed of the weight draws and numpy seed of the bootstrap
    threads: int | None = None  # torch intra-op threads (unset: torch's default)
    log_to_run: bool = True  # log metrics, tag and artifacts to the MLflow run
    OPTION_NAMES: ClassVar[dict[str, str]] = {"n_bootstrap": "bootstrap", "log_to_run": "log"}  # evaluate's names

    def __post_init__(self) -> None:
        check_at_least(self, 1, ("samples", "batch_size", "threads"))
        check_at_least(self, 0, ("n_bootstrap",))


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
            raise ConfigError("--json names one file: give a single --split")
        self.split = tuple(dict.fromkeys(Split(s) for s in self.split))  # each split once, in order
