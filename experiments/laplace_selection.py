"""A first look at the selection rules: validation NLL of each Laplace variant of one MAP run.

    .venv/bin/python -m experiments.laplace_selection [--features DIR] [--hidden 64] [--size 1000] [--steps 400]
        [--threads 1]

Uses the default synthetic benchmark and the MAP run of ``benchmarks.laplace_fit`` (same cache;
made if missing). For wasserstein (with and without ``skip_unused``), random and magnitude at S =
``--size``, last-layer and diagonal Laplace: λ chosen on the validation split over the default grid,
and the validation NLL of the probit predictive at that λ next to the MAP model's. Validation only
(the split λ was chosen on, so optimistic for every variant alike): this is no substitute for the
compare table on test over seeds and splits (docs/experiments/2026-12-01-laplace-comparison.md).
Writes benchmarks/results/laplace_selection.json (``--out`` elsewhere); the default path also
rewrites the docs section that shows it (``render`` below: docs/laplace.md).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from benchmarks import report
from benchmarks.laplace_figures import lam
from benchmarks.laplace_fit import add_map_options, map_run, start
from pipeline.data.features import load_split

RESULT = report.results_path("laplace_selection")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_map_options(ap)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--size", type=int, default=1000)
    ap.add_argument("--out", type=Path, default=RESULT)
    args = ap.parse_args()

    from pipeline.bayes.laplace import LaplaceConfig
    from pipeline.runs.formats import load_model
    from pipeline.tasks.mortality.laplace import fit_laplace

    measured, load_start, features = start(args)
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
            **kw, max_bags=info.max_bags, max_tokens=info.max_tokens))
        row = {"variant": laplace.label + ("" if kw.get("skip_unused", True) else " (skip_unused off)"),
               "settings": kw, "seconds": time.perf_counter() - t0} | {
            k: getattr(fit, k) for k in ("subnet_size", "prior_precision", "subnet_prior_precision", "at_grid_edge",
                                            "val_nll_map", "val_nll", "unused_weights", "per_tensor", "grid")}
        rows.append(row)
        print(f"{row['variant']:42s} λ = "
              f"{row['prior_precision']:9.4g}{' (grid edge)' if row['at_grid_edge'] else '':12s} val NLL MAP "
              f"{row['val_nll_map']:.5f} -> {row['val_nll']:.5f}", flush=True)
    report.write_results("laplace_selection", {
        **measured, "command": report.command(__spec__.name),
        "features": str(features), "hidden": args.hidden, "map_steps": args.steps, "threads": args.threads,
        "cpu_count": os.cpu_count(), "loadavg_start": load_start, "loadavg_end": os.getloadavg(), "rows": rows,
    }, args.out, renderer="experiments.laplace_selection:render")


def _per_module(per_tensor: dict) -> str:
    """Selected weights per module (the first part of the parameter name), largest first."""
    counts: dict[str, int] = {}
    for name, n in per_tensor.items():
        counts[name.split(".")[0]] = counts.get(name.split(".")[0], 0) + n
    return ", ".join(f"{m} {n:,}" for m, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def render(r: dict) -> str:
    """docs/laplace.md's figures:laplace_selection section, from the results JSON."""
    rows = []
    map_nll = {round(row["val_nll_map"], 5) for row in r["rows"]}
    for row in r["rows"]:
        grid = [g["val_nll"] for g in row.get("grid", [])]
        ties = len(grid) > 1 and max(grid) - min(grid) == 0.0
        edge = " (grid edge" + (", every λ ties)" if ties else ")") if row["at_grid_edge"] else ""
        if row["settings"].get("hessian") == "diag":
            chosen = f"every weight (D = {row['subnet_size']:,}), diagonal"
        else:
            chosen = _per_module(row["per_tensor"])
        rows.append([row["variant"], f"{row['subnet_size']:,}", f"{lam(row['prior_precision'])}{edge}",
                     f"{row['val_nll']:.5f}", f"{row['val_nll'] - row['val_nll_map']:+.5f}", chosen])
    unused = max(row.get("unused_weights", 0) for row in r["rows"])
    head = (f"LSTM {r['hidden']} MAP run ({r['map_steps']} steps; {unused:,} of its weights have a zero GGN diagonal: "
            f"no training logit depends on them); λ chosen on the validation split over the default grid; validation "
            f"NLL of the probit predictive at that λ (MAP model: {', '.join(f'{v:.5f}' for v in sorted(map_nll))}):")
    return "\n".join([head, "",
                      report.table(["variant", "S", "λ", "validation NLL", "- MAP", "selected weights per module"],
                                       rows)])


if __name__ == "__main__":
    main()
