"""Distributed data parallel on CPU (gloo) under torchrun: group membership, broadcasts, the DDP wrapper.

Under ``torchrun`` (RANK / WORLD_SIZE set) each rank takes a contiguous, disjoint shard of the
global batch, so gradients (averaged by DDP) equal the single-process ones; only rank 0
evaluates, tracks and writes checkpoints. A world of 1 is a plain process: every helper here
then returns its input.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class Dist:
    """Process group membership (world 1 = plain single process)."""

    rank: int = 0  # this process
    world: int = 1  # processes in the group
    owned: bool = False  # this module initialised the group (and destroys it at the end)

    @property
    def main(self) -> bool:
        return self.rank == 0


def init_distributed() -> Dist:
    """Join the gloo group when torchrun's RANK / WORLD_SIZE say so."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Dist()
    import torch.distributed as dist

    owned = not dist.is_initialized()
    if owned:
        dist.init_process_group("gloo")
    return Dist(rank=dist.get_rank(), world=dist.get_world_size(), owned=owned)


def from_rank0(value: float, d: Dist) -> float:
    """Rank 0's ``value`` on every rank."""
    if d.world <= 1:
        return value
    import torch.distributed as dist

    box = torch.tensor([value], dtype=torch.float64)
    dist.broadcast(box, src=0)
    return float(box[0])


def all_mean(values: torch.Tensor, d: Dist) -> torch.Tensor:
    if d.world > 1:
        import torch.distributed as dist

        dist.all_reduce(values)
        values = values / d.world
    return values


def broadcast(value: str, d: Dist) -> str:
    """Rank 0's ``value`` on every rank."""
    if d.world <= 1:
        return value
    import torch.distributed as dist

    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def wrap(objective: nn.Module, d: Dist) -> nn.Module:
    """DDP around the objective (loss, KL and L2 inside one forward, so DDP sees every use).

    ``find_unused_parameters``: a shard whose admissions all have zero bags skips the LSTM.
    """
    if d.world <= 1:
        return objective
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(objective, find_unused_parameters=True)
