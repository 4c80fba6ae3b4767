"""What issue 43's checks cost: the shift check against scoring the same cohort, and the outcome monitor over
100,000 outcomes, each against a baseline in the same process.

    .venv/bin/python -m benchmarks.promise_checks [--n 3000] [--reference 1054] [--outcomes 100000] [--repeat 3]
        [--threads 1] [--skip-score] [--json PATH]

(1) **The shift check** (``bayes.shift.check_shift``; target at most 10% of scoring): the default rank-1 model over
random admissions of the default synthetic benchmark's shape (``benchmarks.score.random_model``) with a fitted
policy (``benchmarks.score.fitted_policy``) scores ``--n`` admissions through ``score_files`` (the baseline, best of
``--repeat``). The check then compares the risk table's calibrated risk, mutual information, sd and decision
uncertainty, and the features (the baselines' bag-of-tokens matrix, ``Featurizer``; building it is timed apart and
added in a second share, since scoring does not build it today), with a reference of ``--reference``
admissions (the 20k world's calibration half has 1,054), by the cross-fitted domain classifier, by the MMD
test, and without features. Best of ``--repeat``; the ratio is the check's seconds over the scoring's.

(2) **The monitor** (``bayes.monitor.update``; target under 10 s): ``--outcomes`` outcomes at a 10% death rate, in
one call and in 100 batches through the JSON state; the baseline is the least any monitor does, one pass of
``np.cumsum`` over the same deaths' miss flags. Best of ``--repeat``.
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

TARGETS = {"shift_share": 0.10, "monitor_s": 10.0}  # issue 43's Performance section


def best(fn, repeat: int) -> tuple[float, object]:
    """(best seconds of ``repeat`` calls, the last result)."""
    secs, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        secs.append(time.perf_counter() - t0)
    return min(secs), out


def shift_cost(args) -> dict:
    import pandas as pd
    import torch

    from benchmarks.score import fitted_policy, random_model
    from pipeline.bayes.shift import check_shift, make_reference
    from pipeline.data import features
    from pipeline.runs.info import ModelInfo
    from pipeline.runs.load import Run
    from pipeline.serving.score import ScoreConfig, score_files
    from pipeline.tasks.mortality.baselines.featurize import Featurizer

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        feats, vocab, cfg, model = random_model(Path(tmp), args)
        policy = fitted_policy(model, vocab, args.samples, args.batch_size)
        run = Run(model, ModelInfo.of_model("rank1", refer_threshold=0.01, score_samples=args.samples,
                                            policy=policy.to_dict()), None, vocab)
        score_cfg = ScoreConfig(samples=args.samples, batch_size=args.batch_size, threads=args.threads)
        out = Path(tmp) / "scores.parquet"
        score_s, _ = best(lambda: score_files(run, [feats / "train.parquet"], out, score_cfg), args.repeat)
        table = pd.read_parquet(out)
        fs = features.load_split(feats / "train.parquet")
        featurizer = Featurizer.from_vocab(vocab, None, 24.0).fit(fs)
    cols = {"risk": "risk_calibrated", "mi": "mutual_info", "sd": "risk_sd", "decision": "decision_uncertainty"}
    measures = {k: table[c].to_numpy() for k, c in cols.items()}
    x = featurizer.matrix(fs).to_csr()
    m = args.reference
    ref = make_reference({k: v[:m] for k, v in measures.items()}, x[:m], featurizer.column_names())
    result = {"score_s": score_s, "n": len(table), "reference": m, "columns": int(x.shape[1]),
              "samples": args.samples, "threads": args.threads, "repeat": args.repeat}
    names = featurizer.column_names()
    featurize_s, _ = best(lambda: featurizer.matrix(fs).to_csr(), args.repeat)
    result["featurize_s"] = featurize_s
    for test in ("classifier", "mmd", "none"):
        secs, rep = best(lambda test=test: check_shift(ref, measures, x, names, feature_test=test), args.repeat)
        with_matrix = secs + (featurize_s if test != "none" else 0.0)
        result[test] = {"check_s": secs, "share": secs / score_s, "share_with_matrix": with_matrix / score_s,
                        "verdict": rep.verdict.value}
        print(f"shift check (features: {test}) on {len(table):,} admissions against {m:,}, {x.shape[1]:,} feature "
              f"columns: {secs:.3f} s = {100 * secs / score_s:.1f}% of scoring them ({score_s:.2f} s); with the "
              f"feature matrix built ({featurize_s:.2f} s): {100 * with_matrix / score_s:.1f}% "
              f"(target <= {100 * TARGETS['shift_share']:g}%)", flush=True)
    return result


def monitor_cost(args) -> dict:
    from pipeline.bayes.monitor import MonitorState, start, update

    rng = np.random.default_rng(0)
    n = args.outcomes
    y = rng.random(n) < 0.1
    refer = rng.random(n) < 0.6
    high = rng.random(n) < 0.3

    def one_pass():
        return update(start(0.05, 0.1), y, refer, high)

    def batches():
        s = start(0.05, 0.1)
        for part in np.array_split(np.arange(n), 100):
            s = MonitorState.from_dict(json.loads(json.dumps(s.to_dict())))
            s = update(s, y[part], refer[part], high[part])
        return s

    def baseline():
        dead = np.flatnonzero(y)
        return np.cumsum(~refer[dead] & ~high[dead])

    base_s, _ = best(baseline, args.repeat)
    one_s, a = best(one_pass, args.repeat)
    batch_s, b = best(batches, args.repeat)
    if a != b:
        raise SystemExit("batches and one pass disagree")
    print(f"monitor over {n:,} outcomes: one call {one_s:.3f} s, 100 batches {batch_s:.3f} s (target < "
          f"{TARGETS['monitor_s']:g} s); baseline (one cumsum pass) {base_s:.4f} s: ratio {one_s / base_s:.0f}x",
          flush=True)
    return {"outcomes": n, "one_call_s": one_s, "batches_s": batch_s, "baseline_s": base_s,
            "ratio": one_s / base_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=3000, help="admissions scored and checked")
    ap.add_argument("--reference", type=int, default=1054, help="reference admissions (a calibration half)")
    ap.add_argument("--outcomes", type=int, default=100_000, help="outcomes the monitor sees")
    ap.add_argument("--repeat", type=int, default=3, help="repeats (best taken)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads of the scoring")
    ap.add_argument("--samples", type=int, default=None, help="samples per component at scoring (default: contract)")
    ap.add_argument("--batch-size", type=int, default=None, help="admissions per forward pass at scoring")
    ap.add_argument("--hidden", type=int, default=0, help="LSTM units (0: the default model's)")
    ap.add_argument("--skip-score", action="store_true", help="only the monitor")
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    args = ap.parse_args()
    from pipeline.core.contracts import DEFAULT_BATCH, DEFAULT_SAMPLES

    args.samples = args.samples or DEFAULT_SAMPLES
    args.batch_size = args.batch_size or DEFAULT_BATCH
    result: dict = {"command": report.command(__spec__.name), "targets": TARGETS, "monitor": monitor_cost(args)}
    if not args.skip_score:
        result["shift"] = shift_cost(args)
    result["load_average"] = os.getloadavg()[0]
    if args.json:
        fileio.write_json(args.json, {**report.provenance(), **result})


if __name__ == "__main__":
    main()
