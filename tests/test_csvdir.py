"""pipeline.data.mimic.sources.csvdir on tiny hand-written tables: layout detection (TABLE.csv / .csv.gz, any case),
two files for one table, headers (BOM, quoting, case), the messages for a missing table or column, and
the typed views with their per-row ``_error``."""

from __future__ import annotations

import gzip
import logging
from pathlib import Path

import duckdb
import pytest

from pipeline.data.mimic.sources.base import EmptyTable, SourceError
from pipeline.data.mimic.sources.csvdir import CsvSource, find_tables, read_header

PATIENTS = "ROW_ID,SUBJECT_ID,GENDER,DOB\n1,10,F,2100-01-01 00:00:00\n2,11,M,2090-05-05 00:00:00\n"
ADMISSIONS = ("ROW_ID,SUBJECT_ID,HADM_ID,ADMITTIME,DISCHTIME,DEATHTIME,ADMISSION_TYPE,ADMISSION_LOCATION,"
              "HOSPITAL_EXPIRE_FLAG\n"
              "1,10,100,2150-01-01 10:00:00,2150-01-05 10:00:00,,EMERGENCY,EMERGENCY ROOM ADMIT,0\n"
              "2,11,101,not a time,2150-02-05 10:00:00,,ELECTIVE,\"PHYS REFERRAL/NORMAL DELI\",0\n")
LABEVENTS = ("ROW_ID,SUBJECT_ID,HADM_ID,ITEMID,CHARTTIME,VALUE,VALUENUM,VALUEUOM,FLAG\n"
             "1,10,100,50912,2150-01-01 11:00:00,1.1,1.1,mg/dL,\n"
             "2,10,100,50912,2150-01-01 12:00:00,inf,inf,mg/dL,\n"
             "3,10,100,50912,2150-01-01 13:00:00,x,abc,mg/dL,\n")


def _write(path: Path, text: str, bom: bool = False) -> Path:
    data = ("\ufeff" if bom else "") + text
    if path.name.lower().endswith(".gz"):
        with gzip.open(path, "wt", encoding="utf-8", newline="") as fh:
            fh.write(data)
    else:
        path.write_text(data, encoding="utf-8")
    return path


def _source_dir(tmp_path: Path, **names: str) -> Path:
    """patients/admissions (and more) under the given file names, e.g. patients="patients.csv"."""
    out = tmp_path / "src"
    out.mkdir(exist_ok=True)
    texts = {"patients": PATIENTS, "admissions": ADMISSIONS, "labevents": LABEVENTS}
    names = {"patients": "PATIENTS.csv.gz", "admissions": "ADMISSIONS.csv.gz", **names}
    for table, name in names.items():
        if name:
            _write(out / name, texts[table])
    return out


# ---------------------------------------------------------------------------- layout


def test_find_tables_any_case_either_suffix(tmp_path):
    src = _source_dir(tmp_path, patients="patients.csv", admissions="Admissions.CSV.GZ", labevents="LABEVENTS.csv")
    (src / "README.md").write_text("x")
    (src / "icustays.csv").mkdir()  # a directory is not a table
    (src / "chartevents.csv.bak").write_text("x")
    assert find_tables(src) == {"patients": src / "patients.csv", "admissions": src / "Admissions.CSV.GZ",
                                "labevents": src / "LABEVENTS.csv"}


@pytest.mark.parametrize("names", [("ADMISSIONS.csv", "admissions.csv.gz"), ("ADMISSIONS.csv.gz", "admissions.csv")])
def test_two_files_for_one_table_read_the_gz_with_a_warning_or_fail_when_strict(tmp_path, caplog, names):
    src = tmp_path / "src"
    src.mkdir()
    for name in names:
        _write(src / name, ADMISSIONS)
    gz = next(n for n in names if n.endswith(".gz"))  # read, whether it is listed first or second
    plain = next(n for n in names if not n.endswith(".gz"))
    with caplog.at_level(logging.WARNING, logger="pipeline.data.mimic.sources.csvdir"):
        assert find_tables(src) == {"admissions": src / gz}
    assert f"admissions: both {gz} and {plain} exist; reading {gz}" in caplog.text
    first, second = sorted(names)
    with pytest.raises(SourceError, match=f"table admissions has two files, {first} and {second}"):
        find_tables(src, strict=True)


def test_missing_directory(tmp_path):
    with pytest.raises(SourceError, match=f"source directory {tmp_path / 'nope'} does not exist"):
        find_tables(tmp_path / "nope")


# ---------------------------------------------------------------------------- headers


@pytest.mark.parametrize("name", ["T.csv", "T.csv.gz"])
@pytest.mark.parametrize("line, expected", [
    ("ROW_ID,SUBJECT_ID\n", ["ROW_ID", "SUBJECT_ID"]),
    ('"row_id","a, b"\r\n', ["row_id", "a, b"]),  # quoting, a comma inside quotes, CRLF
])
@pytest.mark.parametrize("bom", [False, True])
def test_read_header_as_written(tmp_path, name, line, expected, bom):
    assert read_header(_write(tmp_path / name, line + "1,2\n", bom=bom)) == expected  # BOM removed


def test_unreadable_headers_are_named(tmp_path):
    with pytest.raises(EmptyTable, match=r"E.csv: empty file \(no header line\)"):
        read_header(_write(tmp_path / "E.csv", ""))
    (tmp_path / "L.csv").write_bytes(b"ROW_ID,N\xe9\n1,2\n")  # Latin-1, not UTF-8
    with pytest.raises(SourceError, match=r"L.csv: header is not UTF-8 \(invalid continuation byte at byte 8\)"):
        read_header(tmp_path / "L.csv")
    (tmp_path / "G.csv.gz").write_bytes(b"not gzip at all")
    with pytest.raises(SourceError, match=r"G.csv.gz: cannot read the header \(Not a gzipped file"):
        read_header(tmp_path / "G.csv.gz")


# ---------------------------------------------------------------------------- the source


def _rows(src: CsvSource, table: str, cols: str) -> list[tuple]:
    return src.con.sql(f"SELECT {cols} FROM {src.relation(table)} ORDER BY row_id").fetchall()


@pytest.mark.parametrize("names", [
    {"patients": "PATIENTS.csv.gz", "admissions": "ADMISSIONS.csv.gz"},
    {"patients": "patients.csv", "admissions": "admissions.csv"},
    {"patients": "Patients.csv", "admissions": "ADMISSIONS.csv"},
])
@pytest.mark.parametrize("lower_headers", [False, True])
def test_layouts_give_the_same_views(tmp_path, names, lower_headers):
    src_dir = _source_dir(tmp_path, **names)
    if lower_headers:
        for table, name in names.items():
            path = src_dir / name
            text = gzip.open(path, "rt").read() if name.endswith(".gz") else path.read_text()
            header, _, body = text.partition("\n")
            _write(path, header.lower() + "\n" + body)
    src = CsvSource(src_dir, duckdb.connect())
    assert set(src.tables) == {"patients", "admissions"}
    assert src.tables["admissions"].columns["hadm_id"] == ("hadm_id" if lower_headers else "HADM_ID")
    rows = _rows(src, "admissions", "hadm_id, admission_location, CAST(admittime AS VARCHAR), _error")
    assert rows == [(100, "EMERGENCY ROOM ADMIT", "2150-01-01 10:00:00", None),
                    (101, "PHYS REFERRAL/NORMAL DELI", None, "unparseable ADMITTIME")]


def test_header_with_bom_reads_its_first_column(tmp_path):
    src_dir = _source_dir(tmp_path, patients="")
    _write(src_dir / "PATIENTS.csv", PATIENTS, bom=True)
    src = CsvSource(src_dir, duckdb.connect())
    assert src.tables["patients"].columns["row_id"] == "ROW_ID"
    assert _rows(src, "patients", "row_id, subject_id, gender") == [(1, 10, "F"), (2, 11, "M")]


def test_float_errors_are_flagged_per_row(tmp_path):
    src = CsvSource(_source_dir(tmp_path, labevents="LABEVENTS.csv.gz"), duckdb.connect())
    rows = _rows(src, "labevents", "row_id, valuenum, _error")
    assert rows == [(1, 1.1, None), (2, float("inf"), "non-finite VALUENUM"), (3, None, "unparseable VALUENUM")]


def test_missing_optional_columns_read_as_null(tmp_path):
    src_dir = _source_dir(tmp_path)
    _write(src_dir / "CHARTEVENTS.csv", "ROW_ID,SUBJECT_ID,HADM_ID,ITEMID,CHARTTIME,VALUE,VALUENUM\n"
                                        "1,10,100,211,2150-01-01 11:00:00,80,80\n")
    src = CsvSource(src_dir, duckdb.connect())
    assert src.tables["chartevents"].missing_optional == ["storetime", "error"]
    assert _rows(src, "chartevents", "row_id, storetime, error, valuenum, _error") == [(1, None, None, 80.0, None)]
    _write(src_dir / "CHARTEVENTS.csv", "ROW_ID,SUBJECT_ID,HADM_ID,CHARTTIME,VALUE,VALUENUM\n")  # no ITEMID
    with pytest.raises(SourceError, match="CHARTEVENTS.csv: table CHARTEVENTS has no column ITEMID \\(required\\)"):
        CsvSource(src_dir, duckdb.connect())


def test_missing_required_table_is_one_clear_error(tmp_path):
    src_dir = _source_dir(tmp_path, patients="")
    with pytest.raises(SourceError) as exc:
        CsvSource(src_dir, duckdb.connect())
    expected = (f"required table PATIENTS not found in {src_dir} "
                "(expected PATIENTS.csv or PATIENTS.csv.gz; MIMIC-III layout)")
    assert str(exc.value) == expected


def test_missing_optional_table_warns_and_reads_as_empty(tmp_path, caplog):
    src_dir = _source_dir(tmp_path)
    with caplog.at_level(logging.WARNING, logger="pipeline.data.mimic.sources.csvdir"):
        src = CsvSource(src_dir, duckdb.connect())
    assert f"optional table CHARTEVENTS not found in {src_dir}: its events are skipped" in caplog.text
    assert "chartevents" not in src.tables
    assert src.con.sql(f"SELECT count(*) FROM {src.relation('chartevents')}").fetchall() == [(0,)]
    cols = [r[0] for r in src.con.sql(f"DESCRIBE {src.relation('chartevents')}").fetchall()]
    assert cols[:3] == ["row_id", "subject_id", "hadm_id"] and cols[-1] == "_error"


def test_empty_files(tmp_path, caplog):
    src_dir = _source_dir(tmp_path)
    _write(src_dir / "LABEVENTS.csv", "")
    with caplog.at_level(logging.WARNING, logger="pipeline.data.mimic.sources.csvdir"):
        src = CsvSource(src_dir, duckdb.connect())
    assert "labevents" not in src.tables
    assert "LABEVENTS.csv: empty file (no header line): its events are skipped" in caplog.text
    _write(src_dir / "PATIENTS.csv.gz", "")
    with pytest.raises(SourceError, match=r"PATIENTS.csv.gz: empty file \(no header line\)$"):
        CsvSource(src_dir, duckdb.connect())


@pytest.mark.parametrize("table, drop, column", [("admissions", "ADMITTIME,", "ADMITTIME"),
                                                 ("patients", ",DOB", "DOB")])
def test_missing_required_column_names_file_table_and_column(tmp_path, table, drop, column):
    src_dir = _source_dir(tmp_path)
    path = src_dir / f"{table.upper()}.csv.gz"
    header, _, body = gzip.open(path, "rt").read().partition("\n")
    _write(path, header.replace(drop, "") + "\n")
    with pytest.raises(SourceError) as exc:
        CsvSource(src_dir, duckdb.connect())
    assert str(exc.value) == f"{path}: table {table.upper()} has no column {column} (required)"
