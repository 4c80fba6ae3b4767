"""Settings of subnetwork linearized Laplace (Daxberger et al., ICML 2021); see docs/laplace.md."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import Enum

import torch

from pipeline.bayes.laplace.errors import LaplaceError
from pipeline.bayes.laplace.options import (
    DEFAULT_SUBNET_SIZE,
    HessianKind,
    Predictive,
    PriorMethod,
    Selection,
    default_subnet_size,
)
from pipeline.core.configs import check_at_least, check_choice, invalid

__all__ = ["DEFAULT_SUBNET_SIZE", "DTYPES", "HessianKind", "LaplaceConfig", "Predictive", "PriorMethod", "Selection",
           "default_subnet_size"]

DTYPES = {"float32": torch.float32, "float64": torch.float64}


@dataclass
class LaplaceConfig:
    """Settings of ``fit_laplace``."""

    selection: Selection = Selection.WASSERSTEIN  # which weights form the subnetwork (ignored by hessian diag)
    subnet_size: int | None = DEFAULT_SUBNET_SIZE  # S; None: every weight (full) / all (diag) / the output layer
        # (last-layer)
    hessian: HessianKind = HessianKind.FULL  # full: dense subnetwork GGN; diag: diagonal GGN over all weights
    prior_precision: float | None = None  # λ of the full network on the summed-NLL scale; None: chosen by prior_method
    prior_method: PriorMethod = PriorMethod.MARGLIK  # marglik: the marginal likelihood; val-nll:
        # validation NLL on the grid
    grid_log10_min: float = -4.0  # smallest λ of the val-nll grid, log10 (laplace-torch's gridsearch default;
        # widened at an edge)
    grid_log10_max: float = 4.0  # largest λ of the val-nll grid, log10
    grid_size: int = 17  # grid points, evenly spaced in log10 λ
    predictive: Predictive = Predictive.PROBIT  # what forward returns: probit logits or MC draws
    skip_unused: bool = True  # wasserstein, predictive: leave out weights no training logit depends on (diagonal GGN 0)
    swag_steps: int = 300  # swag: SGD steps continuing from θ_MAP on random training batches
    swag_burn_in: int = 50  # swag: steps before the iterates are collected
    swag_lr: float = 0.01  # swag: constant SGD learning rate (on the mean NLL of a batch)
    swag_l2: float = 1e-4  # swag: the L2 factor of the loss (the MAP run's l2; laplace runs pass it)
    exclude: tuple[str, ...] = ()  # weights never selected: "embeddings"
        # (every embedding table) or parameter-name prefixes
    max_train: int | None = None  # GGN from at most this many training admissions (seeded subsample, scaled N/M)
    batch_size: int = 32  # admissions collated per batch (Jacobians run in groups of jacobian.MICRO_BATCH)
    max_bags: int | None = None  # as the MAP run: keep only the most recent bags of an admission
    max_tokens: int | None = None  # as the MAP run: keep at most this many tokens per bag
    seed: int = 0  # seeds the random selection and the training subsample
    dtype: str = "float64"  # GGN, Cholesky factor and predictive linear algebra: float64 | float32

    def __post_init__(self) -> None:
        for name, enum in (("selection", Selection), ("hessian", HessianKind), ("predictive", Predictive),
                           ("prior_method", PriorMethod)):
            check_choice(self, name, enum, LaplaceError)
        if self.swag_steps <= self.swag_burn_in or self.swag_burn_in < 0 or self.swag_lr <= 0 or self.swag_l2 < 0:
            raise LaplaceError("LaplaceConfig: swag_steps must exceed swag_burn_in >= 0, swag_lr > 0, swag_l2 >= 0")
        self.exclude = tuple(self.exclude or ())
        if any(not isinstance(e, str) or not e.strip() for e in self.exclude):
            raise invalid(self, f"exclude must name weights (embeddings or a parameter prefix), got {self.exclude!r}",
                          "exclude", error=LaplaceError)
        if self.exclude and (self.selection == Selection.LAST_LAYER or self.hessian == HessianKind.DIAG):
            raise invalid(self, "exclude applies to a selected subnetwork (not to selection last-layer or hessian "
                                "diag)", "exclude", "selection", "hessian", error=LaplaceError)
        if self.dtype not in DTYPES:
            raise LaplaceError(f"dtype must be one of {sorted(DTYPES)}, got {self.dtype!r}")
        check_at_least(self, 1, ("subnet_size", "batch_size", "max_train", "max_bags", "max_tokens"), LaplaceError)
        if self.hessian == HessianKind.DIAG and self.subnet_size is not None:
            raise invalid(self, "hessian diag is diagonal Laplace over every weight: leave subnet_size unset",
                          "hessian", "subnet_size", error=LaplaceError)
        if self.prior_precision is not None and not (self.prior_precision >= 0 and self.prior_precision < float("inf")):
            raise invalid(self, f"prior_precision must be finite and >= 0, got {self.prior_precision}",
                          "prior_precision", error=LaplaceError)
        if self.grid_size < 1 or not self.grid_log10_min <= self.grid_log10_max:
            raise LaplaceError("grid_size must be >= 1 and grid_log10_min <= grid_log10_max")

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    def grid(self, widen: float = 0.0) -> list[float]:
        """The λ values of the grid search (ascending); ``widen`` decades more on each side, same spacing."""
        step = (self.grid_log10_max - self.grid_log10_min) / max(self.grid_size - 1, 1)
        extra = int(round(widen / step)) if step > 0 else 0
        lo, hi = self.grid_log10_min - extra * step, self.grid_log10_max + extra * step
        return torch.logspace(lo, hi, self.grid_size + 2 * extra, dtype=torch.float64).tolist()

    def to_dict(self) -> dict:
        """JSON-able (enums as their values)."""
        return {k: (v.value if isinstance(v, Enum) else v) for k, v in asdict(self).items()}
