"""Extraction on the real MIMIC-III demo: cohort, accounting, determinism, layouts, no leaks."""

from __future__ import annotations

import gzip
import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from pipeline.core.contracts import FEATURES
from pipeline.data.mimic.extraction import ExtractConfig, SplitMode, extract
from pipeline.data.mimic.sources import SourceError

FEATURE_FILES = ["train.parquet", "val.parquet", "test.parquet", "vocab.json"]


def read_features(out: Path) -> pd.DataFrame:
    return pd.concat([pd.read_parquet(out / f"{s}.parquet").assign(split=s) for s in ("train", "val", "test")])


def test_demo_cohort_and_label_rate(demo_features):
    m = demo_features.manifest
    # Measured on MIMIC-III Demo v1.4 (README "Demo"): 117 of 129 admissions, 31 deaths after 24 h.
    assert m["cohort"]["admissions"] == 117
    assert m["cohort"]["positives"] == 31
    excluded = m["tables"]["admissions"]["excluded_by"]
    assert excluded == {"died before prediction time": 9, "discharged before prediction time": 2, "under 18": 1}
    assert sum(s["admissions"] for s in m["splits"].values()) == 117


def test_accounting_adds_up_for_every_table(demo_features):
    tables = demo_features.manifest["tables"]
    assert set(tables) >= {"admissions", "patients", "icustays", "chartevents", "labevents", "prescriptions"}
    for name, acc in tables.items():
        assert acc["rows_read"] == acc["used"] + acc["quarantined"] + acc["outside_window"], name
        assert min(acc["used"], acc["quarantined"], acc["outside_window"]) >= 0, name
    assert tables["chartevents"]["rows_read"] == 758_355
    assert tables["chartevents"]["quarantine_reasons"]["ERROR flag set"] > 0
    quarantine = pd.read_parquet(demo_features.out_dir / "quarantine" / "chartevents.parquet")
    assert len(quarantine) == tables["chartevents"]["quarantined"]
    assert quarantine["row_id"].notna().all()


def test_splits_are_by_patient(demo_features):
    link = pd.read_csv(demo_features.link_file)
    feats = read_features(demo_features.out_dir).merge(link, on="key")
    adm = pd.read_csv(Path(demo_features.manifest["source"]["tables"]["admissions"]), usecols=["subject_id", "hadm_id"])
    feats = feats.merge(adm, on="hadm_id")
    assert feats.groupby("subject_id")["split"].nunique().max() == 1
    assert len(feats) == 117


def test_feature_format(demo_features):
    out = demo_features.out_dir
    vocab = json.loads((out / "vocab.json").read_text())
    for split in ("train", "val", "test"):
        table = pq.read_table(out / f"{split}.parquet")
        assert table.column_names == [c for c in FEATURES.names() if c != "bag_values"]  # written with --values
        frame = table.to_pandas()
        assert frame["key"].str.fullmatch(r"[0-9a-f]{32}").all()
        assert (frame["age"] <= 90).all() and (frame["age"] >= 18).all()
        for hours, bags in zip(frame["bag_hours"], frame["bags"]):
            assert len(hours) == len(bags)
            assert list(hours) == sorted(hours) and (len(hours) == 0 or hours[-1] < 24)
            for bag in bags:
                assert len(bag) > 0 and list(bag) == sorted(set(bag))
                assert 0 < min(bag) and max(bag) < len(vocab["tokens"])
    assert vocab["tokens"][0] == "<pad>" and vocab["context"][0] == "<pad>"


@pytest.mark.slow
def test_value_channel_lies_in_its_tokens_bin(demo_dir, demo_features, tmp_path):
    """extract --values adds bag_values and changes nothing else; it mirrors bags; a token without a
    binned value has 0; a quantile token 'item:qB' has the mean of its events' (value - center) / scale,
    so unclipped it maps back into bin B of the item."""
    import math

    from pipeline.data.mimic.extraction.tokens import VALUE_CLIP, value_scale

    assert "values" not in demo_features.manifest["config"]  # off: manifests stay as they were
    res = extract(demo_dir, tmp_path / "valued", ExtractConfig(values=True))
    assert res.manifest["config"]["values"] is True
    out = res.out_dir
    for split in ("train", "val", "test"):
        with_values = pq.read_table(out / f"{split}.parquet")
        assert with_values.column_names == list(FEATURES.names())
        assert with_values.drop_columns(["bag_values"]).equals(pq.read_table(demo_features.out_dir
                                                                             / f"{split}.parquet"))
    vocab = json.loads((out / "vocab.json").read_text())
    seen = 0
    for split in ("train", "val", "test"):
        frame = pd.read_parquet(out / f"{split}.parquet", columns=["bags", "bag_values"])
        for bags, values in zip(frame["bags"], frame["bag_values"]):
            assert [len(b) for b in bags] == [len(v) for v in values]
            for tid, v in zip((t for b in bags for t in b), (x for vs in values for x in vs)):
                item, _, b = vocab["tokens"][tid].rpartition(":q")
                if not (item and b.isdigit()):
                    assert v == 0.0, vocab["tokens"][tid]
                    continue
                cuts = vocab["bins"][item]
                assert -VALUE_CLIP <= v <= VALUE_CLIP
                if abs(v) < VALUE_CLIP:
                    center, scale = value_scale(cuts)
                    edges = [-math.inf, *cuts, math.inf]
                    x = v * scale + center
                    assert edges[int(b)] - 1e-4 * scale <= x <= edges[int(b) + 1] + 1e-4 * scale, (item, b, x)
                    seen += 1
    assert seen > 1000  # the demo's binned events


@pytest.mark.slow
def test_extract_is_byte_identical(demo_dir, demo_features, tmp_path):
    again = extract(demo_dir, tmp_path / "again")
    for name in FEATURE_FILES + ["manifest.json"]:
        assert (demo_features.out_dir / name).read_bytes() == (again.out_dir / name).read_bytes(), name


@pytest.mark.slow
def test_era_split_puts_metavision_in_test(demo_dir, tmp_path):
    res = extract(demo_dir, tmp_path / "era", ExtractConfig(split=SplitMode.era))
    feats = read_features(res.out_dir)
    assert set(feats.loc[feats["split"] == "test", "icu_system"]) == {"metavision"}
    assert "metavision" not in set(feats.loc[feats["split"] != "test", "icu_system"])


def _copy_tables(src: Path, dst: Path, tables: list[str], upper_headers: bool, gz: bool) -> None:
    dst.mkdir(parents=True)
    for t in tables:
        with gzip.open(src / f"{t}.csv.gz", "rt", encoding="utf-8") as fh:
            header = fh.readline()
            body = fh.read()
        if upper_headers:
            header = header.upper()
        target = dst / (f"{t}.csv.gz" if gz else f"{t.lower()}.csv")
        opener = gzip.open if gz else open
        with opener(target, "wt", encoding="utf-8") as out:
            out.write(header + body)


@pytest.mark.parametrize("upper_headers,gz", [(True, True), (True, False), (False, False)])
@pytest.mark.slow
def test_layouts_are_detected(demo_dir, demo_features, tmp_path, upper_headers, gz):
    tables = ["PATIENTS", "ADMISSIONS", "ICUSTAYS", "LABEVENTS", "PRESCRIPTIONS"]
    src = tmp_path / "src"
    _copy_tables(demo_dir, src, tables, upper_headers, gz)
    res = extract(src, tmp_path / "out")
    assert res.manifest["cohort"]["admissions"] == 117
    assert res.manifest["tables"]["labevents"] == demo_features.manifest["tables"]["labevents"]


def test_missing_required_table_is_one_clear_error(demo_dir, tmp_path):
    src = tmp_path / "src"
    _copy_tables(demo_dir, src, ["ADMISSIONS"], upper_headers=False, gz=True)
    with pytest.raises(SourceError, match="required table PATIENTS not found"):
        extract(src, tmp_path / "out")


@pytest.mark.slow
def test_missing_optional_table_warns_and_goes_on(demo_dir, tmp_path, caplog):
    src = tmp_path / "src"
    _copy_tables(demo_dir, src, ["PATIENTS", "ADMISSIONS"], upper_headers=False, gz=True)
    res = extract(src, tmp_path / "out")
    assert "CHARTEVENTS not found" in caplog.text
    assert res.manifest["cohort"]["admissions"] == 117
    assert set(res.manifest["tables"]) == {"admissions", "patients"}


def test_missing_required_column_names_it(demo_dir, tmp_path):
    src = tmp_path / "src"
    _copy_tables(demo_dir, src, ["PATIENTS", "ADMISSIONS"], upper_headers=False, gz=True)
    frame = pd.read_csv(src / "ADMISSIONS.csv.gz").drop(columns=["admittime"])
    frame.to_csv(src / "ADMISSIONS.csv.gz", index=False)
    with pytest.raises(SourceError, match="ADMISSIONS.csv.gz: table ADMISSIONS has no column ADMITTIME"):
        extract(src, tmp_path / "out")


@pytest.mark.slow
def test_cli_extract_on_demo(demo_dir, tmp_path):
    from typer.testing import CliRunner

    import cli

    result = CliRunner().invoke(cli.app, ["extract", "--source", str(demo_dir), "--out", str(tmp_path / "f")])
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "f" / "manifest.json").read_text())
    lines = result.output.splitlines()
    assert lines[0] == (f"features written to {tmp_path / 'f'} (link file: {tmp_path / 'f' / '_private' / 'link.csv'})"
                        f"; release {manifest['release']}")
    assert manifest["release"] == "mimic-iii"
    assert lines[1] == "task: in-hospital death, predicted 24 hours after the hospital admission"  # issue 44
    assert {k: manifest["task"][k] for k in ("outcome", "outcomes", "source")} == {
        "outcome": "in-hospital death", "outcomes": "in-hospital deaths", "source": "MIMIC-III"}
    printed = {}
    for line in lines[2:5]:  # "  train  admissions=    93 positives=   25 label_rate=0.268817"
        m = re.fullmatch(r"  (\w+) +admissions= *(\d+) positives= *(\d+) label_rate=(\S+)", line)
        assert m, line
        printed[m[1]] = {"admissions": int(m[2]), "positives": int(m[3]), "label_rate": float(m[4])}
    assert printed == {k: {c: v[c] for c in ("admissions", "positives", "label_rate")}
                       for k, v in manifest["splits"].items()}
    assert sorted(printed) == ["test", "train", "val"]
    assert json.loads(lines[5]) == {"cohort": manifest["cohort"], "vocab": manifest["vocab"]}
    assert lines[6].startswith("quarantined 3,684 rows of 6 table(s)") and len(lines) == 13  # and a line per table
    bad = CliRunner().invoke(cli.app, ["extract", "--source", str(tmp_path / "nope"), "--out", str(tmp_path / "g")])
    assert bad.exit_code == 2 and "does not exist" in bad.output


def test_output_files_are_not_left_half_written(demo_features):
    leftovers = [p for p in demo_features.out_dir.rglob("*") if p.name.startswith(".") or p.suffix == ".tmp"]
    assert leftovers == []
    link_mode = demo_features.link_file.stat().st_mode & 0o777
    assert link_mode == 0o600
    shutil.disk_usage(demo_features.out_dir)  # directory still readable


@pytest.mark.slow
def test_single_pass_counts_equal_the_files_data_lines(demo_features, demo_dir):
    """Event tables are counted inside their one scan (DuckDB profiler); every table's
    rows_read must equal its file's data lines, counted here independently with csv."""
    import csv
    import gzip

    from pipeline.data.mimic.sources.csvdir import find_tables

    files = find_tables(demo_dir)
    for name, acc in demo_features.manifest["tables"].items():
        with gzip.open(files[name], "rt", newline="") if files[name].name.endswith(".gz") else open(
            files[name], newline=""
        ) as fh:
            lines = sum(1 for _ in csv.reader(fh)) - 1  # minus the header
        assert acc["rows_read"] == lines, name


@pytest.mark.slow
def test_verify_counts_agrees_with_a_second_scan(demo_dir, tmp_path):
    from pipeline.data.mimic.extraction import ExtractConfig, extract

    res = extract(demo_dir, tmp_path / "o", ExtractConfig(verify_counts=True))
    assert res.manifest["tables"]["chartevents"]["rows_read"] == 758_355


@pytest.mark.slow
def test_concurrent_and_sequential_event_scans_agree(demo_features, demo_dir, tmp_path):
    from pipeline.data.mimic.extraction import ExtractConfig, extract

    res = extract(demo_dir, tmp_path / "seq", ExtractConfig(scan_workers=1))
    for split in ("train", "val", "test"):
        assert (res.out_dir / f"{split}.parquet").read_bytes() == (demo_features.out_dir
                                                                   / f"{split}.parquet").read_bytes()
    assert res.manifest["tables"] == demo_features.manifest["tables"]


def test_interrupt_scans_stops_a_running_scan(demo_dir):
    """An error or Ctrl-C in the main thread interrupts the scans in flight on other cursors.

    No timed waits: the scan's cursor signals an event as it sends the long query, and the main
    thread interrupts until the scan's thread ends (an interrupt that lands between the event and
    the query's start finds nothing running, so it is repeated)."""
    import threading
    import types

    import duckdb

    from pipeline.data.mimic.sources.base import SourceError
    from pipeline.data.mimic.sources.csvdir import CsvSource

    sent = threading.Event()

    class Watched:
        """A DuckDB cursor that sets `sent` when the scan's CREATE TABLE ... AS query goes out."""

        def __init__(self, cur):
            self._cur = cur

        def execute(self, sql, *args):
            if sql.startswith("CREATE"):
                sent.set()
            return self._cur.execute(sql, *args)

        def __getattr__(self, name):
            return getattr(self._cur, name)

    src = CsvSource(demo_dir, duckdb.connect())
    con = src.con
    src.con = types.SimpleNamespace(cursor=lambda: Watched(con.cursor()))
    outcome = {}

    def scan():
        try:
            src.into_local_counted("SELECT sum(range) AS s FROM range(1000000000000)", "t", "a long query",
                                   "chartevents")
        except SourceError as exc:
            outcome["error"] = str(exc)

    worker = threading.Thread(target=scan, daemon=True)
    worker.start()
    assert sent.wait(timeout=30), "the scan never sent its query"
    for _ in range(600):  # at most ~30 s of joins
        src.interrupt_scans()
        worker.join(timeout=0.05)
        if not worker.is_alive():
            break
    assert not worker.is_alive()
    assert "a long query" in outcome["error"] and "nterrupt" in outcome["error"]


def test_training_features_cover_the_whole_window(demo_features):
    """Every training admission was in hospital past T: its window is whole, nothing is flagged."""
    for split in ("train", "val", "test"):
        f = pd.read_parquet(demo_features.out_dir / f"{split}.parquet",
                            columns=["observed_hours", "before_prediction_time"])
        assert (f["observed_hours"] == 24.0).all() and not f["before_prediction_time"].any()


def test_observed_hours_clips_to_the_window():
    from pipeline.data.mimic.extraction.flow import observed_hours

    h = 3600.0
    cohort = pd.DataFrame({"admit_epoch": [0.0, 0.0, 0.0, 10 * h], "pred_epoch": [24 * h, 24 * h, 24 * h, 34 * h]})
    assert observed_hours(cohort, 24.0, 30 * h).tolist() == [24.0, 24.0, 24.0, 20.0]
    assert observed_hours(cohort, 24.0, 5.5 * h).tolist() == [5.5, 5.5, 5.5, 0.0]  # as of before admission: 0
    last = pd.Series([float("nan"), 2.0, 9.25, -30.0])  # last event used, hours after ADMITTIME (nan: none)
    assert observed_hours(cohort, 24.0, 5.5 * h, last).tolist() == [5.5, 5.5, 9.25, 0.0]  # the data reaches 9.25 h


def test_a_failed_extract_leaves_no_empty_out(tmp_path):
    """The --out folders a failed extraction created go again; one that existed before stays."""
    from pipeline.core.errors import PipelineError
    from pipeline.data.mimic.extraction import extract

    (tmp_path / "src").mkdir()  # no tables at all
    with pytest.raises(PipelineError):
        extract(tmp_path / "src", tmp_path / "new" / "features")
    assert not (tmp_path / "new").exists()
    (tmp_path / "kept").mkdir()
    with pytest.raises(PipelineError):
        extract(tmp_path / "src", tmp_path / "kept")
    assert (tmp_path / "kept").is_dir() and not any((tmp_path / "kept").iterdir())


def test_a_source_that_is_a_file_is_named_a_file(demo_dir, tmp_path):
    from pipeline.data.mimic.extraction import extract
    from pipeline.data.mimic.sources.base import SourceError

    table = next(p for p in sorted(demo_dir.iterdir()) if p.name.lower().startswith("admissions"))
    with pytest.raises(SourceError, match=rf"source {re.escape(str(table))} is a file, not a directory: give the "
                                          r"directory that holds the MIMIC tables .* e\.g\. "
                                          rf"{re.escape(str(demo_dir))}"):
        extract(table, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    with pytest.raises(SourceError, match="source directory .*nowhere does not exist"):
        extract(tmp_path / "nowhere", tmp_path / "out")


def test_event_accounting_counts_distinct_rows_and_every_event():
    """Rows used by distinct id (a lab row serving two admissions is one row, two events); a NULL id is
    not a row; quarantined rows are listed by id; the counts are the same as count(DISTINCT) gives."""
    import duckdb

    from pipeline.data.mimic.extraction.accounting import event_accounting

    con = duckdb.connect()
    con.execute("CREATE TABLE ev_labevents AS SELECT * FROM (VALUES (1, NULL), (1, NULL), (2, NULL), (3, 'bad unit'), "
                "(NULL, NULL), (4, NULL)) t(row_id, reason)")
    acc, quarantine = event_accounting(con, "labevents", (9, [(17, "malformed line")]))
    assert acc["used"] == 3 and acc["events_used"] == 5
    assert quarantine == [(3, None, "bad unit"), (None, 17, "malformed line")]
    assert acc["outside_window"] == 9 - 3 - 2
    assert acc["quarantine_reasons"] == {"bad unit": 1, "malformed line": 1}
    distinct = con.sql("SELECT count(DISTINCT row_id) FROM ev_labevents WHERE reason IS NULL").fetchall()[0][0]
    assert acc["used"] == distinct
    no_ids, _ = event_accounting(con, "labevents", (9, []), row_ids=False)  # one source row per event row
    assert no_ids["used"] == no_ids["events_used"] == 5
    con.execute("CREATE TABLE ev_chartevents AS SELECT * FROM (VALUES (1, NULL), (2, NULL), (3, 'bad')) t(row_id, "
                "reason)")  # linked by HADM_ID: one ev_ row per source row, counted without a distinct
    by_hadm, _ = event_accounting(con, "chartevents", (5, []))
    assert (by_hadm["used"], by_hadm["events_used"], by_hadm["outside_window"]) == (2, 2, 2)
    con.execute("DELETE FROM ev_labevents WHERE reason IS NULL")
    empty, _ = event_accounting(con, "labevents", (1, []))
    assert empty["used"] == empty["events_used"] == 0


def test_out_of_memory_names_the_memory_limit(tmp_path, demo_dir):
    """DuckDB's out-of-memory error becomes one line that names --memory-limit (not DuckDB's own advice)."""
    with pytest.raises(SourceError, match="--memory-limit") as err:
        extract(demo_dir, tmp_path / "out", ExtractConfig(memory_limit="1MB"))
    assert "Out of Memory" in str(err.value) and "\n" not in str(err.value)
    assert "Possible solutions" not in str(err.value)
    assert not (tmp_path / "out").exists()


def test_short_error_of_a_raw_out_of_memory():
    import duckdb

    from pipeline.data.mimic.sources.base import short_error

    con = duckdb.connect()
    con.execute("SET memory_limit = '1MB'")
    with pytest.raises(duckdb.OutOfMemoryException) as err:
        con.sql("SELECT list(i) FROM range(1000000) t(i)").fetchall()
    message = short_error(err.value)
    assert message.startswith("Out of Memory Error") and "--memory-limit" in message
