"""Comparison of evaluated vision runs: methods x (clean, each severity) x (NLL, accuracy, ECE), mean ± sd.

Vision runs (tag ``run_kind`` = vision: image models and Laplace runs of them) are compared apart
from the mortality runs, one section per dataset: ``collect_vision`` reads each run's
``eval/test/metrics.json`` (``pipeline.workflows.vision_run.evaluate_vision_run``), ``summarize_vision`` labels the
variants as the mortality table does (``compare.label_variants``: runs of one label whose settings
differ become separate rows named by those settings; a seed evaluated twice counts once, the
latest) and averages over seeds with ``reports.vision_summary.summarize_runs`` (severity columns: each
metric's mean over the corruptions, then over seeds; sd over seeds, ddof = 1, 0 for one seed).
``write_vision`` writes ``vision.md``, ``vision.csv`` and ``vision_<dataset>.png`` (each metric
against the severity, a line per method with ±sd bars) atomically. ``compare_all`` is what the
command line runs: the mortality table exactly as ``compare.compare`` gives it, and these sections, of every
run kind of the experiments it reads (``DEFAULT_EXPERIMENTS`` unless named).
"""

from __future__ import annotations

import csv
import io
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.core import fileio
from pipeline.core.errors import naming
from pipeline.reports.compare import CompareError, collect, fetch_runs, label_variants, summarize, write_tables
from pipeline.reports.vision_summary import markdown_table, summarize_runs
from pipeline.runs import store
from pipeline.runs.load import evaluation, runs_of
from pipeline.tasks.vision import KEY as VISION

VISION_SPLIT = "test"  # the split a vision evaluation scores (eval/test/metrics.json)
VISION_METRICS = ("nll", "accuracy", "ece")  # the tables, in this order
METRIC_TITLES = {"nll": "NLL (nats)", "accuracy": "Accuracy", "ece": "ECE (top-label, 15 bins)"}
# params that do not define a variant: the seed makes the spread, the rest are logistics or places
NOT_VISION_SETTINGS = {"train.seed", "train.threads", "train.log_every", "train.eval_every_epochs",
                       "train.eval_batch_size", "train.data_dir", "train.device", "n_train", "n_val", "steps",
                       "distinct_per_step", "laplace.batch_size", "parent_run_id"}


@dataclass
class Comparison:
    """What ``compare_all`` produced."""

    mortality: list[dict] = field(default_factory=list)  # compare.summarize rows (empty: no mortality runs)
    vision: list[dict] = field(default_factory=list)  # summarize_vision sections, one per dataset
    files: list[Path] = field(default_factory=list)  # tables and plots written


def vision_settings(params: dict, report: dict) -> dict[str, str]:
    """What defines a vision run's variant beyond its label: model / train / laplace params (the seed and
    logistics excluded), the evaluation's samples and its corruptions."""
    out = {k: str(v) for k, v in params.items()
           if k.startswith(("model.", "train.", "laplace.")) and k not in NOT_VISION_SETTINGS}
    out["eval.samples"] = str(report.get("samples"))
    out["eval.corruptions"] = ",".join(sorted(report.get("corrupted") or {})) or "none"
    out["eval.corruption_source"] = str(report.get("corruption_source", "generated"))
    return out


def collect_vision(experiment: str | None = None, run_ids: list[str] | None = None, runs: list | None = None
                   ) -> list[dict]:
    """One row per evaluated vision run: label, dataset, seed, settings and the evaluation report."""
    runs = fetch_runs(experiment, run_ids) if runs is None else runs
    rows = []
    with tempfile.TemporaryDirectory(prefix="compare-vision-") as tmp:
        for run in runs_of(runs, VISION):
            report = evaluation(run.run_id, VISION_SPLIT, tmp)
            if report is None:  # not evaluated
                continue
            params, tags = run.params, run.tags
            rows.append({"run_id": run.run_id, "model": tags.get("model_label") or report.get("model_label"),
                         "features": tags.get("dataset") or report.get("dataset") or "unknown",
                         "split_mode": "vision", "seed": int(params.get("train.seed", -1)),
                         "start_time": run.start_time,
                         "settings": vision_settings(params, report), "report": report})
    return rows


def summarize_vision(rows: list[dict]) -> list[dict]:
    """Per dataset: {dataset, seeds: {label: n}, summary: {label: {setting: {metric: {mean, sd, n}}}}}, the
    labels in the order of their first run."""
    sections: dict[str, list[dict]] = {}
    for r in label_variants(rows, defaults={}):
        sections.setdefault(r["features"], []).append(r)
    out = []
    for dataset, group in sorted(sections.items()):
        group.sort(key=lambda r: (r["start_time"], r["seed"]))
        labels = list(dict.fromkeys(r["model"] for r in group))
        runs = [{"method": r["model"], "seed": r["seed"], "report": r["report"]} for r in group]
        summary = summarize_runs(runs, VISION_METRICS)
        out.append({"dataset": dataset, "seeds": {m: sum(r["model"] == m for r in group) for m in labels},
                    "summary": {m: summary[m] for m in labels}, "run_ids": [r["run_id"] for r in group]})
    return out


def vision_markdown(sections: list[dict]) -> str:
    """Per dataset, one table per metric: a row per method, columns clean and severities 1..5 (mean ± sd)."""
    parts = []
    for sec in sections:
        seeds = ", ".join(f"{m} {n}" for m, n in sec["seeds"].items())
        parts.append(f"## Vision: {sec['dataset']} (seeds per method: {seeds})")
        for metric in VISION_METRICS:
            parts += ["", f"{METRIC_TITLES[metric]}", "", markdown_table(sec["summary"], metric)]
        parts.append("")
    note = ("clean: the test split; severity s: each metric's mean over the evaluated corruptions at s, then mean "
            "± sd over seeds (sd 0 for one seed). NLL of the mixture over the S·K draws.")
    return "\n".join(parts + [note]) + "\n"


def vision_csv(sections: list[dict]) -> str:
    """dataset, method, seeds, setting, then mean and sd of each metric."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["dataset", "method", "seeds", "setting", *(f"{m}_{s}" for m in VISION_METRICS for s in ("mean", "sd"))])
    for sec in sections:
        for method, rows in sec["summary"].items():
            for setting, row in rows.items():
                w.writerow([sec["dataset"], method, sec["seeds"][method], setting,
                            *(f"{row[m][s]:.6g}" for m in VISION_METRICS for s in ("mean", "sd"))])
    return buf.getvalue()


def write_vision(sections: list[dict], out_dir: Path | str) -> list[Path]:
    """``vision.md``, ``vision.csv`` and a ``vision_<dataset>.png`` per section (atomic writes)."""
    from pipeline.reports.plots import plot_severity

    out = Path(out_dir)
    files = [fileio.write_text(out / "vision.md", vision_markdown(sections)),
             fileio.write_text(out / "vision.csv", vision_csv(sections))]
    for sec in sections:
        series = {m: {s: {k: (v["mean"], v["sd"]) for k, v in row.items()} for s, row in rows.items()}
                  for m, rows in sec["summary"].items()}
        files.append(plot_severity(series, out / f"vision_{sec['dataset']}.png",
                                   title=f"{sec['dataset']}: mean ± sd over seeds"))
    return files


# the experiments read when none is named: every kind of run the commands write by default (mortality models and
# baselines, their Laplace runs, image models)
DEFAULT_EXPERIMENTS = (store.DEFAULT_EXPERIMENT, store.LAPLACE_EXPERIMENT, store.VISION_EXPERIMENT)


def compare_all(experiment: str | list[str] | tuple[str, ...] | None = None, run_ids: list[str] | None = None,
                out_dir: Path | str | None = None) -> Comparison:
    """Mortality table (``compare.summarize``, unchanged) and vision sections of the same runs: the runs
    ``run_ids``, else every run (any kind) of the experiments ``experiment`` names, else of those of
    ``DEFAULT_EXPERIMENTS`` the store holds; with ``out_dir`` their files (compare.md/csv only when there are
    mortality runs)."""
    names = [experiment] if isinstance(experiment, str) else list(experiment or [])
    if run_ids:
        runs = fetch_runs(None, run_ids)
    elif names:
        runs = [r for n in dict.fromkeys(names) for r in fetch_runs(n)]
    else:  # the default experiments that exist
        names = [n for n in DEFAULT_EXPERIMENTS if store.experiment_exists(n)]
        if not names:
            raise naming(CompareError(f"none of the experiments {list(DEFAULT_EXPERIMENTS)} is in "
                                      f"{store.tracking_uri()}; name one (`experiment`)"), "experiment")
        runs = [r for n in names for r in fetch_runs(n)]
    result = Comparison()
    try:
        mortality_rows = collect(runs=runs)
    except CompareError:  # no evaluated mortality run among them
        mortality_rows = []
    if mortality_rows:
        result.mortality = summarize(mortality_rows)
    vision_rows = collect_vision(runs=runs)
    if vision_rows:
        result.vision = summarize_vision(vision_rows)
    if not result.mortality and not result.vision:
        raise CompareError("no evaluated runs (evaluate the runs on val and test first; vision runs with their "
                           "vision evaluation)")
    if out_dir is not None:
        if result.mortality:
            result.files += list(write_tables(result.mortality, out_dir))
        if result.vision:
            result.files += write_vision(result.vision, out_dir)
    return result
