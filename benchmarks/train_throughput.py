"""Training throughput (admissions/s) at the default sizes: deterministic vs rank-1, one process.

    .venv/bin/python -m benchmarks.train_throughput [--data FEATURES_DIR] [--steps 40] [--threads 1]
        [--run rank1:default --run rank1:records-research ...]

``--run KIND:PRESET`` (repeatable) chooses what is compared (default: deterministic and rank-1 at
the default preset); ratios are against the first. A preset's whole training recipe is used (its
model size, batch, L2 placement), so ``rank1:records-research`` prices the authors' recipe per step.

Without ``--data`` it writes random features shaped like the default synthetic benchmark
(2,000 admissions, about 23 bags of about 31 tokens, 833 tokens) to a temporary directory.
Each measured step is the real training step (collate, forward, NLL + KL + L2, backward,
clipping, Adam). The two models run in alternating blocks so that load from other processes
hits both alike; the figure per model is the median over its blocks. "admissions/s" counts
distinct admissions (batch_size / K per step); "rows/s" counts tiled rows (batch_size per step).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from pipeline import engine as training
from pipeline.bayes.objective import Objective
from pipeline.core import fileio
from pipeline.core.contracts import FEATURES
from pipeline.data import batches, features  # noqa: E402
from pipeline.data.mimic.extraction.flow import write_parquet
from pipeline.tasks import mortality as models
from pipeline.tasks.mortality.train_config import TrainConfig

FEATURE_SCHEMA = FEATURES.arrow_schema()  # noqa: E402

KINDS = ("deterministic", "rank1")


def random_features(out: Path, n: int = 2000, n_tokens: int = 833, seed: int = 0) -> Path:
    """train.parquet and vocab.json with the default synthetic benchmark's shape."""
    rng = np.random.default_rng(seed)
    t = np.clip(rng.normal(23, 3, n).round().astype(int), 2, 38)  # bags per admission
    bags = [[sorted(set(rng.integers(1, n_tokens, size=int(np.clip(rng.normal(31, 9), 1, 91))).tolist()))
             for _ in range(k)] for k in t]
    cols = {
        "key": [f"{i:032x}" for i in range(n)], "label": (rng.random(n) < 0.1).astype(int).tolist(),
        "age": rng.uniform(20, 90, n).tolist(), "gender": ["M"] * n, "admission_type": ["EMERGENCY"] * n,
        "admission_location": ["X"] * n, "icu_system": ["carevue"] * n,
        "context": rng.integers(1, 23, size=(n, 4)).tolist(),
        "bag_hours": [[float(h) for h in range(-k + 1, 1)] for k in t], "bags": bags,
        "bag_values": [[[0.0] * len(b) for b in bs] for bs in bags],
        "n_events": [sum(len(b) for b in bs) for bs in bags],
        "observed_hours": [24.0] * n, "before_prediction_time": [False] * n,
    }
    write_parquet(pa.table(cols, schema=FEATURE_SCHEMA), out / "train.parquet")
    fileio.write_json(out / "vocab.json", {"tokens": ["<pad>"] + [f"t{i}" for i in range(1, n_tokens)],
                                       "context": ["<pad>"] + [f"c{i}" for i in range(1, 23)], "bins": {}})
    return out


def setup(kind: str, preset: str, fdir: Path, fs: features.FeatureSet, device: str = "cpu",
          lstm_kernel: str | None = None, **model_fields):
    """A closure timing real training steps of ``kind`` at ``preset`` (``model_fields`` override the preset's
    model settings, e.g. ``lstm_hidden``; ``lstm_kernel``: the rank-1 LSTM's kernels, ``layers.LSTMKernel``,
    None: its default) on ``device``; the admissions and rows per step."""
    import dataclasses

    import torch

    from pipeline.core.devices import to_device
    from pipeline.tasks.mortality import build_model

    vocab = fileio.read_json(fdir / "vocab.json")
    cfg = TrainConfig.from_preset(preset, progress=False)
    torch.manual_seed(0)
    mcfg = models.model_config(cfg.model, {"tokens": len(vocab["tokens"]), "context": len(vocab["context"])})
    model = build_model(kind, dataclasses.replace(mcfg, **model_fields)).to(device)
    if lstm_kernel is not None:
        from pipeline.bayes.layers import set_lstm_kernel

        set_lstm_kernel(model, lstm_kernel)
    objective = Objective(model, cfg.nll, len(fs), cfg.l2, cfg.train_samples, cfg.l2_in_kl, cfg.l2_biases)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    distinct = cfg.batch_size // model.components
    sampler = batches.TrainSampler(len(fs), distinct, seed=0)
    params = [p for p in model.parameters() if p.requires_grad]
    state = {"step": 0}

    def run(steps: int) -> float:
        """Seconds for ``steps`` training steps (on a GPU: until its queued work is done)."""
        start = time.perf_counter()
        for _ in range(steps):
            batch = batches.collate(fs, sampler.indices(state["step"]), cfg.max_bags, cfg.max_tokens)
            training.train_step(objective, optimizer, params, to_device(batch, device), 1.0, cfg.clip)
            state["step"] += 1
        if torch.device(device).type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter() - start

    return run, distinct, cfg.batch_size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, help="features directory (default: random features, benchmark shape)")
    ap.add_argument("--steps", type=int, default=40, help="measured steps per model (split into blocks)")
    ap.add_argument("--blocks", type=int, default=4, help="alternating blocks per model")
    ap.add_argument("--warmup", type=int, default=3, help="unmeasured steps per model first")
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    ap.add_argument("--run", action="append", default=None, metavar="KIND:PRESET",
                    help="model kind and training preset to time (repeatable; default deterministic:default, "
                         "rank1:default); ratios against the first")
    args = ap.parse_args()
    import torch

    runs = [tuple(r.split(":", 1)) if ":" in r else (r, "default") for r in args.run or [f"{k}:default" for k in KINDS]]
    names = [f"{k}:{p}" for k, p in runs]
    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        fdir = args.data or random_features(Path(tmp))
        fs = features.load_split(fdir / "train.parquet")
        runners = {name: setup(k, p, fdir, fs) for name, (k, p) in zip(names, runs)}
        for run, _, _ in runners.values():
            run(args.warmup)
        per_block = max(1, args.steps // args.blocks)
        secs: dict[str, list[float]] = {name: [] for name in names}
        for _ in range(args.blocks):
            for name in names:
                secs[name].append(runners[name][0](per_block) / per_block)
    print(f"features: {'random (benchmark shape)' if args.data is None else args.data}, admissions={len(fs)}, "
          f"torch threads={torch.get_num_threads()}, {args.blocks} blocks x {per_block} steps per model")
    step = {name: statistics.median(secs[name]) for name in names}
    for name in names:
        _, distinct, rows = runners[name]
        print(f"{name:30s} step={step[name] * 1000:8.1f} ms  admissions/s={distinct / step[name]:8.1f}  "
              f"rows/s={rows / step[name]:8.1f}  (distinct per step={distinct})")
    base = names[0]
    for name in names[1:]:
        rate = (runners[name][1] / step[name]) / (runners[base][1] / step[base])
        print(f"ratio {name} / {base}: step time {step[name] / step[base]:.3f}, admissions/s {rate:.3f}")

if __name__ == "__main__":
    main()
