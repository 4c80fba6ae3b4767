"""Image-benchmark models (ResNet-50, Wide ResNet) on the shared rank-1 layer library.

See ``net`` for the output layout (logits (S·K, B, classes), member axis first) and
docs/vision.md for the published defaults taken and changed. ``config`` imports no torch; the
names below load their module on first use (``pipeline.lazy``), so the command line reads the
settings without torch.
"""

from pipeline.lazy import lazy

_HOMES = {
    **dict.fromkeys(("ARCH_DEFAULTS", "Arch", "Method", "VisionConfig"), "config"),
    **dict.fromkeys(("LayerFactory", "he_normal_"), "factory"),
    **dict.fromkeys(("VisionDeepEnsemble", "VisionNet", "batch_images", "build_vision_model", "check_images",
                     "count_parameters", "parameter_report"), "net"),
    **dict.fromkeys(("BatchNorm2d", "MemberBatchNorm2d"), "norm"),
    **dict.fromkeys(("Bottleneck", "ResNet50"), "resnet"),
    **dict.fromkeys(("WideBasicBlock", "WideResNet"), "wrn"),
}
__all__ = sorted(_HOMES)
__getattr__, __dir__ = lazy(__name__, _HOMES)
