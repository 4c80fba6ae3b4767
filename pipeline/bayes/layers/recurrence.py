"""LSTM building blocks shared by the family: an autograd per-row recurrence, the
fused-by-hand rank-1 recurrence (packed layout, see ``packing``) and PyTorch's fused kernel.

Sequences are padded and left-aligned with ``lengths`` (N,) real steps per row; a row of
length 0 yields zero outputs and zero final states. Outputs at padded steps are zero and
never influence real steps (the recurrence is causal).
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import pairwise

import torch
from torch import Tensor
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

Step = Callable[[Tensor, Tensor], Tensor]  # (xp_t (N, 4H), h (N, H)) -> gates (N, 4H)


def check_sequence(x: Tensor, lengths: Tensor, input_size: int) -> Tensor:
    """Validate x (N, T, D) against lengths (N,); returns lengths as int64."""
    if x.dim() != 3 or x.shape[2] != input_size:
        raise ValueError(f"LSTM input must be (N, T, {input_size}), got {tuple(x.shape)}")
    lengths = torch.as_tensor(lengths, device=x.device).long()
    if lengths.shape != (x.shape[0],):
        raise ValueError(f"lengths must be ({x.shape[0]},), got {tuple(lengths.shape)}")
    if lengths.numel() and (int(lengths.min()) < 0 or int(lengths.max()) > x.shape[1]):
        raise ValueError(f"lengths must lie in [0, T={x.shape[1]}], got [{int(lengths.min())}, {int(lengths.max())}]")
    return lengths


def gate_permutation(hidden: int, device: torch.device | None = None) -> Tensor:
    """Index turning PyTorch gate order (i, f, g, o) into (i, f, o, g) (sigmoids contiguous)."""
    h = torch.arange(hidden, device=device)
    return torch.cat([h, h + hidden, h + 3 * hidden, h + 2 * hidden])  # (4H,)


def run_recurrence(xp: Tensor, step: Step) -> tuple[Tensor, Tensor]:
    """Run the LSTM over xp (T, N, 4H), gates in (i, f, o, g) order, from zero state.

    ``step(xp_t, h)`` adds the recurrent projection of h to the input projection. Returns
    every step's hidden and cell states, each (T, N, H).
    """
    t_len, n, four_h = xp.shape
    hidden = four_h // 4
    if t_len == 0:
        empty = xp.new_zeros(0, n, hidden)
        return empty, empty
    hs, cs = [], []
    h = c = None
    for t, xt in enumerate(xp.unbind(0)):  # unbind: one backward stack instead of T selects
        gates = xt if t == 0 else step(xt, h)  # zero initial state: no recurrent term
        sig, g = gates.split([3 * hidden, hidden], 1)
        i, f, o = sig.sigmoid().split(hidden, 1)
        g = g.tanh()
        c = i * g if t == 0 else torch.addcmul(f * c, i, g)
        h = o * c.tanh()
        hs.append(h)
        cs.append(c)
    return torch.stack(hs), torch.stack(cs)  # (T, N, H) each


def _head(x: Tensor, rows: int) -> Tensor:
    """The first ``rows`` rows of x (x itself when it has exactly that many)."""
    return x if x.shape[0] == rows else x[:rows]


class _Rank1Recurrence(torch.autograd.Function):
    """Fused-by-hand LSTM with per-row rank-1 factors on both kernels, packed layout.

    gates_t = (x_t W_inᵀ) ∘ r_in + bias + ((h_{t-1} ∘ s) Wᵀ) ∘ r, gate order (i, f, o, g), where
    x is the scaled input x ∘ s_in. Step t covers the first ``batch_sizes[t]`` rows (see
    ``packing``). Forward and backward run one loop each without autograd bookkeeping, over
    per-step views made once; all gradients are accumulated in place step by step. On CPU the
    loop is bound by memory traffic and per-op overhead more than by flops, so:

    - the input projection and its gradients (input and W_in) are per-step products whose
      (rows, 4H) operands stay in cache; one product over all steps writes and re-reads a
      (P, 4H) tensor and is slower for a small inner dimension D;
    - x W_inᵀ and (h ∘ s) Wᵀ, kept only for the gradients of r_in and r, share one (P, 2, 4H)
      buffer, so one op accumulates both; h ∘ s is not kept (recomputed in the backward);
    - tanh is computed as 2·sigmoid(2x) - 1 (torch.tanh is several times slower than
      torch.sigmoid on CPU; absolute error ~1e-7 in float32), the factor 2 of the g gate folded
      into its columns of r_in, bias and r once, so one sigmoid covers all four gates.
    """

    @staticmethod
    def forward(ctx, x: Tensor, w_in_t: Tensor, r_in: Tensor, bias: Tensor, s: Tensor, r: Tensor, w_t: Tensor,
                batch_sizes: list[int]) -> tuple[Tensor, Tensor]:
        packed, four_h = x.shape[0], w_t.shape[1]
        hid = four_h // 4
        dbl = x.new_ones(four_h)
        dbl[3 * hid:] = 2.0  # (4H,) 2 on the g gate's columns
        r_in2, bias2, r2 = r_in * dbl, bias * dbl, r * dbl  # g pre-activation doubled
        m_one, two = x.new_full((), -1.0), x.new_full((), 2.0)  # 0-dim: no scalar wrapping per op
        xp = x.new_empty(packed, 2, four_h)  # x_t W_inᵀ and (h_{t-1} ∘ s) Wᵀ (zero at t = 0)
        xw, proj = xp.unbind(1)  # (P, 4H) views
        proj[:batch_sizes[0]].zero_()
        act = x.new_empty(packed, four_h)  # post-activation gates (sigmoid i, f, o; tanh g)
        cs, tcs = x.new_empty(packed, hid), x.new_empty(packed, hid)  # c_t, tanh(c_t)
        hs, hss = x.new_empty(packed, hid), x.new_empty(2, batch_sizes[0], hid)  # h_t; h_t ∘ s of steps t, t - 1
        x_, xw_, proj_, act_ = (v.split(batch_sizes) for v in (x, xw, proj, act))  # per step
        i_, f_, o_, g_ = (v.split(batch_sizes) for v in act.split(hid, 1))  # per-step gate views
        cs_, tcs_, hs_ = (v.split(batch_sizes) for v in (cs, tcs, hs))
        hss_ = [_head(hss[t % 2], m) for t, m in enumerate(batch_sizes)]
        heads = {m: [_head(v, m) for v in (bias2, r_in2, r2, s)] for m in set(batch_sizes)}
        for t, m in enumerate(batch_sizes):
            b_m, r_in_m, r_m, s_m = heads[m]
            a, g, c, tc = act_[t], g_[t], cs_[t], tcs_[t]
            torch.addcmul(b_m, torch.mm(x_[t], w_in_t, out=xw_[t]), r_in_m, out=a)
            if t > 0:  # zero initial state: no recurrent term at t = 0
                a.addcmul_(torch.mm(_head(hss_[t - 1], m), w_t, out=proj_[t]), r_m)
            a.sigmoid_()
            torch.add(m_one, g, alpha=2, out=g)  # tanh(g) = 2·sigmoid(2g) - 1
            if t == 0:
                torch.mul(i_[0], g, out=c)
            else:
                torch.mul(f_[t], _head(cs_[t - 1], m), out=c).addcmul_(i_[t], g)
            torch.add(m_one, torch.mul(c, two, out=tc).sigmoid_(), alpha=2, out=tc)  # tanh(c_t)
            torch.mul(o_[t], tc, out=hs_[t])
            torch.mul(hs_[t], s_m, out=hss_[t])
        ctx.batch_sizes = batch_sizes
        ctx.save_for_backward(x, w_in_t, r_in, s, r, w_t, xp, act, cs, tcs, hs)
        ctx.set_materialize_grads(False)
        return hs, cs

    @staticmethod
    def backward(ctx, d_hs: Tensor | None, d_cs: Tensor | None) -> tuple[Tensor | None, ...]:
        x, w_in_t, r_in, s, r, w_t, xp, act, cs, tcs, hs = ctx.saved_tensors
        bs = ctx.batch_sizes
        n, four_h = r_in.shape
        hid = four_h // 4
        w, w_in = w_t.t(), w_in_t.t()  # (4H, H), (4H, D)
        d_x = x.new_empty(x.shape) if ctx.needs_input_grad[0] else None
        d_rr, d_bias = act.new_zeros(n, 2, four_h), act.new_zeros(n, four_h)  # d_rr: gradients of r_in, r
        d_s, d_w_t, d_w_in_t = act.new_zeros(n, hid), act.new_zeros(hid, four_h), act.new_zeros(w_in_t.shape)
        da = act.new_empty(n, four_h)  # gradient of the pre-activation gates at step t
        rr = torch.stack([r_in, r], 1)  # (N, 2, 4H)
        d_xp = act.new_empty(n, 2, four_h)  # gradients of x_t W_inᵀ and (h_{t-1} ∘ s) Wᵀ at step t
        d_hss = act.new_empty(n, hid)  # gradient of h_{t-1} ∘ s
        hss = act.new_empty(n, hid)  # h_{t-1} ∘ s
        d_tc = act.new_empty(n, hid)  # gradient of tanh(c_t), then its part of the gradient of c_t
        # gradients carried to step t - 1; rows that end at step t - 1 start from zero
        dh_carry, dc_carry = act.new_zeros(n, hid), act.new_zeros(n, hid)
        x_, xp_ = x.split(bs), xp.split(bs)
        d_x_ = d_x.split(bs) if d_x is not None else None
        sig_ = act[:, :3 * hid].split(bs)
        i_, f_, o_, g_ = (v.split(bs) for v in act.split(hid, 1))
        cs_, tcs_, hs_ = (v.split(bs) for v in (cs, tcs, hs))
        d_hs_ = d_hs.split(bs) if d_hs is not None else None
        d_cs_ = d_cs.split(bs) if d_cs is not None else None
        heads = {}
        for m in set(bs):
            da_m = _head(da, m)
            d_xp_m = _head(d_xp, m)
            # da (N, 4H), da as (N, 1, 4H), its sigmoid gates and each gate; d_xp and its two (N, 4H) halves
            heads[m] = [da_m, da_m.unsqueeze(1), da_m[:, :3 * hid], *da_m.split(hid, 1), d_xp_m, *d_xp_m.unbind(1)] + [
                _head(v, m) for v in (d_hss, d_tc, dh_carry, dc_carry, d_rr, d_bias, d_s, rr, s)]
        for t in range(len(bs) - 1, -1, -1):
            m = bs[t]
            (da_m, da_m1, d_sig, d_i, d_f, d_o, d_g, d_xp_m, d_xw_m, d_proj_m, d_hss_m, d_tc_m, dh, dc, d_rr_m,
             d_bias_m, d_s_m, rr_m, s_m) = heads[m]
            if d_hs_ is not None:
                dh.add_(d_hs_[t])
            torch.mul(dh, o_[t], out=d_tc_m)
            dc.add_(torch.ops.aten.tanh_backward.grad_input(d_tc_m, tcs_[t], grad_input=d_tc_m))
            if d_cs_ is not None:
                dc.add_(d_cs_[t])
            # gradients of the sigmoid outputs (i, f, o), turned into pre-activation gradients in place
            torch.mul(dc, g_[t], out=d_i)
            if t > 0:
                torch.mul(dc, _head(cs_[t - 1], m), out=d_f)
            else:
                d_f.zero_()
            torch.mul(dh, tcs_[t], out=d_o)
            torch.ops.aten.sigmoid_backward.grad_input(d_sig, sig_[t], grad_input=d_sig)
            torch.ops.aten.tanh_backward.grad_input(torch.mul(dc, i_[t], out=d_g), g_[t], grad_input=d_g)
            d_rr_m.addcmul_(da_m1, xp_[t])
            d_bias_m.add_(da_m)
            torch.mul(da_m1, rr_m, out=d_xp_m)
            d_w_in_t.addmm_(x_[t].t(), d_xw_m)
            if d_x_ is not None:
                torch.mm(d_xw_m, w_in, out=d_x_[t])
            if t > 0:
                dc.mul_(f_[t])
                h_prev = _head(hs_[t - 1], m)
                d_w_t.addmm_(torch.mul(h_prev, s_m, out=_head(hss, m)).t(), d_proj_m)
                torch.mm(d_proj_m, w, out=d_hss_m)
                d_s_m.addcmul_(d_hss_m, h_prev)
                torch.mul(d_hss_m, s_m, out=dh)
        return d_x, d_w_in_t, d_rr[:, 0], d_bias, d_s, d_rr[:, 1], d_w_t, None


def rank1_recurrence(x: Tensor, w_in_t: Tensor, r_in: Tensor, bias: Tensor, s: Tensor, r: Tensor, w_t: Tensor,
                     batch_sizes: list[int] | None = None) -> tuple[Tensor, Tensor]:
    """Multiplicative rank-1 LSTM in (i, f, o, g) gate order, from zero state.

    Packed layout (``packing``): x (P, D) holds the scaled inputs x ∘ s_in of every real step,
    time-major, step t holding ``batch_sizes[t]`` rows (non-increasing, the first rows of the
    batch); w_in_t (D, 4H) is the permuted, transposed W_ih. Per-row tensors cover the N rows:
    r_in (N, 4H) the input kernel's output factor, bias (N, 4H), s (N, H) and r (N, 4H) the
    factors of the recurrent kernel; w_t (H, 4H) is the permuted, transposed W_hh.
    ``batch_sizes=None`` means all N rows at every step (x (T·N, D)). Returns hidden and cell
    states (P, H) each; same result as ``run_recurrence`` with ``xp = (x W_inᵀ) ∘ r_in + bias``
    and the step ``xp_t + ((h ∘ s) Wᵀ) ∘ r``.
    """
    n = r_in.shape[0]
    if batch_sizes is None:
        batch_sizes = [n] * (x.shape[0] // n) if n else []
    if sum(batch_sizes) != x.shape[0] or any(b > n for b in batch_sizes[:1]) or any(
            b2 > b1 for b1, b2 in pairwise(batch_sizes)):
        raise ValueError(f"rank1_recurrence: batch_sizes must be non-increasing, at most N={n}, and sum "
                         f"to x rows {x.shape[0]}; got {batch_sizes}")
    if not batch_sizes:
        empty = x.new_zeros(0, w_t.shape[0])
        return empty, empty
    return _Rank1Recurrence.apply(x.contiguous(), w_in_t, r_in, bias, s, r, w_t.contiguous(), list(batch_sizes))


def final_states(hs: Tensor, cs: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
    """States after each row's last real step: (T, N, H) -> (N, H); zeros for length 0."""
    n, hidden = hs.shape[1], hs.shape[2]
    if hs.shape[0] == 0:
        zeros = hs.new_zeros(n, hidden)
        return zeros, zeros
    idx = (lengths - 1).clamp(min=0)
    rows = torch.arange(n, device=hs.device)
    keep = (lengths > 0).to(hs.dtype).unsqueeze(1)  # (N, 1)
    return hs[idx, rows] * keep, cs[idx, rows] * keep


def step_mask(lengths: Tensor, t_len: int, dtype: torch.dtype) -> Tensor:
    """(N, T, 1) with 1 at real steps, 0 at padding."""
    steps = torch.arange(t_len, device=lengths.device)
    return (steps.unsqueeze(0) < lengths.unsqueeze(1)).to(dtype).unsqueeze(2)


def fused_lstm(x: Tensor, lengths: Tensor, flat_weights: list[Tensor], num_layers: int,
               hidden: int, training: bool) -> tuple[Tensor, Tensor, Tensor]:
    """PyTorch's fused LSTM kernel on x (N, T, D) with weights [w_ih, w_hh, b_ih, b_hh] per layer.

    Returns outputs (N, T, H) zero at padding, and h_n, c_n (L, N, H) after each row's last
    real step. Equal lengths run padded; otherwise the batch is packed.
    """
    n, t_len, _ = x.shape
    h0 = x.new_zeros(num_layers, n, hidden)
    if t_len == 0 or n == 0:
        return x.new_zeros(n, t_len, hidden), h0, h0
    if bool((lengths == t_len).all()):
        out, h_n, c_n = torch._VF.lstm(x, (h0, h0), flat_weights, True, num_layers, 0.0,
                                       training, False, True)
        return out, h_n, c_n
    # pack with length >= 1 (packing rejects 0), zero the length-0 rows afterwards
    packed = pack_padded_sequence(x, lengths.clamp(min=1).cpu(), batch_first=True, enforce_sorted=False)
    data, h_n, c_n = torch._VF.lstm(packed.data, packed.batch_sizes, (h0, h0), flat_weights, True,
                                    num_layers, 0.0, training, False)
    out, _ = pad_packed_sequence(
        PackedSequence(data, packed.batch_sizes, packed.sorted_indices, packed.unsorted_indices),
        batch_first=True, total_length=t_len)  # (N, T, H), original row order
    keep = (lengths > 0).to(x.dtype)
    h_n = h_n.index_select(1, packed.unsorted_indices) * keep.view(1, n, 1)
    c_n = c_n.index_select(1, packed.unsorted_indices) * keep.view(1, n, 1)
    return out * keep.view(n, 1, 1), h_n, c_n
