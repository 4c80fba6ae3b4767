"""The digits corruption benchmark through the command line: `cli.py vision train` and `vision evaluate`
for every method x seed into one MLflow store, then `cli.py compare` of the experiment.

    .venv/bin/python -m experiments.vision_digits_cli [--seeds 0 1 2] [--jobs 2]
        [--methods ...] [--store runs/vision-digits-cli] [--runs-only | --compare-only]

The settings are ``experiments.vision_digits``' (WRN-10-1 at 16x16, K = 4, 20 epochs, a tiled batch of
64 rows, KL annealed over 16 epochs, 2 evaluation samples per component, one torch thread per
process, ``--jobs`` processes at once), so the tables can be held against that benchmark's
(``library_match``: the largest difference of a mean against ``benchmarks/results/vision_digits.json``).
Runs are resumable: a (method, seed) whose evaluated run is in the store is not run again.
The result (the commands, the compare output and its vision summary, wall time, load) is written
to ``benchmarks/results/vision_digits_cli.json`` by ``report.write_results``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import report
from benchmarks.harness import ROOT
from experiments.vision_digits import members, severity_tables

EXPERIMENT = "vision-digits"
SETTINGS = ["--dataset", "digits", "--image-size", "16", "--arch", "wrn", "--depth", "10", "--width", "1",
            "--ensemble-size", "4", "--epochs", "20", "--batch-size", "64", "--kl-anneal-epochs", "16",
            "--eval-samples", "2", "--log-every", "100", "--threads", "1"]  # experiments/vision_digits.py's
METHODS = {  # name (as compare labels the runs) -> the method's flags
    "deterministic": ["--method", "deterministic"],
    "batchensemble": ["--method", "batchensemble"],
    "rank1-gaussian": ["--method", "rank1", "--prior", "gaussian"],
    "rank1-cauchy": ["--method", "rank1", "--prior", "cauchy"],
    "deep-ensemble": ["--method", "deep-ensemble"],
    "rank1-cauchy-normal-q": ["--method", "rank1", "--prior", "cauchy", "--posterior", "normal"],
    "rank1-gaussian-normal-init": ["--method", "rank1", "--prior", "gaussian", "--factor-init", "normal"],
}
DEFAULT_METHODS = ["deterministic", "batchensemble", "rank1-gaussian", "rank1-cauchy", "deep-ensemble"]
EVALUATE = ["--corruptions", "--samples", "2", "--threads", "1"]  # and --seed <the run's seed>, as vision_digits.py


def cli(*args: str) -> list[str]:
    return [sys.executable, str(ROOT / "cli.py"), *args]


def run_job(job: tuple[str, int, dict]) -> dict:
    """Train and evaluate one (method, seed) through the command line; the run id and wall seconds."""
    method, seed, env = job
    start = time.perf_counter()
    train = cli("vision", "train", *SETTINGS, *METHODS[method], "--seed", str(seed), "--experiment", EXPERIMENT,
                "--run-name", f"{method}-s{seed}")
    out = subprocess.run(train, env=env, cwd=env["BENCH_CWD"], capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"{method} seed {seed}: train failed: {out.stderr.strip()[-500:]}")
    run_id = re.search(r"run_id: ([0-9a-f]{32})", out.stdout).group(1)
    trained = time.perf_counter()
    ev = subprocess.run(cli("vision", "evaluate", "--run", run_id, *EVALUATE, "--seed", str(seed)), env=env,
                        cwd=env["BENCH_CWD"], capture_output=True, text=True)
    if ev.returncode:
        raise RuntimeError(f"{method} seed {seed}: evaluate failed: {ev.stderr.strip()[-500:]}")
    return {"method": method, "seed": seed, "run_id": run_id, "train_wall_s": trained - start,
            "evaluate_wall_s": time.perf_counter() - trained, "train_line": out.stdout.strip().splitlines()[0]}


def done_runs(env: dict) -> dict[tuple[str, int], str]:
    """(method, seed) -> run id of the evaluated runs already in the store's experiment."""
    os.environ["MLFLOW_TRACKING_URI"] = env["MLFLOW_TRACKING_URI"]
    from pipeline.runs import store

    c = store.client()
    exp = c.get_experiment_by_name(EXPERIMENT)
    if exp is None:
        return {}
    out = {}
    for run in c.search_runs([exp.experiment_id], "attributes.status = 'FINISHED'", max_results=10_000):
        name, tags = run.data.tags.get("mlflow.runName", ""), run.data.tags
        m = re.fullmatch(r"(.+)-s(\d+)", name)
        if m and m.group(1) in METHODS and "eval_test_samples" in tags:
            out[(m.group(1), int(m.group(2)))] = run.info.run_id
    return out


def library_match(summary: dict) -> dict:
    """Per method: the largest |difference| of a mean (any setting, metric) against vision_digits.json."""
    ref_path = report.results_path("vision_digits")
    ref = json.loads(ref_path.read_text())["summary"]
    out = {}
    for method, settings in summary.items():
        if method not in ref:
            continue
        diffs = [abs(v["mean"] - ref[method][s][m]["mean"]) for s, row in settings.items() if s in ref[method]
                 for m, v in row.items() if m in ref[method][s]]
        out[method] = max(diffs) if diffs else None
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--methods", nargs="+", default=DEFAULT_METHODS, choices=list(METHODS))
    ap.add_argument("--jobs", type=int, default=2, help="(method, seed) pairs run at once")
    ap.add_argument("--store", type=Path, default=ROOT / "runs" / "vision-digits-cli",
                    help="folder of the MLflow store (mlflow.db) and the runs' files")
    ap.add_argument("--runs-only", action="store_true", help="train and evaluate, do not compare")
    ap.add_argument("--compare-only", action="store_true", help="compare the runs already in the store")
    ap.add_argument("--out", type=Path, default=None, help="results JSON (default benchmarks/results/"
                                                           "vision_digits_cli.json)")
    args = ap.parse_args()

    args.store.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{args.store.resolve() / 'mlflow.db'}",
           "BENCH_CWD": str(args.store.resolve())}
    state_file = args.store / "runs.json"
    state = json.loads(state_file.read_text()) if state_file.exists() else {"jobs": [], "runs_provenance": None}
    if not args.compare_only:
        prov = report.provenance()
        have = done_runs(env)
        todo = [(m, s, env) for m in args.methods for s in args.seeds if (m, s) not in have]
        k = int(SETTINGS[SETTINGS.index("--ensemble-size") + 1])
        todo.sort(key=lambda j: members(j[0], k) == 1)  # the long K-member runs first
        print(f"{len(have)} evaluated runs in the store; {len(todo)} to run with {args.jobs} processes", flush=True)
        start, load = time.perf_counter(), os.getloadavg()
        with mp.get_context("spawn").Pool(args.jobs) as pool:
            for job in pool.imap_unordered(run_job, todo):
                state["jobs"].append(job)
                print(f"[{time.perf_counter() - start:6.0f} s] {job['method']} seed {job['seed']}: train "
                      f"{job['train_wall_s']:.0f} s, evaluate {job['evaluate_wall_s']:.0f} s: {job['train_line']}",
                      flush=True)
                state_file.write_text(json.dumps(state, indent=1))
        if todo:
            state["runs_provenance"] = {**prov, "wall_s": time.perf_counter() - start, "jobs": args.jobs,
                                        "load_average_start": list(load), "load_average_end": list(os.getloadavg()),
                                        "cpus": os.cpu_count()}
            state_file.write_text(json.dumps(state, indent=1))
    if args.runs_only:
        return
    compare_cmd = ["compare", "--experiment", EXPERIMENT, "--out", str(args.store / "compare")]
    out = subprocess.run(cli(*compare_cmd), env=env, cwd=env["BENCH_CWD"], capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"compare failed: {out.stderr.strip()}")
    print(out.stdout)
    os.environ["MLFLOW_TRACKING_URI"] = env["MLFLOW_TRACKING_URI"]
    from pipeline.reports.compare_vision import compare_all

    result = compare_all(EXPERIMENT)
    (section,) = result.vision  # one dataset: digits
    summary = section["summary"]
    train_cmd = " ".join(["cli.py vision train", *SETTINGS, "--method M [--prior P ...]", "--seed S",
                          "--experiment", EXPERIMENT])
    report.write_results("vision_digits_cli", {
        "command": report.command(__spec__.name),
        "commands": {"train": train_cmd, "evaluate": "cli.py vision evaluate --run RUN_ID " + " ".join(EVALUATE)
                     + " --seed S", "compare": "cli.py " + " ".join(compare_cmd[:3]) + " --out DIR"},
        "method_flags": {m: " ".join(METHODS[m]) for m in summary if m in METHODS},
        "runs": state.get("runs_provenance"), "jobs": sorted(state["jobs"], key=lambda j: (j["method"], j["seed"])),
        "dataset": section["dataset"], "seeds": section["seeds"], "summary": summary,
        "library_match": library_match(summary)}, path=args.out, renderer="experiments.vision_digits_cli:render")


def render(r: dict) -> str:
    """docs/vision.md's figures:vision_digits_cli section, from the results JSON."""
    cmds = r["commands"]
    runs = r.get("runs") or {}
    flags = "; ".join(f"{m}: `{f}`" for m, f in r["method_flags"].items())
    out = ["```", f"python {cmds['train']}", f"python {cmds['evaluate']}", f"python {cmds['compare']}", "```", "",
           f"Method flags (M): {flags}. One (method, seed) per process, {runs.get('jobs', '?')} at a time"
           + (f", {runs['wall_s'] / 60:.0f} min wall for the runs (load average {runs['load_average_start'][0]:.1f} at "
              f"the start, {runs['load_average_end'][0]:.1f} at the end, {runs['cpus']} CPUs)" if "wall_s" in runs
              else "")
           + f". `compare` printed, for {r['dataset']} (seeds per method: "
           + ", ".join(f"{m} {n}" for m, n in r["seeds"].items()) + "):", ""]
    out += severity_tables(r["summary"])
    match = r.get("library_match") or {}
    if match:
        worst = max(v for v in match.values() if v is not None)
        out.append(f"Against the library benchmark (`benchmarks/results/vision_digits.json`, the same settings): the "
                   f"largest difference of any mean is {worst:.2g} (" + ", ".join(
                       f"{m} {v:.2g}" for m, v in match.items() if v is not None) + ").")
    return "\n".join(out).rstrip()


if __name__ == "__main__":
    main()
