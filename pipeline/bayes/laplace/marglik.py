"""The prior precision by the Laplace marginal likelihood (MacKay 1992; laplace-torch's ``method="marglik"``).

For the subnetwork posterior N(θ_MAP,S, (G + λ_S I)⁻¹) with prior N(0, λ_S⁻¹ I) over its S weights,
the Laplace approximation of the log evidence is, up to terms free of λ_S,

    log Z(λ_S) = ½ S log λ_S - ½ λ_S ‖θ_S‖² - ½ Σ_i log(e_i + λ_S),

with e_i the eigenvalues of the GGN G (its diagonal for a diagonal posterior). The eigenvalues are
computed once, so every λ_S costs O(S). The maximum satisfies MacKay's fixed point
λ_S = γ / ‖θ_S‖², γ = Σ_i e_i / (e_i + λ_S) (the effective number of well-determined weights):
``optimize_marglik`` brackets it on a log grid and refines it by that iteration.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from pipeline.bayes.laplace.errors import LaplaceError

SEARCH_LOG10 = (-8.0, 8.0)  # the λ_S range searched, log10
SEARCH_POINTS = 161  # grid points over SEARCH_LOG10 (0.1 decade apart)


@dataclass
class MarglikChoice:
    """The prior precision that maximises the marginal likelihood."""

    prior_precision: float  # λ_S of the subnetwork at the maximum
    log_marglik: float  # log Z(λ_S) up to constants free of λ_S
    effective_params: float  # γ = Σ e_i / (e_i + λ_S)
    at_edge: bool  # the maximum is at the end of the searched range (the evidence keeps rising beyond it)


def eigenvalues(ggn: Tensor) -> Tensor:
    """The GGN's eigenvalues (S,), float64, clipped at 0 (rounding can leave tiny negatives)."""
    g = ggn.double()
    e = g if g.dim() == 1 else torch.linalg.eigvalsh(g)
    if not bool(torch.isfinite(e).all()):
        raise LaplaceError("the GGN has non-finite eigenvalues (non-finite logits or Jacobians of the MAP model)")
    return e.clamp_min(0.0)


def log_marglik(e: Tensor, theta_sq: float, lam: float) -> float:
    """log Z(λ_S) up to constants, for eigenvalues ``e`` (S,) and ‖θ_S‖² = ``theta_sq``."""
    return float(0.5 * e.numel() * math.log(lam) - 0.5 * lam * theta_sq - 0.5 * torch.log(e + lam).sum())


def optimize_marglik(ggn: Tensor, theta: Tensor, iterations: int = 200) -> MarglikChoice:
    """λ_S maximising ``log_marglik`` over SEARCH_LOG10 for the GGN (S, S) or (S,) and the MAP weights θ_S (S,)."""
    e = eigenvalues(ggn)
    theta_sq = float(theta.double().square().sum())
    grid = torch.logspace(*SEARCH_LOG10, SEARCH_POINTS, dtype=torch.float64).tolist()
    values = [log_marglik(e, theta_sq, lam) for lam in grid]
    best = max(range(len(grid)), key=values.__getitem__)
    lam = grid[best]
    at_edge = best in (0, len(grid) - 1)
    if not at_edge and theta_sq > 0:
        lo, hi = grid[best - 1], grid[best + 1]
        for _ in range(iterations):  # MacKay's fixed point, kept inside the bracket
            gamma = float((e / (e + lam)).sum())
            new = min(max(gamma / theta_sq, lo), hi)
            if abs(new - lam) <= 1e-10 * lam:
                lam = new
                break
            lam = new
        if log_marglik(e, theta_sq, lam) < values[best]:  # keep the grid's point if the iteration went astray
            lam = grid[best]
    return MarglikChoice(prior_precision=lam, log_marglik=log_marglik(e, theta_sq, lam),
                         effective_params=float((e / (e + lam)).sum()), at_edge=at_edge)
