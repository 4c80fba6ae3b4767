"""Image-benchmark models (ResNet-50, Wide ResNet) on the shared rank-1 layer library.

See ``net`` for the output layout (logits (S·K, B, classes), member axis first) and
docs/vision.md for the published defaults taken and changed.
"""

from .config import ARCH_DEFAULTS, Arch, Method, VisionConfig
from .factory import LayerFactory, he_normal_
from .net import (VisionDeepEnsemble, VisionNet, build_vision_model, check_images, count_parameters,
                  parameter_report)
from .norm import BatchNorm2d, MemberBatchNorm2d
from .resnet import Bottleneck, ResNet50
from .wrn import WideBasicBlock, WideResNet

__all__ = [
    "ARCH_DEFAULTS", "Arch", "BatchNorm2d", "Bottleneck", "LayerFactory", "MemberBatchNorm2d", "Method", "ResNet50",
    "VisionConfig", "VisionDeepEnsemble", "VisionNet", "WideBasicBlock", "WideResNet", "build_vision_model",
    "check_images", "count_parameters", "he_normal_", "parameter_report",
]
