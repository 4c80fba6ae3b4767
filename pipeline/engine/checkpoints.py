"""The checkpoint file of a trained model: written atomically, read back, turned into a model.

A checkpoint is a ``torch.save`` dict: ``format`` (``CHECKPOINT_FORMAT``), ``model_kind``,
``model_config`` (a ``MortalityConfig`` as a dict), ``train_config``, ``vocab_sizes``, ``model``
(the state dict), ``step``, ``val_nll``, ``refer_threshold`` and, in ``last.pt``, the optimizer,
RNG states and best-so-far of a resumable run. It is loaded with ``weights_only=True``.

Two other kinds share the file format, told apart by ``kind``: ``laplace`` (``pipeline.bayes.laplace``: a
MAP model and its posterior) and ``vision`` (an image model of ``pipeline.tasks.vision``:
``model_config`` a ``VisionConfig``, ``train_config`` a ``VisionTrainConfig``, ``steps``,
``val_metrics``). ``runs.formats.load_model`` reads all three (and the baselines' model file); its
info says ``run_kind`` (mortality | vision).
"""

from __future__ import annotations

from pathlib import Path

from pipeline.core import fileio
from pipeline.core.errors import PipelineError, TrainError

CHECKPOINT_FORMAT = 1  # bump when the checkpoint layout changes
BEST = "best.pt"  # the best validation checkpoint (with the refer threshold once training ends)
LAST = "last.pt"  # the resumable state at the last evaluation


class CheckpointError(PipelineError):
    """A checkpoint that is missing or of another format."""


def save_checkpoint(path: Path | str, payload: dict) -> Path:
    """torch.save to a temp file, then rename (never a half-written checkpoint)."""
    import torch

    with fileio.atomic_path(path) as tmp:
        torch.save(payload, tmp)
    return Path(path)


def read_checkpoint(path: Path | str) -> dict:
    """The checkpoint dict (tensors on the CPU)."""
    import torch

    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"{path}: checkpoint not found")
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    if ckpt.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{path}: checkpoint format {ckpt.get('format')}, expected {CHECKPOINT_FORMAT}")
    return ckpt



def check_fresh(out_dir, marker: str = LAST) -> None:
    """Raise unless ``out_dir`` is None or holds no ``marker`` file (a run's last checkpoint / model file)."""
    if out_dir is not None and (Path(out_dir) / marker).exists():
        raise TrainError(f"{Path(out_dir) / marker} exists; resume from it or choose another output directory")
