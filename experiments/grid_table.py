"""Several benchmark grids side by side: one model's metrics per grid, and each grid against the first, seed by seed.

    .venv/bin/python -m experiments.grid_table --grid runs/exp/8k-main --grid runs/exp/8k-r1-b256 ...
        [--model rank1-gaussian] [--mode random] [--split val] [--json PATH]

Reads the evaluated runs of a grid (``GRID/work/eval/<run id>``) from the tracking store
(``MLFLOW_TRACKING_URI``) through ``compare.collect``: of the runs of ``--model`` (a model label as ``compare``
gives it: a variant, ``logreg``, ``gbm``) on ``--mode``, and prints per grid: seeds, mean ± sd of
NLL, AUC-PR and ECE, and the NLL and ECE differences to the first grid on the same seeds (mean
± sd over seeds; the same admissions, so seed by seed the difference is paired). The admission-level
interval of a difference is ``paired_compare.py``'s (``--bench A --bench-b B``); this table is for
reading many grids at once. Reading validation reports only (the default) is how settings are
chosen here; test reports are read after the choice.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pipeline.core import fileio, tables
from pipeline.core.tables import mean_sd
from pipeline.reports.compare import TABLE_METRICS as METRICS


def grid_runs(grid: Path, model: str, mode: str, split: str) -> dict[int, dict]:
    """seed -> {metric: value} of ``model``'s runs on ``mode`` in a grid (``compare.collect`` over the runs
    the grid evaluated; the latest run of a seed wins)."""
    from pipeline.reports.compare import collect

    ids = sorted(d.name for d in (grid / "work" / "eval").iterdir() if (d / split / "metrics.json").exists())
    rows = sorted(collect(run_ids=ids), key=lambda r: r["start_time"]) if ids else []
    return {r["seed"]: {m: r.get(f"{split}_{m}") for m in METRICS} for r in rows
            if r["model"] == model and r["split_mode"] == mode}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid", type=Path, action="append", required=True, help="benchmark-models --out directories")
    ap.add_argument("--model", default="rank1-gaussian", help="model label")
    ap.add_argument("--mode", default="random", help="split mode")
    ap.add_argument("--split", default="val", help="val | test")
    ap.add_argument("--json", type=Path, default=None, help="write the rows as JSON")
    args = ap.parse_args()
    base = grid_runs(args.grid[0], args.model, args.mode, args.split)
    rows = []
    print(f"{args.model} on {args.mode} / {args.split}; diff = grid - {args.grid[0].name} on the same seeds")
    print(f"{'grid':24s} {'seeds':>5s} {'nll':>17s} {'auc_pr':>17s} {'ece':>17s} {'nll diff':>17s} {'ece diff':>17s}")
    for g in args.grid:
        runs = grid_runs(g, args.model, args.mode, args.split)
        row = {"grid": g.name, "seeds": sorted(runs)}
        for m in METRICS:
            row[m] = mean_sd(r[m] for r in runs.values())[:2]
        common = sorted(set(runs) & set(base))
        for m in ("nll", "ece"):
            row[f"{m}_diff"] = mean_sd(runs[s][m] - base[s][m] for s in common)[:2] if common else None
        rows.append(row)
        cell = lambda x: "n/a" if x is None else tables.cell(*x)  # noqa: E731
        print(f"{g.name:24s} {len(runs):5d} {cell(row['nll']):>17s} {cell(row['auc_pr']):>17s} {cell(row['ece']):>17s} "
              f"{cell(row['nll_diff']):>17s} {cell(row['ece_diff']):>17s}")
    if args.json:
        fileio.write_text(args.json, json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
