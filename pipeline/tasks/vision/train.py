"""The image models' training recipe as pure functions (uncertainty-baselines ``baselines/cifar/rank1_bnn.py``).

Each step takes ``batch_size // K`` distinct images tiled K times by the model (the tiled batch stays
``batch_size`` rows for every K; K = 1 models see ``batch_size`` distinct images); loss = NLL +
min(1, step / anneal_steps) · KL / N_train + l2 · model.l2_penalty(); SGD with Nesterov momentum
0.9, learning rate base_lr · distinct / 128, a linear warm-up over the first epoch and decays by
0.2 at 80, 160 and 180 of every 200 epochs; KL annealed over 200 of 250 epochs. The plan that runs it
through the engine's loop is ``tasks.vision.task.VisionPlan``; a tracked run, ``workflows.vision_run``.
Nothing is downloaded: CIFAR comes from ``data_dir``, digits from scikit-learn.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn import functional as F

from pipeline.bayes.layers import Rank1Vector
from pipeline.bayes.layers.factors import Rank1Layer
from pipeline.bayes.objective import Objective
from pipeline.core.errors import ConfigError
from pipeline.data.images.data import ImageSet, Splits, cifar_splits, digits_splits
from pipeline.tasks.vision.config import DATASETS, Dataset, Precision, VisionTrainConfig
from pipeline.tasks.vision.model_config import VisionConfig

LR_REFERENCE_BATCH = 128  # distinct images per step at which base_lr applies (published)
DECAY_REFERENCE_EPOCHS = 200.0  # lr_decay_epochs are given for a run of this many epochs (published)


# ---------------------------------------------------------------------------- data and schedule


def load_splits(cfg: VisionTrainConfig) -> Splits:
    """Train / val / test sets of ``cfg.dataset`` (local files or scikit-learn's digits)."""
    if cfg.dataset is Dataset.DIGITS:
        return digits_splits(cfg.seed, cfg.image_size)
    return cifar_splits(cfg.data_dir, cfg.dataset.value, cfg.val_fraction, cfg.seed)


def run_splits(settings: dict, data_dir=None) -> Splits:
    """The train / val / test ImageSets a run's VisionTrainConfig (a dict, as recorded) names: its dataset and
    seed's split (``data_dir`` replaces the CIFAR directory)."""
    settings = dict(settings)
    if data_dir is not None:
        settings["data_dir"] = str(data_dir)
    known = {f.name for f in dataclasses.fields(VisionTrainConfig)}
    return load_splits(VisionTrainConfig(**{k: v for k, v in settings.items() if k in known}))


def learning_rate(step: int, steps_per_epoch: int, cfg: VisionTrainConfig, distinct: int) -> float:
    """Published schedule at a 0-based step: linear warm-up, then piecewise-constant decay."""
    base = cfg.base_lr * distinct / LR_REFERENCE_BATCH
    epoch = step / steps_per_epoch
    if epoch < cfg.lr_warmup_epochs:
        return base * (step + 1) / (cfg.lr_warmup_epochs * steps_per_epoch)
    decays = sum(epoch >= e * cfg.epochs / DECAY_REFERENCE_EPOCHS for e in cfg.lr_decay_epochs)
    return base * cfg.lr_decay_ratio ** decays


def batch_indices(n: int, distinct: int, steps_per_epoch: int, step: int, seed: int) -> np.ndarray:
    """Image indices of a 0-based step: epoch e's permutation (``default_rng([seed, e])``), cut in order."""
    epoch, pos = divmod(step, steps_per_epoch)
    order = np.random.default_rng([seed, epoch]).permutation(n)
    return order[pos * distinct:(pos + 1) * distinct]


def augment(images: Tensor, generator: torch.Generator, pad: int = 2) -> Tensor:
    """Random crop of the image zero-padded by ``pad`` px per side, random horizontal flip; (B, C, H, W) -> same.

    The published CIFAR pipeline pads 32x32 to 36x36 (``resize_with_crop_or_pad``), crops back and flips.
    """
    b, _, h, w = images.shape
    padded = F.pad(images, (pad, pad, pad, pad))  # (B, C, H + 2p, W + 2p)
    dy = torch.randint(0, 2 * pad + 1, (b,), generator=generator)
    dx = torch.randint(0, 2 * pad + 1, (b,), generator=generator)
    rows = (dy[:, None] + torch.arange(h)[None, :])[:, None, :, None]  # (B, 1, H, 1)
    cols = (dx[:, None] + torch.arange(w)[None, :])[:, None, None, :]  # (B, 1, 1, W)
    out = padded.gather(2, rows.expand(b, padded.shape[1], h, padded.shape[3]))  # (B, C, H, W + 2p)
    out = out.gather(3, cols.expand(b, padded.shape[1], h, w))  # (B, C, H, W)
    flip = torch.rand(b, generator=generator) < 0.5
    return torch.where(flip[:, None, None, None], out.flip(3), out)


def parameter_groups(model: nn.Module, fast_multiplier: float) -> list[dict]:
    """SGD parameter groups: the slow weights (kernels, BatchNorm) at the schedule's rate, the fast weights
    (rank-1 factors and the per-member biases of rank-1 / BatchEnsemble layers) at ``fast_multiplier`` times
    it, as uncertainty-baselines' ``fast_weight_lr_multiplier`` (every variable but kernels and BatchNorm)."""
    fast_ids = {id(p) for m in model.modules() if isinstance(m, Rank1Vector) for p in m.parameters()}
    fast_ids |= {id(m.bias) for m in model.modules() if isinstance(m, Rank1Layer) and m.bias is not None}
    params = [p for p in model.parameters() if p.requires_grad]
    fast = [p for p in params if id(p) in fast_ids]
    slow = [p for p in params if id(p) not in fast_ids]
    return [g for g in ({"params": slow, "lr_multiplier": 1.0}, {"params": fast, "lr_multiplier": fast_multiplier})
            if g["params"]]


def progress_status(step: int, steps_per_epoch: int, epochs: float, last: dict, val_note: str) -> str:
    """The progress line of a 1-based step: epoch, NLL, loss (with the KL weight while it ramps up), and the
    latest validation accuracy."""
    status = f"epoch {step / steps_per_epoch:.2f}/{epochs:g}, nll {last['nll']:.4f}, loss {last['loss']:.4f}"
    if last["kl_weight"] < 1.0:
        status += f" (KL weight {last['kl_weight']:.2f})"
    return status + (f", {val_note}" if val_note else "")


# ---------------------------------------------------------------------------- loss


def objective(model: nn.Module, images: Tensor, labels: Tensor, kl_w: float, n_train: int, l2: float,
              nll: str = "average", samples: int = 1) -> dict[str, Tensor]:
    """loss = NLL + kl_w · KL / n_train + l2 · penalty, with its parts (detached): the training
    objective of every model of the family (``pipeline.bayes.objective.Objective``) on the batch
    ``{"images", "label"}``.

    NLL ``average``: the mean over the S·K·B rows (published); ``mixture``: -log mean_d p_d(y).
    A model with ``independent_members`` (the deep ensemble) adds its members' mean NLLs instead
    (K times the row mean; its ``l2_penalty`` is the members' sum), so each member trains as the
    deterministic network does; the reported ``nll`` is the row mean for every model.
    """
    return Objective(model, nll, n_train, l2, samples)({"images": images, "label": labels}, kl_w)


def check_bn_rows(model: nn.Module, distinct: int, samples: int) -> None:
    """A one-line ConfigError unless the tiled batch splits into ghost batches of ``bn_rows`` rows."""
    from pipeline.tasks.vision.norm import ghost_groups

    blocks = 1 if model.independent_members else samples * model.components  # a deep ensemble's member sees B rows
    try:
        ghost_groups(distinct * blocks, blocks, model.cfg.bn_rows)
    except ValueError as e:
        raise ConfigError(f"{e}: choose --bn-rows (a multiple of {blocks}) or --batch-size") from None


def check_data(train: ImageSet, mcfg: VisionConfig) -> None:
    if train.images.shape[1] != mcfg.in_channels or train.num_classes != mcfg.num_classes:
        raise ConfigError(f"{train.name}: {train.images.shape[1]} channels / {train.num_classes} classes, but the "
                         f"model takes {mcfg.in_channels} / {mcfg.num_classes}")


def step_autocast(device, precision: Precision | str):
    """The training step's autocast: bf16 on ``device``'s type for ``Precision.BF16``, off for fp32 (the
    ghost BatchNorm keeps its statistics in float32; evaluation stays fp32)."""
    return torch.autocast(torch.device(device).type, dtype=torch.bfloat16,
                          enabled=Precision(precision) == Precision.BF16)


def with_overrides(cfg: VisionTrainConfig, **overrides) -> VisionTrainConfig:
    """A copy of ``cfg`` with ``overrides`` (``model`` overrides are merged, not replaced)."""
    model = {**cfg.model, **overrides.pop("model", {})}
    return dataclasses.replace(cfg, **overrides, model=model)


__all__ = ["DATASETS", "VisionTrainConfig", "augment", "batch_indices", "check_bn_rows", "check_data",
           "learning_rate", "load_splits", "objective", "parameter_groups", "progress_status", "run_splits",
           "step_autocast", "with_overrides"]
