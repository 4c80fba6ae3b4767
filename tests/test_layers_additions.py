"""Additions to the layer library made for the image models: clamped factor draws, Conv2dDeterministic."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from pipeline.layers import Conv2dDeterministic, Rank1Config, Rank1Vector, Sampling


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
