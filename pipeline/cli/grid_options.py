"""The options of ``cli.py benchmark-models`` (``GridOptions``, each comment its help), read into the grid's
``GridConfig`` by ``grid.grid_config``. Light: ``cli.py`` builds the command's options from it at import."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from pipeline.core.contracts import SAMPLES_DEFAULT
from pipeline.core.devices import DEVICE_HELP
from pipeline.data.mimic.sources.tables import Release
from pipeline.tasks.mortality.train_config import Preset, TrainConfig

BATCH_HELP = ("Training rows per step for every variant (ensembles: distinct admissions = rows / K) "
              f"[default: {TrainConfig.batch_size}, train's].")  # --batch-size's help


@dataclass
class GridOptions:
    """The options of ``cli.py benchmark-models``; ``config()``: its ``GridConfig``."""

    synth_dir: Path = field(metadata={"flags": ["--synth"]})  # Synthetic MIMIC directory (generated when missing,
        # in --layout).
    out: Path  # Output directory (features, work dirs, compare.md/csv).
    seeds: tuple[int, ...] = (0, 1, 2)  # Training seeds (repeatable).
    models: tuple[str, ...] | None = None  # Variants (repeatable) (default: every variant of
        # pipeline.tasks.mortality.variants, then the baselines logreg and gbm, once per split).
    splits: tuple[str, ...] = ("random", "era")  # Feature split modes (repeatable).
    max_steps: int | None = field(default=None, metadata={"min": 1})  # Training steps per run [default: the
        # preset's (records-research 10,000, paper 20,000), else 1000: about 1 minute per run with --jobs 2 on 2
        # cores].
    eval_every: int | None = field(default=None, metadata={"min": 1})  # Periodic validation interval [default:
        # the preset's, else 250].
    samples: int | None = field(default=None, metadata={"min": 1, "help": "Evaluation samples per component "
                                                                          f"{SAMPLES_DEFAULT}."})  # --samples
    jobs: int = field(default=2, metadata={"min": 1})  # Parallel worker processes (one torch thread each).
    patients: int = field(default=2000, metadata={"min": 1})  # Synthetic patients if the source is generated.
    layout: Release = Release.mimic3  # Layout of a generated source (mimic-iv: the era split is by
        # anchor_year_group).
    experiment: str = "benchmark-models"  # MLflow experiment of the grid.
    batch_size: int | None = field(default=None, metadata={"min": 1, "help": BATCH_HELP})  # rows per step
    preset: Preset = Preset.DEFAULT  # Training preset of the LSTM variants; --max-steps, --eval-every and --set
        # win.
    set_: tuple[str, ...] | None = field(default=None, metadata={"flags": ["--set"]})  # A training or model
        # setting for every LSTM variant, FIELD=VALUE (repeatable; any field of `train`'s options, e.g.
        # lstm_hidden=128 or anneal_steps=500).
    verbose: bool = field(default=False, metadata={"flags": ["--verbose", "-v"]})  # Log each job.
    device: str | None = field(default=None, metadata={"help": DEVICE_HELP + " Every job's training and "
                                                                             "evaluation."})  # the torch device
    COMMAND_OPTIONS: ClassVar[bool] = True  # offered as declared (pipeline.cli.options.command_option)

    def config(self, words: list[str], given: set[str]):
        """The ``GridConfig`` of these options and the bare ``words`` after them; ``given``: the repeatable
        options the user gave (``seeds``, ``splits``), which the words join instead of replacing."""
        from pipeline.workflows.grid import grid_config

        return grid_config(words, seeds=list(self.seeds), seeds_given="seeds" in given,
                           variants=list(self.models) if self.models else None, split_modes=list(self.splits),
                           splits_given="splits" in given, preset=self.preset, max_steps=self.max_steps,
                           eval_every=self.eval_every, batch_size=self.batch_size, settings=list(self.set_ or []),
                           samples=self.samples, jobs=self.jobs, patients=self.patients,
                           experiment=self.experiment, layout=self.layout, device=self.device)
