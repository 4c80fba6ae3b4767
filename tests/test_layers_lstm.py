"""Recurrent members of the layer family against nn.LSTM on packed variable-length input."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from pipeline.layers import (LSTMBatchEnsemble, LSTMDeterministic, LSTMMeanField, LSTMRank1, Rank1Config,
                             Rank1Vector, set_sampling, tile_members)
from pipeline.layers.factors import materialize

D, H = 3, 5


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny tensors: one intra-op thread avoids OpenMP sync stalls on a shared CPU."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def reference(x, lengths, layers):
    """nn.LSTM with given per-layer (w_ih, w_hh, bias) on packed input; zeros for length-0 rows."""
    lstm = nn.LSTM(D, H, len(layers), batch_first=True)
    with torch.no_grad():
        for l, (w_ih, w_hh, b) in enumerate(layers):
            getattr(lstm, f"weight_ih_l{l}").copy_(w_ih)
            getattr(lstm, f"weight_hh_l{l}").copy_(w_hh)
            getattr(lstm, f"bias_ih_l{l}").copy_(b)
            getattr(lstm, f"bias_hh_l{l}").zero_()
    n, t = x.shape[:2]
    out = torch.zeros(n, t, H)
    h_n, c_n = torch.zeros(len(layers), n, H), torch.zeros(len(layers), n, H)
    real = lengths > 0
    if real.any():
        packed = pack_padded_sequence(x[real], lengths[real], batch_first=True, enforce_sorted=False)
        o, (h, c) = lstm(packed)
        out[real] = pad_packed_sequence(o, batch_first=True, total_length=t)[0]
        h_n[:, real], c_n[:, real] = h, c
    return out, h_n, c_n


def assert_same(got, ref, atol=1e-5):
    out, (h, c) = got
    assert torch.allclose(out, ref[0], atol=atol)
    assert torch.allclose(h, ref[1], atol=atol)
    assert torch.allclose(c, ref[2], atol=atol)


def sequences(n, t, full):
    x = torch.randn(n, t, D)
    lengths = torch.full((n,), t) if full else torch.randint(0, t + 1, (n,))
    if not full:
        lengths[0] = t  # the longest row defines T
    return x, lengths


def layer_weights(lstm):
    """Per-layer (w_ih, w_hh, bias of component 0) of a rank-1 LSTM."""
    return [(lstm.weight_ih[l], lstm.weight_hh[l], lstm.bias[l][0]) for l in range(lstm.num_layers)]


@pytest.mark.parametrize("num_layers", [1, 2])
@pytest.mark.parametrize("full", [True, False])
@pytest.mark.parametrize("sampling", ["per_example", "per_member"])
@pytest.mark.parametrize("use_mean", [True, False])
def test_rank1_k1_unit_factors_equals_nn_lstm(num_layers, full, sampling, use_mean):
    lstm = LSTMRank1(D, H, num_layers, components=1)
    with torch.no_grad():
        for m in lstm.modules():
            if isinstance(m, Rank1Vector):
                m.mean.fill_(1.0)
                m.rho.fill_(-math.inf)  # zero posterior stddev
    set_sampling(lstm, sampling, use_mean)
    x, lengths = sequences(6, 7, full)
    assert_same(lstm(x, lengths), reference(x, lengths, layer_weights(lstm)))


@pytest.mark.parametrize("perturbation", ["multiplicative", "additive"])
@pytest.mark.parametrize("sampling", ["per_example", "per_member"])
@pytest.mark.parametrize("samples", [1, 2])
def test_batchensemble_member_equals_nn_lstm_with_materialised_weights(perturbation, sampling, samples):
    k, b = 3, 4
    lstm = LSTMBatchEnsemble(D, H, 2, components=k, config=Rank1Config(perturbation=perturbation, init="normal"))
    with torch.no_grad():
        for m in lstm.modules():
            if isinstance(m, Rank1Vector):
                m.mean.normal_(m.config.prior_mean, 0.5)
    set_sampling(lstm, sampling)
    x, lengths = sequences(b, 6, full=False)
    out, (h, c) = lstm(tile_members(x, samples * k), tile_members(lengths, samples * k), samples=samples)
    for j in range(samples * k):
        comp = j % k
        layers = []
        for l, f in enumerate(lstm.factors):
            w_ih = materialize(lstm.weight_ih[l], f["r_ih"].mean[comp:comp + 1], f["s_ih"].mean[comp:comp + 1],
                               perturbation)[0]
            w_hh = materialize(lstm.weight_hh[l], f["r_hh"].mean[comp:comp + 1], f["s_hh"].mean[comp:comp + 1],
                               perturbation)[0]
            layers.append((w_ih, w_hh, lstm.bias[l][comp]))
        rows = slice(j * b, (j + 1) * b)
        assert_same((out[rows], (h[:, rows], c[:, rows])), reference(x, lengths, layers))


@pytest.mark.parametrize("perturbation", ["multiplicative", "additive"])
def test_rank1_same_draws_agree_across_paths_and_match_member_loop(perturbation):
    k, s, b = 2, 2, 3
    cfg = Rank1Config(perturbation=perturbation, init_stddev=0.2, init="normal")
    lstm = LSTMRank1(D, H, 2, components=k, config=cfg)
    x, lengths = sequences(b, 5, full=False)
    xt, lt = tile_members(x, s * k), tile_members(lengths, s * k)
    set_sampling(lstm, "per_member")
    draws = lstm.draw(xt.shape[0], s)
    fused = lstm.forward_with(xt, lt, draws, s)
    set_sampling(lstm, "per_example")
    looped = lstm.forward_with(xt, lt, draws, s)
    assert_same(looped, (fused[0], *fused[1]))
    weights = lstm.block_weights(draws)
    for j in range(s * k):
        layers = [(weights[j][4 * l], weights[j][4 * l + 1], weights[j][4 * l + 2]) for l in range(2)]
        rows = slice(j * b, (j + 1) * b)
        assert_same((fused[0][rows], (fused[1][0][:, rows], fused[1][1][:, rows])), reference(x, lengths, layers))


def test_rank1_gradients_agree_across_paths():
    lstm = LSTMRank1(D, H, 2, components=2, config=Rank1Config(init_stddev=0.2))
    x, lengths = sequences(3, 5, full=False)
    xt, lt = tile_members(x, 2), tile_members(lengths, 2)
    set_sampling(lstm, "per_member")
    draws = lstm.draw(6, 1)
    grads = []
    for mode in ("per_member", "per_example"):
        set_sampling(lstm, mode)
        lstm.zero_grad()
        out, (h, c) = lstm.forward_with(xt, lt, draws, 1)
        (out.pow(2).sum() + h.sum() + c.sum()).backward(retain_graph=True)
        grads.append([p.grad.clone() for p in lstm.parameters()])
    for g_member, g_example in zip(*grads):
        assert torch.allclose(g_member, g_example, atol=1e-4)


@pytest.mark.parametrize("sampling", ["per_example", "per_member"])
def test_rank1_mean_mode_agrees_across_paths(sampling):
    lstm = LSTMRank1(D, H, 2, components=2)
    x, lengths = sequences(4, 6, full=False)
    set_sampling(lstm, "per_member", use_mean=True)
    ref = lstm(tile_members(x, 2), tile_members(lengths, 2))
    set_sampling(lstm, sampling)
    got = lstm(tile_members(x, 2), tile_members(lengths, 2))
    assert_same(got, (ref[0], *ref[1]))


def make(kind, sampling):
    if kind == "rank1":
        layer = LSTMRank1(D, H, 2, components=2, config=Rank1Config(init_stddev=0.3))
    elif kind == "batchensemble":
        layer = LSTMBatchEnsemble(D, H, 2, components=2)
    elif kind == "meanfield":
        layer = LSTMMeanField(D, H, 2)
        with torch.no_grad():
            for w in [*layer.weight_ih, *layer.weight_hh]:
                w.rho.fill_(-2.0)
    else:
        layer = LSTMDeterministic(D, H, 2)
    set_sampling(layer, sampling)
    return layer


@pytest.mark.parametrize("kind", ["rank1", "batchensemble", "meanfield", "deterministic"])
@pytest.mark.parametrize("sampling", ["per_example", "per_member"])
def test_padding_never_changes_real_steps(kind, sampling):
    layer = make(kind, sampling)
    k = getattr(layer, "components", 1)
    x, lengths = sequences(3, 4, full=False)
    lengths[1] = 0
    xt, lt = tile_members(x, k), tile_members(lengths, k)
    torch.manual_seed(3)
    out, (h, c) = layer(xt, lt)
    garbage = torch.randn(xt.shape[0], 3, D) * 10  # extra padded steps with junk inputs
    xp = torch.cat([xt, garbage], 1)
    for row, n in enumerate(lt.tolist()):
        xp[row, n:] = torch.randn(xp.shape[1] - n, D) * 10  # junk inside existing padding too
    torch.manual_seed(3)
    out_p, (h_p, c_p) = layer(xp, lt)
    mask = (torch.arange(4).unsqueeze(0) < lt.unsqueeze(1)).unsqueeze(2)
    assert torch.allclose(out_p[:, :4] * mask, out * mask, atol=1e-5)
    assert torch.equal(out_p[:, 4:], torch.zeros_like(out_p[:, 4:]))
    assert torch.allclose(h_p, h, atol=1e-5) and torch.allclose(c_p, c, atol=1e-5)
    zero_rows = lt == 0
    assert torch.equal(h[:, zero_rows], torch.zeros_like(h[:, zero_rows]))
    assert torch.equal(out[zero_rows], torch.zeros_like(out[zero_rows]))


@pytest.mark.parametrize("kind", ["rank1", "batchensemble", "meanfield", "deterministic"])
@pytest.mark.parametrize("sampling", ["per_example", "per_member"])
def test_empty_time_axis(kind, sampling):
    layer = make(kind, sampling)
    k = getattr(layer, "components", 1)
    out, (h, c) = layer(torch.zeros(2 * k, 0, D), torch.zeros(2 * k, dtype=torch.long))
    assert out.shape == (2 * k, 0, H) and h.shape == (2, 2 * k, H)
    assert h.abs().sum() == 0 and c.abs().sum() == 0


def test_meanfield_paths_against_nn_lstm():
    layer = LSTMMeanField(D, H, 2)
    x, lengths = sequences(4, 5, full=False)
    set_sampling(layer, use_mean=True)
    mu = [(layer.weight_ih[l].mu, layer.weight_hh[l].mu, layer.bias[l]) for l in range(2)]
    assert_same(layer(x, lengths), reference(x, lengths, mu))
    # per-row recurrence (bmm) with every row given the same sampled weights == fused kernel
    sampled = [(layer.weight_ih[l].sample(1), layer.weight_hh[l].sample(1)) for l in range(2)]
    rows = [(w_ih.expand(4, -1, -1), w_hh.expand(4, -1, -1)) for w_ih, w_hh in sampled]
    got = layer._per_example(x, lengths, rows)
    ref = reference(x, lengths, [(w_ih[0], w_hh[0], layer.bias[l]) for l, (w_ih, w_hh) in enumerate(sampled)])
    assert_same(got, ref)


def test_deterministic_lstm_matches_nn_lstm_and_checks_input():
    layer = LSTMDeterministic(D, H, 2)
    x, lengths = sequences(5, 6, full=False)
    layers = [(getattr(layer, f"weight_ih_l{l}"), getattr(layer, f"weight_hh_l{l}"),
               getattr(layer, f"bias_ih_l{l}") + getattr(layer, f"bias_hh_l{l}")) for l in range(2)]
    assert_same(layer(x, lengths), reference(x, lengths, layers))
    with pytest.raises(ValueError, match="lengths must lie in"):
        layer(x, torch.full((5,), 7))
    with pytest.raises(ValueError, match=r"\(N, T, 3\)"):
        layer(torch.zeros(5, 6, 4), lengths)


@pytest.mark.parametrize("grad_outputs", ["hidden", "both"])
def test_rank1_recurrence_gradcheck_against_autograd_loop(grad_outputs):
    from pipeline.layers.recurrence import rank1_recurrence, run_recurrence

    t, n, h = 4, 3, 2
    xp = torch.randn(t, n, 4 * h, dtype=torch.double, requires_grad=True)
    s = torch.randn(n, h, dtype=torch.double, requires_grad=True)
    r = torch.randn(n, 4 * h, dtype=torch.double, requires_grad=True)
    w_t = torch.randn(h, 4 * h, dtype=torch.double, requires_grad=True)

    def fn(*args):
        hs, cs = rank1_recurrence(*args)
        return (hs, cs) if grad_outputs == "both" else hs
    assert torch.autograd.gradcheck(fn, (xp, s, r, w_t))
    hs, cs = rank1_recurrence(xp, s, r, w_t)
    ref_h, ref_c = run_recurrence(xp, lambda xt, hh: torch.addcmul(xt, (hh * s) @ w_t, r))
    assert torch.allclose(hs, ref_h) and torch.allclose(cs, ref_c)
