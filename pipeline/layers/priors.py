"""Prior / posterior families over rank-1 factors and weights, and their KL divergences.

Scales are parameterised through softplus; KL is analytic for Normal-Normal and
Cauchy-Cauchy (closed form, Chyzak & Nielsen 2019) and Monte Carlo otherwise.
"""

from __future__ import annotations

import math
from enum import Enum

import torch
from torch import Tensor
from torch.distributions import Cauchy, Distribution, Normal

from .options import PosteriorKind, PriorKind


def inverse_softplus(y: float) -> float:
    """x with softplus(x) = y (y > 0), used to initialise scale parameters."""
    if not y > 0:
        raise ValueError(f"inverse_softplus needs y > 0, got {y}")
    return y + math.log(-math.expm1(-y))


def distribution(kind: str, loc: Tensor, scale: Tensor) -> Distribution:
    """A torch distribution of the given family (``gaussian``/``normal`` or ``cauchy``)."""
    if kind in (PriorKind.GAUSSIAN, PosteriorKind.NORMAL, "gaussian", "normal"):
        return Normal(loc, scale)
    if kind in (PriorKind.CAUCHY, PosteriorKind.CAUCHY, "cauchy"):
        return Cauchy(loc, scale)
    raise ValueError(f"no distribution family {kind!r} (use gaussian/normal or cauchy)")


def kl_normal_normal(mq: Tensor, sq: Tensor, mp: Tensor | float, sp: Tensor | float) -> Tensor:
    """Elementwise KL(N(mq, sq²) || N(mp, sp²))."""
    mp = torch.as_tensor(mp, dtype=mq.dtype)
    sp = torch.as_tensor(sp, dtype=mq.dtype)
    var_ratio = (sq / sp) ** 2
    return 0.5 * (var_ratio + ((mq - mp) / sp) ** 2 - 1.0 - torch.log(var_ratio))


def kl_cauchy_cauchy(mq: Tensor, sq: Tensor, mp: Tensor | float, sp: Tensor | float) -> Tensor:
    """Elementwise KL(Cauchy(mq, sq) || Cauchy(mp, sp)) = log(((sq+sp)² + (mq-mp)²) / (4 sq sp))."""
    mp = torch.as_tensor(mp, dtype=mq.dtype)
    sp = torch.as_tensor(sp, dtype=mq.dtype)
    return torch.log(((sq + sp) ** 2 + (mq - mp) ** 2) / (4.0 * sq * sp))


def kl_monte_carlo(q: Distribution, p: Distribution, samples: int) -> Tensor:
    """Elementwise reparameterised MC estimate of KL(q || p) with ``samples`` draws."""
    if samples < 1:
        raise ValueError(f"kl_monte_carlo needs samples >= 1, got {samples}")
    z = q.rsample((samples,))  # (samples, *batch_shape)
    return (q.log_prob(z) - p.log_prob(z)).mean(0)


def kl_elementwise(
    posterior: str,
    loc: Tensor,
    scale: Tensor,
    prior: str,
    prior_loc: float,
    prior_scale: float,
    mc_samples: int = 1,
) -> Tensor:
    """Elementwise KL between a posterior and a prior family, analytic where it exists."""
    q_kind, p_kind = _family(posterior), _family(prior)
    if q_kind == p_kind == "normal":
        return kl_normal_normal(loc, scale, prior_loc, prior_scale)
    if q_kind == p_kind == "cauchy":
        return kl_cauchy_cauchy(loc, scale, prior_loc, prior_scale)
    q = distribution(q_kind, loc, scale)
    p = distribution(p_kind, torch.full_like(loc, prior_loc), torch.full_like(loc, prior_scale))
    return kl_monte_carlo(q, p, mc_samples)


def standard_noise(kind: str, shape: tuple[int, ...], like: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """Standard (loc 0, scale 1) noise of a family, for reparameterised sampling, drawn from
    ``generator`` (None: torch's global generator)."""
    if _family(kind) == "cauchy":
        return torch.empty(shape, dtype=like.dtype, device=like.device).cauchy_(generator=generator)
    return torch.randn(shape, dtype=like.dtype, device=like.device, generator=generator)


def _family(kind: str) -> str:
    value = kind.value if isinstance(kind, Enum) else kind
    if value in ("gaussian", "normal"):
        return "normal"
    if value == "cauchy":
        return "cauchy"
    raise ValueError(f"no KL for family {value!r} (use gaussian/normal or cauchy)")
