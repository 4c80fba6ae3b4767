"""LSTM building blocks shared by the family: a per-row recurrence and the fused kernel.

Sequences are padded and left-aligned with ``lengths`` (N,) real steps per row; a row of
length 0 yields zero outputs and zero final states. Outputs at padded steps are zero and
never influence real steps (the recurrence is causal).
"""

from __future__ import annotations

from typing import Callable

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


class _Rank1Recurrence(torch.autograd.Function):
    """Fused-by-hand LSTM recurrence with per-row rank-1 factors on the recurrent kernel.

    gates_t = xp_t + ((h_{t-1} ∘ s) Wᵀ) ∘ r, gate order (i, f, o, g). The backward pass runs
    one loop without autograd bookkeeping and forms the gradients of Wᵀ, r and s with one
    batched op each instead of accumulating them step by step.
    """

    @staticmethod
    def forward(ctx, xp: Tensor, s: Tensor, r: Tensor, w_t: Tensor) -> tuple[Tensor, Tensor]:
        t_len, n, four_h = xp.shape
        hid = four_h // 4
        proj = xp.new_zeros(t_len, n, four_h)  # (h_{t-1} ∘ s) Wᵀ; zero at t = 0
        act = xp.new_empty(t_len, n, four_h)  # post-activation gates (sigmoid i, f, o; tanh g)
        cs, tcs = xp.new_empty(t_len, n, hid), xp.new_empty(t_len, n, hid)  # c_t, tanh(c_t)
        hs, hss = xp.new_empty(t_len, n, hid), xp.new_empty(t_len, n, hid)  # h_t, h_t ∘ s
        for t in range(t_len):
            a = act[t]
            if t == 0:
                a.copy_(xp[0])
            else:
                torch.addcmul(xp[t], torch.mm(hss[t - 1], w_t, out=proj[t]), r, out=a)
            a[:, :3 * hid].sigmoid_()
            a[:, 3 * hid:].tanh_()
            i, f, o, g = a.split(hid, 1)
            if t == 0:
                torch.mul(i, g, out=cs[0])
            else:
                torch.mul(f, cs[t - 1], out=cs[t]).addcmul_(i, g)
            torch.mul(o, torch.tanh(cs[t], out=tcs[t]), out=hs[t])
            torch.mul(hs[t], s, out=hss[t])
        ctx.save_for_backward(s, r, w_t, proj, act, cs, tcs, hs, hss)
        ctx.set_materialize_grads(False)
        return hs, cs

    @staticmethod
    def backward(ctx, d_hs: Tensor | None, d_cs: Tensor | None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        s, r, w_t, proj, act, cs, tcs, hs, hss = ctx.saved_tensors
        t_len, n, four_h = act.shape
        hid = four_h // 4
        w = w_t.t()  # (4H, H)
        d_act = act.new_empty(t_len, n, four_h)  # gradient of the pre-activation gates
        d_proj = act.new_zeros(t_len, n, four_h)  # gradient of (h ∘ s) Wᵀ
        d_hss = act.new_zeros(t_len, n, hid)  # gradient of h_{t-1} ∘ s, stored at step t
        d_post = act.new_empty(n, 3 * hid)  # gradient of sigmoid outputs (i, f, o)
        dh_next = dc_next = None
        for t in range(t_len - 1, -1, -1):
            a = act[t]
            i, f, o, g = a.split(hid, 1)
            dh = d_hs[t] if d_hs is not None else None
            if dh_next is not None:
                dh = dh_next if dh is None else dh + dh_next
            if dh is None:
                dh = torch.zeros_like(i)
            dc = torch.ops.aten.tanh_backward(dh * o, tcs[t])
            if dc_next is not None:
                dc = dc + dc_next
            if d_cs is not None:
                dc = dc + d_cs[t]
            torch.mul(dc, g, out=d_post[:, :hid])
            if t > 0:
                torch.mul(dc, cs[t - 1], out=d_post[:, hid:2 * hid])
            else:
                d_post[:, hid:2 * hid].zero_()
            torch.mul(dh, tcs[t], out=d_post[:, 2 * hid:])
            da = d_act[t]
            torch.ops.aten.sigmoid_backward.grad_input(d_post, a[:, :3 * hid], grad_input=da[:, :3 * hid])
            torch.ops.aten.tanh_backward.grad_input(dc * i, g, grad_input=da[:, 3 * hid:])
            dc_next = dc * f
            if t > 0:
                torch.mm(torch.mul(da, r, out=d_proj[t]), w, out=d_hss[t])
                dh_next = d_hss[t] * s
        d_r = (d_act * proj).sum(0)  # (N, 4H)
        d_w_t = hss[:-1].reshape(-1, hid).t() @ d_proj[1:].reshape(-1, four_h)  # (H, 4H)
        d_s = (d_hss[1:] * hs[:-1]).sum(0)  # (N, H)
        return d_act, d_s, d_r, d_w_t


def rank1_recurrence(xp: Tensor, s: Tensor, r: Tensor, w_t: Tensor) -> tuple[Tensor, Tensor]:
    """Multiplicative rank-1 recurrence over xp (T, N, 4H) in (i, f, o, g) order.

    s (N, H) and r (N, 4H) are per-row factors, w_t (H, 4H) the permuted, transposed W_hh.
    Returns hidden and cell states (T, N, H) each; same result as ``run_recurrence`` with the
    step ``xp_t + ((h ∘ s) Wᵀ) ∘ r``.
    """
    if xp.shape[0] == 0:
        empty = xp.new_zeros(0, xp.shape[1], xp.shape[2] // 4)
        return empty, empty
    return _Rank1Recurrence.apply(xp, s, r, w_t.contiguous())


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
