"""The mortality task's predictions of a FeatureSet: the engine's Monte Carlo predictor over its batches.

``feature_logits`` gives the logits (S, K, N) of every admission in the FeatureSet's row order (batches of
admissions of similar length, built on the CPU or gathered on a CUDA device: ``feature_batches``);
``feature_predictions`` adds their per-admission ``metrics.Summary`` (a Gaussian-logit model, the linearized
Laplace model with the probit predictive, gives its moments instead: ``engine.predict.predict_moments``). What
scoring needs of a model is ``RiskModel``: every model a mortality run loads declares it. The generic names
of the engine's predictor used beside them (``seeded_generator``, ``score_samples``) are imported here too.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from pipeline.bayes import metrics
from pipeline.engine.predict import predict_logits, predict_moments, score_samples, seeded_generator

__all__ = ["Predictions", "RiskModel", "feature_batches", "feature_logits", "feature_predictions", "score_samples",
           "seeded_generator"]


@runtime_checkable
class RiskModel(Protocol):
    """What scoring needs of a model, declared by each model a run loads (the mortality models and the deep
    ensemble, the linearized Laplace model, the classical baselines), never probed for.

    How the model is asked for its predictions follows from it: ``scores_features``, the model scores a
    FeatureSet itself (``model.feature_logits(fs, samples)`` -> (S, 1, N)); ``gaussian_logits``, it gives a
    Gaussian logit per admission (``model.logit_moments(batch)`` -> μ, σ² and ``model.predictive_logit(μ, σ²)``);
    otherwise it is called on batches (``model(batch, samples=, sampling=, generator=)`` -> (S·K, B) logits).
    """

    components: int  # K: the members of one weight draw (1: one network)
    value_channel: bool  # it reads the features' value channel (bag_values), so a FeatureSet must hold it
    gaussian_logits: bool  # it predicts a Gaussian logit N(μ, σ²) per admission (Laplace's probit predictive)
    scores_features: bool  # it scores a FeatureSet itself (a classical baseline), not batch by batch


def feature_batches(model, fs, batch_size: int, max_bags: int | None, max_tokens: int | None, order: np.ndarray,
                    resident: bool | None = None) -> Iterable[dict]:
    """The batches of ``fs`` in ``order`` (``batches.iter_batches``): built on the CPU, or, ``resident`` (None: the
    model is on a CUDA device), gathered on the model's device from features made resident there
    (``resident.device_batches``: the same tensors, the features streamed in chunks beyond its memory cap)."""
    from pipeline.core.devices import model_device
    from pipeline.data import batches

    device = model_device(model)
    if resident is None:
        resident = device.type == "cuda"
    if not resident:
        return batches.iter_batches(fs, batch_size, max_bags, max_tokens, order)
    from pipeline.data.resident import device_batches

    return device_batches(fs, batch_size, device, max_bags, max_tokens, order)


def feature_logits(model: RiskModel, fs, samples: int, batch_size: int, max_bags: int | None = None,
                   max_tokens: int | None = None, generator=None, resident: bool | None = None) -> np.ndarray:
    """Logits (S, K, N) of every admission of a FeatureSet, in its row order.

    Batches hold admissions of similar length (``batches.length_order``): the recurrence runs
    only the rows still going at each step, so a batch of one long and many short admissions
    would spend its last steps on a handful of rows. Memory is bounded by ``batch_size``·S·K.
    Every row of a batch shares its S·K weight draws, so batch composition (and hence which
    admissions are scored together: the FeatureSet, the chunk it came in) changes a rank-1
    model's draws per admission, never their distribution; a deterministic model's logits do
    not depend on it. A model that scores a FeatureSet itself (``scores_features``: the classical
    baselines of ``pipeline.tasks.mortality.baselines``, point models) is asked directly: no batches, one draw
    repeated S times. ``resident``: the batches gathered on the model's device (``feature_batches``; None: on a
    CUDA device), the same batches.
    """
    if model.scores_features:
        return model.feature_logits(fs, samples)  # (S, 1, N)
    from pipeline.data import batches

    if model.value_channel:
        fs.require_values()
    order = batches.length_order(fs, max_bags)  # (N,)
    logits = predict_logits(model, feature_batches(model, fs, batch_size, max_bags, max_tokens, order, resident),
                            samples, generator)
    out = np.empty_like(logits)
    out[:, :, order] = logits  # batch order -> row order
    return out



@dataclass
class Predictions:
    """A model's predictions for a FeatureSet, in its row order."""

    logits: np.ndarray  # (S, K, N): the draws (a Gaussian model: its predictive logits repeated S times)
    summary: metrics.Summary | None  # per-admission risk, spread, percentiles, MI, entropy (None: no admissions)
    mu: np.ndarray | None = None  # (N,) a Gaussian-logit model's logit mean (None: draws)
    var: np.ndarray | None = None  # (N,) its variance


def feature_predictions(model: RiskModel, fs, samples: int, batch_size: int, max_bags: int | None = None,
                        max_tokens: int | None = None, generator=None, resident: bool | None = None) -> Predictions:
    """``feature_logits`` and their ``metrics.Summary``; a Gaussian-logit model (``gaussian_logits``) gives
    its moments once: the summary is the Gaussian's (``Summary.from_gaussian`` with the model's own
    predictive, ``predictive_logit``) and the logits are that predictive's logit, repeated."""
    if not model.gaussian_logits:
        logits = feature_logits(model, fs, samples, batch_size, max_bags, max_tokens, generator, resident)
        return Predictions(logits, metrics.Summary.from_draws(logits) if logits.shape[2] else None)
    from pipeline.data import batches

    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    if model.value_channel:
        fs.require_values()
    order = batches.length_order(fs, max_bags)  # (N,)
    mu_o, var_o = predict_moments(model, feature_batches(model, fs, batch_size, max_bags, max_tokens, order, resident))
    mu, var = np.empty_like(mu_o), np.empty_like(var_o)
    mu[order], var[order] = mu_o, var_o  # batch order -> row order
    if mu.size == 0:
        return Predictions(np.zeros((samples, 1, 0), dtype=np.float32), None)
    z = model.predictive_logit(mu, var)  # (N,): its sigmoid is the published risk
    summary = metrics.Summary.from_gaussian(mu, var, mean=metrics.sigmoid(z))
    logits = np.broadcast_to(z.astype(np.float32), (samples, 1, z.shape[0])).copy()  # (N,) -> (S, 1, N)
    return Predictions(logits, summary, mu, var)
