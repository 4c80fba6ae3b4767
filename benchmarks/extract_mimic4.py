"""MIMIC-IV extraction benchmark (DuckDB), with the scan floor measured in the same run.

    .venv/bin/python -m benchmarks.extract_mimic4 [--scales 0.01 0.03 0.10]

1. Synthesizes MIMIC-IV (`synth --layout mimic-iv`, the generator's world with MIMIC-IV's
   proportions: 17 % of admissions with an ICU stay, 4,286 chart rows per stay, no newborns or
   children, more readmissions; `SYNTH` below) at fractions of the full release's 299,712
   patients, at full event density (cached under benchmarks/.cache/, generated once).
2. Runs `cli.py extract` on each scale in a child process: wall time, peak RSS (wait4), event
   rows read per second; fits the growth exponent of time in rows (log-log slope) and
   extrapolates to the full release's 471,484,802 event rows (v2.2, mimic-code's validate.sql).
3. The floor, same run, largest scale: one DuckDB scan that parses and aggregates
   icu/chartevents (as benchmarks/extract.py does for MIMIC-III's CHARTEVENTS), run just before
   and just after that scale's extraction (the load of a shared machine drifts).
4. CPU time (user + system, every thread) of each child, the extraction's and the floor's: on a
   shared machine the wall time follows the load, the CPU time much less, so the CPU ratio to
   the floor and the CPU time extrapolated to the full release are the load-robust figures.
5. Where the time goes, smallest scale, in a child with one DuckDB thread, one table after
   another: each event table's CPU time for a bare scan (same CSV reader settings, no column
   typed), for the typed view (every column cast and checked) and for its events query (the
   window: cohort join, checks, the rows kept), with DuckDB's profile of the events query
   (share of each operator).

Writes benchmarks/results/extract_mimic4.json and the figures block of docs/mimic-iv.md
(``render``; tests/test_docs.py checks the page against the JSON).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import sys
from pathlib import Path

from benchmarks import report
from benchmarks.harness import CACHE, PY, ROOT, extrapolate, growth_exponent, run_child, run_module, synth_world
from pipeline.data.mimic.synth.simulation import MIMIC4_PROPORTIONS

RESULT = ROOT / "benchmarks" / "results" / "extract_mimic4.json"
DOC = ROOT / "docs" / "mimic-iv.md"
FULL_PATIENTS = 299_712
# Full MIMIC-IV v2.2 event rows (mimic-code's mimic-iv/buildmimic/postgres/validate.sql for v2.2).
FULL_EVENT_ROWS = {
    "chartevents": 313_645_063,
    "labevents": 118_171_367,
    "inputevents": 8_978_893,
    "outputevents": 4_234_967,
    "prescriptions": 15_416_708,
    "procedureevents": 696_092,
    "microbiologyevents": 3_228_713,
    "datetimeevents": 7_112_999,
}
# The synthetic world with MIMIC-IV's proportions (v2.2: 73,181 ICU stays in 431,231 admissions of
# 299,712 patients, 313,645,063 chart rows); every other setting is the generator's default.
SYNTH = {**MIMIC4_PROPORTIONS, "density": 1.0}  # synth --proportions mimic-iv
REPS = 2  # the profile's queries: best of this many runs
TARGET_S, TARGET_MB = 15 * 60, 4096  # issue 15: under 15 minutes and 4 GB on 2 cores, at least 0.8x the floor


def synth_dir(patients: int, seed: int) -> Path:
    """The synthetic MIMIC-IV of ``patients`` patients (``SYNTH``; cached)."""
    return synth_world(f"synth4_p{patients}_s{seed}", patients, seed, layout="mimic-iv", **SYNTH)


def run_extract(args: list[str], env: dict) -> tuple[float, float, float, str]:
    """Run ``cli.py extract -v`` in a child: (wall seconds, CPU seconds, peak RSS in MB, its log)."""
    child = run_child([PY, "cli.py", "extract", *args, "-v"], env)
    return child.wall_s, child.cpu_s, child.peak_rss_mb, child.stderr


# A stage's line in `extract -v`'s log (whatever the logger's name):
# "<level> <logger>: <stage>  W s  CPU C s  RSS R MB".
STAGE_LINE = re.compile(r"^\S+ [\w.]+: (?P<stage>\S.*?)\s{2,}(?P<wall>[\d.]+) s\s+CPU\s+(?P<cpu>[\d.]+) s\s+"
                        r"RSS\s+(?P<rss>[\d.]+) MB")


def _stages(log: str) -> dict:
    """Each stage's wall and CPU seconds as `extract -v` logged them: {stage: {"wall_s", "cpu_s"}}."""
    return {m["stage"]: {"wall_s": float(m["wall"]), "cpu_s": float(m["cpu"])}
            for m in map(STAGE_LINE.match, log.splitlines()) if m}


# The floor: one DuckDB scan that parses icu/chartevents and aggregates it ({f}: the file).
FLOOR_SQL = ("SELECT count(*), sum(TRY_CAST(valuenum AS DOUBLE)), count(DISTINCT hadm_id) FROM read_csv('{f}', "
             "header=true, all_varchar=true, delim=',', quote='\"', escape='\"')")
FLOOR_CODE = (
    "import duckdb, resource, sys, time; from pipeline.data.mimic.sources.csvdir import detect_layout; "
    "from pathlib import Path; "
    "f = detect_layout(Path(sys.argv[1]))[1]['chartevents']; sql = sys.argv[2].replace('{f}', str(f)); "
    "con = duckdb.connect(); t = time.perf_counter(); u = resource.getrusage(resource.RUSAGE_SELF); "
    "c = u.ru_utime + u.ru_stime; con.sql(sql).fetchall(); w = time.perf_counter() - t; "
    "u = resource.getrusage(resource.RUSAGE_SELF); print(w, u.ru_utime + u.ru_stime - c)"
)


def run_floor(src: str, env: dict) -> dict:
    """The floor once, in a child: the scan's own wall and CPU seconds (the interpreter's start excluded)."""
    out = run_child([PY, "-c", FLOOR_CODE, src, FLOOR_SQL], env).stdout
    wall, cpu = (float(x) for x in out.strip().splitlines()[-1].split())
    return {"wall_s": wall, "cpu_s": cpu, "load_avg_1min": os.getloadavg()[0]}


def _stage_rss(log: str, stage: str) -> float:
    """RSS (MB) that `extract -v` logged at the end of ``stage``."""
    for m in map(STAGE_LINE.match, log.splitlines()):
        if m and m["stage"] == stage:
            return float(m["rss"])
    raise RuntimeError(f"no RSS logged for the stage {stage!r}")


def _dir_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*.csv.gz")) / 1e6


def measure(scales: list[float], seed: int) -> dict:
    env = dict(os.environ, MIMIC_DEID_KEY=os.environ.get("MIMIC_DEID_KEY", "benchmark-key"))
    rows = []
    floors = []
    for i, frac in enumerate(sorted(scales)):
        patients = max(10, round(FULL_PATIENTS * frac))
        src = synth_dir(patients, seed)
        out = CACHE / f"features4_p{patients}"
        shutil.rmtree(out, ignore_errors=True)
        largest = i == len(scales) - 1
        if largest:  # the floor just before the largest scale's extraction (and again just after it)
            floors.append(run_floor(str(src), env))
        load = os.getloadavg()[0]
        wall, cpu, rss, log = run_extract(["--source", str(src), "--out", str(out)], env)
        if largest:
            floors.append(run_floor(str(src), env))
        outside = _stage_rss(log, "assemble")  # after DuckDB's stages: the cohort and the features in Arrow
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["release"] == "mimic-iv", manifest["release"]
        by_table = {t: a["rows_read"] for t, a in manifest["tables"].items() if t in FULL_EVENT_ROWS}
        read = sum(by_table.values())
        used = sum(a.get("events_used", 0) for a in manifest["tables"].values())
        rows.append(dict(scale=frac, patients=patients, admissions=manifest["tables"]["admissions"]["rows_read"],
                         icustays=manifest["tables"]["icustays"]["rows_read"], event_rows=read,
                         event_rows_by_table=by_table, events_used=used, wall_s=wall, peak_rss_mb=rss,
                         events_per_s=read / wall, cohort=manifest["cohort"]["admissions"], csv_gz_mb=_dir_mb(src),
                         rss_after_duckdb_mb=outside, memory_limit=manifest["config"]["memory_limit"], src=str(src),
                         cpu_s=cpu, events_per_cpu_s=read / cpu, load_avg_1min=load, stages=_stages(log)))
        print(f"scale {frac:5.2%}: {patients:6d} patients, {read:12,d} event rows, {wall:7.1f} s (CPU {cpu:6.1f} s, "
              f"load {load:.1f}), {read / wall / 1e6:6.2f} M rows/s, peak RSS {rss:7.0f} MB ({outside:.0f} MB after "
              "DuckDB's stages)", flush=True)

    sizes = [r["event_rows"] for r in rows]
    slope = growth_exponent(sizes, [r["wall_s"] for r in rows])
    full_rows = sum(FULL_EVENT_ROWS.values())
    big = rows[-1]
    full_wall = extrapolate(big["wall_s"], big["event_rows"], full_rows, slope)
    cpu_slope = growth_exponent(sizes, [r["cpu_s"] for r in rows])
    full_cpu = extrapolate(big["cpu_s"], big["event_rows"], full_rows, cpu_slope)
    # memory: DuckDB's own is capped by memory_limit (it spills to disk beyond it); what the process holds
    # besides grows with the admissions: the RSS after DuckDB's stages, linear in patients through the two
    # largest scales, plus the cap, bounds the full release's peak
    if len(rows) >= 2:
        a, b = rows[-2], rows[-1]
        per_patient = (b["rss_after_duckdb_mb"] - a["rss_after_duckdb_mb"]) / (b["patients"] - a["patients"])
    else:
        per_patient = big["rss_after_duckdb_mb"] / big["patients"]
    outside_full = big["rss_after_duckdb_mb"] + max(per_patient, 0.0) * (FULL_PATIENTS - big["patients"])
    cap_mb = _mb(big["memory_limit"])
    full_rss = cap_mb + outside_full

    small = rows[0]
    print(f"where the time goes (scale {small['scale']:.0%}, one DuckDB thread, one table at a time):", flush=True)
    child = run_module(__spec__.name, "--profile-child", small["src"], env=env)
    sys.stderr.write(child.stderr)
    profile = dict(scale=small["scale"], **child.last_json())
    floor_s = sum(f["wall_s"] for f in floors) / len(floors)
    floor_cpu = sum(f["cpu_s"] for f in floors) / len(floors)
    chart_rows = big["event_rows_by_table"]["chartevents"]
    vs_floor = (big["event_rows"] / big["wall_s"]) / (chart_rows / floor_s)
    vs_floor_cpu = (big["event_rows"] / big["cpu_s"]) / (chart_rows / floor_cpu)
    print(f"floor: one DuckDB scan of icu/chartevents ({chart_rows:,d} rows) " +
          ", ".join(f"{f['wall_s']:.1f} s (CPU {f['cpu_s']:.1f} s)" for f in floors) +
          f" = {chart_rows / floor_s / 1e6:.2f} M rows/s; extract runs at {vs_floor:.2f}x the floor's rows/s "
          f"({vs_floor_cpu:.2f}x per CPU second)")
    print(f"growth exponent (time vs rows): {slope:.2f}; full MIMIC-IV ({full_rows:,d} event rows) extrapolates to "
          f"{full_wall / 60:.1f} min ({full_cpu / 60:.1f} min of CPU); peak RSS {big['peak_rss_mb']:.0f} MB at the "
          f"largest scale; full release at most {full_rss:.0f} MB (DuckDB's cap {cap_mb:.0f} MB + {outside_full:.0f} "
          "MB outside it)")
    return {"scales": rows, "growth_exponent": slope, "full_patients": FULL_PATIENTS, "full_event_rows": full_rows,
            "full_scale_extrapolated_s": full_wall, "full_scale_peak_rss_mb_extrapolated": full_rss,
            "full_scale_rss_outside_duckdb_mb": outside_full, "duckdb_memory_cap_mb": cap_mb,
            "cpu_growth_exponent": cpu_slope, "full_scale_cpu_s_extrapolated": full_cpu,
            "floor": {"chartevents_rows": chart_rows, "scan_s": floor_s, "rows_per_s": chart_rows / floor_s,
                      "cpu_s": floor_cpu, "rows_per_cpu_s": chart_rows / floor_cpu, "runs": floors},
            "extract_vs_floor": vs_floor, "extract_vs_floor_cpu": vs_floor_cpu, "profile": profile, "synth": SYNTH,
            "cpus": os.cpu_count(), "targets": {"wall_s": TARGET_S, "peak_rss_mb": TARGET_MB, "vs_floor": 0.8},
            "command": report.command(__spec__.name)}


def profile_tables(src: str) -> dict:
    """Where the time goes (run in a child: ``--profile-child SRC``): one DuckDB thread, one event table
    after another, the cohort built as the extraction builds it. Per table, CPU seconds of a bare scan
    (count(*) over the file with the extraction's CSV reader settings, every column VARCHAR), of the
    typed view (every column cast and checked, as the events query reads it) and of the events query
    itself (CREATE TABLE ev_<table> AS the window SQL), and DuckDB's profile of the events query:
    each operator's share of the summed operator time (time in READ_CSV includes the gzip inflate)."""
    import json as _json
    import resource
    import tempfile

    from pipeline.core.contracts import COHORT_COLUMNS
    from pipeline.data.mimic.extraction import queries
    from pipeline.data.mimic.extraction.config import ExtractConfig
    from pipeline.data.mimic.extraction.flow import _connect
    from pipeline.data.mimic.sources import open_source
    from pipeline.data.mimic.sources.csvdir import CSV_OPTIONS, read_header
    from pipeline.data.mimic.sources.tables import event_tables_of

    def cpu() -> float:
        u = resource.getrusage(resource.RUSAGE_SELF)
        return u.ru_utime + u.ru_stime

    def operators(nodes: list) -> list:
        return [op for n in nodes for op in [n, *operators(n.get("children", []))]]

    tmp = Path(tempfile.mkdtemp(prefix="profile4_"))
    cfg = ExtractConfig(threads=1)
    con = _connect(cfg, tmp)
    source = open_source(src, con)
    rel = source.relations()
    params = dict(prediction_hours=float(cfg.prediction_hours), lookback_days=float(cfg.lookback_days),
                  census_columns=", ".join(COHORT_COLUMNS))  # as the extraction's cohort stage builds it
    source.materialize(queries.admissions_classified(rel, source.release, **params, open_admissions="FALSE"),
                       "admissions_classified", "ADMISSIONS")
    source.materialize(queries.render(queries.COHORT, **params, cohort_filter="TRUE"), "cohort", "cohort")
    source.materialize(queries.render(queries.COHORT_SUBJECTS), "cohort_subjects", "cohort subjects")
    tables = {}
    for table in [t for t in event_tables_of(source.release) if t in source.tables]:
        path = source.tables[table].location
        columns = ", ".join(f"'{h}': 'VARCHAR'" for h in read_header(Path(path)))
        timed = {
            "bare": f"SELECT count(*) FROM read_csv('{path}', {CSV_OPTIONS}, columns={{{columns}}})",
            "typed": f"SELECT count(*), count(_error) FROM src_{table}",
        }
        row = {}
        for name, sql in timed.items():  # each the best of REPS runs (the machine is shared)
            best = math.inf
            for _ in range(REPS):
                c0 = cpu()
                n = con.sql(sql).fetchall()[0][0]
                best = min(best, cpu() - c0)
            row[f"{name}_cpu_s"] = best
        row["rows"] = int(n)
        best = math.inf
        for _ in range(REPS):
            con.execute("SET profiling_coverage = 'ALL'")
            con.execute("SET enable_profiling = 'no_output'")
            c0 = cpu()
            con.execute(f"CREATE OR REPLACE TABLE ev_{table} AS {queries.events_sql(table, rel, source.release)}")
            spent = cpu() - c0
            if spent < best:
                best, profile = spent, _json.loads(con.get_profiling_information(format="json"))
            con.execute("PRAGMA disable_profiling")
        row["events_cpu_s"] = best
        row["rows_kept"] = con.sql(f"SELECT count(*) FROM ev_{table}").fetchall()[0][0]
        con.execute(f"DROP TABLE ev_{table}")
        by_type: dict[str, float] = {}
        for op in operators(profile.get("operator", [])):
            by_type[op["type"]] = by_type.get(op["type"], 0.0) + float(op.get("timing", 0.0))
        total = sum(by_type.values()) or 1.0
        row["operator_share"] = {k: v / total for k, v in sorted(by_type.items(), key=lambda kv: -kv[1])
                                 if v / total >= 0.005}
        tables[table] = row
        print(f"  {table:20s} {row['rows']:11,d} rows: CPU bare scan {row['bare_cpu_s']:6.2f} s, typed "
              f"{row['typed_cpu_s']:6.2f} s, events query {row['events_cpu_s']:6.2f} s "
              f"({row['events_cpu_s'] / row['bare_cpu_s']:.2f}x the bare scan)", file=sys.stderr, flush=True)
    floor_sql = FLOOR_SQL.replace("{f}", source.tables["chartevents"].location)
    best = math.inf
    for _ in range(REPS):  # the floor's query in this process, same thread count and load
        c0 = cpu()
        con.sql(floor_sql).fetchall()
        best = min(best, cpu() - c0)
    con.close()
    shutil.rmtree(tmp, ignore_errors=True)
    return {"threads": 1, "reps": REPS, "tables": tables, "floor_cpu_s": best}


def _mb(limit: str) -> float:
    """DuckDB's memory_limit setting ('3GB', '500MB') in MB."""
    text = limit.strip().upper()
    for unit, mb in (("GB", 1024.0), ("MB", 1.0)):
        if text.endswith(unit):
            return float(text[: -len(unit)]) * mb
    raise ValueError(f"memory_limit {limit!r}: expected GB or MB")


def render(result: dict) -> str:
    """docs/mimic-iv.md's figures:extract_mimic4 section, from the benchmark's JSON."""
    lines = [f"Measured on {result['cpus']} CPUs, shared.", "",
             "| scale | patients | admissions | event rows | extract (s) | CPU (s) | load | M rows/s | M rows per CPU "
             "s | peak RSS (MB) | RSS after DuckDB (MB) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["scales"]:
        lines.append(f"| {r['scale']:.0%} | {r['patients']:,} | {r['admissions']:,} | {r['event_rows']:,} | "
                     f"{r['wall_s']:.1f} | {r['cpu_s']:.1f} | {r['load_avg_1min']:.1f} | {r['events_per_s'] / 1e6:.2f} "
                     f"| {r['events_per_cpu_s'] / 1e6:.2f} | {r['peak_rss_mb']:.0f} | {r['rss_after_duckdb_mb']:.0f} |")
    fl = result["floor"]
    t = result["targets"]
    big = result["scales"][-1]
    full_min = result["full_scale_extrapolated_s"] / 60
    cpu_min = result["full_scale_cpu_s_extrapolated"] / 60
    rss = result["full_scale_peak_rss_mb_extrapolated"]
    runs = " and ".join(f"{f['wall_s']:.1f} s (CPU {f['cpu_s']:.1f} s, load {f['load_avg_1min']:.1f})"
                        for f in fl["runs"])
    stages = ", ".join(f"{name} {v['cpu_s']:.1f}" for name, v in big["stages"].items())
    lines += ["",
              f"- Floor, same run: one DuckDB scan of icu/chartevents at the largest scale, {fl['chartevents_rows']:,} "
              f"rows, run just before and just after that scale's extraction: {runs}; mean {fl['scan_s']:.1f} s "
              f"({fl['rows_per_s'] / 1e6:.2f} M rows/s). The extraction reads all event tables at "
              f"{result['extract_vs_floor']:.2f}x the floor's rows per second (target {t['vs_floor']}x: "
              f"{'met' if result['extract_vs_floor'] >= t['vs_floor'] else 'not met'}); per CPU second, the "
              f"load-robust ratio, at {result['extract_vs_floor_cpu']:.2f}x the floor's "
              f"({fl['rows_per_cpu_s'] / 1e6:.2f} M rows per CPU second).",
              f"- Growth exponent of time in rows: {result['growth_exponent']:.2f}. Full MIMIC-IV v2.2 "
              f"({result['full_event_rows']:,} event rows, {result['full_patients']:,} patients) extrapolates to "
              f"{full_min:.1f} min (target {t['wall_s'] // 60} min: "
              f"{'met' if full_min * 60 <= t['wall_s'] else 'not met'}). Its CPU time (exponent "
              f"{result['cpu_growth_exponent']:.2f}) extrapolates to {cpu_min:.1f} min: the wall time on cores that "
              "are not shared, one or two, before any time spent spilling to disk (DuckDB's memory limit is reached at "
              "that scale).",
              f"- CPU seconds by stage at the largest scale: {stages}.",
              f"- Peak RSS {big['peak_rss_mb']:.0f} MB at the largest scale. DuckDB's own memory is "
              f"capped by memory_limit ({result['duckdb_memory_cap_mb']:.0f} MB; it spills to disk beyond it); the "
              "rest (the RSS after DuckDB's stages: cohort, features) grows with the admissions, "
              f"{result['full_scale_rss_outside_duckdb_mb']:.0f} MB extrapolated linearly to the full release, so the "
              f"full release's peak is at most {rss:.0f} MB (target {t['peak_rss_mb']} MB: "
              f"{'met' if rss <= t['peak_rss_mb'] else 'not met'})."]
    prof = result["profile"]
    lines += ["",
              f"Where the time goes, {prof['scale']:.0%} scale, one DuckDB thread, one table at a time (CPU seconds, "
              f"best of {prof['reps']}): a bare scan of the file with the extraction's CSV reader settings, the typed "
              "view (every column cast and checked), the events query (the window: cohort join, checks, the rows "
              "kept); the operators' shares of the events query's time (DuckDB's profile; the scan includes the gzip "
              "inflate, the projections the casts and checks):", "",
              "| table | rows | rows kept | bare scan | typed | events query | query / bare scan | operators |",
              "|---|---|---|---|---|---|---|---|"]
    for table, row in prof["tables"].items():
        ops = ", ".join(f"{name.lower().replace('_', ' ')} {share:.0%}"
                        for name, share in row["operator_share"].items())
        lines.append(f"| {table} | {row['rows']:,} | {row['rows_kept']:,} | {row['bare_cpu_s']:.2f} | "
                     f"{row['typed_cpu_s']:.2f} | {row['events_cpu_s']:.2f} | "
                     f"{row['events_cpu_s'] / row['bare_cpu_s']:.2f} | {ops} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scales", type=float, nargs="+", default=[0.01, 0.03, 0.10])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=RESULT)
    ap.add_argument("--profile-child", metavar="SRC", help=argparse.SUPPRESS)  # internal: profile_tables in a child
    args = ap.parse_args()
    if args.profile_child:
        print(json.dumps(profile_tables(args.profile_child)))
        return
    started = report.provenance()  # the commit the run starts at
    result = measure(args.scales, args.seed)
    report.write_results("extract_mimic4", {**started, **result},
                         path=args.json)  # the canonical JSON re-renders docs/mimic-iv.md


if __name__ == "__main__":
    main()
