"""A vision run read back: the image model (or the Laplace model fitted on one) and what the run recorded.

A vision run (``pipeline.workflows.vision_run.train_run``) holds ``checkpoint/best.pt`` (a checkpoint of kind
``vision``; runs written before it was named as every run's model hold ``checkpoint/model.pt``, still read),
``model_info.json`` and the tag ``run_kind`` = vision; a Laplace run of a vision model holds
``checkpoint/best.pt`` too (kind ``laplace``, its MAP network an image model) with the same tag.
``load_vision_run`` takes a run id, ``runs:/<id>/...`` or a checkpoint file (an untracked run) and
refuses a mortality run with one line. Nothing here imports the trainer.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.core import fileio
from pipeline.engine.checkpoints import BEST, CheckpointError
from pipeline.runs import store
from pipeline.runs.formats import load_model

OLD_MODEL_FILE = "model.pt"  # an image model's checkpoint in vision runs written before it was BEST
VISION_EXPERIMENT = "vision"  # MLflow experiment of vision runs (and their Laplace runs) when none is given
DATASET_TAG = "dataset"  # digits | cifar10 | cifar100 (compare groups vision runs by it)
LABEL_TAG = "model_label"  # compare's row name of the run (rank1-gaussian, laplace-last-layer-650 ...)


@dataclass
class VisionRun:
    """An image model (evaluation mode, on the CPU) with what its run recorded."""

    model: object  # VisionNet / VisionDeepEnsemble / LinearizedLaplaceModel of one
    info: dict  # runs.formats.load_model's info: run_kind, model_kind, model_config, train_config, score_samples
    run_id: str | None  # the MLflow run (None for a checkpoint file)
    tags: dict = field(default_factory=dict)  # the run's MLflow tags
    params: dict = field(default_factory=dict)  # the run's MLflow params
    model_info: dict = field(default_factory=dict)  # the run's model_info.json (label, validation metrics)

    @property
    def train_config(self) -> dict:
        """The image model's VisionTrainConfig as a dict (a Laplace run records its MAP run's)."""
        return self.info.get("train_config") or {}

    @property
    def label(self) -> str:
        return self.tags.get(LABEL_TAG) or self.model_info.get("model_label") or model_label(self.info)


def model_label(info: dict) -> str:
    """compare's row name: the method (``rank1-<prior>`` for rank-1), or the Laplace run's label."""
    if info.get("model_kind") == "laplace":
        return str(info.get("model_label") or "laplace")
    cfg = info.get("model_config") or {}
    method = str(cfg.get("method") or info.get("model_kind"))
    return f"rank1-{cfg.get('prior', 'gaussian')}" if method == "rank1" else method


def load_vision_run(uri: str | Path, workdir: Path | str | None = None) -> VisionRun:
    """The model and records of a vision run id / ``runs:/<id>/...`` URI / checkpoint file."""
    text = str(uri).strip()
    path = Path(text)
    if path.is_file():
        model, info = load_model(path)
        _check_vision(info, text)
        return VisionRun(model, info, None)
    m = re.match(r"^(?:runs:/)?([0-9a-f]{32})(?:/.*)?$", text)
    if not m:
        raise store.RunError(f"{text!r} is neither a run id, a runs:/<id> URI nor a checkpoint file")
    run_id = m.group(1)
    c = store.client()
    try:
        run = c.get_run(run_id)
    except Exception as exc:  # mlflow raises MlflowException for unknown ids
        raise store.run_not_found(run_id, exc) from None
    store.require_kind(run_id, run.data.tags, store.RunKind.VISION)
    dst = Path(workdir or tempfile.mkdtemp(prefix="vision-run-"))
    try:
        folder = Path(c.download_artifacts(run_id, store.CHECKPOINT_ARTIFACTS, str(dst)))
    except Exception as exc:
        raise store.RunError(f"run {run_id} has no {store.CHECKPOINT_ARTIFACTS}/ artifacts: {exc}") from None
    file = next((folder / n for n in (BEST, OLD_MODEL_FILE) if (folder / n).exists()), None)
    if file is None:
        raise store.RunError(f"run {run_id}: no {BEST} (or an older run's {OLD_MODEL_FILE}) under "
                             f"{store.CHECKPOINT_ARTIFACTS}/")
    model, info = load_model(file)
    _check_vision(info, f"run {run_id}")
    try:
        model_info = fileio.read_json(c.download_artifacts(run_id, store.MODEL_INFO, str(dst)))
    except Exception:  # noqa: BLE001 - a run without model_info.json still loads
        model_info = {}
    return VisionRun(model, info, run_id, dict(run.data.tags), dict(run.data.params), model_info)


def _check_vision(info: dict, what: str) -> None:
    if info.get("run_kind") != store.RunKind.VISION.value:
        raise CheckpointError(f"{what} holds a {info.get('run_kind')} model ({info.get('model_kind')}), not an image "
                              "model")


def load_vision_checkpoint(path: Path | str) -> tuple[object, dict]:
    """Model (evaluation mode, on the CPU) and its info dict (configs, steps, validation metrics)."""
    model, info = load_model(path)
    if info.get("run_kind") != "vision" or info.get("model_kind") == "laplace":
        raise CheckpointError(f"{path}: not a vision model checkpoint (kind {info.get('model_kind')!r})")
    return model, info
