"""The mortality task: in-hospital death after the first 24 h from bagged event sequences. The networks
(``network``), their settings (``config``, torch-free), the named variants of the benchmark (``variants``,
torch-free), the training settings (``train_config``), the classical baselines (``baselines``).
Names load their module on first use (``pipeline.core.lazy``), so configs are read without torch. ``KEY`` is
the task's key in the registry (``pipeline.tasks.base.TASKS``): what its checkpoints and runs record.
"""

from pipeline.core.lazy import lazy

KEY = "mortality"  # the task's registry key

_HOMES = {
    **dict.fromkeys(("ModelKind", "MortalityConfig", "model_config"), "config"),
    **dict.fromkeys(("DeepEnsemble", "MortalityNet", "build_model"), "network"),
    **dict.fromkeys(("NllMode", "Preset", "PRESETS", "TrainConfig"), "train_config"),
}
__all__ = sorted(_HOMES)
__getattr__, __dir__ = lazy(__name__, _HOMES)
