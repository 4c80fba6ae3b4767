"""How much of a benchmark's NLL gap to the true risk does averaging over trained runs remove?

    .venv/bin/python -m experiments.averaging_ceiling --bench runs/bench [--modes random --modes era]
        [--splits test] [--samples S] [--batch-size 128] [--threads 1] [--cache DIR] [--reference deterministic]

A Bayesian posterior (rank-1 mixture, deep ensemble) improves on a point estimate by averaging
predictions over plausible weights. Averaging whole trained runs (independent initialisations,
each already averaged over its own draws) shows how much of the models' error differs from run
to run, and so can be averaged away, on this training set. For each split mode and split this
prints, on the same admissions: each variant's mean single-run NLL and the NLL of its seed
ensemble (its runs' predictive probabilities averaged), the equal-weight pool of every run (weak
variants weigh as much as strong ones, so it is no upper bound), the true risk's NLL, and the
share of the mean ``--reference`` run's gap to the true risk (by default the deterministic variant's)
that the best seed ensemble removes, and each variant's mean calibration slope over its single runs
(``metrics.recalibration``; > 1: risks too close to the base rate).
A small share means the models' errors are mostly shared (features, architecture, this training
set), so averaging, Bayesian or not, cannot beat the point estimate by much there. Logits come
from ``paired_compare.run_logits`` (same settings and cache).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from experiments.paired_compare import _features, find_runs, run_logits
from pipeline.bayes import metrics
from pipeline.core.contracts import DEFAULT_BATCH


def pooled_nll(labels, probs: list[np.ndarray]) -> float:
    """NLL of the average of predictive probabilities (N,) each."""
    return float(metrics.nll_from_probs(labels, np.mean(probs, axis=0)).mean())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", type=Path, required=True, help="benchmark-models --out directory")
    ap.add_argument("--modes", action="append", help="split modes [random, era]")
    ap.add_argument("--splits", action="append", help="splits [test]")
    ap.add_argument("--samples", type=int, default=None,
                    help="samples per mixture component [the model's score_samples]")
    ap.add_argument("--batch-size", type=int, default=DEFAULT_BATCH, help="admissions per draw block (the grid's)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--cache", type=Path, default=None, help="logit cache directory [BENCH/paired-cache]")
    ap.add_argument("--reference", default="deterministic",
                    help="the variant whose mean single run's gap to the true risk the best seed ensemble is "
                         "measured against [deterministic]")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    cache = args.cache or args.bench / "paired-cache"
    runs = find_runs(args.bench)
    for mode in args.modes or ["random", "era"]:
        for split in args.splits or ["test"]:
            _, fs, risk, _ = _features(args.bench, mode, split)
            latest = {(r["model"], r["seed"]): r for r in runs if r["split_mode"] == mode}  # latest rerun wins
            if not latest:
                continue
            y = fs.label
            probs: dict[str, list[np.ndarray]] = {}
            singles: dict[str, list[float]] = {}
            slopes: dict[str, list[float]] = {}
            for (model, _), run in sorted(latest.items()):
                x = run_logits(run, fs, split, args.samples, args.batch_size, cache)
                probs.setdefault(model, []).append(metrics.predictive(x))
                singles.setdefault(model, []).append(metrics.mixture_nll(x, y))
                slopes.setdefault(model, []).append(metrics.recalibration(y, probs[model][-1]).slope)
            true = float(metrics.nll_from_probs(y, risk).mean()) if risk is not None else None
            print(f"\n[{mode} / {split}] n={len(fs)} deaths={int(y.sum())}"
                  + (f" true-risk nll={true:.4f} slope={metrics.recalibration(y, risk).slope:.3f}"
                     if true is not None else ""))
            print(f"{'variant':>18s} {'runs':>4s} {'single nll':>10s} {'seed ensemble':>13s} {'single slope':>12s}")
            for model in sorted(probs):
                print(f"{model:>18s} {len(probs[model]):4d} {np.mean(singles[model]):10.4f} "
                      f"{pooled_nll(y, probs[model]):13.4f} {np.mean(slopes[model]):12.3f}")
            every = [p for ps in probs.values() for p in ps]
            pool, single = pooled_nll(y, every), float(np.mean([v for vs in singles.values() for v in vs]))
            floor = metrics.ece_floor(y, np.mean(every, axis=0))
            print(f"{'equal-weight pool':>18s} {len(every):4d} {single:10.4f} {pool:13.4f}   ece "
                  f"{metrics.ece(y, np.mean(every, axis=0)):.4f} (floor {floor.mean:.4f})")
            best = min(probs, key=lambda m: pooled_nll(y, probs[m]))
            best_nll = pooled_nll(y, probs[best])
            if true is not None and args.reference in singles:
                det = float(np.mean(singles[args.reference]))
                print(f"best seed ensemble: {best} {best_nll:.4f}; it removes {(det - best_nll) / (det - true):.1%} "
                      f"of the mean {args.reference} run's gap to the true risk ({det - true:.4f}); "
                      f"{best_nll - true:.4f} remains")


if __name__ == "__main__":
    main()
