"""2-D convolutions of the family: rank-1, BatchEnsemble (groups = 1) and a plain deterministic one.

Factor s scales input channels, r scales output channels, so W'[o, i] = W[o, i] r_o s_i
(multiplicative) or W[o, i] + r_o s_i over the whole kernel window (additive).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn import functional as F
from torch.nn.modules.utils import _pair

from pipeline.bayes.layers.factors import Draw, Perturbation, Rank1Config, Rank1Layer, Rank1Vector
from pipeline.bayes.layers.members import component_rows
from pipeline.bayes.layers.priors import PosteriorKind


class Conv2dRank1(Rank1Layer):
    """Rank-1 Bayesian Conv2d; input (S·K·B, C_in, H, W) -> (S·K·B, C_out, H', W')."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, int],
                 stride: int | tuple[int, int] = 1, padding: int | tuple[int, int] = 0,
                 dilation: int | tuple[int, int] = 1, bias: bool = True, components: int = 4,
                 config: Rank1Config | None = None) -> None:
        super().__init__()
        self.in_channels, self.out_channels, self.components = in_channels, out_channels, components
        self.kernel_size, self.stride = _pair(kernel_size), _pair(stride)
        self.padding, self.dilation = _pair(padding), _pair(dilation)
        self.config = config if config is not None else Rank1Config()
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels, *self.kernel_size))
        self.bias = nn.Parameter(torch.empty(components, out_channels)) if bias else None
        self.r = Rank1Vector(components, out_channels, self.config)
        self.s = Rank1Vector(components, in_channels, self.config)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))  # as nn.Conv2d
        if self.bias is not None:
            fan_in = self.in_channels * self.kernel_size[0] * self.kernel_size[1]
            bound = 1.0 / math.sqrt(fan_in)
            nn.init.uniform_(self.bias, -bound, bound)

    def forward_with(self, x: Tensor, draws: dict[str, Draw], samples: int = 1) -> Tensor:
        """Apply given factor draws: x (N, C_in, H, W) -> (N, C_out, H', W')."""
        if x.dim() != 4 or x.shape[1] != self.in_channels:
            raise ValueError(f"Conv2dRank1 expects (N, {self.in_channels}, H, W), got {tuple(x.shape)}")
        n = x.shape[0]
        s = draws["s"].rows(n).view(n, self.in_channels, 1, 1)  # (N, C_in, 1, 1)
        r = draws["r"].rows(n).view(n, self.out_channels, 1, 1)  # (N, C_out, 1, 1)
        low = _autocast_dtype(x)
        if low is not None:  # factors in the autocast dtype, so the activations around the conv stay in it
            s, r = s.to(low), r.to(low)
        conv = dict(stride=self.stride, padding=self.padding, dilation=self.dilation)
        if self.config.perturbation == Perturbation.ADDITIVE:
            # Σ_i s_i x_i summed over each kernel window = conv with an all-ones kernel
            ones = x.new_ones(1, 1, *self.kernel_size)
            window = F.conv2d((x * s).sum(1, keepdim=True), ones, **conv)  # (N, 1, H', W')
            y = F.conv2d(x, self.weight, **conv) + window * r
        else:
            y = F.conv2d(x * s, self.weight, **conv) * r
        if self.bias is not None:
            bias = component_rows(self.bias, n, samples).view(n, self.out_channels, 1, 1)  # (N, C_out, 1, 1)
            y = y + (bias if low is None else bias.to(low))
        return y


def _autocast_dtype(x: Tensor) -> torch.dtype | None:
    """The autocast dtype when autocast is on for x's device (bf16 training), else None."""
    kind = x.device.type
    return torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else None


class Conv2dBatchEnsemble(Conv2dRank1):
    """BatchEnsemble Conv2d: rank-1 convolution with point-mass (delta) factors, no KL."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, int],
                 stride: int | tuple[int, int] = 1, padding: int | tuple[int, int] = 0,
                 dilation: int | tuple[int, int] = 1, bias: bool = True, components: int = 4,
                 config: Rank1Config | None = None) -> None:
        cfg = config if config is not None else Rank1Config()
        cfg = Rank1Config(**{**vars(cfg), "posterior": PosteriorKind.DELTA})
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         bias, components, cfg)


class Conv2dDeterministic(nn.Conv2d):
    """Plain Conv2d with the family's ``forward(x, samples)`` signature."""

    components = 1

    def forward(self, x: Tensor, samples: int = 1, *, sampling=None, generator=None) -> Tensor:  # noqa: ARG002
        return super().forward(x)  # the family's uniform signature: nothing to draw
