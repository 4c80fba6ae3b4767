"""The linearized (GLM) predictive: f_lin(x; θ) = f(x; θ_MAP) + J_S(x) (θ_S - θ_MAP,S).

Under the posterior the logits are Gaussian with mean μ = f(x; θ_MAP) and covariance
J_S Σ J_Sᵀ. The probability is approximated with the probit link, as laplace-torch's
``link_approx='probit'``: κ = 1/sqrt(1 + π σ²/8) per logit, p = sigmoid(κ μ) for one logit,
softmax(κ ⊙ μ) over C classes (σ² the diagonal of the logit covariance); or by Monte Carlo over
the linearized model, f = μ + J_S ε with ε ~ N(0, Σ), one ε per draw shared by the batch (as the
project's per-member draws).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor
from torch.nn import functional as F


def probit_logits(mu: Tensor, var: Tensor) -> Tensor:
    """κ ⊙ μ: logits whose sigmoid (B,) / softmax (B, C) is the probit predictive."""
    return mu / torch.sqrt(1.0 + math.pi / 8.0 * var)


def probit_probs(mu: Tensor, var: Tensor) -> Tensor:
    """Probit predictive probabilities: p(y = 1) (B,) or class probabilities (B, C)."""
    z = probit_logits(mu, var)
    return torch.sigmoid(z) if z.dim() == 1 else torch.softmax(z, dim=-1)


def probit_nll(mu: Tensor, var: Tensor, labels: Tensor) -> Tensor:
    """-log p(y) per example under the probit predictive: labels 0/1 (B,) or class ids (B,)."""
    z = probit_logits(mu, var)
    if z.dim() == 1:
        return F.binary_cross_entropy_with_logits(z, labels.to(z.dtype), reduction="none")
    return F.cross_entropy(z, labels.long(), reduction="none")


def mc_logits(mu: Tensor, jac: Tensor, eps: Tensor) -> Tensor:
    """Draws of the linearized model's logits μ + J ε_d, (samples, B) or (samples, B, C).

    μ (B,) / (B, C), J (B, S) / (B, C, S), ε (S, samples) from ``Posterior.draw``: draw d uses one
    ε_d ~ N(0, Σ) for the whole batch.
    """
    samples, s = eps.shape[1], jac.shape[-1]
    shift = jac.reshape(-1, s).to(eps.dtype) @ eps  # (B·C, S) x (S, samples) -> (B·C, samples)
    shift = shift.t().reshape(samples, *mu.shape)  # (samples, B·C) -> (samples, B[, C])
    return (mu.to(eps.dtype).unsqueeze(0) + shift).to(mu.dtype)  # (1, B[, C]) + (samples, B[, C])
