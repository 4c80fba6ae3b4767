"""Evaluation of image models on clean and corrupted test images (multi-class metrics).

``evaluate_vision`` scores the clean test set and every corruption at every severity with
``pipeline.bayes.metrics.multiclass``, its logits from the engine's Monte Carlo predictor (``draws``:
per-member draws, BatchNorm running statistics, a fixed seed so every set is scored with the same weights).
It trains and tracks nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import torch

from pipeline.bayes.metrics import multiclass as mm
from pipeline.data.images.corruptions import CORRUPTIONS, SEVERITIES, corrupt
from pipeline.data.images.data import ImageSet

SUMMARY_METRICS = ("nll", "accuracy", "ece")  # metrics averaged over corruptions per severity


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


def image_batches(images, batch_size: int):
    """Batch dicts ``{"images"}`` of images (N, C, H, W) in [0, 1] (an array, or an ImageSet's), in order."""

    if isinstance(images, ImageSet):
        images = images.floats()
    for start in range(0, images.shape[0], batch_size):
        yield {"images": torch.from_numpy(np.ascontiguousarray(images[start:start + batch_size], dtype=np.float32))}


def evaluate_vision(draws: Callable, test: ImageSet, samples: int = 1, components: int = 1,
                    corruptions: Sequence[str] = CORRUPTIONS, severities: Sequence[int] = SEVERITIES,
                    seed: int = 0, corruption_seed: int = 0, batch_size: int = 32,
                    progress: Callable[[int, str], None] | None = None) -> VisionReport:
    """Clean and corrupted test metrics with ``samples`` draws per component of a model of ``components``.

    ``draws(batches, samples, seed)``: the engine's predictor over the model (``engine.predict.draws_of``),
    logits (S, K, N, C). Every set is scored with the same weight draws (``seed``); corrupted images come from
    ``corrupt(test images, c, s, corruption_seed)``. ``progress(sets done, status)`` is called after each of
    the 1 + corruptions x severities sets (``pipeline.core.progress.Progress.update``).
    """
    images = test.floats()  # (N, C, H, W) in [0, 1]
    k = components
    done = 0

    def score(x: np.ndarray, name: str) -> dict:
        nonlocal done
        logits = draws(image_batches(x, batch_size), samples, seed)  # (S, K, N, C)
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
