"""The image task: ResNet-50 and Wide ResNets on the shared rank-1 layer library, their training recipe
(``train``, the plan of it the engine's loop runs: ``task``) and evaluation on clean and corrupted images
(``evaluate``); a vision run (trained, evaluated, tracked) is ``pipeline.workflows.vision_run``.

See ``net`` for the output layout (logits (S·K, B, classes), member axis first) and docs/vision.md for the
published defaults taken and changed. ``model_config`` and ``config`` import no torch; the names below load
their module on first use (``pipeline.core.lazy``), so the command line reads the settings without torch.
``KEY`` is the task's key in the registry (``pipeline.tasks.base.TASKS``): what its checkpoints and runs record.
"""

from pipeline.core.lazy import lazy

KEY = "vision"  # the task's registry key

_HOMES = {
    **dict.fromkeys(("ARCH_DEFAULTS", "Arch", "Method", "VisionConfig"), "model_config"),
    **dict.fromkeys(("DATASETS", "Dataset", "VisionEvalConfig", "VisionTrainConfig"), "config"),
    **dict.fromkeys(("LayerFactory", "he_normal_"), "factory"),
    **dict.fromkeys(("VisionDeepEnsemble", "VisionNet", "batch_images", "build_vision_model", "check_images",
                     "count_parameters", "parameter_report"), "net"),
    **dict.fromkeys(("BatchNorm2d", "MemberBatchNorm2d"), "norm"),
    **dict.fromkeys(("Bottleneck", "ResNet50"), "resnet"),
    **dict.fromkeys(("WideBasicBlock", "WideResNet"), "wrn"),
    **dict.fromkeys(("VisionReport", "evaluate_vision", "image_batches"), "evaluate"),
    **dict.fromkeys(("load_splits", "with_overrides"), "train"),
}
__all__ = sorted(_HOMES)
__getattr__, __dir__ = lazy(__name__, _HOMES)
