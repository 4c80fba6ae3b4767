"""The Gaussian posterior over the subnetwork: precision P = GGN + λ_S I, kept as its Cholesky factor.

Full: P = C Cᵀ with C lower triangular (S, S); the covariance Σ = P⁻¹ = C⁻ᵀ C⁻¹ is never formed:
a logit's variance j Σ jᵀ = ‖C⁻¹ jᵀ‖² is one triangular solve and a draw ε = C⁻ᵀ z (z ~ N(0, I))
has covariance Σ. Diagonal: P = diag(c²) with c (S,). Only C (S² numbers) is kept: memory S².
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from pipeline.bayes.laplace.errors import LaplaceError


@dataclass
class Posterior:
    """N(θ_MAP,S, P⁻¹) over the S subnetwork weights."""

    factor: Tensor  # (S, S) lower Cholesky factor C of P (full) or (S,) square root of diag(P) (diagonal)
    prior_precision: float  # λ_S, the prior precision added to the GGN

    @property
    def size(self) -> int:
        return self.factor.shape[0]

    @property
    def diagonal(self) -> bool:
        return self.factor.dim() == 1

    @classmethod
    def from_ggn(cls, ggn: Tensor, prior_precision: float) -> Posterior:
        """Factor GGN + λ_S I; a singular or non-positive-definite precision is a LaplaceError.

        ``ggn`` (S, S) or (S,) is left unchanged (its diagonal is shifted and restored in place).
        """
        if not all(bool(torch.isfinite(rows).all()) for rows in ggn.split(64)):  # by blocks: no S x S temporary
            raise LaplaceError("the GGN has non-finite entries (non-finite logits or Jacobians of the MAP model)")
        lam = float(prior_precision)
        if ggn.dim() == 1:
            precision = ggn + lam  # (S,)
            bad = torch.nonzero(~(precision > 0)).reshape(-1)  # (k, 1) -> (k,)
            if bad.numel():
                raise LaplaceError(f"the diagonal posterior precision is not positive at {bad.numel()} of "
                                   f"{precision.numel()} weights (first {int(bad[0])}) with prior precision "
                                   f"{lam:.4g}: use a prior precision > 0")
            return cls(precision.sqrt(), lam)
        diag = ggn.diagonal()
        saved = diag.clone()
        diag.add_(lam)
        try:
            factor, info = torch.linalg.cholesky_ex(ggn)  # lower triangular (S, S)
        finally:
            diag.copy_(saved)
        k = int(info)
        if k != 0 or not bool(torch.isfinite(factor.diagonal()).all()):
            raise LaplaceError(f"the posterior precision GGN + {lam:.4g}·I over S={ggn.shape[0]} weights is singular "
                               f"or not positive definite (Cholesky fails at leading minor {k}): use a prior "
                               "precision > 0 or a smaller subnetwork")
        return cls(factor, lam)

    def variance(self, jac: Tensor) -> Tensor:
        """Var of each logit j Σ jᵀ: J (..., S) -> (...)."""
        lead, s = jac.shape[:-1], jac.shape[-1]
        rows = jac.reshape(-1, s).to(self.factor.dtype)  # (..., S) -> (R, S)
        if self.diagonal:
            return (rows / self.factor).square().sum(1).view(lead)  # (R,) -> (...)
        x = torch.linalg.solve_triangular(self.factor, rows.t(), upper=False)  # C⁻¹ Jᵀ (S, R)
        return x.square().sum(0).view(lead)  # (R,) -> (...)

    def draw(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        """n draws ε ~ N(0, Σ) of the subnetwork's offset from θ_MAP: (S, n)."""
        z = torch.randn(self.size, n, dtype=self.factor.dtype, device=self.factor.device, generator=generator)  # (S, n)
        if self.diagonal:
            return z / self.factor.unsqueeze(1)  # (S, n) / (S, 1)
        return torch.linalg.solve_triangular(self.factor.t(), z, upper=True)  # C⁻ᵀ z

    def covariance(self) -> Tensor:
        """Σ = P⁻¹: (S, S) (full) or the marginal variances (S,) (diagonal). For tests and small S."""
        if self.diagonal:
            return self.factor.square().reciprocal()
        return torch.cholesky_inverse(self.factor)

    def nbytes(self) -> int:
        return self.factor.numel() * self.factor.element_size()


def subnet_prior_precision(prior_precision: float, subnet_size: int, n_params: int) -> float:
    """λ_S = λ·S/D (paper appendix C): the subnetwork's kernel keeps the full network's magnitude."""
    if not 0 < subnet_size <= n_params:
        raise LaplaceError(f"subnetwork size {subnet_size} must lie in [1, D={n_params}]")
    return float(prior_precision) * subnet_size / n_params

