"""Building a training batch: ``batches.collate`` (numpy on the CPU) against ``resident.ResidentFeatures.gather``
(torch, the features resident on the device), on one device, as a ratio.

    python -m benchmarks.resident_batches [--device cpu] [--n 7000] [--size 16 --size 64 --size 256] [--threads 1]

Random features of the synthetic benchmark's shape (``device_training.shaped_features``); each size takes the
``TrainSampler``'s admissions of consecutive steps, the two builders in alternating blocks (median ms per
batch). On a GPU, ``collate`` includes the copy to the device (what a step waited for before the device data
path). Whether the CPU keeps ``collate`` is this ratio on the CPU.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", help="torch device of the resident features")
    ap.add_argument("--n", type=int, default=7000, help="training admissions (the 8k benchmark's 7,031)")
    ap.add_argument("--size", type=int, action="append", default=None, help="admissions a batch (repeatable; "
                    "default 16, 64, 256)")
    ap.add_argument("--blocks", type=int, default=5, help="alternating blocks per builder")
    ap.add_argument("--steps", type=int, default=30, help="batches per block")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = ap.parse_args()
    import torch

    from benchmarks.device_training import shaped_features
    from pipeline.core.devices import to_device
    from pipeline.data import batches, features, resident

    torch.set_num_threads(args.threads)
    device = torch.device(args.device)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    with tempfile.TemporaryDirectory() as tmp:
        fs = features.load_split(shaped_features(Path(tmp), args.n) / "train.parquet")
    res = resident.ResidentFeatures.of(fs, device)
    builders = {"collate": lambda i: to_device(batches.collate(fs, i), device), "gather": res.gather}
    print(f"{args.n} admissions, device {device}, {torch.get_num_threads()} thread(s); median ms per batch")
    for size in args.size or [16, 64, 256]:
        sampler = batches.TrainSampler(len(fs), size, 0)
        times: dict[str, list[float]] = {name: [] for name in builders}
        for block in range(args.blocks):
            for name, build in builders.items():
                start = time.perf_counter()
                for k in range(args.steps):
                    build(sampler.indices(block * args.steps + k))
                sync()
                times[name].append(1e3 * (time.perf_counter() - start) / args.steps)
        ms = {name: statistics.median(t) for name, t in times.items()}
        print(f"  {size:5d} admissions: collate {ms['collate']:8.2f} ms, gather {ms['gather']:8.2f} ms, "
              f"gather / collate {ms['gather'] / ms['collate']:.2f}")


if __name__ == "__main__":
    main()
