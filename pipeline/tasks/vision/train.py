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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Protocol

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn import functional as F

from pipeline.bayes.layers import Rank1Vector
from pipeline.bayes.layers.factors import Rank1Layer
from pipeline.bayes.metrics import multiclass as mm
from pipeline.core.errors import ConfigError
from pipeline.core.progress import Progress
from pipeline.data.images.data import ImageSet, Splits, cifar_splits, digits_splits
from pipeline.engine.checkpoints import BEST, CHECKPOINT_FORMAT, save_checkpoint
from pipeline.engine.objective import Objective, kl_weight
from pipeline.tasks.vision import VisionConfig, build_vision_model
from pipeline.tasks.vision.config import DATASETS, Dataset, VisionTrainConfig
from pipeline.tasks.vision.evaluate import predict_logits

LR_REFERENCE_BATCH = 128  # distinct images per step at which base_lr applies (published)
DECAY_REFERENCE_EPOCHS = 200.0  # lr_decay_epochs are given for a run of this many epochs (published)


class Tracker(Protocol):
    """What ``train_vision`` logs through (pipeline.tracking's trackers have these methods)."""

    def log_params(self, params: Mapping[str, Any]) -> None: ...

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None: ...

    def log_artifact(self, path: Path | str, artifact_path: str | None = None) -> None: ...


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
    checkpoint: Path | None = None  # best.pt when out_dir was given


# ---------------------------------------------------------------------------- data and schedule


def load_splits(cfg: VisionTrainConfig) -> Splits:
    """Train / val / test sets of ``cfg.dataset`` (local files or scikit-learn's digits)."""
    if cfg.dataset is Dataset.DIGITS:
        return digits_splits(cfg.seed, cfg.image_size)
    return cifar_splits(cfg.data_dir, cfg.dataset.value, cfg.val_fraction, cfg.seed)


def learning_rate(step: int, steps_per_epoch: int, cfg: VisionTrainConfig, distinct: int) -> float:
    """Published schedule at a 0-based step: linear warm-up, then piecewise-constant decay."""
    base = cfg.base_lr * distinct / LR_REFERENCE_BATCH
    epoch = step / steps_per_epoch
    if epoch < cfg.lr_warmup_epochs:
        return base * (step + 1) / (cfg.lr_warmup_epochs * steps_per_epoch)
    decays = sum(epoch >= e * cfg.epochs / DECAY_REFERENCE_EPOCHS for e in cfg.lr_decay_epochs)
    return base * cfg.lr_decay_ratio ** decays


from pipeline.core.devices import resolve_device  # noqa: E402  (shared with the mortality commands)


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
    objective of every model of the family (``pipeline.engine.objective.Objective``) on the batch
    ``{"images", "label"}``.

    NLL ``average``: the mean over the S·K·B rows (published); ``mixture``: -log mean_d p_d(y).
    A model with ``independent_members`` (the deep ensemble) adds its members' mean NLLs instead
    (K times the row mean; its ``l2_penalty`` is the members' sum), so each member trains as the
    deterministic network does; the reported ``nll`` is the row mean for every model.
    """
    return Objective(model, nll, n_train, l2, samples)({"images": images, "label": labels}, kl_w)


# ---------------------------------------------------------------------------- training


def train_vision(cfg: VisionTrainConfig | None = None, *, out_dir: Path | str | None = None,
                 tracker: Tracker | None = None, splits: Splits | None = None) -> VisionTrainResult:
    """Train the model of ``cfg`` and validate it at the end (and every ``eval_every_epochs``).

    ``splits`` replaces the data ``cfg`` names (tests, benchmarks that load once). With
    ``out_dir`` the model is saved to ``out_dir/best.pt`` (atomically, as every run's model) with its configs and
    validation metrics. Raises ``FloatingPointError`` on a non-finite loss or gradient.
    """
    cfg = cfg or VisionTrainConfig()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    device = resolve_device(cfg.device)
    data = splits if splits is not None else load_splits(cfg)
    mcfg = cfg.model_config()
    train_set = data.train
    _check_data(train_set, mcfg)
    torch.manual_seed(cfg.seed)
    model = build_vision_model(mcfg)
    model.set_normalization(*train_set.channel_stats())
    model.to(device)
    k = model.components
    distinct = cfg.batch_size // k
    if distinct < 1 or distinct > len(train_set):
        raise ConfigError(f"batch_size {cfg.batch_size} / K={k} = {distinct} distinct images per step; need 1.."
                         f"{len(train_set)}")
    _check_bn_rows(model, distinct, cfg.train_samples)
    steps_per_epoch = len(train_set) // distinct
    total = max(1, round(cfg.epochs * steps_per_epoch))
    anneal = cfg.kl_anneal_epochs * steps_per_epoch
    do_augment = cfg.augment if cfg.augment is not None else cfg.dataset is not Dataset.DIGITS
    loss_fn = Objective(model, cfg.nll, len(train_set), cfg.l2, cfg.train_samples)
    groups = parameter_groups(model, cfg.fast_weight_lr_multiplier)
    optimizer = torch.optim.SGD(groups, lr=cfg.base_lr, momentum=cfg.momentum, nesterov=True)
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
    val_note = ""
    with Progress("vision train", total, enabled=cfg.progress) as bar:  # a bar on a terminal, else plain lines
        for step in range(total):
            start = time.perf_counter()
            idx = batch_indices(len(train_set), distinct, steps_per_epoch, step, cfg.seed)
            images = torch.from_numpy(train_set.floats(idx))  # (B, C, H, W) in [0, 1]
            if do_augment:
                images = augment(images, generator)  # on the CPU: the same crops and flips on every device
            labels = torch.from_numpy(train_set.labels[idx])  # (B,)
            batch = {"images": images.to(device), "label": labels.to(device)}
            lr = learning_rate(step, steps_per_epoch, cfg, distinct)
            for group in optimizer.param_groups:
                group["lr"] = lr * group["lr_multiplier"]
            kl_w = kl_weight(step + 1, anneal)  # the 1-based step: min(1, (step + 1) / anneal), as published
            parts = loss_fn(batch, kl_w)
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
            bar.update(step + 1, progress_status(step + 1, steps_per_epoch, cfg.epochs, last, val_note))
            if (step + 1) % cfg.log_every == 0 or step + 1 == total:
                history.append({"step": step + 1, **last})
                if tracker is not None:
                    tracker.log_metrics({f"train_{k_}": v for k_, v in last.items()}, step + 1)
            if eval_every and (step + 1) % eval_every == 0 and step + 1 < total:
                val = _validate(model, data.val, cfg)
                val_note = f"val accuracy {val['accuracy']:.4f} at epoch {(step + 1) / steps_per_epoch:.3g}"
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
        result.checkpoint = save_vision_checkpoint(Path(out_dir) / BEST, result)
        if tracker is not None:
            tracker.log_artifact(result.checkpoint, "checkpoint")
    return result


def _validate(model: nn.Module, val: ImageSet, cfg: VisionTrainConfig) -> dict:
    logits = predict_logits(model, val.floats(), cfg.eval_samples, cfg.eval_batch_size, seed=cfg.seed)
    return mm.evaluate_predictions(logits, val.labels, components=model.components)


def _check_bn_rows(model: nn.Module, distinct: int, samples: int) -> None:
    """A one-line ConfigError unless the tiled batch splits into ghost batches of ``bn_rows`` rows."""
    from pipeline.tasks.vision.norm import ghost_groups

    blocks = 1 if model.independent_members else samples * model.components  # a deep ensemble's member sees B rows
    try:
        ghost_groups(distinct * blocks, blocks, model.cfg.bn_rows)
    except ValueError as e:
        raise ConfigError(f"{e}: choose --bn-rows (a multiple of {blocks}) or --batch-size") from None


def _check_data(train: ImageSet, mcfg: VisionConfig) -> None:
    if train.images.shape[1] != mcfg.in_channels or train.num_classes != mcfg.num_classes:
        raise ConfigError(f"{train.name}: {train.images.shape[1]} channels / {train.num_classes} classes, but the "
                         f"model takes {mcfg.in_channels} / {mcfg.num_classes}")


# ---------------------------------------------------------------------------- checkpoints


def save_vision_checkpoint(path: Path | str, result: VisionTrainResult) -> Path:
    """The model, its configs and validation metrics as a checkpoint of kind ``vision`` (written atomically,
    tensors on the CPU); ``pipeline.runs.formats.load_model`` reads it
    (``pipeline.runs.vision.load_vision_checkpoint``: an image model only)."""
    state = {k: v.detach().cpu() for k, v in result.model.state_dict().items()}
    payload = {"format": CHECKPOINT_FORMAT, "kind": "vision", "model_config": result.model_config.to_dict(),
               "train_config": result.config.to_dict(), "model": state, "steps": result.steps,
               "val_metrics": {m: result.val_metrics[m] for m in ("nll", "accuracy", "ece", "n")}}
    return save_checkpoint(path, payload)


def with_overrides(cfg: VisionTrainConfig, **overrides) -> VisionTrainConfig:
    """A copy of ``cfg`` with ``overrides`` (``model`` overrides are merged, not replaced)."""
    model = {**cfg.model, **overrides.pop("model", {})}
    return dataclasses.replace(cfg, **overrides, model=model)


__all__ = ["DATASETS", "Tracker", "VisionTrainConfig", "VisionTrainResult", "augment", "batch_indices",
           "learning_rate", "parameter_groups", "load_splits", "objective", "resolve_device",
           "save_vision_checkpoint", "train_vision", "with_overrides"]
