"""``cli.py benchmark-models``: every model variant x seeds x split modes trained, evaluated and compared
(``workflows.grid.run_grid``). Options: ``GridOptions`` (below) at a settings file's top level; the LSTM
variants' settings in ``[train]`` (``TrainConfig``, but the fields each job sets) and ``[model]``
(``MortalityConfig``), or ``--set`` (``--set lstm_hidden=128``, as before: a bare field name finds its table)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import typer

from pipeline.cli.app import command, setup_logging
from pipeline.cli.names import DEVICE_HELP, SAMPLES_DEFAULT
from pipeline.cli.options import SettingsFile, int_or_none, refuse_words, spread, with_config_options
from pipeline.cli.settings import Settings
from pipeline.data.mimic.sources.tables import Release
from pipeline.tasks.mortality.baselines.config import BASELINES
from pipeline.tasks.mortality.config import MortalityConfig
from pipeline.tasks.mortality.train_config import Preset, TrainConfig
from pipeline.tasks.mortality.variants import VARIANTS

BATCH_HELP = ("Training rows per step for every variant (ensembles: distinct admissions = rows / K) "
              f"[default: {TrainConfig.batch_size}, train's].")  # --batch-size's help
PER_JOB = ("seed", "max_steps", "eval_every", "threads", "progress")  # TrainConfig fields every job sets itself
SET_HELP = ("A training or model setting for every LSTM variant, KEY=VALUE (repeatable; any field of `train`'s options "
            "but those each job sets, e.g. lstm_hidden=128 or anneal_steps=500, or by the settings file's key: "
            "model.lstm_hidden=128, train.anneal_steps=500); over --config.")  # --set's help
MODELS_HELP = (f"Variants (repeatable) [default: every LSTM variant ({', '.join(VARIANTS)}), then the baselines "
               f"{' and '.join(BASELINES)} once per split].")  # --models' help: the names, not a module's
EXTRA_ARGS = {"allow_extra_args": True}  # bare words after the options reach the command (ctx.args)


@dataclass
class GridOptions:
    """The options of ``cli.py benchmark-models`` besides the LSTM variants' training and model settings
    (``--set``, a settings file's ``[train]`` and ``[model]``); ``config()``: its ``GridConfig``."""

    synth_dir: Path = field(metadata={"flags": ["--synth"]})  # Synthetic MIMIC directory (generated when missing,
        # in --layout).
    out: Path  # Output directory (features, work dirs, compare.md/csv).
    seeds: tuple[int, ...] = (0, 1, 2)  # Training seeds (repeatable).
    models: tuple[str, ...] | None = field(default=None, metadata={"help": MODELS_HELP})  # variants and baselines
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
    verbose: bool = field(default=False, metadata={"flags": ["--verbose", "-v"]})  # Log each job.
    device: str | None = field(default=None, metadata={"help": DEVICE_HELP + " Every job's training and "
                                                                             "evaluation."})  # the torch device
    COMMAND_OPTIONS: ClassVar[bool] = True  # offered as declared (pipeline.cli.options.command_option)

    def config(self, words: list[str], given: set[str], train: dict | None = None, model: dict | None = None):
        """The ``GridConfig`` of these options and the bare ``words`` after them (seeds, variants and split
        modes, spread into the options they name; anything else a ``ConfigError``); ``given``: the repeatable
        options the user gave (``seeds``, ``splits``), which the words join instead of replacing; ``train`` and
        ``model``: TrainConfig and MortalityConfig settings for every LSTM variant."""
        from pipeline.workflows.grid import MODELS, GridConfig, grid_config

        def variant(w: str) -> str | None:
            return w if w in MODELS else None

        def mode(w: str) -> str | None:
            return w if w in GridConfig.split_modes else None

        words = list(words)
        refuse_words(words, int_or_none, variant, mode)
        variants = list(self.models) if self.models else None
        return grid_config(seeds=spread(list(self.seeds), "seeds" in given, words, int_or_none),
                           variants=spread(variants, variants is not None, words, variant),
                           split_modes=spread(list(self.splits), "splits" in given, words, mode),
                           preset=self.preset, max_steps=self.max_steps, eval_every=self.eval_every,
                           batch_size=self.batch_size, train_overrides=train, model_overrides=model,
                           samples=self.samples, jobs=self.jobs, patients=self.patients, experiment=self.experiment,
                           layout=self.layout, device=self.device)


@command("benchmark-models", context_settings=EXTRA_ARGS, short_help="Train and evaluate every variant, then compare.",
         on_interrupt="the synthetic source and the features made so far are kept and reused; run the command again "
                      "(its runs start over)")
@with_config_options(GridOptions, settings_file=SettingsFile(
    sections={TrainConfig: "train", MortalityConfig: "model"}, only=(TrainConfig, MortalityConfig),
    exclude={TrainConfig: PER_JOB}, beneath="--preset", set_help=SET_HELP))
def benchmark_models(ctx: typer.Context, settings: Settings = None) -> None:
    """Train and evaluate every model variant x seeds x split modes, then write the comparison."""
    o = GridOptions(**settings[GridOptions])
    setup_logging(o.verbose)
    from pipeline.workflows.grid import run_grid

    given = settings.given_fields(GridOptions) & {"seeds", "splits"}
    result = run_grid(o.synth_dir, o.out, o.config(ctx.args, given, settings[TrainConfig], settings[MortalityConfig]))
    typer.echo((o.out / "compare.md").read_text())
    typer.echo(result.summary())
