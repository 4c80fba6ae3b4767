"""Settings of a scoring run (``ScoreConfig``: one comment per field, the CLI help) and the rest of
``cli.py score``'s options (``ScoreOptions``); torch-, numpy- and pyarrow-free, so ``cli.py`` builds
``score``'s options from them without loading them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from pipeline.core.configs import check_at_least
from pipeline.core.contracts import DEFAULT_BATCH
from pipeline.core.devices import DEVICE_HELP


@dataclass
class ScoreConfig:
    """Settings of one scoring run."""

    samples: int | None = None  # Monte Carlo samples per mixture component
    batch_size: int = DEFAULT_BATCH  # admissions per forward pass (memory grows with it; the draws depend on it)
    chunk_rows: int = 4096  # admissions read from Parquet at a time (each chunk is batched by length on its own)
    seed: int = 0  # torch seed of the weight draws (same seed, rows, chunk_rows and batch_size -> same scores)
    threads: int | None = None  # torch intra-op threads (unset: torch's default)

    def __post_init__(self) -> None:
        check_at_least(self, 1, ("batch_size", "chunk_rows", "samples"))


@dataclass
class ScoreOptions:
    """The options of ``cli.py score`` besides ``ScoreConfig`` (each comment its help); ``score_kwargs()``:
    ``serving.score.score``'s keyword arguments."""

    model: str  # MLflow model URI (runs:/<id>/model) or run id.
    out: Path  # Scores Parquet file FILE.parquet (one row per admission), or a directory (DIR/scores.parquet,
        # DIR/_private/).
    data: Path | None = None  # Features Parquet file or directory (written by `extract`).
    source: str | None = None  # MIMIC-III or MIMIC-IV CSV directory or postgresql:// DSN (extracted with the
        # training vocabulary).
    cohort: Path | None = None  # With --source: HADM_IDs (one per line) or a SQL condition on the cohort columns.
    schema: str = "mimiciii"  # PostgreSQL schema of --source.
    cross_release: bool = field(default=False, metadata={"flags": ["--cross-release"]})  # Score features (or a
        # source) of another MIMIC release than the model's; the share of out-of-vocabulary tokens is reported.
    as_of: str | None = None  # With --source: when its data ends, 'YYYY-MM-DD HH:MM[:SS]' on its clock (default:
        # the newest ADMITTIME/DISCHTIME). Open admissions whose prediction time is later are flagged
        # before_prediction_time.
    report: Path | None = None  # Also write a self-contained HTML cohort report (keyed by pseudonym) to this file.
    link: bool = True  # Write the data owner's _private/ files beside --out: link.csv, unscored.csv and the
        # report by HADM_ID.
    verbose: bool = field(default=False, metadata={"flags": ["--verbose", "-v"]})  # Log each stage.
    device: str | None = field(default=None, metadata={"help": DEVICE_HELP})  # the torch device
    COMMAND_OPTIONS: ClassVar[bool] = True  # offered as declared (pipeline.cli.options.command_option)

    def score_kwargs(self) -> dict:
        """``serving.score.score``'s keyword arguments besides the config (model and out go first)."""
        names = ("data", "source", "cohort", "schema", "as_of", "report", "link", "cross_release", "device")
        return {k: getattr(self, k) for k in names}
