"""Uncertainty against the truth, per model of a benchmark grid: does the spread point at the errors?

    .venv/bin/python -m experiments.uncertainty_truth --bench runs/bench [--runs-dir runs/laplace]
        [--modes random --modes era] [--reference deterministic] [--bootstrap 1000] [--cache DIR] [--json PATH]

For every run of the grid (``paired_compare.find_runs``: ``BENCH/runs.json``, labelled as ``compare``
labels them; Laplace runs from ``--runs-dir``) it computes the per-admission predictive on val and
test (``predict.feature_predictions`` with the evaluation's settings: seed 0, the model's
``score_samples``, batches of 128; a Laplace run's Gaussian logit, not its repeated probit logits),
the error against the synthetic true risk, KL(true ‖ predicted), and ``metrics.uncertainty_vs_truth``.
Per (split mode, model), mean over seeds: test NLL and ECE; each measure's test Spearman and
referral gain; the measure the run's validation truth chooses (what training records as its refer
measure: ``tasks.mortality.validation.choose_refer_measure``) and that measure's test gain; and the paired difference
of that gain against the ``--reference`` model's entropy gain, each bootstrap replicate resampling
the same test admissions for every seed pair (the interval reflects admission sampling, not seeds).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from experiments.paired_compare import _features, find_runs
from pipeline.bayes import metrics
from pipeline.core import fileio
from pipeline.core.contracts import DEFAULT_BATCH
from pipeline.tasks.mortality.validation import choose_refer_measure

MEASURES = tuple(m.value for m in metrics.Measure)


def run_summary(run: dict, fs, split: str, cache: Path | None) -> tuple[metrics.Summary, np.ndarray]:
    """(Summary, predictive logits (S, K, N)) of a run on ``fs``, cached as .npz by run and split."""
    import tempfile

    from pipeline.runs.load import load_run
    from pipeline.tasks.mortality import predict

    path = cache / f"{run['run_id']}-{split}-summary.npz" if cache else None
    fields = ("mean", "sd", "p05", "p95", "mutual_info", "entropy", "spread")
    if path is not None and path.exists():
        z = np.load(path)
        return metrics.Summary(**{f: z[f] for f in fields}), z["logits"]
    if "dir" in run:
        from pipeline.runs.formats import load_model, model_file

        model, info = load_model(model_file(run["dir"]))
    else:
        with tempfile.TemporaryDirectory(prefix="uvt-") as tmp:
            rm = load_run(run["run_id"], tmp)
        model, info = rm.model, rm.info
    pred = predict.feature_predictions(model, fs, predict.score_samples(None, info), DEFAULT_BATCH,
                                       info.max_bags, info.max_tokens, predict.seeded_generator(0))
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(path, logits=pred.logits, **{f: getattr(pred.summary, f) for f in fields})
    return pred.summary, pred.logits


def gain_replicates(error: np.ndarray, score: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Referral gain of ``score`` on each bootstrap resample of admissions ``idx`` (B, N)."""
    return np.array([metrics.referral_gain(error[i], score[i]) for i in idx])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", type=Path, required=True, help="benchmark-models --out directory")
    ap.add_argument("--runs-dir", type=Path, action="append", default=[], help="directories of Laplace run dirs")
    ap.add_argument("--label-from-dir", action="store_true",
                    help="label a --runs-dir run 'laplace-NAME' from its directory NAME-<mode>-s<seed> (runs of one "
                         "selection whose other settings differ, e.g. --exclude, then stay apart)")
    ap.add_argument("--modes", action="append", default=None, help="split modes (default: random, era)")
    ap.add_argument("--reference", default="deterministic", help="model whose entropy gain is the reference")
    ap.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples of test admissions")
    ap.add_argument("--cache", type=Path, default=None, help="cache of per-run summaries (.npz)")
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    args = ap.parse_args()
    runs = find_runs(args.bench, args.runs_dir)
    if args.label_from_dir:
        for r in runs:
            if "dir" in r:
                r["model"] = "laplace-" + Path(r["dir"]).name.rsplit("-", 2)[0]
    out: dict = {"bench": str(args.bench), "reference": args.reference, "modes": {}}
    for mode in args.modes or ["random", "era"]:
        data = {s: _features(args.bench, mode, s) for s in ("val", "test")}
        if data["test"][2] is None:
            raise SystemExit(f"{args.bench}/features-{mode}: no true risk (a synthetic source is needed)")
        by_model: dict[str, dict[int, dict]] = {}
        for run in runs:
            if run["split_mode"] != mode:
                continue
            rec = {}
            for split, (_, fs, risk, _) in data.items():
                summary, logits = run_summary(run, fs, split, args.cache)
                rec[split] = (summary, logits, fs.label, risk)
            by_model.setdefault(run["model"], {})[run["seed"]] = rec  # the latest run of a seed wins
        _, test_fs, test_risk, _ = data["test"]
        idx = metrics.bootstrap_indices(len(test_fs), args.bootstrap, 0)  # (B, N), shared by every pair
        ref_reps = {}
        if args.reference in by_model:
            for seed, rec in by_model[args.reference].items():
                s, _, _, risk = rec["test"]
                ref_reps[seed] = (metrics.referral_gain(metrics.kl_to_truth(risk, s.mean), s.entropy),
                                  gain_replicates(metrics.kl_to_truth(risk, s.mean), s.entropy, idx))
        rows = {}
        for model, seeds in by_model.items():
            per_seed, diffs, diff_reps = [], [], []
            for seed, rec in sorted(seeds.items()):
                vs_val = metrics.uncertainty_vs_truth(rec["val"][0], rec["val"][3])
                s, logits, y, risk = rec["test"]
                vs = metrics.uncertainty_vs_truth(s, risk)
                chosen = choose_refer_measure(rec["val"][0], rec["val"][3])[0].value
                error = metrics.kl_to_truth(risk, s.mean)
                row = {"seed": seed, "nll": metrics.mixture_nll(logits.reshape(-1, logits.shape[-1]), y),
                       "ece": metrics.ece(y, metrics.predictive(logits.reshape(-1, logits.shape[-1]))),
                       "mean_error": float(error.mean()), "chosen": chosen, "val_gains": {
                           m: v["referral_gain"] for m, v in vs_val["measures"].items()},
                       "spearman": {m: v["spearman"] for m, v in vs["measures"].items()},
                       "gain": {m: v["referral_gain"] for m, v in vs["measures"].items()}}
                row["chosen_gain"] = row["gain"][chosen]
                per_seed.append(row)
                if seed in ref_reps:
                    reps = gain_replicates(error, s.measure(chosen), idx)
                    diffs.append(row["chosen_gain"] - ref_reps[seed][0])
                    diff_reps.append(reps - ref_reps[seed][1])
            mean = lambda key, m=None: float(np.nanmean([r[key] if m is None  # noqa: E731
                                                         else (r[key][m] if r[key][m] is not None else np.nan)
                                                         for r in per_seed]))
            rec = {"seeds": [r["seed"] for r in per_seed], "nll": mean("nll"), "ece": mean("ece"),
                   "mean_error": mean("mean_error"), "chosen": [r["chosen"] for r in per_seed],
                   "chosen_gain": mean("chosen_gain"),
                   "spearman": {m: mean("spearman", m) for m in MEASURES},
                   "gain": {m: mean("gain", m) for m in MEASURES}, "per_seed": per_seed}
            if diff_reps:
                lo, hi = metrics.percentile_interval(np.mean(diff_reps, axis=0))
                rec["vs_reference_entropy"] = {"diff": float(np.mean(diffs)), "ci": [lo, hi], "pairs": len(diffs)}
            rows[model] = rec
        out["modes"][mode] = {"n_test": len(test_fs), "positives_test": int(test_fs.label.sum()), "models": rows}
        print(f"\n{mode} split, test: n={len(test_fs)}, deaths={int(test_fs.label.sum())}; referral gain and Spearman "
              f"against KL(true || predicted); chosen = the measure the validation truth picks (per seed)")
        print("| model | seeds | nll | ece | " + " | ".join(f"gain {m}" for m in MEASURES) + " | "
              + " | ".join(f"spearman {m}" for m in MEASURES)
              + f" | chosen | chosen gain | - {args.reference} entropy [95% CI] |")
        print("|" + "---|" * (6 + 2 * len(MEASURES)))
        for model, r in rows.items():
            ref = r.get("vs_reference_entropy")
            cmp = f"{ref['diff']:+.3f} [{ref['ci'][0]:+.3f}, {ref['ci'][1]:+.3f}]" if ref else "n/a"
            print(f"| {model} | {len(r['seeds'])} | {r['nll']:.4f} | {r['ece']:.4f} | "
                  + " | ".join(f"{r['gain'][m]:+.3f}" for m in MEASURES) + " | "
                  + " | ".join(f"{r['spearman'][m]:+.3f}" for m in MEASURES)
                  + f" | {','.join(r['chosen'])} | {r['chosen_gain']:+.3f} | {cmp} |")
    if args.json:
        fileio.write_json(args.json, out)
        print(f"\njson: {args.json}")


if __name__ == "__main__":
    main()
