"""Settings of the image benchmarks' training and evaluation (torch-free: the command line builds its
options from these fields, one per field, the comment its help)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any

from pipeline.bayes.layers.options import NllMode
from pipeline.core.configs import check_at_least, check_choice, config_dict, invalid
from pipeline.core.errors import ConfigError
from pipeline.tasks.vision.model_config import Method, VisionConfig


class Dataset(str, Enum):
    """Image datasets (read from local files; nothing is downloaded)."""

    DIGITS = "digits"  # scikit-learn's bundled 1,797 handwritten 8x8 digits, upsampled
    CIFAR10 = "cifar10"  # CIFAR-10 python batches (cifar-10-batches-py)
    CIFAR100 = "cifar100"  # CIFAR-100 python files (cifar-100-python), fine labels


class Precision(str, Enum):
    """Arithmetic of the training step."""

    FP32 = "fp32"  # float32 throughout
    BF16 = "bf16"  # bfloat16 autocast (convolutions and products in bf16; BatchNorm statistics and the loss in fp32)


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
    precision: Precision = Precision.FP32  # training step: fp32 | bf16 (autocast; evaluation stays fp32)
    channels_last: bool = False  # model and training images in channels-last memory format (NHWC convolutions)
    progress: bool = True  # a bar on a terminal (epoch, loss, validation accuracy, time left), else a line every 5%

    def __post_init__(self) -> None:
        check_choice(self, "dataset", Dataset)
        check_choice(self, "nll", NllMode)
        check_choice(self, "precision", Precision)
        known = {f.name for f in fields(VisionConfig)}
        unknown = sorted(set(self.model) - known)
        if unknown:
            raise ConfigError(f"unknown model setting(s) {unknown}; the model's settings are {sorted(known)}")
        self._resolve_defaults()
        check_at_least(self, 1, ("batch_size", "train_samples", "eval_samples", "eval_batch_size", "log_every",
                                 "image_size", "threads"))
        if not self.epochs > 0 or self.base_lr <= 0 or self.l2 < 0 or self.clip < 0 or self.kl_anneal_epochs < 0:
            raise invalid(self, "epochs and base_lr must be > 0; l2, clip, kl_anneal_epochs >= 0", "epochs", "base_lr",
                          "l2", "clip", "kl_anneal_epochs")
        if not self.fast_weight_lr_multiplier >= 0:
            raise invalid(self, f"fast_weight_lr_multiplier must be >= 0, got {self.fast_weight_lr_multiplier}",
                          "fast_weight_lr_multiplier")
        if self.dataset is not Dataset.DIGITS and self.data_dir is None:
            raise invalid(self, f"data_dir is required for dataset {self.dataset.value} (nothing is downloaded)",
                          "data_dir", "dataset")
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

    def __post_init__(self) -> None:
        from pipeline.data.images.corruptions import CORRUPTIONS, SEVERITIES

        self.corruptions, self.severities = tuple(self.corruptions), tuple(int(s) for s in self.severities)
        check_at_least(self, 1, ("samples", "batch_size", "threads"))
        bad = [c for c in self.corruptions if c not in CORRUPTIONS and self.cifar_c is None]
        if bad:
            raise invalid(self, f"unknown corruption(s) {bad}; choose from {list(CORRUPTIONS)} (or any file of a "
                                "CIFAR-10-C directory with cifar_c)", "cifar_c")
        if len(set(self.corruptions)) != len(self.corruptions):
            raise invalid(self, f"corruptions named twice: {list(self.corruptions)}", "corruptions")
        wrong = [s for s in self.severities if s not in SEVERITIES]
        if wrong or not self.severities:
            raise invalid(self, f"severities must be some of {list(SEVERITIES)}, got {list(self.severities)}",
                          "severities")


__all__ = ["DATASETS", "DATASET_DEFAULTS", "DATASET_MODEL_DEFAULTS", "METHOD_RECIPES", "Dataset", "Precision",
           "VisionEvalConfig", "VisionTrainConfig"]
