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

Under bf16 autocast the running statistics (and the batch statistics they move by) stay in float32; the
normalisation runs on the bf16 activations with float32 statistics and affine parameters. A channels-last
input (``torch.channels_last``) is regrouped through its NHWC view (``fold`` / ``unfold``), so the output
keeps that memory format.
"""

from __future__ import annotations

import math

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
    k = tile
    n = x.shape[0]
    rb = block_size(n, samples, k) // groups  # images per block in one group
    split = (samples, k, groups, rb)  # the rows (S·K·B) as (S, K, G, rb)
    # sets 1: rows (S, K, rb), channels (G, C); sets K: rows (S, rb), channels (G, K, C)
    rows, chans = ((0, 1, 3), (2,)) if sets == 1 else ((0, 3), (2, 1))
    xm = fold(x, split, rows, chans)  # (rows, G·sets·C, H, W)
    # each group's batch mean and unbiased variance come out of the fused kernel itself: running buffers
    # updated with momentum 1 hold exactly the batch statistics (no second pass over xm); float32 like the
    # running statistics, whatever the activations' dtype (bf16 under autocast)
    stat_mean = x.new_zeros(xm.shape[1], dtype=bn.running_mean.dtype)  # (G·sets·C,)
    stat_var = x.new_zeros(xm.shape[1], dtype=bn.running_var.dtype)
    y = F.batch_norm(xm, stat_mean, stat_var, bn.weight.reshape(-1).repeat(groups), bn.bias.reshape(-1).repeat(groups),
                     True, 1.0, bn.eps)  # (rows, G·sets·C, H, W)
    with torch.no_grad():
        bn.num_batches_tracked.add_(1)
        bn.running_mean.view(-1).lerp_(stat_mean.view(groups, -1).mean(0), bn.momentum)  # (sets·C,)
        bn.running_var.view(-1).lerp_(stat_var.view(groups, -1).mean(0), bn.momentum)
    return unfold(y, split, rows, chans)  # (S·K·B, C, H, W)


def channels_last(x: Tensor) -> bool:
    """x (N, C, H, W) is laid out channels-last (and not also plain contiguous, as when C = 1 or H = W = 1)."""
    return x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()


def fold(x: Tensor, split: tuple[int, ...], rows: tuple[int, ...], chans: tuple[int, ...]) -> Tensor:
    """Move parts of the row axis into the channels: x (N, C, H, W) with N = prod(split) (row-major) ->
    (prod of split[rows], prod of split[chans]·C, H, W), the axes of ``rows`` and of ``chans`` in the order
    given, the channel axis C innermost; in x's memory format."""
    n, c, h, w = x.shape
    q = len(split)
    n_rows, n_chans = math.prod(split[a] for a in rows), math.prod(split[a] for a in chans)
    if channels_last(x):
        v = x.permute(0, 2, 3, 1).view(*split, h, w, c)  # NHWC view (*split, H, W, C)
        v = v.permute(*rows, q, q + 1, *chans, q + 2)  # (*rows, H, W, *chans, C)
        return v.reshape(n_rows, h, w, n_chans * c).permute(0, 3, 1, 2)  # (rows, chans·C, H, W) channels-last
    v = x.view(*split, c, h, w).permute(*rows, *chans, q, q + 1, q + 2)  # (*rows, *chans, C, H, W)
    return v.reshape(n_rows, n_chans * c, h, w)


def unfold(y: Tensor, split: tuple[int, ...], rows: tuple[int, ...], chans: tuple[int, ...]) -> Tensor:
    """``fold``'s inverse: y (prod split[rows], prod split[chans]·C, H, W) -> (prod(split), C, H, W), in y's
    memory format."""
    _, cc, h, w = y.shape
    q, r = len(split), len(rows)
    c = cc // math.prod(split[a] for a in chans)
    order = [*rows, *chans]  # the split axes as y holds them
    where = [order.index(a) for a in range(q)]  # position of split axis a in ``order``
    sizes = [split[a] for a in order]
    n = math.prod(split)
    if channels_last(y):
        v = y.permute(0, 2, 3, 1).reshape(*sizes[:r], h, w, *sizes[r:], c)  # (*rows, H, W, *chans, C)
        src = [p if p < r else p + 2 for p in where]  # the split axes' positions in v
        return v.permute(*src, r, r + 1, q + 2).reshape(n, h, w, c).permute(0, 3, 1, 2)
    v = y.reshape(*sizes, c, h, w).permute(*where, q, q + 1, q + 2)  # (*split, C, H, W)
    return v.reshape(n, c, h, w)


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
        k = self.components
        n = x.shape[0]
        b = block_size(n, samples, k)
        groups = ghost_groups(n, samples * k, self.rows) if self.training else 1
        if groups > 1:
            return ghost_batch_norm(self, x, samples, k, k, groups)
        # (S·K·B, C, H, W) -> (S, K, B, C, H, W) -> (S, B, K, C, H, W) -> (S·B, K·C, H, W)
        xm = fold(x, (samples, k, b), (0, 2), (1,))
        if self.training:
            self.num_batches_tracked.add_(1)
        y = F.batch_norm(xm, self.running_mean.view(-1), self.running_var.view(-1), self.weight.view(-1),
                         self.bias.view(-1), self.training, self.momentum, self.eps)  # (S·B, K·C, H, W)
        # (S·B, K·C, H, W) -> (S, B, K, C, H, W) -> (S, K, B, C, H, W) -> (S·K·B, C, H, W)
        return unfold(y, (samples, k, b), (0, 2), (1,))

    def extra_repr(self) -> str:
        return f"{self.channels}, components={self.components}, eps={self.eps}, momentum={self.momentum}"
