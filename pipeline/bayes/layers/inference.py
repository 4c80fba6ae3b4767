"""Inference-only rank-1 LSTM with one weight draw per block (per-member sampling), no autograd.

Evaluation applies each of the G = S·K weight draws to a whole batch of B admissions, so each
block's kernels can be materialised once. Per layer and block they are fused into one matrix
``[W_ih_jᵀ; 2·W_hh_jᵀ; b_k]`` (rows D + H + 1, columns 4H in (i, f, o, g) order) and step t is
one batched product ``[x_t | h_{t-1}/2 | 1] @ kernel_j`` over all blocks, followed by the cell
update in place. The elementwise work is cut by keeping u = 2c and h/2 as the state: with the
g columns doubled one sigmoid covers all gates (tanh(g) = 2·sigmoid(2g) - 1), and
h/2 = o·(sigmoid(u) - 1/2) needs no tanh (torch.tanh is several times slower than sigmoid on CPU).
Admissions are sorted by length so step t computes only the ``batch_sizes[t]`` still running, in
every block, and the blocks run in chunks of about ``CHUNK_ROWS`` rows so that kernels and state
stay in cache. Nothing is saved for a backward pass and memory does not grow with T (except for
the hidden sequence between stacked layers).

Same result as ``LSTMRank1.forward_with`` on the same per-block draws (up to float rounding).

From ``FUSED_MIN_HIDDEN`` units up the recurrence runs PyTorch's fused LSTM kernel instead, one
call per draw with that block's weights, materialised just before its call (``Backend.FUSED``): its
input projection over all steps is one large product, which pays off once 4H is wide
(``benchmarks/score.py --backend`` times either). Rows shorter than the batch's longest run padded
steps whose outputs are never read; each call holds its (T, B, H) outputs, so that backend's
memory grows with T.
"""

from __future__ import annotations

from enum import Enum

import torch
from torch import Tensor

from pipeline.bayes.layers.base import Sampling
from pipeline.bayes.layers.factors import Draw, Perturbation
from pipeline.bayes.layers.lstm import LSTMRank1
from pipeline.bayes.layers.recurrence import gate_permutation

CHUNK_ROWS = 1024  # rows (blocks x admissions) per pass and intra-op thread: kernels and state stay in cache
# Backend.AUTO runs FUSED from this many LSTM units up. benchmarks/score.py --backend, back to back: at 256
# the fused recurrence ran 1.08x the blocks one (forward passes 1.07x, whole scoring runs level, peak RSS
# 538 against 616 MB); at 128 a tie (1.03x, whole runs slower); at 64 level or slower (its rate swings with
# the allocator's state: oneDNN workspaces).
FUSED_MIN_HIDDEN = 256


class Backend(str, Enum):
    """How ``final_hidden`` runs the per-draw recurrence."""

    AUTO = "auto"  # FUSED from FUSED_MIN_HIDDEN units up, else BLOCKS
    BLOCKS = "blocks"  # every step one batched product over all draws, then the cell update in place
    FUSED = "fused"  # PyTorch's fused LSTM kernel, one call per draw, padded to the batch's longest row


def block_kernels(lstm: LSTMRank1, draws: list[dict[str, Draw]]) -> list[Tensor]:
    """Fused per-block kernels (G, D_l + H + 1, 4H) of every layer (see the module docstring).

    The kernel of block j is ``[W_ih_jᵀ; 2·W_hh_jᵀ; b_k]`` with k = j % K, gates (i, f, o, g),
    the g columns doubled; W_j as ``factors.materialize``, written transposed in place.
    """
    hid, k, additive = lstm.hidden_size, lstm.components, lstm.config.perturbation == Perturbation.ADDITIVE
    perm = gate_permutation(hid, lstm.bias[0].device)
    scale = torch.ones(4 * hid, dtype=lstm.bias[0].dtype, device=perm.device)
    scale[3 * hid:] = 2.0  # tanh(g) = 2·sigmoid(2g) - 1
    kernels = []
    for layer, d in enumerate(draws):
        w_ih, w_hh = lstm.weight_ih[layer], lstm.weight_hh[layer]  # (4H, D), (4H, H)
        g, d_in = d["r_ih"].blocks().shape[0], w_ih.shape[1]
        kernel = w_ih.new_empty(g, d_in + hid + 1, 4 * hid)
        for rows, w, r, s, col in ((slice(0, d_in), w_ih, d["r_ih"], d["s_ih"], scale),
                                   (slice(d_in, d_in + hid), w_hh, d["r_hh"], d["s_hh"], 2.0 * scale)):  # h/2 in
            w_t = w.index_select(0, perm).t()  # (d, 4H)
            r_ = (r.blocks().index_select(1, perm) * col).unsqueeze(1)  # (G, 1, 4H), column c scaled by col[c]
            s_ = s.blocks().unsqueeze(2)  # (G, d, 1)
            if additive:  # (W + r sᵀ)ᵀ
                torch.mul(s_, r_, out=kernel[:, rows]).add_(w_t * col)
            else:  # (W ∘ (r sᵀ))ᵀ
                torch.mul(w_t, s_, out=kernel[:, rows]).mul_(r_)
        kernel[:, -1] = (lstm.bias[layer].index_select(1, perm) * scale).repeat(g // k, 1)  # (K, 4H) -> (G, 4H)
        kernels.append(kernel)
    return kernels


@torch.no_grad()
def final_hidden(lstm: LSTMRank1, x: Tensor, lengths: Tensor, samples: int,
                 backend: Backend | str = Backend.AUTO, generator: torch.Generator | None = None) -> Tensor:
    """Top layer's state after each row's last real step, per-member draws of ``lstm``.

    x (B, T, S_x, D): per-sample inputs, S_x = 1 (shared by every draw) or S (sample s feeds
    the K blocks s·K .. s·K + K - 1); lengths (B,) non-increasing (rows sorted by length, so that
    the rows still running at any step are the first ones). Returns (S·K·B, H) member-major
    (docs/architecture.md), zeros for length 0. Draws come from ``lstm.draw`` (one per block, per_member
    whatever the layer's own mode, from ``generator``; None: torch's global generator); both
    backends take the same draws, so they agree up to float rounding.
    """
    backend = Backend(backend)
    b, _, s_x, _ = x.shape
    g = samples * lstm.components
    if s_x not in (1, samples):
        raise ValueError(f"final_hidden: input has {s_x} samples, expected 1 or {samples}")
    lengths = lengths.to(device=x.device, dtype=torch.long)
    if b > 1 and bool((lengths[1:] > lengths[:-1]).any()):
        raise ValueError("final_hidden: rows must be sorted by non-increasing length")
    draws = lstm.draw(g * b, samples, Sampling.PER_MEMBER, generator)
    if backend == Backend.FUSED or (backend == Backend.AUTO and lstm.hidden_size >= FUSED_MIN_HIDDEN):
        return _fused_per_draw(lstm, x, lengths, draws, g)
    kernels = block_kernels(lstm, draws)
    steps = int(lengths[0]) if b else 0
    batch_sizes = (torch.arange(steps, device=x.device).unsqueeze(1) < lengths.unsqueeze(0)).sum(1).tolist()
    per = g // s_x  # blocks fed by one input sample
    chunk = max(1, CHUNK_ROWS * torch.get_num_threads() // max(1, b * per))  # input samples per pass
    h_n = x.new_zeros(g, b, lstm.hidden_size)
    for s0 in range(0, s_x, chunk):
        blocks = slice(s0 * per, (s0 + chunk) * per)
        seq = x[:, :, s0:s0 + chunk].permute(1, 2, 0, 3)  # (B, T, S_p, D) -> (T, S_p, B, D)
        for layer, kernel in enumerate(kernels):
            seq = _layer(kernel[blocks], seq, batch_sizes, h_n[blocks], keep=layer + 1 < len(kernels))
    return h_n.view(g * b, lstm.hidden_size)  # (G, B, H) -> (G·B, H)


def _fused_per_draw(lstm: LSTMRank1, x: Tensor, lengths: Tensor, draws: list[dict[str, Draw]], g: int) -> Tensor:
    """``final_hidden`` by PyTorch's fused LSTM kernel: one call per block j with its weights
    (``LSTMRank1.block_weights``), over sample j // (G / S_x)'s inputs padded to the longest row."""
    b, _, s_x, _ = x.shape
    hid = lstm.hidden_size
    h_n = x.new_zeros(g, b, hid)
    steps = int(lengths[0]) if b else 0
    if steps == 0:
        return h_n.view(g * b, hid)
    h0 = x.new_zeros(lstm.num_layers, b, hid)
    n_run = int((lengths > 0).sum())  # rows sorted by length: the running ones come first; the rest stay zero
    last, rows = lengths[:n_run] - 1, torch.arange(n_run, device=x.device)  # (R,), (R,)
    per = g // s_x  # blocks fed by one input sample
    for s in range(s_x):
        seq = x[:, :steps, s].transpose(0, 1).contiguous()  # (B, T, D) -> (T, B, D)
        for j in range(s * per, (s + 1) * per):
            flat = lstm.block_weights(draws, block=j)[0]  # [w_ih, w_hh, b_ih, b_hh] per layer, this block's only
            out, _, _ = torch._VF.lstm(seq, (h0, h0), flat, True, lstm.num_layers, 0.0, False, False, False)
            h_n[j, :n_run] = out[last, rows]  # (T, B, H) -> (R, H) at each running row's last step
    return h_n.view(g * b, hid)  # (G, B, H) -> (G·B, H)


def cell_update(a: Tensor, u_prev: Tensor, u: Tensor, th: Tensor) -> tuple[Tensor, Tensor]:
    """The cell after a step's product, in place: pre-activations a (G, m, 4H) in gate order
    (i, f, o, 2g), u_prev = 2·c_{t-1} (G, m, H); writes u = 2·c_t and th = tanh(c_t)/2 (G, m, H)
    and returns (sigmoid(o), th), whose product is h_t/2."""
    a.sigmoid_()
    i, f, o, g2 = a.split(u.shape[-1], -1)  # sigmoid(i), sigmoid(f), sigmoid(o), sigmoid(2g)
    torch.mul(f, u_prev, out=u)
    u.addcmul_(i, g2, value=4.0).sub_(i, alpha=2.0)  # 2·(f·c + i·tanh(g)), tanh(g) = 2·sigmoid(2g) - 1
    torch.sigmoid(u, out=th).sub_(0.5)  # tanh(c)/2
    return o, th


def _layer(kernel: Tensor, x: Tensor, batch_sizes: list[int], h_n: Tensor, keep: bool) -> Tensor | None:
    """One layer over x (T, S_x, B, D), rows sorted by length: writes the final states into
    h_n (G, B, H); returns every step's hidden state (T, G, B, H) when ``keep`` (the next
    layer's input; zero at padding).

    Buffers hold the m = batch_sizes[t] running rows of step t contiguously, (G, m, ·): rows that
    stop running drop out when the next step's buffer is written (h_{t-1}/2 goes straight to the
    layout of step t, u_{t-1} is read through a view), so the product and every elementwise op
    work on contiguous memory.
    """
    g, dz, four_h = kernel.shape
    hid = four_h // 4
    t_len, s_x, b, d = x.shape
    z_buf = x.new_empty(2, g * b * dz)  # [x_t | h_{t-1}/2 | 1] of step t: z_buf[t % 2] as (G, m, D + H + 1)
    u_buf = x.new_zeros(2, g * b * hid)  # u_t = 2·c_t: u_buf[t % 2] as (G, m, H); u_{-1} = 0
    gates = x.new_empty(g * b * four_h)
    half_tanh = x.new_empty(g * b * hid)
    hs = x.new_zeros(t_len, g, b, hid) if keep else None
    views: dict[tuple[int, int], tuple] = {}  # (parity, m) -> the step's buffers as (G, m, ·): made once

    def step_views(parity: int, m: int) -> tuple:
        if (parity, m) not in views:
            z_m = z_buf[parity][:g * m * dz].view(g, m, dz)
            z_m[..., d + hid] = 1.0  # the bias column; nothing else writes it
            views[(parity, m)] = (z_m, z_m.view(s_x, g // s_x, m, dz)[..., :d], z_m[..., d:d + hid],
                                  gates[:g * m * four_h].view(g, m, four_h),
                                  u_buf[parity][:g * m * hid].view(g, m, hid), half_tanh[:g * m * hid].view(g, m, hid))
        return views[(parity, m)]

    m0 = batch_sizes[0] if batch_sizes else 0
    step_views(0, m0)[2].zero_()  # zero initial state h_{-1}/2
    u_prev_full = u_buf[1][:g * b * hid].view(g, b, hid)  # u_{-1} = 0, every row
    for t, m in enumerate(batch_sizes):
        m_next = batch_sizes[t + 1] if t + 1 < len(batch_sizes) else 0
        z, z_x, _, a, u, th = step_views(t % 2, m)
        z_x.copy_(x[t, :, :m].unsqueeze(1))  # (S_x, m, D) -> (S_x, 1, m, D): shared by the blocks of a sample
        torch.bmm(z, kernel, out=a)  # (G, m, 4H)
        o, th = cell_update(a, u_prev_full[:, :m], u, th)
        h_next = step_views((t + 1) % 2, m_next)[2] if m_next else None  # h_t/2 slot of step t + 1
        if hs is not None:
            h = torch.mul(o, th, out=hs[t, :, :m])  # (G, m, H)
            if m_next:
                h_next.copy_(h[:, :m_next])
            h_n[:, m_next:m] = h[:, m_next:]
        else:
            if m_next:
                torch.mul(o[:, :m_next], th[:, :m_next], out=h_next)  # h_t/2 of the rows running at t + 1
            if m_next < m:  # rows whose last step is t
                torch.mul(o[:, m_next:], th[:, m_next:], out=h_n[:, m_next:m])
        u_prev_full = u
    h_n.mul_(2.0)  # h/2 -> h
    return None if hs is None else hs.mul_(2.0)
