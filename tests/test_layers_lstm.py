"""Recurrent members of the layer family against nn.LSTM on packed variable-length input."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from pipeline.bayes.layers import (
    LSTMBatchEnsemble,
    LSTMDeterministic,
    LSTMMeanField,
    LSTMRank1,
    Rank1Config,
    Rank1Vector,
    set_sampling,
    tile_members,
)
from pipeline.bayes.layers.factors import materialize

D, H = 3, 5


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def reference(x, lengths, layers):
    """nn.LSTM with given per-layer (w_ih, w_hh, bias) on packed input; zeros for length-0 rows."""
    lstm = nn.LSTM(D, H, len(layers), batch_first=True)
    with torch.no_grad():
        for li, (w_ih, w_hh, b) in enumerate(layers):
            getattr(lstm, f"weight_ih_l{li}").copy_(w_ih)
            getattr(lstm, f"weight_hh_l{li}").copy_(w_hh)
            getattr(lstm, f"bias_ih_l{li}").copy_(b)
            getattr(lstm, f"bias_hh_l{li}").zero_()
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
    return [(lstm.weight_ih[li], lstm.weight_hh[li], lstm.bias[li][0]) for li in range(lstm.num_layers)]


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
@pytest.mark.parametrize("full", [True, False])
def test_batchensemble_member_equals_nn_lstm_with_materialised_weights(perturbation, sampling, samples, full):
    k, b = 3, 4
    lstm = LSTMBatchEnsemble(D, H, 2, components=k, config=Rank1Config(perturbation=perturbation, init="normal"))
    with torch.no_grad():
        for m in lstm.modules():
            if isinstance(m, Rank1Vector):
                m.mean.normal_(m.config.prior_mean, 0.5)
    set_sampling(lstm, sampling)
    x, lengths = sequences(b, 6, full=full)
    out, (h, c) = lstm(tile_members(x, samples * k), tile_members(lengths, samples * k), samples=samples)
    for j in range(samples * k):
        comp = j % k
        layers = []
        for li, f in enumerate(lstm.factors):
            w_ih = materialize(lstm.weight_ih[li], f["r_ih"].mean[comp:comp + 1], f["s_ih"].mean[comp:comp + 1],
                               perturbation)[0]
            w_hh = materialize(lstm.weight_hh[li], f["r_hh"].mean[comp:comp + 1], f["s_hh"].mean[comp:comp + 1],
                               perturbation)[0]
            layers.append((w_ih, w_hh, lstm.bias[li][comp]))
        rows = slice(j * b, (j + 1) * b)
        assert_same((out[rows], (h[:, rows], c[:, rows])), reference(x, lengths, layers))


@pytest.mark.parametrize("perturbation", ["multiplicative", "additive"])
@pytest.mark.parametrize("full", [True, False])
def test_rank1_same_draws_agree_across_paths_and_match_member_loop(perturbation, full):
    """Equal lengths: fused kernel per block vs per-row recurrence; variable lengths: the
    per-member route (recurrence on block draws, or packed kernel when additive) vs per-row."""
    k, s, b = 2, 2, 3
    cfg = Rank1Config(perturbation=perturbation, init_stddev=0.2, init="normal")
    lstm = LSTMRank1(D, H, 2, components=k, config=cfg)
    x, lengths = sequences(b, 5, full=full)
    xt, lt = tile_members(x, s * k), tile_members(lengths, s * k)
    set_sampling(lstm, "per_member")
    draws = lstm.draw(xt.shape[0], s)
    fused = lstm.forward_with(xt, lt, draws, s)
    set_sampling(lstm, "per_example")
    looped = lstm.forward_with(xt, lt, draws, s)
    assert_same(looped, (fused[0], *fused[1]))
    weights = lstm.block_weights(draws)
    for j in range(s * k):
        layers = [(weights[j][4 * li], weights[j][4 * li + 1], weights[j][4 * li + 2]) for li in range(2)]
        rows = slice(j * b, (j + 1) * b)
        assert_same((fused[0][rows], (fused[1][0][:, rows], fused[1][1][:, rows])), reference(x, lengths, layers))


@pytest.mark.parametrize("full", [True, False])
def test_rank1_gradients_agree_across_paths(full):
    lstm = LSTMRank1(D, H, 2, components=2, config=Rank1Config(init_stddev=0.2))
    x, lengths = sequences(3, 5, full=full)
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
    mu = [(layer.weight_ih[li].mu, layer.weight_hh[li].mu, layer.bias[li]) for li in range(2)]
    assert_same(layer(x, lengths), reference(x, lengths, mu))
    # per-row recurrence (bmm) with every row given the same sampled weights == fused kernel
    sampled = [(layer.weight_ih[li].sample(1), layer.weight_hh[li].sample(1)) for li in range(2)]
    rows = [(w_ih.expand(4, -1, -1), w_hh.expand(4, -1, -1)) for w_ih, w_hh in sampled]
    got = layer._per_example(x, lengths, rows)
    ref = reference(x, lengths, [(w_ih[0], w_hh[0], layer.bias[li]) for li, (w_ih, w_hh) in enumerate(sampled)])
    assert_same(got, ref)


def test_deterministic_lstm_matches_nn_lstm_and_checks_input():
    layer = LSTMDeterministic(D, H, 2)
    x, lengths = sequences(5, 6, full=False)
    layers = [(getattr(layer, f"weight_ih_l{li}"), getattr(layer, f"weight_hh_l{li}"),
               getattr(layer, f"bias_ih_l{li}") + getattr(layer, f"bias_hh_l{li}")) for li in range(2)]
    assert_same(layer(x, lengths), reference(x, lengths, layers))
    with pytest.raises(ValueError, match="lengths must lie in"):
        layer(x, torch.full((5,), 7))
    with pytest.raises(ValueError, match=r"\(N, T, 3\)"):
        layer(torch.zeros(5, 6, 4), lengths)


def recurrence_args(lengths, h, dtype, scale=1.0, d=3):
    """Random packed inputs (x, w_in_t, r_in, bias, s, r, w_t) and batch_sizes for ``rank1_recurrence``.

    ``lengths`` are non-increasing (rows sorted), as ``Packing`` arranges them.
    """
    n, t = len(lengths), max(lengths)
    batch_sizes = [sum(1 for k in lengths if k > step) for step in range(t)]
    shapes = [(sum(batch_sizes), d), (d, 4 * h), (n, 4 * h), (n, 4 * h), (n, h), (n, 4 * h), (h, 4 * h)]
    return tuple((scale * torch.randn(sh, dtype=dtype)).requires_grad_() for sh in shapes), batch_sizes


def autograd_reference(args, batch_sizes):
    """The same recurrence through autograd on padded steps, with torch.tanh / torch.sigmoid.

    Returns packed (P, H) hidden and cell states, like ``rank1_recurrence``.
    """
    from pipeline.bayes.layers.recurrence import run_recurrence

    x, w_in_t, r_in, bias, s, r, w_t = args
    n, t = r_in.shape[0], len(batch_sizes)
    xw = x @ w_in_t  # (P, 4H)
    steps = torch.zeros(t, n, xw.shape[1], dtype=xw.dtype)
    steps = steps.index_put(packed_index(batch_sizes), xw)  # (T, N, 4H), zero after a row ends
    xp = torch.addcmul(bias, steps, r_in)
    hs, cs = run_recurrence(xp, lambda xt, hh: torch.addcmul(xt, (hh * s) @ w_t, r))
    index = packed_index(batch_sizes)
    return hs[index], cs[index]


def packed_index(batch_sizes):
    """(step, row) of every packed position."""
    t_idx = torch.cat([torch.full((b,), step) for step, b in enumerate(batch_sizes)])
    rows = torch.cat([torch.arange(b) for b in batch_sizes])
    return t_idx, rows


LENGTHS = {"single step": [1, 1, 1], "equal": [4, 4, 4], "variable": [4, 3, 3, 1]}


@pytest.mark.parametrize("grad_outputs", ["hidden", "cell", "both"])
@pytest.mark.parametrize("lengths", LENGTHS.values(), ids=LENGTHS.keys())
@pytest.mark.slow
def test_rank1_recurrence_gradcheck_against_autograd_loop(grad_outputs, lengths):
    from pipeline.bayes.layers.recurrence import rank1_recurrence

    args, batch_sizes = recurrence_args(lengths, 2, torch.double)

    def fn(*a):
        hs, cs = rank1_recurrence(*a, batch_sizes=batch_sizes)
        return {"hidden": hs, "cell": cs, "both": (hs, cs)}[grad_outputs]
    assert torch.autograd.gradcheck(fn, args)
    hs, cs = rank1_recurrence(*args, batch_sizes=batch_sizes)
    ref_h, ref_c = autograd_reference(args, batch_sizes)
    assert torch.allclose(hs, ref_h) and torch.allclose(cs, ref_c)


@pytest.mark.parametrize("scale", [0.3, 3.0])
@pytest.mark.parametrize("lengths", [[6, 6, 6, 6, 6], [6, 5, 5, 2, 1]], ids=["equal", "variable"])
def test_rank1_recurrence_float32_matches_torch_tanh_and_autograd_gradients(scale, lengths):
    """The sigmoid-based tanh stays within float32 tolerance, saturated gates included."""
    from pipeline.bayes.layers.recurrence import rank1_recurrence

    args, batch_sizes = recurrence_args(lengths, 4, torch.float32, scale)
    hs, cs = rank1_recurrence(*args, batch_sizes=batch_sizes)
    ref_h, ref_c = autograd_reference(args, batch_sizes)
    assert torch.allclose(hs, ref_h, atol=1e-5) and torch.allclose(cs, ref_c, atol=1e-5, rtol=1e-5)
    weights = torch.randn_like(hs)
    grads = torch.autograd.grad((hs * weights).sum() + cs.sum(), args)
    ref_grads = torch.autograd.grad((ref_h * weights).sum() + ref_c.sum(), args)
    for got, ref in zip(grads, ref_grads):
        assert torch.allclose(got, ref, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("lengths", LENGTHS.values(), ids=LENGTHS.keys())
def test_rank1_recurrence_without_input_gradient(lengths):
    """An input that needs no gradient skips its product; the other gradients are unchanged."""
    from pipeline.bayes.layers.recurrence import rank1_recurrence

    args, batch_sizes = recurrence_args(lengths, 2, torch.double)
    args = (args[0].detach(), *args[1:])
    hs, cs = rank1_recurrence(*args, batch_sizes=batch_sizes)
    ref_h, ref_c = autograd_reference(args, batch_sizes)
    weights = torch.randn_like(hs)
    grads = torch.autograd.grad((hs * weights).sum() + cs.sum(), args[1:], allow_unused=True)
    ref_grads = torch.autograd.grad((ref_h * weights).sum() + ref_c.sum(), args[1:], allow_unused=True)
    for got, ref in zip(grads, ref_grads):
        assert torch.allclose(got, torch.zeros_like(got) if ref is None else ref)


def test_rank1_recurrence_rejects_inconsistent_batch_sizes():
    from pipeline.bayes.layers.recurrence import rank1_recurrence

    args, _ = recurrence_args([3, 2], 2, torch.float32)
    for bad in ([2, 2, 2], [1, 2, 2], [3, 2]):  # wrong total, increasing, more than N rows
        with pytest.raises(ValueError, match="batch_sizes"):
            rank1_recurrence(*args, batch_sizes=bad)


@pytest.mark.parametrize("sampling", ["per_example", "per_member"])
def test_rank1_variable_length_gradients_match_nn_lstm(sampling):
    """Unit factors, K = 1: gradients wrt input, kernels and bias equal packed nn.LSTM's."""
    lstm = LSTMRank1(D, H, 2, components=1)
    with torch.no_grad():
        for m in lstm.modules():
            if isinstance(m, Rank1Vector):
                m.mean.fill_(1.0)
                m.rho.fill_(-math.inf)
    set_sampling(lstm, sampling)
    x, lengths = sequences(5, 6, full=False)
    lengths[2] = 0
    real = lengths > 0
    x_ref = x.clone().requires_grad_()
    x.requires_grad_()
    out, (h, c) = lstm(x, lengths)
    weights = torch.randn_like(out)
    (out * weights).sum().add(h.pow(2).sum() + c.sum()).backward()
    ref = nn.LSTM(D, H, 2, batch_first=True)
    with torch.no_grad():
        for li in range(2):
            getattr(ref, f"weight_ih_l{li}").copy_(lstm.weight_ih[li])
            getattr(ref, f"weight_hh_l{li}").copy_(lstm.weight_hh[li])
            getattr(ref, f"bias_ih_l{li}").copy_(lstm.bias[li][0])
            getattr(ref, f"bias_hh_l{li}").zero_()
    packed = pack_padded_sequence(x_ref[real], lengths[real], batch_first=True, enforce_sorted=False)
    o, (h_r, c_r) = ref(packed)
    o = pad_packed_sequence(o, batch_first=True, total_length=6)[0]
    ((o * weights[real]).sum() + h_r.pow(2).sum() + c_r.sum()).backward()
    assert torch.allclose(x.grad, x_ref.grad, atol=1e-5)
    for li in range(2):
        assert torch.allclose(lstm.weight_ih[li].grad, getattr(ref, f"weight_ih_l{li}").grad, atol=1e-5)
        assert torch.allclose(lstm.weight_hh[li].grad, getattr(ref, f"weight_hh_l{li}").grad, atol=1e-5)
        assert torch.allclose(lstm.bias[li].grad[0], getattr(ref, f"bias_ih_l{li}").grad, atol=1e-5)


@pytest.mark.parametrize("full", [True, False])
@pytest.mark.slow
def test_rank1_per_example_layer_gradcheck_wrt_input(full):
    """Whole two-layer path (packing, recurrence, final states) in float64, zero-length row included."""
    lstm = LSTMRank1(D, H, 2, components=2, config=Rank1Config(init_stddev=0.3)).double()
    x, lengths = sequences(4, 4, full=full)
    if not full:
        lengths[2] = 0
    draws = lstm.draw(4, 1)
    draws = [{k: type(v)(v.value.detach(), v.per_block) for k, v in d.items()} for d in draws]

    def fn(inp):
        out, (h, c) = lstm.forward_with(inp, lengths, draws, 1)
        return out, h, c
    assert torch.autograd.gradcheck(fn, (x.double().requires_grad_(),))
