"""Prediction with uncertainty: logits of every weight draw of any task's model.

``predict_logits`` runs the model in evaluation mode with per-member sampling: each of the
S·K weight draws is one block applied to the whole batch (docs/architecture.md, ensemble convention), so
there is never a loop over examples. The sampling mode and the random stream (a
``torch.Generator``) are passed with the call, never set on the model: concurrent calls on one
model (the served pyfunc's request threads) share no mutable state, and a call's draws depend
only on its own generator, whatever else runs. Under ``torch.no_grad`` rank-1 / BatchEnsemble models
then take their inference path (``pipeline.bayes.layers.inference``: per-block kernels, each sample's
embeddings once), with the same draws as the training path. A model whose posterior predictive is a
Gaussian logit per example (the linearized Laplace model with the probit predictive) is asked for its
moments instead (``predict_moments``). The shape of the logits is the task's likelihood
(``pipeline.tasks.base.Task.likelihood``): one logit per example for ``bernoulli``, a class axis for
``categorical``. A task turns the draws into its outputs (the mortality task's risk table:
``pipeline.tasks.mortality.predict`` and ``risk``); the metrics come from ``pipeline.bayes.metrics``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator

import numpy as np

from pipeline.core.contracts import DEFAULT_SAMPLES
from pipeline.core.errors import ConfigError


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


LOGIT_AXES = {"bernoulli": 2, "categorical": 3}  # Task.likelihood -> the dimensions of a model's logits


def predict_logits(model, batches: Iterable[dict], samples: int, generator=None,
                   likelihood: str | None = None) -> np.ndarray:
    """Logits of every draw for every example, (S, K, N) float32 (a classifier's: (S, K, N, C)), d = s·K + k:
    the one Monte Carlo predictor of every task's model.

    ``batches`` are batch dicts (docs/architecture.md, "Batches"; an image model's ``{"images"}``); the model
    returns (S·K, B) per batch for a ``bernoulli`` ``likelihood`` (its task's, ``Task.likelihood``; None: the one
    the model declares, ``model.likelihood``, else bernoulli), (S·K, B, C) for a ``categorical`` one, its weights
    drawn per member from ``generator`` (a ``torch.Generator``; None: torch's global generator). The model is
    never modified: the sampling mode and the stream go with the call, and a model in training mode is evaluated
    in evaluation mode and put back (``evaluation_mode``).
    """
    import torch

    from pipeline.bayes.layers import Sampling
    from pipeline.core.devices import model_device, to_device

    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    likelihood = likelihood or getattr(model, "likelihood", None) or "bernoulli"
    axes = LOGIT_AXES[likelihood]
    k = int(model.components)
    device = model_device(model)
    generator = _on_device(generator, device)
    parts = []
    with evaluation_mode(model), torch.no_grad():
        for batch in batches:
            batch = to_device(batch, device)  # built on the CPU; the model's device (--device)
            b = batch_rows(batch)
            out = model(batch, samples=samples, sampling=Sampling.PER_MEMBER, generator=generator)  # (S·K, B[, C])
            if tuple(out.shape[:2]) != (samples * k, b) or out.dim() != axes:
                raise RuntimeError(f"model returned logits of shape {tuple(out.shape)}, expected ({samples * k}, {b}"
                                   + (", classes)" if axes == 3 else ")") + f" (a {likelihood} likelihood)")
            parts.append(out.reshape(samples, k, b, *out.shape[2:]).float().cpu().numpy())  # -> (S, K, B[, C])
    if not parts:
        return np.zeros((samples, k, 0), dtype=np.float32)
    return np.concatenate(parts, axis=2)  # (S, K, N)


def draws_of(model, likelihood: str | None = None) -> Callable[[Iterable[dict], int, int], np.ndarray]:
    """The predictor over ``model`` as a task's code takes it: ``draws(batches, samples, seed)`` -> logits
    (S, K, N[, C]) of the batch dicts in their order (``likelihood``: the task's, ``predict_logits``), the weights
    drawn from a generator seeded with ``seed`` (on the model's device) for this call alone (a task's validation
    and evaluation, ``tasks.base``)."""
    from pipeline.core.devices import model_device

    def draws(batches: Iterable[dict], samples: int, seed: int) -> np.ndarray:
        return predict_logits(model, batches, samples, seeded_generator(seed, model_device(model)), likelihood)

    return draws


def predict_moments(model, batches: Iterable[dict]) -> tuple[np.ndarray, np.ndarray]:
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
