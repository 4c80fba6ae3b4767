"""Subnetwork Laplace on the mortality task's features: ``fit_laplace`` (FeatureSets in, the fitted model out) and
its batches (``laplace_batches``: what a Laplace run of a mortality model fits on, ``finish.laplace_data``).

The algorithm is the task-free ``pipeline.bayes.laplace.fit.fit_laplace_batches`` (any deterministic network
of the family, batches, its likelihood); this module feeds it the training split's admissions in batches of
similar lengths (a ``max_train`` subsample, the GGN scaled by n_train / n_used) and the validation split
for the prior precision.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from torch import nn

from pipeline.bayes.laplace.config import LaplaceConfig
from pipeline.bayes.laplace.errors import LaplaceError
from pipeline.bayes.laplace.fit import Batches, LaplaceReport, fit_laplace_batches
from pipeline.bayes.laplace.model import LinearizedLaplaceModel


def fit_laplace(model: nn.Module, train_fs, val_fs, cfg: LaplaceConfig | None = None
                ) -> tuple[LinearizedLaplaceModel, LaplaceReport]:
    """Fit on the mortality FeatureSets ``train_fs`` (GGN) and ``val_fs`` (prior precision; may be None
    when ``cfg.prior_precision`` is given). ``model`` is left unchanged (the result holds a copy)."""
    cfg = cfg if cfg is not None else LaplaceConfig()
    train, val, n_used = laplace_batches(model, train_fs, val_fs, cfg)
    return fit_laplace_batches(model, train, val, cfg, n_train=len(train_fs), n_train_used=n_used)


def laplace_batches(model: nn.Module, train_fs, val_fs, cfg: LaplaceConfig) -> tuple[Batches, Batches | None, int]:
    """(training batches, validation batches or None, training admissions used) of ``fit_laplace``: a ``max_train``
    subsample of the training split in batches of similar lengths, the validation split in its length order, on
    ``model``'s device."""
    from pipeline.core.devices import model_device, to_device
    from pipeline.data import batches

    n = len(train_fs)
    if n == 0:
        raise LaplaceError("no training admissions")
    keep = np.arange(n)
    if cfg.max_train is not None and cfg.max_train < n:
        keep = np.sort(np.random.default_rng(cfg.seed).choice(n, cfg.max_train, replace=False))
    nb = train_fs.n_bags[keep] if cfg.max_bags is None else np.minimum(train_fs.n_bags[keep], cfg.max_bags)
    train_order = keep[np.argsort(-nb, kind="stable")]  # similar lengths per batch (as predict.feature_logits)

    device = model_device(model)  # --device: the MAP model's

    def chunks(fs, order: np.ndarray) -> Iterator[dict]:
        for s in range(0, len(order), cfg.batch_size):
            yield to_device(batches.collate(fs, order[s:s + cfg.batch_size], cfg.max_bags, cfg.max_tokens), device)

    val_batches: Batches | None = None
    if val_fs is not None and len(val_fs):
        val_fs.require_labels()
        val_order = batches.length_order(val_fs, cfg.max_bags)

        def val_chunks() -> Iterator[dict]:
            return chunks(val_fs, val_order)

        val_batches = val_chunks
    return (lambda: chunks(train_fs, train_order)), val_batches, len(keep)
