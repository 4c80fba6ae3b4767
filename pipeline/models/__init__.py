"""Models built on the layer family (mortality now, image models later)."""

from .mortality import DeepEnsemble, ModelKind, MortalityConfig, MortalityNet, build_model

__all__ = ["DeepEnsemble", "ModelKind", "MortalityConfig", "MortalityNet", "build_model"]
