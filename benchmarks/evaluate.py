"""Evaluation throughput: DEFAULT_SAMPLES samples x K draws of a rank-1 model against one deterministic pass.

    .venv/bin/python -m benchmarks.evaluate [--n 512] [--samples S] [--threads 2] [--blocks 3]
                                            [--batch-size 128] [--bootstrap 1000]

Random features shaped like the default synthetic benchmark (``train_throughput.random_features``),
default-size models with untrained weights (the cost does not depend on the values). Timed:
``evaluate.sample_logits`` (all S·K draws of a batch in one forward pass) for the rank-1 model
(K = 4) with ``--samples`` samples, the same with ``fast_inference = False`` (the training
path: tiled embeddings, per-row recurrence; same draws and logits), and for the deterministic
model with one sample, in alternating blocks (load from other processes hits all alike; the
median block counts).
Then ``evaluate.report_of`` (every metric, ``--bootstrap`` resamples, referral curve) on the
rank-1 logits. Admissions/s and the ratio are printed; nothing is compared with a fixed time.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.train_throughput import random_features
from pipeline.core import fileio
from pipeline.core.contracts import DEFAULT_BATCH, DEFAULT_SAMPLES
from pipeline.data import features


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=512, help="admissions evaluated per block")
    ap.add_argument("--samples", type=int, default=DEFAULT_SAMPLES, help="samples per mixture component (rank-1)")
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    ap.add_argument("--blocks", type=int, default=3, help="alternating timed blocks per model")
    ap.add_argument("--batch-size", type=int, default=DEFAULT_BATCH, help="admissions per forward pass")
    ap.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples in the metrics")
    args = ap.parse_args()
    import torch

    from pipeline.tasks.mortality import MortalityConfig, build_model
    from pipeline.workflows.evaluate import report_of, sample_logits

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        feats = random_features(Path(tmp), n=args.n)
        vocab = fileio.read_json(feats / "vocab.json")
        fs = features.load_split(feats / "train.parquet")
    cfg = MortalityConfig(len(vocab["tokens"]), len(vocab["context"]))
    torch.manual_seed(0)
    rank1 = build_model("rank1", cfg).eval()
    models = {"rank1": (rank1, args.samples, True), "rank1-training-path": (rank1, args.samples, False),
              "deterministic": (build_model("deterministic", cfg).eval(), 1, True)}
    secs: dict[str, list[float]] = {k: [] for k in models}
    logits = {}
    for name, (model, s, fast) in models.items():  # warm-up
        model.fast_inference = fast
        sample_logits(model, fs, 1, args.batch_size)
    for _ in range(args.blocks):
        for name, (model, s, fast) in models.items():
            model.fast_inference = fast
            t0 = time.perf_counter()
            out = sample_logits(model, fs, s, args.batch_size, seed=0)
            secs[name].append(time.perf_counter() - t0)
            logits[name] = out
    rank1.fast_inference = True
    t0 = time.perf_counter()
    report = report_of(logits["rank1"], fs.label, n_bootstrap=args.bootstrap)
    metrics_s = time.perf_counter() - t0
    k = models["rank1"][0].components
    rate = {name: args.n / statistics.median(v) for name, v in secs.items()}
    print(f"n={args.n} admissions (random features, {float(fs.n_bags.mean()):.1f} bags on average), batch "
          f"{args.batch_size}, {args.threads} torch threads, median of {args.blocks} alternating blocks")
    print(f"rank-1 {args.samples} samples x K={k} = {args.samples * k} draws: {rate['rank1']:8.1f} admissions/s "
          f"({statistics.median(secs['rank1']):.2f} s)")
    print(f"rank-1, training path (same draws):   {rate['rank1-training-path']:8.1f} admissions/s "
          f"({statistics.median(secs['rank1-training-path']):.2f} s); inference path "
          f"{rate['rank1'] / rate['rank1-training-path']:.2f}x faster, max |logit difference| "
          f"{float(np.abs(logits['rank1'] - logits['rank1-training-path']).max()):.2e}")
    print(f"deterministic, one pass:              {rate['deterministic']:8.1f} admissions/s "
          f"({statistics.median(secs['deterministic']):.2f} s)")
    ratio = rate["rank1"] / rate["deterministic"]
    print(f"ratio rank-1 ({args.samples * k} draws) / deterministic (one pass), admissions/s: {ratio:.4f}; "
          f"time per draw = {1 / (ratio * args.samples * k):.3f} x one deterministic pass")
    full = args.n / (statistics.median(secs["rank1"]) + metrics_s)
    print(f"metrics ({args.bootstrap} bootstrap resamples, referral curve): {metrics_s:.2f} s; whole evaluation "
          f"{full:.1f} admissions/s; nll={report['nll']:.4f}")


if __name__ == "__main__":
    main()
