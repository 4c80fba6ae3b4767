"""Mean-field Gaussian layers over full weights (the fully-Bayesian baseline), K = 1.

Posterior N(mu, softplus(rho)²) per weight entry, prior N(0, prior_stddev²), analytic KL.
Biases are deterministic. ``per_example`` draws independent weights per row (the dense
layer uses the equivalent local reparameterisation), ``per_member`` one weight set per
block of rows, run through fused kernels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from pipeline.bayes.layers.base import BayesianLayer, Sampling
from pipeline.bayes.layers.members import block_size
from pipeline.bayes.layers.priors import inverse_softplus, kl_normal_normal
from pipeline.bayes.layers.recurrence import (
    check_sequence,
    final_states,
    fused_lstm,
    gate_permutation,
    run_recurrence,
    step_mask,
)


@dataclass
class MeanFieldConfig:
    """Prior and initialisation of a mean-field Gaussian layer."""

    prior_stddev: float = 1.0  # stddev of the zero-mean Gaussian prior on every weight
    init_stddev: float = 1e-3  # initial posterior stddev (through softplus)

    def __post_init__(self) -> None:
        for name in ("prior_stddev", "init_stddev"):
            if not getattr(self, name) > 0:
                raise ValueError(f"MeanFieldConfig.{name} must be > 0, got {getattr(self, name)}")


class GaussianWeight(nn.Module):
    """A weight tensor with a factorised Gaussian posterior."""

    def __init__(self, shape: tuple[int, ...], bound: float, config: MeanFieldConfig) -> None:
        super().__init__()
        self.config = config
        self.mu = nn.Parameter(torch.empty(shape).uniform_(-bound, bound))
        self.rho = nn.Parameter(torch.full(shape, inverse_softplus(config.init_stddev)))

    def stddev(self) -> Tensor:
        return F.softplus(self.rho)

    def sample(self, draws: int, generator: torch.Generator | None = None) -> Tensor:
        """``draws`` independent weight samples: (draws, *shape), from ``generator`` (None: the global one)."""
        eps = torch.randn((draws, *self.mu.shape), dtype=self.mu.dtype, device=self.mu.device, generator=generator)
        return self.mu + self.stddev() * eps

    def kl(self) -> Tensor:
        return kl_normal_normal(self.mu, self.stddev(), 0.0, self.config.prior_stddev).sum()


class LinearMeanField(BayesianLayer):
    """Mean-field dense layer, x (N, *, in) -> (N, *, out) for N = S·B."""

    components = 1

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 config: MeanFieldConfig | None = None) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.config = config if config is not None else MeanFieldConfig()
        bound = 1.0 / math.sqrt(in_features)
        self.weight = GaussianWeight((out_features, in_features), bound, self.config)
        self.bias = nn.Parameter(torch.empty(out_features).uniform_(-bound, bound)) if bias else None

    def forward(self, x: Tensor, samples: int = 1, *, sampling: Sampling | None = None,
                generator: torch.Generator | None = None) -> Tensor:
        if self.use_mean:
            return F.linear(x, self.weight.mu, self.bias)
        if self.mode_for(sampling) == Sampling.PER_MEMBER:
            block_size(x.shape[0], samples, 1)  # validates N = S·B
            w = self.weight.sample(samples, generator)  # (S, out, in)
            xs = x.reshape(samples, -1, self.in_features)  # (S, B·rest, in)
            y = torch.bmm(xs, w.transpose(1, 2)).reshape(*x.shape[:-1], self.out_features)
        else:
            mean = F.linear(x, self.weight.mu)
            var = F.linear(x * x, self.weight.stddev() ** 2)
            eps = torch.randn(mean.shape, dtype=mean.dtype, device=mean.device, generator=generator)
            y = mean + var.clamp_min(1e-16).sqrt() * eps  # local reparameterisation
        return y if self.bias is None else y + self.bias

    def kl(self) -> Tensor:
        return self.weight.kl()


class LSTMMeanField(BayesianLayer):
    """Mean-field Bayesian multi-layer LSTM, interface as ``LSTMRank1`` (K = 1)."""

    components = 1

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 config: MeanFieldConfig | None = None) -> None:
        super().__init__()
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.config = config if config is not None else MeanFieldConfig()
        bound = 1.0 / math.sqrt(hidden_size)  # as nn.LSTM
        h4 = 4 * hidden_size
        sizes = [input_size] + [hidden_size] * (num_layers - 1)
        self.weight_ih = nn.ModuleList(GaussianWeight((h4, d), bound, self.config) for d in sizes)
        self.weight_hh = nn.ModuleList(GaussianWeight((h4, hidden_size), bound, self.config) for _ in sizes)
        self.bias = nn.ParameterList(nn.Parameter(torch.empty(h4).uniform_(-bound, bound)) for _ in sizes)

    def forward(self, x: Tensor, lengths: Tensor, samples: int = 1, *, sampling: Sampling | None = None,
                generator: torch.Generator | None = None) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        lengths = check_sequence(x, lengths, self.input_size)
        if self.use_mean:
            return self._fused(x, lengths, [[self._flat(li, self.weight_ih[li].mu, self.weight_hh[li].mu)]
                                            for li in range(self.num_layers)], 1)
        per_member = self.mode_for(sampling) == Sampling.PER_MEMBER
        draws = samples if per_member else x.shape[0]
        sampled = [(self.weight_ih[li].sample(draws, generator), self.weight_hh[li].sample(draws, generator))
                   for li in range(self.num_layers)]  # (draws, 4H, D), (draws, 4H, H) per layer
        if per_member:
            block_size(x.shape[0], samples, 1)  # validates N = S·B
            return self._fused(x, lengths, [[self._flat(li, w_ih[j], w_hh[j]) for j in range(samples)]
                                            for li, (w_ih, w_hh) in enumerate(sampled)], samples)
        return self._per_example(x, lengths, sampled)

    def _flat(self, layer: int, w_ih: Tensor, w_hh: Tensor) -> list[Tensor]:
        return [w_ih, w_hh, self.bias[layer], torch.zeros_like(self.bias[layer])]

    def _fused(self, x: Tensor, lengths: Tensor, per_layer: list[list[list[Tensor]]],
               blocks: int) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        b = x.shape[0] // blocks
        outs, hs, cs = [], [], []
        for j in range(blocks):
            rows = slice(j * b, (j + 1) * b)
            flat = [t for layer in per_layer for t in layer[j]]
            out, h_n, c_n = fused_lstm(x[rows], lengths[rows], flat, self.num_layers, self.hidden_size,
                                       self.training)
            outs.append(out)
            hs.append(h_n)
            cs.append(c_n)
        return torch.cat(outs), (torch.cat(hs, 1), torch.cat(cs, 1))

    def _per_example(self, x: Tensor, lengths: Tensor, sampled: list[tuple[Tensor, Tensor]]
                     ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        t_len = x.shape[1]
        perm = gate_permutation(self.hidden_size, x.device)
        inp = x  # (N, T, D) batch-first for bmm
        h_last, c_last = [], []
        for li, (w_ih, w_hh) in enumerate(sampled):
            w_ih_t = w_ih.index_select(1, perm).transpose(1, 2)  # (N, D, 4H)
            w_hh_t = w_hh.index_select(1, perm).transpose(1, 2)  # (N, H, 4H)
            bias = self.bias[li].index_select(0, perm)  # (4H,)
            xp = torch.baddbmm(bias, inp, w_ih_t).transpose(0, 1)  # (N, T, 4H) -> (T, N, 4H)

            def step(xt: Tensor, h: Tensor, w=w_hh_t) -> Tensor:
                return torch.baddbmm(xt.unsqueeze(1), h.unsqueeze(1), w).squeeze(1)  # (N, 4H)
            hs, cs = run_recurrence(xp, step)  # (T, N, H)
            h_n, c_n = final_states(hs, cs, lengths)
            h_last.append(h_n)
            c_last.append(c_n)
            inp = hs.transpose(0, 1)  # (N, T, H)
        out = inp * step_mask(lengths, t_len, x.dtype)
        return out, (torch.stack(h_last), torch.stack(c_last))

    def kl(self) -> Tensor:
        return torch.stack([w.kl() for w in [*self.weight_ih, *self.weight_hh]]).sum()
