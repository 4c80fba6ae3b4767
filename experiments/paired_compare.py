"""Paired comparison of two model variants of a benchmark grid on the same admissions.

    .venv/bin/python -m experiments.paired_compare --bench runs/bench [--a rank1-gaussian] [--b deterministic]
        [--bench-b OTHER] [--modes random --modes era] [--splits val --splits test] [--samples S]
        [--batch-size 128] [--bootstrap 2000] [--cache DIR] [--runs-dir runs/laplace] [--json PATH]

Reads the grid's runs (``find_runs``: the run ids of ``BENCH/runs.json``, labelled as ``compare``
labels them, their models loaded from the tracking store, ``MLFLOW_TRACKING_URI`` as for every
command; the classical baselines' runs among them) and its features (``BENCH/features-<mode>``).
A side with a single run (a classical baseline: the grid trains it once per split mode) is paired
with every seed of the other side. B's runs come from ``--bench-b`` when given (another grid on the
same admissions: a setting against the default), each scored on that grid's own features (another
extraction of the same admissions, e.g. another bin count, pairs by admission key; the keys and
labels must be the same sets). It draws the per-admission logits of every run
(``evaluate.sample_logits`` with the grid's settings: seed 0, ``--samples`` per component,
``--batch-size`` admissions per draw block, so the NLL equals the grid's metrics.json) and caches them as ``.npz``.
Runs in the directories ``--runs-dir`` names (``<dir>/<run id>``: the model file, best.pt or baseline.npz,
model_info.json, manifest.json, e.g. Laplace runs fitted on the grid's runs: ``--a laplace-wasserstein-2000``)
join them (A's and B's). For each split mode, split and seed it prints A's and
B's mixture NLL, ECE and AUC-PR (and, where the true risk is known, the mean KL(true || predicted) of the
predictive risk: ``kl``), the paired difference A - B with a percentile bootstrap 95% interval
over admissions (one resample of admissions shared by A and B), and the references: the true
risk's NLL (synthetic data) and the NLL of a constant prediction at the training label rate.
``pooled`` averages the per-seed differences, each bootstrap replicate resampling the same
admissions for every seed, so its interval reflects admission sampling, not seed noise.
``floor A`` / ``floor B``: the mean ECE that a perfectly calibrated predictor making the same
predictions would show on these admissions (``metrics.ece_floor``); an ECE near its floor is
within chance (whether A and B differ is what the paired interval says). In ``pooled`` rows the
floors, slopes and the JSON's ``ece_p_value_*`` are plain means over the pairs (descriptive; a mean
of p-values is not a p-value). ``slope A`` /
``slope B``: calibration slopes (``metrics.recalibration``; > 1: predictions too close to the base
rate, < 1: too extreme), the mean over the pairs.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from pipeline.bayes import metrics
from pipeline.core import fileio
from pipeline.core.contracts import DEFAULT_BATCH
from pipeline.data import features
from pipeline.tasks.mortality.variants import variant_label

PAIRED = ("nll", "ece", "auc_pr")  # metrics compared
KL = "kl"  # mean KL(true || predicted), compared as well where the true risk is known (synthetic data)
HIGHER_BETTER = ("auc_pr",)  # A is better where its value is higher (the others: lower)
TRUTH = "truth"  # label of the true risk as a pseudo-model (synthetic data): --b truth gives each model's gap


def find_runs(bench: Path, extra: list[Path] | tuple[Path, ...] = ()) -> list[dict]:
    """The runs of the grid written to ``bench`` (``grid.grid_runs``: its runs.json, else the tracking
    store's runs on its features), as ``compare`` labels them: run id, model label, split mode, seed;
    oldest first, so that where a (model, mode, seed) was rerun the latest run is the one the
    callers' dicts keep. The tracking store is the grid's (``MLFLOW_TRACKING_URI``, as for every command).
    The run directories under each of ``extra`` (``<dir>/<run id>``) follow: a Laplace run's label is its
    own (``laplace-<selection>-<S>``) and its seed its MAP run's."""
    from pipeline.reports.compare import collect, label_variants
    from pipeline.workflows.grid import grid_runs

    ids = grid_runs(bench)  # labelled as compare labels them: runs of a model whose settings differ are apart
    rows = sorted(label_variants(collect(run_ids=ids)), key=lambda r: r["start_time"]) if ids else []
    runs = [{"run_id": r["run_id"], "model": r["model"], "split_mode": r["split_mode"], "seed": r["seed"]}
            for r in rows]
    files = [f for d in extra for f in Path(d).glob("*/model_info.json")]
    for info_file in sorted(files, key=lambda f: f.stat().st_mtime):
        d = info_file.parent
        info = fileio.read_json(info_file)
        manifest = fileio.read_json(d / "manifest.json") if (d / "manifest.json").exists() else {}
        # the label the model records (a Laplace model's, ModelInfo.model_label), else its variant's
        label = info.get("model_label") or variant_label(info["model_kind"], info["model_config"])
        runs.append({"dir": d, "run_id": d.name, "seed": int(info["train_config"]["seed"]), "model": label,
                     "split_mode": str((manifest.get("config") or {}).get("split") or "unknown")})
    return runs


def pair_seeds(ra: dict, rb: dict) -> tuple[dict, dict]:
    """A's and B's runs by seed, paired: a side with a single run (a classical baseline, which the grid
    trains once per split mode) is paired with every seed of the other side; otherwise seed with seed."""
    if len(ra) == 1 and len(rb) > 1:
        ra = dict.fromkeys(rb, next(iter(ra.values())))
    elif len(rb) == 1 and len(ra) > 1:
        rb = dict.fromkeys(ra, next(iter(rb.values())))
    return ra, rb


def run_logits(run: dict, fs: features.FeatureSet, split: str, samples: int | None, batch_size: int,
               cache: Path | None) -> np.ndarray:
    """Logits (S, K, N) of a run's best checkpoint on ``fs`` (cached by run, split, the features'
    fingerprint, samples, batch size; ``samples`` None: the model's score_samples)."""
    import hashlib
    import tempfile

    from pipeline.engine import predict
    from pipeline.runs.load import load_run
    from pipeline.workflows.evaluate import sample_logits

    tag = "model" if samples is None else samples
    digest = hashlib.blake2b(fs.tokens.tobytes(), digest_size=8)  # which features: another extraction, other logits
    for part in (fs.token_offsets, fs.bag_offsets, fs.context, np.asarray(fs.keys, dtype=str)):
        digest.update(np.ascontiguousarray(part).tobytes())
    if fs.values is not None:
        digest.update(fs.values.tobytes())
    path = cache / f"{run['run_id']}-{split}-{digest.hexdigest()}-s{tag}-b{batch_size}.npz" if cache else None
    if path is not None and path.exists():
        return np.load(path)["logits"]
    if "dir" in run:  # a run directory (--runs-dir): its model file, best.pt or baseline.npz
        from pipeline.runs.formats import load_model, model_file

        model, info = load_model(model_file(run["dir"]))
    else:
        with tempfile.TemporaryDirectory(prefix="paired-") as tmp:
            rm = load_run(run["run_id"], tmp)
        model, info = rm.model, rm.info
    logits = sample_logits(model, fs, predict.score_samples(samples, info), batch_size, 0,
                           info.max_bags, info.max_tokens)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(path, logits=logits)
    return logits


def replicates(labels: np.ndarray, logits: np.ndarray, idx: np.ndarray, true_risk=None) -> dict[str, np.ndarray]:
    """Point NLL / ECE / AUC-PR and their bootstrap replicates (B,) over the resamples ``idx`` (B, N); with
    ``true_risk`` (N,) the mean KL(true || predicted) and its replicates as well."""
    p, nll = metrics.predictive(logits), metrics.mixture_nll_per_example(logits, labels)  # (N,), (N,)
    reps = metrics.bootstrap_replicates(labels, p, nll, idx)
    floor = metrics.ece_floor(labels, p)
    out = {"nll": float(nll.mean()), "ece": metrics.ece(labels, p), "nll_reps": reps["nll"], "ece_reps": reps["ece"],
           "auc_pr": metrics.average_precision(labels, p), "auc_pr_reps": reps["auc_pr"],
           "ece_floor": floor.mean, "ece_p_value": floor.p_value, "slope": metrics.recalibration(labels, p).slope}
    if true_risk is not None:
        kl = metrics.kl_to_truth(true_risk, p)  # (N,)
        out.update({KL: float(kl.mean()), f"{KL}_reps": kl[idx].mean(axis=1)})  # (B, N) -> (B,)
    return out


def _with_truth(known: bool) -> tuple[str, ...]:
    """The metrics compared: NLL, ECE, AUC-PR, and KL where the true risk is ``known``."""
    return PAIRED + ((KL,) if known else ())


def compared(result: dict) -> tuple[str, ...]:
    """The metrics a ``paired`` result compares: NLL, ECE, AUC-PR, and KL where the true risk was given."""
    return _with_truth(f"{KL}_a" in result)


def paired(labels, logits_a: list, logits_b: list, n_bootstrap: int = 2000, seed: int = 0, true_risk=None) -> dict:
    """A - B per metric: mean over the paired seeds of the point difference and its 95% bootstrap interval.

    ``logits_a[i]`` and ``logits_b[i]`` are the (S, K, N) (or (D, N)) logits of pair i on the same
    N admissions; every pair uses the same admission resamples, so the interval of the mean over
    pairs reflects admission sampling only. With ``true_risk`` (N,), the mean KL(true || predicted)
    (lower is better) is compared the same way (``compared``).
    """
    y = metrics.check_labels(labels)
    if not logits_a or len(logits_a) != len(logits_b):
        raise ValueError(f"paired: need the same number (>= 1) of A and B runs, got {len(logits_a)} and "
                         f"{len(logits_b)}")
    idx = metrics.bootstrap_indices(y.shape[0], n_bootstrap, seed)  # (B, N)
    ra = [replicates(y, x, idx, true_risk) for x in logits_a]
    rb = [replicates(y, x, idx, true_risk) for x in logits_b]
    out = {"pairs": len(ra), "n": int(y.shape[0]), "positives": int(y.sum())}
    for m in _with_truth(true_risk is not None):
        a, b = np.mean([r[m] for r in ra]), np.mean([r[m] for r in rb])
        diff_reps = np.mean([x[f"{m}_reps"] - z[f"{m}_reps"] for x, z in zip(ra, rb)], axis=0)  # (B,)
        lo, hi = metrics.percentile_interval(diff_reps)
        better = diff_reps > 0 if m in HIGHER_BETTER else diff_reps < 0
        out.update({f"{m}_a": float(a), f"{m}_b": float(b), f"{m}_diff": float(a - b), f"{m}_diff_ci": [lo, hi],
                    f"{m}_p_a_better": float(better.mean())})
    for side, r in (("a", ra), ("b", rb)):  # ECE of a calibrated predictor with the same predictions (mean over pairs)
        out[f"ece_floor_{side}"] = float(np.mean([x["ece_floor"] for x in r]))
        out[f"ece_p_value_{side}"] = float(np.mean([x["ece_p_value"] for x in r]))
        out[f"calibration_slope_{side}"] = float(np.mean([x["slope"] for x in r]))
    return out


def references(labels, true_risk, train_rate: float) -> dict:
    """NLL of the true risk (None without it) and of the constant training label rate."""
    y = metrics.check_labels(labels)
    const = float(metrics.nll_from_probs(y, np.full(y.shape[0], train_rate)).mean())
    true = None if true_risk is None else float(metrics.nll_from_probs(y, true_risk).mean())
    return {"true_nll": true, "const_nll": const}


def _features(bench: Path, mode: str, split: str):
    from pipeline.tasks.mortality.truth import find_truth, load_true_risk

    fdir = bench / f"features-{mode}"
    fs = features.load_split(fdir / f"{split}.parquet", values=True)  # any run's model may read them
    truth = find_truth(fdir)
    risk = load_true_risk(truth, fdir / "_private" / "link.csv", fs.keys) if truth else None
    rate = float(features.load_split(fdir / "train.parquet").label.mean())
    return fdir, fs, risk, rate


def align(keys_a: np.ndarray, labels_a: np.ndarray, keys_b: np.ndarray, labels_b: np.ndarray) -> np.ndarray:
    """Index into B's admissions (N,) that puts them in A's order; raises unless both hold the same
    admissions with the same labels."""
    if np.array_equal(keys_a, keys_b):
        order = np.arange(len(keys_b))
    else:
        where = {k: i for i, k in enumerate(keys_b)}
        if len(where) != len(keys_b) or sorted(where) != sorted(keys_a):
            raise SystemExit(f"--bench-b: its features hold other admissions than --bench's ({len(keys_b)} against "
                             f"{len(keys_a)}; {len(set(keys_a) - set(where))} of A's keys missing)")
        order = np.array([where[k] for k in keys_a], dtype=np.int64)
    if not np.array_equal(labels_a, labels_b[order]):
        raise SystemExit("--bench-b: the same admissions carry other labels in its features")
    return order


def _logits(label: str, run: dict | None, fs, risk, split: str, args, cache: Path) -> np.ndarray:
    """A run's logits, or the true risk's as one draw (1, N) for the ``truth`` pseudo-model."""
    if label == TRUTH:
        r = np.clip(risk, 1e-12, 1 - 1e-12)
        return np.log(r / (1 - r))[None, :]  # (1, N)
    return run_logits(run, fs, split, args.samples, args.batch_size, cache)


def _fmt(x) -> str:
    return "   n/a" if x is None else f"{x:.4f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", type=Path, required=True, help="benchmark-models --out directory")
    ap.add_argument("--a", default="rank1-gaussian", help="model label A (pipeline.reports.compare labels)")
    ap.add_argument("--b", default="deterministic", help=f"model label B ({TRUTH!r}: the true risk)")
    ap.add_argument("--bench-b", type=Path, default=None,
                    help="B's grid directory, on the same admissions (scored on its own features) [--bench]")
    ap.add_argument("--modes", action="append", help="split modes [random, era]")
    ap.add_argument("--splits", action="append", help="splits [val, test]")
    ap.add_argument("--samples", type=int, default=None,
                    help="samples per mixture component [the model's score_samples]")
    ap.add_argument("--batch-size", type=int, default=DEFAULT_BATCH, help="admissions per draw block (the grid's)")
    ap.add_argument("--bootstrap", type=int, default=2000, help="bootstrap resamples of admissions")
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--cache", type=Path, default=None, help="logit cache directory [BENCH/paired-cache]")
    ap.add_argument("--runs-dir", type=Path, action="append", default=[],
                    help="more run directories (<dir>/<run id>/best.pt), e.g. runs/laplace (repeatable)")
    ap.add_argument("--json", type=Path, default=None, help="write the results as JSON here")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    cache = args.cache or args.bench / "paired-cache"
    runs = find_runs(args.bench, args.runs_dir)
    runs_b = find_runs(args.bench_b, args.runs_dir) if args.bench_b else runs
    cache_b = (args.cache or args.bench_b / "paired-cache") if args.bench_b else cache
    results = []
    print(f"A = {args.a}, B = {args.b}; diff = A - B (negative: A better; AUC-PR: positive); 95% paired bootstrap "
          f"over admissions ({args.bootstrap} resamples); P(A better) = share of resamples where A is better")
    for mode in args.modes or ["random", "era"]:
        for split in args.splits or ["val", "test"]:
            fdir, fs, risk, rate = _features(args.bench, mode, split)
            fs_b, order = fs, None  # B's runs on B's own features (--bench-b), in A's admission order
            if args.bench_b and (args.bench_b / f"features-{mode}").resolve() != fdir.resolve():
                fs_b = _features(args.bench_b, mode, split)[1]
                order = align(fs.keys, fs.label, fs_b.keys, fs_b.label)
            ra = {r["seed"]: r for r in runs if r["model"] == args.a and r["split_mode"] == mode}
            rb = {r["seed"]: r for r in runs_b if r["model"] == args.b and r["split_mode"] == mode}
            missing = [label for label, r in ((args.a, ra), (args.b, rb)) if not r and label != TRUTH]
            if missing:
                print(f"\n[{mode} / {split}] no runs labelled {' or '.join(map(repr, missing))}; skipped")
                continue
            ra, rb = pair_seeds(ra, rb)
            seeds = sorted(set(ra or rb) & set(rb or ra))
            if not seeds or (TRUTH in (args.a, args.b) and risk is None):
                continue
            ref = references(fs.label, risk, rate)
            print(f"\n[{mode} / {split}] n={len(fs)} deaths={int(fs.label.sum())} true-risk "
                  f"nll={_fmt(ref['true_nll'])} constant nll={_fmt(ref['const_nll'])} (train rate {rate:.4f})")
            print(f"{'seed':>6s} " + "   ".join(f"{m + ' A':>7s} {m + ' B':>7s} {'diff':>8s} {'95% CI':>19s} "
                                                  f"{'P(A better)':>6s}" for m in _with_truth(risk is not None))
                  + f"   {'floor A':>7s} {'floor B':>7s}   {'slope A':>7s} {'slope B':>7s}")
            la = {s: _logits(args.a, ra.get(s), fs, risk, split, args, cache) for s in seeds}
            lb = {s: _logits(args.b, rb.get(s), fs_b, risk, split, args, cache_b) for s in seeds}
            if order is not None and args.b != TRUTH:
                lb = {s: x[..., order] for s, x in lb.items()}  # (S, K, N_B) -> (S, K, N) in A's order
            rows = [(str(s), paired(fs.label, [la[s]], [lb[s]], args.bootstrap, true_risk=risk)) for s in seeds]
            rows.append(("pooled", paired(fs.label, [la[s] for s in seeds], [lb[s] for s in seeds], args.bootstrap,
                                          true_risk=risk)))
            for name, r in rows:
                cells = []
                for m in compared(r):
                    lo, hi = r[f"{m}_diff_ci"]
                    cells.append(f"{r[f'{m}_a']:7.4f} {r[f'{m}_b']:7.4f} {r[f'{m}_diff']:+8.4f} "
                                 f"[{lo:+.4f}, {hi:+.4f}] {r[f'{m}_p_a_better']:6.3f}")
                cells.append(f"{r['ece_floor_a']:7.4f} {r['ece_floor_b']:7.4f}")
                cells.append(f"{r['calibration_slope_a']:7.3f} {r['calibration_slope_b']:7.3f}")
                print(f"{name:>6s} " + "   ".join(cells))
                results.append({"split_mode": mode, "split": split, "seed": name, "a": args.a, "b": args.b,
                                "features": str(fdir), **ref, **r})
    if args.json:
        fileio.write_text(args.json, json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
