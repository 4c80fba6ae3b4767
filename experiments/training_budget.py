"""The training budget without a step cap (issue 45, item 1), simulated on long runs' validation curves.

    .venv/bin/python -m experiments.training_budget --bench 8k=runs/budget8k --bench full=runs/conv
        [--modes random] [--json PATH]

The rule, written before the first result: docs/experiments/2026-12-06-training-budget.md. Each ``--bench
SCALE=DIR`` is a ``benchmark-models`` grid whose runs trained to their 40-epoch ceiling (or stopped by a
patience longer than every candidate's). Each candidate (``CANDIDATES``) is simulated on every run's periodic
validation NLL (``experiments.early_stopping.simulate``: the learning rate is constant and the KL ramp depends on
the step alone, so a run stopped sooner follows the long run's trajectory); its **shortfall** is the validation
NLL of the checkpoint it keeps minus the lowest one the run reached within its 40 epochs. Prints, per scale and
model, each candidate's mean shortfall and steps over the seeds, then the eligible candidates and the adopted one.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from experiments.early_stopping import Candidate, run_curve, simulate

EPOCHS = 40.0  # every candidate's epoch ceiling (today's max_epochs)
CANDIDATES = {  # the rule's candidates, simplest first (ties go to the earlier)
    "R": Candidate(8, EPOCHS, 12_000),  # today's default
    "A": Candidate(8, EPOCHS, None),
    "B": Candidate(8, EPOCHS, None, patience_epochs=1.0),
    "C": Candidate(16, EPOCHS, None),
}
MARGIN = 0.0005  # eligibility: mean shortfall at most this, nats, for both models at both scales
TIE = 0.05  # steps within 5% count as tied
COST_SCALE = "full"  # the scale whose steps decide among the eligible


def run_rows(bench: Path, modes: tuple[str, ...]) -> list[dict]:
    """Every run of a grid (the latest per variant, mode and seed) in ``modes``: its curve and steps per epoch."""
    import pyarrow.parquet as pq

    from pipeline.workflows.grid import RUNS_FILE

    runs = json.loads((bench / RUNS_FILE).read_text())
    latest = {(r["variant"], r["split_mode"], r["seed"]): r["run_id"] for r in runs}
    rows = []
    for (variant, mode, seed), run_id in sorted(latest.items()):
        if mode not in modes:
            continue
        curve, params = run_curve(run_id)
        n_train = pq.ParquetFile(bench / f"features-{mode}" / "train.parquet").metadata.num_rows
        spe = n_train / int(params["distinct_per_step"])  # the run's distinct admissions a step: batch_size // K
        rows.append({"variant": variant, "mode": mode, "seed": seed, "run_id": run_id, "curve": curve,
                     "steps_per_epoch": spe, "eval_every": int(params["train.eval_every"])})
    return rows


def evaluate_run(row: dict) -> dict:
    """Each candidate on one run: kept step, validation NLL, steps, shortfall against the run's converged value."""
    ceiling = Candidate(None, EPOCHS, None).budget(row["steps_per_epoch"])
    converged = min(v for s, v in row["curve"] if s <= ceiling)
    out = {"run_id": row["run_id"], "converged": converged, "curve_end": row["curve"][-1][0],
           "steps_per_epoch": row["steps_per_epoch"], "candidates": {}}
    for name, cand in CANDIDATES.items():
        try:
            res = simulate(row["curve"], cand, row["steps_per_epoch"], row["eval_every"])
        except SystemExit as err:  # a patience longer than the run's own: not simulated past its stop
            out["candidates"][name] = {"error": str(err)}
            continue
        out["candidates"][name] = {**res, "shortfall": res["val_nll"] - converged}
    return out


def summarize(per_scale: dict[str, list[tuple[dict, dict]]]) -> dict:
    """Mean shortfall and steps per scale, model and candidate (None where a run could not be simulated)."""
    summary: dict = {}
    for scale, pairs in per_scale.items():
        for row, res in pairs:
            by = summary.setdefault(scale, {}).setdefault(row["variant"], {n: [] for n in CANDIDATES})
            for name in CANDIDATES:
                by[name].append(res["candidates"][name])
    out: dict = {}
    for scale, kinds in summary.items():
        for kind, cands in kinds.items():
            for name, recs in cands.items():
                ok = all("error" not in r for r in recs)
                out.setdefault(scale, {}).setdefault(kind, {})[name] = {
                    "shortfall": float(np.mean([r["shortfall"] for r in recs])) if ok else None,
                    "steps": float(np.mean([r["steps"] for r in recs])) if ok else None,
                    "kept_steps": [r.get("kept_step") for r in recs], "n": len(recs)}
    return out


def decide(summary: dict) -> dict:
    """The rule: eligible when every (scale, model) mean shortfall is at most MARGIN; the fewest full-scale
    steps, ties within TIE to the simpler (earlier) candidate. None eligible: the cap goes only if A's shortfall
    is below R's everywhere."""
    cells = [row for kinds in summary.values() for row in kinds.values()]
    eligible = [n for n in CANDIDATES if all(r[n]["shortfall"] is not None and r[n]["shortfall"] <= MARGIN
                                             for r in cells)]
    if not eligible:
        drop_cap = all(r["A"]["shortfall"] is not None and r["A"]["shortfall"] < r["R"]["shortfall"] for r in cells)
        return {"eligible": [], "adopted": "A" if drop_cap else "R", "why": "none eligible"}
    cost = {n: sum(row[n]["steps"] for row in summary.get(COST_SCALE, {}).values()) for n in eligible}
    fewest = min(cost.values())
    adopted = next(n for n in eligible if cost[n] <= fewest * (1 + TIE))
    return {"eligible": eligible, "full_scale_steps": cost, "adopted": adopted}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", action="append", required=True, metavar="SCALE=DIR",
                    help="a scale's grid (repeatable): 8k=runs/budget8k, full=runs/conv")
    ap.add_argument("--modes", nargs="+", default=["random"])
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    per_scale = {}
    runs = {}
    for item in args.bench:
        scale, _, path = item.partition("=")
        rows = run_rows(Path(path), tuple(args.modes))
        per_scale[scale] = [(row, evaluate_run(row)) for row in rows]
        runs[scale] = {f"{r['variant']}-{r['mode']}-s{r['seed']}": res for r, res in per_scale[scale]}
    summary = summarize(per_scale)
    names = {n: c.name for n, c in CANDIDATES.items()}
    for scale, kinds in summary.items():
        for kind, row in kinds.items():
            print(f"{scale} {kind}:")
            for n, r in row.items():
                if r["shortfall"] is None:
                    print(f"  {n} {names[n]:34s} not simulated (its patience runs past the run's stop)")
                    continue
                kept = " / ".join(str(s) for s in r["kept_steps"])
                print(f"  {n} {names[n]:34s} shortfall {r['shortfall']:+.5f}  steps {r['steps']:9.1f}  kept at {kept}")
    decision = decide(summary)
    print(f"eligible: {decision['eligible']}; adopted: {decision['adopted']} ({names[decision['adopted']]})")
    out = {"candidates": names, "margin": MARGIN, "runs": runs, "summary": summary, "decision": decision}
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    main()
