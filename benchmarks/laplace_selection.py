"""A first look at the selection rules: validation NLL of each Laplace variant of one MAP run.

    .venv/bin/python benchmarks/laplace_selection.py [--features DIR] [--hidden 64] [--size 1000] [--steps 400]
        [--threads 1]

Uses the default synthetic benchmark and the MAP run of ``benchmarks/laplace_fit.py`` (same cache;
made if missing). For wasserstein (with and without ``skip_unused``), random and magnitude at S =
``--size``, last-layer and diagonal Laplace: λ chosen on the validation split over the default grid,
and the validation NLL of the probit predictive at that λ next to the MAP model's. Validation only
(the split λ was chosen on, so optimistic for every variant alike): this is no substitute for the
compare table on test over seeds and splits (docs/experiments/2026-12-01-laplace-comparison.md).
Writes benchmarks/results/laplace_selection.json (``--out`` elsewhere); the default path also
rewrites the docs section that shows it (``benchmarks/report.py``: docs/laplace.md).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import report  # noqa: E402  (benchmarks/report.py)
from laplace_fit import default_features, map_run  # noqa: E402

from pipeline.data.features import load_split  # noqa: E402

RESULT = Path(__file__).resolve().parent / "results" / "laplace_selection.json"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--features", type=Path, default=None,
                    help="features directory (default: the synthetic benchmark)")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--size", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=400, help="training steps of the MAP run")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=RESULT)
    args = ap.parse_args()

    import torch

    from pipeline.laplace import LaplaceConfig, fit_laplace
    from pipeline.runs.formats import load_model

    torch.set_num_threads(args.threads)
    measured = report.provenance()  # the checkout as the run starts
    load_start = os.getloadavg()
    features = args.features or default_features()
    model, info = load_model(map_run(features, args.hidden, args.steps))
    train_fs, val_fs = load_split(features / "train.parquet"), load_split(features / "val.parquet")
    variants = [
        {"selection": "wasserstein", "subnet_size": args.size},
        {"selection": "wasserstein", "subnet_size": args.size, "skip_unused": False},
        {"selection": "random", "subnet_size": args.size},
        {"selection": "magnitude", "subnet_size": args.size},
        {"selection": "last-layer", "subnet_size": None},
        {"hessian": "diag", "subnet_size": None},
    ]
    rows = []
    for kw in variants:
        t0 = time.perf_counter()
        laplace, fit = fit_laplace(model, train_fs, val_fs, LaplaceConfig(
            **kw, max_bags=info["max_bags"], max_tokens=info["max_tokens"]))
        row = {"variant": laplace.label + ("" if kw.get("skip_unused", True) else " (skip_unused off)"),
               "settings": kw, "seconds": time.perf_counter() - t0} | {
            k: getattr(fit, k) for k in ("subnet_size", "prior_precision", "subnet_prior_precision", "at_grid_edge",
                                            "val_nll_map", "val_nll", "unused_weights", "per_tensor", "grid")}
        rows.append(row)
        print(f"{row['variant']:42s} λ = {row['prior_precision']:9.4g}{' (grid edge)' if row['at_grid_edge'] else '':12s}"
              f" val NLL MAP {row['val_nll_map']:.5f} -> {row['val_nll']:.5f}", flush=True)
    report.write_results("laplace_selection", {
        **measured, "command": " ".join(["python benchmarks/laplace_selection.py", *sys.argv[1:]]),
        "features": str(features), "hidden": args.hidden, "map_steps": args.steps, "threads": args.threads,
        "cpu_count": os.cpu_count(), "loadavg_start": load_start, "loadavg_end": os.getloadavg(), "rows": rows,
    }, args.out)


if __name__ == "__main__":
    main()
