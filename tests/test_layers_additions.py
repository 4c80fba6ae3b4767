"""Additions to the layer library made for the image models: clamped factor draws, Conv2dDeterministic."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from pipeline.bayes.layers import Conv2dDeterministic, Rank1Config, Rank1Vector, Sampling
from pipeline.bayes.layers.priors import clipped_sd


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def test_rank1_clip_clamps_draws_not_means():
    cfg = Rank1Config(prior="cauchy", init="normal", init_stddev=5.0, clip=2.0)
    vec = Rank1Vector(2, 500, cfg)
    with torch.no_grad():
        vec.mean[0].fill_(3.0)
    for mode in (Sampling.PER_EXAMPLE, Sampling.PER_MEMBER):
        d = vec.draw(2 * 4, 1, mode, use_mean=False).value
        assert d.abs().max() <= 2.0 and (d.abs() == 2.0).any()
    assert vec.draw(8, 1, Sampling.PER_EXAMPLE, use_mean=True).value.max() == 3.0
    unclipped = Rank1Vector(2, 500, Rank1Config(prior="cauchy", init="normal", init_stddev=5.0))
    assert unclipped.draw(8, 1, Sampling.PER_EXAMPLE, use_mean=False).value.abs().max() > 2.0
    with pytest.raises(ValueError, match="clip"):
        Rank1Config(clip=-1.0)


def test_conv2d_deterministic_is_conv2d_with_the_family_signature():
    layer = Conv2dDeterministic(2, 3, 3, padding=1, bias=False)
    x = torch.randn(4, 2, 5, 5)
    assert torch.equal(layer(x, samples=2), F.conv2d(x, layer.weight, padding=1))
    assert layer.components == 1 and isinstance(layer, nn.Conv2d)


@pytest.mark.parametrize("clip, init", [(10.0, "random_sign"), (10.0, "normal"), (3.0, "random_sign")])
def test_cauchy_and_normal_initial_draws_spread_alike(clip, init):
    """The initial scale is set per family: the sd of the clipped draws around their means (measured on
    4M draws) agrees within 20% between a Cauchy and a Normal posterior given the same init_stddev."""
    stddev = math.sqrt(1e-3 / (1 - 1e-3))  # the image models' dropout-rate rule: 0.0316
    spread = {}
    for prior in ("gaussian", "cauchy"):
        torch.manual_seed(0)
        vec = Rank1Vector(4, 1000, Rank1Config(prior=prior, init=init, init_stddev=stddev, clip=clip))
        draws = vec.draw(4 * 1000, 1, Sampling.PER_EXAMPLE, use_mean=False).value.double()  # (4·1000 rows, 1000)
        means = vec.mean.detach().double().repeat_interleave(1000, 0)  # (4·1000, 1000): each row's component
        spread[prior] = (draws - means).std().item()
    assert spread["gaussian"] == pytest.approx(stddev, rel=0.02)
    assert spread["cauchy"] == pytest.approx(spread["gaussian"], rel=0.2)
    # the scale the rule replaces: init_stddev taken as the Cauchy's scale spreads the draws 20x wider
    assert clipped_sd("cauchy", 1.0, stddev, clip) > 5 * stddev


def test_initial_scale_per_family():
    normal = Rank1Config(init_stddev=0.0316, clip=10.0)
    cauchy = Rank1Config(prior="cauchy", init_stddev=0.0316, clip=10.0)
    assert normal.initial_scale() == 0.0316
    assert clipped_sd("cauchy", 1.0, cauchy.initial_scale(), 10.0) == pytest.approx(0.0316, rel=1e-6)
    assert 7e-5 < cauchy.initial_scale() < 9e-5
    # unclipped (a Cauchy has no sd): the Normal's interquartile range, 0.6745 stddevs
    assert Rank1Config(prior="cauchy", init_stddev=1e-3).initial_scale() == pytest.approx(6.744897501960817e-4)
    assert Rank1Config(prior="cauchy", init_scale=3.2e-4, clip=10.0).initial_scale() == 3.2e-4  # as given
    vec = Rank1Vector(2, 3, cauchy)
    assert torch.allclose(vec.scale(), torch.full((2, 3), cauchy.initial_scale()), rtol=1e-4)
    with pytest.raises(ValueError, match="init_scale"):
        Rank1Config(init_scale=0.0)
