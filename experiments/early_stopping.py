"""Patience and epoch-budget defaults, simulated on long runs' validation curves (issue 24, item 2).

    .venv/bin/python -m experiments.early_stopping --bench runs/exp/es8k [--round 1|2] [--json PATH]
    .venv/bin/python -m experiments.early_stopping --run RUN_ID --reference-steps 4000   # one run's check

The rule, written before the first result, is docs/experiments/2026-12-03-early-stopping-defaults.md.
``--bench`` is a ``benchmark-models`` grid trained with a long ``--max-steps`` and no patience. The
learning rate is constant and the KL ramp depends on the step alone, so a run stopped sooner follows
the long run's trajectory: each candidate (patience P validations, budget E epochs, step cap) is
simulated on the run's periodic validation NLL (``val_nll``, every ``eval_every`` steps) and keeps the
best checkpoint seen up to its stop. Prints, per model kind, each candidate's mean kept validation NLL
and steps over the seeds, the reference's (a fixed step budget, no patience), the eligible candidates
and the adopted one. ``--run`` prints one run's kept checkpoint against the best one within its first
``--reference-steps`` (the full-scale check).
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

CAP = 12_000  # the step cap, fixed before the study (the full-scale time target)
# the candidates (patience in validations, budget in epochs; None: the cap alone) of each round of the rule
ROUNDS = {1: [(4, 10), (4, 20), (8, 10), (8, 20)], 2: [(8, 40), (8, None), (16, 40), (16, None)]}
REFERENCE_STEPS = 4_000  # today's default budget
MARGIN = 0.0005  # eligibility and tie margin, nats


@dataclass(frozen=True)
class Candidate:
    """A stopping rule: at most ``cap`` steps (None: no cap) and ``epochs`` epochs; stop after ``patience``
    validations without a better best (None: never), or after ``patience_epochs`` epochs' validations where
    that is more (TrainConfig.patience_validations)."""

    patience: int | None
    epochs: float | None
    cap: int | None
    patience_epochs: float | None = None

    @property
    def name(self) -> str:
        if self.patience is None and self.epochs is None:
            return f"{self.cap} steps"
        epochs = "" if self.epochs is None else f" E={self.epochs:g}"
        patience = f"max({self.patience}, {self.patience_epochs:g} ep)" if self.patience_epochs else self.patience
        return f"P={patience}{epochs} cap={self.cap if self.cap is not None else 'none'}"

    def budget(self, steps_per_epoch: float) -> int:
        cap = math.inf if self.cap is None else self.cap
        if self.epochs is None:
            if self.cap is None:
                raise ValueError(f"{self.name}: no cap and no epoch budget never ends")
            return self.cap
        return max(1, int(min(cap, math.ceil(self.epochs * steps_per_epoch))))

    def validations(self, steps_per_epoch: float, eval_every: int) -> int | None:
        """Patience in validations on a run of ``steps_per_epoch``."""
        if self.patience is None or not self.patience_epochs:
            return self.patience
        return max(self.patience, math.ceil(math.ceil(self.patience_epochs * steps_per_epoch) / eval_every))


def simulate(curve: list[tuple[int, float]], cand: Candidate, steps_per_epoch: float, eval_every: int) -> dict:
    """The checkpoint ``cand`` keeps on ``curve`` ((step, val_nll) ascending): its step, its NLL, the steps
    trained. As the training loop does: a better best is strictly lower; it stops once ``step - best`` is at
    least ``patience x eval_every``."""
    budget = cand.budget(steps_per_epoch)
    patience = cand.validations(steps_per_epoch, eval_every)
    best_step, best, last, stopped = 0, math.inf, 0, False
    for step, nll in curve:
        if step > budget:
            break
        last = step
        if nll < best:
            best, best_step = nll, step
        if patience is not None and step - best_step >= patience * eval_every:
            stopped = True
            break
    if not stopped and curve[-1][0] < (budget // eval_every) * eval_every:  # the grid's last validation before it
        raise SystemExit(f"the run's curve ends at step {curve[-1][0]}, before {cand.name}'s budget {budget}")
    return {"kept_step": best_step, "val_nll": best, "steps": last}


def run_curve(run_id: str) -> tuple[list[tuple[int, float]], dict]:
    """A run's (step, val_nll) validations and its params."""
    from pipeline.runs import store

    c = store.client()
    hist = c.get_metric_history(run_id, "val_nll")
    curve = sorted({m.step: m.value for m in hist}.items())
    return curve, c.get_run(run_id).data.params


def candidates(round_: int = 1) -> list[Candidate]:
    return [Candidate(p, e, CAP) for p, e in ROUNDS[round_]]


def study(bench: Path, round_: int = 1) -> dict:
    from pipeline.workflows.grid import RUNS_FILE

    runs = json.loads((bench / RUNS_FILE).read_text())
    latest = {(r["variant"], r["split_mode"], r["seed"]): r["run_id"] for r in runs}  # reruns: the latest
    n_train = {}
    out: dict = {"runs": {}}
    kinds: dict[str, list[dict]] = {}
    ref = Candidate(None, None, REFERENCE_STEPS)
    for (variant, mode, seed), run_id in sorted(latest.items()):
        curve, params = run_curve(run_id)
        if mode not in n_train:
            import pyarrow.parquet as pq

            n_train[mode] = pq.ParquetFile(bench / f"features-{mode}" / "train.parquet").metadata.num_rows
        spe = n_train[mode] / int(params["distinct_per_step"])  # the run's distinct admissions a step: batch_size // K
        eval_every = int(params["train.eval_every"])
        rec = {"run_id": run_id, "steps_per_epoch": spe, "curve_end": curve[-1][0],
               "reference": simulate(curve, ref, spe, eval_every),
               "candidates": {c.name: simulate(curve, c, spe, eval_every) for c in candidates(round_)}}
        out["runs"][f"{variant}-{mode}-s{seed}"] = rec
        kinds.setdefault(variant, []).append(rec)
    summary = {}
    for kind, recs in kinds.items():
        row = {"reference": {"val_nll": float(np.mean([r["reference"]["val_nll"] for r in recs])),
                             "steps": float(np.mean([r["reference"]["steps"] for r in recs]))}}
        for c in candidates(round_):
            row[c.name] = {"val_nll": float(np.mean([r["candidates"][c.name]["val_nll"] for r in recs])),
                           "steps": float(np.mean([r["candidates"][c.name]["steps"] for r in recs])),
                           "kept_steps": [r["candidates"][c.name]["kept_step"] for r in recs]}
        row["reference"]["kept_steps"] = [r["reference"]["kept_step"] for r in recs]
        summary[kind] = row
    out["summary"] = summary
    out["round"] = round_
    out["decision"] = decide(summary, round_)
    return out


def decide(summary: dict, round_: int = 1, default_kind: str = "rank1-gaussian") -> dict:
    """The rule: eligible when within MARGIN of the reference for every kind; the lowest default-kind NLL,
    ties (within MARGIN of it) to the fewest mean steps over the kinds."""
    names = [c.name for c in candidates(round_)]
    eligible = [n for n in names if all(row[n]["val_nll"] <= row["reference"]["val_nll"] + MARGIN
                                        for row in summary.values())]
    if not eligible:
        return {"eligible": [], "adopted": None}
    best = min(summary[default_kind][n]["val_nll"] for n in eligible)
    tied = [n for n in eligible if summary[default_kind][n]["val_nll"] <= best + MARGIN]
    adopted = min(tied, key=lambda n: sum(row[n]["steps"] for row in summary.values()))
    return {"eligible": eligible, "tied": tied, "adopted": adopted}


def check_run(run_id: str, reference_steps: int) -> dict:
    """The full-scale check: the run's kept checkpoint against the best within its first reference steps."""
    curve, params = run_curve(run_id)
    kept = min(curve, key=lambda sv: (sv[1], sv[0]))
    early = [sv for sv in curve if sv[0] <= reference_steps]
    ref = min(early, key=lambda sv: (sv[1], sv[0]))
    return {"run_id": run_id, "steps": curve[-1][0], "kept_step": kept[0], "kept_val_nll": kept[1],
            "reference_steps": reference_steps, "reference_kept_step": ref[0], "reference_val_nll": ref[1],
            "holds": kept[1] <= ref[1]}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", type=Path, help="the grid's out dir (runs.json, features-<mode>)")
    ap.add_argument("--run", help="one run id: its kept checkpoint against the reference budget's")
    ap.add_argument("--round", type=int, choices=sorted(ROUNDS), default=1, help="the rule's round (candidates)")
    ap.add_argument("--reference-steps", type=int, default=REFERENCE_STEPS)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    if bool(args.bench) == bool(args.run):
        raise SystemExit("give --bench or --run")
    if args.run:
        res = check_run(args.run, args.reference_steps)
        print(f"run {res['run_id']}: {res['steps']} steps, kept step {res['kept_step']} val_nll "
              f"{res['kept_val_nll']:.5f}; best within {res['reference_steps']} steps: step "
              f"{res['reference_kept_step']} val_nll {res['reference_val_nll']:.5f}; holds={res['holds']}")
    else:
        res = study(args.bench, args.round)
        for kind, row in res["summary"].items():
            print(f"{kind}:")
            for name, r in row.items():
                print(f"  {name:24s} val_nll {r['val_nll']:.5f}  steps {r['steps']:8.1f}  kept at "
                      f"{' / '.join(str(s) for s in r['kept_steps'])}")
        d = res["decision"]
        print(f"eligible: {d['eligible']}; tied: {d.get('tied')}; adopted: {d['adopted']}")
    if args.json:
        args.json.write_text(json.dumps(res, indent=2) + "\n")
    return res


if __name__ == "__main__":
    main()
