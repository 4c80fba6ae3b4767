"""Learning curves: test NLL gap to the true risk and AUC-PR against the training set's size.

    .venv/bin/python -m experiments.learning_curves --world runs/data/lc20k --out runs/lc
        [--sizes 1000 --sizes 2000 ...] [--seeds 0 --seeds 1 --seeds 2]
        [--models deterministic --models rank1-gaussian --models gbm] [--max-steps 1500] [--jobs 2]
        [--oracle PATH] [--png docs/experiments/learning-curves.png] [--json PATH]

One synthetic world (``WORLD/mimic``, its random-split features ``WORLD/features-random``) serves
every point, so every point is scored on the same validation and test admissions. A point of
size N is the benchmark of N patients: 0.8·N training patients drawn from the world's training
patients (for each seed a fixed permutation; its first 0.8·N, so the sets are nested), all their
admissions, the world's own val and test splits, and the world's vocabulary and bins (fitted on
all its training patients: a small point gets a vocabulary a real N-patient extraction would not
have: tokens seen by fewer than 5 of its own patients; so a small point is, if anything, favoured).
Each (size, seed, model) trains and evaluates through ``pipeline.workflows.grid.run_job`` (the benchmark
grid's job: one torch thread, the default preset at ``--max-steps``), in ``--jobs`` worker
processes; finished runs are reused. The table gives mean ± sd over seeds; the PNG plots test
NLL gap and AUC-PR against training admissions, with the features oracle's (``--oracle``: the
JSON of ``features_oracle.py`` for these features) and the true risk's levels.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import shutil
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from benchmarks import report
from pipeline.core import fileio
from pipeline.core.tables import mean_sd

SIZES = (1000, 2000, 4000, 8000, 16000)
MODELS = ("deterministic", "rank1-gaussian", "gbm")


def patients_of(world: Path, fdir: Path) -> tuple[np.ndarray, np.ndarray]:
    """(training admission row -> patient id, sorted training patient ids) of the world's train split."""
    import pandas as pd
    import pyarrow.parquet as pq

    keys = pq.read_table(fdir / "train.parquet", columns=["key"]).column("key").to_pylist()
    link = pd.read_csv(fdir / "_private" / "link.csv")
    adm = pd.read_csv(world / "mimic" / "ADMISSIONS.csv.gz", usecols=["SUBJECT_ID", "HADM_ID"])
    subj = link.merge(adm, left_on="hadm_id", right_on="HADM_ID").set_index("key")["SUBJECT_ID"]
    rows = subj.reindex(keys).to_numpy()
    if np.isnan(rows.astype(float)).any():
        raise SystemExit(f"{fdir}: training admissions without a patient in {world / 'mimic'}")
    return rows.astype(np.int64), np.unique(rows.astype(np.int64))


def point_features(world: Path, fdir: Path, out: Path, size: int, seed: int, rows: np.ndarray,
                   patients: np.ndarray) -> tuple[Path, int, int]:
    """The features directory of one point (written once); (dir, training patients, training admissions)."""
    import pyarrow.parquet as pq

    take = int(round(0.8 * size))
    if take > len(patients):
        raise SystemExit(f"size {size} needs {take} training patients; the world has {len(patients)}")
    chosen = np.random.default_rng(seed).permutation(patients)[:take]
    keep = np.flatnonzero(np.isin(rows, chosen))
    d = out / "data" / f"n{size}-s{seed}"
    if not (d / "manifest.json").exists():
        (d / "_private").mkdir(parents=True, exist_ok=True)
        table = pq.read_table(fdir / "train.parquet").take(keep)
        pq.write_table(table, d / "train.parquet")
        for name in ("val.parquet", "test.parquet", "vocab.json"):
            shutil.copyfile(fdir / name, d / name)
        shutil.copyfile(fdir / "_private" / "link.csv", d / "_private" / "link.csv")
        manifest = fileio.read_json(fdir / "manifest.json")
        manifest["learning_curve"] = {"size": size, "seed": seed, "train_patients": take, "train_admissions": len(keep)}
        fileio.write_json(d / "manifest.json", manifest)  # last: marks the directory complete
    return d, take, len(keep)


def job(args: tuple) -> dict:
    """Train and evaluate one (point, model, seed) unless done; returns its test and val metrics."""
    feats, model, seed, work, max_steps, experiment = args
    done = Path(work) / f"{model}.json"
    if done.exists():
        return fileio.read_json(done)
    from pipeline.workflows.grid import GridConfig, run_job

    cfg = GridConfig(max_steps=max_steps, eval_every=min(250, max_steps), experiment=experiment)
    run_id = run_job(feats, model, "random", seed, cfg, work)
    rec = {"model": model, "seed": seed, "run_id": run_id}
    for split in ("val", "test"):
        rep = fileio.read_json(Path(work) / "eval" / run_id / split / "metrics.json")
        rec[split] = {k: rep.get(k) for k in ("nll", "auc_pr", "ece", "nll_gap", "n", "positives")}
        rec[split]["true_nll"] = (rep.get("true_risk") or {}).get("nll")
        rec[split]["true_auc_pr"] = (rep.get("true_risk") or {}).get("auc_pr")
    fileio.write_json(done, rec)
    return rec


def _init() -> None:
    os.environ["OMP_NUM_THREADS"] = "1"


def summary(records: list[dict]) -> list[dict]:
    rows = {}
    for r in records:
        rows.setdefault((r["size"], r["model"]), []).append(r)
    out = []
    for (size, model), g in sorted(rows.items()):
        rec = {"size": size, "model": model, "seeds": len(g),
               "train_admissions": float(np.mean([r["train_admissions"] for r in g]))}
        for split in ("val", "test"):
            for m in ("nll", "nll_gap", "auc_pr", "ece"):
                rec[f"{split}_{m}_mean"], rec[f"{split}_{m}_sd"], _ = mean_sd(r[split].get(m) for r in g)
        out.append(rec)
    return out


def plot(rows: list[dict], true_test: dict, oracle: dict | None, path: Path) -> None:
    from pipeline.reports import plots

    fig = plots.figure(10.0, 4.0)
    axes = fig.subplots(1, 2)
    for model in sorted({r["model"] for r in rows}):
        g = [r for r in rows if r["model"] == model]
        x = [r["train_admissions"] for r in g]
        for ax, key in zip(axes, ("test_nll_gap", "test_auc_pr")):
            ax.errorbar(x, [r[f"{key}_mean"] for r in g], yerr=[np.nan_to_num(r[f"{key}_sd"]) for r in g],
                        marker="o", capsize=3, label=model)
    axes[0].axhline(0.0, color="k", lw=0.8, label="true risk")
    axes[1].axhline(true_test["auc_pr"], color="k", lw=0.8, label="true risk")
    if oracle:
        axes[0].axhline(oracle["nll"] - true_test["nll"], color="gray", ls="--", label="features oracle")
        axes[1].axhline(oracle["auc_pr"], color="gray", ls="--", label="features oracle")
    for ax, title in zip(axes, ("test NLL - true-risk NLL (nats)", "test AUC-PR")):
        ax.set_xscale("log")
        ax.set_xlabel("training admissions")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    plots.save(fig, path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", type=Path, required=True, help="directory with mimic/ and features-random/")
    ap.add_argument("--out", type=Path, required=True, help="working directory (point features, runs, results)")
    ap.add_argument("--sizes", type=int, action="append", help=f"benchmark sizes in patients {list(SIZES)}")
    ap.add_argument("--seeds", type=int, action="append", help="seeds [0, 1, 2]")
    ap.add_argument("--models", action="append", help=f"grid models {list(MODELS)}")
    ap.add_argument("--max-steps", type=int, default=1500, help="training steps of the LSTMs")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (one thread each)")
    ap.add_argument("--oracle", type=Path, default=None, help="features_oracle.py JSON of these features")
    ap.add_argument("--png", type=Path, default=None, help="figure [OUT/learning_curves.png]")
    ap.add_argument("--json", type=Path, default=None, help="results [OUT/learning_curves.json]")
    ap.add_argument("--experiment", default="learning-curves", help="MLflow experiment")
    args = ap.parse_args()
    fdir = args.world / "features-random"
    rows, patients = patients_of(args.world, fdir)
    points, work = [], []
    for size in args.sizes or SIZES:
        for seed in args.seeds or [0, 1, 2]:
            d, take, n = point_features(args.world, fdir, args.out, size, seed, rows, patients)
            for model in args.models or MODELS:
                w = args.out / "work" / f"n{size}-s{seed}"
                w.mkdir(parents=True, exist_ok=True)
                points.append({"size": size, "seed": seed, "model": model, "train_patients": take,
                               "train_admissions": n})
                work.append((str(d.resolve()), model, seed, str(w.resolve()), args.max_steps, args.experiment))
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=args.jobs, mp_context=ctx, max_tasks_per_child=1, initializer=_init) as pool:
        results = list(pool.map(job, work))
    records = [{**p, **r} for p, r in zip(points, results)]
    rows_out = summary(records)
    first = records[0]["test"]
    true_test = {"nll": first["true_nll"], "auc_pr": first["true_auc_pr"]}
    oracle = None
    if args.oracle:
        o = fileio.read_json(args.oracle)["random"]
        oracle = o["candidates"][o["chosen"]]["test"]
    plot(rows_out, true_test, oracle, args.png or args.out / "learning_curves.png")
    settings = {"world": args.world.name, "world_train_patients": len(patients),
                "world_train_admissions": len(rows), "max_steps": args.max_steps,
                "sizes": list(args.sizes or SIZES), "seeds": list(args.seeds or [0, 1, 2]),
                "models": list(args.models or MODELS), "png": str(args.png) if args.png else None}
    command = f"python -m {__spec__.name} " + " ".join(
        os.path.relpath(a) if os.path.exists(a) else a for a in sys.argv[1:])
    result = {"command": command, "settings": settings, "records": records, "summary": rows_out,
              "true_risk_test": true_test, "oracle_test": oracle}
    result = json.loads(json.dumps(result, default=float))
    print(render(result))  # the table the docs show
    report.write_results("learning_curves", result, args.json or args.out / "learning_curves.json",
                         renderer="experiments.learning_curves:render")


def render(r: dict) -> str:
    """docs/training.md's figures:learning_curves section: test NLL gap to the true risk and AUC-PR against the
    training set's size."""
    st = r["settings"]
    tr = r["true_risk_test"]
    test_n = r["records"][0]["test"]["n"]
    head = (f"One synthetic world (`{st['world']}`: {st['world_train_patients']:,} training patients, "
            f"{st['world_train_admissions']:,} training admissions), its own validation and test admissions "
            f"({test_n:,} test admissions) for every point; a point of N patients trains on 0.8·N of the world's "
            f"training patients (a fixed random subset per seed, nested across sizes). LSTMs: the default recipe "
            f"at {st['max_steps']:,} steps, best checkpoint by validation NLL; `gbm`: its validation search. "
            f"Seeds {', '.join(map(str, st['seeds']))}; mean ± sd over seeds. Test NLL of the true risk: "
            f"{tr['nll']:.4f}, its AUC-PR {tr['auc_pr']:.4f}.")

    def cell(row: dict, key: str, fmt: str = ".4f") -> str:
        mean, sd = row[f"{key}_mean"], row[f"{key}_sd"]
        return f"{mean:{fmt}} ± {sd:{fmt}}" if sd is not None and math.isfinite(sd) else f"{mean:{fmt}}"

    rows = [[f"{x['size']:,}", x["model"], str(x["seeds"]), f"{x['train_admissions']:,.0f}", cell(x, "val_nll"),
             cell(x, "test_nll"), cell(x, "test_nll_gap"), cell(x, "test_auc_pr"), cell(x, "test_ece")]
            for x in sorted(r["summary"], key=lambda x: (x["model"], x["size"]))]
    out = [head, "",
           report.table(["patients", "model", "seeds", "train admissions", "val NLL", "test NLL", "test NLL gap",
                             "test AUC-PR", "test ECE"], rows)]
    if r.get("oracle_test"):
        o = r["oracle_test"]
        out += ["", f"Features oracle on the same test admissions: NLL {o['nll']:.4f}, AUC-PR {o['auc_pr']:.4f}."]
    if st.get("png"):
        out += ["", f"![learning curves]({Path(st['png']).name})"]
    return "\n".join(out)


if __name__ == "__main__":
    main()
