"""Shared base of the Bayesian layer family: sampling modes, KL and L2 collection."""

from __future__ import annotations

from typing import Iterator

import torch
from torch import Tensor, nn

from pipeline.bayes.layers.options import Sampling


class BayesianLayer(nn.Module):
    """Base of every layer with a variational posterior.

    Attributes ``sampling`` (a ``Sampling``) and ``use_mean`` (posterior means instead of
    draws, for tests and deterministic evaluation) are set per layer or by ``set_sampling``:
    they are the layer's defaults (training). A call may override the sampling mode and give
    its own ``torch.Generator`` (``forward(..., sampling=, generator=)``): evaluation and
    serving pass both per call and never change a layer's attributes, so concurrent calls on
    one model share no mutable state and a call's draws depend only on its generator.
    """

    def __init__(self) -> None:
        super().__init__()
        self.sampling = Sampling.PER_EXAMPLE
        self.use_mean = False

    def mode_for(self, sampling: Sampling | str | None = None) -> Sampling:
        """The sampling mode of a call: ``sampling`` when given, else the layer's own."""
        return self.sampling if sampling is None else Sampling(sampling)

    def kl(self) -> Tensor:
        """KL(q || p) of this layer's own variational parameters (a scalar)."""
        raise NotImplementedError(f"{type(self).__name__} must implement kl()")

    def l2_weights(self) -> Iterator[Tensor]:
        """Deterministic weight tensors that an L2 penalty applies to (none by default)."""
        return iter(())

    def l2_biases(self) -> Iterator[Tensor]:
        """Deterministic bias tensors that an L2 penalty with biases applies to (none by default)."""
        return iter(())


def set_sampling(module: nn.Module, mode: str | None = None, use_mean: bool | None = None) -> None:
    """Set the sampling mode and/or mean-only flag on every Bayesian layer of ``module``."""
    new_mode = Sampling(mode) if mode is not None else None
    for layer in module.modules():
        if isinstance(layer, BayesianLayer):
            if new_mode is not None:
                layer.sampling = new_mode
            if use_mean is not None:
                layer.use_mean = bool(use_mean)


def kl_divergence(module: nn.Module) -> Tensor:
    """Sum of ``kl()`` over every Bayesian layer in ``module`` (0 when there is none)."""
    terms = [m.kl() for m in module.modules() if isinstance(m, BayesianLayer)]
    if not terms:
        return _zero(module)
    return torch.stack([t.reshape(()) for t in terms]).sum()


def l2_penalty(module: nn.Module, biases: bool = False) -> Tensor:
    """Sum of squares of every deterministic weight matrix / kernel / embedding table (and, with
    ``biases``, every deterministic bias: Keras' bias_regularizer, as records-research sets it).

    Rank-1 factors and variational parameters are excluded, biases unless asked. Plain torch
    layers (Linear, Conv2d, Embedding, EmbeddingBag, LSTM) count their weight (and bias) tensors,
    other modules what their ``l2_weights()`` yields.
    """
    total = _zero(module)
    for m in module.modules():
        for w in _l2_tensors(m, biases):
            total = total + w.pow(2).sum()
    return total


def _l2_tensors(m: nn.Module, biases: bool = False) -> Iterator[Tensor]:
    if isinstance(m, BayesianLayer):
        yield from m.l2_weights()
        if biases:
            yield from m.l2_biases()
    elif isinstance(m, (nn.Linear, nn.Conv2d, nn.Embedding, nn.EmbeddingBag)):
        yield m.weight
        if biases and getattr(m, "bias", None) is not None:
            yield m.bias
    elif isinstance(m, nn.LSTM):
        for name, p in m.named_parameters(recurse=False):
            if name.startswith("weight_") or (biases and name.startswith("bias_")):
                yield p
    elif callable(getattr(m, "l2_weights", None)):  # a deterministic module's own weights (e.g. a bag's query)
        yield from m.l2_weights()


def _zero(module: nn.Module) -> Tensor:
    p = next(module.parameters(), None)
    return torch.zeros((), dtype=p.dtype if p is not None else torch.float32,
                       device=p.device if p is not None else None)
