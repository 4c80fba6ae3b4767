"""The image models' training step in fp32 and in bf16 on one device, every method (part 4 of
``benchmarks.device_mortality``; not a script of its own).

Each method's Wide ResNet takes ``--vision-images`` distinct images a step (rank-1 and BatchEnsemble tile
them K times: K·B rows; the deep ensemble runs K networks on B images each); the deterministic network also
runs on K·B distinct images, the rows rank-1 computes on. Variants: ``fp32``; ``bf16`` (the training
step's autocast, ``pipeline.tasks.vision.train.step_autocast``); ``bf16_cl`` (bf16 with the model and images in
channels-last memory format). A step is forward, NLL + KL / N + L2 (``bayes.objective.Objective``),
backward and a Nesterov SGD step; the median over ``blocks`` interleaved blocks of the mean time per step,
each block timed to the device's synchronisation. Peak device memory per method on a GPU.
"""

from __future__ import annotations

import statistics
import time
import traceback

VARIANTS = {"fp32": ("fp32", False), "bf16": ("bf16", False), "bf16_cl": ("bf16", True)}  # precision, channels-last
METHODS = ("deterministic", "batchensemble", "rank1", "deep-ensemble")


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def step_closure(method: str, images: int, precision: str, channels_last: bool, args, device):
    """One training step of ``method`` on ``images`` distinct random images, as a closure."""
    import torch

    from pipeline.bayes.objective import Objective
    from pipeline.tasks.vision import VisionConfig, build_vision_model
    from pipeline.tasks.vision.train import step_autocast

    torch.manual_seed(0)
    cfg = VisionConfig(arch="wrn", depth=args.vision_depth, width=args.vision_width, method=method,
                       ensemble_size=args.components, num_classes=10, in_channels=3, bn_rows=args.vision_bn_rows)
    model = build_vision_model(cfg).to(device).train()
    x = torch.rand(images, 3, args.vision_size, args.vision_size, device=device)
    if channels_last:
        model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    batch = {"images": x, "label": torch.randint(0, 10, (images,), device=device)}
    loss_fn = Objective(model, "average", 50_000, 1e-4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, nesterov=True)

    def step() -> None:
        with step_autocast(device, precision):
            parts = loss_fn(batch, 1.0)
        parts["loss"].backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def time_variants(steps: dict, per_block: int, blocks: int, device) -> dict[str, float]:
    """Median over interleaved blocks of the mean milliseconds per step, after two warm-up steps each."""
    for step in steps.values():
        for _ in range(2):
            step()
    _sync(device)
    ms: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(blocks):
        for name, step in steps.items():
            start = time.perf_counter()
            for _ in range(per_block):
                step()
            _sync(device)
            ms[name].append(1e3 * (time.perf_counter() - start) / per_block)
    return {name: statistics.median(v) for name, v in ms.items()}


def vision_rows(args, device) -> list[dict]:
    """Part 4: per method (and the deterministic network on K·B images) the step in each variant."""
    import torch

    from pipeline.tasks.vision import Method

    k, b = args.components, args.vision_images
    runs = [(m, b) for m in METHODS] + [("deterministic", k * b)]
    per_block = max(1, args.vision_steps // 4)
    rows = []
    for method, images in runs:
        if device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
        tiled = images * (k if Method(method).tiled else 1)
        try:
            steps = {name: step_closure(method, images, prec, cl, args, device)
                     for name, (prec, cl) in VARIANTS.items()}
            ms = time_variants(steps, per_block, 4, device)
        except Exception as exc:  # noqa: BLE001 - one method's failure (memory, a kernel) is a finding
            traceback.print_exc()
            rows.append({"method": method, "images": images, "rows": tiled, "error": f"{type(exc).__name__}: {exc}"})
            continue
        row = {"method": method, "images": images, "rows": tiled, **{f"{v}_ms": ms[v] for v in VARIANTS},
               "bf16_ratio": min(ms["bf16"], ms["bf16_cl"]) / ms["fp32"],
               "peak_device_mb": torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None}
        print(f"  {method:13s} {images:5d} images ({tiled:5d} rows): fp32 {ms['fp32']:8.2f} ms  bf16 {ms['bf16']:8.2f}"
              f" ms  bf16 channels-last {ms['bf16_cl']:8.2f} ms  (best bf16 / fp32 {row['bf16_ratio']:.2f}x)",
              flush=True)
        rows.append(row)
        del steps
    return rows


def render_vision(rows: list[dict], c: dict) -> str:
    """The part's table for docs/performance.md."""
    from benchmarks import report

    body = [[x["method"], str(x["images"]), str(x["rows"]), f"failed: {x['error'][:80]}", "", "", "", ""]
            if "error" in x else
            [x["method"], str(x["images"]), str(x["rows"]), f"{x['fp32_ms']:.1f}", f"{x['bf16_ms']:.1f}",
             f"{x['bf16_cl_ms']:.1f}", f"{x['bf16_ratio']:.2f}x",
             f"{x['peak_device_mb']:,.0f}" if x.get("peak_device_mb") else "-"] for x in rows]
    return "\n".join([
        f"Image models, WRN-{c['vision_depth']}-{c['vision_width']} on {c['vision_size']}x{c['vision_size']} images, "
        f"one training step (forward, loss, backward, SGD), K = {c['components']}; bf16 = autocast, cl = "
        "channels-last (median over 4 interleaved blocks):", "",
        report.table(["method", "images", "rows", "fp32 ms", "bf16 ms", "bf16 cl ms", "best bf16 / fp32",
                      "peak MB"], body)])
