"""Models built on the layer family: the mortality models (``mortality``), their settings
(``config``, torch-free) and the named variants of the benchmark (``variants``, torch-free).
Names load their module on first use (``pipeline.lazy``), so configs are read without torch.
"""

from pipeline.lazy import lazy

_HOMES = {
    **dict.fromkeys(("ModelKind", "MortalityConfig", "model_config"), "config"),
    **dict.fromkeys(("DeepEnsemble", "MortalityNet", "build_model"), "mortality"),
}
__all__ = sorted(_HOMES)
__getattr__, __dir__ = lazy(__name__, _HOMES)
