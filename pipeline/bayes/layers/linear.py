"""Dense layers of the family: rank-1, BatchEnsemble and a plain deterministic member.

Inputs have leading size S·K·B (see ``members``); extra middle dims are allowed.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from pipeline.bayes.layers.factors import Draw, Perturbation, Rank1Config, Rank1Layer, Rank1Vector, materialize
from pipeline.bayes.layers.members import component_rows
from pipeline.bayes.layers.priors import PosteriorKind


class LinearRank1(Rank1Layer):
    """y = ((x ∘ s) Wᵀ) ∘ r + b_k  (multiplicative) or x Wᵀ + (x·s) r + b_k  (additive).

    W (out, in) is deterministic; each of the K components owns distributions over
    r (out,) and s (in,) and a bias b_k (out,).
    """

    def __init__(self, in_features: int, out_features: int, components: int = 4,
                 bias: bool = True, config: Rank1Config | None = None) -> None:
        super().__init__()
        self.in_features, self.out_features, self.components = in_features, out_features, components
        self.config = config if config is not None else Rank1Config()
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.bias = nn.Parameter(torch.empty(components, out_features)) if bias else None
        self.r = Rank1Vector(components, out_features, self.config)
        self.s = Rank1Vector(components, in_features, self.config)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))  # as nn.Linear
        if self.bias is not None:
            bound = 1.0 / math.sqrt(self.in_features)
            nn.init.uniform_(self.bias, -bound, bound)

    def forward_with(self, x: Tensor, draws: dict[str, Draw], samples: int = 1) -> Tensor:
        """Apply given factor draws: x (N, *, in) -> (N, *, out)."""
        if x.dim() == 2 and draws["s"].per_block and draws["r"].per_block and not torch.is_grad_enabled():
            return self._forward_blocks(x, draws)
        n = x.shape[0]
        mid = (1,) * (x.dim() - 2)
        s = draws["s"].rows(n).view(n, *mid, self.in_features)  # (N, 1.., in)
        r = draws["r"].rows(n).view(n, *mid, self.out_features)  # (N, 1.., out)
        if self.config.perturbation == Perturbation.ADDITIVE:
            y = F.linear(x, self.weight) + (x * s).sum(-1, keepdim=True) * r
        else:
            y = F.linear(x * s, self.weight) * r
        if self.bias is not None:
            y = y + component_rows(self.bias, n, samples).view(n, *mid, self.out_features)
        return y

    def l2_biases(self):
        if self.bias is not None:
            yield self.bias

    def _forward_blocks(self, x: Tensor, draws: dict[str, Draw]) -> Tensor:
        """``forward_with`` for one draw per block (inference): each block's W_j built once.

        x (G·B, in), member-major blocks; block j uses r_j, s_j and b_{j % K}. One batched product
        (G, B, in) x (G, in, out) replaces scaling every row by s and r (same result up to rounding).
        """
        s, r = draws["s"].blocks(), draws["r"].blocks()  # (G, in), (G, out)
        g = s.shape[0]
        if x.shape[0] % g:
            raise ValueError(f"LinearRank1: {x.shape[0]} rows do not split into {g} blocks")
        kernel = materialize(self.weight, r, s, self.config.perturbation).transpose(1, 2)  # (G, out, in) -> (G, in,
            # out)
        xb = x.reshape(g, x.shape[0] // g, self.in_features)  # (G·B, in) -> (G, B, in)
        if self.bias is None:
            y = torch.bmm(xb, kernel)
        else:
            bias = self.bias.repeat(g // self.components, 1).unsqueeze(1)  # (K, out) -> (G, 1, out)
            y = torch.baddbmm(bias, xb, kernel)  # (G, B, out)
        return y.view(x.shape[0], self.out_features)  # (G, B, out) -> (G·B, out)


class LinearBatchEnsemble(LinearRank1):
    """BatchEnsemble dense layer: rank-1 layer with point-mass (delta) factors, no KL."""

    def __init__(self, in_features: int, out_features: int, components: int = 4,
                 bias: bool = True, config: Rank1Config | None = None) -> None:
        cfg = config if config is not None else Rank1Config()
        cfg = Rank1Config(**{**vars(cfg), "posterior": PosteriorKind.DELTA})
        super().__init__(in_features, out_features, components, bias, cfg)


class LinearDeterministic(nn.Linear):
    """Plain dense layer with the family's ``forward(x, samples)`` signature."""

    components = 1

    def forward(self, x: Tensor, samples: int = 1, *, sampling=None, generator=None) -> Tensor:  # noqa: ARG002
        return super().forward(x)  # (uniform signature: no weight draws)
