"""The image models under bf16 autocast and in channels-last memory format (on the CPU: autocast bf16 runs
there too), for every method."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from pipeline.bayes.objective import Objective
from pipeline.core.errors import ConfigError
from pipeline.data.images.data import Splits, digits_splits
from pipeline.tasks.vision import VisionConfig, VisionTrainConfig, build_vision_model
from pipeline.tasks.vision.norm import BatchNorm2d, MemberBatchNorm2d, channels_last
from pipeline.tasks.vision.train import step_autocast
from pipeline.workflows.vision_run import train_vision

METHODS = ["deterministic", "batchensemble", "rank1", "deep-ensemble"]
CPU = torch.device("cpu")


def tiny(method: str, member_batchnorm: bool = False) -> VisionConfig:
    """WRN-10-1, K = 2, ghost batches of 6 rows: a step of 12 images (24 tiled rows) takes the ghost path."""
    return VisionConfig(depth=10, width=1, method=method, ensemble_size=2, num_classes=10, in_channels=3, bn_rows=6,
                        member_batchnorm=member_batchnorm)


def norms(model):
    return [m for m in model.modules() if isinstance(m, (BatchNorm2d, MemberBatchNorm2d))]


def one_step(model, images, labels, precision: str):
    """Loss parts of one training step (forward under the step's autocast, backward) and the dtypes the
    convolutions produced."""
    dtypes = set()
    hooks = [m.register_forward_hook(lambda _m, _i, out: dtypes.add(out.dtype)) for m in model.modules()
             if isinstance(m, torch.nn.Conv2d) or type(m).__name__.startswith("Conv2d")]
    with step_autocast(CPU, precision):
        parts = Objective(model, "average", 50_000, 1e-4, 1)({"images": images, "label": labels}, 1.0)
    parts["loss"].backward()
    for h in hooks:
        h.remove()
    return parts, dtypes


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize("member_batchnorm", [False, True], ids=["shared-bn", "member-bn"])
@pytest.mark.parametrize("method", METHODS)
def test_bf16_autocast_step_runs_for_every_method(method, member_batchnorm, layout):
    """Finite loss and gradients, the convolutions in bf16, the BatchNorm statistics float32 and moved, and the
    NLL within bf16 rounding of the fp32 step's on the same weights and draws."""
    torch.manual_seed(0)
    images, labels = torch.rand(12, 3, 8, 8), torch.randint(0, 10, (12,))
    fp32 = build_vision_model(tiny(method, member_batchnorm)).train()
    bf16 = build_vision_model(tiny(method, member_batchnorm)).train()
    bf16.load_state_dict(fp32.state_dict())
    if layout == "channels_last":
        bf16.to(memory_format=torch.channels_last)
        images_bf16 = images.contiguous(memory_format=torch.channels_last)
    else:
        images_bf16 = images
    torch.manual_seed(1)
    ref, ref_dtypes = one_step(fp32, images, labels, "fp32")
    torch.manual_seed(1)
    parts, dtypes = one_step(bf16, images_bf16, labels, "bf16")
    assert ref_dtypes == {torch.float32} and torch.bfloat16 in dtypes
    assert math.isfinite(parts["loss"].item())
    assert all(torch.isfinite(p.grad).all() for p in bf16.parameters() if p.grad is not None)
    assert abs(parts["nll"].item() - ref["nll"].item()) < 0.05 * ref["nll"].item()
    for bn in norms(bf16):
        assert bn.running_mean.dtype == bn.running_var.dtype == torch.float32
        assert torch.isfinite(bn.running_var).all() and bool(bn.running_mean.any())  # moved off its zero start


@pytest.mark.parametrize("member", [False, True], ids=["shared", "per-member"])
@pytest.mark.parametrize("training", [True, False], ids=["ghost-batches", "eval"])
def test_batchnorm_channels_last_equals_contiguous(member, training):
    """The ghost / per-member regrouping through the NHWC view gives the same numbers and keeps the format."""
    torch.manual_seed(0)
    k, samples, c = 2, 2, 5
    make = (lambda: MemberBatchNorm2d(c, k, rows=8)) if member else (lambda: BatchNorm2d(c, tile=k, rows=8))
    a, b = make(), make()
    with torch.no_grad():
        a.weight.uniform_(0.5, 1.5)
        a.bias.uniform_(-1, 1)
    b.load_state_dict(a.state_dict())
    a.train(training)
    b.train(training)
    x = torch.randn(samples * k * 8, c, 3, 4)  # 4 ghost batches of 8 rows in training
    y_a = a(x, samples)
    y_b = b(x.contiguous(memory_format=torch.channels_last), samples)
    assert channels_last(y_b) and not channels_last(y_a)
    assert torch.allclose(y_a, y_b, atol=1e-6)
    assert torch.allclose(a.running_mean, b.running_mean, atol=1e-6)
    assert torch.allclose(a.running_var, b.running_var, atol=1e-6)


def test_train_vision_in_bf16_channels_last():
    """The training loop takes --precision bf16 and --channels-last (digits, one step per method)."""
    s = digits_splits(0, size=8)
    small = Splits(s.train.subset(np.arange(48)), s.val.subset(np.arange(24)), s.test.subset(np.arange(24)))
    for method in METHODS:
        cfg = VisionTrainConfig(dataset="digits", image_size=8, epochs=0.2, batch_size=24, precision="bf16",
                                channels_last=True, eval_samples=1,
                                model={"depth": 10, "width": 1, "ensemble_size": 2, "bn_rows": 6, "method": method})
        r = train_vision(cfg, splits=small)
        assert r.steps == 1 and math.isfinite(r.final_train["loss"]) and math.isfinite(r.val_metrics["nll"])
        convs = [p for p in r.model.parameters() if p.dim() == 4]
        assert convs and all(p.is_contiguous(memory_format=torch.channels_last) for p in convs)
    assert r.config.to_dict()["precision"] == "bf16"
    with pytest.raises(ConfigError, match="^precision must be one of"):
        VisionTrainConfig(precision="fp16")
