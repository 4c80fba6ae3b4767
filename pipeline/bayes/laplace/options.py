"""The choices of subnetwork Laplace (torch-free: ``cli.py`` offers them as option values), and how a
prior precision given as text and a subnetwork size read as ``LaplaceConfig`` settings (``prior_precision_value``,
``subnet_size_for``)."""

from __future__ import annotations

from enum import Enum

from pipeline.bayes.laplace.errors import LaplaceError


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
