"""Prediction with uncertainty: logits of every weight draw -> per-admission predictions.

``predict_logits`` runs the model in evaluation mode with per-member sampling: each of the
S·K weight draws is one block applied to the whole batch (docs/architecture.md, ensemble convention), so
there is never a loop over admissions. The sampling mode and the random stream (a
``torch.Generator``) are passed with the call, never set on the model: concurrent calls on one
model (the served pyfunc's request threads) share no mutable state, and a call's draws depend
only on its own generator, whatever else runs. Under ``torch.no_grad`` rank-1 / BatchEnsemble models
then take their inference path (``pipeline.bayes.layers.inference``: per-block kernels, each sample's
embeddings once), with the same draws as the training path. A model whose posterior predictive is a
Gaussian logit per admission (``gaussian_logits``: the linearized Laplace model with the probit
predictive) is asked for its moments instead (``predict_moments``), and its columns come from that
Gaussian. What scoring needs of a model is ``RiskModel``: every model a run loads declares it. ``risk_table``
turns either into the published columns (``metrics.Summary``); the metrics themselves come from
``pipeline.bayes.metrics``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from pipeline.bayes import metrics
from pipeline.core.contracts import DEFAULT_SAMPLES
from pipeline.core.errors import ConfigError


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


def score_samples(requested: int | None, info=None) -> int:
    """Samples per component to use: ``requested``, else the model's stored ``score_samples`` (the
    number its refer threshold was chosen with: ``info``'s, a ``runs.info.ModelInfo``), else ``DEFAULT_SAMPLES``.
    Evaluation, ``score`` and the pyfunc all resolve it here."""
    if requested is not None:
        if int(requested) < 1:
            raise ConfigError(f"samples must be >= 1, got {requested}")
        return int(requested)
    return int(getattr(info, "score_samples", None) or DEFAULT_SAMPLES)


@contextlib.contextmanager
def evaluation_mode(model) -> Iterator[None]:
    """Dropout off for the call: ``model.eval()`` while a training model is evaluated (the training
    loop's validation), its mode restored on exit. A model already in evaluation mode (a loaded run,
    the served model) is not touched at all, so concurrent calls never write to it. The sampling
    mode is not set here: ``predict_logits`` passes it with each call."""
    was_training = model.training
    if was_training:
        model.eval()
    try:
        yield
    finally:
        if was_training:
            model.train(True)


def seeded_generator(seed: int, device=None):
    """A ``torch.Generator`` on ``device`` (None: the CPU) seeded with ``seed``: the random stream of one call
    (on the CPU its numbers equal those of the global generator after ``torch.manual_seed(seed)``)."""
    import torch

    return torch.Generator(device=device or "cpu").manual_seed(int(seed))


_ON_DEVICE: dict[int, tuple] = {}  # id of the last CPU generator given -> (it, its stream on a device); one entry


def _on_device(generator, device):
    """``generator`` where it is on ``device``; else a generator on ``device`` seeded as it was (the same one
    each time it is given, so a stream used chunk after chunk stays one stream). Draws on a GPU differ from
    the CPU's: the same seed, another generator."""
    if generator is None or generator.device == device:
        return generator
    entry = _ON_DEVICE.get(id(generator))
    if entry is None or entry[0] is not generator or entry[1].device != device:
        _ON_DEVICE.clear()  # the last stream only: a run scores with one generator, chunk after chunk
        entry = _ON_DEVICE[id(generator)] = (generator, seeded_generator(generator.initial_seed(), device))
    return entry[1]


def batch_rows(batch: dict) -> int:
    """B, the examples of a batch dict: its ``label``'s length, else its ``images``' (an unlabelled image batch)."""
    return int((batch["label"] if "label" in batch else batch["images"]).shape[0])


def predict_logits(model, batches: Iterable[dict], samples: int, generator=None) -> np.ndarray:
    """Logits of every draw for every example, (S, K, N) float32 (a classifier's: (S, K, N, C)), d = s·K + k:
    the one Monte Carlo predictor of every task's model.

    ``batches`` are batch dicts (docs/architecture.md, "Batches"; an image model's ``{"images"}``); the model
    returns (S·K, B) (or (S·K, B, C)) per batch, its weights drawn per member from ``generator`` (a
    ``torch.Generator``; None: torch's global generator). The model is never modified: the sampling mode
    and the stream go with the call, and a model in training mode is evaluated in evaluation mode and put
    back (``evaluation_mode``).
    """
    import torch

    from pipeline.bayes.layers import Sampling
    from pipeline.core.devices import model_device, to_device

    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    k = int(model.components)
    device = model_device(model)
    generator = _on_device(generator, device)
    parts = []
    with evaluation_mode(model), torch.no_grad():
        for batch in batches:
            batch = to_device(batch, device)  # built on the CPU; the model's device (--device)
            b = batch_rows(batch)
            out = model(batch, samples=samples, sampling=Sampling.PER_MEMBER, generator=generator)  # (S·K, B[, C])
            if tuple(out.shape[:2]) != (samples * k, b):
                raise RuntimeError(f"model returned logits of shape {tuple(out.shape)}, expected ({samples * k}, {b}"
                                   + (", classes)" if out.dim() == 3 else ")"))
            parts.append(out.reshape(samples, k, b, *out.shape[2:]).float().cpu().numpy())  # -> (S, K, B[, C])
    if not parts:
        return np.zeros((samples, k, 0), dtype=np.float32)
    return np.concatenate(parts, axis=2)  # (S, K, N)


def draws_of(model) -> Callable[[Iterable[dict], int, int], np.ndarray]:
    """The predictor over ``model`` as a task's code takes it: ``draws(batches, samples, seed)`` -> logits
    (S, K, N[, C]) of the batch dicts in their order, the weights drawn from a generator seeded with ``seed``
    (on the model's device) for this call alone (a task's validation and evaluation, ``tasks.base``)."""
    from pipeline.core.devices import model_device

    def draws(batches: Iterable[dict], samples: int, seed: int) -> np.ndarray:
        return predict_logits(model, batches, samples, seeded_generator(seed, model_device(model)))

    return draws


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


def predict_moments(model: RiskModel, batches: Iterable[dict]) -> tuple[np.ndarray, np.ndarray]:
    """μ and σ² of every admission's logit, (N,) float64 each, from ``model.logit_moments(batch)`` (a model
    whose ``gaussian_logits`` is True)."""
    from pipeline.core.devices import model_device, to_device

    device = model_device(model)
    mus, variances = [], []
    with evaluation_mode(model):
        for batch in batches:
            mu, var = model.logit_moments(to_device(batch, device))  # (B,), (B,)
            mus.append(mu.detach().double().cpu().numpy())
            variances.append(var.detach().double().cpu().numpy())
    if not mus:
        return np.zeros(0), np.zeros(0)
    return np.concatenate(mus), np.concatenate(variances)


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
