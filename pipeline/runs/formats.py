"""How a run's model is stored and loaded: the one place that decides it.

One ``ModelFormat`` per kind of model file, and the loader of each:

- ``torch``: ``best.pt``, a torch checkpoint read with ``weights_only=True`` (``checkpoint``).
  Its ``kind`` says which model it holds: none, the mortality models (deterministic, rank-1,
  BatchEnsemble, ...); ``laplace``, a Laplace run's MAP model and posterior (``pipeline.laplace``,
  scored like any model); ``vision``, an image model (``pipeline.models.vision``).
- ``baseline``: ``baseline.npz``, named arrays read with ``allow_pickle=False``
  (``pipeline.baselines``): the classical baselines (logistic regression, gradient boosting).

What a run's model takes and predicts is its ``RunKind`` (mortality | vision), recorded in the
info (``run_kind``) and, for runs, in the tag ``store.RUN_KIND_TAG``; ``store`` refuses a run of
the other kind before loading it.

A run records its format in ``model_info.json`` (``model_format``) and in the tag
``model_format``; the file name alone decides how a model file is read, so a model directory
or a downloaded MLflow model needs nothing else. ``load_model`` returns (model, info) for
either: the model scores a FeatureSet through ``predict.feature_logits`` and the info dict has
the same keys (``model_kind``, ``model_config``, ``train_config``, ``refer_threshold``, ``refer_measure``,
``score_samples``, ``max_bags``, ``max_tokens``, ``model_format``...).
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path

from pipeline.models.checkpoint import BEST, CheckpointError, read_checkpoint

BASELINE_FILE = "baseline.npz"  # the model file of a classical baseline
FORMAT_TAG = "model_format"  # MLflow tag and model_info.json key


class RunKind(str, Enum):
    """What a run's model takes and predicts."""

    MORTALITY = "mortality"  # a mortality model: admissions' features in, risk of death out
    VISION = "vision"  # an image classifier (pipeline.models.vision; a Laplace run of one too)


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


def load_model(path: Path | str, device=None):
    """(model, info) of a model file of any format and kind (see the module docstring); a torch
    model in eval mode, on ``device`` (read onto the CPU, then moved; None: the CPU). A file not named ``baseline.npz`` is read as a torch checkpoint (a run's
    ``best.pt``, or a checkpoint a benchmark saved under its own name)."""
    if Path(path).name == BASELINE_FILE:
        return _load_baseline(path)
    ckpt = read_checkpoint(path)
    loader = _TORCH_KINDS.get(ckpt.get("kind"))
    if loader is None:
        raise CheckpointError(f"{path}: checkpoint kind {ckpt.get('kind')!r} is not one of "
                              f"{sorted(k or 'mortality' for k in _TORCH_KINDS)}")
    model, info = loader(ckpt)
    if device is not None:
        model = model.to(device)
    return model, {**info, FORMAT_TAG: ModelFormat.TORCH.value}


def _load_mortality(ckpt: dict):
    """A mortality model and its info (kind, configs, refer threshold, score samples, caps)."""
    from pipeline.models import build_model
    from pipeline.models.config import saved_config

    model = build_model(ckpt["model_kind"], saved_config(ckpt["model_config"]))
    model.load_state_dict(ckpt["model"])
    model.eval()
    tc = ckpt["train_config"]
    info = {k: ckpt.get(k) for k in ("model_kind", "model_config", "train_config", "step", "val_nll", "refer_threshold",
                                     "refer_measure")}
    info.update(score_samples=tc["score_samples"], max_bags=tc["max_bags"], max_tokens=tc["max_tokens"],
                run_kind=RunKind.MORTALITY.value)
    return model, info


def _load_vision(ckpt: dict):
    """An image model and its info: the method as ``model_kind``, ``score_samples`` = its ``eval_samples``."""
    from pipeline.models.vision import VisionConfig, build_vision_model

    model = build_vision_model(VisionConfig(**ckpt["model_config"]))
    model.load_state_dict(ckpt["model"])
    model.eval()
    tc = ckpt["train_config"]
    info = {"run_kind": RunKind.VISION.value, "model_kind": ckpt["model_config"]["method"],
            "model_config": ckpt["model_config"], "train_config": tc, "steps": ckpt.get("steps"),
            "step": ckpt.get("steps"), "val_metrics": ckpt.get("val_metrics"),
            "val_nll": (ckpt.get("val_metrics") or {}).get("nll"), "refer_threshold": None,
            "score_samples": tc.get("eval_samples", 1), "max_bags": None, "max_tokens": None}
    return model, info


def _load_laplace(ckpt: dict):
    """A Laplace run's ``LinearizedLaplaceModel`` (its MAP model and posterior) and its info."""
    from pipeline.laplace.model import LinearizedLaplaceModel

    model = LinearizedLaplaceModel.from_checkpoint(ckpt).eval()
    tc = ckpt.get("train_config") or {}
    settings = {k: v for k, v in ckpt["laplace"].items() if not k.startswith("param_")}
    info = {"model_kind": "laplace", "model_label": model.label, "model_config": settings, "train_config": tc,
            "step": ckpt.get("step"), "val_nll": ckpt.get("val_nll"), "refer_threshold": ckpt.get("refer_threshold"),
            "refer_measure": ckpt.get("refer_measure"), "score_samples": tc.get("score_samples"),
            "max_bags": tc.get("max_bags"), "max_tokens": tc.get("max_tokens"),
            "map_kind": ckpt.get("map_kind"), "run_kind": ckpt.get("run_kind", RunKind.MORTALITY.value)}
    return model, info


_TORCH_KINDS = {None: _load_mortality, "laplace": _load_laplace, "vision": _load_vision}  # best.pt's "kind"


def _load_baseline(path: Path | str):
    from pipeline.baselines.model import BaselineModel

    model = BaselineModel.load(path)
    meta = model.meta
    info = {"model_kind": model.kind.value, "model_config": meta.get("model_config") or {},
            "train_config": meta.get("train_config") or {}, "step": meta.get("rounds"),
            "val_nll": meta.get("val_nll"), "refer_threshold": meta.get("refer_threshold"),
            "refer_measure": meta.get("refer_measure"), "score_samples": 1, "max_bags": None, "max_tokens": None,
            "run_kind": RunKind.MORTALITY.value,
            FORMAT_TAG: ModelFormat.BASELINE.value}
    return model, info
