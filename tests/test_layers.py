"""Layer family (non-recurrent parts): layout helpers, factors, KL, dense, conv, embeddings."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.distributions import Cauchy, Normal
from torch.distributions import kl_divergence as torch_kl
from torch.nn import functional as F

from pipeline.bayes.layers import (
    Conv2dBatchEnsemble,
    Conv2dRank1,
    EmbeddingBagBayes,
    EmbeddingBagDeterministic,
    EmbeddingBayes,
    LinearBatchEnsemble,
    LinearDeterministic,
    LinearMeanField,
    LinearRank1,
    Rank1Config,
    Rank1Vector,
    Sampling,
    component_rows,
    expand_members,
    kl_divergence,
    l2_penalty,
    materialize,
    set_sampling,
    tile_members,
    untile,
)
from pipeline.bayes.layers.priors import kl_cauchy_cauchy, kl_elementwise, kl_normal_normal


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def unit_factors(layer: nn.Module, zero_scale: bool) -> None:
    """Set every rank-1 factor to mean 1 and (optionally) exactly zero posterior scale."""
    with torch.no_grad():
        for m in layer.modules():
            if isinstance(m, Rank1Vector):
                m.mean.fill_(1.0)
                if zero_scale and m.rho is not None:
                    m.rho.fill_(-math.inf)  # softplus(-inf) = 0


def random_factors(layer: nn.Module) -> None:
    with torch.no_grad():
        for m in layer.modules():
            if isinstance(m, Rank1Vector):
                m.mean.normal_(1.0, 0.5)


# ---------------------------------------------------------------- member-major layout
def test_tile_untile_round_trip():
    x = torch.arange(6.0).view(3, 2)
    t = tile_members(x, 4)
    assert t.shape == (12, 2)
    assert torch.equal(untile(t, 4), x.expand(4, 3, 2))
    with pytest.raises(ValueError, match="not a multiple"):
        untile(torch.zeros(5, 2), 2)


def test_expand_members_is_sample_major_then_member_major():
    b, s, k = 3, 2, 4
    per_sample = torch.arange(s * b).float().view(s * b, 1)  # sample 0 rows 0..2, sample 1 rows 3..5
    out = expand_members(per_sample, s, k, b).view(s, k, b)
    for si in range(s):
        for ki in range(k):
            assert torch.equal(out[si, ki], per_sample[si * b:(si + 1) * b, 0])
    shared = expand_members(torch.arange(b).float(), s, k, b).view(s, k, b)
    assert torch.equal(shared, torch.arange(b).float().expand(s, k, b))


def test_component_rows_assigns_block_j_to_component_j_mod_k():
    k, s, b = 3, 2, 2
    param = torch.arange(k).float().view(k, 1)
    rows = component_rows(param, s * k * b, s).view(s, k, b)
    assert torch.equal(rows, torch.arange(k).float().view(1, k, 1).expand(s, k, b))
    with pytest.raises(ValueError, match="samples\\*components\\*B"):
        component_rows(param, 7, 1)


# ---------------------------------------------------------------- factors
@pytest.mark.parametrize("posterior", ["normal", "cauchy"])
def test_factor_draw_layout_and_moments(posterior):
    k, n, s, b = 2, 3, 2, 4000
    cfg = Rank1Config(prior="gaussian" if posterior == "normal" else "cauchy", init="normal", init_stddev=0.3)
    vec = Rank1Vector(k, n, cfg)
    with torch.no_grad():
        vec.mean.copy_(torch.tensor([[5.0], [-5.0]]).expand(k, n))
    d = vec.draw(s * k * b, s, Sampling.PER_EXAMPLE, use_mean=False)
    assert not d.per_block and d.value.shape == (s * k * b, n)
    v = d.value.view(s, k, b, n)
    med = v.median(dim=2).values  # (S, K, n): robust location for both families
    assert torch.allclose(med[:, 0], torch.tensor(5.0), atol=0.05)
    assert torch.allclose(med[:, 1], torch.tensor(-5.0), atol=0.05)
    spread = (v - med.unsqueeze(2)).abs().median(dim=2).values  # MAD: 0.6745 σ (normal), γ (cauchy)
    expected = 0.3 * 0.6745  # unclipped, the Cauchy's initial scale is the Normal's MAD (Rank1Config.initial_scale)
    assert torch.allclose(spread, torch.tensor(expected), rtol=0.1)
    assert len(torch.unique(v[0, 0, :, 0])) > 0.99 * b  # independent per row (float32 ties aside)
    blocks = vec.draw(s * k * b, s, Sampling.PER_MEMBER, use_mean=False)
    assert blocks.per_block and blocks.value.shape == (s * k, n)
    assert torch.equal(blocks.rows(s * k * b).view(s * k, b, n)[:, 0], blocks.value)


def test_random_sign_init_probability():
    vec = Rank1Vector(4, 5000, Rank1Config(init="random_sign", random_sign_prob=0.8))
    assert set(vec.mean.unique().tolist()) == {-1.0, 1.0}
    assert abs((vec.mean > 0).float().mean().item() - 0.8) < 0.02


def test_default_init_starts_variational_factors_near_the_prior():
    """Variational factors start at N(prior mean, 0.5): no factor pays the KL of a -1 start
    under an N(1, 0.1) prior. BatchEnsemble (delta, no KL) keeps random signs."""
    vec = Rank1Vector(4, 5000, Rank1Config())
    assert vec.config.mean_init == "normal"
    assert abs(vec.mean.mean().item() - 1.0) < 0.02 and abs(vec.mean.std().item() - 0.5) < 0.02
    be = Rank1Vector(4, 5000, Rank1Config(posterior="delta"))
    assert set(be.mean.unique().tolist()) == {-1.0, 1.0}


@pytest.mark.parametrize("kind", ["batchensemble", "rank1"])
def test_model_factor_init_by_kind(kind):
    """Through the model builder: the BatchEnsemble layers (whose configs are copies of the
    rank-1 config with a delta posterior) start at random signs, rank-1 near the prior."""
    from pipeline.tasks.mortality import MortalityConfig, build_model

    model = build_model(kind, MortalityConfig(token_vocab=50, context_vocab=5, lstm_hidden=64))
    vectors = [m for m in model.modules() if isinstance(m, Rank1Vector)]
    assert len(vectors) >= 6  # LSTM input/recurrent r and s, dense and output layers
    for vec in vectors:
        values = set(vec.mean.unique().tolist())
        if kind == "batchensemble":
            assert values <= {-1.0, 1.0}, vec
        else:
            assert len(values) > 2, vec


def test_config_errors_are_clear():
    with pytest.raises(ValueError, match="random_sign"):
        Rank1Config(perturbation="additive", init="random_sign")
    with pytest.raises(ValueError):
        Rank1Config(prior="laplace")
    assert Rank1Config(perturbation="additive").prior_mean == 0.0
    assert Rank1Config(prior="cauchy").posterior.value == "cauchy"


# ---------------------------------------------------------------- KL
def test_kl_normal_matches_torch():
    vec = Rank1Vector(3, 7, Rank1Config(prior_scale=0.3, init="normal"))
    with torch.no_grad():
        vec.rho.normal_(-1.0, 0.5)
    ref = torch_kl(Normal(vec.mean, vec.scale()), Normal(torch.tensor(1.0), torch.tensor(0.3))).sum()
    assert torch.allclose(vec.kl(), ref, rtol=1e-5)
    mq, sq, mp, sp = torch.randn(20), torch.rand(20) + 0.1, torch.randn(20), torch.rand(20) + 0.1
    assert torch.allclose(kl_normal_normal(mq, sq, mp, sp), torch_kl(Normal(mq, sq), Normal(mp, sp)), atol=1e-5)


def _mc_reference(q, p, n=200_000):
    z = q.sample((n,))
    terms = q.log_prob(z) - p.log_prob(z)
    return terms.mean(0), terms.std(0) / math.sqrt(n)


def test_kl_cauchy_closed_form_within_mc_error():
    torch.manual_seed(1)
    mq, sq = torch.randn(6), torch.rand(6) + 0.2
    q, p = Cauchy(mq, sq), Cauchy(torch.full((6,), 1.0), torch.full((6,), 0.5))
    ref, se = _mc_reference(q, p)
    got = kl_cauchy_cauchy(mq, sq, 1.0, 0.5)
    assert torch.all((got - ref).abs() < 5 * se + 1e-4), (got, ref, se)


def test_kl_monte_carlo_normal_posterior_cauchy_prior_within_mc_error():
    torch.manual_seed(2)
    mq, sq = torch.randn(5), torch.rand(5) + 0.2
    ref, se = _mc_reference(Normal(mq, sq), Cauchy(torch.full((5,), 1.0), torch.full((5,), 0.5)))
    got = kl_elementwise("normal", mq, sq, "cauchy", 1.0, 0.5, mc_samples=20_000)
    se_got = se * math.sqrt(200_000 / 20_000)
    assert torch.all((got - ref).abs() < 5 * (se + se_got)), (got, ref)


def test_layer_kl_sums_factors_and_delta_has_none():
    cfg = Rank1Config(prior_scale=0.2, init="normal")
    lin = LinearRank1(4, 3, components=2, config=cfg)
    ref = sum(torch_kl(Normal(v.mean, v.scale()), Normal(torch.tensor(1.0), torch.tensor(0.2))).sum()
              for v in (lin.r, lin.s))
    assert torch.allclose(lin.kl(), ref, rtol=1e-5)
    be = LinearBatchEnsemble(4, 3, components=2)
    assert be.kl().item() == 0.0 and be.r.rho is None
    model = nn.Sequential(lin, be, LinearDeterministic(3, 3))
    assert torch.allclose(kl_divergence(model), ref, rtol=1e-5)


def test_meanfield_and_embedding_kl_match_torch():
    mf = LinearMeanField(4, 3)
    with torch.no_grad():
        mf.weight.rho.normal_(-2.0, 0.5)
    ref = torch_kl(Normal(mf.weight.mu, mf.weight.stddev()), Normal(torch.tensor(0.0), torch.tensor(1.0))).sum()
    assert torch.allclose(mf.kl(), ref, rtol=1e-5)
    emb = EmbeddingBayes(6, 3)
    ref = torch_kl(Normal(emb.mean[1:], F.softplus(emb.rho[1:])), Normal(torch.tensor(0.0), torch.tensor(1.0))).sum()
    assert torch.allclose(emb.kl(), ref, rtol=1e-5)


def test_l2_penalty_counts_deterministic_weights_only():
    lin = LinearRank1(4, 3, components=2)
    det = LinearDeterministic(3, 2)
    model = nn.Sequential(lin, det)
    expected = lin.weight.pow(2).sum() + det.weight.pow(2).sum()
    assert torch.allclose(l2_penalty(model), expected)


# ---------------------------------------------------------------- dense and conv
@pytest.mark.parametrize("mode", ["mean", "zero_scale_per_example", "zero_scale_per_member"])
def test_linear_rank1_k1_unit_factors_equals_linear(mode):
    lin = LinearRank1(5, 4, components=1)
    unit_factors(lin, zero_scale=True)
    set_sampling(lin, mode="per_member" if mode.endswith("member") else "per_example", use_mean=mode == "mean")
    ref = nn.Linear(5, 4)
    with torch.no_grad():
        ref.weight.copy_(lin.weight)
        ref.bias.copy_(lin.bias[0])
    x = torch.randn(6, 2, 5)
    assert torch.allclose(lin(x), ref(x), atol=1e-6)


@pytest.mark.parametrize("conv_args", [dict(), dict(stride=2, padding=1), dict(padding=2, dilation=2)])
@pytest.mark.parametrize("bias", [True, False])
def test_conv_rank1_k1_unit_factors_equals_conv2d(conv_args, bias):
    conv = Conv2dRank1(3, 4, 3, bias=bias, components=1, **conv_args)
    unit_factors(conv, zero_scale=True)
    ref = nn.Conv2d(3, 4, 3, bias=bias, **conv_args)
    with torch.no_grad():
        ref.weight.copy_(conv.weight)
        if bias:
            ref.bias.copy_(conv.bias[0])
    x = torch.randn(2, 3, 9, 9)
    assert torch.allclose(conv(x), ref(x), atol=1e-5)


@pytest.mark.parametrize("perturbation", ["multiplicative", "additive"])
@pytest.mark.parametrize("samples", [1, 2])
def test_linear_batchensemble_member_equals_materialised_linear(perturbation, samples):
    k, b = 3, 4
    layer = LinearBatchEnsemble(5, 4, components=k, config=Rank1Config(perturbation=perturbation, init="normal"))
    random_factors(layer)
    x = torch.randn(b, 5)
    y = layer(tile_members(x, samples * k), samples=samples).view(samples, k, b, 4)
    w = materialize(layer.weight, layer.r.mean, layer.s.mean, perturbation)  # (K, 4, 5)
    for s in range(samples):
        for j in range(k):
            assert torch.allclose(y[s, j], F.linear(x, w[j], layer.bias[j]), atol=1e-5)


@pytest.mark.parametrize("perturbation", ["multiplicative", "additive"])
def test_conv_batchensemble_member_equals_materialised_conv(perturbation):
    k, b = 2, 3
    layer = Conv2dBatchEnsemble(3, 4, 3, padding=1, components=k,
                                config=Rank1Config(perturbation=perturbation, init="normal"))
    random_factors(layer)
    x = torch.randn(b, 3, 6, 6)
    y = untile(layer(tile_members(x, k)), k)
    w = materialize(layer.weight, layer.r.mean, layer.s.mean, perturbation)  # (K, 4, 3, 3, 3)
    for j in range(k):
        assert torch.allclose(y[j], F.conv2d(x, w[j], layer.bias[j], padding=1), atol=1e-5)


@pytest.mark.parametrize("cls", [LinearRank1, Conv2dRank1])
def test_dense_conv_per_member_draws_match_loop_and_per_example_path(cls):
    k, s, b = 2, 2, 3
    if cls is LinearRank1:
        layer, x = LinearRank1(5, 4, components=k), torch.randn(b, 5)
        ref = lambda xx, w, bias: F.linear(xx, w, bias)  # noqa: E731
    else:
        layer, x = Conv2dRank1(3, 4, 3, components=k), torch.randn(b, 3, 5, 5)
        ref = lambda xx, w, bias: F.conv2d(xx, w, bias)  # noqa: E731
    with torch.no_grad():
        layer.r.rho.fill_(-1.0)
        layer.s.rho.fill_(-1.0)
    set_sampling(layer, "per_member")
    xt = tile_members(x, s * k)
    draws = layer.draw(xt.shape[0], s)
    y_member = layer.forward_with(xt, draws, s)
    set_sampling(layer, "per_example")
    y_example = layer.forward_with(xt, draws, s)
    assert torch.allclose(y_member, y_example)
    w = materialize(layer.weight, draws["r"].blocks(), draws["s"].blocks(), "multiplicative")
    for j in range(s * k):
        assert torch.allclose(y_member[j * b:(j + 1) * b], ref(x, w[j], layer.bias[j % k]), atol=1e-5)


@pytest.mark.parametrize("perturbation", ["multiplicative", "additive"])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_block_inference_equals_row_path(perturbation, bias):
    """Without autograd, per-block draws take the batched-kernel path: same values as the row path."""
    k, s, b = 3, 2, 4
    layer = LinearRank1(5, 4, components=k, bias=bias, config=Rank1Config(perturbation=perturbation, init="normal"))
    random_factors(layer)
    if bias:
        with torch.no_grad():
            layer.bias.normal_()
    set_sampling(layer, "per_member")
    x = torch.randn(s * k * b, 5)
    draws = layer.draw(x.shape[0], s)
    rows = layer.forward_with(x, draws, s)  # grad enabled: the per-row path
    with torch.no_grad():
        blocks = layer.forward_with(x, draws, s)
    assert torch.allclose(blocks, rows, atol=1e-5) and blocks.shape == (s * k * b, 4)
    with torch.no_grad(), pytest.raises(ValueError, match="do not split into 6 blocks"):
        layer.forward_with(x[:-1], draws, s)


def test_per_example_rows_differ_and_shapes_checked():
    layer = LinearRank1(4, 3, components=2)
    with torch.no_grad():
        layer.r.rho.fill_(0.0)
    x = tile_members(torch.randn(1, 4), 4)  # S=2, K=2, B=1 -> identical inputs
    y = layer(x, samples=2)
    assert len({round(v, 5) for v in y[:, 0].tolist()}) == 4
    with pytest.raises(ValueError, match="samples\\*components\\*B"):
        layer(torch.randn(3, 4))


def test_linear_meanfield_local_reparameterisation_moments():
    layer = LinearMeanField(3, 2)
    with torch.no_grad():
        layer.weight.rho.fill_(0.0)  # stddev softplus(0) = 0.69
    x = torch.tensor([[1.0, -2.0, 0.5]]).expand(20000, 3)
    y = layer(x)
    sd = layer.weight.stddev()
    assert torch.allclose(y.mean(0), F.linear(x[:1], layer.weight.mu, layer.bias)[0], atol=0.05)
    assert torch.allclose(y.var(0), (x[:1] ** 2) @ (sd ** 2).t(), rtol=0.05)
    set_sampling(layer, "per_member")
    y2 = layer(torch.randn(2 * 5, 3), samples=2)
    assert y2.shape == (10, 2)
    set_sampling(layer, use_mean=True)
    assert torch.allclose(layer(x[:2]), F.linear(x[:2], layer.weight.mu, layer.bias))


# ---------------------------------------------------------------- embeddings
@pytest.mark.parametrize("mode", ["mean", "sum", "attention"])
@pytest.mark.parametrize("bayes", [True, False])
def test_bag_embedding_mean_of_tokens_and_padding(mode, bayes):
    """mean / sum as named; attention starts with a zero query: the mean."""
    layer = EmbeddingBagBayes(10, 4, mode=mode) if bayes else EmbeddingBagDeterministic(10, 4, mode=mode)
    set_sampling(layer, use_mean=True)
    table = layer.mean if bayes else layer.embedding.weight
    ids = torch.tensor([[[1, 2, 0], [0, 0, 0]], [[3, 0, 0], [4, 5, 6]]])  # (N=2, T=2, L=3)
    out = layer(ids)
    assert out.shape == (2, 2, 4)
    red = (lambda t: t.sum(0)) if mode == "sum" else (lambda t: t.mean(0))
    assert torch.allclose(out[0, 0], red(table[[1, 2]]), atol=1e-6)
    assert torch.equal(out[0, 1], torch.zeros(4))  # empty bag
    assert torch.allclose(out[1, 1], red(table[[4, 5, 6]]), atol=1e-6)
    padded = F.pad(ids, (0, 2))  # extra padded tokens
    padded = torch.cat([padded, torch.zeros(2, 1, 5, dtype=ids.dtype)], 1)  # extra padded bag
    out_p = layer(padded)
    assert torch.allclose(out_p[:, :2], out, atol=1e-6)
    assert torch.equal(out_p[:, 2], torch.zeros(2, 4))
    assert layer(torch.zeros(2, 0, 3, dtype=torch.long)).shape == (2, 0, 4)
    assert layer(torch.zeros(2, 3, 0, dtype=torch.long)).abs().sum() == 0


@pytest.mark.parametrize("bayes", [True, False])
def test_attention_bag_weights_tokens_by_a_softmax_of_the_query(bayes):
    """A hand computation: weights softmax(q·e / sqrt(D)) over the bag's tokens; padding and
    all-padding bags contribute nothing and keep gradients finite; the query is an L2 weight."""
    from pipeline.bayes.layers.base import l2_penalty

    layer = EmbeddingBagBayes(10, 4, mode="attention") if bayes else EmbeddingBagDeterministic(10, 4, "attention")
    set_sampling(layer, use_mean=True)
    table = layer.mean if bayes else layer.embedding.weight
    with torch.no_grad():
        layer.query.copy_(torch.tensor([1.5, -2.0, 0.5, 3.0]))
    ids = torch.tensor([[[1, 2, 0], [0, 0, 0]], [[3, 0, 0], [4, 5, 6]]])  # (N=2, T=2, L=3)
    out = layer(ids)
    for (n, t), toks in {(0, 0): [1, 2], (1, 0): [3], (1, 1): [4, 5, 6]}.items():
        e = table[toks]  # (l, D)
        w = torch.softmax(e @ layer.query / 2.0, 0)  # sqrt(D) = 2
        torch.testing.assert_close(out[n, t], (w.unsqueeze(1) * e).sum(0))
    assert torch.equal(out[0, 1], torch.zeros(4))
    assert not torch.allclose(out[1, 1], table[[4, 5, 6]].mean(0))  # not the mean any more
    out.sum().backward()
    assert torch.isfinite(layer.query.grad).all() and layer.query.grad.abs().sum() > 0
    penalty = l2_penalty(layer)
    expected = layer.query.pow(2).sum() + (0 if bayes else table.pow(2).sum())
    torch.testing.assert_close(penalty, expected)
    assert EmbeddingBagBayes(10, 4).query is None and EmbeddingBagDeterministic(10, 4).query is None


@pytest.mark.parametrize("sampling", ["per_example", "per_member"])
def test_embedding_noise_shared_per_token_within_row_or_block(sampling):
    layer = EmbeddingBayes(8, 3)
    with torch.no_grad():
        layer.rho.fill_(0.0)
    set_sampling(layer, sampling)
    ids = torch.tensor([[5, 2, 5, 0], [5, 5, 0, 0], [5, 3, 0, 0], [5, 0, 0, 0]])  # N = S·B with S=2, B=2
    out = layer(ids, samples=2)
    assert torch.equal(out[0, 0], out[0, 2])  # same token, same row: one draw
    assert torch.equal(out[0, 3], torch.zeros(3))  # padding
    same_block = torch.equal(out[0, 0], out[1, 0])
    assert same_block == (sampling == "per_member")
    assert not torch.equal(out[0, 0], out[2, 0])  # different sample block
    bag = EmbeddingBagBayes(8, 3)
    with torch.no_grad():
        bag.rho.fill_(0.0)
    set_sampling(bag, sampling)
    bags = torch.tensor([[[5, 0], [5, 0]], [[5, 0], [2, 0]]])  # token 5 in two bags of row 0
    out = bag(bags, samples=1 if sampling == "per_example" else 2)
    assert torch.equal(out[0, 0], out[0, 1])


def test_embedding_padding_tokens_do_not_change_sampled_outputs():
    layer = EmbeddingBagBayes(9, 3)
    with torch.no_grad():
        layer.rho.fill_(0.0)
    ids = torch.tensor([[[1, 2, 0], [3, 0, 0]], [[4, 0, 0], [0, 0, 0]]])
    torch.manual_seed(5)
    out = layer(ids)
    torch.manual_seed(5)
    out_p = layer(torch.cat([F.pad(ids, (0, 3)), torch.zeros(2, 2, 6, dtype=ids.dtype)], 1))
    assert torch.allclose(out_p[:, :2], out, atol=1e-6)
    assert torch.equal(out_p[:, 2:], torch.zeros(2, 2, 3))


def test_embedding_rejects_out_of_range_ids():
    with pytest.raises(ValueError, match="\\[0, 4\\)"):
        EmbeddingBayes(4, 2)(torch.tensor([[1, 4]]))
