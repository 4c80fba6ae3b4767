"""How well each per-admission output of a trained grid tells a new era's admissions from the old era's.

    .venv/bin/python -m experiments.era_shift_auroc --bench runs/bench [--model rank1-gaussian]
        [--mode era] [--reference val] [--target test] [--bootstrap 1000] [--cache DIR] [--json PATH]

For every run of ``--model`` on the split mode ``--mode`` of the grid in ``--bench`` (``paired_compare.find_runs``:
its runs.json, labelled as ``compare`` labels them, the models from ``MLFLOW_TRACKING_URI``'s store), it draws the
logits of the ``--reference`` and ``--target`` splits (the era split: validation from the old era, test from the
new; ``paired_compare.run_logits``, the same draws and cache as ``paired_compare``: the model's score samples,
seed 0) and reads off each admission's risk (the predictive mean), risk sd and mutual information
(``metrics.Summary.from_draws``). The AUROC of each measure for "this admission is from the target split" (1: the
measure is higher on every new-era admission than on every old-era one; 0.5: no separation; below 0.5: lower on
the new era) is printed per seed, with a percentile bootstrap 95% interval that resamples each split's admissions
separately, and its mean over the seeds (``mean``: the same resamples for every seed, so the interval reflects
admission sampling, not seed noise). A model without weight uncertainty has sd and mutual information 0 for every
admission (AUROC 0.5 by ties). AUROC is unchanged by any increasing map of a measure: the recalibrated risk ranks
the admissions as the raw risk does wherever the map is strictly increasing.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from experiments.paired_compare import find_runs, run_logits
from pipeline.bayes import metrics
from pipeline.bayes.shift.ranks import u_test
from pipeline.core import fileio
from pipeline.core.contracts import DEFAULT_BATCH
from pipeline.data import features

MEASURES = ("mutual_info", "sd", "risk")  # the Summary columns compared (risk: the predictive mean)


def measures_of(logits: np.ndarray) -> dict[str, np.ndarray]:
    """Each admission's mutual information, risk sd and risk from its logit draws (S, K, N) or (D, N)."""
    s = metrics.Summary.from_draws(logits)
    return {"mutual_info": s.mutual_info, "sd": s.sd, "risk": s.mean}  # each (N,)


def shift_auroc(reference: np.ndarray, target: np.ndarray) -> float:
    """AUROC of a measure for target membership: P(target value > reference value) + half the ties (the shift
    check's effect size, ``shift.ranks.u_test``)."""
    return u_test(target, reference).auroc


def resamples(n_ref: int, n_target: int, n_bootstrap: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Bootstrap indices (B, n_ref) and (B, n_target), each split resampled on its own (its size kept)."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, n_ref, (n_bootstrap, n_ref)), rng.integers(0, n_target, (n_bootstrap, n_target))


def auroc_with_interval(per_seed: list[tuple[np.ndarray, np.ndarray]], idx: tuple[np.ndarray, np.ndarray]) -> dict:
    """Mean over the seeds of the AUROC of one measure (each seed: its (reference, target) values), and its 95%
    percentile interval over the shared resamples ``idx``."""
    point = float(np.mean([shift_auroc(r, t) for r, t in per_seed]))
    ir, it = idx
    reps = np.array([np.mean([shift_auroc(r[ir[b]], t[it[b]]) for r, t in per_seed]) for b in range(len(ir))])
    lo, hi = metrics.percentile_interval(reps)
    return {"auroc": point, "ci": [lo, hi]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", type=Path, required=True, help="benchmark-models --out directory (its runs.json)")
    ap.add_argument("--model", action="append", help="model label (pipeline.reports.compare labels) [rank1-gaussian]")
    ap.add_argument("--mode", default="era", help="split mode [era]")
    ap.add_argument("--reference", default="val", help="the old era's split [val]")
    ap.add_argument("--target", default="test", help="the new era's split [test]")
    ap.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples of each split's admissions")
    ap.add_argument("--batch-size", type=int, default=DEFAULT_BATCH, help="admissions per draw block (the grid's)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--cache", type=Path, default=None, help="logit cache directory [BENCH/paired-cache]")
    ap.add_argument("--json", type=Path, default=None, help="write the results as JSON here")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    cache = args.cache or args.bench / "paired-cache"
    fdir = args.bench / f"features-{args.mode}"
    fs = {split: features.load_split(fdir / f"{split}.parquet", values=True) for split in (args.reference, args.target)}
    n_ref, n_target = len(fs[args.reference]), len(fs[args.target])
    idx = resamples(n_ref, n_target, args.bootstrap)
    print(f"[{args.mode}] AUROC of each measure for '{args.target}' ({n_target} admissions) against "
          f"'{args.reference}' ({n_ref}); 95% bootstrap over each split's admissions ({args.bootstrap} resamples)")
    print(f"{'model':>16s} {'seed':>6s} " + " ".join(f"{m:>24s}" for m in MEASURES))
    results = []
    runs = find_runs(args.bench)
    for model in args.model or ["rank1-gaussian"]:
        chosen = {r["seed"]: r for r in runs if r["model"] == model and r["split_mode"] == args.mode}
        if not chosen:
            print(f"{model:>16s}: no runs on the {args.mode!r} split; skipped")
            continue
        values = {}  # seed -> split -> measure -> (N,)
        for seed, run in sorted(chosen.items()):
            values[seed] = {split: measures_of(run_logits(run, fs[split], split, None, args.batch_size, cache))
                            for split in (args.reference, args.target)}
        rows = [(str(s), [s]) for s in sorted(values)] + ([("mean", sorted(values))] if len(values) > 1 else [])
        for name, seeds in rows:
            cells, row = [], {"model": model, "split_mode": args.mode, "seed": name, "reference": args.reference,
                              "target": args.target, "n_reference": n_ref, "n_target": n_target}
            for m in MEASURES:
                r = auroc_with_interval([(values[s][args.reference][m], values[s][args.target][m]) for s in seeds], idx)
                row[m] = r
                cells.append(f"{r['auroc']:.3f} [{r['ci'][0]:.3f}, {r['ci'][1]:.3f}]")
            print(f"{model:>16s} {name:>6s} " + " ".join(f"{c:>24s}" for c in cells))
            results.append(row)
    if args.json:
        fileio.write_text(args.json, json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
