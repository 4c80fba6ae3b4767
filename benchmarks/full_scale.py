"""The whole chain at a fraction of MIMIC-III's (or MIMIC-IV's) size, each stage measured, not extrapolated.

    .venv/bin/python -m benchmarks.full_scale --fraction 0.02 [--layout mimic-iii] [--workers 2]
        [--max-steps N] [--threads 1] [--json PATH]

synth (cached under benchmarks/.cache/full_scale_<layout>_<patients>/, generated once, with
``--workers`` processes for MIMIC-III) -> ``stage`` -> ``extract --source STAGE`` -> ``train`` ->
``evaluate`` -> ``score --source STAGE``, each ``cli.py`` command in a child process: its wall time,
CPU time (user + system, its own and its children's) and peak RSS (``wait4``), with the load average
after it. Prints one line per stage and the chain's total (without synth); ``--json`` writes them.
``--max-steps`` caps training (unset: train's default budget). Nothing goes to the docs: at
``--fraction 1.0`` (about 42 min of synth in one process, and the rest) it has not been run here.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

from benchmarks.harness import CACHE, PY, cached, run_child

FULL_PATIENTS = 46_520  # MIMIC-III v1.4's patients (the synthetic world's scale 1.0)


def measured(args: list[str], env: dict) -> dict:
    """Run ``cli.py ARGS`` as a child: wall s, CPU s, peak RSS MB, its stdout, the load average after."""
    try:
        child = run_child([PY, "cli.py", *args], env)
    except RuntimeError as err:
        raise SystemExit(str(err)) from None
    return {"wall_s": round(child.wall_s, 2), "cpu_s": round(child.cpu_s, 2),
            "peak_rss_mb": round(child.peak_rss_mb, 1), "load_average": round(os.getloadavg()[0], 2),
            "stdout": child.stdout}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fraction", type=float, required=True, help="fraction of MIMIC-III's 46,520 patients (0, 1]")
    ap.add_argument("--layout", choices=["mimic-iii", "mimic-iv"], default="mimic-iii", help="synth's layout")
    ap.add_argument("--workers", type=int, default=2, help="synth processes (MIMIC-III layout)")
    ap.add_argument("--max-steps", type=int, default=None, help="training steps (unset: train's default)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads of train, evaluate and score (1 is "
                    "fastest on a busy small CPU)")
    ap.add_argument("--synth-only", action="store_true", help="generate (and measure) the world, then stop")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    args = ap.parse_args(argv)
    if not 0 < args.fraction <= 1:
        raise SystemExit(f"--fraction must be in (0, 1], got {args.fraction}")
    patients = max(1, round(FULL_PATIENTS * args.fraction))
    env = {**os.environ, "MIMIC_DEID_KEY": os.environ.get("MIMIC_DEID_KEY", "benchmark-only-key")}
    stages: dict[str, dict] = {}
    workers = args.workers if args.layout == "mimic-iii" else 1

    def synth(world: Path) -> None:  # measured as a stage when it runs (not when the world is cached)
        stages["synth"] = measured(["synth", "--out", str(world), "--patients", str(patients), "--layout",
                                    args.layout, "--workers", str(workers)], env)

    world = cached(CACHE / f"full_scale_{args.layout}_{patients}", synth)
    record = world / ".synth.json"  # synth's figures, measured when the world was generated, kept beside it
    if "synth" in stages:
        record.write_text(json.dumps(stages["synth"], indent=2) + "\n")
    elif record.exists():
        stages["synth"] = {**json.loads(record.read_text()), "cached": True}
    if args.synth_only:
        print(json.dumps({k: v for k, v in stages.get("synth", {}).items() if k != "stdout"}))
        return {"stages": stages}
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as work:
        work = Path(work)
        env["MLFLOW_TRACKING_URI"] = f"sqlite:///{work / 'mlflow.db'}"
        stage, feats = str(work / "stage"), str(work / "features")
        stages["stage"] = measured(["stage", "--source", str(world), "--out", stage], env)
        stages["extract"] = measured(["extract", "--source", stage, "--out", feats], env)
        steps = ["--max-steps", str(args.max_steps)] if args.max_steps else []
        threads = ["--threads", str(args.threads)]
        stages["train"] = measured(["train", "--data", feats, "--experiment", "full-scale", *steps, *threads], env)
        run_id = stages["train"]["stdout"].strip().splitlines()[-1].split()[-1]
        stages["evaluate"] = measured(["evaluate", "--run", run_id, "--out", str(work / "eval"), "--no-log", *threads],
                                      env)
        stages["score"] = measured(["score", "--model", run_id, "--source", stage, "--out",
                                    str(work / "scores.parquet"), "--no-link", *threads], env)
    chain = [s for s in stages if s != "synth"]
    figures = {"fraction": args.fraction, "layout": args.layout, "patients": patients, "max_steps": args.max_steps,
               "stages": {k: {m: v for m, v in s.items() if m != "stdout"} for k, s in stages.items()},
               "chain_wall_s": round(sum(stages[s]["wall_s"] for s in chain), 2),
               "chain_cpu_s": round(sum(stages[s]["cpu_s"] for s in chain), 2)}
    print(f"{'stage':10s} {'wall s':>9s} {'CPU s':>9s} {'peak RSS MB':>12s} {'load avg':>9s}")
    for name, s in figures["stages"].items():
        print(f"{name:10s} {s['wall_s']:9.1f} {s['cpu_s']:9.1f} {s['peak_rss_mb']:12.0f} {s['load_average']:9.2f}")
    print(f"chain (stage..score) {figures['chain_wall_s']:.1f} s wall, {figures['chain_cpu_s']:.1f} CPU s; "
          f"{patients} patients ({args.fraction:g} of MIMIC-III), {args.layout}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return figures


if __name__ == "__main__":
    main()
