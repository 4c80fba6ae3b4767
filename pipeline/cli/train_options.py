"""The options of ``cli.py train`` besides ``TrainConfig`` and ``MortalityConfig`` (``TrainOptions``, each
comment its help). Light (no torch): ``cli.py`` builds the command's options from it at import."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from pipeline.core.devices import DEVICE_HELP
from pipeline.tasks.mortality.baselines.config import BASELINES
from pipeline.tasks.mortality.train_config import Preset
from pipeline.tasks.mortality.variants import VARIANTS

MODEL_HELP = ("A model kind or a variant name as `compare` prints it: " + ", ".join(dict.fromkeys(["rank1", *VARIANTS]))
              + "; or a classical baseline: " + ", ".join(BASELINES) + " (settings chosen on validation; takes --seed, "
              "--threads, --refer-fraction).")  # --model's help: the names offered


@dataclass
class TrainOptions:
    """The options of ``cli.py train`` that are not training or model settings."""

    data: Path  # Features directory written by `extract` (train/val Parquet, vocab.json).
    model: str = field(default="rank1", metadata={"help": MODEL_HELP})  # a model kind, variant or baseline
    out: Path | None = None  # Checkpoint directory (default runs/train/<run id>; without tracking
        # runs/train/<model>-s<seed>).
    preset: Preset = Preset.DEFAULT  # default (minutes on 2 CPU cores) | paper (LSTM 256, 20k steps) |
        # records-research (the authors' MIMIC-III flag defaults: LSTM 256, 10k steps, N(1, 1) prior, random
        # signs, Keras init...); options below override it.
    resume: bool = field(default=False, metadata={"flags": ["--resume"]})  # Continue from OUT/last.pt (same
        # settings; max-steps may grow).
    experiment: str | None = None  # MLflow experiment [default: mimic-mortality].
    run_name: str | None = None  # MLflow run name.
    tracking: bool = True  # Log the run to MLflow (MLFLOW_TRACKING_URI, default sqlite:///mlflow.db).
    verbose: bool = field(default=False, metadata={"flags": ["--verbose", "-v"]})  # Log progress lines and stages.
    device: str | None = field(default=None, metadata={"help": DEVICE_HELP})  # the torch device
    COMMAND_OPTIONS: ClassVar[bool] = True  # offered as declared (pipeline.cli.options.command_option)

    def run_kwargs(self) -> dict:
        """The run's arguments common to ``workflows.train.train`` and ``train_baseline``."""
        return {"out_dir": self.out, "tracking": self.tracking, "experiment": self.experiment,
                "run_name": self.run_name}
