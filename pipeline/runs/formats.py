"""How a run's model is stored and loaded: the one place that decides it.

One ``ModelFormat`` (``runs.info``) per kind of model file, and the loader of each:

- ``torch``: ``best.pt``, a torch checkpoint read with ``weights_only=True`` (``engine.checkpoints``). Its
  task (``pipeline.tasks.base.checkpoint_task``: the payload's ``task``; older payloads' former keys) rebuilds
  the network; a Laplace run's MAP model and posterior (``pipeline.bayes.laplace``, which recognises its own
  payloads: ``LinearizedLaplaceModel.is_checkpoint``; scored like any model) has its MAP network rebuilt by
  the task its payload names.
- a task's own file format: offered to each task's ``load_file`` (the mortality task's ``baseline.npz``,
  named arrays read with ``allow_pickle=False``: the classical baselines).

This package never imports a concrete task: the registry imports the one a checkpoint names, by its key.
``load_model`` returns (model, ``ModelInfo``): the model scores batches or FeatureSets through
``engine.predict``; the info has the same fields for every kind (``model_kind``, ``model_config``,
``train_config``, ``refer_threshold``, ``refer_measure``, ``score_samples``, ``max_bags``, ``max_tokens``,
``model_format``...).
"""

from __future__ import annotations

from pathlib import Path

from pipeline.core.contracts import BASELINE_FILE
from pipeline.engine.checkpoints import BEST, CheckpointError, read_checkpoint
from pipeline.runs.info import ModelFormat, ModelInfo
from pipeline.tasks.base import TASKS, task_of_checkpoint, tasks

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


def load_model(path: Path | str, device=None) -> tuple[object, ModelInfo]:
    """(model, info) of a model file of any format and kind (see the module docstring); a torch model in eval
    mode, on ``device`` (read onto the CPU, then moved; None: the CPU). A file no task claims as its own
    format is read as a torch checkpoint (a run's ``best.pt``, an old vision run's ``model.pt``, or a
    checkpoint a benchmark saved under its own name)."""
    for task in tasks():
        loaded = task.load_file(Path(path))
        if loaded is not None:
            model, fields = loaded
            return model, ModelInfo(**fields)
    from pipeline.bayes.laplace.model import LinearizedLaplaceModel

    ckpt = read_checkpoint(path)
    if LinearizedLaplaceModel.is_checkpoint(ckpt):
        model, info = _load_laplace(ckpt)
    elif ckpt.get("kind") in (None, *TASKS):  # kind: where an older payload named its task
        task = task_of_checkpoint(ckpt)
        model, info = task.model_from_checkpoint(ckpt), ModelInfo(**task.info_fields(ckpt))
    else:
        raise CheckpointError(f"{path}: checkpoint kind {ckpt.get('kind')!r} is not one of "
                              f"{[LinearizedLaplaceModel.kind, *TASKS]}")
    if device is not None:
        model = model.to(device)
    return model, info


def _load_laplace(ckpt: dict) -> tuple[object, ModelInfo]:
    """A Laplace run's ``LinearizedLaplaceModel`` (its MAP model, rebuilt by its task, and the posterior)."""
    from pipeline.bayes.laplace.model import LinearizedLaplaceModel

    if ckpt.get("map_kind") is None or ckpt.get("map_config") is None:
        raise CheckpointError("the Laplace checkpoint does not record its MAP model (map_kind, map_config)")
    map_model = task_of_checkpoint(ckpt).build_model(ckpt["map_kind"], ckpt["map_config"])
    model = LinearizedLaplaceModel.from_checkpoint(ckpt, map_model).eval()
    return model, ModelInfo.laplace(ckpt, model.label)
