"""Layers of one method, built and initialised as in the published models.

Every architecture asks a ``LayerFactory`` for its convolutions, dense head and BatchNorms, so a
builder is written once for all methods: deterministic (plain layers), batchensemble (point-mass
rank-1 factors), rank1 (mixture posterior over the factors). Deep ensembles are K deterministic
networks (``net.VisionDeepEnsemble``). Initialisation (the Keras initialisers of the published
models): kernels ``he_normal`` (truncated normal, stddev sqrt(2 / fan_in)), biases zero, BN scale
1 and offset 0; the factors as ``pipeline.bayes.layers`` initialises them from ``VisionConfig.rank1()``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from pipeline.bayes.layers import (
    Conv2dBatchEnsemble,
    Conv2dDeterministic,
    Conv2dRank1,
    LinearBatchEnsemble,
    LinearDeterministic,
    LinearRank1,
)
from pipeline.tasks.vision.model_config import Method, VisionConfig
from pipeline.tasks.vision.norm import BatchNorm2d, MemberBatchNorm2d

TRUNCATED_NORMAL_STDDEV = 0.87962566103423978  # stddev of a unit normal truncated at ±2 (Keras' correction)


def he_normal_(weight: Tensor) -> Tensor:
    """Keras ``he_normal`` in place: N(0, 2 / fan_in) truncated at two stddevs, variance kept.

    fan_in = in_features (dense, weight (out, in)) or in_channels·kh·kw (conv, (out, in, kh, kw)).
    """
    fan_in = weight.shape[1] * math.prod(weight.shape[2:])
    std = math.sqrt(2.0 / fan_in) / TRUNCATED_NORMAL_STDDEV
    with torch.no_grad():
        return nn.init.trunc_normal_(weight, 0.0, std, -2.0 * std, 2.0 * std)


class LayerFactory:
    """Conv2d / Linear / BatchNorm2d layers of ``cfg.method`` with K = ``cfg.components``."""

    def __init__(self, cfg: VisionConfig) -> None:
        if cfg.method == Method.DEEP_ENSEMBLE:
            raise ValueError("a deep ensemble is K deterministic networks: build its members with method=deterministic")
        self.cfg, self.components = cfg, cfg.components
        self.rank1_config = cfg.rank1()

    def conv(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1,
             padding: int = 0) -> nn.Module:
        """Bias-free convolution (every published ResNet conv is followed by BatchNorm)."""
        args = (in_channels, out_channels, kernel_size, stride, padding)
        if self.cfg.method == Method.DETERMINISTIC:
            layer = Conv2dDeterministic(*args, bias=False)
        else:
            cls = Conv2dRank1 if self.cfg.method == Method.RANK1 else Conv2dBatchEnsemble
            layer = cls(*args, bias=False, components=self.components, config=self.rank1_config)
        he_normal_(layer.weight)
        return layer

    def dense(self, in_features: int, out_features: int, weight_stddev: float | None = None) -> nn.Module:
        """Classifier head with a bias (one per member for rank-1 / BatchEnsemble), zero-initialised.

        Weights ``he_normal``, or N(0, weight_stddev²) when given (the published ResNet-50: 0.01).
        """
        if self.cfg.method == Method.DETERMINISTIC:
            layer = LinearDeterministic(in_features, out_features)
        else:
            cls = LinearRank1 if self.cfg.method == Method.RANK1 else LinearBatchEnsemble
            layer = cls(in_features, out_features, components=self.components, config=self.rank1_config)
        if weight_stddev is None:
            he_normal_(layer.weight)
        else:
            nn.init.normal_(layer.weight, 0.0, weight_stddev)
        nn.init.zeros_(layer.bias)
        return layer

    def norm(self, channels: int) -> nn.Module:
        """Shared BatchNorm, or one per member with ``member_batchnorm`` (K > 1); ghost batches of ``bn_rows``."""
        cfg = self.cfg
        if cfg.member_batchnorm and self.components > 1:
            return MemberBatchNorm2d(channels, self.components, eps=cfg.bn_eps, momentum=cfg.bn_momentum,
                                     rows=cfg.bn_rows)
        return BatchNorm2d(channels, eps=cfg.bn_eps, momentum=cfg.bn_momentum, tile=self.components, rows=cfg.bn_rows)


class ConvNorm(nn.Module):
    """conv -> BatchNorm (no activation); x (N, C_in, H, W) -> (N, C_out, H', W')."""

    def __init__(self, f: LayerFactory, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1,
                 padding: int = 0) -> None:
        super().__init__()
        self.conv = f.conv(in_channels, out_channels, kernel_size, stride, padding)
        self.bn = f.norm(out_channels)

    def forward(self, x: Tensor, samples: int = 1, **draw) -> Tensor:
        return self.bn(self.conv(x, samples, **draw), samples)
