"""MEDS out and in at full scale (issue 37): ``export-meds`` from a Parquet stage, then ``extract`` from that MEDS
dataset against ``extract`` from the stage, one after the other on the same machine.

    .venv/bin/python -m benchmarks.meds_export --fraction 1.0 [--layout mimic-iv] [--workers 2] [--results NAME]
        [--prepare] [--keep DIR]

The world is ``benchmarks.full_scale``'s (cached under benchmarks/.cache/full_scale_<layout>_<patients>/, made once
with ``synth --proportions <layout>``), and so is its stage, made once beside it (``..._stage/``, its ``stage``
figures kept in ``.stage.json``). Then, each ``cli.py`` command in a child process (wall time, CPU time, peak RSS,
``wait4``): ``export-meds --source STAGE``, ``extract --source STAGE`` and ``extract --source MEDS`` (the shipped
task config for the export, chosen by its dataset.json). Checked: both extractions give the same number of
admissions (labels), positives and split sizes, and the export's rows read = exported + quarantined per table.

Targets (issue 37, 2 cores, full scale): ``export-meds`` <= 10 min and <= 4 GB peak RSS; ``extract`` from the
export within 1.5x of ``extract`` from the stage. ``--results NAME`` (default ``meds_export`` at --fraction 1.0 of
MIMIC-IV, none otherwise) writes benchmarks/results/NAME.json and renders docs/performance.md's ``figures:NAME``.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

from benchmarks import report
from benchmarks.full_scale import FULL_PATIENTS, cached_world, child_env, measured
from benchmarks.harness import CACHE, cached

TARGETS = {"export_s": 600, "export_gb": 4.0, "extract_ratio": 1.5}  # issue 37's, on 2 cores at full scale
STEPS = ("export", "extract_stage", "extract_meds")  # measured each run, in this order


def du_bytes(path: Path) -> int:
    """Bytes of the files under ``path``."""
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fraction", type=float, required=True, help="fraction of the release's patients (0, 1]")
    ap.add_argument("--layout", choices=list(FULL_PATIENTS), default="mimic-iv", help="synth's layout")
    ap.add_argument("--workers", type=int, default=2, help="synth processes (when the world is made)")
    ap.add_argument("--results", default=None, help="write benchmarks/results/NAME.json and its docs section "
                    "[meds_export at --fraction 1.0 of MIMIC-IV]")
    ap.add_argument("--keep", type=Path, default=None, help="keep the export and both extractions under KEEP")
    ap.add_argument("--prepare", action="store_true", help="make (and measure) the world and its stage, then stop")
    args = ap.parse_args(argv)
    if not 0 < args.fraction <= 1:
        raise SystemExit(f"--fraction must be in (0, 1], got {args.fraction}")
    results = args.results or ("meds_export" if args.layout == "mimic-iv" and args.fraction == 1.0 else None)
    measured_at = report.provenance()
    patients = max(1, round(FULL_PATIENTS[args.layout] * args.fraction))
    env = child_env()
    stages: dict[str, dict] = {}
    world = cached_world(args.layout, patients, args.workers, env, stages)

    def stage(path: Path) -> None:  # the world's stage, made once; its figures kept beside it
        stages["stage"] = measured(["cli.py", "stage", "--source", str(world), "--out", str(path / "stage")], env)
        (path / ".stage.json").write_text(json.dumps({k: v for k, v in stages["stage"].items() if k != "stdout"}))

    staged = cached(world.with_name(world.name + "_stage"), stage)
    if "stage" not in stages:
        stages["stage"] = {**json.loads((staged / ".stage.json").read_text()), "cached": True}
    source = staged / "stage"
    if args.prepare:
        print(json.dumps({k: {m: v for m, v in s.items() if m != "stdout"} for k, s in stages.items()}))
        return {"stages": stages}
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as work:
        work = Path(args.keep or work)
        meds, f_stage, f_meds = work / "meds", work / "features-stage", work / "features-meds"

        def run(name: str, argv: list[str]) -> dict:
            stages[name] = measured(argv, env)
            s = stages[name]
            print(f"{name:14s} {s['wall_s']:9.1f} s wall {s['cpu_s']:9.1f} CPU s {s['peak_rss_mb']:8.0f} MB "
                  f"load {s['load_average']:.2f}", flush=True)
            return s

        run("export", ["cli.py", "export-meds", "--source", str(source), "--out", str(meds)])
        run("extract_stage", ["cli.py", "extract", "--source", str(source), "--out", str(f_stage)])
        run("extract_meds", ["cli.py", "extract", "--source", str(meds), "--out", str(f_meds)])
        exported = json.loads((meds / "export.json").read_text())
        direct, via = (json.loads((f / "manifest.json").read_text()) for f in (f_stage, f_meds))
        for name, t in exported["tables"].items():
            if t["rows_read"] != t["exported"] + t["quarantined"]:
                raise SystemExit(f"export.json: table {name} does not add up: {t}")
        checks = {
            "export": {"subjects": exported["subjects"], "rows": exported["rows"], "shards": exported["shards"],
                       "codes": exported["codes"], "bytes": du_bytes(meds),
                       "rows_read": sum(t["rows_read"] for t in exported["tables"].values()),
                       "quarantined": sum(t["quarantined"] for t in exported["tables"].values())},
            "stage_bytes": du_bytes(source),
            "cohort_stage": {k: direct["cohort"][k] for k in ("admissions", "positives")},
            "cohort_meds": {k: via["cohort"][k] for k in ("admissions", "positives")},
            "splits_stage": {s: v["admissions"] for s, v in direct["splits"].items()},
            "splits_meds": {s: v["admissions"] for s, v in via["splits"].items()},
            "meds_rows_read": via["tables"]["data"]["rows_read"],
            "meds_events_used": via["tables"]["data"]["events_used"],
        }
    figures = {"fraction": args.fraction, "layout": args.layout, "patients": patients, "cpus": os.cpu_count(),
               "command": report.command("benchmarks.meds_export"),
               "stages": {k: {m: v for m, v in s.items() if m != "stdout"} for k, s in stages.items()}, **checks}
    same = checks["cohort_stage"] == checks["cohort_meds"] and checks["splits_stage"] == checks["splits_meds"]
    print(f"admissions: stage {checks['cohort_stage']}, MEDS {checks['cohort_meds']} "
          f"({'the same' if same else 'DIFFER'})")
    if results:
        report.write_results(results, {**measured_at, **figures})
    return figures


def _min(s: float) -> str:
    return f"{s / 60:.1f} min" if s >= 90 else f"{s:.1f} s"


def render(r: dict) -> str:
    """docs/performance.md's figures:meds_export section, from its results JSON."""
    st, full = r["stages"], r["fraction"] == 1.0

    def verdict(ok: bool) -> str:
        return ("met" if ok else "not met") if full else "not applicable below full scale"

    what = {"synth": "`synth` (when the world was generated)", "stage": "`stage` (when the stage was made)",
            "export": "`export-meds --source STAGE`", "extract_stage": "`extract --source STAGE`",
            "extract_meds": "`extract --source MEDS` (the export)"}
    rows = [[what[k], _min(st[k]["wall_s"]), f"{st[k]['cpu_s']:,.0f} s", f"{st[k]['peak_rss_mb']:,.0f} MB",
             f"{st[k]['load_average']:.2f}"] for k in ("synth", "stage", *STEPS) if k in st]
    x, e = r["export"], st["export"]
    ratio = st["extract_meds"]["wall_s"] / st["extract_stage"]["wall_s"]
    cpu_ratio = st["extract_meds"]["cpu_s"] / st["extract_stage"]["cpu_s"]
    same = r["cohort_stage"] == r["cohort_meds"] and r["splits_stage"] == r["splits_meds"]
    out = [f"{r['patients']:,} patients ({r['fraction']:g} of {r['layout'].upper()}'s "
           f"{FULL_PATIENTS[r['layout']]:,}); {r['cpus']} CPU cores; each command a child process, one after the "
           "other.", "",
           report.table(["step", "wall", "CPU", "peak RSS", "load avg after"], rows), "",
           f"- `export-meds` from the stage: **{_min(e['wall_s'])}**, peak RSS **{e['peak_rss_mb'] / 1024:.2f} GB** "
           f"(targets {TARGETS['export_s'] / 60:g} min: {verdict(e['wall_s'] <= TARGETS['export_s'])}; "
           f"{TARGETS['export_gb']:g} GB: {verdict(e['peak_rss_mb'] / 1024 <= TARGETS['export_gb'])}). It read "
           f"{x['rows_read']:,} source rows and wrote {x['rows']:,} MEDS rows of {x['subjects']:,} subjects in "
           f"{x['shards']} shard(s) ({x['codes']:,} codes, {x['bytes'] / 1e9:.2f} GB on disk against the stage's "
           f"{r['stage_bytes'] / 1e9:.2f} GB); {x['quarantined']:,} rows quarantined.",
           f"- `extract` from the export: **{ratio:.2f}x** the wall time of `extract` from the stage "
           f"({_min(st['extract_meds']['wall_s'])} against {_min(st['extract_stage']['wall_s'])}; target 1.5x: "
           f"{verdict(ratio <= TARGETS['extract_ratio'])}), {cpu_ratio:.2f}x its CPU time; it read "
           f"{r['meds_rows_read']:,} MEDS rows and used {r['meds_events_used']:,} events.",
           f"- CPU time against wall time: a step's CPU seconds over the {r['cpus']} cores are the least wall time it "
           f"could take on them alone; the load average after each step says how busy the machine was (other work "
           f"shares it): `export-meds` {e['cpu_s']:,.0f} CPU s, at least {_min(e['cpu_s'] / r['cpus'])} of wall.",
           f"- Admissions: {r['cohort_stage']['admissions']:,} from the stage, {r['cohort_meds']['admissions']:,} "
           f"from the export ({r['cohort_stage']['positives']:,} and {r['cohort_meds']['positives']:,} deaths; split "
           f"sizes {'the same' if same else 'DIFFERENT'}: {r['splits_meds']})."]
    return "\n".join(out)


if __name__ == "__main__":
    main()
