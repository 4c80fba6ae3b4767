"""benchmarks/results/extract_mimic4.json holds the three scales of the issue with the floor measured in
the same run (docs/mimic-iv.md's figures:extract_mimic4 section is its rendering: tests/test_docs.py)."""

from __future__ import annotations

import json

from benchmarks import extract_mimic4 as bench


def test_benchmark_json_is_complete():
    result = json.loads(bench.RESULT.read_text())
    assert [r["scale"] for r in result["scales"]] == [0.01, 0.03, 0.10]
    assert [r["patients"] for r in result["scales"]] == [round(bench.FULL_PATIENTS * s) for s in (0.01, 0.03, 0.10)]
    assert result["full_event_rows"] == sum(bench.FULL_EVENT_ROWS.values()) == 471_484_802
    for r in result["scales"]:
        assert r["event_rows"] == sum(r["event_rows_by_table"].values()) and r["wall_s"] > 0
    big = result["scales"][-1]
    assert result["floor"]["chartevents_rows"] == big["event_rows_by_table"]["chartevents"]
    assert abs(result["extract_vs_floor"] - (big["event_rows"] / big["wall_s"]) / result["floor"]["rows_per_s"]) < 1e-9
