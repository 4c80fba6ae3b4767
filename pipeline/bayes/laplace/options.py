"""The choices of subnetwork Laplace (torch-free: ``cli.py`` offers them as option values), and the
options of ``cli.py laplace`` (``LaplaceOptions``) read as ``LaplaceConfig`` settings (``prior_precision_value``,
``subnet_size_for``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import ClassVar

from pipeline.bayes.laplace.errors import LaplaceError
from pipeline.core.devices import DEVICE_HELP


class Selection(str, Enum):
    """Which weights form the subnetwork."""

    WASSERSTEIN = "wasserstein"  # the paper's rule: largest marginal variance under a diagonal GGN Laplace
    RANDOM = "random"  # uniformly at random (the paper's baseline)
    MAGNITUDE = "magnitude"  # largest |θ_MAP| (the paper's baseline)
    LAST_LAYER = "last-layer"  # every weight and bias of the output layer
    SWAG = "swag"  # largest diagonal-SWAG variance (the paper's other estimator; SGD iterates continuing from the MAP)
    PREDICTIVE = "predictive"  # largest share of the training predictive variance under a diagonal Laplace:
        # Σ_n J_ni²/(h_i + λ)


class HessianKind(str, Enum):
    """Structure of the posterior precision."""

    FULL = "full"  # dense GGN over the subnetwork's S weights
    DIAG = "diag"  # diagonal GGN over every weight of the network (no subnetwork; a baseline)


class Predictive(str, Enum):
    """What the fitted model's ``forward`` returns."""

    PROBIT = "probit"  # logits whose sigmoid / softmax is the probit approximation (draws are copies: MI = 0)
    MC = "mc"  # Monte Carlo draws of the linearized model's logits μ + J_S ε, ε ~ N(0, Σ)


class PriorMethod(str, Enum):
    """How the prior precision λ is chosen when none is given."""

    MARGLIK = "marglik"  # maximise the Laplace marginal likelihood of the training data
        # (laplace-torch's method="marglik")
    VAL_NLL = "val-nll"  # minimise the validation NLL of the probit predictive over a grid (method="gridsearch")


EMBEDDINGS = "embeddings"  # an ``exclude`` value: the weights of every embedding table (nn.Embedding)

DEFAULT_SUBNET_SIZE = 1000  # S when none is given for a selection that needs one (wasserstein, random, magnitude)


def default_subnet_size(selection: Selection | str) -> int | None:
    """S when none is given: None (the output layer's size) for the last-layer selection,
    ``DEFAULT_SUBNET_SIZE`` for the others (an unknown name too: ``LaplaceConfig`` rejects it)."""
    return None if getattr(selection, "value", selection) == Selection.LAST_LAYER.value else DEFAULT_SUBNET_SIZE


def prior_precision_value(text: str) -> float | None:
    """``--prior-precision`` as typed: "auto" -> None (chosen by the prior method), else its number."""
    if text == "auto":
        return None
    try:
        return float(text)
    except ValueError:
        raise LaplaceError(f"prior precision must be 'auto' or a number, got {text!r}") from None


def subnet_size_for(selection: Selection | str, hessian: HessianKind | str, subnet_size: int | None) -> int | None:
    """S as ``LaplaceConfig`` takes it: None for diagonal Laplace (every weight; a given S is ignored), else
    the given S or ``default_subnet_size(selection)``."""
    if getattr(hessian, "value", hessian) == HessianKind.DIAG.value:
        return None
    return default_subnet_size(selection) if subnet_size is None else subnet_size


@dataclass
class LaplaceOptions:
    """The options of ``cli.py laplace`` (each comment its help): ``settings()`` is its ``LaplaceConfig``,
    ``run_kwargs()`` the rest of ``fit_laplace_run``'s arguments."""

    run: str  # The trained MAP run (run id, runs:/<id>/model or another model URI) of a deterministic model; a
        # vision run (or its model.pt) is fitted on its images.
    subnet_size: int | None = field(default=None, metadata={"flags": ["--subnet-size"], "min": 1})  # S, the weights
        # with a full-covariance posterior [default: 1000; last-layer: the output layer's size; ignored by
        # --hessian diag].
    selection: Selection = Selection.WASSERSTEIN  # wasserstein: largest diagonal-Laplace variance; random,
        # magnitude: the paper's baselines; last-layer: the output layer; predictive: largest share of the
        # training predictive variance; swag: largest diagonal-SWAG variance (SGD from the MAP).
    exclude: tuple[str, ...] = ()  # Weights no rule may select (repeatable): embeddings (every embedding table)
        # or a parameter-name prefix, e.g. lstm.
    prior_precision: str = "auto"  # auto (chosen by --prior-method) or a value for the full network (λ_S = λ·S/D).
    prior_method: PriorMethod = PriorMethod.MARGLIK  # How auto chooses λ: marglik (the Laplace marginal
        # likelihood of the training data) or val-nll (the validation NLL over a grid, widened once at an edge).
    hessian: HessianKind = HessianKind.FULL  # full: the subnetwork's full covariance; diag: diagonal Laplace over
        # every weight (no subnetwork).
    samples: int | None = field(default=None, metadata={"min": 1})  # Monte Carlo draws of the linearized model
        # per admission (the run's score_samples); default: the probit approximation, one draw.
    data: Path | None = None  # Features directory (default: the one the MAP run was trained on); for a vision
        # run its CIFAR directory.
    max_train: int | None = field(default=None, metadata={"min": 1})  # GGN from at most this many training
        # admissions (a seeded subsample, scaled) [default: all].
    seed: int = 0  # Seed of the random selection, the subsample and the validation draws.
    threads: int | None = field(default=None, metadata={"min": 1})  # Torch intra-op threads.
    out: Path | None = None  # Directory of the run's files (default runs/laplace/<run id>).
    experiment: str | None = None  # MLflow experiment [default: laplace].
    tracking: bool = True  # Log the run to MLflow.
    verbose: bool = field(default=False, metadata={"flags": ["--verbose", "-v"]})  # Log each stage.
    device: str | None = field(default=None, metadata={"help": DEVICE_HELP + " Mortality runs."})  # the device
    COMMAND_OPTIONS: ClassVar[bool] = True  # offered as declared (pipeline.cli.options.command_option)

    def settings(self) -> dict:
        """The ``LaplaceConfig`` settings these options give."""
        return {"selection": self.selection, "subnet_size": subnet_size_for(self.selection, self.hessian,
                                                                            self.subnet_size),
                "hessian": self.hessian, "prior_precision": prior_precision_value(self.prior_precision),
                "prior_method": self.prior_method, "exclude": tuple(self.exclude), "max_train": self.max_train,
                "seed": self.seed}

    def run_kwargs(self) -> dict:
        """``fit_laplace_run``'s keyword arguments besides the config."""
        return {"data": self.data, "samples": self.samples, "out_dir": self.out, "tracking": self.tracking,
                "experiment": self.experiment, "device": self.device, "threads": self.threads}
