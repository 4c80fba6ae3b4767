"""Which S weights form the subnetwork (laplace-torch's ``SubnetMask`` family).

``wasserstein`` (the paper's rule, laplace-torch's ``LargestVarianceDiagLaplaceSubnetMask``):
the S weights with the largest marginal variance 1/(h_d + λ) under a diagonal GGN Laplace over
every weight, h the GGN's diagonal. With one scalar λ this order is that of h ascending for
every λ > 0, so the selection needs no prior precision. ``random`` (``RandomSubnetMask``) and
``magnitude`` (``LargestMagnitudeSubnetMask``) are the paper's baselines; ``last-layer``
(``LastLayerSubnetMask`` / ``ModuleNameSubnetMask``) is every weight and bias of the module that
runs last. Ties are broken by the lower index; indices are returned sorted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from .config import HessianKind, LaplaceConfig, Selection
from .curvature import accumulate_ggn
from .errors import LaplaceError
from .jacobian import map_logits
from .params import ParamVector, Substitution


@dataclass
class SubnetMask:
    """A selected subnetwork."""

    indices: Tensor  # (S,) sorted indices into the parameter vector
    selection: Selection  # the rule that chose them
    per_tensor: dict[str, int] = field(default_factory=dict)  # selected weights per parameter tensor
    unused: int = 0  # weights no training logit depends on (wasserstein only; left out when skip_unused)
    diagonal_ggn: Tensor | None = None  # (D,) the GGN diagonal the wasserstein rule ranked (None otherwise)

    @property
    def size(self) -> int:
        return int(self.indices.numel())


def top_indices(scores: Tensor, size: int, eligible: Tensor | None = None) -> Tensor:
    """Sorted indices of the ``size`` largest scores (ties: lower index first) among ``eligible``."""
    order = torch.sort(scores, descending=True, stable=True).indices  # (D,)
    if eligible is not None:
        order = order[eligible[order]]
    return order[:size].sort().values


def last_layer_name(model: nn.Module, batch: dict) -> str:
    """Name of the parameterised leaf module that runs last on ``batch`` (the output layer)."""
    seen: list[str] = []
    handles = [m.register_forward_hook(lambda mod, args, out, name=name: seen.append(name))
               for name, m in model.named_modules()
               if not list(m.children()) and any(True for _ in m.parameters(recurse=False))]
    try:
        map_logits(model, batch)
    finally:
        for h in handles:
            h.remove()
    if not seen:
        raise LaplaceError(f"{type(model).__name__}: no parameterised module ran (cannot find the last layer)")
    return seen[-1]


def diagonal_ggn(model: nn.Module, layout: ParamVector, batches: Iterable[dict], dtype: torch.dtype,
                 scale: float = 1.0) -> tuple[Tensor, int]:
    """The GGN's diagonal over every weight (D,), and the examples seen."""
    return accumulate_ggn(model, batches, Substitution.of(layout, None), HessianKind.DIAG, dtype, scale)


def select_subnet(model: nn.Module, layout: ParamVector, cfg: LaplaceConfig,
                  train_batches: Callable[[], Iterable[dict]], scale: float = 1.0) -> SubnetMask:
    """Choose the subnetwork of ``cfg`` (``train_batches()`` yields the GGN's training batches)."""
    d = layout.size
    if cfg.selection == Selection.LAST_LAYER:
        name = last_layer_name(model, next(iter(train_batches())))
        indices = layout.module_indices(name)
        if cfg.subnet_size is not None and cfg.subnet_size != indices.numel():
            raise LaplaceError(f"the last layer {name!r} has {indices.numel()} weights; subnet size "
                               f"{cfg.subnet_size} asks for another number (leave it unset)")
        return _mask(layout, indices, cfg.selection)
    size = d if cfg.subnet_size is None else cfg.subnet_size
    if size > d:
        raise LaplaceError(f"subnet size {size} exceeds the model's {d} weights")
    if cfg.selection == Selection.RANDOM:
        gen = torch.Generator().manual_seed(cfg.seed)
        return _mask(layout, torch.randperm(d, generator=gen)[:size].sort().values, cfg.selection)
    if cfg.selection == Selection.MAGNITUDE:
        return _mask(layout, top_indices(layout.vector(model).abs(), size), cfg.selection)
    h, _ = diagonal_ggn(model, layout, train_batches(), cfg.torch_dtype, scale)  # (D,)
    used = h > 0
    unused = int((~used).sum())
    if cfg.skip_unused and size > d - unused:
        raise LaplaceError(f"subnet size {size} exceeds the {d - unused} weights that the training logits depend "
                           f"on ({unused} of {d} have zero GGN; skip_unused=False includes them)")
    indices = top_indices(-h, size, used if cfg.skip_unused else None)  # largest 1/(h + λ) = smallest h
    mask = _mask(layout, indices, cfg.selection)
    mask.unused, mask.diagonal_ggn = unused, h
    return mask


def _mask(layout: ParamVector, indices: Tensor, selection: Selection) -> SubnetMask:
    return SubnetMask(indices, selection, dict(Counter(layout.names_of(indices))))
