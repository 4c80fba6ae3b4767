"""The checkpoint file of a trained model: written atomically, read back, turned into a model.

A checkpoint is a ``torch.save`` dict: ``format`` (``CHECKPOINT_FORMAT``), ``model_kind``,
``model_config`` (a ``MortalityConfig`` as a dict), ``train_config``, ``vocab_sizes``, ``model``
(the state dict), ``step``, ``val_nll``, ``refer_threshold`` and, in ``last.pt``, the optimizer,
RNG states and best-so-far of a resumable run. It is loaded with ``weights_only=True``.

Two other kinds share the file format, told apart by ``kind``: ``laplace`` (``pipeline.laplace``: a
MAP model and its posterior) and ``vision`` (an image model of ``pipeline.models.vision``:
``model_config`` a ``VisionConfig``, ``train_config`` a ``VisionTrainConfig``, ``steps``,
``val_metrics``). ``load_model`` reads all three; its info says ``run_kind`` (mortality | vision).
"""

from __future__ import annotations

from pathlib import Path

from pipeline import fileio
from pipeline.errors import PipelineError

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


def load_model(path: Path | str):
    """Model (eval mode) and its info dict (kind, configs, refer threshold, score samples, caps).

    A Laplace run's checkpoint (``kind`` = "laplace", ``pipeline.laplace``) holds its MAP model and
    posterior; it loads into a ``LinearizedLaplaceModel``, which scores like any model. An image
    model's (``kind`` = "vision") loads into its ``pipeline.models.vision`` network."""
    from pipeline.models import MortalityConfig, build_model

    ckpt = read_checkpoint(path)
    if ckpt.get("kind") == "laplace":
        return _load_laplace(ckpt)
    if ckpt.get("kind") == "vision":
        return _load_vision(ckpt)
    model = build_model(ckpt["model_kind"], MortalityConfig(**ckpt["model_config"]))
    model.load_state_dict(ckpt["model"])
    model.eval()
    tc = ckpt["train_config"]
    info = {k: ckpt.get(k) for k in ("model_kind", "model_config", "train_config", "step", "val_nll", "refer_threshold")}
    info.update(score_samples=tc["score_samples"], max_bags=tc["max_bags"], max_tokens=tc["max_tokens"],
                run_kind="mortality")
    return model, info


def _load_vision(ckpt: dict):
    """An image model and its info: the method as ``model_kind``, ``score_samples`` = its ``eval_samples``."""
    from pipeline.models.vision import VisionConfig, build_vision_model

    model = build_vision_model(VisionConfig(**ckpt["model_config"]))
    model.load_state_dict(ckpt["model"])
    model.eval()
    tc = ckpt["train_config"]
    info = {"run_kind": "vision", "model_kind": ckpt["model_config"]["method"], "model_config": ckpt["model_config"],
            "train_config": tc, "steps": ckpt.get("steps"), "step": ckpt.get("steps"),
            "val_metrics": ckpt.get("val_metrics"), "val_nll": (ckpt.get("val_metrics") or {}).get("nll"),
            "refer_threshold": None, "score_samples": tc.get("eval_samples", 1), "max_bags": None, "max_tokens": None}
    return model, info


def _load_laplace(ckpt: dict):
    from pipeline.laplace.model import LinearizedLaplaceModel

    model = LinearizedLaplaceModel.from_checkpoint(ckpt).eval()
    tc = ckpt.get("train_config") or {}
    settings = {k: v for k, v in ckpt["laplace"].items() if not k.startswith("param_")}
    info = {"model_kind": "laplace", "model_label": model.label, "model_config": settings, "train_config": tc,
            "step": ckpt.get("step"), "val_nll": ckpt.get("val_nll"), "refer_threshold": ckpt.get("refer_threshold"),
            "score_samples": tc.get("score_samples"), "max_bags": tc.get("max_bags"), "max_tokens": tc.get("max_tokens"),
            "map_kind": ckpt.get("map_kind"), "run_kind": ckpt.get("run_kind", "mortality")}
    return model, info
