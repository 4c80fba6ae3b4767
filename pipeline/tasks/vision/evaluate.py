"""Evaluation of image models on clean and corrupted test images (multi-class metrics).

``predict_logits`` runs a model over images with S samples per component (per-member draws,
BatchNorm running statistics, a fixed seed so that every call draws the same weights);
``evaluate_vision`` scores the clean test set and every corruption at every severity with
``pipeline.bayes.metrics.multiclass``. Neither trains or tracks anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import torch
from torch import nn

from pipeline.bayes.layers import Sampling, set_sampling
from pipeline.bayes.layers.base import BayesianLayer
from pipeline.bayes.metrics import multiclass as mm
from pipeline.core.errors import ConfigError
from pipeline.data.images.corruptions import CORRUPTIONS, SEVERITIES, corrupt
from pipeline.data.images.data import ImageSet

SUMMARY_METRICS = ("nll", "accuracy", "ece")  # metrics averaged over corruptions per severity


def predict_logits(model: nn.Module, images: np.ndarray, samples: int = 1, batch_size: int = 32,
                   seed: int = 0) -> np.ndarray:
    """Logits (S, K, N, C) of ``images`` (N, C, H, W) in [0, 1].

    Evaluation mode, per-member draws (one weight draw per sample and component for each pass of
    ``batch_size`` images, as the mortality evaluation), under ``torch.random.fork_rng`` seeded with
    ``seed``: the caller's RNG stream is untouched and the same (model, seed, batch_size) always
    draws the same weights on a device. Modes are restored afterwards. Images go to the device of
    the model's parameters as batch dicts ``{"images"}`` (what every model of the family takes,
    a Laplace model of a vision network too); the logits come back to the CPU.
    """
    if samples < 1 or batch_size < 1:
        raise ConfigError(f"samples and batch_size must be >= 1, got {samples} and {batch_size}")
    layers = [m for m in model.modules() if isinstance(m, BayesianLayer)]
    modes = [(m.sampling, m.use_mean) for m in layers]
    was_training = model.training
    model.eval()
    set_sampling(model, Sampling.PER_MEMBER)
    k = model.components
    device = model_device(model)
    chunks = []
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []), torch.no_grad():
            torch.manual_seed(seed)
            for start in range(0, images.shape[0], batch_size):
                x = torch.from_numpy(np.ascontiguousarray(images[start:start + batch_size], dtype=np.float32))
                logits = model({"images": x.to(device)}, samples=samples)  # (S·K, B, C)
                chunks.append(logits.view(samples, k, x.shape[0], -1).cpu().numpy())  # (S·K, B, C) -> (S, K, B, C)
    finally:
        for m, (mode, use_mean) in zip(layers, modes):
            m.sampling, m.use_mean = mode, use_mean
        model.train(was_training)
    return np.concatenate(chunks, axis=2)  # (S, K, N, C)


def model_device(model: nn.Module) -> torch.device:
    """The device of a model's first parameter or buffer (cpu for a model with neither)."""
    for t in (*model.parameters(), *model.buffers()):
        return t.device
    return torch.device("cpu")


@dataclass
class VisionReport:
    """Metrics of one model on the clean test set and each corruption / severity."""

    clean: dict  # metrics.multiclass.evaluate_predictions of the clean images
    corrupted: dict[str, dict[int, dict]] = field(default_factory=dict)  # corruption -> severity -> metrics
    samples: int = 1  # samples per component

    def by_severity(self, metrics: Sequence[str] = SUMMARY_METRICS) -> dict[int, dict[str, float]]:
        """Per severity, each metric's mean over the corruptions (as the published summaries)."""
        out: dict[int, dict[str, float]] = {}
        severities = sorted({s for per in self.corrupted.values() for s in per})
        for s in severities:
            rows = [per[s] for per in self.corrupted.values() if s in per]
            out[s] = {m: float(np.mean([r[m] for r in rows])) for m in metrics}
        return out

    def to_dict(self) -> dict:
        """JSON-able: clean, corrupted (severities as strings) and the per-severity summary."""
        return {"samples": self.samples, "clean": self.clean,
                "corrupted": {c: {str(s): m for s, m in per.items()} for c, per in self.corrupted.items()},
                "by_severity": {str(s): m for s, m in self.by_severity().items()}}


def evaluate_vision(model: nn.Module, test: ImageSet, samples: int = 1,
                    corruptions: Sequence[str] = CORRUPTIONS, severities: Sequence[int] = SEVERITIES,
                    seed: int = 0, corruption_seed: int = 0, batch_size: int = 32,
                    progress: Callable[[int, str], None] | None = None) -> VisionReport:
    """Clean and corrupted test metrics of ``model`` with ``samples`` draws per component.

    Every set is scored with the same weight draws (``seed``); corrupted images come from
    ``corrupt(test images, c, s, corruption_seed)``. ``progress(sets done, status)`` is called after
    each of the 1 + corruptions x severities sets (``pipeline.core.progress.Progress.update``).
    """
    images = test.floats()  # (N, C, H, W) in [0, 1]
    k = model.components
    done = 0

    def score(x: np.ndarray, name: str) -> dict:
        nonlocal done
        logits = predict_logits(model, x, samples, batch_size, seed)  # (S, K, N, C)
        metrics = mm.evaluate_predictions(logits, test.labels, components=k)
        done += 1
        if progress is not None:
            progress(done, f"{name}: nll {metrics['nll']:.4f}, accuracy {metrics['accuracy']:.4f}")
        return metrics

    report = VisionReport(clean=score(images, "clean"), samples=samples)
    for c in corruptions:
        report.corrupted[c] = {int(s): score(corrupt(images, c, int(s), corruption_seed), f"{c} {s}")
                               for s in severities}
    return report
