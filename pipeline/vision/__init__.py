"""Image benchmarks on the shared rank-1 models: data, corruptions, training, evaluation.

Library functions for a thin command line: ``train_vision(VisionTrainConfig) -> VisionTrainResult``,
``evaluate_vision(model, test_set, samples, corruptions) -> VisionReport``; the tracked runs are
``pipeline.workflows.vision_run`` (``train_run``, ``evaluate_run``); the models are in ``pipeline.models.vision``, the
metrics in ``pipeline.metrics.multiclass``. ``config`` imports no torch; the names below load their module
on first use (``pipeline.lazy``).
"""

from pipeline.lazy import lazy

_HOMES = {
    **dict.fromkeys(("DATASETS", "Dataset", "VisionEvalConfig", "VisionTrainConfig"), "config"),
    **dict.fromkeys(("CORRUPTIONS", "SEVERITIES", "corrupt"), "corruptions"),
    **dict.fromkeys(("ImageSet", "Splits", "VisionDataError", "cifar_splits", "digits_splits", "read_cifar",
                     "read_cifar_c"), "data"),
    **dict.fromkeys(("VisionReport", "evaluate_vision", "model_device", "predict_logits"), "evaluate"),
    **dict.fromkeys(("VisionTrainResult", "load_splits", "resolve_device",
                     "save_vision_checkpoint", "train_vision", "with_overrides"), "train"),
}
__all__ = sorted(_HOMES)
__getattr__, __dir__ = lazy(__name__, _HOMES)
