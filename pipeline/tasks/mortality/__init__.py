"""The mortality task: in-hospital death after the first 24 h from bagged event sequences. The networks
(``network``), their settings (``config``, torch-free), the named variants of the benchmark (``variants``,
torch-free), the training settings (``train_config``), the classical baselines (``baselines``).
Names load their module on first use (``pipeline.core.lazy``), so configs are read without torch.
"""

from pipeline.core.lazy import lazy

_HOMES = {
    **dict.fromkeys(("ModelKind", "MortalityConfig", "model_config"), "config"),
    **dict.fromkeys(("DeepEnsemble", "MortalityNet", "build_model"), "network"),
    **dict.fromkeys(("NllMode", "Preset", "PRESETS", "TrainConfig"), "train_config"),
}
__all__ = sorted(_HOMES)
__getattr__, __dir__ = lazy(__name__, _HOMES)
