"""The whole chain at a fraction of MIMIC-III's (or MIMIC-IV's) size, each stage measured, not extrapolated.

    .venv/bin/python -m benchmarks.full_scale --fraction 1.0 [--layout mimic-iii] [--workers 2]
        [--max-steps N] [--threads 1] [--no-csv] [--synth-only] [--results NAME] [--json PATH]

synth (cached under benchmarks/.cache/full_scale_<layout>_<patients>/, generated once, with
``--workers`` processes; MIMIC-IV with MIMIC-IV's proportions, ``synth --proportions mimic-iv``); its
figures are kept beside the world in ``.synth.json`` and
reported from there when the world is cached) -> ``stage`` -> ``extract --source STAGE`` -> ``train``
-> ``evaluate`` -> ``score --source STAGE``, each ``cli.py`` command in a child process: its wall time,
CPU time (user + system, its own and its children's) and peak RSS (``wait4``), with the load average
after it. The chain's total is stage .. score (synth is not in it).

Beside the chain, in the same run (unless ``--no-csv``): ``extract`` from the CSV directory (the path
without a stage; its feature files must be byte-identical to the staged ones), and a **checked scan**
of each source, CSV and stage: every column the extraction reads, typed and checked as it types them
(the sources' own views, ``_error`` included) and counted, tables two at a time as the extraction
scans them, nothing written. The extraction's time is reported against its source's checked scan.

Scale: ``--fraction`` of MIMIC-III v1.4's 46,520 patients, or of MIMIC-IV v2.2's 299,712. With
``--results NAME`` (default: ``full_scale`` for MIMIC-III at 1.0, ``full_scale_mimic4`` for MIMIC-IV at
any fraction given with it) the figures go to benchmarks/results/NAME.json and docs/performance.md's
``figures:NAME`` section is rendered from them (``render``). ``--synth-only`` makes (and measures) the
world and stops.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import tempfile
import time
from pathlib import Path

from benchmarks import report
from benchmarks.harness import CACHE, PY, cached, run_child

FULL_PATIENTS = {"mimic-iii": 46_520, "mimic-iv": 299_712}  # each release's patients (synth's scale 1.0)
CHAIN = ("stage", "extract", "train", "evaluate", "score")  # the chain's stages, in order
# issue 24's targets on 2 cores at full scale, seconds (and GB)
TARGETS = {"mimic-iii": {"extract_s": 90, "extract_gb": 3.0, "synth_s": 600, "chain_s": 25 * 60},
           "mimic-iv": {"extract_s": 180}}


def world_dir(layout: str, patients: int) -> Path:
    """Where the synthetic world of ``patients`` in ``layout`` is cached."""
    return CACHE / f"full_scale_{layout}_{patients}"


def child_env() -> dict:
    """The children's environment: this one, with a benchmark-only de-identification key unless one is set."""
    return {**os.environ, "MIMIC_DEID_KEY": os.environ.get("MIMIC_DEID_KEY", "benchmark-only-key")}


def measured(argv: list[str], env: dict) -> dict:
    """Run ``argv`` (``cli.py ...`` or ``-m ...``) as a child: wall s, CPU s, peak RSS MB, its stdout, the
    load average after."""
    try:
        child = run_child([PY, *argv], env)
    except RuntimeError as err:
        raise SystemExit(str(err)) from None
    return {"wall_s": round(child.wall_s, 2), "cpu_s": round(child.cpu_s, 2),
            "peak_rss_mb": round(child.peak_rss_mb, 1), "load_average": round(os.getloadavg()[0], 2),
            "stdout": child.stdout}


def cached_world(layout: str, patients: int, workers: int, env: dict, stages: dict) -> Path:
    """The synthetic world of ``patients`` in ``layout`` (MIMIC-IV: with MIMIC-IV's proportions, synth
    --proportions), generated once under ``world_dir`` with ``workers`` processes; ``stages["synth"]``: synth's
    figures, measured when it runs, else those kept beside the cached world (``.synth.json``, ``cached``)."""
    def synth(world: Path) -> None:  # measured as a stage when it runs (not when the world is cached)
        stages["synth"] = measured(["cli.py", "synth", "--out", str(world), "--patients", str(patients),
                                    "--layout", layout, "--workers", str(workers), "--proportions", layout], env)

    world = cached(world_dir(layout, patients), synth)
    record = world / ".synth.json"  # synth's figures, measured when the world was generated, kept beside it
    if "synth" in stages:
        stages["synth"].update(workers=workers, date=time.strftime("%Y-%m-%d", time.gmtime()))
        record.write_text(json.dumps(stages["synth"], indent=2) + "\n")
    elif record.exists():
        stages["synth"] = {**json.loads(record.read_text()), "cached": True}
    return world


def checked_scan(location: str, workers: int = 2) -> dict:
    """Scan every table of the source at ``location`` the extraction reads, through the source's typed views:
    count(*), and of each column its count and ``bit_xor(hash(...))`` of its typed values (the hash makes
    every value be read and decoded: a Parquet file answers a bare count from its metadata), and the rows
    with an ``_error``; ``workers`` tables at a time on their own cursors, largest first. Returns per table
    the rows, the rows with an error and a digest of every value (equal for a CSV directory and its stage)."""
    from concurrent.futures import ThreadPoolExecutor

    import duckdb

    from pipeline.data.mimic.sources import open_source

    con = duckdb.connect()
    con.execute("SET memory_limit = '3GB'")
    src = open_source(location, con)
    names = sorted(src.tables, key=lambda n: -Path(src.tables[n].location).stat().st_size)

    def scan(name: str) -> tuple[str, dict]:
        cols = list(src.specs[name].columns)
        cur = con.cursor()
        try:
            counted = ", ".join(f"count({c}), bit_xor(hash({c}))" for c in cols)
            row = cur.sql(f"SELECT count(*), {counted}, count(_error) FROM src_{name}").fetchall()[0]
        finally:
            cur.close()
        digest = 0
        for i, value in enumerate(row[1:-1]):  # count, hash of each column in turn, mixed by position
            digest ^= (int(value or 0) * (2 * i + 1)) % (1 << 64)
        return name, {"rows": int(row[0]), "error_rows": int(row[-1]), "columns": len(cols), "digest": f"{digest:016x}"}

    with ThreadPoolExecutor(max_workers=workers) as pool:
        tables = dict(pool.map(scan, names))
    con.close()
    return {"tables": tables, "rows": sum(t["rows"] for t in tables.values())}


def identical_features(a: Path, b: Path) -> bool:
    """Whether two extractions wrote the same bytes for every split's feature file."""
    return all(filecmp.cmp(a / f, b / f, shallow=False) for f in ("train.parquet", "val.parquet", "test.parquet"))


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fraction", type=float, required=True, help="fraction of the release's patients (0, 1]")
    ap.add_argument("--layout", choices=list(FULL_PATIENTS), default="mimic-iii", help="synth's layout")
    ap.add_argument("--workers", type=int, default=2, help="synth processes")
    ap.add_argument("--max-steps", type=int, default=None, help="training steps (unset: train's default budget)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads of train, evaluate and score (1 is "
                    "fastest on a busy small CPU)")
    ap.add_argument("--no-csv", action="store_true", help="skip the CSV extraction and the checked scans")
    ap.add_argument("--synth-only", action="store_true", help="generate (and measure) the world, then stop")
    ap.add_argument("--results", default=None, help="write benchmarks/results/NAME.json and its docs section "
                    "[full_scale at --fraction 1.0 of MIMIC-III; full_scale_mimic4 for MIMIC-IV]")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    ap.add_argument("--keep", type=Path, default=None, help="keep the staged extraction's features as "
                    "KEEP/features-<split mode> (for experiments.features_oracle --bench KEEP); with --rescan, "
                    "the stage as KEEP/stage")
    ap.add_argument("--rescan", default=None, metavar="WHY", help="measure only the checked scans again (the "
                    "world cached, staged again) into the results file, which records WHY, the commit and date")
    ap.add_argument("--checked-scan", default=None, help=argparse.SUPPRESS)  # the child's mode: one source
    args = ap.parse_args(argv)
    if args.checked_scan:
        print(json.dumps(checked_scan(args.checked_scan)))
        return {}
    if args.rescan:
        return rescan(args)
    if not 0 < args.fraction <= 1:
        raise SystemExit(f"--fraction must be in (0, 1], got {args.fraction}")
    results = args.results or ("full_scale" if args.layout == "mimic-iii" and args.fraction == 1.0 else
                               "full_scale_mimic4" if args.layout == "mimic-iv" else None)
    measured_at = report.provenance()
    patients = max(1, round(FULL_PATIENTS[args.layout] * args.fraction))
    env = child_env()
    stages: dict[str, dict] = {}
    world = cached_world(args.layout, patients, args.workers, env, stages)
    if args.synth_only:
        print(json.dumps({k: v for k, v in stages.get("synth", {}).items() if k != "stdout"}))
        return {"stages": stages}
    CACHE.mkdir(parents=True, exist_ok=True)
    checks: dict = {}
    with tempfile.TemporaryDirectory(dir=CACHE) as work:
        work = Path(work)
        env["MLFLOW_TRACKING_URI"] = f"sqlite:///{work / 'mlflow.db'}"
        stage, feats, csv_feats = str(work / "stage"), work / "features", work / "features-csv"
        threads = ["--threads", str(args.threads)]

        def run(name: str, argv: list[str]) -> dict:
            stages[name] = measured(argv, env)
            s = stages[name]
            print(f"{name:12s} {s['wall_s']:9.1f} s wall {s['cpu_s']:9.1f} CPU s {s['peak_rss_mb']:8.0f} MB "
                  f"load {s['load_average']:.2f}", flush=True)
            return s

        if not args.no_csv:
            run("extract_csv", ["cli.py", "extract", "--source", str(world), "--out", str(csv_feats)])
        run("stage", ["cli.py", "stage", "--source", str(world), "--out", stage])
        run("extract", ["cli.py", "extract", "--source", stage, "--out", str(feats)])
        if not args.no_csv:
            scans, found = _scans(world, stage, env)
            stages.update(scans)
            checks.update(found, identical_features=identical_features(feats, csv_feats))
        manifest = json.loads((feats / "manifest.json").read_text())
        checks["admissions"] = manifest["cohort"]["admissions"]
        checks["event_rows"] = sum(t.get("rows_read", 0) for t in manifest["tables"].values())
        steps = ["--max-steps", str(args.max_steps)] if args.max_steps else []
        train = run("train", ["cli.py", "train", "--data", str(feats), "--experiment", "full-scale", *steps,
                              *threads])
        run_id = train["stdout"].strip().splitlines()[-1].split()[-1]
        checks["train_summary"] = [ln for ln in train["stdout"].splitlines() if "best_step=" in ln][-1:]
        check = measured(["-m", "experiments.early_stopping", "--run", run_id], env)["stdout"].strip()
        checks["early_stopping_check"] = check.splitlines()[-1]
        print(checks["early_stopping_check"], flush=True)
        ev = run("evaluate", ["cli.py", "evaluate", "--run", run_id, "--out", str(work / "eval"), "--no-log",
                              *threads])
        lines = [ln for ln in ev["stdout"].splitlines() if ln.strip()]
        starts = [i for i, ln in enumerate(lines) if ln.startswith("test:")]
        checks["evaluate_summary"] = lines[starts[-1]:] if starts else lines[-12:]  # the test split's table
        run("score", ["cli.py", "score", "--model", run_id, "--source", stage, "--out",
                      str(work / "scores.parquet"), "--no-link", *threads])
        if args.keep:
            from pipeline.runs.store import features_split_mode

            kept = args.keep / f"features-{features_split_mode(feats)}"
            kept.parent.mkdir(parents=True, exist_ok=True)
            if kept.exists():
                raise SystemExit(f"--keep: {kept} exists")
            os.replace(feats, kept)
            print(f"features kept in {kept}")
    figures = {"fraction": args.fraction, "layout": args.layout, "patients": patients, "max_steps": args.max_steps,
               "cpus": os.cpu_count(), "command": report.command("benchmarks.full_scale"),
               "stages": {k: {m: v for m, v in s.items() if m != "stdout"} for k, s in stages.items()},
               "chain_wall_s": round(sum(stages[s]["wall_s"] for s in CHAIN), 2),
               "chain_cpu_s": round(sum(stages[s]["cpu_s"] for s in CHAIN), 2), **checks}
    print(f"chain (stage..score) {figures['chain_wall_s']:.1f} s wall, {figures['chain_cpu_s']:.1f} CPU s; "
          f"{patients} patients ({args.fraction:g} of {args.layout}), {checks['admissions']} admissions")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    if results:
        report.write_results(results, {**measured_at, **figures})
    return figures


def _scans(world: Path, stage: str, env: dict) -> tuple[dict, dict]:
    """The checked scans of the CSV directory and of its stage, measured: (stages, checks)."""
    stages, checks = {}, {}
    for name, location in (("scan_csv", str(world)), ("scan_stage", stage)):
        stages[name] = measured(["-m", "benchmarks.full_scale", "--fraction", "1", "--checked-scan", location], env)
        checks[name] = json.loads(stages[name].pop("stdout").strip().splitlines()[-1])
        print(f"{name:12s} {stages[name]['wall_s']:9.1f} s wall", flush=True)
    if checks["scan_csv"]["tables"] != checks["scan_stage"]["tables"]:
        raise SystemExit("the checked scans of the CSV directory and of its stage disagree: "
                         f"{checks['scan_csv']['tables']} vs {checks['scan_stage']['tables']}")
    return stages, checks


def rescan(args) -> dict:
    """``--rescan WHY``: the checked scans measured again into an existing results file."""
    measured_at = report.provenance()  # the checkout as the run starts
    name = args.results or ("full_scale" if args.layout == "mimic-iii" else "full_scale_mimic4")
    result = report.load(name)
    world = world_dir(result["layout"], result["patients"])
    if not (world / ".complete").exists():
        raise SystemExit(f"{world}: the cached world of {name}.json is gone")
    env = child_env()
    with tempfile.TemporaryDirectory(dir=CACHE) as work:
        stage = str((args.keep or Path(work)) / "stage")  # --keep: the stage stays there
        measured(["cli.py", "stage", "--source", str(world), "--out", stage], env)
        stages, checks = _scans(world, stage, env)
    result["stages"].update(stages)
    result.update(checks, rescan={**measured_at, "why": args.rescan,
                                  "command": report.command("benchmarks.full_scale")})
    report.write_results(name, result)
    return result


def _min(s: float) -> str:
    return f"{s / 60:.1f} min" if s >= 90 else f"{s:.1f} s"


def render(r: dict) -> str:
    """docs/performance.md's figures:full_scale (figures:full_scale_mimic4) section, from its results JSON."""
    st = r["stages"]
    order = ["synth", "extract_csv", "scan_csv", "stage", "extract", "scan_stage", "train", "evaluate", "score"]
    iv = " --layout mimic-iv --proportions mimic-iv" if r["layout"] == "mimic-iv" else ""
    what = {"synth": f"`synth --workers {st['synth'].get('workers', 1)}{iv}`" if "synth" in st else "",
            "extract_csv": "`extract` from the CSV directory", "scan_csv": "checked scan of the CSV directory",
            "stage": "`stage`", "extract": "`extract` from the stage", "scan_stage": "checked scan of the stage",
            "train": "`train` (defaults)" if r.get("max_steps") is None else f"`train --max-steps {r['max_steps']}`",
            "evaluate": "`evaluate`", "score": "`score` from the stage"}
    rows = []
    for name in order:
        if name not in st:
            continue
        s = st[name]
        note = " (when the world was generated)" if s.get("cached") else ""
        rows.append([what[name] + note, _min(s["wall_s"]), f"{s['cpu_s']:,.0f} s", f"{s['peak_rss_mb']:,.0f} MB",
                     f"{s['load_average']:.2f}", "yes" if name in CHAIN else ""])
    out = [f"{r['patients']:,} patients ({r['fraction']:g} of {r['layout'].upper()}'s "
           f"{FULL_PATIENTS[r['layout']]:,}), {r['admissions']:,} admissions in the cohort, "
           f"{r['event_rows']:,} event rows read; {r['cpus']} CPU cores.", "",
           report.table(["stage", "wall", "CPU", "peak RSS", "load avg after", "in the chain"], rows), ""]
    t = TARGETS.get(r["layout"], {})
    full = r["fraction"] == 1.0

    def verdict(ok: bool) -> str:
        return ("met" if ok else "not met") if full else "not applicable below full scale"

    out.append(f"- Chain stage -> extract -> train -> evaluate -> score: **{_min(r['chain_wall_s'])}** wall, "
               f"{r['chain_cpu_s']:,.0f} CPU s" + (f" (target {t['chain_s'] / 60:g} min: "
                                                 f"{verdict(r['chain_wall_s'] <= t['chain_s'])})" if "chain_s" in t
                                                 else "") + ".")
    ex = st["extract"]
    line = f"- `extract` from the stage: {_min(ex['wall_s'])}, peak RSS {ex['peak_rss_mb'] / 1024:.2f} GB"
    if "extract_s" in t:
        line += f" (targets: {t['extract_s']} s, {verdict(ex['wall_s'] <= t['extract_s'])}"
        if "extract_gb" in t:
            line += f"; {t['extract_gb']:g} GB, {verdict(ex['peak_rss_mb'] / 1024 <= t['extract_gb'])}"
        line += ")"
    out.append(line + ".")
    if "scan_stage" in st:
        csv_ratio = st["extract_csv"]["wall_s"] / st["scan_csv"]["wall_s"]
        out.append(f"- Against a checked scan in the same run (every column the extraction reads, typed and "
                   f"checked as it types them, counted; {r['scan_csv']['rows']:,} rows): from the CSV directory, "
                   f"extraction {_min(st['extract_csv']['wall_s'])} against the scan's "
                   f"{_min(st['scan_csv']['wall_s'])} (**{csv_ratio:.2f}x**);"
                   f" from the stage {_min(ex['wall_s'])} against {_min(st['scan_stage']['wall_s'])} "
                   f"(**{ex['wall_s'] / st['scan_stage']['wall_s']:.2f}x**). The two extractions' feature files are "
                   f"{'byte-identical' if r['identical_features'] else 'NOT identical'}."
                   + (" The checked scans hold the same rows, error rows and value digests per table through "
                      "both sources." if all("digest" in tab for tab in r["scan_csv"]["tables"].values()) else ""))
        if "rescan" in r:
            rs = r["rescan"]
            cmd = rs["command"].split(" --rescan")[0] + " --rescan WHY"
            out.append(f"- The checked scans' figures are from `{cmd}` at commit `{rs['commit']}` on "
                       f"{rs['date']}, on the same cached world and machine: {rs['why']}.")
        ratio = st["stage"]["wall_s"] / st["extract_csv"]["wall_s"]
        out.append(f"- `stage` took {ratio:.2f}x the CSV extraction's wall time (target: no slower, "
                   f"{verdict(ratio <= 1.0)}); every later extraction takes "
                   f"{ex['wall_s'] / st['extract_csv']['wall_s']:.2f}x.")
    if "synth" in st and "synth_s" in t:
        s = st["synth"]
        out.append(f"- `synth` at this scale: {_min(s['wall_s'])} with {s.get('workers', '?')} workers "
                   f"(target {t['synth_s'] / 60:g} min: {verdict(s['wall_s'] <= t['synth_s'])}).")
    if r.get("early_stopping_check"):
        out.append(f"- Training's early-stopping check (`experiments.early_stopping --run`): "
                   f"{r['early_stopping_check'].split(': ', 1)[-1]}.")
    return "\n".join(out)


if __name__ == "__main__":
    main()
