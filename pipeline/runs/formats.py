"""How a run's model is stored and loaded: the one place that decides it.

One ``ModelFormat`` (``runs.info``) per kind of model file, and the loader of each:

- ``torch``: ``best.pt``, a torch checkpoint read with ``weights_only=True`` (``checkpoint``).
  Its ``kind`` says which model it holds: none, the mortality models (deterministic, rank-1,
  BatchEnsemble, ...); ``laplace``, a Laplace run's MAP model and posterior (``pipeline.bayes.laplace``,
  scored like any model); ``vision``, an image model (``pipeline.tasks.vision``).
- ``baseline``: ``baseline.npz``, named arrays read with ``allow_pickle=False``
  (``pipeline.tasks.mortality.baselines``): the classical baselines (logistic regression, gradient boosting).

What a run's model takes and predicts is its ``RunKind`` (``runs.info``: mortality | vision), recorded in the
info (``run_kind``) and, for runs, in the tag ``store.RUN_KIND_TAG``; ``store`` refuses a run of
the other kind before loading it.

A run records its format in ``model_info.json`` (``model_format``) and in the tag
``model_format``; the file name alone decides how a model file is read, so a model directory
or a downloaded MLflow model needs nothing else. ``load_model`` returns (model, info) for
either: the model is a ``predict.RiskModel`` (it scores a FeatureSet through ``predict.feature_logits``)
and the info is a ``runs.info.ModelInfo`` as a dict, with the same keys for every kind (``model_kind``,
``model_config``, ``train_config``, ``refer_threshold``, ``refer_measure``, ``score_samples``, ``max_bags``,
``max_tokens``, ``model_format``...).
"""

from __future__ import annotations

from pathlib import Path

from pipeline.engine.checkpoints import BEST, CheckpointError, read_checkpoint
from pipeline.runs.info import ModelFormat, ModelInfo

BASELINE_FILE = "baseline.npz"  # the model file of a classical baseline
FORMAT_TAG = "model_format"  # MLflow tag and model_info.json key
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


def load_model(path: Path | str, device=None) -> tuple[object, dict]:
    """(model, info) of a model file of any format and kind (see the module docstring): the info is
    ``ModelInfo.to_dict()``; a torch model in eval mode, on ``device`` (read onto the CPU, then moved; None:
    the CPU). A file not named ``baseline.npz`` is read as a torch checkpoint (a run's ``best.pt``, an old
    vision run's ``model.pt``, or a checkpoint a benchmark saved under its own name)."""
    if Path(path).name == BASELINE_FILE:
        model, info = _load_baseline(path)
        return model, info.to_dict()
    ckpt = read_checkpoint(path)
    loader = _TORCH_KINDS.get(ckpt.get("kind"))
    if loader is None:
        raise CheckpointError(f"{path}: checkpoint kind {ckpt.get('kind')!r} is not one of "
                              f"{sorted(k or 'mortality' for k in _TORCH_KINDS)}")
    model, info = loader(ckpt)
    if device is not None:
        model = model.to(device)
    return model, info.to_dict()


def _load_mortality(ckpt: dict) -> tuple[object, ModelInfo]:
    """A mortality model (evaluation mode) and its info."""
    from pipeline.tasks.mortality import build_model
    from pipeline.tasks.mortality.config import saved_config

    model = build_model(ckpt["model_kind"], saved_config(ckpt["model_config"]))
    model.load_state_dict(ckpt["model"])
    return model.eval(), ModelInfo.mortality(ckpt)


def _load_vision(ckpt: dict) -> tuple[object, ModelInfo]:
    """An image model (evaluation mode) and its info."""
    from pipeline.tasks.vision import VisionConfig, build_vision_model

    model = build_vision_model(VisionConfig(**ckpt["model_config"]))
    model.load_state_dict(ckpt["model"])
    return model.eval(), ModelInfo.vision(ckpt)


def _load_laplace(ckpt: dict) -> tuple[object, ModelInfo]:
    """A Laplace run's ``LinearizedLaplaceModel`` (its MAP model and posterior) and its info."""
    from pipeline.bayes.laplace.model import LinearizedLaplaceModel

    model = LinearizedLaplaceModel.from_checkpoint(ckpt).eval()
    return model, ModelInfo.laplace(ckpt, model.label)


_TORCH_KINDS = {None: _load_mortality, "laplace": _load_laplace, "vision": _load_vision}  # best.pt's "kind"


def _load_baseline(path: Path | str) -> tuple[object, ModelInfo]:
    """A classical baseline and its info."""
    from pipeline.tasks.mortality.baselines.model import BaselineModel

    model = BaselineModel.load(path)
    return model, ModelInfo.baseline(model.kind.value, model.meta)
