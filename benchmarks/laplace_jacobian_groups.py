"""Per-admission cost of the subnetwork Jacobian against the size of the backward group.

    .venv/bin/python -m benchmarks.laplace_jacobian_groups [--features DIR] [--hidden 64 256] [--groups 1 2 4 8 16]
        [--admissions 64]

Each logit's backward pass runs over every admission computed with it, so the per-admission cost of
the Jacobian grows with the group (``pipeline.bayes.laplace.jacobian.MICRO_BATCH`` is the chosen size).
For every LSTM size of ``benchmarks/laplace_fit.py`` (its cached MAP runs and features) and every
group size: milliseconds per admission for the Jacobian with respect to all D weights and to 1,000
random weights, over ``--admissions`` training admissions (longest first, as the fit orders them),
after one warm-up group. Writes benchmarks/results/laplace_jacobian_groups.json (``--out``
elsewhere); the default path also rewrites the docs section that shows it (docs/laplace.md).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np

from benchmarks import report
from benchmarks.laplace_fit import add_map_options, map_run, start
from pipeline.data import batches
from pipeline.data.features import load_split

RESULT = report.results_path("laplace_jacobian_groups")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_map_options(ap)
    ap.add_argument("--hidden", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--groups", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    ap.add_argument("--admissions", type=int, default=64)
    ap.add_argument("--out", type=Path, default=RESULT)
    args = ap.parse_args()

    import torch

    from pipeline.bayes.laplace.jacobian import jacobian
    from pipeline.bayes.laplace.params import ParamVector, Substitution, frozen
    from pipeline.runs.formats import load_model

    measured, load_start, features = start(args)
    fs = load_split(features / "train.parquet")
    pick = np.random.default_rng(0).choice(len(fs), args.admissions, replace=False)
    pick = pick[np.argsort(-fs.n_bags[pick], kind="stable")]
    rows = []
    for hidden in args.hidden:
        model, _ = load_model(map_run(features, hidden, args.steps))
        layout = ParamVector.of(model)
        subset = torch.randperm(layout.size, generator=torch.Generator().manual_seed(0))[:1000].sort().values
        for name, idx in (("all", None), ("1000", subset)):
            sub = Substitution.of(layout, idx)
            with frozen(model):
                jacobian(model, batches.collate(fs, pick[:4]), sub, micro_batch=4)  # warm-up
                for g in args.groups:
                    groups = [batches.collate(fs, pick[i:i + g]) for i in range(0, len(pick), g)]
                    t0 = time.perf_counter()
                    for b in groups:
                        jacobian(model, b, sub, micro_batch=g)
                    ms = 1000 * (time.perf_counter() - t0) / len(pick)
                    rows.append({"hidden": hidden, "weights": name, "group": g, "ms_per_admission": ms})
                    print(f"LSTM {hidden:3d}, J w.r.t. {name:>4s} weights, groups of {g:2d}: {ms:6.2f} ms/admission",
                          flush=True)
    report.write_results("laplace_jacobian_groups", {
        **measured, "command": report.command(__spec__.name),
        "threads": args.threads, "admissions": args.admissions, "map_steps": args.steps, "cpu_count": os.cpu_count(),
        "loadavg_start": load_start, "loadavg_end": os.getloadavg(), "rows": rows,
    }, args.out)


if __name__ == "__main__":
    main()
