"""Training and scoring time of the classical baselines against the LSTMs, and the featurizer's time.

    .venv/bin/python -m benchmarks.baselines --features runs/data/bench2k/features-random
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
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks import report
from pipeline.core import fileio
from pipeline.core.contracts import DEFAULT_BATCH
from pipeline.data import features
from pipeline.tasks.mortality.baselines.config import BaselineConfig, BaselineKind
from pipeline.tasks.mortality.baselines.featurize import Featurizer
from pipeline.workflows.baselines_run import prediction_hours, train_baseline


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
    splits = load_all(fdir)
    cat = splits[0]
    for fs in splits[1:]:
        cat = concat(cat, fs)
    idx = np.arange(target) % len(cat)
    fz = Featurizer.from_vocab(fileio.read_json(fdir / "vocab.json"), prediction_hours(fdir), 24.0).fit(splits[0])
    return subset(cat, idx), fz


def subset(fs: features.FeatureSet, idx: np.ndarray) -> features.FeatureSet:
    """Rows ``idx`` of a FeatureSet (flat arrays re-offset)."""
    idx = np.asarray(idx, dtype=np.int64)
    b0, b1 = fs.bag_offsets[idx], fs.bag_offsets[idx + 1]
    nb = b1 - b0
    bags = np.concatenate([np.arange(a, b) for a, b in zip(b0, b1)]) if nb.sum() else np.zeros(0, np.int64)
    t0, t1 = fs.token_offsets[bags], fs.token_offsets[bags + 1]
    toks = np.concatenate([np.arange(a, b) for a, b in zip(t0, t1)]) if len(bags) else np.zeros(0, np.int64)
    return features.FeatureSet(
        keys=fs.keys[idx], label=fs.label[idx], n_events=fs.n_events[idx], context=fs.context[idx],
        bag_offsets=np.r_[0, np.cumsum(nb)].astype(np.int64), bag_hours=fs.bag_hours[bags],
        token_offsets=np.r_[0, np.cumsum(t1 - t0)].astype(np.int64), tokens=fs.tokens[toks], source=fs.source,
        observed_hours=None if fs.observed_hours is None else fs.observed_hours[idx],
        before_prediction_time=None if fs.before_prediction_time is None else fs.before_prediction_time[idx],
        values=None if fs.values is None else fs.values[toks])


def concat(a: features.FeatureSet, b: features.FeatureSet) -> features.FeatureSet:
    """``a``'s rows, then ``b``'s (flat arrays re-offset; context padded to the wider)."""
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
    command = report.command(__spec__.name)
    import torch

    from pipeline.runs.formats import load_model
    from pipeline.tasks.mortality import predict, risk
    from pipeline.tasks.mortality.baselines.model import BaselineModel
    from pipeline.tasks.mortality.train_config import TrainConfig
    from pipeline.workflows.train import train

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
            risk.score_features(model, test, samples, 1e-9, DEFAULT_BATCH)
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
    out["featurize"] = {"points": [{"admissions": n, "seconds": s, "per_admission_ms": 1000 * s / n}
                                   for n, s in points],
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


def render(r: dict) -> str:
    """docs/performance.md's figures:baselines section: training and scoring time of logreg / gbm against the
    LSTMs; the featurizer."""
    samples = r["samples"]
    head = (f"On `{r['features']}` ({r['test_admissions']:,} test admissions), {r['threads']} thread, load average "
            f"{r['load_average'][0]:.1f} on {r['cpus']} CPUs at the start, one process, back to back. Training: "
            f"the baselines' whole validation search as `train --model logreg|gbm` runs it (featurizing train and "
            f"val included, no MLflow); the LSTMs' default recipe for {r['lstm_steps']:,} steps (periodic "
            f"validation included, no MLflow). Scoring the test split: baselines one draw, LSTMs {samples} "
            f"samples per component (best of 3). Ratios against the rank-1 LSTM:")
    rows = [[name, f"{r['train_seconds'][name]:.1f}", f"{ratio['train']:.3f}", f"{r['score_seconds'][name]:.3f}",
             f"{ratio['score']:.4f}"] for name, ratio in r["ratios_to_rank1"].items()]
    out = [head, "", report.table(["model", "train s", "train / rank-1", "score test s", "score / rank-1"], rows), ""]
    lg, gb = r.get("logreg_fit"), r.get("gbm_fit")
    if lg and gb:
        out.append(f"Chosen on validation: logreg C = {lg['chosen']['C']:g} ({lg['chosen']['columns']:,} columns); "
                   f"gbm {gb['chosen']['max_leaf_nodes']} leaves, min {gb['chosen']['min_samples_leaf']} per leaf, "
                   f"{gb['chosen']['rounds']} rounds ({gb['chosen']['columns']:,} columns). Of the baselines' "
                   f"training time, featurizing: logreg {lg['featurize']:.1f} s, gbm {gb['featurize']:.1f} s.")
        out.append("")
    f = r["featurize"]
    prow = [[f"{p['admissions']:,}", f"{p['seconds']:.2f}", f"{p['per_admission_ms']:.3f}"] for p in f["points"]]
    extrapolated = (f"Extrapolated linearly from the largest to {f['target']:,} admissions (MIMIC-III's cohort): "
                    f"{f['extrapolated_target_seconds']:.1f} s. This is an extrapolation, not a measurement.")
    out += ["The featurizer (all three splits of each benchmark, best of 3):", "",
            report.table(["admissions", "seconds", "ms per admission"], prow), "", extrapolated]
    if "replicated" in f:
        rep = f["replicated"]
        out += ["", f"Measured on {rep['admissions']:,} admissions made by repeating the larger benchmark's "
                   f"(their shapes, not new patients): {rep['seconds']:.1f} s, {rep['stored_values']:,} stored values."]
    return "\n".join(out)


if __name__ == "__main__":
    main()
