"""Per-example Jacobians of a model's logits with respect to a subnetwork's weights only.

Reverse mode, one backward pass per logit (the CPU LSTM kernel has no forward-mode AD and no
vmap rule, so ``jacrev``/``jacfwd`` cannot go through it): the batch runs forward once with the
selected entries written as θ_MAP + scatter(δ), δ = 0 (S,), and each logit's gradient with respect
to δ is one row of J_S. Autograd only follows the paths to the tensors that hold selected
weights (a last-layer subnetwork never backpropagates through the LSTM) and every backward
pass yields S numbers: memory is O(B·S) for the rows plus one transient gradient per parameter
tensor touched, never O(B·D).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor, nn

from pipeline.bayes.laplace.errors import LaplaceError
from pipeline.bayes.laplace.params import Substitution, call_substituted


def as_logits(out: Tensor) -> Tensor:
    """A deterministic model's output (1, B) or (1, B, C) -> logits (B,) or (B, C)."""
    if out.dim() not in (2, 3) or out.shape[0] != 1:
        raise LaplaceError(f"expected logits (1, B) or (1, B, C) from one draw of a deterministic model, "
                           f"got {tuple(out.shape)}")
    return out[0]  # (1, B[, C]) -> (B[, C])


def map_logits(model: nn.Module, batch: dict) -> Tensor:
    """The MAP logits f(x; θ_MAP): (B,) binary or (B, C) multi-class."""
    with torch.no_grad():
        return as_logits(model(batch, samples=1))


MICRO_BATCH = 2  # admissions per backward group: each logit's backward pass runs over its whole group, so a
# small group is fastest (measured on the mortality LSTM 64 and 256: 1-4 admissions per group, ~6-9 ms each)


def split_batch(batch: dict, size: int) -> list[dict]:
    """Consecutive groups of ``size`` admissions of a batch dict (every tensor with the batch's leading size).

    A batch with a left-aligned ``mask`` (B, T) (docs/architecture.md, Batches) has its time axis cut to the group's
    longest admission (``tokens``, ``mask``, ``hours``, ``values``), which never changes a logit.
    """
    b = next(v.shape[0] for v in batch.values() if isinstance(v, Tensor) and v.dim() > 0)
    if b <= size:
        return [batch]
    groups = []
    for s in range(0, b, size):
        part = {k: (v[s:s + size] if isinstance(v, Tensor) and v.dim() > 0 and v.shape[0] == b else v)
                for k, v in batch.items()}
        mask = part.get("mask")
        if isinstance(mask, Tensor) and mask.dim() == 2:
            t = int(mask.sum(1).max()) if mask.numel() else 0
            for key in ("tokens", "mask", "hours", "values"):
                if isinstance(part.get(key), Tensor) and part[key].dim() >= 2:
                    part[key] = part[key][:, :t]
        groups.append(part)
    return groups


def iter_jacobians(model: nn.Module, batch: dict, sub: Substitution, micro_batch: int = MICRO_BATCH,
                   whole: bool = False) -> Iterator[tuple[Tensor, Tensor]]:
    """(f, J) of each group of ``micro_batch`` admissions, in batch order (memory: one group's J at a time);
    ``whole``: one (f, J) for the batch (memory O(B·S), so that a dense posterior's triangular solve
    takes all B right-hand sides at once instead of re-reading the S x S factor per group)."""
    parts = (_jacobian(model, part, sub) for part in split_batch(batch, micro_batch))
    if not whole:
        yield from parts
        return
    parts = list(parts)
    yield parts[0] if len(parts) == 1 else (torch.cat([f for f, _ in parts]), torch.cat([j for _, j in parts]))


def jacobian(model: nn.Module, batch: dict, sub: Substitution, micro_batch: int = MICRO_BATCH
             ) -> tuple[Tensor, Tensor]:
    """(f, J): logits (B,) or (B, C) at θ_MAP and J_S (B, S) or (B, C, S), in the model's dtype.

    The model's own parameters must not require grad (``params.frozen``).
    """
    return next(iter_jacobians(model, batch, sub, micro_batch, whole=True))


def _jacobian(model: nn.Module, batch: dict, sub: Substitution) -> tuple[Tensor, Tensor]:
    s = sub.size
    first = next(model.parameters())
    delta = torch.zeros(s, dtype=first.dtype, device=first.device, requires_grad=True)  # (S,) offset from θ_MAP
    with torch.enable_grad():
        f = as_logits(call_substituted(model, sub.tensors(model, delta), batch))  # (B,) or (B, C)
        rows = f.reshape(-1)  # (B,) or (B, C) -> (B·C,)
        jac = rows.new_zeros(rows.shape[0], s)  # (B·C, S)
        if rows.requires_grad:
            for r in range(rows.shape[0]):
                (g,) = torch.autograd.grad(rows[r], delta, retain_graph=r + 1 < rows.shape[0], allow_unused=True)
                if g is not None:
                    jac[r] = g
    return f.detach(), jac.view(*f.shape, s)  # (B·C, S) -> (B[, C], S)
