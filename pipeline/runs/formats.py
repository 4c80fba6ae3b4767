"""How a run's model is stored: one ``ModelFormat`` per kind of model file, and the loader of each.

- ``torch``: ``best.pt``, a torch checkpoint read with ``weights_only=True`` (``checkpoint``):
  the mortality models (deterministic, rank-1, BatchEnsemble, ...).
- ``baseline``: ``baseline.npz``, named arrays read with ``allow_pickle=False``
  (``pipeline.baselines``): the classical baselines (logistic regression, gradient boosting).

A run records its format in ``model_info.json`` (``model_format``) and in the tag
``model_format``; the file name alone decides how a model file is read, so a model directory
or a downloaded MLflow model needs nothing else. ``load_model`` returns (model, info) for
either: the model scores a FeatureSet through ``predict.feature_logits`` and the info dict has
the same keys (``model_kind``, ``model_config``, ``train_config``, ``refer_threshold``,
``score_samples``, ``max_bags``, ``max_tokens``, ``model_format``...).
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path

from pipeline.runs.checkpoint import BEST, CheckpointError

BASELINE_FILE = "baseline.npz"  # the model file of a classical baseline
FORMAT_TAG = "model_format"  # MLflow tag and model_info.json key


class ModelFormat(str, Enum):
    """The kind of model file a run holds."""

    TORCH = "torch"  # best.pt: the mortality models (torch checkpoint)
    BASELINE = "baseline"  # baseline.npz: the classical baselines (numpy arrays)


FILES = {ModelFormat.TORCH: BEST, ModelFormat.BASELINE: BASELINE_FILE}  # format -> file name


def format_of(path: Path | str) -> ModelFormat:
    """The format of a model file, by its name."""
    name = Path(path).name
    for fmt, file in FILES.items():
        if name == file:
            return fmt
    raise CheckpointError(f"{path}: not a model file ({' or '.join(FILES.values())})")


def model_file(directory: Path | str) -> Path | None:
    """The model file in ``directory`` (a run's checkpoint dir or a pyfunc's ``artifacts``), or None."""
    for file in FILES.values():
        if (Path(directory) / file).exists():
            return Path(directory) / file
    return None


def load_model(path: Path | str):
    """(model, info) of a model file of any format (see the module docstring)."""
    fmt = format_of(path)
    if fmt is ModelFormat.TORCH:
        from pipeline.runs.checkpoint import load_model as load_torch

        model, info = load_torch(path)
        return model, {**info, FORMAT_TAG: fmt.value}
    return _load_baseline(path)


def _load_baseline(path: Path | str):
    from pipeline.baselines.model import BaselineModel

    model = BaselineModel.load(path)
    meta = model.meta
    info = {"model_kind": model.kind.value, "model_config": meta.get("model_config") or {},
            "train_config": meta.get("train_config") or {}, "step": meta.get("rounds"),
            "val_nll": meta.get("val_nll"), "refer_threshold": meta.get("refer_threshold"),
            "score_samples": 1, "max_bags": None, "max_tokens": None, FORMAT_TAG: ModelFormat.BASELINE.value}
    return model, info
