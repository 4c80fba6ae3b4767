"""Image benchmarks on the shared rank-1 models: data, corruptions, training and evaluation.

Library functions for a thin command line: ``train_vision(VisionTrainConfig) -> VisionTrainResult``,
``evaluate_vision(model, test_set, samples, corruptions) -> VisionReport``; the models are in
``pipeline.models.vision``, the metrics in ``pipeline.metrics.multiclass``.
"""

from .corruptions import CORRUPTIONS, SEVERITIES, corrupt
from .data import ImageSet, Splits, VisionDataError, cifar_splits, digits_splits, read_cifar, read_cifar_c
from .evaluate import VisionReport, evaluate_vision, predict_logits
from .train import (VisionTrainConfig, VisionTrainResult, load_splits, load_vision_checkpoint, save_vision_checkpoint,
                    train_vision, with_overrides)

__all__ = [
    "CORRUPTIONS", "SEVERITIES", "ImageSet", "Splits", "VisionDataError", "VisionReport", "VisionTrainConfig",
    "VisionTrainResult", "cifar_splits", "corrupt", "digits_splits", "evaluate_vision", "load_splits",
    "load_vision_checkpoint", "predict_logits", "read_cifar", "read_cifar_c", "save_vision_checkpoint",
    "train_vision", "with_overrides",
]
