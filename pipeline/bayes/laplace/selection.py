"""Which S weights form the subnetwork (laplace-torch's ``SubnetMask`` family).

``wasserstein`` (the paper's rule, laplace-torch's ``LargestVarianceDiagLaplaceSubnetMask``):
the S weights with the largest marginal variance 1/(h_d + λ) under a diagonal GGN Laplace over
every weight, h the GGN's diagonal. With one scalar λ this order is that of h ascending for
every λ > 0, so the selection needs no prior precision. ``random`` (``RandomSubnetMask``) and
``magnitude`` (``LargestMagnitudeSubnetMask``) are the paper's baselines; ``last-layer``
(``LastLayerSubnetMask`` / ``ModuleNameSubnetMask``) is every weight and bias of the module that
runs last. Ties are broken by the lower index; indices are returned sorted.

``predictive`` (beyond the paper) ranks a weight by its contribution to the training predictive
variance under the same diagonal Laplace, Σ_n J_ni² / (h_i + λ): on an embedding model the
wasserstein rule's largest variances are the rows of rare tokens, which few predictions depend on
(their variance is the prior's); this rule weighs a variance by how many logits it moves. λ is the
given prior precision, else the diagonal Laplace's marginal-likelihood choice. ``exclude`` removes
weights from every rule's candidates ("embeddings": every ``nn.Embedding`` table). ``swag`` takes
the largest diagonal-SWAG variances (``swag``: SGD iterates continuing from θ_MAP), the paper's other
estimator of the marginal variances, which does not give rarely updated rows the prior's variance.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from pipeline.bayes.laplace.config import HessianKind, LaplaceConfig, Selection
from pipeline.bayes.laplace.curvature import accumulate_ggn, logit_hessian
from pipeline.bayes.laplace.errors import LaplaceError
from pipeline.bayes.laplace.jacobian import iter_jacobians, map_logits
from pipeline.bayes.laplace.marglik import optimize_marglik
from pipeline.bayes.laplace.options import EMBEDDINGS
from pipeline.bayes.laplace.params import ParamVector, Substitution
from pipeline.bayes.laplace.swag import swag_variances


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


def jacobian_moments(model: nn.Module, layout: ParamVector, batches: Iterable[dict], dtype: torch.dtype,
                     scale: float = 1.0) -> tuple[Tensor, Tensor]:
    """(h, q), each (D,): the GGN diagonal Σ_n Λ_n J_ni² and the squared Jacobian Σ_n J_ni² (over logits), one pass."""
    h = torch.zeros(layout.size, dtype=dtype)
    q = torch.zeros(layout.size, dtype=dtype)
    for batch in batches:
        for f, jac in iter_jacobians(model, batch, Substitution.of(layout, None)):  # (B[, C]), (B[, C], D)
            lam = logit_hessian(f.to(dtype))
            j2 = jac.to(dtype).square()
            if f.dim() == 1:
                h += (lam.unsqueeze(1) * j2).sum(0)  # (B, 1) * (B, D) -> (D,)
            else:  # the diagonal of Jᵀ Λ J: Σ_c,c' J_ci Λ_cc' J_c'i
                a = jac.to(dtype)
                h += (a * torch.bmm(lam, a)).sum((0, 1))  # (B, C, D) -> (D,)
            q += j2.reshape(-1, layout.size).sum(0)
    return h * scale, q * scale


def eligible(model: nn.Module, layout: ParamVector, exclude: tuple[str, ...]) -> Tensor | None:
    """(D,) bool: the weights a rule may select (None: all); ``exclude`` as ``LaplaceConfig.exclude``."""
    if not exclude:
        return None
    keep = torch.ones(layout.size, dtype=torch.bool)
    for name in exclude:
        prefixes = ([n for n, m in model.named_modules() if isinstance(m, nn.Embedding)] if name == EMBEDDINGS
                    else [name.removesuffix(".")])
        if not prefixes:
            raise LaplaceError(f"exclude {name!r}: the model has no embedding table")
        for prefix in prefixes:
            exact = [k for k, n in enumerate(layout.names) if n == prefix]
            parts = [torch.arange(layout.offsets[k], layout.offsets[k + 1]) for k in exact]
            keep[torch.cat(parts) if parts else layout.module_indices(prefix)] = False
    return keep


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
    allowed = eligible(model, layout, cfg.exclude)  # (D,) or None
    n_allowed = d if allowed is None else int(allowed.sum())
    if size > n_allowed:
        what = f"the model's {d} weights" if allowed is None else f"the {n_allowed} weights left by exclude"
        raise LaplaceError(f"subnet size {size} exceeds {what}")
    if cfg.selection == Selection.RANDOM:
        gen = torch.Generator().manual_seed(cfg.seed)
        order = torch.randperm(d, generator=gen)  # (D,)
        order = order if allowed is None else order[allowed[order]]
        return _mask(layout, order[:size].sort().values, cfg.selection)
    if cfg.selection == Selection.MAGNITUDE:
        return _mask(layout, top_indices(layout.vector(model).abs(), size, allowed), cfg.selection)
    if cfg.selection == Selection.SWAG:
        var = swag_variances(model, layout, train_batches(), steps=cfg.swag_steps, lr=cfg.swag_lr, l2=cfg.swag_l2,
                             burn_in=cfg.swag_burn_in, seed=cfg.seed)  # (D,)
        return _mask(layout, top_indices(var, size, allowed), cfg.selection)
    if cfg.selection == Selection.PREDICTIVE:
        h, q = jacobian_moments(model, layout, train_batches(), cfg.torch_dtype, scale)  # (D,) each
    else:
        h, _ = diagonal_ggn(model, layout, train_batches(), cfg.torch_dtype, scale)  # (D,)
    used = h > 0
    unused = int((~used).sum())
    candidates = used if cfg.skip_unused else torch.ones_like(used)
    candidates = candidates if allowed is None else candidates & allowed
    if size > int(candidates.sum()):
        raise LaplaceError(f"subnet size {size} exceeds the {int(candidates.sum())} weights that the training "
                           f"logits depend on and exclude leaves ({unused} of {d} have zero GGN; skip_unused=False "
                           "includes them)")
    if cfg.selection == Selection.PREDICTIVE:
        lam = cfg.prior_precision if cfg.prior_precision is not None else optimize_marglik(
            h, layout.vector(model)).prior_precision  # the diagonal Laplace's λ over all D weights
        scores = q / (h + lam)  # each weight's share of Σ_n Var f_n under N(θ, diag(h + λ)⁻¹)
        indices = top_indices(scores, size, candidates)
    else:
        indices = top_indices(-h, size, candidates)  # largest 1/(h + λ) = smallest h
    mask = _mask(layout, indices, cfg.selection)
    mask.unused, mask.diagonal_ggn = unused, h
    return mask


def _mask(layout: ParamVector, indices: Tensor, selection: Selection) -> SubnetMask:
    return SubnetMask(indices, selection, dict(Counter(layout.names_of(indices))))
