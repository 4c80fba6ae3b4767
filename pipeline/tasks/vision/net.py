"""Image classifiers on the layer library: images (B, C, H, W) -> logits (S·K, B, classes).

The output is the mortality models' (S·K, B) with a class axis: member axis first, sample-major
then member-major (``logits.view(S, K, B, classes)``); ``logits.reshape(-1, classes)`` is the
folded (S·K·B, classes) layout the layers compute in. A model takes images (B, C, H, W) or a
batch dict holding them under ``"images"`` (the family's batch convention: the training objective
and Laplace pass ``{"images", "label"}``). Images are taken in [0, 1] and
standardised inside the model with per-channel ``pixel_mean`` / ``pixel_std`` buffers (set from
the training set by ``set_normalization``; identity by default), so a checkpoint carries its
preprocessing. Every model exposes ``kl()``, ``l2_penalty()`` and ``components``; none
computes metrics.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import torch
from torch import Tensor, nn

from pipeline.bayes.layers import Rank1Vector, Sampling, kl_divergence, l2_penalty, set_sampling, tile_members
from pipeline.bayes.layers.factors import Rank1Layer
from pipeline.tasks.vision.factory import LayerFactory
from pipeline.tasks.vision.model_config import Arch, Method, VisionConfig
from pipeline.tasks.vision.norm import MemberBatchNorm2d, channels_last
from pipeline.tasks.vision.resnet import ResNet50
from pipeline.tasks.vision.wrn import WideResNet


class VisionNet(nn.Module):
    """One network of a method other than deep-ensemble (deterministic, batchensemble, rank1)."""

    independent_members = False  # the K members share weights: one loss, the mean over the tiled batch
    likelihood = "categorical"  # a softmax over the classes (what subnetwork Laplace's GGN and predictive take)

    def __init__(self, cfg: VisionConfig) -> None:
        super().__init__()
        if cfg.method == Method.DEEP_ENSEMBLE:
            raise ValueError("use VisionDeepEnsemble (build_vision_model) for deep ensembles")
        self.cfg, self.method, self.components = cfg, cfg.method, cfg.components
        self.kind = cfg.method  # the method, as the mortality models' ``kind`` (messages, Laplace checkpoints)
        self.stochastic = cfg.method.stochastic  # weights drawn per sample (otherwise one pass, copied)
        body = {Arch.WRN: WideResNet, Arch.RESNET50: ResNet50}[cfg.arch]
        self.body = body(cfg, LayerFactory(cfg))
        self.register_buffer("pixel_mean", torch.zeros(cfg.in_channels))
        self.register_buffer("pixel_std", torch.ones(cfg.in_channels))
        set_sampling(self, cfg.sampling)

    def set_normalization(self, mean: Sequence[float], std: Sequence[float]) -> None:
        """Per-channel standardisation (x - mean) / std applied to every input image."""
        mean_t, std_t = torch.as_tensor(mean, dtype=torch.float32), torch.as_tensor(std, dtype=torch.float32)
        if mean_t.shape != self.pixel_mean.shape or std_t.shape != self.pixel_std.shape or not (std_t > 0).all():
            raise ValueError(f"normalisation needs {self.cfg.in_channels} means and positive stds")
        self.pixel_mean.copy_(mean_t)
        self.pixel_std.copy_(std_t)

    def forward(self, images: Tensor | dict, samples: int = 1, *, sampling: Sampling | None = None,
                generator: torch.Generator | None = None) -> Tensor:
        """Logits (S·K, B, classes) for images (B, C, H, W) in [0, 1] (or a batch dict holding them);
        ``sampling`` / ``generator``: this call's sampling mode and random stream (None: each layer's own mode,
        torch's global generator), as the mortality models take them."""
        images = batch_images(images)
        check_images(images, self.cfg.in_channels)
        if samples < 1:
            raise ValueError(f"samples must be >= 1, got {samples}")
        b, k = images.shape[0], self.components
        s_run = samples if self.stochastic else 1  # deterministic weights: compute once
        c = self.cfg.in_channels
        x = (images - self.pixel_mean.view(1, c, 1, 1)) / self.pixel_std.view(1, c, 1, 1)  # (B, C, H, W)
        x = tile_members(x, s_run * k)  # (B, C, H, W) -> (S·K·B, C, H, W)
        if channels_last(images):  # the images' memory format carries through the network
            x = x.contiguous(memory_format=torch.channels_last)
        logits = self.body(x, s_run, sampling=sampling, generator=generator)  # (S·K·B, classes)
        logits = logits.view(s_run * k, b, logits.shape[1])  # (S·K·B, classes) -> (S·K, B, classes)
        return logits if s_run == samples else logits.repeat(samples, 1, 1)

    def kl(self) -> Tensor:
        return kl_divergence(self)

    def l2_penalty(self) -> Tensor:
        """Σ w² over kernels (``pipeline.bayes.layers.l2_penalty``), and with ``l2_norm_and_bias`` over BN
        scales/offsets and biases too: every parameter but the rank-1 factors, as the published
        ``compute_l2_loss`` (its ``l2 * 2 * tf.nn.l2_loss`` is l2 · Σ w²)."""
        total = l2_penalty(self)
        if self.cfg.l2_norm_and_bias:
            for m in self.modules():
                for p in _norm_and_bias_params(m):
                    total = total + p.pow(2).sum()
        return total


def _norm_and_bias_params(m: nn.Module):
    if isinstance(m, (nn.BatchNorm2d, MemberBatchNorm2d)):
        yield from (p for p in (m.weight, m.bias) if p is not None)
    elif isinstance(m, (nn.Conv2d, nn.Linear, Rank1Layer)) and getattr(m, "bias", None) is not None:
        yield m.bias


class VisionDeepEnsemble(nn.Module):
    """K independently initialised deterministic networks; logits (S·K, B, classes).

    The published deep ensembles are K deterministic networks trained separately. Trained jointly
    here, the loss is the *sum* of the members' losses (``independent_members``: the training
    objective sums the members' mean NLLs, and ``l2_penalty`` sums their penalties), so under SGD
    each member gets exactly the gradient the deterministic network would get on the same images
    (a mean would scale it by 1/K, which Adam removes but SGD does not). Every member sees the same
    B distinct images per step.
    """

    independent_members = True  # separate networks: the loss is the sum of the members' losses
    likelihood = "categorical"  # a softmax over the classes

    def __init__(self, cfg: VisionConfig) -> None:
        super().__init__()
        self.cfg, self.method, self.components = cfg, Method.DEEP_ENSEMBLE, cfg.ensemble_size
        self.kind = self.method
        member = dataclasses.replace(cfg, method=Method.DETERMINISTIC)
        self.members = nn.ModuleList(VisionNet(member) for _ in range(cfg.ensemble_size))

    def set_normalization(self, mean: Sequence[float], std: Sequence[float]) -> None:
        for m in self.members:
            m.set_normalization(mean, std)

    def forward(self, images: Tensor | dict, samples: int = 1, *, sampling: Sampling | None = None,
                generator: torch.Generator | None = None) -> Tensor:
        """Logits (S·K, B, classes); deterministic members, so the S samples are copies."""
        images = batch_images(images)
        if samples < 1:
            raise ValueError(f"samples must be >= 1, got {samples}")
        logits = torch.cat([m(images, samples=1, sampling=sampling, generator=generator)
                            for m in self.members])  # K x (1, B, classes) -> (K, B, classes)
        return logits.repeat(samples, 1, 1)  # (S·K, B, classes)

    def kl(self) -> Tensor:
        return kl_divergence(self)

    def l2_penalty(self) -> Tensor:
        """Sum over members of their L2 penalties (the training NLL is the members' sum too)."""
        return torch.stack([m.l2_penalty() for m in self.members]).sum()


def build_vision_model(cfg: VisionConfig) -> nn.Module:
    """An image model of ``cfg.method``."""
    return VisionDeepEnsemble(cfg) if cfg.method == Method.DEEP_ENSEMBLE else VisionNet(cfg)


def batch_images(batch: Tensor | dict) -> Tensor:
    """The images of a model input: the tensor itself, or a batch dict's ``"images"``."""
    if isinstance(batch, dict):
        if "images" not in batch:
            raise ValueError(f"a batch dict must hold 'images', got keys {sorted(batch)}")
        return batch["images"]
    return batch


def check_images(images: Tensor, channels: int) -> None:
    """Raise a one-line error unless ``images`` is a finite float (B, channels, H, W) tensor."""
    if not isinstance(images, Tensor) or images.dim() != 4 or images.shape[1] != channels:
        shape = tuple(images.shape) if isinstance(images, Tensor) else type(images).__name__
        raise ValueError(f"images must be (B, {channels}, H, W), got {shape}")
    if not images.is_floating_point():
        raise ValueError(f"images must be floating point in [0, 1], got {images.dtype}")
    if images.shape[0] == 0:
        raise ValueError("images: empty batch")


def count_parameters(model: nn.Module) -> int:
    """Trainable parameters (BatchNorm running statistics are buffers and not counted)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def parameter_report(cfg: VisionConfig) -> dict:
    """Parameter count of ``cfg``'s model against its deterministic network, by kind of extra.

    ``factors``: the rank-1 factors' variational parameters (mean, and for rank-1 the softplus
    scale: 2 per entry), ``factor_entries``: their entries (K·Σ (C_in + C_out) over layers),
    ``member_biases`` / ``member_batchnorm``: what per-member head biases and BN add beyond the
    deterministic network's one copy.
    """
    model = build_vision_model(cfg)
    base = count_parameters(VisionNet(dataclasses.replace(cfg, method=Method.DETERMINISTIC, member_batchnorm=False)))
    total = count_parameters(model)
    vectors = [m for m in model.modules() if isinstance(m, Rank1Vector)]
    factors = sum(p.numel() for v in vectors for p in v.parameters())
    bias_extra = sum(m.bias.numel() - m.bias.shape[-1] for m in model.modules()
                     if isinstance(m, Rank1Layer) and m.bias is not None)
    bn_extra = sum(m.weight.numel() + m.bias.numel() - 2 * m.channels for m in model.modules()
                   if isinstance(m, MemberBatchNorm2d))
    return {"method": cfg.method.value, "arch": cfg.arch.value, "components": cfg.components, "total": total,
            "deterministic": base, "extra": total - base, "extra_pct": 100.0 * (total - base) / base,
            "factors": factors, "factor_entries": sum(v.mean.numel() for v in vectors),
            "member_biases": bias_extra, "member_batchnorm": bn_extra,
            "ratio_to_deterministic": total / base}
