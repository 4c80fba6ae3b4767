"""Prior / posterior families over rank-1 factors and weights, and their KL divergences.

Scales are parameterised through softplus; KL is analytic for Normal-Normal and
Cauchy-Cauchy (closed form, Chyzak & Nielsen 2019) and Monte Carlo otherwise.

``clipped_sd`` / ``matched_scale`` compare the families' spreads: a posterior scale means a
standard deviation for a Normal but a half interquartile range for a Cauchy, so one number gives
the two families very different draws (a Cauchy of scale 0.0316 clipped to [-10, 10] around 1
spreads with sd 0.63, a Normal of stddev 0.0316 with 0.0316). ``matched_scale`` gives the Cauchy
scale whose draws spread as a Normal's of a given stddev (clipped: the same sd; unclipped, where
a Cauchy has no sd: the same interquartile range).
"""

from __future__ import annotations

import functools
import math
from enum import Enum

import torch
from torch import Tensor
from torch.distributions import Cauchy, Distribution, Normal

from pipeline.bayes.layers.options import PosteriorKind, PriorKind


def inverse_softplus(y: float) -> float:
    """x with softplus(x) = y (y > 0), used to initialise scale parameters."""
    if not y > 0:
        raise ValueError(f"inverse_softplus needs y > 0, got {y}")
    return y + math.log(-math.expm1(-y))


NORMAL_QUARTILE = 0.6744897501960817  # Φ⁻¹(0.75): half a Normal's interquartile range in stddevs


def _clipped_moments(kind: str, u: float, v: float) -> tuple[float, float]:
    """E[W], E[W²] of W = clamp(Z, u, v) for a standard (loc 0, scale 1) Z of family ``kind``; u < 0 < v."""
    if _family(kind) == "cauchy":
        below, above = math.atan(-1.0 / u) / math.pi, math.atan(1.0 / v) / math.pi  # P(Z < u), P(Z > v)
        first = (math.log1p(v * v) - math.log1p(u * u)) / (2.0 * math.pi)  # ∫_u^v z f(z) dz
        second = ((v - math.atan(v)) - (u - math.atan(u))) / math.pi  # ∫_u^v z² f(z) dz
    else:
        below, above = 0.5 * math.erfc(-u / math.sqrt(2.0)), 0.5 * math.erfc(v / math.sqrt(2.0))
        pdf_u, pdf_v = (math.exp(-0.5 * t * t) / math.sqrt(2.0 * math.pi) for t in (u, v))
        first = pdf_u - pdf_v
        second = (1.0 - below - above) + u * pdf_u - v * pdf_v
    return u * below + v * above + first, u * u * below + v * v * above + second


def clipped_sd(kind: str, loc: float, scale: float, clip: float) -> float:
    """Standard deviation of clamp(loc + scale · Z, -clip, clip), Z standard of family ``kind`` (|loc| < clip)."""
    if not abs(loc) < clip or not scale > 0:
        raise ValueError(f"clipped_sd needs |loc| < clip and scale > 0, got loc {loc}, clip {clip}, scale {scale}")
    m1, m2 = _clipped_moments(kind, (-clip - loc) / scale, (clip - loc) / scale)
    return scale * math.sqrt(max(m2 - m1 * m1, 0.0))


@functools.lru_cache(maxsize=None)
def matched_scale(kind: str, stddev: float, loc: float = 1.0, clip: float | None = None) -> float:
    """The scale of family ``kind`` whose draws spread as a Normal's of ``stddev`` around ``loc``.

    Normal: ``stddev``. Cauchy with ``clip``: the scale whose draws clamped to [-clip, clip] have the
    clamped Normal draws' sd (bisection on the closed-form sd, which grows with the scale); without
    a clip (no sd): the Normal's half interquartile range, 0.6745 · stddev. A spread no clamped
    Cauchy reaches is a ValueError."""
    if _family(kind) == "normal":
        return stddev
    if clip is None or not abs(loc) < clip:
        return NORMAL_QUARTILE * stddev
    target = clipped_sd("normal", loc, stddev, clip)
    lo, hi = 1e-12, 1e6  # in log space; sd(lo) ~ 1e-5·sqrt(clip), sd(hi) ~ the clamp's largest spread
    if not clipped_sd("cauchy", loc, lo, clip) < target < clipped_sd("cauchy", loc, hi, clip):
        raise ValueError(f"no Cauchy scale gives draws clamped to ±{clip} the spread (sd {target:.3g}) of a Normal of "
                         f"stddev {stddev}")
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if clipped_sd("cauchy", loc, mid, clip) < target else (lo, mid)
        if hi / lo < 1 + 1e-12:
            break
    return math.sqrt(lo * hi)


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
