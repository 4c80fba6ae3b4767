"""Time-major packed layout for per-row recurrences (the layout of ``PackedSequence``).

Rows are sorted by decreasing length; step t holds the ``batch_sizes[t]`` rows still running,
so a recurrence only computes real steps and the rows alive at step t are a prefix of those
alive at step t - 1. Per-row tensors (factors, biases) are put in the same sorted order with
``sort``. With equal lengths the packed layout is the plain time-major one and every method
is a view (no gathers). Rows of length 0 never run: their outputs and final states are zero.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class Packing:
    """Index maps between padded (N, T, ...) rows and the packed (P, ...) layout."""

    n: int  # rows N
    t_len: int  # padded steps T
    batch_sizes: list[int]  # rows alive at each step, non-increasing (P = sum)
    order: Tensor | None  # (N,) original row of each sorted position; None: equal lengths, identity
    flat: Tensor | None  # (P,) index t·N + original row of each packed position (None: identity)
    row: Tensor | None  # (P,) sorted position of the row of each packed position (None: identity)
    last: Tensor  # (N,) packed index of each original row's last step; P for length 0

    @classmethod
    def build(cls, lengths: Tensor, t_len: int) -> Packing:
        """Packing for left-aligned rows with ``lengths`` (N,) real steps out of ``t_len``."""
        n = lengths.shape[0]
        device = lengths.device
        if n and t_len and bool((lengths == t_len).all()):
            last = torch.arange((t_len - 1) * n, t_len * n, device=device)
            return cls(n, t_len, [n] * t_len, None, None, None, last)
        order = torch.sort(lengths, descending=True, stable=True).indices  # (N,)
        steps = torch.arange(t_len, device=device)
        alive = steps.unsqueeze(1) < lengths[order].unsqueeze(0)  # (T, N) sorted rows alive per step
        t_idx, pos = alive.nonzero(as_tuple=True)  # (P,) each: time-major, prefix per step
        batch_sizes = [int(b) for b in alive.sum(1).tolist() if b > 0]
        last = torch.full((n,), len(t_idx), dtype=torch.long, device=device)
        real = lengths[order] > 0
        if bool(real.any()):
            sizes = alive.sum(1)  # (T,)
            offsets = torch.cumsum(sizes, 0) - sizes  # (T,) packed start of each step
            sorted_last = offsets[(lengths[order] - 1).clamp(min=0)] + torch.arange(n, device=device)
            last[order[real]] = sorted_last[real]
        return cls(n, t_len, batch_sizes, order, t_idx * n + order[pos], pos, last)

    @property
    def equal(self) -> bool:
        return self.order is None

    def sort(self, rows: Tensor) -> Tensor:
        """Per-row tensor (N, ...) in sorted order."""
        return rows if self.order is None else rows.index_select(0, self.order)

    def pack(self, x: Tensor) -> Tensor:
        """Padded batch-first (N, T, D) -> packed (P, D)."""
        steps = x.transpose(0, 1).reshape(self.t_len * self.n, x.shape[2])  # (T·N, D) time-major
        return steps if self.flat is None else steps.index_select(0, self.flat)

    def scale(self, packed: Tensor, sorted_rows: Tensor) -> Tensor:
        """Packed (P, D) times a per-row factor (N, D) in sorted order."""
        if self.row is None:
            d = packed.shape[1]
            # (T·N, D) -> (T, N, D), broadcast (N, D) over steps -> (T·N, D)
            return (packed.view(self.t_len, self.n, d) * sorted_rows).view(-1, d)
        return packed * sorted_rows.index_select(0, self.row)

    def unpack(self, packed: Tensor) -> Tensor:
        """Packed (P, H) -> padded batch-first (N, T, H), zero at padding, original row order."""
        h = packed.shape[1]
        if self.flat is None:
            return packed.view(self.t_len, self.n, h).transpose(0, 1)  # (T·N, H) -> (N, T, H) view
        full = packed.new_zeros(self.t_len * self.n, h).index_copy(0, self.flat, packed)  # (T·N, H)
        return full.view(self.t_len, self.n, h).transpose(0, 1)

    def final(self, packed: Tensor) -> Tensor:
        """Each original row's value at its last real step: packed (P, H) -> (N, H); 0 for length 0."""
        if self.flat is None:
            return packed.index_select(0, self.last)
        padded = torch.cat([packed, packed.new_zeros(1, packed.shape[1])])  # row P: zeros
        return padded.index_select(0, self.last)
