"""Rank-1 Wide ResNet cost against the deterministic network, measured in one process.

    .venv/bin/python -m benchmarks.vision_step [--depth 16 --width 2 --size 16]
        [--batch 64] [--k 4] [--steps 8] [--blocks 5] [--eval-images 64] [--samples 25] [--threads 1]

1. Training step (forward, NLL + KL / N + L2, backward, SGD step) of rank-1 WRN with K members on
   a tiled batch of ``--batch`` rows (batch / K distinct images tiled K times, per-example factor
   draws) against the deterministic WRN on the same tiled batch (the same ``--batch`` rows);
   BatchEnsemble for reference. Target: rank-1 / deterministic <= ``TRAIN_TARGET``.
2. Evaluation throughput: rank-1 with ``--samples`` samples per member (per-member draws, S·K
   networks per image, no grad) against one deterministic pass over the same images.
   For scale, the deterministic network also runs on as many rows per forward pass as the rank-1
   evaluation (eval batch x S·K images): the per-draw cost at equal tensor sizes.
3. Peak RSS of each measurement, each run alone in a fresh child process (``VmHWM`` of
   /proc/self/status: the high-water mark of that process only).

Timings alternate between the variants in ``--blocks`` blocks, so load from other processes hits
them alike; each figure is the median over blocks of the mean time per step / pass; the ratios
are of those medians. The JSON goes to benchmarks/results/vision_step.json (``report.write_results``:
atomic, with the command and date; docs/vision.md's section is rendered from it).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import resource
import statistics
import subprocess
import time
from pathlib import Path

from benchmarks import report
from benchmarks.harness import ROOT

TRAIN_TARGET = 1.3  # issue 14's target: rank-1 training step / deterministic step


def _setup(method: str, args, bn_rows: int | None = 64) -> tuple:
    """The model and one training step of ``method`` (BatchNorm over ghost batches of ``bn_rows`` tiled rows;
    None: over the whole step)."""
    import torch

    from pipeline.tasks.vision import VisionConfig, build_vision_model
    from pipeline.tasks.vision.train import objective

    torch.manual_seed(0)
    cfg = VisionConfig(arch="wrn", depth=args.depth, width=args.width, method=method, ensemble_size=args.k,
                       num_classes=10, in_channels=3, bn_rows=bn_rows)
    k = cfg.components  # 1 for the deterministic network
    model = build_vision_model(cfg)
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, nesterov=True)
    distinct = args.batch // k  # the model tiles them K times: the tiled batch is args.batch rows for every method
    images = torch.rand(distinct, 3, args.size, args.size)
    labels = torch.randint(0, 10, (distinct,))

    def step() -> None:
        parts = objective(model, images, labels, 1.0, 50_000, 1e-4)
        parts["loss"].backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return model, step


def _eval_setup(method: str, args, rows_like_rank1: bool = False):
    import torch

    from pipeline.bayes.layers import Sampling, set_sampling
    from pipeline.tasks.vision import VisionConfig, build_vision_model

    torch.manual_seed(0)
    cfg = VisionConfig(arch="wrn", depth=args.depth, width=args.width, method=method, ensemble_size=args.k,
                       num_classes=10, in_channels=3)
    model = build_vision_model(cfg).eval()
    set_sampling(model, Sampling.PER_MEMBER)
    samples = args.samples if cfg.method.stochastic else 1  # a point model's draws are copies: one
    batch = args.eval_batch * (args.samples * args.k if rows_like_rank1 else 1)  # images per forward pass
    images = torch.rand(args.eval_images * (batch // args.eval_batch), 3, args.size, args.size)

    def run() -> None:
        with torch.no_grad():
            for start in range(0, images.shape[0], batch):
                model(images[start:start + batch], samples=samples)

    return run


def _child(kind: str, method: str, args, queue) -> None:
    import torch

    torch.set_num_threads(args.threads)
    fn = _setup(method, args)[1] if kind == "train" else _eval_setup(method, args)
    for _ in range(2 if kind == "train" else 1):
        fn()
    queue.put(vm_hwm_mib())


def vm_hwm_mib() -> float:
    """This process's peak resident set (VmHWM, reset by exec unlike ru_maxrss, which a spawned child
    inherits from the forking parent's size)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024.0  # kB -> MiB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def peak_rss_mib(kind: str, method: str, args) -> float:
    """Peak RSS (MiB) of a fresh process that builds the model and runs the measurement."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(kind, method, args, queue))
    proc.start()
    value = queue.get(timeout=600)
    proc.join()
    return value


def timed_blocks(fns: dict, reps: int, blocks: int) -> dict[str, float]:
    """Median over ``blocks`` of the mean seconds per call, variants interleaved block by block."""
    for fn in fns.values():
        fn()  # warm-up (allocator, oneDNN primitives)
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(blocks):
        for name, fn in fns.items():
            start = time.perf_counter()
            for _ in range(reps):
                fn()
            times[name].append((time.perf_counter() - start) / reps)
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--depth", type=int, default=16, help="WRN depth (6n + 4)")
    ap.add_argument("--width", type=int, default=2, help="WRN width multiplier")
    ap.add_argument("--size", type=int, default=16, help="image side (pixels)")
    ap.add_argument("--batch", type=int, default=64, help="tiled rows per training step")
    ap.add_argument("--k", type=int, default=4, help="ensemble size K")
    ap.add_argument("--steps", type=int, default=8, help="training steps per timing block")
    ap.add_argument("--blocks", type=int, default=5, help="interleaved timing blocks")
    ap.add_argument("--eval-images", type=int, default=64, help="images per evaluation timing")
    ap.add_argument("--eval-batch", type=int, default=16, help="images per evaluation forward pass")
    ap.add_argument("--samples", type=int, default=25, help="samples per member in rank-1 evaluation")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--no-rss", action="store_true", help="skip the peak-RSS child processes")
    ap.add_argument("--out", type=Path, default=report.results_path("vision_step"))
    args = ap.parse_args()

    import torch

    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "-uno"], cwd=ROOT, capture_output=True, text=True).stdout
    torch.set_num_threads(args.threads)
    train = {m: _setup(m, args)[1] for m in ("deterministic", "batchensemble", "rank1")}
    step_s = timed_blocks(train, args.steps, args.blocks)
    evals = {m: _eval_setup(m, args) for m in ("deterministic", "rank1")}
    draws = args.samples * args.k
    eval_s = timed_blocks({**evals, "deterministic_same_rows": _eval_setup("deterministic", args, True)}, 1,
                          args.blocks)
    eval_s["deterministic_same_rows"] /= draws  # seconds for eval_images images
    images_per_s = {m: args.eval_images / s for m, s in eval_s.items()}
    result = {
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "arch": f"WRN-{args.depth}-{args.width} at {args.size}x{args.size}",
        "train_step_seconds": step_s,
        "train_ratio_rank1_to_deterministic": step_s["rank1"] / step_s["deterministic"],
        "train_ratio_batchensemble_to_deterministic": step_s["batchensemble"] / step_s["deterministic"],
        "train_target_ratio": TRAIN_TARGET,
        "eval_images_per_second": images_per_s,
        "eval_rank1_draws_per_image": draws,
        "eval_ratio_rank1_to_one_deterministic_pass": eval_s["rank1"] / eval_s["deterministic"],
        "eval_ratio_per_draw": eval_s["rank1"] / eval_s["deterministic"] / draws,
        "eval_ratio_per_draw_same_rows": eval_s["rank1"] / eval_s["deterministic_same_rows"] / draws,
        "torch": torch.__version__, "python": platform.python_version(), "machine": platform.machine(),
        "commit": commit, "uncommitted_changes": [line[3:] for line in dirty.splitlines()],
        "load_average_after": list(os.getloadavg()),
    }
    if not args.no_rss:
        result["peak_rss_mib"] = {f"train_{m}": peak_rss_mib("train", m, args) for m in train}
        result["peak_rss_mib"].update({f"eval_{m}": peak_rss_mib("eval", m, args) for m in evals})
    report.write_results("vision_step", {"command": report.command(__spec__.name), **result},
                         path=args.out)  # adds the date; re-renders docs/vision.md's figures:vision_step
    print(f"{result['arch']}, K={args.k}, {args.batch} tiled rows per step, {args.threads} thread(s)")
    for m, s in step_s.items():
        print(f"train step  {m:14s} {1000 * s:8.1f} ms  ({s / step_s['deterministic']:.2f}x deterministic)")
    print(f"rank-1 / deterministic training step: {result['train_ratio_rank1_to_deterministic']:.2f}x (target <= "
          f"{TRAIN_TARGET:g})")
    what = {"rank1": f"{args.samples} samples x {args.k} members", "deterministic": "one pass",
            "deterministic_same_rows": f"one pass, {args.eval_batch * draws} images per forward"}
    for m, v in images_per_s.items():
        print(f"evaluation  {m:24s} {v:9.1f} images/s ({what[m]})")
    print(f"rank-1 {args.samples}-sample evaluation / one deterministic pass: "
          f"{result['eval_ratio_rank1_to_one_deterministic_pass']:.1f}x time "
          f"({result['eval_ratio_per_draw']:.2f}x per draw of {draws}; "
          f"{result['eval_ratio_per_draw_same_rows']:.2f}x per draw against equally large passes)")
    for name, mib in result.get("peak_rss_mib", {}).items():
        print(f"peak RSS    {name:20s} {mib:8.1f} MiB")


def render(r: dict) -> str:
    """docs/vision.md's figures:vision_step* sections, from the results JSON."""
    c, t, e = r["config"], r["train_step_seconds"], r["eval_images_per_second"]
    ratio = r["train_ratio_rank1_to_deterministic"]
    load = r.get("load_average_after")
    head = (f"`benchmarks/vision_step.py --steps {c['steps']} --blocks {c['blocks']}`: {r['arch']} "
            f"({c.get('width')} x 16/32/64 filters), K = {c['k']}, a tiled batch of {c['batch']} rows "
            f"({c['batch'] // c['k']} distinct images tiled {c['k']} times; the deterministic network gets the same "
            f"rows), {c['threads']} thread(s); medians over {c['blocks']} interleaved blocks of {c['steps']} steps"
            + (f"; load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1 / 5 / 15 min) at the end" if load
               else "")
            + ":")
    rows = [
        ["training step, deterministic", f"{t['deterministic'] * 1e3:.0f} ms", "1.00"],
        ["training step, BatchEnsemble", f"{t['batchensemble'] * 1e3:.0f} ms",
         f"{r['train_ratio_batchensemble_to_deterministic']:.2f}"],
        ["training step, rank-1 (per-example draws)", f"{t['rank1'] * 1e3:.0f} ms", f"**{ratio:.2f}**"],
        ["evaluation, deterministic, one pass", f"{e['deterministic']:.0f} images/s", ""],
        [f"evaluation, rank-1, {c['samples']} samples x {c['k']} members ({r['eval_rank1_draws_per_image']} draws)",
         f"{e['rank1']:.2f} images/s", f"{r['eval_ratio_rank1_to_one_deterministic_pass']:.0f}x"],
        ["the same per draw; per draw against deterministic passes of "
         f"{c['eval_batch'] * r['eval_rank1_draws_per_image']:,} images", "",
         f"{r['eval_ratio_per_draw']:.2f}x; {r['eval_ratio_per_draw_same_rows']:.2f}x"],
    ]
    rss = r.get("peak_rss_mib")
    if rss:
        rows.append(["peak RSS (each alone in a fresh process): training det / BE / rank-1",
                     f"{rss['train_deterministic']:.0f} / {rss['train_batchensemble']:.0f} / {rss['train_rank1']:.0f} "
                     "MiB", ""])
        rows.append([f"peak RSS: evaluation det / rank-1 ({c['eval_batch']} images x {r['eval_rank1_draws_per_image']} "
                     "draws per pass)", f"{rss['eval_deterministic']:.0f} / {rss['eval_rank1']:.0f} MiB", ""])
    met = "met" if ratio <= r.get("train_target_ratio", TRAIN_TARGET) else "**not met**"
    return (head + "\n\n" + report.table(["", "time or rate", "ratio"], rows)
            + f"\n\nTraining target (rank-1 at most {r.get('train_target_ratio', TRAIN_TARGET):g}x the "
              f"deterministic step): {met} ({ratio:.2f}x).")


if __name__ == "__main__":
    main()
