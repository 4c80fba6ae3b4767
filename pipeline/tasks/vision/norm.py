"""Batch normalisation over folded member-major batches: shared, or one per member.

Both take the family's ``forward(x, samples)`` signature; x has leading size S·K·B
(``pipeline.bayes.layers.members``). ``BatchNorm2d`` normalises all rows together (the published
runs: one Keras BatchNormalization over the tiled batch). ``MemberBatchNorm2d`` keeps K sets of
affine parameters and running statistics; member k's statistics come from its own S·B rows
(the paper's "ensemble-specific" BatchNorm, edward2's ``ensemble_batchnorm``).

Ghost batches (``rows``): in training, a batch of more than ``rows`` tiled rows is normalised in
groups of ``rows`` rows, each what one device of the published runs holds (64 rows per TPU core:
64 / K distinct images tiled K times), so group g takes images g·b .. (g+1)·b - 1 of every member
block (b = rows / (S·K)). The running statistics move by the mean over the groups of their batch
mean and (unbiased) variance, as the replicas' averaged updates. Evaluation uses the running
statistics, as before.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from pipeline.bayes.layers.members import block_size


def ghost_groups(n: int, blocks: int, rows: int | None) -> int:
    """Number of ghost batches G of a tiled batch of n = blocks · B rows (blocks = S·K) in groups of ``rows``:
    1 when n <= rows (or rows is None); a ValueError unless rows splits into whole images per block."""
    if rows is None or n <= rows:
        return 1
    b = block_size(n, 1, blocks)
    if rows % blocks or b % (rows // blocks):
        raise ValueError(f"bn_rows {rows}: a batch of {n} tiled rows ({blocks} member blocks of {b} images) does not "
                         f"split into groups of {rows} rows with the same images in every block")
    return b // (rows // blocks)


def ghost_batch_norm(bn: nn.Module, x: Tensor, samples: int, tile: int, sets: int, groups: int) -> Tensor:
    """Training-mode BatchNorm of ``bn`` (weight, bias, running stats of ``sets`` x C) over ``groups`` ghost
    batches of x (S·K·B, C, H, W), K = ``tile``; ``sets`` is 1 (shared) or K (one per member)."""
    k, c = tile, x.shape[1]
    n, _, h, w = x.shape
    rb = block_size(n, samples, k) // groups  # images per block in one group
    xv = x.view(samples, k, groups, rb, c, h, w)
    if sets == 1:  # channels (G, C); rows (S, K, rb)
        xm = xv.permute(0, 1, 3, 2, 4, 5, 6).reshape(samples * k * rb, groups * c, h, w)
    else:  # channels (G, K, C); rows (S, rb)
        xm = xv.permute(0, 3, 2, 1, 4, 5, 6).reshape(samples * rb, groups * k * c, h, w)
    # each group's batch mean and unbiased variance come out of the fused kernel itself: running buffers
    # updated with momentum 1 hold exactly the batch statistics (no second pass over xm)
    stat_mean = x.new_zeros(xm.shape[1])  # (G·sets·C,)
    stat_var = x.new_zeros(xm.shape[1])
    y = F.batch_norm(xm, stat_mean, stat_var, bn.weight.reshape(-1).repeat(groups), bn.bias.reshape(-1).repeat(groups),
                     True, 1.0, bn.eps)  # (rows, G·sets·C, H, W)
    with torch.no_grad():
        bn.num_batches_tracked.add_(1)
        bn.running_mean.view(-1).lerp_(stat_mean.view(groups, -1).mean(0), bn.momentum)  # (sets·C,)
        bn.running_var.view(-1).lerp_(stat_var.view(groups, -1).mean(0), bn.momentum)
    if sets == 1:
        return y.view(samples, k, rb, groups, c, h, w).permute(0, 1, 3, 2, 4, 5, 6).reshape(n, c, h, w)
    return y.view(samples, rb, groups, k, c, h, w).permute(0, 3, 2, 1, 4, 5, 6).reshape(n, c, h, w)


class BatchNorm2d(nn.BatchNorm2d):
    """nn.BatchNorm2d shared by every member, with the uniform signature; in training, ghost batches of
    ``rows`` tiled rows (K = ``tile`` member blocks) when the batch holds more."""

    components = 1

    def __init__(self, channels: int, eps: float = 1e-5, momentum: float = 0.1, tile: int = 1,
                 rows: int | None = None) -> None:
        super().__init__(channels, eps=eps, momentum=momentum)
        self.tile, self.rows = tile, rows

    def forward(self, x: Tensor, samples: int = 1) -> Tensor:
        groups = ghost_groups(x.shape[0], samples * self.tile, self.rows) if self.training else 1
        if groups == 1:
            return super().forward(x)
        return ghost_batch_norm(self, x, samples, self.tile, 1, groups)


class MemberBatchNorm2d(nn.Module):
    """K BatchNorm2d layers in one call; x (S·K·B, C, H, W) -> same shape.

    Member k's rows are moved into channels k·C .. (k+1)·C - 1 of one (S·B, K·C, H, W) tensor,
    so one ``F.batch_norm`` call gives every member its own batch statistics (training) or its
    own running statistics (evaluation).
    """

    def __init__(self, channels: int, components: int, eps: float = 1e-5, momentum: float = 0.1,
                 rows: int | None = None) -> None:
        super().__init__()
        self.channels, self.components, self.eps, self.momentum = channels, components, eps, momentum
        self.rows = rows
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
        groups = ghost_groups(n, samples * k, self.rows) if self.training else 1
        if groups > 1:
            return ghost_batch_norm(self, x, samples, k, k, groups)
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
