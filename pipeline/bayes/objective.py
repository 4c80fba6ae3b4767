"""The training objective: NLL + w(step)·KL / N_train + l2·penalty, all in one forward (DDP-friendly).

With ``l2_in_kl`` the penalty joins the KL instead: NLL + w(step)·(KL + l2·penalty) / N_train, as
Keras regularizers in ``model.losses`` do in the authors' training loop (records-research).

One definition for every model of the family, of its task's likelihood (``Task.likelihood``, given, never
guessed from the logits): ``bernoulli``, one logit per example (S·K, B) (the mortality task), or
``categorical``, logits (S·K, B, classes) with a softmax (the image task) (``log_likelihood``); the NLL over the
S·K draws is their average or the mixture's (``nll_of``).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from pipeline.bayes.layers.options import NllMode
from pipeline.core.errors import ConfigError

LIKELIHOODS = {"bernoulli": "(S·K, B)", "categorical": "(S·K, B, C)"}  # what a task may declare (Task.likelihood):
    # the logits' shape of each


def log_likelihood(logits: torch.Tensor, labels: torch.Tensor, likelihood: str) -> torch.Tensor:
    """log p_d(y) per draw and example (S·K, B): ``bernoulli``, logits (S·K, B) with 0/1 labels (B,), or
    ``categorical``, logits (S·K, B, C) with class ids (B,) (softmax)."""
    shape = LIKELIHOODS.get(likelihood)
    if shape is None:
        raise ConfigError(f"likelihood must be one of {list(LIKELIHOODS)}, got {likelihood!r}")
    if logits.dim() != shape.count(",") + 1:
        raise ValueError(f"a {likelihood} likelihood takes logits {shape}, got {tuple(logits.shape)}")
    if logits.dim() == 2:
        y = labels.unsqueeze(0).expand_as(logits)  # (B,) -> (S·K, B)
        return -F.binary_cross_entropy_with_logits(logits, y, reduction="none")  # (S·K, B)
    d, b, c = logits.shape
    y = labels.long().unsqueeze(0).expand(d, b)  # (B,) -> (S·K, B)
    ce = F.cross_entropy(logits.reshape(d * b, c), y.reshape(d * b), reduction="none")  # (S·K·B,)
    return -ce.view(d, b)  # (S·K·B,) -> (S·K, B)


def nll_of(ll: torch.Tensor, mode: NllMode | str) -> torch.Tensor:
    """Mean NLL of log-likelihoods (S·K, B): ``average`` = mean over the S·K·B rows (each draw's NLL,
    averaged); ``mixture`` = -log of the mean likelihood over the S·K draws, averaged over examples."""
    if NllMode(mode) is NllMode.AVERAGE:
        return -ll.mean()
    return -(torch.logsumexp(ll, 0) - math.log(ll.shape[0])).mean()


class Objective(nn.Module):
    """Wraps the model so that NLL, KL and L2 are all computed in one forward (DDP-friendly).

    A model with ``independent_members`` (the image deep ensemble, trained by SGD) adds its members'
    mean NLLs instead of averaging them (K times the row mean; its ``l2_penalty`` is the members' sum),
    so that each member gets the gradient it would get alone; the reported ``nll`` is the row mean.
    """

    def __init__(self, model: nn.Module, nll: NllMode, n_train: int, l2: float, samples: int,
                 l2_in_kl: bool = False, l2_biases: bool = False, likelihood: str | None = None) -> None:
        """``likelihood``: the task's (``Task.likelihood``: a plan passes its task's); None: the one the model
        declares (``model.likelihood``, every network of the family does)."""
        super().__init__()
        self.model, self.nll, self.n_train, self.l2, self.samples = model, NllMode(nll), n_train, l2, samples
        self.likelihood = likelihood or getattr(model, "likelihood", None)
        if self.likelihood not in LIKELIHOODS:
            raise ConfigError(f"the objective needs the task's likelihood ({' or '.join(LIKELIHOODS)}); the model "
                              f"declares {self.likelihood!r}")
        self.l2_in_kl, self.l2_biases = l2_in_kl, l2_biases
        if getattr(model, "independent_members", False) and self.nll is not NllMode.AVERAGE:
            raise ConfigError("nll='mixture' couples the members; a deep ensemble's members train independently")

    def forward(self, batch: dict, kl_weight: float) -> dict[str, torch.Tensor]:
        logits = self.model(batch, samples=self.samples)  # (S·K, B) or (S·K, B, C)
        nll = nll_of(log_likelihood(logits, batch["label"], self.likelihood), self.nll)
        nll_loss = nll
        if getattr(self.model, "independent_members", False):
            nll_loss = nll * (logits.shape[0] // self.samples)  # Σ_k (mean NLL of member k) = K · row mean
        kl = self.model.kl()
        penalty = penalty_of(self.model, self.l2_biases) if self.l2 else torch.zeros((), dtype=nll.dtype)
        if self.l2_in_kl:
            loss = nll_loss + kl_weight * (kl + self.l2 * penalty) / self.n_train
        else:
            loss = nll_loss + kl_weight * kl / self.n_train + self.l2 * penalty
        return {"loss": loss, "nll": nll.detach(), "kl": kl.detach(), "l2": penalty.detach()}


def regularizer(model: nn.Module, l2: float, l2_in_kl: bool, l2_biases: bool) -> torch.Tensor:
    """KL plus the L2 inside it (``l2_in_kl``): what records-research's validation loss adds, over N_val."""
    reg = model.kl()
    if l2_in_kl and l2:
        reg = reg + l2 * penalty_of(model, l2_biases)
    return reg


def penalty_of(model: nn.Module, biases: bool) -> torch.Tensor:
    """``model.l2_penalty()``, with the biases when asked (models without that option: weights only)."""
    return model.l2_penalty(biases=True) if biases else model.l2_penalty()


def kl_weight(step: int, anneal_steps: float) -> float:
    """min(1, step / anneal_steps) for the 1-based step; 1 when annealing is off."""
    return 1.0 if anneal_steps <= 0 else min(1.0, step / anneal_steps)
