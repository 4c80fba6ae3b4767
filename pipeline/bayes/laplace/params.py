"""The parameter vector of a deterministic model, subnetwork indices into it, and re-parametrisation.

The vector is ``torch.nn.utils.parameters_to_vector(model.parameters())``: every parameter
tensor flattened (row-major) in ``named_parameters()`` order, so indices mean what laplace-torch's
``subnetwork_indices`` mean. ``substituted`` runs the model with the selected entries written as
θ_MAP + scatter(δ) for an S-vector δ, so autograd gives Jacobians with respect to those S
weights only (never a D-column Jacobian that is then sliced).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.func import functional_call

from pipeline.bayes.laplace.errors import LaplaceError


@dataclass(frozen=True)
class ParamVector:
    """Layout of a model's parameter vector: D entries over named tensors."""

    names: tuple[str, ...]  # parameter names, in named_parameters() order
    shapes: tuple[tuple[int, ...], ...]  # their shapes
    offsets: tuple[int, ...]  # start of each tensor in the vector; offsets[-1] = D (len(names) + 1 entries)

    @classmethod
    def of(cls, model: nn.Module) -> ParamVector:
        named = list(model.named_parameters())  # shared tensors appear once, as in parameters()
        offsets = [0]
        for _, p in named:
            offsets.append(offsets[-1] + p.numel())
        return cls(tuple(n for n, _ in named), tuple(tuple(p.shape) for _, p in named), tuple(offsets))

    @property
    def size(self) -> int:
        """D, the number of weights."""
        return self.offsets[-1]

    def vector(self, model: nn.Module) -> Tensor:
        """θ (D,), detached."""
        self.check(model)
        return torch.cat([p.detach().reshape(-1) for p in model.parameters()])  # each tensor -> (numel,), (D,)

    def check(self, model: nn.Module) -> None:
        """Raise unless ``model`` has exactly this layout."""
        other = ParamVector.of(model)
        if other != self:
            raise LaplaceError(f"model parameters ({len(other.names)} tensors, D={other.size}) do not match the "
                               f"Laplace layout ({len(self.names)} tensors, D={self.size})")

    def names_of(self, indices: Tensor) -> list[str]:
        """Name of the tensor holding each index (for reports)."""
        pos = torch.searchsorted(torch.tensor(self.offsets[1:]), indices.cpu(), right=True)  # (S,) tensor number
        return [self.names[int(k)] for k in pos]

    def module_indices(self, prefix: str) -> Tensor:
        """Indices of every entry of the parameters named ``prefix.*`` (a module's weights and bias)."""
        parts = [torch.arange(self.offsets[k], self.offsets[k + 1]) for k, n in enumerate(self.names)
                 if n.startswith(prefix + ".")]
        if not parts:
            raise LaplaceError(f"the model has no parameters under {prefix!r}")
        return torch.cat(parts)

    def check_indices(self, indices: Tensor) -> Tensor:
        """Sorted, unique int64 indices in [0, D) (raises otherwise)."""
        idx = torch.as_tensor(indices, dtype=torch.long).reshape(-1)  # any shape -> (S,)
        if idx.numel() == 0:
            raise LaplaceError("the subnetwork is empty")
        if int(idx.min()) < 0 or int(idx.max()) >= self.size:
            raise LaplaceError(f"subnetwork indices must lie in [0, {self.size}), "
                               f"got [{int(idx.min())}, {int(idx.max())}]")
        if not bool((idx[1:] > idx[:-1]).all()):
            raise LaplaceError("subnetwork indices must be sorted and unique")
        return idx


@dataclass(frozen=True)
class Substitution:
    """How S selected indices split over the parameter tensors (precomputed once)."""

    layout: ParamVector  # the model's parameter vector
    parts: tuple[tuple[int, int, int, Tensor | None], ...]  # (tensor, start, end in δ, local indices; None: all)

    @classmethod
    def of(cls, layout: ParamVector, indices: Tensor | None) -> Substitution:
        """``indices`` sorted unique (S,), or None for every weight (S = D)."""
        if indices is None:
            return cls(layout, tuple((k, layout.offsets[k], layout.offsets[k + 1], None)
                                     for k in range(len(layout.names)) if layout.offsets[k + 1] > layout.offsets[k]))
        idx = layout.check_indices(indices)
        bounds = torch.searchsorted(idx, torch.tensor(layout.offsets))  # (T+1,) first δ position of each tensor
        parts = []
        for k in range(len(layout.names)):
            a, b = int(bounds[k]), int(bounds[k + 1])
            if b > a:
                whole = b - a == layout.offsets[k + 1] - layout.offsets[k]
                parts.append((k, a, b, None if whole else idx[a:b] - layout.offsets[k]))
        return cls(layout, tuple(parts))

    @property
    def size(self) -> int:
        """S."""
        return self.parts[-1][2] if self.parts else 0

    def tensors(self, model: nn.Module, delta: Tensor) -> dict[str, Tensor]:
        """{name: θ_MAP + scatter(δ)} for every tensor holding a selected index; δ (S,)."""
        params = dict(model.named_parameters())
        out = {}
        for k, a, b, local in self.parts:
            name = self.layout.names[k]
            base = params[name].detach()
            part = delta[a:b].to(base.dtype)
            if local is None:
                out[name] = base + part.view(base.shape)  # (numel,) -> parameter shape
            else:
                out[name] = base.reshape(-1).index_add(0, local.to(base.device), part).view(base.shape)  # -> shape
        return out


@contextlib.contextmanager
def _fresh_rnn_weights(model: nn.Module) -> Iterator[None]:
    """Make ``nn.RNNBase`` modules read their (substituted) weights at every call.

    Their ``_flat_weights`` list is cached; ``functional_call`` swaps parameters without updating it,
    and the family's ``LSTMDeterministic`` passes it straight to the fused kernel. A pre-hook
    refreshes the cache inside the call; leaving restores it to the real parameters.
    """
    rnns = [m for m in model.modules() if isinstance(m, nn.RNNBase)]
    handles = [m.register_forward_pre_hook(lambda mod, args: mod._update_flat_weights()) for m in rnns]
    try:
        yield
    finally:
        for h in handles:
            h.remove()
        for m in rnns:
            m._update_flat_weights()


def call_substituted(model: nn.Module, tensors: dict[str, Tensor], batch: dict) -> Tensor:
    """``model(batch, samples=1)`` with the given parameter tensors in place of the model's."""
    with _fresh_rnn_weights(model):
        return functional_call(model, tensors, (batch,), {"samples": 1}, strict=False)


@contextlib.contextmanager
def frozen(model: nn.Module) -> Iterator[None]:
    """Evaluation mode and no gradient tracking of the model's own parameters; restored on exit."""
    saved = [(p, p.requires_grad) for p in model.parameters()]
    was_training = model.training
    model.eval()
    for p, _ in saved:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p, flag in saved:
            p.requires_grad_(flag)
        model.train(was_training)


def check_deterministic(model: nn.Module) -> None:
    """Raise a one-line LaplaceError unless ``model`` is of the layer library's deterministic kind."""
    from pipeline.bayes.layers import BayesianLayer

    inner = getattr(model, "module", model)
    name = type(inner).__name__
    kind = getattr(inner, "kind", None)
    kind = getattr(kind, "value", kind)
    what = f"{name}" + (f" of kind {kind!r}" if kind is not None else "")
    k = int(getattr(inner, "components", 1))
    if k != 1:
        raise LaplaceError(f"Laplace needs a deterministic model with one component; {what} has K={k} components")
    bayes = sorted({type(m).__name__ for m in inner.modules() if isinstance(m, BayesianLayer)})
    if bayes or getattr(inner, "stochastic", False):
        raise LaplaceError(f"Laplace needs a deterministic model; {what} has Bayesian layers "
                           f"({', '.join(bayes) or 'stochastic'})")
    if not any(True for _ in inner.parameters()):
        raise LaplaceError(f"{what} has no parameters")
