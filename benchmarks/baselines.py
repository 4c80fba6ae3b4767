"""Training and scoring time of the classical baselines against the LSTMs, and the featurizer's time.

    .venv/bin/python benchmarks/baselines.py --features runs/data/bench2k/features-random
        [--lstm-steps 4000] [--samples S] [--target 58976] [--scale-features runs/data/bench8k/features-random]
        [--replicate] [--json PATH]

On one features directory (the default synthetic benchmark), in this one process with one
thread, timed back to back: training of ``logreg`` and ``gbm`` (featurizing train and val,
fitting every setting of their validation search, as ``train --model`` does, without MLflow) and
of the default ``rank1`` and ``deterministic`` LSTMs for ``--lstm-steps`` steps (periodic
validation included, no tracking); then scoring the test split with each (baselines: one draw;
LSTMs: ``--samples`` per component, the model's score_samples by default). Ratios are against the rank-1 LSTM's time.

The featurizer: its time per admission on this benchmark and on ``--scale-features`` (all three
splits of each), extrapolated linearly to ``--target`` admissions (MIMIC-III's cohort, 58,976:
labelled an extrapolation); with ``--replicate``, also measured directly on a FeatureSet of
``--target`` admissions made by repeating the larger benchmark's admissions (their shapes,
not new patients).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import report  # noqa: E402  (benchmarks/report.py)
from pipeline import fileio
from pipeline.data import features# noqa: E402
from pipeline.baselines.config import BaselineConfig, BaselineKind  # noqa: E402
from pipeline.baselines.featurize import Featurizer  # noqa: E402
from pipeline.contracts import DEFAULT_BATCH  # noqa: E402
from pipeline.workflows.baselines_run import prediction_hours, train_baseline  # noqa: E402


def load_all(fdir: Path) -> list[features.FeatureSet]:
    return [features.load_split(fdir / f"{s}.parquet") for s in ("train", "val", "test")]


def featurize_seconds(fdir: Path, repeat: int = 3) -> tuple[int, float]:
    """(admissions, best seconds) to featurize every split of ``fdir``."""
    vocab = fileio.read_json(fdir / "vocab.json")
    splits = load_all(fdir)
    fz = Featurizer.from_vocab(vocab, prediction_hours(fdir), 24.0).fit(splits[0])
    best = np.inf
    for _ in range(repeat):
        t = time.perf_counter()
        for fs in splits:
            fz.matrix(fs)
        best = min(best, time.perf_counter() - t)
    return sum(len(fs) for fs in splits), best


def replicated(fdir: Path, target: int) -> tuple[features.FeatureSet, Featurizer]:
    """A FeatureSet of ``target`` admissions repeating ``fdir``'s (all splits), and its featurizer."""
    from features_oracle import subset  # benchmarks/features_oracle.py

    splits = load_all(fdir)
    cat = splits[0]
    for fs in splits[1:]:
        cat = concat(cat, fs)
    idx = np.arange(target) % len(cat)
    fz = Featurizer.from_vocab(fileio.read_json(fdir / "vocab.json"), prediction_hours(fdir), 24.0).fit(splits[0])
    return subset(cat, idx), fz


def concat(a: features.FeatureSet, b: features.FeatureSet) -> features.FeatureSet:
    width = max(a.context.shape[1], b.context.shape[1])
    pad = lambda c: np.pad(c, ((0, 0), (0, width - c.shape[1])))  # noqa: E731
    return features.FeatureSet(
        keys=np.r_[a.keys, b.keys], label=np.r_[a.label, b.label], n_events=np.r_[a.n_events, b.n_events],
        context=np.vstack([pad(a.context), pad(b.context)]),
        bag_offsets=np.r_[a.bag_offsets, a.bag_offsets[-1] + b.bag_offsets[1:]],
        bag_hours=np.r_[a.bag_hours, b.bag_hours],
        token_offsets=np.r_[a.token_offsets, a.token_offsets[-1] + b.token_offsets[1:]],
        tokens=np.r_[a.tokens, b.tokens],
        values=None if a.values is None or b.values is None else np.r_[a.values, b.values])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--features", type=Path, required=True, help="features directory (the default benchmark)")
    ap.add_argument("--lstm-steps", type=int, default=4000, help="training steps of the LSTMs (the default: 4000)")
    ap.add_argument("--samples", type=int, default=None,
                    help="scoring samples per component of the LSTMs [the model's score_samples]")
    ap.add_argument("--target", type=int, default=58976, help="admissions to extrapolate the featurizer to")
    ap.add_argument("--scale-features", type=Path, default=None, help="a larger benchmark's features directory")
    ap.add_argument("--replicate", action="store_true", help="also featurize --target replicated admissions")
    ap.add_argument("--json", type=Path, default=None,
                    help="results JSON [benchmarks/results/baselines.json, which also re-renders the docs section]")
    args = ap.parse_args()
    measured = report.provenance()  # the checkout as the run starts
    command = " ".join(["benchmarks/baselines.py", *sys.argv[1:]])
    import torch

    from pipeline.models import predict
    from pipeline.baselines.model import BaselineModel
    from pipeline.runs.formats import load_model
    from pipeline.training import TrainConfig, train

    torch.set_num_threads(1)
    test = features.load_split(args.features / "test.parquet")
    out = {**measured, "command": command, "load_average": list(os.getloadavg()), "cpus": os.cpu_count(),
           "features": str(args.features), "threads": 1, "lstm_steps": args.lstm_steps, "samples": args.samples,
           "train_seconds": {}, "score_seconds": {}, "test_admissions": len(test)}
    models = {}
    with tempfile.TemporaryDirectory() as tmp:
        for kind in BaselineKind:
            t = time.perf_counter()
            r = train_baseline(args.features, kind, BaselineConfig(threads=1), out_dir=Path(tmp) / kind.value,
                               tracking=False)
            out["train_seconds"][kind.value] = time.perf_counter() - t
            out[f"{kind.value}_fit"] = {**r.seconds, "chosen": r.chosen}
            models[kind.value] = BaselineModel.load(r.model_file)
            print(f"train {kind.value}: {out['train_seconds'][kind.value]:.1f} s ({r.chosen})", flush=True)
        for kind in ("rank1", "deterministic"):
            cfg = TrainConfig(max_steps=args.lstm_steps, threads=1, progress=False)
            t = time.perf_counter()
            r = train(args.features, kind, cfg, out_dir=Path(tmp) / kind, tracking=False)
            out["train_seconds"][kind] = time.perf_counter() - t
            models[kind], info = load_model(r.best_checkpoint)
            out["samples"] = predict.score_samples(args.samples, info)
            print(f"train {kind}: {out['train_seconds'][kind]:.1f} s", flush=True)
    for name, model in models.items():
        samples = 1 if name in {k.value for k in BaselineKind} else out["samples"]
        best = np.inf
        for _ in range(3):
            t = time.perf_counter()
            predict.score_features(model, test, samples, 1e-9, DEFAULT_BATCH)
            best = min(best, time.perf_counter() - t)
        out["score_seconds"][name] = best
    ref_t, ref_s = out["train_seconds"]["rank1"], out["score_seconds"]["rank1"]
    print(f"\n{'model':14s} {'train s':>9s} {'x rank1':>8s} {'score s':>9s} {'x rank1':>8s}  (test: {len(test)} "
          f"admissions; LSTMs {args.lstm_steps} steps, {out['samples']} samples/component; baselines 1 draw)")
    for name in out["train_seconds"]:
        tr, sc = out["train_seconds"][name], out["score_seconds"][name]
        print(f"{name:14s} {tr:9.2f} {tr / ref_t:8.3f} {sc:9.3f} {sc / ref_s:8.4f}")
    out["ratios_to_rank1"] = {n: {"train": out["train_seconds"][n] / ref_t, "score": out["score_seconds"][n] / ref_s}
                              for n in out["train_seconds"]}
    # the featurizer at scale
    points = [featurize_seconds(args.features)]
    if args.scale_features:
        points.append(featurize_seconds(args.scale_features))
    per = [s / n for n, s in points]
    out["featurize"] = {"points": [{"admissions": n, "seconds": s, "per_admission_ms": 1000 * s / n} for n, s in points],
                        "extrapolated_target_seconds": float(per[-1] * args.target), "target": args.target}
    print("\nfeaturizer: " + "; ".join(f"{n} admissions {s:.2f} s ({1000 * s / n:.3f} ms each)" for n, s in points)
          + f"; extrapolated linearly from the largest to {args.target:,} admissions: {per[-1] * args.target:.1f} s")
    if args.replicate:
        big, fz = replicated(args.scale_features or args.features, args.target)
        t = time.perf_counter()
        x = fz.matrix(big)
        sec = time.perf_counter() - t
        out["featurize"]["replicated"] = {"admissions": len(big), "seconds": sec, "stored_values": int(x.vals.size)}
        print(f"featurizer measured on {len(big):,} replicated admissions: {sec:.1f} s, {x.vals.size:,} stored values")
    report.write_results("baselines", json.loads(json.dumps(out, default=str)), args.json)


if __name__ == "__main__":
    main()
