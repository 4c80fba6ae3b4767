"""The Parquet stage against the CSV path, in one process on one synthetic world.

    .venv/bin/python -m benchmarks.stage [--patients 3000] [--density 1.0] [--threads N] [--repeats 1]

Synthesizes MIMIC-III (cached under benchmarks/.cache/stage_synth_<patients>_<density>/, generated
once), then in this process: extracts the CSV directory, stages it (``cli.py stage``'s library call),
extracts the stage, checks the two feature files are byte-identical, and prints each step's wall and
CPU time and the staged extraction's wall time as a ratio of the CSV extraction's (the smallest of
``--repeats`` runs each). ``--json PATH`` also writes the figures there. Nothing goes to the docs.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from benchmarks.harness import CACHE, synth_world


def _timed(fn) -> tuple[float, float, object]:
    from pipeline.data.mimic.extraction.flow import cpu_s

    t0, c0 = time.perf_counter(), cpu_s()
    result = fn()
    return time.perf_counter() - t0, cpu_s() - c0, result


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--patients", type=int, default=3000, help="patients in the synthetic world")
    ap.add_argument("--density", type=float, default=1.0, help="synth's event density (1.0: full)")
    ap.add_argument("--threads", type=int, default=None, help="DuckDB threads (unset: all cores)")
    ap.add_argument("--repeats", type=int, default=1, help="runs of each extraction (the fastest is kept)")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    args = ap.parse_args(argv)
    os.environ.setdefault("MIMIC_DEID_KEY", "benchmark-only-key")
    from pipeline.data.mimic.extraction import ExtractConfig, extract
    from pipeline.data.mimic.sources.stage import StageConfig, stage_csv

    source = synth_world(f"stage_synth_{args.patients}_{args.density:g}", args.patients, density=args.density)
    cfg = ExtractConfig(threads=args.threads)
    source_mb = sum(p.stat().st_size for p in source.glob("*.csv.gz")) / 2**20
    with tempfile.TemporaryDirectory(dir=CACHE) as work:
        work = Path(work)
        csv_runs = [_timed(lambda i=i: extract(source, work / f"csv{i}", cfg)) for i in range(args.repeats)]
        stage_wall, stage_cpu, manifest = _timed(lambda: stage_csv(source, work / "stage",
                                                                   StageConfig(threads=args.threads)))
        staged_runs = [_timed(lambda i=i: extract(work / "stage", work / f"staged{i}", cfg))
                       for i in range(args.repeats)]
        csv_best, staged_best = min(csv_runs, key=lambda r: r[0]), min(staged_runs, key=lambda r: r[0])
        a, b = csv_best[2], staged_best[2]
        identical = all(Path(a.files[k]).read_bytes() == Path(b.files[k]).read_bytes() for k in a.files
                        if k != "manifest")
        stage_mb = sum(p.stat().st_size for p in (work / "stage").glob("*.parquet")) / 2**20
    figures = {
        "patients": args.patients, "density": args.density, "threads": args.threads,
        "event_rows": sum(t["rows"] for n, t in manifest["tables"].items()
                          if n not in ("patients", "admissions", "icustays")),
        "source_mb": round(source_mb, 1), "stage_mb": round(stage_mb, 1),
        "extract_csv_s": round(csv_best[0], 2), "extract_csv_cpu_s": round(csv_best[1], 2),
        "stage_s": round(stage_wall, 2), "stage_cpu_s": round(stage_cpu, 2),
        "extract_staged_s": round(staged_best[0], 2), "extract_staged_cpu_s": round(staged_best[1], 2),
        "ratio_staged_to_csv": round(staged_best[0] / csv_best[0], 3),
        "ratio_cpu_staged_to_csv": round(staged_best[1] / csv_best[1], 3),
        "identical_features": identical, "load_average": [round(x, 2) for x in os.getloadavg()],
    }
    for key, value in figures.items():
        print(f"{key:24s} {value}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    if not identical:
        raise SystemExit("the staged extraction's features differ from the CSV extraction's")
    return figures


if __name__ == "__main__":
    main()
