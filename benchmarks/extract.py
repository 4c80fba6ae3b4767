"""Extraction benchmark at MIMIC scale (DuckDB), with its baselines measured in the same run.

    .venv/bin/python benchmarks/extract.py [--scales 0.01 0.03 0.10] [--density 1.0]

1. Synthesizes MIMIC-III at fractions of the full release's 46,520 patients (cached under
   benchmarks/.cache/, generated once).
2. Runs `cli.py extract` on each scale in a child process: wall time, peak RSS (wait4),
   event rows read per second; fits the growth exponent of time in rows (log-log slope) and
   extrapolates to the full release (~394M event rows).
3. Baselines, same run: two implementations of the same cohort and event logic at the
   smallest scale, plain pandas (benchmarks/pandas_reference.py: whole-table read_csv and
   merges) and the mimic3-benchmarks pattern (benchmarks/mimic3_benchmarks_reference.py:
   row-by-row event pass into per-subject files, then pandas per subject), which must agree
   on the events used; and the floor (one DuckDB scan that parses and aggregates
   CHARTEVENTS) at the largest scale.
4. Writes benchmarks/results/extract.json (``--json`` elsewhere) and, for the default path, the
   docs section that shows it (``benchmarks/report.py``: docs/performance.md).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "benchmarks" / ".cache"
FULL_PATIENTS = 46_520
# Full MIMIC-III v1.4 event rows (PhysioNet table sizes) for the extrapolation.
FULL_EVENT_ROWS = {
    "chartevents": 330_712_483,
    "labevents": 27_854_055,
    "inputevents_cv": 17_527_935,
    "inputevents_mv": 3_618_991,
    "outputevents": 4_349_218,
    "prescriptions": 4_156_450,
    "procedureevents_mv": 258_066,
    "microbiologyevents": 631_726,
    "datetimeevents": 4_485_937,
}
PY = sys.executable
sys.path.insert(0, str(ROOT / "benchmarks"))

import report  # noqa: E402  (benchmarks/report.py)
from scaling import extrapolate, growth_exponent  # noqa: E402  (benchmarks/scaling.py)


def run_child(args: list[str], env: dict | None = None) -> tuple[float, float, str]:
    """Run a child process: (wall seconds, its own peak RSS in MB via wait4, stdout)."""
    import tempfile

    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(args, cwd=ROOT, stdout=out, stderr=err, env=env, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed:\n{err.read()[-2000:]}")
        return wall, usage.ru_maxrss / 1024, out.read()


def synth_dir(patients: int, density: float, seed: int) -> Path:
    path = CACHE / f"synth_p{patients}_d{density:g}_s{seed}"
    if (path / ".complete").exists():
        return path
    shutil.rmtree(path, ignore_errors=True)
    t0 = time.perf_counter()
    subprocess.run(
        [PY, "cli.py", "synth", "--out", str(path), "--patients", str(patients), "--seed", str(seed), "--density", str(density)],
        cwd=ROOT,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    (path / ".complete").write_text(f"{time.perf_counter() - t0:.1f} s\n")
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scales", type=float, nargs="+", default=[0.01, 0.03, 0.10])
    ap.add_argument("--density", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "results" / "extract.json")
    ap.add_argument("--no-pandas", action="store_true")
    args = ap.parse_args()

    measured = report.provenance()  # the checkout as the run starts
    env = dict(os.environ, MIMIC_DEID_KEY=os.environ.get("MIMIC_DEID_KEY", "benchmark-key"))
    rows = []
    for frac in sorted(args.scales):
        patients = max(10, round(FULL_PATIENTS * frac))
        src = synth_dir(patients, args.density, args.seed)
        out = CACHE / f"features_p{patients}"
        shutil.rmtree(out, ignore_errors=True)
        wall, rss, _ = run_child([PY, "cli.py", "extract", "--source", str(src), "--out", str(out)], env)
        manifest = json.loads((out / "manifest.json").read_text())
        read = sum(a["rows_read"] for t, a in manifest["tables"].items() if t in FULL_EVENT_ROWS)
        used = sum(a.get("events_used", 0) for a in manifest["tables"].values())
        rows.append(dict(scale=frac, patients=patients, event_rows=read, events_used=used, wall_s=wall, peak_rss_mb=rss,
                         events_per_s=read / wall, cohort=manifest["cohort"]["admissions"], src=str(src)))
        print(f"scale {frac:5.2%}: {patients:6d} patients, {read:12,d} event rows, {wall:7.1f} s, "
              f"{read / wall / 1e6:6.2f} M rows/s, peak RSS {rss:7.0f} MB", flush=True)

    slope = growth_exponent([r["event_rows"] for r in rows], [r["wall_s"] for r in rows])
    full_rows = sum(FULL_EVENT_ROWS.values())
    big = rows[-1]
    full_wall = extrapolate(big["wall_s"], big["event_rows"], full_rows, slope)

    result = {**measured, "scales": rows, "growth_exponent": slope, "full_event_rows": full_rows,
              "full_scale_extrapolated_s": full_wall, "command": "benchmarks/extract.py " + " ".join(sys.argv[1:])}

    if not args.no_pandas:
        small = rows[0]
        for key, module, label in (
            ("pandas_reference", "pandas_reference", "pandas reference (whole-table read_csv + merges)"),
            ("mimic3_benchmarks_reference", "mimic3_benchmarks_reference",
             "mimic3-benchmarks pattern (row-by-row event pass, per-subject files, pandas per subject)"),
        ):
            code = ("import sys, json; sys.path.insert(0, '.'); from pathlib import Path; "
                    f"from benchmarks.{module} import run; print(json.dumps(run(Path(sys.argv[1]))))")
            pwall, prss, pout = run_child([PY, "-c", code, small["src"]], env)
            result[key] = {"scale": small["scale"], "wall_s": pwall, "peak_rss_mb": prss,
                           "events_used": json.loads(pout.strip().splitlines()[-1])}
            speedup = "speedup_vs_pandas" if key == "pandas_reference" else "speedup_vs_mimic3_benchmarks"
            result[speedup] = pwall / small["wall_s"]
            print(f"{label} at {small['scale']:.2%}: {pwall:.1f} s -> DuckDB extract is "
                  f"{pwall / small['wall_s']:.1f}x faster", flush=True)
        if result["pandas_reference"]["events_used"] != result["mimic3_benchmarks_reference"]["events_used"]:
            raise RuntimeError("the two reference implementations disagree on the events used")

    floor_code = (
        "import duckdb, sys, time; from pipeline.sources.csvdir import find_tables; from pathlib import Path; "
        "f = find_tables(Path(sys.argv[1]))['chartevents']; con = duckdb.connect(); t = time.perf_counter(); "
        "con.sql(f\"SELECT count(*), sum(TRY_CAST(VALUENUM AS DOUBLE)), count(DISTINCT HADM_ID) FROM read_csv('{f}', header=true, all_varchar=true, "
        "delim=',', quote='\\\"', escape='\\\"')\").fetchall(); print(time.perf_counter() - t)"
    )
    fwall, _, fout = run_child([PY, "-c", floor_code, big["src"]], env)
    chart_rows = json.loads((CACHE / f"features_p{big['patients']}" / "manifest.json").read_text())["tables"]["chartevents"]["rows_read"]
    floor_s = float(fout.strip().splitlines()[-1])
    result["floor"] = {"chartevents_rows": chart_rows, "scan_s": floor_s, "rows_per_s": chart_rows / floor_s}
    result["extract_vs_floor"] = (big["event_rows"] / big["wall_s"]) / (chart_rows / floor_s)
    print(f"floor: one DuckDB scan of CHARTEVENTS ({chart_rows:,d} rows) {floor_s:.1f} s = {chart_rows / floor_s / 1e6:.2f} M rows/s; "
          f"extract runs at {result['extract_vs_floor']:.2f}x the floor's rows/s")
    print(f"growth exponent (time vs rows): {slope:.2f}; full MIMIC-III ({full_rows:,d} event rows) "
          f"extrapolates to {full_wall / 60:.1f} min; peak RSS at the largest scale {big['peak_rss_mb']:.0f} MB")
    report.write_results("extract", result, args.json)  # and the docs section that shows it (docs/performance.md)


if __name__ == "__main__":
    main()
