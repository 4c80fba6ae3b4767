"""Ghost BatchNorm's cost: a rank-1 Wide ResNet training step with BatchNorm over 64-row ghost batches
against the same step normalised over all its rows, in one process.

    .venv/bin/python -m benchmarks.ghost_bn [--depth 28 --width 10 --size 8 --batch 512] [--blocks 5]
        [--threads 1]

Issue 23's target: ghost BatchNorm (``bn_rows=64``, uncertainty-baselines' 64 rows per TPU core) costs at
most 5% of a WRN-28-10 step at 512 rows. Both variants are built from the same seed and take the same
tiled batch (``--batch`` rows: batch / K images tiled K times); their steps alternate block by block
(``vision_step.timed_blocks``: the median over blocks of the mean time per step), so load from other
processes hits them alike. ``--size`` is the image side: BatchNorm's work and the convolutions' both
grow with the pixels, so the ratio at 8x8 stands for 32x32 at a sixteenth of the time, with the
per-call overheads (the ghost grouping's reshapes among them) weighing more at the small size, not
less. The JSON goes to benchmarks/results/ghost_bn.json and docs/vision.md's section is rendered
from it.
"""

from __future__ import annotations

import argparse
import os
import platform

from benchmarks import report
from benchmarks.vision_step import _setup, timed_blocks

TARGET = 0.05  # at most 5% of the step


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--depth", type=int, default=28, help="WRN depth (6n + 4)")
    ap.add_argument("--width", type=int, default=10, help="WRN width multiplier")
    ap.add_argument("--size", type=int, default=8, help="image side (pixels)")
    ap.add_argument("--batch", type=int, default=512, help="tiled rows per training step")
    ap.add_argument("--k", type=int, default=4, help="ensemble size K")
    ap.add_argument("--bn-rows", type=int, default=64, help="rows per ghost batch")
    ap.add_argument("--steps", type=int, default=1, help="training steps per timing block")
    ap.add_argument("--blocks", type=int, default=5, help="interleaved timing blocks")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--json", type=str, default=None, help="write here instead of benchmarks/results/ghost_bn.json")
    args = ap.parse_args(argv)
    import torch

    measured_at = report.provenance()
    torch.set_num_threads(args.threads)
    steps = {"ghost": _setup("rank1", args, args.bn_rows)[1], "whole": _setup("rank1", args, None)[1]}
    step_s = timed_blocks(steps, args.steps, args.blocks)
    cost = step_s["ghost"] / step_s["whole"] - 1.0
    result = {**measured_at, "command": report.command("benchmarks.ghost_bn"),
              "arch": f"WRN-{args.depth}-{args.width} at {args.size}x{args.size}", "k": args.k,
              "batch": args.batch, "bn_rows": args.bn_rows, "threads": args.threads, "blocks": args.blocks,
              "steps_per_block": args.steps, "step_seconds": step_s, "ghost_cost": cost, "target": TARGET,
              "torch": torch.__version__, "python": platform.python_version(),
              "load_average_after": list(os.getloadavg())}
    print(f"{result['arch']}, rank-1 K={args.k}, {args.batch} tiled rows, {args.threads} thread(s)")
    for name, s in step_s.items():
        print(f"train step  {name:6s} {s:8.3f} s")
    print(f"ghost BatchNorm over {args.bn_rows} rows: {100 * cost:+.1f}% of the step (target <= {100 * TARGET:g}%)")
    report.write_results("ghost_bn", result, args.json)
    return result


def render(r: dict) -> str:
    """docs/vision.md's figures:ghost_bn section."""
    s = r["step_seconds"]
    met = "met" if r["ghost_cost"] <= r["target"] else "not met"
    return "\n".join([
        f"{r['arch']}, rank-1 K = {r['k']}, {r['batch']} tiled rows per step, {r['threads']} thread(s), median over "
        f"{r['blocks']} interleaved blocks (load average {r['load_average_after'][0]:.1f} after):", "",
        report.table(["BatchNorm over", "training step"],
                     [[f"ghost batches of {r['bn_rows']} rows", f"{s['ghost']:.3f} s"],
                      [f"all {r['batch']} rows", f"{s['whole']:.3f} s"]]), "",
        f"Ghost BatchNorm costs **{100 * r['ghost_cost']:+.1f}%** of the step (target at most "
        f"{100 * r['target']:g}%: {met})."])


if __name__ == "__main__":
    main()
