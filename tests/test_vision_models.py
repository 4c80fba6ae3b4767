"""Image models: parameter counts, full-size forward/backward in the folded layout, a hand-written
reference block by block, members as deterministic networks, per-member BatchNorm, layer additions."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from pipeline.bayes.layers import (
    Conv2dDeterministic,
    Conv2dRank1,
    LinearDeterministic,
    LinearRank1,
    Rank1Vector,
    Sampling,
    set_sampling,
)
from pipeline.tasks.vision import (
    BatchNorm2d,
    MemberBatchNorm2d,
    Method,
    VisionConfig,
    VisionNet,
    build_vision_model,
    count_parameters,
    parameter_report,
)

METHODS = ("deterministic", "batchensemble", "rank1", "deep-ensemble")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def tiny(**kw) -> VisionConfig:
    """WRN-10-1 on 1-channel 8x8 images: every block kind (identity and projection shortcuts)."""
    return VisionConfig(**{"arch": "wrn", "depth": 10, "width": 1, "num_classes": 5, "in_channels": 1,
                           "ensemble_size": 3, **kw})


def randomize_norms(model: nn.Module) -> None:
    """Random BN affine parameters and running statistics, so that evaluation-mode BN is not identity."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.BatchNorm2d, MemberBatchNorm2d)):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.3, 0.3)
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 2.0)


# ---------------------------------------------------------------- parameter counts


@pytest.mark.slow
def test_resnet50_deterministic_has_torchvisions_parameter_count():
    model = build_vision_model(VisionConfig(arch="resnet50", method="deterministic", num_classes=1000))
    assert count_parameters(model) == 25_557_032


@pytest.mark.slow
def test_wrn_28_10_parameter_count():
    n = count_parameters(build_vision_model(VisionConfig(arch="wrn", depth=28, width=10, method="deterministic")))
    assert n == 36_479_194  # Zagoruyko & Komodakis' WRN-28-10 (CIFAR-10)
    assert 36.4e6 < n < 36.6e6


@pytest.mark.parametrize("method, per_entry", [("rank1", 2), ("batchensemble", 1)])
def test_parameter_report_counts_factor_entries(method, per_entry):
    cfg = tiny(method=method, ensemble_size=4)
    rep = parameter_report(cfg)
    convs = [(1, 16), (16, 16), (16, 16), (16, 32), (32, 32), (16, 32), (32, 64), (64, 64), (32, 64)]  # (in, out)
    entries = 4 * (sum(i + o for i, o in convs) + (64 + 5))  # K · Σ (C_in + C_out), head included
    assert rep["factor_entries"] == entries and rep["factors"] == per_entry * entries
    assert rep["member_biases"] == 3 * 5  # (K - 1) extra head biases
    assert rep["extra"] == rep["factors"] + rep["member_biases"] == rep["total"] - rep["deterministic"]


# ---------------------------------------------------------------- full architectures, folded layout


@pytest.mark.parametrize("arch, side, samples", [("resnet50", 32, 2), ("wrn", 8, 1)])
@pytest.mark.parametrize("method", ["rank1", "batchensemble"])
@pytest.mark.slow
def test_full_architecture_forward_backward_k4(arch, side, samples, method):
    """ResNet-50 (32x32) and WRN-28-10 (8x8), K = 4, one image per member (and S samples)."""
    cfg = VisionConfig(arch=arch, method=method, ensemble_size=4, num_classes=10, member_batchnorm=(method == "rank1"))
    model = build_vision_model(cfg)
    images = torch.rand(1, 3, side, side)
    logits = model(images, samples=samples)
    assert logits.shape == (samples * 4, 1, 10)  # (S·K, B, classes)
    labels = torch.zeros(samples * 4, dtype=torch.long)
    loss = F.cross_entropy(logits.reshape(-1, 10), labels) + model.kl() / 1000
    loss.backward()
    grads = {n: p.grad for n, p in model.named_parameters()}
    assert all(g is not None and torch.isfinite(g).all() for g in grads.values())
    factor_grads = [g for n, g in grads.items() if n.endswith(".mean")]
    assert factor_grads and all(g.abs().sum() > 0 for g in factor_grads[:5])


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("samples", [1, 3])
def test_output_layout_member_axis_first(method, samples):
    model = build_vision_model(tiny(method=method))
    model.eval()
    k = model.components
    assert k == (1 if method == "deterministic" else 3)
    images = torch.rand(4, 1, 8, 8)
    with torch.no_grad():
        logits = model(images, samples=samples)
    assert logits.shape == (samples * k, 4, 5)
    view = logits.view(samples, k, 4, 5)
    if method != "rank1":  # deterministic weights: the S samples are copies
        assert torch.equal(view, view[:1].expand_as(view))
    if k > 1:
        assert not torch.allclose(view[0, 0], view[0, 1])  # members differ


@pytest.mark.parametrize("method", METHODS)
def test_a_method_says_whether_its_draws_differ_and_whether_it_tiles_the_images(method):
    """``Method.stochastic`` and ``Method.tiled`` (what benchmarks and studies ask instead of a method's name)
    against what its model does: two draws that differ, and the rows its first convolution sees for B images."""
    model = build_vision_model(tiny(method=method, dropout_rate=0.2)).eval()
    set_sampling(model, Sampling.PER_MEMBER)
    rows = []
    first = next(m for m in model.modules() if isinstance(m, (Conv2dDeterministic, Conv2dRank1)))
    first.register_forward_hook(lambda module, inputs, output: rows.append(inputs[0].shape[0]))
    images = torch.rand(4, 1, 8, 8)
    with torch.no_grad():
        model(images)
        view = model(images, samples=2).view(2, model.components, 4, 5)
    assert Method(method).stochastic == (not torch.equal(view[0], view[1]))
    assert rows[0] == (4 * model.components if Method(method).tiled else 4)


def test_rank1_samples_differ_and_follow_the_sampling_mode():
    model = build_vision_model(tiny(method="rank1", dropout_rate=0.2))
    model.eval()
    images = torch.rand(3, 1, 8, 8)
    set_sampling(model, Sampling.PER_MEMBER)
    with torch.no_grad():
        view = model(images, samples=2).view(2, 3, 3, 5)
    assert not torch.allclose(view[0], view[1])
    set_sampling(model, use_mean=True)
    with torch.no_grad():
        view = model(images, samples=2).view(2, 3, 3, 5)
    assert torch.allclose(view[0], view[1])


def test_deep_ensemble_is_its_members_and_averages_l2():
    model = build_vision_model(tiny(method="deep-ensemble"))
    model.eval()
    images = torch.rand(2, 1, 8, 8)
    with torch.no_grad():
        logits = model(images, samples=2)
        members = torch.cat([m(images) for m in model.members])  # (K, B, C)
    assert torch.equal(logits, members.repeat(2, 1, 1))
    assert model.kl() == 0
    assert torch.allclose(model.l2_penalty(), torch.stack([m.l2_penalty() for m in model.members]).sum())
    assert not torch.equal(model.members[0].body.stem.weight, model.members[1].body.stem.weight)


# ---------------------------------------------------------------- hand-written reference


def _bn(x, m, training):
    return F.batch_norm(x, m.running_mean.clone(), m.running_var.clone(), m.weight, m.bias, training, 0.1, m.eps)


def _ref_wrn_block(x, blk, training):
    y = F.conv2d(F.relu(_bn(x, blk.bn1, training)), blk.conv1.weight, stride=blk.conv1.stride, padding=1)
    y = F.conv2d(F.relu(_bn(y, blk.bn2, training)), blk.conv2.weight, padding=1)
    short = x if blk.shortcut is None else F.conv2d(x, blk.shortcut.weight, stride=blk.shortcut.stride)
    return short + y


def _ref_bottleneck(x, blk, training):
    y = F.relu(_bn(F.conv2d(x, blk.reduce.conv.weight), blk.reduce.bn, training))
    y = F.relu(_bn(F.conv2d(y, blk.spatial.conv.weight, stride=blk.spatial.conv.stride, padding=1),
                   blk.spatial.bn, training))
    y = _bn(F.conv2d(y, blk.expand.conv.weight), blk.expand.bn, training)
    if blk.shortcut is not None:
        x = _bn(F.conv2d(x, blk.shortcut.conv.weight, stride=blk.shortcut.conv.stride), blk.shortcut.bn, training)
    return F.relu(x + y)


@pytest.mark.parametrize("training", [False, True])
def test_deterministic_wrn_matches_hand_written_reference_block_by_block(training):
    cfg = tiny(method="deterministic", width=2)
    model = build_vision_model(cfg)
    randomize_norms(model)
    model.train(training)
    images = torch.rand(3, 1, 8, 8)
    body = model.body
    x = (images - model.pixel_mean.view(1, -1, 1, 1)) / model.pixel_std.view(1, -1, 1, 1)
    got = body.stem(x)
    ref = F.conv2d(x, body.stem.weight, padding=1)
    assert torch.allclose(got, ref, atol=1e-5)
    shapes = []
    for blk in body.blocks:
        ref = _ref_wrn_block(got, blk, training)
        got = blk(got)
        assert torch.allclose(got, ref, atol=1e-5)
        shapes.append(tuple(got.shape[1:]))
    assert shapes == [(32, 8, 8), (64, 4, 4), (128, 2, 2)]
    ref_logits = F.linear(F.relu(_bn(got, body.norm, training)).mean((2, 3)), body.head.weight, body.head.bias)
    assert torch.allclose(model(images)[0], ref_logits, atol=1e-5)


@pytest.mark.slow
def test_deterministic_resnet50_matches_hand_written_reference_block_by_block():
    model = build_vision_model(VisionConfig(arch="resnet50", method="deterministic", num_classes=7))
    randomize_norms(model)
    model.eval()
    model.set_normalization([0.5, 0.4, 0.3], [0.2, 0.25, 0.3])
    images = torch.rand(2, 3, 32, 32)
    body = model.body
    x = (images - torch.tensor([0.5, 0.4, 0.3]).view(1, 3, 1, 1)) / torch.tensor([0.2, 0.25, 0.3]).view(1, 3, 1, 1)
    ref = F.max_pool2d(F.relu(_bn(F.conv2d(x, body.stem.conv.weight, stride=2, padding=3), body.stem.bn, False)),
                       3, 2, 1)
    got = F.max_pool2d(F.relu(body.stem(x)), 3, 2, 1)
    assert torch.allclose(got, ref, atol=1e-5)
    channels = []
    for blk in body.blocks:
        ref = _ref_bottleneck(got, blk, False)
        got = blk(got)
        assert torch.allclose(got, ref, atol=1e-4, rtol=1e-4)
        channels.append(got.shape[1])
    assert channels == [256] * 3 + [512] * 4 + [1024] * 6 + [2048] * 3
    assert got.shape[2:] == (1, 1)  # 32 / 32
    strides = [blk.spatial.conv.stride for blk in body.blocks if blk.shortcut is not None]
    assert strides == [(1, 1), (2, 2), (2, 2), (2, 2)]  # v1.5: the stride on the 3x3 conv
    ref_logits = F.linear(got.mean((2, 3)), body.head.weight, body.head.bias)
    with torch.no_grad():
        assert torch.allclose(model(images)[0], ref_logits, atol=1e-4)


# ---------------------------------------------------------------- members as deterministic networks


def load_member(det: VisionNet, model: VisionNet, k: int) -> VisionNet:
    """``det`` made member k's deterministic network: W∘(r_k s_kᵀ), member k's bias and BatchNorm."""
    mods = dict(model.named_modules())
    with torch.no_grad():
        for name, d in det.named_modules():
            m = mods[name]
            if isinstance(d, Conv2dDeterministic):
                assert isinstance(m, Conv2dRank1)
                d.weight.copy_(m.weight * m.r.mean[k].view(-1, 1, 1, 1) * m.s.mean[k].view(1, -1, 1, 1))
            elif isinstance(d, LinearDeterministic):
                assert isinstance(m, LinearRank1)
                d.weight.copy_(m.weight * m.r.mean[k].view(-1, 1) * m.s.mean[k].view(1, -1))
                d.bias.copy_(m.bias[k])
            elif isinstance(d, BatchNorm2d):
                idx = k if isinstance(m, MemberBatchNorm2d) else slice(None)
                for attr in ("weight", "bias", "running_mean", "running_var"):
                    getattr(d, attr).copy_(getattr(m, attr)[idx])
        det.pixel_mean.copy_(model.pixel_mean)
        det.pixel_std.copy_(model.pixel_std)
    return det.eval()


@pytest.mark.parametrize("arch, method, member_bn", [
    ("wrn", "rank1", False), ("wrn", "rank1", True), ("wrn", "batchensemble", False), ("wrn", "batchensemble", True),
    ("resnet50", "rank1", True), ("resnet50", "batchensemble", False),
])
@pytest.mark.slow
def test_member_k_is_the_deterministic_network_with_scaled_weights(arch, method, member_bn):
    if arch == "wrn":
        cfg, images = tiny(method=method, member_batchnorm=member_bn), torch.rand(4, 1, 8, 8)
    else:
        cfg = VisionConfig(arch="resnet50", method=method, ensemble_size=2, num_classes=6,
                           member_batchnorm=member_bn)
        images = torch.rand(2, 3, 32, 32)
    model = build_vision_model(cfg)
    randomize_norms(model)
    with torch.no_grad():
        for vec in (m for m in model.modules() if isinstance(m, Rank1Vector)):
            vec.mean.normal_(1.0, 0.5)  # well away from ±1 so every factor matters
            if vec.rho is not None:
                vec.rho.fill_(-math.inf)  # zero posterior stddev: softplus(-inf) = 0
        for m in model.modules():
            if isinstance(m, LinearRank1):
                m.bias.normal_()
    model.set_normalization([0.3] * cfg.in_channels, [0.7] * cfg.in_channels)
    model.eval()  # running statistics: members are independent (training BN pools the tiled batch)
    set_sampling(model, Sampling.PER_EXAMPLE)  # draws, not means: zero stddev makes them the means
    det = VisionNet(dataclasses.replace(cfg, method="deterministic", member_batchnorm=False))
    with torch.no_grad():
        logits = model(images, samples=2).view(2, cfg.ensemble_size, images.shape[0], cfg.num_classes)
        for k in range(cfg.ensemble_size):
            ref = load_member(det, model, k)(images)[0]
            for s in range(2):
                # float32 through ResNet-50: a tolerance relative to the logits' scale (up to 1e4 here)
                tol = max(2e-4, 1e-5 * ref.abs().max().item())
                assert torch.allclose(logits[s, k], ref, atol=tol, rtol=1e-4), (k, s)


# ---------------------------------------------------------------- per-member BatchNorm


@pytest.mark.parametrize("samples", [1, 2])
def test_member_batchnorm_is_k_separate_batchnorms(samples):
    k, c, b = 3, 4, 5
    mbn = MemberBatchNorm2d(c, k)
    with torch.no_grad():
        mbn.weight.uniform_(0.5, 1.5)
        mbn.bias.uniform_(-1, 1)
    refs = [nn.BatchNorm2d(c) for _ in range(k)]
    for j, r in enumerate(refs):
        with torch.no_grad():
            r.weight.copy_(mbn.weight[j])
            r.bias.copy_(mbn.bias[j])
    for _ in range(2):  # two training steps: running statistics too
        x = torch.randn(samples * k * b, c, 3, 3) * 2 + 1
        y = mbn(x, samples).view(samples, k, b, c, 3, 3)
        xv = x.view(samples, k, b, c, 3, 3)
        for j, r in enumerate(refs):
            ref = r(xv[:, j].reshape(samples * b, c, 3, 3)).view(samples, b, c, 3, 3)
            assert torch.allclose(y[:, j], ref, atol=1e-5)
    for j, r in enumerate(refs):
        assert torch.allclose(mbn.running_mean[j], r.running_mean, atol=1e-6)
        assert torch.allclose(mbn.running_var[j], r.running_var, atol=1e-6)
    mbn.eval()
    x = torch.randn(samples * k * b, c, 3, 3)
    y = mbn(x, samples).view(samples, k, b, c, 3, 3)
    ref = refs[1].eval()(x.view(samples, k, b, c, 3, 3)[:, 1].reshape(-1, c, 3, 3))
    assert torch.allclose(y[:, 1], ref.view(samples, b, c, 3, 3), atol=1e-5)
    with pytest.raises(ValueError, match="samples\\*components\\*B"):
        mbn(torch.randn(7, c, 3, 3), 1)


# ---------------------------------------------------------------- KL, L2, configuration


def test_kl_and_l2_by_method():
    for method in METHODS:
        model = build_vision_model(tiny(method=method))
        kl = model.kl()
        assert (kl > 0) if method == "rank1" else (kl == 0), method
    model = build_vision_model(tiny(method="rank1"))
    randomize_norms(model)
    kernels = sum(m.weight.pow(2).sum() for m in model.modules() if isinstance(m, (Conv2dRank1, LinearRank1)))
    extra = sum(p.pow(2).sum() for m in model.modules() if isinstance(m, nn.BatchNorm2d) for p in (m.weight, m.bias))
    extra = extra + model.body.head.bias.pow(2).sum()
    assert torch.allclose(model.l2_penalty(), kernels + extra)
    model.cfg.l2_norm_and_bias = False
    assert torch.allclose(model.l2_penalty(), kernels)


# ---------------------------------------------------------------- ghost BatchNorm (bn_rows)


@pytest.mark.parametrize("member", [False, True])
@pytest.mark.parametrize("samples", [1, 2])
def test_ghost_batchnorm_over_64_row_groups_equals_64_row_batches_one_at_a_time(member, samples):
    """A tiled batch of 4 x 64 rows (S·K blocks of B images) normalised in ghost batches of 64 rows equals
    each 64-row device batch (B / 4 images of every block) normalised alone; the running statistics move by
    the mean of the devices' updates."""
    k, c, groups = 4, 3, 4
    rb = 64 // (samples * k)  # images per block on one device
    n = samples * k * rb * groups
    def make(rows):
        return MemberBatchNorm2d(c, k, rows=rows) if member else BatchNorm2d(c, tile=k, rows=rows)
    ghost, device = make(64), make(None)
    with torch.no_grad():
        ghost.weight.uniform_(0.5, 1.5)
        ghost.bias.uniform_(-1, 1)
    device.load_state_dict(ghost.state_dict())
    x = torch.randn(n, c, 3, 3) * 2 + 1
    y = ghost(x, samples).view(samples, k, groups, rb, c, 3, 3)
    xv = x.view(samples, k, groups, rb, c, 3, 3)
    start = {name: b.clone() for name, b in device.named_buffers()}
    means, variances = [], []
    for g in range(groups):
        for name, b in device.named_buffers():
            b.copy_(start[name])  # every device starts from the same running statistics
        part = xv[:, :, g].reshape(samples * k * rb, c, 3, 3)  # one device's 64 tiled rows
        ref = device(part, samples).view(samples, k, rb, c, 3, 3)
        assert torch.allclose(y[:, :, g], ref, atol=1e-5)
        means.append(device.running_mean.clone())
        variances.append(device.running_var.clone())
    assert torch.allclose(ghost.running_mean, torch.stack(means).mean(0), atol=1e-6)
    assert torch.allclose(ghost.running_var, torch.stack(variances).mean(0), atol=1e-6)
    assert not torch.allclose(ghost(x, samples), device(x, samples))  # the whole batch normalised at once differs
    device.load_state_dict(ghost.state_dict())
    ghost.eval(), device.eval()
    assert torch.equal(ghost(x, samples), device(x, samples))  # evaluation: running statistics, no groups


def test_ghost_batchnorm_in_a_network_equals_device_batches():
    """A deterministic WRN trained on 256 images with bn_rows 64 gives, in training mode, the logits of four
    64-image batches one at a time."""
    torch.manual_seed(0)
    model = build_vision_model(tiny(method="deterministic", bn_rows=64)).train()
    x = torch.rand(256, 1, 8, 8)
    whole = model(x)  # (1, 256, classes)
    parts = torch.cat([model(x[i:i + 64]) for i in range(0, 256, 64)], dim=1)
    assert torch.allclose(whole, parts, atol=1e-5)
    one = build_vision_model(tiny(method="deterministic", bn_rows=None)).train()
    one.load_state_dict(model.state_dict())
    assert not torch.allclose(one(x), whole, atol=1e-3)
    with pytest.raises(ValueError, match="bn_rows 64"):
        build_vision_model(tiny(method="rank1", bn_rows=64)).train()(torch.rand(66, 1, 8, 8))  # 3 x 22 rows


def test_batchensemble_fast_weights_start_n_1_05_under_the_ub_recipe():
    """uncertainty-baselines' BatchEnsemble (random_sign_init -0.5): fast weights N(1, 0.5²); rank-1 keeps
    random signs."""
    torch.manual_seed(0)
    cfg = tiny(method="batchensemble", width=4)
    assert cfg.factor_init.value == "normal" and cfg.init_mean_stddev == 0.5 and cfg.prior_mean == 1.0
    values = torch.cat([m.mean.detach().flatten() for m in build_vision_model(cfg).modules()
                        if isinstance(m, Rank1Vector)])
    assert values.numel() > 2000
    assert values.mean().item() == pytest.approx(1.0, abs=0.05) and values.std().item() == pytest.approx(0.5, rel=0.05)
    assert tiny(method="rank1").factor_init.value == "random_sign"
    assert tiny(method="batchensemble", factor_init="random_sign").factor_init.value == "random_sign"


def test_published_defaults_by_architecture():
    wrn, rn = VisionConfig(arch="wrn"), VisionConfig(arch="resnet50")
    assert (wrn.prior_stddev, wrn.random_sign_prob) == (0.1, 0.5)
    assert (rn.prior_stddev, rn.random_sign_prob) == (0.05, 0.75)
    assert math.isclose(wrn.init_stddev, math.sqrt(1e-3 / (1 - 1e-3)))
    r1 = wrn.rank1()
    assert (r1.prior_mean, r1.prior_scale, r1.clip, r1.mean_init.value) == (1.0, 0.1, 10.0, "random_sign")
    vec = next(m for m in build_vision_model(tiny(method="rank1")).modules() if isinstance(m, Rank1Vector))
    assert set(vec.mean.unique().tolist()) == {-1.0, 1.0}
    assert torch.allclose(F.softplus(vec.rho), torch.tensor(wrn.init_stddev))
    cauchy = next(m for m in build_vision_model(tiny(method="rank1", prior="cauchy")).modules()
                  if isinstance(m, Rank1Vector))  # the scale whose clipped draws spread as the Normal's
    assert torch.allclose(F.softplus(cauchy.rho), torch.tensor(tiny(prior="cauchy").rank1().initial_scale()))
    assert 7e-5 < tiny(prior="cauchy").rank1().initial_scale() < 9e-5
    assert tiny(prior="cauchy", init_scale=3.2e-4).rank1().initial_scale() == 3.2e-4
    assert VisionConfig(arch="resnet50", prior_stddev=0.2).prior_stddev == 0.2  # explicit values win


@pytest.mark.parametrize("kw, match", [
    ({"depth": 12}, "6n \\+ 4"), ({"dropout_rate": 1.0}, "^dropout_rate must"),
    ({"method": "mc-dropout"}, "mc-dropout"),
    ({"ensemble_size": 0}, "^ensemble_size must"),
    ({"factor_init": "random_sign", "perturbation": "additive"}, "random_sign"),
    ({"clip": 0.0}, "clip"),
])
def test_config_errors(kw, match):
    with pytest.raises(ValueError, match=match):
        VisionConfig(**kw)


def test_bad_images_and_normalization():
    model = build_vision_model(tiny(method="deterministic"))
    with pytest.raises(ValueError, match="\\(B, 1, H, W\\)"):
        model(torch.rand(2, 3, 8, 8))
    with pytest.raises(ValueError, match="floating point"):
        model(torch.zeros(2, 1, 8, 8, dtype=torch.uint8))
    with pytest.raises(ValueError, match="positive stds"):
        model.set_normalization([0.5], [0.0])
    model.eval()
    x = torch.rand(2, 1, 8, 8)
    with torch.no_grad():
        before = model(x)
        model.set_normalization([0.5], [2.0])
        assert torch.allclose(model(x), model.body((x - 0.5) / 2.0).unsqueeze(0), atol=1e-6)
        assert not torch.allclose(before, model(x))


def test_posterior_family_follows_the_prior_unless_given():
    def vector(**kw):
        return next(m for m in build_vision_model(tiny(method="rank1", **kw)).modules() if isinstance(m, Rank1Vector))

    assert vector(prior="cauchy").config.posterior.value == "cauchy"
    q = vector(prior="cauchy", posterior="normal")
    assert q.config.posterior.value == "normal" and q.config.prior.value == "cauchy"
    assert torch.isfinite(q.kl()) and q.kl() > 0  # Monte Carlo KL of a normal against a Cauchy
    assert vector().config.posterior.value == "normal"
    with pytest.raises(ValueError, match="batchensemble"):
        VisionConfig(posterior="delta")
