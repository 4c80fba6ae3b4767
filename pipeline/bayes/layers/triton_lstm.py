"""The rank-1 LSTM recurrence with per-row factors as Triton kernels: the whole time loop in one launch,
forward and backward (``fused_rank1_lstm``, a ``torch.autograd.Function``).

Same math as ``recurrence.rank1_recurrence``, gates in (i, f, o, g) order::

    a_t = xp_t + ((h_{t-1} ∘ s) @ w_t) ∘ r,   c_t = σ(f_t) c_{t-1} + σ(i_t) tanh(g_t),   h_t = σ(o_t) tanh(c_t)

with xp_t = ((x_t ∘ s_in) @ W_inᵀ) ∘ r_in + bias the input part, computed outside the kernel as one
product over every step (``rank1_layer``: autograd carries its gradients to x, W_in, r_in, s_in and the
bias), and the recurrent part inside: s (N, H) and r (N, 4H) are the recurrent kernel's per-row factors,
w_t (H, 4H) its permuted, transposed weight. tanh is 2·sigmoid(2x) - 1, as in the reference.

Layout: padded, time-major, xp (T, N, 4H), states (T, N, H), rows left-aligned with ``lengths`` (N,).
Each program runs ``block_rows`` rows through all of their steps; rows are visited in order of decreasing
length (a gather through ``order`` inside the kernel, no copy), so a program stops at its longest row
(``steps``), and padded steps are zero in the outputs. Two kernels per direction:

- *resident* (H padded to at most ``RESIDENT_MAX_HIDDEN`` = 64): the four (H, H) gate blocks of w_t,
  the factors and the state stay in registers for the whole loop; one ``tl.dot`` per gate and step.
- *tiled* (larger H, e.g. 256: w_t is 1 MiB in float32): each step reads h_{t-1} back from the output
  (L1/L2) and w_t in (``block_cols`` x ``block_cols``) blocks per gate (from L2, shared by all programs),
  a reduction loop per column tile, so no tile is wider than ``block_cols``; the backward carries its
  gradients through a small double-buffered scratch and computes the recurrent product in a second pass
  over the step's da; ``tl.debug_barrier`` orders one step's writes before the reads that follow within a
  program (each program owns its rows).

The backward kernel yields the pre-activation gradients da (T, N, 4H), which are xp's gradient, and
s's gradient (a per-row sum: in the resident kernel; from the tiled kernel's du_t, the gradient of
h_{t-1} ∘ s, afterwards); r's and w_t's gradients are two products over all steps afterwards (torch, no
loop). Products run in float32 with float32 accumulation: ``input_precision`` "ieee" when
``torch.get_float32_matmul_precision()`` is "highest" (the default), else "tf32" (tensor cores;
about 1e-3 relative error, what cuDNN's LSTM uses by default). With ``TRITON_INTERPRET=1`` set before
this module is imported the kernels run on CPU tensors (Triton's interpreter: the tests).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from pipeline.bayes.layers import triton_kernels as kernels

RESIDENT_MAX_HIDDEN = 64  # padded H up to which w_t (4 x H x H floats: 64 KiB at 64) stays in registers
WIDE_COLS = 16  # the wide forward's column tile: at 256 units its four (256, 16) blocks of w_t and h_{t-1} ∘ s take
# 148 KiB of shared memory on sm_90 (32 columns: 280 KiB, over a block's 227 KiB)
MIN_DOT = 16  # tl.dot needs every dimension >= 16


def available() -> bool:
    """Triton imports (the kernels can be compiled, or interpreted on CPU tensors)."""
    return kernels.KERNELS


def interpreted() -> bool:
    """The kernels run in Triton's interpreter (``TRITON_INTERPRET=1`` when triton was imported)."""
    return kernels.KERNELS and not isinstance(kernels.forward_resident, kernels.triton.runtime.JITFunction)


def _pow2(n: int, least: int = MIN_DOT) -> int:
    return max(least, 1 << max(0, int(n) - 1).bit_length())


@dataclass(frozen=True)
class LaunchConfig:
    """How one recurrence is launched (``launch_config`` picks it from the sizes and the device)."""

    block_rows: int  # rows per program (power of 2, >= 16)
    block_hidden: int  # H padded to a power of 2 (>= 16)
    block_cols: int  # tiled kernels: hidden units per column tile and reduction chunk (power of 2, >= 16)
    resident: bool  # True: w_t and the state in registers (block_hidden <= RESIDENT_MAX_HIDDEN); False: tiled
    num_warps: int  # warps per program
    precision: str  # tl.dot input precision: "ieee" (float32) or "tf32"
    wide: bool = False  # tiled forward: the reduction over all block_hidden units in one product per column tile
    # of WIDE_COLS (kernels.forward_wide), h_{t-1} ∘ s read once a step; False: in block_cols chunks (forward_tiled)

    def __post_init__(self) -> None:
        for name in ("block_rows", "block_hidden", "block_cols"):
            v = getattr(self, name)
            if v < MIN_DOT or v & (v - 1):
                raise ValueError(f"LaunchConfig.{name} must be a power of 2 >= {MIN_DOT}, got {v}")
        if self.resident and self.block_hidden > RESIDENT_MAX_HIDDEN:
            raise ValueError(f"LaunchConfig: a resident kernel holds at most {RESIDENT_MAX_HIDDEN} units, "
                             f"got {self.block_hidden}")
        if self.precision not in ("ieee", "tf32"):
            raise ValueError(f"LaunchConfig.precision must be 'ieee' or 'tf32', got {self.precision!r}")
        if self.wide and self.resident:
            raise ValueError("LaunchConfig.wide is a tiled forward's choice (resident=False)")

    def meta(self, forward: bool = False) -> dict:
        """The launch arguments of this config's kernels (``forward``: of its forward kernel, which may be wide)."""
        width = ({"BH": self.block_hidden} if self.resident else
                 {"BH": self.block_hidden, "BJ": WIDE_COLS} if self.wide and forward else {"BJ": self.block_cols})
        return {"BN": self.block_rows, **width, "PREC": self.precision, "num_warps": self.num_warps}

    def forward_kernel(self) -> str:
        """The name of this config's forward kernel (``triton_kernels``)."""
        return "forward_resident" if self.resident else "forward_wide" if self.wide else "forward_tiled"


def launch_config(rows: int, hidden: int, device: torch.device, **overrides) -> LaunchConfig:
    """Default launch for ``rows`` rows of ``hidden`` units on ``device`` (``overrides``: fields to set).

    Timed on one H200 (``benchmarks.fused_check --sweep``, Triton 3.6, 4,096 rows, T = 48; the
    2026-12-04 report docs/experiments/2026-12-04-gpu-first-run.md): 16 rows per program is fastest in
    both kernels; the resident kernel at 64 units takes 8 warps (forward + backward 2.0 ms in TF32, 2.8 ms
    in float32, against 2.3 / 5.6 ms at 4 warps), the tiled one at 256 units 4 warps (15.5 / 35.6 ms,
    against 18.1 / 37.3 at 8); below 64 units 4 warps, as built. Built without a GPU (``ptxas -v``), 16
    rows at these warps spill at most a few hundred bytes of registers in any kernel; 32 rows spill
    kilobytes in the resident forward at 64 units in float32; 64 rows spill in most kernels, and the
    resident backward at 64 units then needs 344 KiB of shared memory (a block may have 227 KiB).
    ``rows`` and ``device`` are for a rule tuned further."""
    del rows, device  # one choice for every size and device (the H200's timings)
    bh = _pow2(hidden)
    resident = bh <= RESIDENT_MAX_HIDDEN
    cfg = LaunchConfig(block_rows=MIN_DOT, block_hidden=bh, block_cols=32, resident=resident,
                       num_warps=8 if resident and bh >= 64 else 4,
                       precision="ieee" if torch.get_float32_matmul_precision() == "highest" else "tf32")
    return replace(cfg, **overrides) if overrides else cfg


def build(hidden: int, arch: int = 90, **overrides) -> dict[str, int]:
    """Compile the forward and backward kernels that ``launch_config`` picks for ``hidden`` units
    (``overrides``: its fields) for an NVIDIA GPU of compute capability ``arch``, without a GPU (not under
    the interpreter): shared memory bytes per kernel. tests/test_layers_fused_build.py checks the defaults."""
    cfg = launch_config(0, hidden, torch.device("cuda"), **overrides)
    kind = "resident" if cfg.resident else "tiled"
    meta, fmeta = cfg.meta(), cfg.meta(forward=True)
    warps = meta.pop("num_warps")
    fmeta.pop("num_warps")
    flags = {"HAS_DH": True, "HAS_DC": True}
    return {cfg.forward_kernel(): kernels.build(cfg.forward_kernel(), fmeta, warps, arch),
            f"backward_{kind}": kernels.build(f"backward_{kind}", meta | flags, warps, arch)}


def _schedule(lengths: Tensor, block_rows: int, t_len: int) -> tuple[Tensor, Tensor, Tensor]:
    """Rows by decreasing length (int32 (N,)), lengths clamped to [0, T] as int32 (N,) (no step outside the
    tensors, without a device sync to check), each program's longest row (int32 (P,))."""
    lengths = lengths.clamp(0, t_len)
    order = torch.sort(lengths, descending=True, stable=True).indices  # (N,)
    steps = lengths.index_select(0, order)[::block_rows]  # (P,): the first row of a block is its longest
    return order.to(torch.int32), lengths.to(torch.int32), steps.to(torch.int32).contiguous()


def _check_device(t: Tensor) -> None:
    if t.device.type == "cpu" and not interpreted():
        raise RuntimeError("fused_rank1_lstm: CPU tensors need Triton's interpreter (TRITON_INTERPRET=1 set before "
                           "pipeline.bayes.layers.triton_lstm is imported)")


class _FusedRank1(torch.autograd.Function):
    """hs, cs (T, N, H) of the rank-1 recurrence on xp (T, N, 4H); see the module docstring."""

    @staticmethod
    def forward(ctx, xp: Tensor, s: Tensor, r: Tensor, w_t: Tensor, lengths: Tensor,
                cfg: LaunchConfig) -> tuple[Tensor, Tensor]:
        t_len, n, four_h = xp.shape
        hid = four_h // 4
        order, lens, steps = _schedule(lengths, cfg.block_rows, t_len)
        hs, cs = xp.new_zeros(t_len, n, hid), xp.new_zeros(t_len, n, hid)  # zero at padding
        act = xp.new_empty(t_len, n, four_h)  # post-activation gates, read back at real steps only
        args = (xp, s, r, w_t, hs, cs, act, lens, order, steps, n, hid)
        grid = (steps.numel(),)  # one program per block of rows
        getattr(kernels, cfg.forward_kernel())[grid](*args, **cfg.meta(forward=True))
        ctx.cfg = cfg
        ctx.save_for_backward(s, r, w_t, hs, cs, act, lens, order, steps)
        ctx.set_materialize_grads(False)
        return hs, cs

    @staticmethod
    @once_differentiable
    def backward(ctx, d_hs: Tensor | None, d_cs: Tensor | None) -> tuple[Tensor | None, ...]:
        s, r, w_t, hs, cs, act, lens, order, steps = ctx.saved_tensors
        cfg = ctx.cfg
        t_len, n, hid = hs.shape
        da = act.new_zeros(t_len, n, 4 * hid)  # pre-activation gradients = xp's gradient (zero at padding)
        d_hs_, d_cs_ = (None if g is None else g.contiguous() for g in (d_hs, d_cs))
        dummy = act.new_zeros(1)  # stands in for a missing output gradient (never read: HAS_DH / HAS_DC)
        flags = {"HAS_DH": d_hs_ is not None, "HAS_DC": d_cs_ is not None}
        head = (dummy if d_hs_ is None else d_hs_, dummy if d_cs_ is None else d_cs_, s, r, w_t, hs, cs, act, da)
        tail = (lens, order, steps, n, hid)
        grid = (steps.numel(),)
        h_prev = torch.cat([hs.new_zeros(1, n, hid), hs[:-1]])  # (T, N, H): h_{t-1}, zero at t = 0
        if cfg.resident:
            d_s = act.new_empty(n, hid)  # every row written by its program
            kernels.backward_resident[grid](*head, d_s, *tail, **flags, **cfg.meta())
        else:
            du = act.new_zeros(t_len, n, hid)  # gradient of h_{t-1} ∘ s per step (zero at padding)
            bufs = act.new_zeros(2, 2, n, hid)  # dh and dc carries (2, N, H) each, double-buffered
            kernels.backward_tiled[grid](*head, du, bufs[0], bufs[1], *tail, **flags, **cfg.meta())
            d_s = (du * h_prev).sum(0)  # (T, N, H) -> (N, H)
        need_r, need_w = ctx.needs_input_grad[2], ctx.needs_input_grad[3]
        d_r = d_w_t = None
        if need_r or need_w:
            u = h_prev * s  # u_t = h_{t-1} ∘ s (T, N, H) (hs is zero at padding: da is zero there anyway)
            if need_r:  # sum over steps of da_t ∘ (u_t @ w_t): (T·N, H) @ (H, 4H) -> (T, N, 4H) -> (N, 4H)
                d_r = (da * (u.view(-1, hid) @ w_t).view(t_len, n, 4 * hid)).sum(0)
            if need_w:  # sum over steps and rows of u_tᵀ (da_t ∘ r): (H, T·N) @ (T·N, 4H)
                d_w_t = u.view(-1, hid).t() @ (da * r).view(-1, 4 * hid)
        return (da if ctx.needs_input_grad[0] else None, d_s if ctx.needs_input_grad[1] else None, d_r, d_w_t,
                None, None)


def fused_rank1_lstm(xp: Tensor, lengths: Tensor, s: Tensor, r: Tensor, w_t: Tensor,
                     config: LaunchConfig | None = None) -> tuple[Tensor, Tensor]:
    """The rank-1 recurrence in one launch per direction.

    xp (T, N, 4H): the input part of the pre-activations, gates (i, f, o, g); lengths (N,) real steps per
    row (left-aligned, 0 allowed; clamped to [0, T]); s (N, H), r (N, 4H): the recurrent kernel's per-row
    factors; w_t (H, 4H): its permuted, transposed weight. Returns every step's hidden and cell states
    (T, N, H) each, zero at padding; differentiable in xp, s, r and w_t (float32 throughout)."""
    if not kernels.KERNELS:
        raise RuntimeError("fused_rank1_lstm needs triton (pip install triton)")
    t_len, n, four_h = xp.shape
    hid = four_h // 4
    if four_h != 4 * hid or w_t.shape != (hid, four_h) or s.shape != (n, hid) or r.shape != (n, four_h):
        raise ValueError(f"fused_rank1_lstm: xp {tuple(xp.shape)}, s {tuple(s.shape)}, r {tuple(r.shape)}, "
                         f"w_t {tuple(w_t.shape)} do not fit (T, N, 4H), (N, H), (N, 4H), (H, 4H)")
    if lengths.shape != (n,):
        raise ValueError(f"fused_rank1_lstm: lengths must be ({n},), got {tuple(lengths.shape)}")
    _check_device(xp)
    if t_len == 0 or n == 0:
        empty = xp.new_zeros(t_len, n, hid)
        return empty, empty
    cfg = config if config is not None else launch_config(n, hid, xp.device)
    if cfg.block_hidden < hid:
        raise ValueError(f"fused_rank1_lstm: block_hidden {cfg.block_hidden} < H = {hid}")
    f32 = [v.float().contiguous() for v in (xp, s, r, w_t)]
    return _FusedRank1.apply(*f32, lengths.to(xp.device), cfg)


def rank1_layer(x: Tensor, lengths: Tensor, f: dict[str, Tensor],
                config: LaunchConfig | None = None) -> tuple[Tensor, Tensor]:
    """One multiplicative rank-1 LSTM layer on time-major x (T, N, D), zero at padding.

    ``f``: per-row factors in row order and the permuted kernels, as ``LSTMRank1._row_factors`` gives
    them: s_ih (N, D), r_ih (N, 4H), bias (N, 4H), s_hh (N, H), r_hh (N, 4H), w_ih (4H, D), w_hh_t (H, 4H).
    Returns hs, cs (T, N, H) each, zero at padding."""
    xs = x * f["s_ih"]  # (T, N, D) ∘ (N, D): the scaled input
    t_len, n, d = xs.shape
    # (T·N, D) @ (D, 4H) -> (T, N, 4H), then ∘ r_in + bias per row
    xw = (xs.reshape(t_len * n, d) @ f["w_ih"].t()).view(t_len, n, -1)
    xp = torch.addcmul(f["bias"], xw, f["r_ih"])  # (T, N, 4H)
    return fused_rank1_lstm(xp, lengths, f["s_hh"], f["r_hh"], f["w_hh_t"], config)
