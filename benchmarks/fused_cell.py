"""The LSTM cell update of the evaluation path: eager ops against one torch.compile-fused kernel.

    .venv/bin/python -m benchmarks.fused_cell [--blocks 16] [--rows 128] [--hidden 64] [--threads 2]

``pipeline.bayes.layers.inference._layer`` updates the cell after each step's batched product with
eager in-place ops (``inference.cell_update``: one sigmoid over the four gates, then c and h/2).
This times that update (the path's own function) on
(blocks, rows, 4H) gates, the shape of one pass at the default sizes (4 samples x K = 4 blocks of
128 admissions, H = 64), against the same update fused by ``torch.compile`` (dynamic shapes,
writing into the same buffers), and against the step's ``torch.bmm`` itself, in one process.
It prints the compile time (what a scoring run would pay at every start) and the per-step
times; both versions' outputs are checked to agree. Reported as unavailable where
torch.compile cannot build (no C++ compiler).
"""

from __future__ import annotations

import argparse
import time

from benchmarks.score import best_rate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=16, help="weight draws per pass (samples x K)")
    ap.add_argument("--rows", type=int, default=128, help="admissions per block")
    ap.add_argument("--hidden", type=int, default=64, help="LSTM units H")
    ap.add_argument("--input", type=int, default=33, help="LSTM input size D (embedding + time)")
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    g, m, h, d = args.blocks, args.rows, args.hidden, args.input
    torch.manual_seed(0)
    gates = torch.randn(g, m, 4 * h)
    u_prev = torch.randn(g, m + 5, h)[:, :m]  # a strided view, as the path reads u_{t-1}
    z = torch.empty(g, m, d + h + 1)  # next step's input buffer: h/2 goes to columns d .. d + H
    kernel = torch.randn(g, d + h + 1, 4 * h) * 0.1

    from pipeline.bayes.layers.inference import cell_update

    def eager(a, u_prev, u_out, th, h_out):  # the path's own update: u = 2c, h/2 = o·(sigmoid(u) - 1/2)
        o, th = cell_update(a, u_prev, u_out, th)
        torch.mul(o, th, out=h_out)

    def cell(a, u_prev, u_out, h_out):
        i, f, o, g2 = torch.sigmoid(a).split(h, -1)
        u = f * u_prev + i * (4.0 * g2 - 2.0)
        u_out.copy_(u)
        h_out.copy_(o * (torch.sigmoid(u) - 0.5))

    u_e, th, u_c = torch.empty(g, m, h), torch.empty(g, m, h), torch.empty(g, m, h)
    h_e, h_c = torch.empty(g, m, h), z[..., d:d + h]
    t0 = time.perf_counter()
    try:
        fused = torch.compile(cell, dynamic=True)
        fused(gates, u_prev, u_c, h_c)
    except Exception as exc:  # noqa: BLE001 - a missing compiler shows up as many exception types
        print(f"torch.compile unavailable: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
        return
    compile_s = time.perf_counter() - t0
    eager(gates.clone(), u_prev, u_e, th, h_e)
    err = max(float((u_e - u_c).abs().max()), float((h_e - h_c).abs().max()))

    def per_step(fn) -> float:
        """Microseconds per call, best of repeated runs (``benchmarks.score.best_rate`` with 1 "FLOP" per call)."""
        return 1e6 / best_rate(fn, 1.0)

    work = gates.clone()
    t_copy = per_step(lambda: work.copy_(gates))  # eager works in place: refresh the gates, timed apart
    t_eager = per_step(lambda: (work.copy_(gates), eager(work, u_prev, u_e, th, h_e))) - t_copy
    t_fused = per_step(lambda: fused(gates, u_prev, u_c, h_c))
    out = torch.empty(g, m, 4 * h)
    t_bmm = per_step(lambda: torch.bmm(z, kernel, out=out))
    print(f"cell update on ({g}, {m}, {4 * h}) gates, {args.threads} threads; outputs agree to {err:.1e}")
    print(f"  torch.compile: {compile_s:.1f} s for the first call (compile, or the on-disk cache)")
    print(f"  eager {t_eager:.1f} us, fused {t_fused:.1f} us per step: fused/eager = {t_fused / t_eager:.2f}")
    print(f"  the step's bmm {t_bmm:.1f} us: a step (bmm + cell) saves {(t_eager - t_fused) / (t_bmm + t_eager):.1%} "
          f"fused")


if __name__ == "__main__":
    main()
