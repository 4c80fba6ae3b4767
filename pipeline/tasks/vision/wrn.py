"""Wide ResNet WRN-n-k (Zagoruyko & Komodakis 2016) in the layout of the published rank-1 model.

stem conv3x3 (C_in -> 16) -> 3 groups of (n - 4) / 6 pre-activation basic blocks with 16k, 32k,
64k filters and strides 1, 2, 2 -> BN -> ReLU -> global average pool -> dense. A block is
BN-ReLU-conv3x3(stride)-BN-ReLU-conv3x3 plus a shortcut, a 1x1 conv (with the block's stride)
on the block's raw input when the shape changes (as uncertainty-baselines'
``wide_resnet_rank1.py``). At 32x32 input the pool covers 8x8, the published ``AveragePooling2D(8)``;
the global pool also takes smaller inputs (the digits benchmark, tests).
"""

from __future__ import annotations

from torch import Tensor, nn
from torch.nn import functional as F

from pipeline.tasks.vision.factory import LayerFactory
from pipeline.tasks.vision.model_config import VisionConfig

WRN_FILTERS = (16, 32, 64)  # filters of the three groups before the width multiplier
WRN_STRIDES = (1, 2, 2)  # stride of each group's first block


class WideBasicBlock(nn.Module):
    """Pre-activation basic block; x (N, C_in, H, W) -> (N, C_out, H / stride, W / stride)."""

    def __init__(self, f: LayerFactory, in_channels: int, out_channels: int, stride: int) -> None:
        super().__init__()
        self.bn1 = f.norm(in_channels)
        self.conv1 = f.conv(in_channels, out_channels, 3, stride, 1)
        self.bn2 = f.norm(out_channels)
        self.conv2 = f.conv(out_channels, out_channels, 3, 1, 1)
        projection = stride != 1 or in_channels != out_channels
        self.shortcut = f.conv(in_channels, out_channels, 1, stride, 0) if projection else None

    def forward(self, x: Tensor, samples: int = 1, **draw) -> Tensor:
        """``draw``: the call's ``sampling`` / ``generator``, for the layers that draw weights."""
        y = self.conv1(F.relu(self.bn1(x, samples)), samples, **draw)  # (N, C_out, H', W')
        y = self.conv2(F.relu(self.bn2(y, samples)), samples, **draw)  # (N, C_out, H', W')
        return (x if self.shortcut is None else self.shortcut(x, samples, **draw)) + y


class WideResNet(nn.Module):
    """WRN-``cfg.depth``-``cfg.width`` body; x (N, C_in, H, W) -> logits (N, classes), N = S·K·B."""

    def __init__(self, cfg: VisionConfig, f: LayerFactory) -> None:
        super().__init__()
        blocks_per_group = (cfg.depth - 4) // 6
        self.stem = f.conv(cfg.in_channels, WRN_FILTERS[0], 3, 1, 1)
        blocks, channels = [], WRN_FILTERS[0]
        for filters, stride in zip(WRN_FILTERS, WRN_STRIDES):
            for i in range(blocks_per_group):
                blocks.append(WideBasicBlock(f, channels, filters * cfg.width, stride if i == 0 else 1))
                channels = filters * cfg.width
        self.blocks = nn.ModuleList(blocks)
        self.norm = f.norm(channels)
        self.head = f.dense(channels, cfg.num_classes)

    def forward(self, x: Tensor, samples: int = 1, **draw) -> Tensor:
        x = self.stem(x, samples, **draw)  # (N, 16, H, W)
        for block in self.blocks:
            x = block(x, samples, **draw)  # ... -> (N, 64k, H / 4, W / 4)
        x = F.relu(self.norm(x, samples)).mean((2, 3))  # (N, 64k, H', W') -> (N, 64k)
        return self.head(x, samples, **draw)  # (N, classes)
