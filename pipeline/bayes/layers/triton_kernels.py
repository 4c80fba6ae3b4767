"""The Triton kernels of the fused rank-1 LSTM recurrence (``triton_lstm`` launches them and documents the
layout and the math): forward and backward, each *resident* (w_t and the state in registers, H <= 64) or
*tiled* (w_t read in column tiles from L2, the state through memory, larger H; its forward also *wide*: the
reduction over all units in one product per column tile, a launch choice).

Written for compilation on any Triton from 3.6 on: power-of-2 block shapes (H padded), ``tl.dot`` on
dimensions >= 16 with float32 accumulation, loops over runtime bounds only (``range``), a mask on every
load and store; the step index is broadcast to a vector before any comparison (Triton's interpreter
mishandles masks combined with scalar booleans). Defined only when triton imports (``KERNELS``).
"""

from __future__ import annotations

try:
    import triton
    import triton.language as tl
except ImportError:  # the layers fall back to the reference recurrence (``lstm.LSTMRank1``)
    triton = tl = None

KERNELS = triton is not None  # the kernels below are defined

if triton is not None:

    @triton.jit
    def _tanh(x):
        return 2.0 * tl.sigmoid(2.0 * x) - 1.0

    @triton.jit
    def _rows(ptr, row_off, cols, mask):
        """(BN, BC) tile of a row-major tensor: element [n, c] at ptr + row_off[n] + cols[c]."""
        return tl.load(ptr + row_off[:, None] + cols[None, :], mask=mask, other=0.0)

    @triton.jit
    def _w_cols(w_ptr, H, gate, k, in_k, j, in_j):
        """(K, J) block of w_t (H, 4H): rows k, columns gate·H + j."""
        return tl.load(w_ptr + k[:, None] * (4 * H) + (gate * H + j)[None, :], mask=in_k[:, None] & in_j[None, :],
                       other=0.0)

    @triton.jit
    def _w_cols_t(w_ptr, H, gate, j, in_j, k, in_k):
        """(J, K) block of w_tᵀ restricted to gate: element [j, k] = w_t[k, gate·H + j]."""
        return tl.load(w_ptr + k[None, :] * (4 * H) + (gate * H + j)[:, None], mask=in_j[:, None] & in_k[None, :],
                       other=0.0)

    @triton.jit
    def _cell(a_i, a_f, a_o, a_g, c_prev):
        """Activations and the new state from pre-activations (BN, BC) each."""
        gi = tl.sigmoid(a_i)
        gf = tl.sigmoid(a_f)
        go = tl.sigmoid(a_o)
        gg = _tanh(a_g)
        c = gf * c_prev + gi * gg
        h = go * _tanh(c)
        return gi, gf, go, gg, c, h

    @triton.jit
    def _cell_backward(dh, dc, gi, gf, go, gg, c, c_prev):
        """Pre-activation gradients of one step from the gradients of h_t and c_t (dc without the path
        through h_t); returns (da_i, da_f, da_o, da_g, dc) with dc the whole gradient of c_t."""
        tc = _tanh(c)
        dc = dc + dh * go * (1.0 - tc * tc)
        da_i = dc * gg * gi * (1.0 - gi)
        da_f = dc * c_prev * gf * (1.0 - gf)
        da_o = dh * tc * go * (1.0 - go)
        da_g = dc * gi * (1.0 - gg * gg)
        return da_i, da_f, da_o, da_g, dc

    @triton.jit
    def _store_gates(ptr, off, j, H, m, gi, gf, go, gg):
        tl.store(ptr + off + (0 * H + j)[None, :], gi, mask=m)
        tl.store(ptr + off + (1 * H + j)[None, :], gf, mask=m)
        tl.store(ptr + off + (2 * H + j)[None, :], go, mask=m)
        tl.store(ptr + off + (3 * H + j)[None, :], gg, mask=m)

    @triton.jit
    def forward_resident(xp_ptr, s_ptr, r_ptr, w_ptr, hs_ptr, cs_ptr, act_ptr, len_ptr, order_ptr, steps_ptr,
                          N, H, BN: tl.constexpr, BH: tl.constexpr, PREC: tl.constexpr):
        pid = tl.program_id(0)
        pos = pid * BN + tl.arange(0, BN)
        in_n = pos < N
        row = tl.load(order_ptr + pos, mask=in_n, other=0).to(tl.int64)  # (BN,) original rows
        length = tl.load(len_ptr + row, mask=in_n, other=0)
        j = tl.arange(0, BH)
        in_h = j < H
        m_row = in_n[:, None] & in_h[None, :]  # (BN, BH)
        w_i = _w_cols(w_ptr, H, 0, j, in_h, j, in_h)  # (BH, BH) each: on chip for the whole loop
        w_f = _w_cols(w_ptr, H, 1, j, in_h, j, in_h)
        w_o = _w_cols(w_ptr, H, 2, j, in_h, j, in_h)
        w_g = _w_cols(w_ptr, H, 3, j, in_h, j, in_h)
        s = _rows(s_ptr, row * H, j, m_row)  # (BN, BH)
        r_i = _rows(r_ptr, row * (4 * H), 0 * H + j, m_row)  # (BN, BH) each
        r_f = _rows(r_ptr, row * (4 * H), 1 * H + j, m_row)
        r_o = _rows(r_ptr, row * (4 * H), 2 * H + j, m_row)
        r_g = _rows(r_ptr, row * (4 * H), 3 * H + j, m_row)
        h = tl.zeros((BN, BH), dtype=tl.float32)
        c = tl.zeros((BN, BH), dtype=tl.float32)
        t_end = tl.load(steps_ptr + pid)  # this program's longest row
        for t in range(0, t_end):
            tv = tl.zeros((BN,), dtype=tl.int32) + t  # the step as a vector (no scalar masks: the interpreter)
            m = m_row & (tv < length)[:, None]
            step = tv * N + row  # (BN,) row index into the (T·N) step-major layout
            g4 = step * (4 * H)
            u = h * s
            a_i = _rows(xp_ptr, g4, 0 * H + j, m) + tl.dot(u, w_i, input_precision=PREC) * r_i
            a_f = _rows(xp_ptr, g4, 1 * H + j, m) + tl.dot(u, w_f, input_precision=PREC) * r_f
            a_o = _rows(xp_ptr, g4, 2 * H + j, m) + tl.dot(u, w_o, input_precision=PREC) * r_o
            a_g = _rows(xp_ptr, g4, 3 * H + j, m) + tl.dot(u, w_g, input_precision=PREC) * r_g
            gi, gf, go, gg, c, h = _cell(a_i, a_f, a_o, a_g, c)
            _store_gates(act_ptr, g4[:, None], j, H, m, gi, gf, go, gg)
            tl.store(cs_ptr + (step * H)[:, None] + j[None, :], c, mask=m)
            tl.store(hs_ptr + (step * H)[:, None] + j[None, :], h, mask=m)

    @triton.jit
    def forward_tiled(xp_ptr, s_ptr, r_ptr, w_ptr, hs_ptr, cs_ptr, act_ptr, len_ptr, order_ptr, steps_ptr,
                      N, H, BN: tl.constexpr, BJ: tl.constexpr, PREC: tl.constexpr):
        pid = tl.program_id(0)
        pos = pid * BN + tl.arange(0, BN)
        in_n = pos < N
        row = tl.load(order_ptr + pos, mask=in_n, other=0).to(tl.int64)
        length = tl.load(len_ptr + row, mask=in_n, other=0)
        r4 = row * (4 * H)
        t_end = tl.load(steps_ptr + pid)
        for t in range(0, t_end):
            tv = tl.zeros((BN,), dtype=tl.int32) + t  # the step as a vector (no scalar masks: the interpreter)
            alive = in_n & (tv < length)  # (BN,)
            has_prev = alive & (tv > 0)
            step = tv * N + row
            prev = tl.maximum(tv - 1, 0) * N + row
            g4 = step * (4 * H)
            for j0 in range(0, H, BJ):  # output column tile j of every gate
                j = j0 + tl.arange(0, BJ)
                in_j = j < H
                m = alive[:, None] & in_j[None, :]  # (BN, BJ)
                acc_i = tl.zeros((BN, BJ), dtype=tl.float32)
                acc_f = tl.zeros((BN, BJ), dtype=tl.float32)
                acc_o = tl.zeros((BN, BJ), dtype=tl.float32)
                acc_g = tl.zeros((BN, BJ), dtype=tl.float32)
                for k0 in range(0, H, BJ):  # reduction over h_{t-1}'s units in chunks
                    k = k0 + tl.arange(0, BJ)
                    in_k = k < H
                    u = _rows(hs_ptr, prev * H, k, has_prev[:, None] & in_k[None, :]) * _rows(
                        s_ptr, row * H, k, in_n[:, None] & in_k[None, :])  # (BN, BJ): h_{t-1} ∘ s
                    acc_i += tl.dot(u, _w_cols(w_ptr, H, 0, k, in_k, j, in_j), input_precision=PREC)
                    acc_f += tl.dot(u, _w_cols(w_ptr, H, 1, k, in_k, j, in_j), input_precision=PREC)
                    acc_o += tl.dot(u, _w_cols(w_ptr, H, 2, k, in_k, j, in_j), input_precision=PREC)
                    acc_g += tl.dot(u, _w_cols(w_ptr, H, 3, k, in_k, j, in_j), input_precision=PREC)
                a_i = _rows(xp_ptr, g4, 0 * H + j, m) + acc_i * _rows(r_ptr, r4, 0 * H + j, m)
                a_f = _rows(xp_ptr, g4, 1 * H + j, m) + acc_f * _rows(r_ptr, r4, 1 * H + j, m)
                a_o = _rows(xp_ptr, g4, 2 * H + j, m) + acc_o * _rows(r_ptr, r4, 2 * H + j, m)
                a_g = _rows(xp_ptr, g4, 3 * H + j, m) + acc_g * _rows(r_ptr, r4, 3 * H + j, m)
                c_prev = _rows(cs_ptr, prev * H, j, has_prev[:, None] & in_j[None, :])
                gi, gf, go, gg, c, h = _cell(a_i, a_f, a_o, a_g, c_prev)
                _store_gates(act_ptr, g4[:, None], j, H, m, gi, gf, go, gg)
                tl.store(cs_ptr + (step * H)[:, None] + j[None, :], c, mask=m)
                tl.store(hs_ptr + (step * H)[:, None] + j[None, :], h, mask=m)
            tl.debug_barrier()  # h_t, c_t written by every thread before step t + 1 reads them

    @triton.jit
    def forward_wide(xp_ptr, s_ptr, r_ptr, w_ptr, hs_ptr, cs_ptr, act_ptr, len_ptr, order_ptr, steps_ptr,
                     N, H, BN: tl.constexpr, BH: tl.constexpr, BJ: tl.constexpr, PREC: tl.constexpr):
        """``forward_tiled`` with the reduction whole: h_{t-1} ∘ s (BN, BH) is read once a step (s once), and
        each column tile of a gate is one product over all BH units (w_t's (BH, BJ) block from L2)."""
        pid = tl.program_id(0)
        pos = pid * BN + tl.arange(0, BN)
        in_n = pos < N
        row = tl.load(order_ptr + pos, mask=in_n, other=0).to(tl.int64)
        length = tl.load(len_ptr + row, mask=in_n, other=0)
        r4 = row * (4 * H)
        k = tl.arange(0, BH)
        in_k = k < H
        s = _rows(s_ptr, row * H, k, in_n[:, None] & in_k[None, :])  # (BN, BH)
        t_end = tl.load(steps_ptr + pid)
        for t in range(0, t_end):
            tv = tl.zeros((BN,), dtype=tl.int32) + t  # the step as a vector (no scalar masks: the interpreter)
            alive = in_n & (tv < length)  # (BN,)
            has_prev = alive & (tv > 0)
            step = tv * N + row
            prev = tl.maximum(tv - 1, 0) * N + row
            g4 = step * (4 * H)
            u = _rows(hs_ptr, prev * H, k, has_prev[:, None] & in_k[None, :]) * s  # (BN, BH): h_{t-1} ∘ s
            for j0 in range(0, H, BJ):  # output column tile j of every gate
                j = j0 + tl.arange(0, BJ)
                in_j = j < H
                m = alive[:, None] & in_j[None, :]  # (BN, BJ)
                a_i = _rows(xp_ptr, g4, 0 * H + j, m) + tl.dot(u, _w_cols(w_ptr, H, 0, k, in_k, j, in_j),
                                                               input_precision=PREC) * _rows(r_ptr, r4, 0 * H + j, m)
                a_f = _rows(xp_ptr, g4, 1 * H + j, m) + tl.dot(u, _w_cols(w_ptr, H, 1, k, in_k, j, in_j),
                                                               input_precision=PREC) * _rows(r_ptr, r4, 1 * H + j, m)
                a_o = _rows(xp_ptr, g4, 2 * H + j, m) + tl.dot(u, _w_cols(w_ptr, H, 2, k, in_k, j, in_j),
                                                               input_precision=PREC) * _rows(r_ptr, r4, 2 * H + j, m)
                a_g = _rows(xp_ptr, g4, 3 * H + j, m) + tl.dot(u, _w_cols(w_ptr, H, 3, k, in_k, j, in_j),
                                                               input_precision=PREC) * _rows(r_ptr, r4, 3 * H + j, m)
                c_prev = _rows(cs_ptr, prev * H, j, has_prev[:, None] & in_j[None, :])
                gi, gf, go, gg, c, h = _cell(a_i, a_f, a_o, a_g, c_prev)
                _store_gates(act_ptr, g4[:, None], j, H, m, gi, gf, go, gg)
                tl.store(cs_ptr + (step * H)[:, None] + j[None, :], c, mask=m)
                tl.store(hs_ptr + (step * H)[:, None] + j[None, :], h, mask=m)
            tl.debug_barrier()  # h_t, c_t written by every thread before step t + 1 reads them

    @triton.jit
    def backward_resident(dhs_ptr, dcs_ptr, s_ptr, r_ptr, w_ptr, hs_ptr, cs_ptr, act_ptr, da_ptr, ds_ptr,
                           len_ptr, order_ptr, steps_ptr, N, H, BN: tl.constexpr, BH: tl.constexpr,
                           HAS_DH: tl.constexpr, HAS_DC: tl.constexpr, PREC: tl.constexpr):
        pid = tl.program_id(0)
        pos = pid * BN + tl.arange(0, BN)
        in_n = pos < N
        row = tl.load(order_ptr + pos, mask=in_n, other=0).to(tl.int64)
        length = tl.load(len_ptr + row, mask=in_n, other=0)
        j = tl.arange(0, BH)
        in_h = j < H
        m_row = in_n[:, None] & in_h[None, :]
        wt_i = _w_cols_t(w_ptr, H, 0, j, in_h, j, in_h)  # (BH, BH) each: w_tᵀ per gate, on chip
        wt_f = _w_cols_t(w_ptr, H, 1, j, in_h, j, in_h)
        wt_o = _w_cols_t(w_ptr, H, 2, j, in_h, j, in_h)
        wt_g = _w_cols_t(w_ptr, H, 3, j, in_h, j, in_h)
        s = _rows(s_ptr, row * H, j, m_row)
        r_i = _rows(r_ptr, row * (4 * H), 0 * H + j, m_row)
        r_f = _rows(r_ptr, row * (4 * H), 1 * H + j, m_row)
        r_o = _rows(r_ptr, row * (4 * H), 2 * H + j, m_row)
        r_g = _rows(r_ptr, row * (4 * H), 3 * H + j, m_row)
        dh_carry = tl.zeros((BN, BH), dtype=tl.float32)  # gradient of h_t from step t + 1
        dc_carry = tl.zeros((BN, BH), dtype=tl.float32)  # gradient of c_t from step t + 1
        d_s = tl.zeros((BN, BH), dtype=tl.float32)
        t_end = tl.load(steps_ptr + pid)
        for back in range(0, t_end):
            tv = tl.zeros((BN,), dtype=tl.int32) + (t_end - 1 - back)  # step t as a vector
            m = m_row & (tv < length)[:, None]
            m_prev = m & (tv > 0)[:, None]
            step = tv * N + row
            prev = tl.maximum(tv - 1, 0) * N + row
            g4 = step * (4 * H)
            gi = _rows(act_ptr, g4, 0 * H + j, m)
            gf = _rows(act_ptr, g4, 1 * H + j, m)
            go = _rows(act_ptr, g4, 2 * H + j, m)
            gg = _rows(act_ptr, g4, 3 * H + j, m)
            c = _rows(cs_ptr, step * H, j, m)
            c_prev = _rows(cs_ptr, prev * H, j, m_prev)
            dh = dh_carry
            dc = dc_carry
            if HAS_DH:
                dh += _rows(dhs_ptr, step * H, j, m)
            if HAS_DC:
                dc += _rows(dcs_ptr, step * H, j, m)
            da_i, da_f, da_o, da_g, dc = _cell_backward(dh, dc, gi, gf, go, gg, c, c_prev)
            da_i = tl.where(m, da_i, 0.0)
            da_f = tl.where(m, da_f, 0.0)
            da_o = tl.where(m, da_o, 0.0)
            da_g = tl.where(m, da_g, 0.0)
            _store_gates(da_ptr, g4[:, None], j, H, m, da_i, da_f, da_o, da_g)
            dc_carry = tl.where(m, dc * gf, 0.0)
            du = tl.dot(da_i * r_i, wt_i, input_precision=PREC)  # (BN, BH): gradient of h_{t-1} ∘ s
            du += tl.dot(da_f * r_f, wt_f, input_precision=PREC)
            du += tl.dot(da_o * r_o, wt_o, input_precision=PREC)
            du += tl.dot(da_g * r_g, wt_g, input_precision=PREC)
            d_s += du * _rows(hs_ptr, prev * H, j, m_prev)
            dh_carry = du * s
        tl.store(ds_ptr + (row * H)[:, None] + j[None, :], d_s, mask=m_row)

    @triton.jit
    def backward_tiled(dhs_ptr, dcs_ptr, s_ptr, r_ptr, w_ptr, hs_ptr, cs_ptr, act_ptr, da_ptr, du_ptr,
                       dh_buf, dc_buf, len_ptr, order_ptr, steps_ptr, N, H, BN: tl.constexpr, BJ: tl.constexpr,
                       HAS_DH: tl.constexpr, HAS_DC: tl.constexpr, PREC: tl.constexpr):
        pid = tl.program_id(0)
        pos = pid * BN + tl.arange(0, BN)
        in_n = pos < N
        row = tl.load(order_ptr + pos, mask=in_n, other=0).to(tl.int64)
        length = tl.load(len_ptr + row, mask=in_n, other=0)
        r4 = row * (4 * H)
        t_end = tl.load(steps_ptr + pid)
        for back in range(0, t_end):
            tv = tl.zeros((BN,), dtype=tl.int32) + (t_end - 1 - back)  # step t as a vector
            rd = (back % 2) * N + row  # carries into step t in dh_buf / dc_buf (2, N, H) ...
            wr = ((back + 1) % 2) * N + row  # ... and into step t - 1: double-buffered
            alive = in_n & (tv < length)
            has_prev = alive & (tv > 0)
            step = tv * N + row
            prev = tl.maximum(tv - 1, 0) * N + row
            g4 = step * (4 * H)
            for j0 in range(0, H, BJ):  # pass 1: the pre-activation gradients da_t, tile by tile
                j = j0 + tl.arange(0, BJ)
                in_j = j < H
                m = alive[:, None] & in_j[None, :]
                gi = _rows(act_ptr, g4, 0 * H + j, m)
                gf = _rows(act_ptr, g4, 1 * H + j, m)
                go = _rows(act_ptr, g4, 2 * H + j, m)
                gg = _rows(act_ptr, g4, 3 * H + j, m)
                c = _rows(cs_ptr, step * H, j, m)
                c_prev = _rows(cs_ptr, prev * H, j, has_prev[:, None] & in_j[None, :])
                dh = _rows(dh_buf, rd * H, j, m)
                dc = _rows(dc_buf, rd * H, j, m)
                if HAS_DH:
                    dh += _rows(dhs_ptr, step * H, j, m)
                if HAS_DC:
                    dc += _rows(dcs_ptr, step * H, j, m)
                da_i, da_f, da_o, da_g, dc = _cell_backward(dh, dc, gi, gf, go, gg, c, c_prev)
                _store_gates(da_ptr, g4[:, None], j, H, m, tl.where(m, da_i, 0.0), tl.where(m, da_f, 0.0),
                             tl.where(m, da_o, 0.0), tl.where(m, da_g, 0.0))
                tl.store(dc_buf + (wr * H)[:, None] + j[None, :], tl.where(m, dc * gf, 0.0),
                         mask=in_n[:, None] & in_j[None, :])
            tl.debug_barrier()  # da_t written before pass 2 reads it back
            for k0 in range(0, H, BJ):  # pass 2: du_t = Σ_gates (da_t ∘ r) @ w_tᵀ, chunk by chunk of units
                k = k0 + tl.arange(0, BJ)
                in_k = k < H
                mk = alive[:, None] & in_k[None, :]
                du = tl.zeros((BN, BJ), dtype=tl.float32)
                for j0 in range(0, H, BJ):
                    j = j0 + tl.arange(0, BJ)
                    in_j = j < H
                    m = alive[:, None] & in_j[None, :]
                    du += tl.dot(_rows(da_ptr, g4, 0 * H + j, m) * _rows(r_ptr, r4, 0 * H + j, m),
                                 _w_cols_t(w_ptr, H, 0, j, in_j, k, in_k), input_precision=PREC)
                    du += tl.dot(_rows(da_ptr, g4, 1 * H + j, m) * _rows(r_ptr, r4, 1 * H + j, m),
                                 _w_cols_t(w_ptr, H, 1, j, in_j, k, in_k), input_precision=PREC)
                    du += tl.dot(_rows(da_ptr, g4, 2 * H + j, m) * _rows(r_ptr, r4, 2 * H + j, m),
                                 _w_cols_t(w_ptr, H, 2, j, in_j, k, in_k), input_precision=PREC)
                    du += tl.dot(_rows(da_ptr, g4, 3 * H + j, m) * _rows(r_ptr, r4, 3 * H + j, m),
                                 _w_cols_t(w_ptr, H, 3, j, in_j, k, in_k), input_precision=PREC)
                tl.store(du_ptr + (step * H)[:, None] + k[None, :], du, mask=mk)  # s's gradient: outside
                s_k = _rows(s_ptr, row * H, k, in_n[:, None] & in_k[None, :])
                tl.store(dh_buf + (wr * H)[:, None] + k[None, :], tl.where(mk, du * s_k, 0.0),
                         mask=in_n[:, None] & in_k[None, :])
            tl.debug_barrier()  # this step's carries written before step t - 1 reads them


INT_ARGS = ("N", "H")  # the kernels' int arguments; the other non-constexpr ones are pointers
INDEX_ARGS = ("len_ptr", "order_ptr", "steps_ptr")  # int32 pointers; the rest point to float32


def build(name: str, constexprs: dict, num_warps: int, arch: int = 90) -> int:
    """Compile kernel ``name`` with ``constexprs`` for an NVIDIA GPU of compute capability ``arch`` without
    one (Triton's compiler and its bundled ptxas; not under the interpreter); its shared memory in bytes."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = globals()[name]
    signature = {a: "constexpr" if a in constexprs else "i32" if a in INT_ARGS else "*i32" if a in INDEX_ARGS
                 else "*fp32" for a in fn.arg_names}
    compiled = triton.compile(ASTSource(fn, signature, constexprs=constexprs), target=GPUTarget("cuda", arch, 32),
                              options={"num_warps": num_warps})
    return compiled.metadata.shared
