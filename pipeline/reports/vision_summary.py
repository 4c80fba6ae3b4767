"""Tables of benchmark runs: methods x (clean, each severity) x (NLL, accuracy, ECE), mean ± sd over seeds.

A run is a dict with ``"method"``, ``"seed"`` and ``"report"`` (``VisionReport.to_dict()``). The
severity columns average each metric over the corruptions first (``VisionReport.by_severity``),
then over seeds; sd is the sample standard deviation over seeds (ddof = 1; 0 for one seed).
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

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
            out[method][setting] = {
                m: {"mean": float(np.mean(v)), "sd": float(np.std(v, ddof=1)) if len(v) > 1 else 0.0, "n": len(v)}
                for m, v in per_metric.items()}
    return out


def markdown_table(summary: dict, metric: str, digits: int = 3) -> str:
    """One metric's table: a row per method, columns clean and severities 1..5, cells mean ± sd (the value
    alone for one seed)."""
    settings = ["clean"] + sorted({s for rows in summary.values() for s in rows if s != "clean"}, key=int)
    head = "| method | " + " | ".join(s if s == "clean" else f"severity {s}" for s in settings) + " |"
    lines = [head, "|---" * (len(settings) + 1) + "|"]
    for method, rows in summary.items():
        cells = [_cell(rows[s][metric], digits) if s in rows else "n/a" for s in settings]
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _cell(stat: dict, digits: int) -> str:
    if stat.get("n", 2) == 1:
        return f"{stat['mean']:.{digits}f}"
    return f"{stat['mean']:.{digits}f} ± {stat['sd']:.{digits}f}"
