"""Training of the image models: the published recipe as library functions (config in, result out).

Recipe (uncertainty-baselines ``baselines/cifar/rank1_bnn.py``): each step takes
``batch_size // K`` distinct images tiled K times by the model (the tiled batch stays
``batch_size`` rows for every K; K = 1 models see ``batch_size`` distinct images); loss = NLL +
min(1, step / anneal_steps) · KL / N_train + l2 · model.l2_penalty(); SGD with Nesterov momentum
0.9, learning rate base_lr · distinct / 128, a linear warm-up over the first epoch and decays by
0.2 at 80, 160 and 180 of every 200 epochs; KL annealed over 200 of 250 epochs. Validation
metrics come from ``evaluate.predict_logits`` (per-member draws, a fixed seed).

``train_vision`` is what a command line wraps: it takes a ``VisionTrainConfig`` and returns a
``VisionTrainResult``; tracking goes through the ``tracker`` passed in (anything with
``log_params`` / ``log_metrics`` / ``log_artifact``, e.g. the mortality runs' MLflow tracker), none
by default. Nothing is downloaded: CIFAR comes from ``data_dir``, digits from scikit-learn.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping, Protocol

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn import functional as F

from pipeline import fileio
from pipeline.metrics import multiclass as mm
from pipeline.models.vision import VisionConfig, build_vision_model

from .data import ImageSet, Splits, cifar_splits, digits_splits
from .evaluate import predict_logits

CHECKPOINT_FORMAT = 1  # bump when the checkpoint layout changes
DATASETS = {"digits": (10, 1), "cifar10": (10, 3), "cifar100": (100, 3)}  # classes, channels
LR_REFERENCE_BATCH = 128  # distinct images per step at which base_lr applies (published)
DECAY_REFERENCE_EPOCHS = 200.0  # lr_decay_epochs are given for a run of this many epochs (published)


class Tracker(Protocol):
    """What ``train_vision`` logs through (pipeline.tracking's trackers have these methods)."""

    def log_params(self, params: Mapping[str, Any]) -> None: ...

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None: ...

    def log_artifact(self, path: Path | str, artifact_path: str | None = None) -> None: ...


@dataclass
class VisionTrainConfig:
    """Training settings; ``model`` holds VisionConfig overrides (classes and channels come from the data)."""

    dataset: str = "digits"  # digits | cifar10 | cifar100
    data_dir: str | None = None  # CIFAR python batch directory (cifar-10-batches-py, cifar-100-python)
    image_size: int = 16  # digits: side after bilinear upsampling from 8x8 (CIFAR is 32)
    val_fraction: float = 0.0  # CIFAR: training share held out for validation (0: validate on test)
    seed: int = 0  # seeds the digits split, initialisation, batch order, augmentation and weight draws
    model: dict[str, Any] = field(default_factory=dict)  # VisionConfig overrides, e.g. {"depth": 16, "width": 4}
    epochs: float = 250.0  # passes over the training set (published rank-1 CIFAR: 250)
    batch_size: int = 512  # rows per step after tiling (published 64 per core x 8 cores); batch_size // K distinct
    base_lr: float = 0.1  # SGD learning rate at 128 distinct images per step, scaled linearly (published)
    momentum: float = 0.9  # Nesterov momentum (published: one_minus_momentum 0.1)
    lr_warmup_epochs: float = 1.0  # linear warm-up of the learning rate (published: 1)
    lr_decay_epochs: tuple[float, ...] = (80.0, 160.0, 180.0)  # decay points per 200 epochs, rescaled to `epochs`
    lr_decay_ratio: float = 0.2  # factor at each decay point (published: 0.2)
    l2: float = 1e-4  # factor of model.l2_penalty() (published rank-1: 1e-4)
    kl_anneal_epochs: float = 200.0  # KL weight min(1, step / (kl_anneal_epochs · steps/epoch)) (published: 200)
    nll: str = "average"  # average: mean over the S·K·B rows (published) | mixture: -log mean_d p_d(y)
    train_samples: int = 1  # Monte Carlo samples per component in a step (published: 1)
    clip: float = 0.0  # global gradient-norm clip (0: off, as published)
    augment: bool | None = None  # random 2-px-padded crop + horizontal flip; None: CIFAR on (published), digits off
    eval_every_epochs: float = 0.0  # validate every this many epochs (0: only at the end)
    eval_samples: int = 1  # samples per component in validation (published num_eval_samples: 1)
    eval_batch_size: int = 32  # images per evaluation forward pass (x S·K rows; small passes stay in cache)
    log_every: int = 50  # log loss / NLL / KL / lr every this many steps
    threads: int | None = None  # torch intra-op threads (None: torch's default)

    def __post_init__(self) -> None:
        if self.dataset not in DATASETS:
            raise ValueError(f"VisionTrainConfig.dataset must be one of {sorted(DATASETS)}, got {self.dataset!r}")
        if self.nll not in ("average", "mixture"):
            raise ValueError(f"VisionTrainConfig.nll must be 'average' or 'mixture', got {self.nll!r}")
        for name in ("batch_size", "train_samples", "eval_samples", "eval_batch_size", "log_every", "image_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"VisionTrainConfig.{name} must be >= 1, got {getattr(self, name)}")
        if not self.epochs > 0 or self.base_lr <= 0 or self.l2 < 0 or self.clip < 0 or self.kl_anneal_epochs < 0:
            raise ValueError("VisionTrainConfig: epochs and base_lr must be > 0; l2, clip, kl_anneal_epochs >= 0")
        if self.dataset != "digits" and self.data_dir is None:
            raise ValueError(f"VisionTrainConfig.data_dir is required for {self.dataset} (nothing is downloaded)")
        known = {f.name for f in fields(VisionConfig)}
        unknown = sorted(set(self.model) - known)
        if unknown:
            raise ValueError(f"unknown model setting(s) {unknown}; VisionConfig has {sorted(known)}")
        self.lr_decay_epochs = tuple(float(e) for e in self.lr_decay_epochs)

    def model_config(self) -> VisionConfig:
        """VisionConfig of the overrides with the dataset's classes and channels."""
        classes, channels = DATASETS[self.dataset]
        return VisionConfig(**{**self.model, "num_classes": classes, "in_channels": channels})

    def to_dict(self) -> dict:
        d = asdict(self)
        d["lr_decay_epochs"] = list(self.lr_decay_epochs)
        return d


@dataclass
class VisionTrainResult:
    """What a training run produced."""

    model: nn.Module  # trained model (evaluation mode)
    config: VisionTrainConfig  # the settings trained with
    model_config: VisionConfig  # the model's resolved configuration
    steps: int  # optimizer steps taken
    steps_per_epoch: int  # distinct-image batches per epoch
    seconds: float  # wall-clock time of the training loop (validation excluded)
    final_train: dict  # loss, nll, kl, kl_weight, lr of the last step
    val_metrics: dict  # metrics.multiclass.evaluate_predictions on the validation set at the end
    history: list[dict] = field(default_factory=list)  # logged training and validation points
    checkpoint: Path | None = None  # model.pt when out_dir was given


# ---------------------------------------------------------------------------- data and schedule


def load_splits(cfg: VisionTrainConfig) -> Splits:
    """Train / val / test sets of ``cfg.dataset`` (local files or scikit-learn's digits)."""
    if cfg.dataset == "digits":
        return digits_splits(cfg.seed, cfg.image_size)
    return cifar_splits(cfg.data_dir, cfg.dataset, cfg.val_fraction, cfg.seed)


def learning_rate(step: int, steps_per_epoch: int, cfg: VisionTrainConfig, distinct: int) -> float:
    """Published schedule at a 0-based step: linear warm-up, then piecewise-constant decay."""
    base = cfg.base_lr * distinct / LR_REFERENCE_BATCH
    epoch = step / steps_per_epoch
    if epoch < cfg.lr_warmup_epochs:
        return base * (step + 1) / (cfg.lr_warmup_epochs * steps_per_epoch)
    decays = sum(epoch >= e * cfg.epochs / DECAY_REFERENCE_EPOCHS for e in cfg.lr_decay_epochs)
    return base * cfg.lr_decay_ratio ** decays


def kl_weight(step: int, anneal_steps: float) -> float:
    """min(1, (step + 1) / anneal_steps) for the 0-based step (published); 1 without annealing."""
    return 1.0 if anneal_steps <= 0 else min(1.0, (step + 1) / anneal_steps)


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


# ---------------------------------------------------------------------------- loss


def objective(model: nn.Module, images: Tensor, labels: Tensor, kl_w: float, n_train: int, l2: float,
              nll: str = "average", samples: int = 1) -> dict[str, Tensor]:
    """loss = NLL + kl_w · KL / n_train + l2 · penalty, with its parts (detached).

    NLL ``average``: the mean over the S·K·B rows (published); ``mixture``: -log mean_d p_d(y).
    A model with ``independent_members`` (the deep ensemble) adds its members' mean NLLs instead
    (K times the row mean; its ``l2_penalty`` is the members' sum), so each member trains as the
    deterministic network does; the reported ``nll`` is the row mean for every model.
    """
    logits = model(images, samples=samples)  # (S·K, B, classes)
    d, b, c = logits.shape
    y = labels.unsqueeze(0).expand(d, b)  # (B,) -> (S·K, B)
    ll = -F.cross_entropy(logits.reshape(d * b, c), y.reshape(d * b), reduction="none").view(d, b)  # (S·K, B)
    if nll == "average":
        nll_t = -ll.mean()
    else:
        nll_t = -(torch.logsumexp(ll, 0) - math.log(d)).mean()
    nll_loss = nll_t
    if getattr(model, "independent_members", False):
        if nll != "average":
            raise ValueError("nll='mixture' couples the members; a deep ensemble's members train independently")
        nll_loss = nll_t * (d // samples)  # Σ_k (mean NLL of member k) = K · row mean
    kl = model.kl()
    penalty = model.l2_penalty() if l2 else torch.zeros((), dtype=nll_t.dtype)
    loss = nll_loss + kl_w * kl / n_train + l2 * penalty
    return {"loss": loss, "nll": nll_t.detach(), "kl": kl.detach(), "l2": penalty.detach()}


# ---------------------------------------------------------------------------- training


def train_vision(cfg: VisionTrainConfig | None = None, *, out_dir: Path | str | None = None,
                 tracker: Tracker | None = None, splits: Splits | None = None) -> VisionTrainResult:
    """Train the model of ``cfg`` and validate it at the end (and every ``eval_every_epochs``).

    ``splits`` replaces the data ``cfg`` names (tests, benchmarks that load once). With
    ``out_dir`` the model is saved to ``out_dir/model.pt`` (atomically) with its configs and
    validation metrics. Raises ``FloatingPointError`` on a non-finite loss or gradient.
    """
    cfg = cfg or VisionTrainConfig()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    data = splits if splits is not None else load_splits(cfg)
    mcfg = cfg.model_config()
    train_set = data.train
    _check_data(train_set, mcfg)
    torch.manual_seed(cfg.seed)
    model = build_vision_model(mcfg)
    model.set_normalization(*train_set.channel_stats())
    k = model.components
    distinct = cfg.batch_size // k
    if distinct < 1 or distinct > len(train_set):
        raise ValueError(f"batch_size {cfg.batch_size} / K={k} = {distinct} distinct images per step; need 1.."
                         f"{len(train_set)}")
    steps_per_epoch = len(train_set) // distinct
    total = max(1, round(cfg.epochs * steps_per_epoch))
    anneal = cfg.kl_anneal_epochs * steps_per_epoch
    do_augment = cfg.augment if cfg.augment is not None else cfg.dataset != "digits"
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.base_lr, momentum=cfg.momentum, nesterov=True)
    params = [p for p in model.parameters() if p.requires_grad]
    if tracker is not None:
        tracker.log_params({"train": {k_: v for k_, v in cfg.to_dict().items() if k_ != "model"},
                            "model": mcfg.to_dict(), "n_train": len(train_set), "n_val": len(data.val),
                            "distinct_per_step": distinct, "steps": total})
    generator = torch.Generator().manual_seed(cfg.seed)
    eval_every = round(cfg.eval_every_epochs * steps_per_epoch) if cfg.eval_every_epochs > 0 else 0
    history: list[dict] = []
    last: dict = {}
    elapsed = 0.0
    model.train()
    for step in range(total):
        start = time.perf_counter()
        idx = batch_indices(len(train_set), distinct, steps_per_epoch, step, cfg.seed)
        images = torch.from_numpy(train_set.floats(idx))  # (B, C, H, W) in [0, 1]
        if do_augment:
            images = augment(images, generator)
        labels = torch.from_numpy(train_set.labels[idx])  # (B,)
        lr = learning_rate(step, steps_per_epoch, cfg, distinct)
        for group in optimizer.param_groups:
            group["lr"] = lr
        kl_w = kl_weight(step, anneal)
        parts = objective(model, images, labels, kl_w, len(train_set), cfg.l2, cfg.nll, cfg.train_samples)
        parts["loss"].backward()
        norm = nn.utils.clip_grad_norm_(params, cfg.clip if cfg.clip > 0 else math.inf)
        if not (torch.isfinite(parts["loss"]) and torch.isfinite(norm)):
            raise FloatingPointError(f"non-finite training loss or gradient at step {step + 1} "
                                     f"(loss={parts['loss'].item()}, grad_norm={norm.item()})")
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        elapsed += time.perf_counter() - start
        last = {"loss": parts["loss"].item(), "nll": parts["nll"].item(), "kl": parts["kl"].item(),
                "kl_weight": kl_w, "lr": lr, "grad_norm": norm.item()}
        if (step + 1) % cfg.log_every == 0 or step + 1 == total:
            history.append({"step": step + 1, **last})
            if tracker is not None:
                tracker.log_metrics({f"train_{k_}": v for k_, v in last.items()}, step + 1)
        if eval_every and (step + 1) % eval_every == 0 and step + 1 < total:
            val = _validate(model, data.val, cfg)
            history.append({"step": step + 1, **{f"val_{m}": val[m] for m in ("nll", "accuracy", "ece")}})
            if tracker is not None:
                tracker.log_metrics({f"val_{m}": val[m] for m in ("nll", "accuracy", "ece")}, step + 1)
            model.train()
    model.eval()
    val = _validate(model, data.val, cfg)
    history.append({"step": total, **{f"val_{m}": val[m] for m in ("nll", "accuracy", "ece")}})
    if tracker is not None:
        tracker.log_metrics({f"val_{m}": val[m] for m in ("nll", "accuracy", "ece")}, total)
    result = VisionTrainResult(model=model, config=cfg, model_config=mcfg, steps=total,
                               steps_per_epoch=steps_per_epoch, seconds=elapsed, final_train=last,
                               val_metrics=val, history=history)
    if out_dir is not None:
        result.checkpoint = save_vision_checkpoint(Path(out_dir) / "model.pt", result)
        if tracker is not None:
            tracker.log_artifact(result.checkpoint, "checkpoint")
    return result


def _validate(model: nn.Module, val: ImageSet, cfg: VisionTrainConfig) -> dict:
    logits = predict_logits(model, val.floats(), cfg.eval_samples, cfg.eval_batch_size, seed=cfg.seed)
    return mm.evaluate_predictions(logits, val.labels, components=model.components)


def _check_data(train: ImageSet, mcfg: VisionConfig) -> None:
    if train.images.shape[1] != mcfg.in_channels or train.num_classes != mcfg.num_classes:
        raise ValueError(f"{train.name}: {train.images.shape[1]} channels / {train.num_classes} classes, but the "
                         f"model takes {mcfg.in_channels} / {mcfg.num_classes}")


# ---------------------------------------------------------------------------- checkpoints


def save_vision_checkpoint(path: Path | str, result: VisionTrainResult) -> Path:
    """torch.save of the model, its configs and validation metrics, written atomically."""
    payload = {"format": CHECKPOINT_FORMAT, "kind": "vision", "model_config": result.model_config.to_dict(),
               "train_config": result.config.to_dict(), "model": result.model.state_dict(), "steps": result.steps,
               "val_metrics": {m: result.val_metrics[m] for m in ("nll", "accuracy", "ece", "n")}}
    path = Path(path)
    with fileio.atomic_path(path) as tmp:
        torch.save(payload, tmp)
    return path


def load_vision_checkpoint(path: Path | str) -> tuple[nn.Module, dict]:
    """Model (evaluation mode) and its info dict (configs, steps, validation metrics)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: checkpoint not found")
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    if ckpt.get("format") != CHECKPOINT_FORMAT or ckpt.get("kind") != "vision":
        raise ValueError(f"{path}: not a vision checkpoint of format {CHECKPOINT_FORMAT}")
    model = build_vision_model(VisionConfig(**ckpt["model_config"]))
    model.load_state_dict(ckpt["model"])
    model.eval()
    return model, {k: ckpt[k] for k in ("model_config", "train_config", "steps", "val_metrics")}


def with_overrides(cfg: VisionTrainConfig, **overrides) -> VisionTrainConfig:
    """A copy of ``cfg`` with ``overrides`` (``model`` overrides are merged, not replaced)."""
    model = {**cfg.model, **overrides.pop("model", {})}
    return dataclasses.replace(cfg, **overrides, model=model)


__all__ = ["DATASETS", "Tracker", "VisionTrainConfig", "VisionTrainResult", "augment", "batch_indices",
           "kl_weight", "learning_rate", "load_splits", "load_vision_checkpoint", "objective",
           "save_vision_checkpoint", "train_vision", "with_overrides"]
