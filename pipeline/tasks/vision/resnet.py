"""ResNet-50 in the torchvision v1.5 layout (the stride sits on each bottleneck's 3x3 conv).

conv7x7/2 (C_in -> 64) -> BN -> ReLU -> maxpool 3x3/2 -> 4 stages of 3, 4, 6, 3 bottlenecks
(64, 128, 256, 512 planes, 4x expansion; stride 2 in every stage but the first) -> global average
pool -> dense. A bottleneck is conv1x1-BN-ReLU-conv3x3(stride)-BN-ReLU-conv1x1-BN plus a shortcut
(conv1x1(stride)-BN when the shape changes), then ReLU. The same layout as uncertainty-baselines'
``resnet50_rank1.py``; with 1,000 classes the deterministic network has torchvision's 25,557,032
parameters.
"""

from __future__ import annotations

from torch import Tensor, nn
from torch.nn import functional as F

from pipeline.tasks.vision.factory import ConvNorm, LayerFactory
from pipeline.tasks.vision.model_config import VisionConfig

RESNET50_STAGES = (3, 4, 6, 3)  # bottlenecks per stage
RESNET50_PLANES = (64, 128, 256, 512)  # bottleneck width per stage (output: 4x)
EXPANSION = 4  # output channels / planes of a bottleneck
HEAD_STDDEV = 0.01  # published head init N(0, 0.01²) (resnet50_rank1.py, fc1000)


class Bottleneck(nn.Module):
    """v1.5 bottleneck; x (N, C_in, H, W) -> (N, 4·planes, H / stride, W / stride)."""

    def __init__(self, f: LayerFactory, in_channels: int, planes: int, stride: int) -> None:
        super().__init__()
        out_channels = planes * EXPANSION
        self.reduce = ConvNorm(f, in_channels, planes, 1)
        self.spatial = ConvNorm(f, planes, planes, 3, stride, 1)
        self.expand = ConvNorm(f, planes, out_channels, 1)
        projection = stride != 1 or in_channels != out_channels
        self.shortcut = ConvNorm(f, in_channels, out_channels, 1, stride) if projection else None

    def forward(self, x: Tensor, samples: int = 1, **draw) -> Tensor:
        """``draw``: the call's ``sampling`` / ``generator``, for the layers that draw weights."""
        y = F.relu(self.reduce(x, samples, **draw))  # (N, planes, H, W)
        y = F.relu(self.spatial(y, samples, **draw))  # (N, planes, H', W')
        y = self.expand(y, samples, **draw)  # (N, 4·planes, H', W')
        return F.relu((x if self.shortcut is None else self.shortcut(x, samples, **draw)) + y)


class ResNet50(nn.Module):
    """ResNet-50 body; x (N, C_in, H, W) -> logits (N, classes), N = S·K·B."""

    def __init__(self, cfg: VisionConfig, f: LayerFactory) -> None:
        super().__init__()
        self.stem = ConvNorm(f, cfg.in_channels, 64, 7, 2, 3)
        blocks, channels = [], 64
        for stage, (count, planes) in enumerate(zip(RESNET50_STAGES, RESNET50_PLANES)):
            for i in range(count):
                blocks.append(Bottleneck(f, channels, planes, 2 if (i == 0 and stage > 0) else 1))
                channels = planes * EXPANSION
        self.blocks = nn.ModuleList(blocks)
        self.head = f.dense(channels, cfg.num_classes, weight_stddev=HEAD_STDDEV)

    def forward(self, x: Tensor, samples: int = 1, **draw) -> Tensor:
        x = F.relu(self.stem(x, samples, **draw))  # (N, 64, H / 2, W / 2)
        x = F.max_pool2d(x, 3, 2, 1)  # (N, 64, H / 4, W / 4)
        for block in self.blocks:
            x = block(x, samples, **draw)  # ... -> (N, 2048, H / 32, W / 32)
        return self.head(x.mean((2, 3)), samples, **draw)  # (N, 2048, H', W') -> (N, 2048) -> (N, classes)
