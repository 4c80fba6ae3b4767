"""Settings of the image benchmarks' training and evaluation (torch-free: the command line builds its
options from these fields, one per field, the comment its help)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import Enum
from pathlib import Path
from typing import Any, ClassVar

from pipeline.bayes.layers.options import NllMode
from pipeline.core.configs import check_at_least, check_choice, config_dict
from pipeline.core.devices import DEVICE_HELP
from pipeline.core.errors import ConfigError
from pipeline.tasks.vision.model_config import Method, VisionConfig


class Dataset(str, Enum):
    """Image datasets (read from local files; nothing is downloaded)."""

    DIGITS = "digits"  # scikit-learn's bundled 1,797 handwritten 8x8 digits, upsampled
    CIFAR10 = "cifar10"  # CIFAR-10 python batches (cifar-10-batches-py)
    CIFAR100 = "cifar100"  # CIFAR-100 python files (cifar-100-python), fine labels


DATASETS = {Dataset.DIGITS: (10, 1), Dataset.CIFAR10: (10, 3), Dataset.CIFAR100: (100, 3)}  # classes, channels

# Defaults of the fields left None, per dataset: digits takes the digits benchmark's settings
# (experiments/vision_digits.py: WRN-10-1 at 16x16, 20 epochs, 64 tiled rows), CIFAR the published ones.
DATASET_DEFAULTS: dict[Dataset, dict[str, Any]] = {
    Dataset.DIGITS: {"epochs": 20.0, "batch_size": 64, "eval_samples": 2, "eval_every_epochs": 5.0},
    Dataset.CIFAR10: {"epochs": 250.0, "batch_size": 512, "eval_samples": 1, "eval_every_epochs": 0.0},
    Dataset.CIFAR100: {"epochs": 250.0, "batch_size": 512, "eval_samples": 1, "eval_every_epochs": 0.0},
}
DATASET_MODEL_DEFAULTS: dict[Dataset, dict[str, Any]] = {Dataset.DIGITS: {"depth": 10, "width": 1}}  # under ``model``
# uncertainty-baselines' recipe per method (baselines/cifar/{rank1_bnn,batchensemble,deterministic}.py flags;
# the deep ensemble is K deterministic runs): docs/vision.md lists the lines.
RANK1_RECIPE = {"l2": 1e-4, "lr_decay_epochs": (80.0, 160.0, 180.0), "fast_weight_lr_multiplier": 1.0}
DETERMINISTIC_RECIPE = {"l2": 2e-4, "lr_decay_epochs": (60.0, 120.0, 160.0), "fast_weight_lr_multiplier": 1.0}
METHOD_RECIPES: dict[Method, dict[str, Any]] = {
    Method.RANK1: RANK1_RECIPE,
    Method.BATCHENSEMBLE: {**RANK1_RECIPE, "l2": 3e-4, "fast_weight_lr_multiplier": 0.5},
    Method.DETERMINISTIC: DETERMINISTIC_RECIPE,
    Method.DEEP_ENSEMBLE: DETERMINISTIC_RECIPE,
}
CIFAR_DETERMINISTIC_EPOCHS = 200.0  # baselines/cifar/utils.py train_epochs (rank-1 and BatchEnsemble set 250)
KL_ANNEAL_SHARE = 0.8  # published: KL annealed over 200 of 250 epochs


@dataclass
class VisionTrainConfig:
    """Training settings; ``model`` holds VisionConfig overrides (classes and channels come from the data)."""

    dataset: Dataset = Dataset.DIGITS  # digits | cifar10 | cifar100
    data_dir: str | None = None  # CIFAR python batch directory (cifar-10-batches-py, cifar-100-python)
    image_size: int = 16  # digits: side after bilinear upsampling from 8x8 (CIFAR is 32)
    val_fraction: float = 0.0  # CIFAR: training share held out for validation (0: validate on test)
    seed: int = 0  # seeds the digits split, initialisation, batch order, augmentation and weight draws
    model: dict[str, Any] = field(default_factory=dict)  # VisionConfig overrides, e.g. {"depth": 16, "width": 4}
    epochs: float | None = None  # passes over the training set (None: digits 20; CIFAR 250, deterministic 200)
    batch_size: int | None = None  # tiled rows per step, batch_size // K distinct (None: digits 64, CIFAR 512)
    base_lr: float = 0.1  # SGD learning rate at 128 distinct images per step, scaled linearly (published)
    momentum: float = 0.9  # Nesterov momentum (published: one_minus_momentum 0.1)
    lr_warmup_epochs: float = 1.0  # linear warm-up of the learning rate (published: 1)
    lr_decay_epochs: tuple[float, ...] | None = None  # decays per 200 epochs (None: 80/160/180,
        # deterministic 60/120/160)
    lr_decay_ratio: float = 0.2  # factor at each decay point (published: 0.2)
    l2: float | None = None  # factor of model.l2_penalty() (None: rank1 1e-4, batchensemble 3e-4, deterministic 2e-4)
    fast_weight_lr_multiplier: float | None = None  # lr factor of rank-1 factors, member biases (None:
        # batchensemble 0.5)
    kl_anneal_epochs: float | None = None  # KL weight min(1, step / (this · steps/epoch)) (None: 0.8 · epochs)
    nll: NllMode = NllMode.AVERAGE  # average: mean over the S·K·B rows (published) | mixture: -log mean_d p_d(y)
    train_samples: int = 1  # Monte Carlo samples per component in a step (published: 1)
    clip: float = 0.0  # global gradient-norm clip (0: off, as published)
    augment: bool | None = None  # random 2-px-padded crop + horizontal flip; None: CIFAR on (published), digits off
    eval_every_epochs: float | None = None  # validate every this many epochs (0: at the end; None: digits 5, CIFAR 0)
    eval_samples: int | None = None  # samples per component in validation, the run's evaluation (None: digits 2,
        # CIFAR 1)
    eval_batch_size: int = 32  # images per evaluation forward pass (x S·K rows; small passes stay in cache)
    log_every: int = 50  # log loss / NLL / KL / lr every this many steps
    threads: int | None = None  # torch intra-op threads (None: torch's default)
    device: str | None = None  # torch device: cpu, cuda or cuda:N (None: cuda when available, else cpu)
    progress: bool = True  # a bar on a terminal (epoch, loss, validation accuracy, time left), else a line every 5%
    NOT_CLI: ClassVar[tuple[str, ...]] = ("model", "lr_decay_epochs")  # set in Python (the model's: its own options)

    def __post_init__(self) -> None:
        check_choice(self, "dataset", Dataset)
        check_choice(self, "nll", NllMode)
        known = {f.name for f in fields(VisionConfig)}
        unknown = sorted(set(self.model) - known)
        if unknown:
            raise ConfigError(f"unknown model setting(s) {unknown}; the model's settings are {sorted(known)}")
        self._resolve_defaults()
        check_at_least(self, 1, ("batch_size", "train_samples", "eval_samples", "eval_batch_size", "log_every",
                                 "image_size", "threads"))
        if not self.epochs > 0 or self.base_lr <= 0 or self.l2 < 0 or self.clip < 0 or self.kl_anneal_epochs < 0:
            raise ConfigError("--epochs and --base-lr must be > 0; --l2, --clip, --kl-anneal-epochs >= 0")
        if not self.fast_weight_lr_multiplier >= 0:
            raise ConfigError(f"--fast-weight-lr-multiplier must be >= 0, got {self.fast_weight_lr_multiplier}")
        if self.dataset is not Dataset.DIGITS and self.data_dir is None:
            raise ConfigError(f"--data-dir is required for --dataset {self.dataset.value} (nothing is downloaded)")
        self.lr_decay_epochs = tuple(float(e) for e in self.lr_decay_epochs)

    def _resolve_defaults(self) -> None:
        """Fill the None fields: the method's recipe (METHOD_RECIPES), then the dataset's (DATASET_DEFAULTS);
        the dataset's model settings go under ``model`` unless given there."""
        self.model = {**DATASET_MODEL_DEFAULTS.get(self.dataset, {}), **self.model}
        try:
            method = Method(self.model.get("method", VisionConfig.method))
        except ValueError:
            raise ConfigError(f"VisionConfig.method must be one of {[m.value for m in Method]}, got "
                              f"{self.model.get('method')!r}") from None
        defaults = {**DATASET_DEFAULTS[self.dataset], **METHOD_RECIPES[method]}
        if self.dataset is not Dataset.DIGITS and method in (Method.DETERMINISTIC, Method.DEEP_ENSEMBLE):
            defaults["epochs"] = CIFAR_DETERMINISTIC_EPOCHS
        for name, value in defaults.items():
            if getattr(self, name) is None:
                setattr(self, name, value)
        if self.kl_anneal_epochs is None:
            self.kl_anneal_epochs = KL_ANNEAL_SHARE * self.epochs

    def model_config(self) -> VisionConfig:
        """VisionConfig of the overrides with the dataset's classes and channels."""
        classes, channels = DATASETS[self.dataset]
        return VisionConfig(**{**self.model, "num_classes": classes, "in_channels": channels})

    def to_dict(self) -> dict:
        """JSON-able settings (enums as their values): what checkpoints and runs record."""
        d = config_dict(self)
        d["lr_decay_epochs"] = list(self.lr_decay_epochs)
        return d


@dataclass
class VisionEvalConfig:
    """Settings of one evaluation of a vision run (clean test images and corruptions)."""

    samples: int | None = None  # samples per component (S; S·K draws) (None: the run's eval_samples / score_samples)
    corruptions: tuple[str, ...] = ()  # corruptions to score at every severity (empty: clean only)
    severities: tuple[int, ...] = (1, 2, 3, 4, 5)  # severities of each corruption
    cifar_c: str | None = None  # CIFAR-10-C directory: corrupted images from its .npy files instead of generated
    batch_size: int = 32  # images per forward pass (x S·K rows)
    seed: int = 0  # seed of the weight draws (the same draws for every set)
    corruption_seed: int = 0  # seed of the generated corruptions' noise
    threads: int | None = None  # torch intra-op threads (None: torch's default)
    device: str | None = None  # torch device: cpu, cuda or cuda:N (None: cuda when available, else cpu)
    log_to_run: bool = True  # log metrics, the report and the plot to the MLflow run
    progress: bool = True  # progress: a bar on a terminal (sets scored, time left), else a plain line every 5%
    OPTION_NAMES: ClassVar[dict[str, str]] = {"corruptions": "corruption", "severities": "severity",
                                              "log_to_run": "log"}

    def __post_init__(self) -> None:
        from pipeline.data.images.corruptions import CORRUPTIONS, SEVERITIES

        self.corruptions, self.severities = tuple(self.corruptions), tuple(int(s) for s in self.severities)
        check_at_least(self, 1, ("samples", "batch_size", "threads"))
        bad = [c for c in self.corruptions if c not in CORRUPTIONS and self.cifar_c is None]
        if bad:
            raise ConfigError(f"unknown corruption(s) {bad}; choose from {list(CORRUPTIONS)} (or any file of a "
                              "CIFAR-10-C directory with --cifar-c)")
        if len(set(self.corruptions)) != len(self.corruptions):
            raise ConfigError(f"--corruption named twice: {list(self.corruptions)}")
        wrong = [s for s in self.severities if s not in SEVERITIES]
        if wrong or not self.severities:
            raise ConfigError(f"--severity must be some of {list(SEVERITIES)}, got {list(self.severities)}")


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


__all__ = ["DATASETS", "DATASET_DEFAULTS", "DATASET_MODEL_DEFAULTS", "METHOD_RECIPES", "Dataset", "VisionEvalConfig",
           "VisionEvalOptions", "VisionTrainConfig"]
