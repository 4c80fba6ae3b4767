"""Tables of benchmark runs: methods x (clean, each severity) x (NLL, accuracy, ECE), mean ± sd over seeds.

A run is a dict with ``"method"``, ``"seed"`` and ``"report"`` (``VisionReport.to_dict()``). The
severity columns average each metric over the corruptions first (``VisionReport.by_severity``),
then over seeds; mean and sd over seeds are ``core.tables.stat``'s (ddof = 1; undefined, NaN, for one seed).
"""

from __future__ import annotations

from typing import Iterable, Sequence

from pipeline.core import tables
from pipeline.core.tables import cell, stat
from pipeline.tasks.vision.evaluate import SUMMARY_METRICS


def summarize_runs(runs: Iterable[dict], metrics: Sequence[str] = SUMMARY_METRICS) -> dict:
    """{method: {setting: {metric: {"mean", "sd", "n"}}}} with setting "clean" or the severity ("1".."5")."""
    values: dict[str, dict[str, dict[str, list[float]]]] = {}
    for run in runs:
        rep = run["report"]
        per_setting = {"clean": rep["clean"], **rep["by_severity"]}
        by_method = values.setdefault(run["method"], {})
        for setting, row in per_setting.items():
            for m in metrics:
                by_method.setdefault(setting, {}).setdefault(m, []).append(float(row[m]))
    out: dict = {}
    for method, settings in values.items():
        out[method] = {}
        for setting, per_metric in settings.items():
            out[method][setting] = {m: stat(v) for m, v in per_metric.items()}
    return out


def markdown_table(summary: dict, metric: str, digits: int = 3) -> str:
    """One metric's table: a row per method, columns clean and severities 1..5, cells mean ± sd (the value
    alone for one seed)."""
    settings = ["clean"] + sorted({s for rows in summary.values() for s in rows if s != "clean"}, key=int)
    head = ["method", *(s if s == "clean" else f"severity {s}" for s in settings)]
    body = [[method, *(_cell(rows[s][metric], digits) if s in rows else "n/a" for s in settings)]
            for method, rows in summary.items()]
    return tables.markdown_table(head, body)


def _cell(s: dict, digits: int) -> str:
    return cell(s["mean"], s["sd"] if s.get("n", 2) > 1 else None, digits)
