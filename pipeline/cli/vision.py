"""``cli.py vision train`` and ``vision evaluate``: the image benchmarks (``workflows.vision_run``). Train's options
are ``VisionTrainConfig``'s (a settings file's ``[train]``) and ``VisionConfig``'s (``[model]``); evaluate's are
``VisionEvalOptions`` (below), read as a ``VisionEvalConfig``."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import ClassVar, Optional

import typer

from pipeline.cli.app import command, setup_logging, vision_app
from pipeline.cli.names import DEVICE_HELP
from pipeline.cli.options import SettingsFile, with_config_options
from pipeline.cli.settings import Settings
from pipeline.core.errors import PipelineError
from pipeline.tasks.vision.config import DATASET_MODEL_DEFAULTS, Dataset, VisionEvalConfig, VisionTrainConfig
from pipeline.tasks.vision.model_config import VisionConfig

DIGITS_MODEL_DEFAULTS = DATASET_MODEL_DEFAULTS[Dataset.DIGITS]  # said in the help of --depth / --width


class CorruptionChoice(str, Enum):
    """A generated corruption, as ``--corruption`` offers it (``corruptions.CORRUPTIONS``)."""

    gaussian_noise = "gaussian_noise"  # additive Gaussian noise
    shot_noise = "shot_noise"  # Poisson noise
    defocus_blur = "defocus_blur"  # a disk blur
    contrast = "contrast"  # contrast towards the mean
    rotation = "rotation"  # a rotation


@dataclass
class VisionEvalOptions:
    """The options of ``cli.py vision evaluate`` (each comment its help); ``config()``: its ``VisionEvalConfig``."""

    run: str  # Vision run id (or runs:/<id>), a Laplace run of one, or a model.pt file.
    corruptions: bool = field(default=False, metadata={"flags": ["--corruptions/--clean-only"]})  # Also score
        # every corruption at every severity.
    corruption: tuple[CorruptionChoice, ...] | None = None  # Only this corruption (repeatable; implies
        # --corruptions).
    severity: tuple[int, ...] | None = field(default=None, metadata={"min": 1, "max": 5})  # Only this severity
        # (repeatable) [default: 1..5].
    cifar_c: Path | None = None  # CIFAR-10-C directory: corrupted test images from its <corruption>.npy files
        # (every file, or those of --corruption) instead of generated.
    samples: int | None = field(default=None, metadata={"min": 1})  # Samples per component (S·K draws)
        # [default: the run's eval-samples].
    data_dir: Path | None = None  # CIFAR directory (default: the one the run was trained on).
    batch_size: int = field(default=32, metadata={"min": 1})  # Images per forward pass (x S·K rows).
    seed: int = 0  # Seed of the weight draws.
    corruption_seed: int = 0  # Seed of the generated corruptions' noise.
    device: str | None = field(default=None, metadata={"help": DEVICE_HELP})  # the torch device
    threads: int | None = field(default=None, metadata={"min": 1})  # Torch intra-op threads.
    out: Path | None = None  # Directory for metrics.json and severity.png (default runs/eval/<run id>/test).
    log_run: bool = field(default=True, metadata={"flags": ["--log/--no-log"]})  # Log metrics and plots to the
        # MLflow run.
    progress: bool = True  # Progress on stderr: a bar on a terminal, a plain line every 5% otherwise.
    verbose: bool = field(default=False, metadata={"flags": ["--verbose", "-v"]})  # Log each stage.
    COMMAND_OPTIONS: ClassVar[bool] = True  # offered as declared (pipeline.cli.options.command_option)

    def config(self) -> VisionEvalConfig:
        """The evaluation settings: the corruptions named (every one with --corruptions or --severity, unless
        a CIFAR-10-C directory gives them), the severities (default 1..5)."""
        from pipeline.data.images.corruptions import CORRUPTIONS

        names = tuple(dict.fromkeys(getattr(c, "value", c) for c in self.corruption or ()))
        if not names and (self.corruptions or self.severity) and self.cifar_c is None:
            names = CORRUPTIONS
        return VisionEvalConfig(samples=self.samples, corruptions=names,
                                severities=tuple(self.severity or (1, 2, 3, 4, 5)),
                                cifar_c=str(self.cifar_c) if self.cifar_c else None, batch_size=self.batch_size,
                                seed=self.seed, corruption_seed=self.corruption_seed, threads=self.threads,
                                device=self.device, log_to_run=self.log_run, progress=self.progress)


def resolved(settings: Settings) -> dict[type, dict]:
    """The dataset's and the method's recipe beneath the user's settings (``--print-config``'s commented values);
    none where the settings do not make a config."""
    try:
        cfg = VisionTrainConfig(**settings[VisionTrainConfig], model=dict(settings[VisionConfig]))
        model = cfg.model_config()
    except PipelineError:
        return {}
    return {VisionTrainConfig: {k: getattr(cfg, k) for k in cfg.__dataclass_fields__},
            VisionConfig: {k: getattr(model, k) for k in model.__dataclass_fields__}}


@command("train", on=vision_app, short_help="Train an image model, log it to MLflow, print its run id.",
         on_interrupt="the run it started is marked KILLED; run the command again")
@with_config_options(VisionTrainConfig, VisionConfig,
                     notes={(VisionConfig, k): f"digits: {v}" for k, v in DIGITS_MODEL_DEFAULTS.items()},
                     settings_file=SettingsFile(sections={VisionTrainConfig: "train", VisionConfig: "model"},
                                                baseline=resolved, beneath="the dataset's and the method's recipe",
                                                example="model.depth=16 or train.epochs=5"))
def vision_train(
    out: Optional[Path] = typer.Option(None, help="Directory of model.pt and model_info.json (default "
                                                  "runs/vision/<run id>)."),
    experiment: Optional[str] = typer.Option(None, help="MLflow experiment [default: vision]."),
    run_name: Optional[str] = typer.Option(None, help="MLflow run name [default: <method>-<dataset>-s<seed>]."),
    tracking: bool = typer.Option(True, "--tracking/--no-tracking", help="Log the run to MLflow "
                                                                         "(MLFLOW_TRACKING_URI, default "
                                                                         "sqlite:///mlflow.db)."),
    resume: bool = typer.Option(False, "--resume", help="Continue from OUT/last.pt (same settings), written at "
                                                        "every validation (--eval-every-epochs)."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log each stage."),
    settings: Settings | None = None,
) -> None:
    """Train an image model (WRN or ResNet-50; deterministic, BatchEnsemble, rank-1 or deep ensemble) with the
    published recipe, log it to MLflow and print its run id. Defaults per dataset: digits the digits
    benchmark's settings (WRN-10-1 at 16x16, 20 epochs, 64 tiled rows: minutes on a CPU), cifar10/cifar100
    the published CIFAR ones (WRN-28-10, 250 epochs, 512 rows); per method uncertainty-baselines' recipe
    (L2, learning-rate decays, BatchEnsemble's N(1, 0.5) fast weights at half the learning rate). Progress
    on stderr: a bar on a terminal, a plain line every 5% otherwise (docs/vision.md)."""
    setup_logging(verbose)
    from pipeline.workflows.vision_run import train_run

    cfg = VisionTrainConfig(**settings[VisionTrainConfig], model=settings[VisionConfig])
    r = train_run(cfg, out_dir=out, tracking=tracking, experiment=experiment, run_name=run_name, resume=resume)
    settings.record(r.run_id, r.out_dir)
    res, val = r.result, r.result.val_metrics
    typer.echo(f"{r.label} on {cfg.dataset.value}: steps={res.steps} ({res.seconds:.0f} s) val_nll={val['nll']:.4f} "
               f"val_accuracy={val['accuracy']:.4f} val_ece={val['ece']:.4f} checkpoint={res.checkpoint}")
    typer.echo(f"run_id: {r.run_id}" if r.run_id else "run_id: none (tracking off)")


@command("evaluate", on=vision_app, short_help="Evaluate a vision run on clean and corrupted test images.")
@with_config_options(VisionEvalOptions)
def vision_evaluate(settings: Settings = None) -> None:
    """Evaluate a vision run: NLL of the mixture over S·K draws, accuracy, top-label ECE, diversity and MI on
    the clean test split and (with --corruptions) five corruptions x five severities, with a PNG of each
    metric against the severity."""
    o = VisionEvalOptions(**settings[VisionEvalOptions])
    setup_logging(o.verbose)
    from pipeline.workflows.vision_run import evaluate_vision_run, format_report

    result = evaluate_vision_run(o.run, o.config(), data_dir=o.data_dir, out_dir=o.out)
    typer.echo(format_report(result.report))
    typer.echo(f"metrics: {result.json_path}" + (f"\nplot: {result.plot}" if result.plot else ""))
