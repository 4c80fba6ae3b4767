"""Self-check of the fused rank-1 LSTM kernels on a device: the compiled Triton kernel against the reference,
outputs and gradients, several shapes; optionally the launch choices timed. Prints one JSON object.

    python -m benchmarks.fused_check [--device cuda] [--sweep] [--wide] [--json PATH]

1. ``kernel``: ``triton_lstm.fused_rank1_lstm`` in float32 against the same recurrence by autograd in
   float64 (``recurrence.run_recurrence``) on the same inputs, per shape (resident and tiled kernels, H
   padded or not, equal and variable lengths with rows of length 0): the largest absolute error of hs, cs and
   of the gradients of xp, s, r and w_t, each over the reference's largest magnitude (``rel``), for float32
   products ("ieee") and, on CUDA, TF32 ones; ``repeat``: a second run gives bit-identical outputs and
   gradients (no atomics: seeded runs repeat).
2. ``layer``: ``LSTMRank1`` (K = 4, two layers) with ``LSTMKernel.FUSED`` against ``LSTMKernel.REFERENCE`` on
   the same draws, both sampling modes, equal and variable lengths: the largest difference of the outputs,
   final states and every gradient (input and parameters), relative as above.
3. ``sweep`` (``--sweep``): forward + backward milliseconds of each launch choice (rows per program, warps,
   column tile, product precision) at 4,096 rows, T = 48, H = 64 and 256, variable lengths; a choice that does
   not compile is recorded with its error.

4. ``--wide`` instead of 1-3: the tiled kernels with the wide forward (``LaunchConfig.wide``) against the
   reference as in 1, and forward + backward milliseconds of the default tiled launch against the wide one at
   4,096 rows, T = 48, H = 256, variable lengths, both precisions (``wide_timing``).

``ok``: every float32 relative error under ``--tol`` and every repeat identical. Without CUDA it runs on CPU
tensors when Triton's interpreter is on (``TRITON_INTERPRET=1``; small shapes only: ``--small``).
"""

from __future__ import annotations

import argparse
import json
import time
import traceback
from pathlib import Path

SHAPES = [  # (T, N, H, variable lengths, kernel); kernel None: the default launch for the size
    (48, 256, 64, False, None), (48, 256, 64, True, None), (48, 256, 256, False, None), (48, 256, 256, True, None),
    (7, 50, 24, True, None), (9, 33, 100, True, None), (48, 4096, 64, True, None), (48, 4096, 256, True, None),
    (12, 64, 32, True, "tiled"),
]
SMALL = [(5, 21, 16, False, None), (5, 21, 16, True, None), (4, 20, 40, True, None), (4, 20, 32, True, "tiled")]
WIDE = [(48, 256, 256, False, "wide"), (9, 33, 100, True, "wide"), (48, 4096, 256, True, "wide")]
WIDE_SMALL = [(4, 20, 40, True, "wide"), (3, 17, 32, False, "wide")]


def _inputs(t: int, n: int, hid: int, variable: bool, device, seed: int = 0):
    import torch

    g = torch.Generator().manual_seed(seed)
    xp = torch.randn(t, n, 4 * hid, generator=g)
    s = 1 + 0.5 * torch.randn(n, hid, generator=g)
    r = 1 + 0.5 * torch.randn(n, 4 * hid, generator=g)
    w_t = torch.randn(hid, 4 * hid, generator=g) / hid**0.5
    lengths = torch.randint(0, t + 1, (n,), generator=g) if variable else torch.full((n,), t)
    if variable:
        lengths[0], lengths[1] = t, 0
    weights = torch.randn(2, t, n, hid, generator=g)  # the loss's weights on hs and cs
    return [v.to(device) for v in (xp, s, r, w_t)], lengths.to(device), weights.to(device)


def _grads(fn, args, weights):
    """Outputs and gradients of sum(w_h ∘ hs + w_c ∘ cs) in args."""
    import torch

    args = [a.detach().requires_grad_() for a in args]
    hs, cs = fn(*args)
    loss = (hs * weights[0]).sum() + (cs * weights[1]).sum()
    return [hs.detach(), cs.detach(), *torch.autograd.grad(loss, args)]


def _rel(got, ref) -> float:
    got, ref = got.detach().double(), ref.detach().double()
    return float((got - ref).abs().max() / ref.abs().max().clamp(min=1e-30))


def kernel_checks(shapes, device) -> list[dict]:
    """Part 1: the kernel against the float64 autograd recurrence."""
    import torch

    from pipeline.bayes.layers import triton_lstm
    from pipeline.bayes.layers.recurrence import run_recurrence, step_mask

    names = ["hs", "cs", "d_xp", "d_s", "d_r", "d_w_t"]
    precisions = ["ieee", "tf32"] if device.type == "cuda" else ["ieee"]
    rows = []
    for t, n, hid, variable, kernel in shapes:
        args, lengths, weights = _inputs(t, n, hid, variable, device)

        def reference(xp, s, r, w_t):
            hs, cs = run_recurrence(xp, lambda xt, h: xt + ((h * s) @ w_t) * r)
            keep = step_mask(lengths, t, xp.dtype).transpose(0, 1)  # (T, N, 1)
            return hs * keep, cs * keep
        ref = _grads(reference, [a.double() for a in args], weights.double())
        row = {"T": t, "N": n, "H": hid, "lengths": "variable" if variable else "equal"}
        for precision in precisions:
            overrides = ({"precision": precision} | ({"resident": False} if kernel in ("tiled", "wide") else {})
                         | ({"wide": True} if kernel == "wide" else {}))
            cfg = triton_lstm.launch_config(n, hid, device, **overrides)
            row["config"] = {k: v for k, v in vars(cfg).items() if k != "precision"}

            def fused(xp, s, r, w_t, cfg=cfg):
                return triton_lstm.fused_rank1_lstm(xp, lengths, s, r, w_t, cfg)
            try:
                got = _grads(fused, args, weights)
                again = _grads(fused, args, weights)
                row[precision] = {name: _rel(a, b) for name, a, b in zip(names, got, ref)}
                row[precision]["repeat"] = all(torch.equal(a, b) for a, b in zip(got, again))
            except Exception as exc:  # noqa: BLE001 - a kernel that fails to compile is the finding
                row[precision] = {"error": f"{type(exc).__name__}: {exc}"[:2000],
                                  "trace": traceback.format_exc()[-3000:]}
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def layer_checks(device, small: bool) -> list[dict]:
    """Part 2: the rank-1 LSTM layer, fused kernels against the reference ones, on the same draws."""
    import torch

    from pipeline.bayes.layers import LSTMKernel, LSTMRank1, Rank1Config, set_lstm_kernel, set_sampling

    k, b, t, d = 4, (3 if small else 64), (5 if small else 48), (3 if small else 33)
    rows = []
    for hid in ((16,) if small else (64, 256)):
        for sampling in ("per_example", "per_member"):
            for variable in (False, True):
                torch.manual_seed(0)
                lstm = LSTMRank1(d, hid, 2, components=k, config=Rank1Config(init_stddev=0.3)).to(device)
                set_sampling(lstm, sampling)
                x = torch.randn(k * b, t, d, device=device)
                lengths = torch.randint(0, t + 1, (k * b,)) if variable else torch.full((k * b,), t)
                lengths[0] = t
                lengths = lengths.to(device)
                results = []
                for kernel in (LSTMKernel.REFERENCE, LSTMKernel.FUSED):
                    set_lstm_kernel(lstm, kernel)
                    draws = lstm.draw(k * b, 1, generator=torch.Generator(device).manual_seed(1))
                    inp = x.clone().requires_grad_()
                    out, (h, c) = lstm.forward_with(inp, lengths, draws, 1)
                    g = torch.Generator(device).manual_seed(2)
                    loss = sum((v * torch.randn(v.shape, generator=g, device=device)).sum() for v in (out, h, c))
                    params = list(lstm.parameters())
                    grads = torch.autograd.grad(loss, [inp, *params], allow_unused=True)
                    results.append([out, h, c, *[torch.zeros_like(p) if q is None else q
                                                 for q, p in zip(grads, [inp, *params])]])
                rel = [_rel(a, r) for a, r in zip(results[1], results[0])]
                row = {"H": hid, "sampling": sampling, "lengths": "variable" if variable else "equal",
                       "outputs": max(rel[:3]), "gradients": max(rel[3:])}
                print(json.dumps(row), flush=True)
                rows.append(row)
    return rows


def sweep(device) -> list[dict]:
    """Part 3: forward + backward ms of each launch choice at 4,096 rows, T = 48, variable lengths."""
    import itertools

    import torch

    from pipeline.bayes.layers import triton_lstm

    rows = []
    for hid in (64, 256):
        args, lengths, weights = _inputs(48, 4096, hid, True, device)
        args = [a.requires_grad_() for a in args]
        grid = itertools.product((16, 32), (4, 8), (32,), ("ieee", "tf32"))  # 64 rows: over shared memory
        for block_rows, warps, cols, precision in grid:
            row = {"H": hid, "block_rows": block_rows, "num_warps": warps, "block_cols": cols, "precision": precision}
            try:
                cfg = triton_lstm.launch_config(4096, hid, device, block_rows=block_rows, num_warps=warps,
                                                block_cols=cols, precision=precision)
                times = []
                for i in range(7):  # two warm-ups (compilation), five timed
                    torch.cuda.synchronize(device)
                    start = time.perf_counter()
                    hs, cs = triton_lstm.fused_rank1_lstm(args[0], lengths, *args[1:], cfg)
                    ((hs * weights[0]).sum() + (cs * weights[1]).sum()).backward()
                    torch.cuda.synchronize(device)
                    if i >= 2:
                        times.append(1e3 * (time.perf_counter() - start))
                row["ms"] = sorted(times)[len(times) // 2]
            except Exception as exc:  # noqa: BLE001 - a choice that does not compile is recorded
                row["error"] = f"{type(exc).__name__}: {exc}"[:500]
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


def _ms(fn, device, reps: int = 5) -> float:
    """Median milliseconds of ``fn()`` after two warm-ups (compilation), each to the device's sync."""
    import torch

    times = []
    for i in range(reps + 2):
        torch.cuda.synchronize(device)
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize(device)
        if i >= 2:
            times.append(1e3 * (time.perf_counter() - start))
    return sorted(times)[len(times) // 2]


def wide_timing(device, hid: int = 256, rows: int = 4096) -> list[dict]:
    """Part 4: forward + backward ms of the default tiled launch and the wide forward, both precisions."""
    from pipeline.bayes.layers import triton_lstm

    args, lengths, weights = _inputs(48, rows, hid, True, device)
    args = [a.requires_grad_() for a in args]
    out = []
    for precision in ("ieee", "tf32"):
        for wide in (False, True):
            row = {"H": hid, "rows": rows, "precision": precision, "wide": wide}
            try:
                cfg = triton_lstm.launch_config(rows, hid, device, precision=precision, wide=wide)

                def step(cfg=cfg):
                    hs, cs = triton_lstm.fused_rank1_lstm(args[0], lengths, *args[1:], cfg)
                    ((hs * weights[0]).sum() + (cs * weights[1]).sum()).backward()
                row["ms"] = _ms(step, device)
            except Exception as exc:  # noqa: BLE001 - a choice that does not compile is recorded
                row["error"] = f"{type(exc).__name__}: {exc}"[:500]
            print(json.dumps(row), flush=True)
            out.append(row)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None, help="torch device (default: cuda when available, else cpu)")
    ap.add_argument("--small", action="store_true", help="small shapes only (the CPU's interpreter)")
    ap.add_argument("--sweep", action="store_true", help="also time the launch choices (CUDA)")
    ap.add_argument("--wide", action="store_true", help="only the wide tiled forward: checks and timing (part 4)")
    ap.add_argument("--tol", type=float, default=1e-4, help="largest relative error of a float32 check that passes")
    ap.add_argument("--json", type=Path, default=None, help="also write the JSON here")
    args = ap.parse_args()
    import torch

    from pipeline.bayes.layers import triton_lstm
    from pipeline.core.devices import resolve_device

    device = resolve_device(args.device)
    if not triton_lstm.available():
        raise SystemExit("fused_check: triton is not installed")
    if device.type == "cpu" and not triton_lstm.interpreted():
        raise SystemExit("fused_check: on the CPU set TRITON_INTERPRET=1 (Triton's interpreter)")
    import triton

    small = args.small or device.type == "cpu"
    result = {"torch": torch.__version__, "triton": triton.__version__, "device": str(device),
              "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"}
    if args.wide:
        result["kernel"], result["layer"] = kernel_checks(WIDE_SMALL if small else WIDE, device), []
        if device.type == "cuda":
            result["wide_timing"] = wide_timing(device)
    else:
        result |= {"kernel": kernel_checks(SMALL if small else SHAPES, device), "layer": layer_checks(device, small)}
    if args.sweep and device.type == "cuda" and not args.wide:
        result["sweep"] = sweep(device)
    checks = [v for row in result["kernel"] for v in [row.get("ieee", {})]]
    result["ok"] = (all("error" not in c and c["repeat"] and max(c[k] for k in c if k != "repeat") < args.tol
                        for c in checks)
                    and all(max(r["outputs"], r["gradients"]) < args.tol for r in result["layer"]))
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
