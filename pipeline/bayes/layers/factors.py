"""Rank-1 factor parameter sets (K components per vector), their sampling and KL.

Every rank-1 weight is ``W ∘ (r sᵀ)`` (multiplicative, the default) or ``W + r sᵀ``
(additive); W is deterministic and the K components each own a distribution over r and s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from pipeline.bayes.layers.base import BayesianLayer, Sampling
from pipeline.bayes.layers.members import block_rows, block_size
from pipeline.bayes.layers.options import FactorInit, Perturbation
from pipeline.bayes.layers.priors import (
    PosteriorKind,
    PriorKind,
    inverse_softplus,
    kl_elementwise,
    matched_scale,
    standard_noise,
)


@dataclass
class Rank1Config:
    """Priors, posteriors and initialisation of the rank-1 factors of one layer."""

    prior: PriorKind = PriorKind.GAUSSIAN  # prior family on r and s: gaussian | cauchy
    posterior: PosteriorKind | None = None  # None = normal for gaussian, cauchy for cauchy; delta = BatchEnsemble
    prior_mean: float | None = None  # prior location; None = 1 (multiplicative) or 0 (additive)
    prior_scale: float = 0.1  # prior stddev (gaussian) or scale (cauchy)
    init: FactorInit | None = None  # mean init; None = random_sign for BatchEnsemble (delta), else normal
    random_sign_prob: float = 0.5  # P(mean = +1) under random-sign init
    init_mean_stddev: float = 0.5  # stddev of the normal mean init around prior_mean
    init_stddev: float = 1e-3  # initial posterior spread as a Normal's stddev (each family's scale: initial_scale)
    init_scale: float | None = None  # initial posterior scale as given, for any family; None: initial_scale's rule
    perturbation: Perturbation = Perturbation.MULTIPLICATIVE  # multiplicative | additive
    kl_samples: int = 1  # Monte Carlo draws for KL terms without a closed form
    prior_signs: bool = False  # sign-symmetric prior: ½ prior(prior_mean) + ½ prior(-prior_mean) (see kl)
    init_scale_jitter: float = 0.0  # sd of the noise (truncated at 2 sd) added to the raw, pre-softplus initial scale
    clip: float | None = None  # sampled factor values clamped to [-clip, clip] (edward2 uses 10); None: no clamp

    def __post_init__(self) -> None:
        self.prior = PriorKind(self.prior)
        self.perturbation = Perturbation(self.perturbation)
        if self.posterior is None:
            self.posterior = PosteriorKind.NORMAL if self.prior == PriorKind.GAUSSIAN else PosteriorKind.CAUCHY
        self.posterior = PosteriorKind(self.posterior)
        additive = self.perturbation == Perturbation.ADDITIVE
        if self.prior_mean is None:
            self.prior_mean = 0.0 if additive else 1.0
        self.init = None if self.init is None else FactorInit(self.init)
        if self.mean_init == FactorInit.RANDOM_SIGN and additive:
            raise ValueError("Rank1Config: random_sign init is for multiplicative factors; use init='normal'")
        if not 0.0 <= self.random_sign_prob <= 1.0:
            raise ValueError(f"Rank1Config.random_sign_prob must be in [0, 1], got {self.random_sign_prob}")
        for name in ("prior_scale", "init_stddev", "init_scale"):
            if getattr(self, name) is not None and not getattr(self, name) > 0:
                raise ValueError(f"Rank1Config.{name} must be > 0, got {getattr(self, name)}")
        if self.kl_samples < 1:
            raise ValueError(f"Rank1Config.kl_samples must be >= 1, got {self.kl_samples}")
        if self.init_scale_jitter < 0:
            raise ValueError(f"Rank1Config.init_scale_jitter must be >= 0, got {self.init_scale_jitter}")
        if self.prior_signs and self.prior_mean == 0.0:
            raise ValueError("Rank1Config.prior_signs needs a prior_mean other than 0 (multiplicative factors)")
        if self.clip is not None and not self.clip > 0:
            raise ValueError(f"Rank1Config.clip must be > 0 or None, got {self.clip}")

    def initial_scale(self) -> float:
        """Posterior scale at initialisation (through softplus): ``init_scale`` when set, else the scale whose
        draws spread as N(prior_mean, init_stddev²)'s (``priors.matched_scale``): ``init_stddev`` for a
        Normal posterior; for a Cauchy one with ``clip`` the scale whose clamped draws have that sd
        (7.86e-5 for 0.0316 within ±10 around 1), without ``clip`` (a Cauchy has no sd) the scale with the
        Normal's interquartile range, 0.6745 · init_stddev. Taken as the Cauchy's scale, 0.0316 spreads
        its clamped draws with sd 0.63, 20 times the Normal's (docs/vision.md)."""
        if self.init_scale is not None:
            return self.init_scale
        return matched_scale(self.posterior.value, self.init_stddev, abs(self.prior_mean), self.clip)

    @property
    def mean_init(self) -> FactorInit:
        """``init``, or when None (resolved here, late, so that a config copied with another
        posterior gets that posterior's default): variational factors start near their prior,
        N(prior_mean, init_mean_stddev), since a mean started at -1 under an N(1, 0.1) prior costs
        ~200 nats of KL, and the KL then drags half the factors through zero at a
        data-independent pace (the model underfits); random signs are BatchEnsemble's
        convention (point-mass factors, no KL)."""
        if self.init is not None:
            return self.init
        delta = self.posterior == PosteriorKind.DELTA
        additive = self.perturbation == Perturbation.ADDITIVE
        return FactorInit.RANDOM_SIGN if delta and not additive else FactorInit.NORMAL


@dataclass
class Draw:
    """Sampled values of one factor vector for a leading size N = G·B (G = S·K blocks)."""

    value: Tensor  # (N, n) one draw per row, or (G, n) one draw per block
    per_block: bool  # True when value holds one row per block

    def rows(self, n_rows: int) -> Tensor:
        """Per-row values (N, n)."""
        return block_rows(self.value, n_rows) if self.per_block else self.value

    def blocks(self) -> Tensor:
        """Per-block values (G, n); only for per-member / mean draws."""
        if not self.per_block:
            raise ValueError("this draw has one value per example; per-member code needs per-block draws")
        return self.value


class Rank1Vector(nn.Module):
    """K distributions over one factor vector of length n (rows of ``mean``/``rho``: components)."""

    def __init__(self, components: int, size: int, config: Rank1Config) -> None:
        super().__init__()
        self.components, self.size, self.config = components, size, config
        self.mean = nn.Parameter(torch.empty(components, size))
        delta = config.posterior == PosteriorKind.DELTA
        self.rho = None if delta else nn.Parameter(torch.empty(components, size))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        cfg = self.config
        with torch.no_grad():
            if cfg.mean_init == FactorInit.RANDOM_SIGN:
                signs = torch.rand(self.components, self.size) < cfg.random_sign_prob
                self.mean.copy_(torch.where(signs, 1.0, -1.0))
            else:
                self.mean.normal_(cfg.prior_mean, cfg.init_mean_stddev)
            if self.rho is not None:
                self.rho.fill_(inverse_softplus(cfg.initial_scale()))
                if cfg.init_scale_jitter > 0:  # edward2's trainable_normal: TruncatedNormal(raw scale, 0.1)
                    j = cfg.init_scale_jitter
                    self.rho.add_(nn.init.trunc_normal_(torch.empty_like(self.rho), 0.0, j, -2 * j, 2 * j))

    @property
    def stochastic(self) -> bool:
        return self.rho is not None

    def scale(self) -> Tensor:
        """Posterior scale (K, n)."""
        if self.rho is None:
            raise ValueError("a delta (point-mass) factor has no scale")
        return F.softplus(self.rho)

    def draw(self, rows: int, samples: int, sampling: Sampling, use_mean: bool,
             generator: torch.Generator | None = None) -> Draw:
        """Sample for a leading size rows = samples·K·B (per row or per block) from ``generator``
        (None: torch's global generator).

        With ``config.clip`` sampled values are clamped to [-clip, clip] (means are not), as
        edward2's rank-1 layers do: a heavy-tailed (Cauchy) draw cannot scale a unit by 1e4."""
        k, n = self.components, self.size
        b = block_size(rows, samples, k)
        if use_mean or self.rho is None:
            # (K, n) -> (S·K, n): the mean of component j % K for block j
            return Draw(self.mean.repeat(samples, 1), per_block=True)
        kind = self.config.posterior.value
        if Sampling(sampling) == Sampling.PER_MEMBER:
            eps = standard_noise(kind, (samples, k, n), self.mean, generator)  # (S, K, n)
            value = self._clip(self.mean + self.scale() * eps)  # (S, K, n)
            return Draw(value.reshape(samples * k, n), per_block=True)
        eps = standard_noise(kind, (samples, k, b, n), self.mean, generator)  # (S, K, B, n)
        value = self._clip(self.mean.view(1, k, 1, n) + self.scale().view(1, k, 1, n) * eps)
        return Draw(value.reshape(rows, n), per_block=False)

    def _clip(self, value: Tensor) -> Tensor:
        clip = self.config.clip
        return value if clip is None else value.clamp(-clip, clip)

    def kl(self) -> Tensor:
        """KL summed over the K components and n entries (0 for delta factors).

        With ``prior_signs`` the prior is the equal mixture of the prior family at +m and -m
        (m = prior_mean), so a factor's sign costs nothing; its KL has no closed form and is
        replaced by the upper bound -log(½ e^{-KL(q‖p₊)} + ½ e^{-KL(q‖p₋)}) (Jensen; tight when the
        two modes are far apart in units of the prior scale), which keeps the ELBO a lower bound."""
        if self.rho is None:
            return self.mean.new_zeros(())
        cfg = self.config
        terms = kl_elementwise(cfg.posterior.value, self.mean, self.scale(), cfg.prior.value,
                               cfg.prior_mean, cfg.prior_scale, cfg.kl_samples)
        if cfg.prior_signs:
            mirrored = kl_elementwise(cfg.posterior.value, self.mean, self.scale(), cfg.prior.value,
                                      -cfg.prior_mean, cfg.prior_scale, cfg.kl_samples)
            terms = math.log(2.0) - torch.logaddexp(-terms, -mirrored)
        return terms.sum()


def materialize(weight: Tensor, r: Tensor, s: Tensor, perturbation: Perturbation) -> Tensor:
    """Per-block weights: W (m, d, *k) with r (G, m), s (G, d) -> (G, m, d, *k).

    Trailing kernel dims (convolutions) are broadcast.
    """
    extra = (1,) * (weight.dim() - 2)
    r_ = r.view(r.shape[0], r.shape[1], 1, *extra)  # (G, m, 1, 1...)
    s_ = s.view(s.shape[0], 1, s.shape[1], *extra)  # (G, 1, d, 1...)
    if Perturbation(perturbation) == Perturbation.ADDITIVE:
        return weight.unsqueeze(0) + r_ * s_
    return weight.unsqueeze(0) * (r_ * s_)


class Rank1Layer(BayesianLayer):
    """A layer W∘(r sᵀ) with one output factor ``r``, one input factor ``s`` and a
    deterministic ``weight``; subclasses define ``forward_with(x, draws, samples)``."""

    r: Rank1Vector
    s: Rank1Vector
    weight: nn.Parameter

    def draw(self, rows: int, samples: int = 1, sampling: Sampling | None = None,
             generator: torch.Generator | None = None) -> dict[str, Draw]:
        """Factor draws for a leading size rows = samples·K·B (``sampling``: the call's mode, None =
        the layer's; ``generator``: the call's random stream, None = torch's global one)."""
        mode = self.mode_for(sampling)
        return {name: vec.draw(rows, samples, mode, self.use_mean, generator)
                for name, vec in (("r", self.r), ("s", self.s))}

    def forward(self, x: Tensor, samples: int = 1, *, sampling: Sampling | None = None,
                generator: torch.Generator | None = None) -> Tensor:
        return self.forward_with(x, self.draw(x.shape[0], samples, sampling, generator), samples)

    def kl(self) -> Tensor:
        return self.r.kl() + self.s.kl()

    def l2_weights(self):
        yield self.weight
