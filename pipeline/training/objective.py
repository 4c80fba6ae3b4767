"""The training objective: NLL + w(step)·KL / N_train + l2·penalty, all in one forward (DDP-friendly).

With ``l2_in_kl`` the penalty joins the KL instead: NLL + w(step)·(KL + l2·penalty) / N_train, as
Keras regularizers in ``model.losses`` do in the authors' training loop (records-research)."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from pipeline.training.config import NllMode


class Objective(nn.Module):
    """Wraps the model so that NLL, KL and L2 are all computed in one forward (DDP-friendly)."""

    def __init__(self, model: nn.Module, nll: NllMode, n_train: int, l2: float, samples: int,
                 l2_in_kl: bool = False, l2_biases: bool = False) -> None:
        super().__init__()
        self.model, self.nll, self.n_train, self.l2, self.samples = model, NllMode(nll), n_train, l2, samples
        self.l2_in_kl, self.l2_biases = l2_in_kl, l2_biases

    def forward(self, batch: dict, kl_weight: float) -> dict[str, torch.Tensor]:
        logits = self.model(batch, samples=self.samples)  # (S·K, B)
        y = batch["label"].unsqueeze(0).expand_as(logits)  # (B,) -> (S·K, B)
        ll = -F.binary_cross_entropy_with_logits(logits, y, reduction="none")  # (S·K, B) log p_d(y)
        if self.nll is NllMode.AVERAGE:
            nll = -ll.mean()
        else:
            nll = -(torch.logsumexp(ll, 0) - math.log(ll.shape[0])).mean()
        kl = self.model.kl()
        penalty = penalty_of(self.model, self.l2_biases) if self.l2 else torch.zeros((), dtype=nll.dtype)
        if self.l2_in_kl:
            loss = nll + kl_weight * (kl + self.l2 * penalty) / self.n_train
        else:
            loss = nll + kl_weight * kl / self.n_train + self.l2 * penalty
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


def kl_weight(step: int, anneal_steps: int) -> float:
    """min(1, step / anneal_steps) for the 1-based step; 1 when annealing is off."""
    return 1.0 if anneal_steps <= 0 else min(1.0, step / anneal_steps)
