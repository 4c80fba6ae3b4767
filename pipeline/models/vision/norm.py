"""Batch normalisation over folded member-major batches: shared, or one per member.

Both take the family's ``forward(x, samples)`` signature; x has leading size S·K·B
(``pipeline.layers.members``). ``BatchNorm2d`` normalises all rows together (the published
runs: one Keras BatchNormalization over the tiled batch). ``MemberBatchNorm2d`` keeps K sets of
affine parameters and running statistics; member k's statistics come from its own S·B rows
(the paper's "ensemble-specific" BatchNorm, edward2's ``ensemble_batchnorm``).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from pipeline.layers.members import block_size


class BatchNorm2d(nn.BatchNorm2d):
    """nn.BatchNorm2d shared by every member, with the uniform signature."""

    components = 1

    def forward(self, x: Tensor, samples: int = 1) -> Tensor:  # noqa: ARG002 (uniform signature)
        return super().forward(x)


class MemberBatchNorm2d(nn.Module):
    """K BatchNorm2d layers in one call; x (S·K·B, C, H, W) -> same shape.

    Member k's rows are moved into channels k·C .. (k+1)·C - 1 of one (S·B, K·C, H, W) tensor,
    so one ``F.batch_norm`` call gives every member its own batch statistics (training) or its
    own running statistics (evaluation).
    """

    def __init__(self, channels: int, components: int, eps: float = 1e-5, momentum: float = 0.1) -> None:
        super().__init__()
        self.channels, self.components, self.eps, self.momentum = channels, components, eps, momentum
        self.weight = nn.Parameter(torch.ones(components, channels))
        self.bias = nn.Parameter(torch.zeros(components, channels))
        self.register_buffer("running_mean", torch.zeros(components, channels))
        self.register_buffer("running_var", torch.ones(components, channels))
        self.register_buffer("num_batches_tracked", torch.zeros((), dtype=torch.long))

    def forward(self, x: Tensor, samples: int = 1) -> Tensor:
        if x.dim() != 4 or x.shape[1] != self.channels:
            raise ValueError(f"MemberBatchNorm2d expects (N, {self.channels}, H, W), got {tuple(x.shape)}")
        k, c = self.components, self.channels
        n, _, h, w = x.shape
        b = block_size(n, samples, k)
        # (S·K·B, C, H, W) -> (S, K, B, C, H, W) -> (S, B, K, C, H, W) -> (S·B, K·C, H, W)
        xm = x.view(samples, k, b, c, h, w).transpose(1, 2).reshape(samples * b, k * c, h, w)
        if self.training:
            self.num_batches_tracked.add_(1)
        y = F.batch_norm(xm, self.running_mean.view(-1), self.running_var.view(-1), self.weight.view(-1),
                         self.bias.view(-1), self.training, self.momentum, self.eps)  # (S·B, K·C, H, W)
        # (S·B, K·C, H, W) -> (S, B, K, C, H, W) -> (S, K, B, C, H, W) -> (S·K·B, C, H, W)
        return y.view(samples, b, k, c, h, w).transpose(1, 2).reshape(n, c, h, w)

    def extra_repr(self) -> str:
        return f"{self.channels}, components={self.components}, eps={self.eps}, momentum={self.momentum}"
