"""pipeline.data.mimic.sources.pgload: MIMIC-III CSV -> PostgreSQL (mimic-code layout).
(DSN redaction: test_redact.py.)"""

from __future__ import annotations

import csv
import gzip
import io
import logging
from pathlib import Path

import pytest
from helpers import postgres as pgserver
from helpers.postgres import TempPostgres, demo_dir  # plain helpers (the pg_* fixtures come from conftest)

from pipeline.data.mimic.sources.pgload import (
    DDL,
    PgLoadError,
    columns,
    find_table_files,
    load_mimic_csv,
    read_header,
)

psycopg = pytest.importorskip("psycopg")
duckdb = pytest.importorskip("duckdb")

# Row counts published in the demo's README.md.
README_COUNTS = {
    "patients": 100, "admissions": 129, "icustays": 136, "chartevents": 758_355,
    "labevents": 76_074, "inputevents_cv": 34_799, "inputevents_mv": 13_224,
    "outputevents": 11_320, "prescriptions": 10_398, "datetimeevents": 15_551,
    "microbiologyevents": 2_003, "procedureevents_mv": 753, "diagnoses_icd": 1_761,
    "procedures_icd": 506, "d_items": 12_487, "d_labitems": 753,
}


# ---- file discovery and headers (no server needed) -------------------------------------
def _write(path: Path, text: str) -> Path:
    if path.name.endswith(".gz"):
        with gzip.open(path, "wt", newline="") as fh:
            fh.write(text)
    else:
        path.write_text(text)
    return path


def test_find_table_files_any_case_and_suffix(tmp_path: Path) -> None:
    _write(tmp_path / "PATIENTS.csv.gz", "row_id\n")
    _write(tmp_path / "admissions.csv", "row_id\n")
    _write(tmp_path / "notes.txt", "x\n")
    assert find_table_files(tmp_path) == {
        "patients": tmp_path / "PATIENTS.csv.gz",
        "admissions": tmp_path / "admissions.csv",
    }


def test_find_table_files_rejects_two_files_for_one_table(tmp_path: Path) -> None:
    _write(tmp_path / "PATIENTS.csv.gz", "row_id\n")
    _write(tmp_path / "PATIENTS.csv", "row_id\n")
    with pytest.raises(PgLoadError, match="patients has two files"):
        find_table_files(tmp_path)


def test_find_table_files_missing_dir(tmp_path: Path) -> None:
    with pytest.raises(PgLoadError, match="does not exist"):
        find_table_files(tmp_path / "nope")


@pytest.mark.parametrize(
    "first_line",
    ['"ROW_ID","SUBJECT_ID","GENDER"\n', "row_id,subject_id,gender\n", "\ufeffRow_Id,Subject_ID,GENDER\r\n"]
)
@pytest.mark.parametrize("name", ["PATIENTS.csv", "PATIENTS.csv.gz"])
def test_read_header_detects_case_and_quoting(tmp_path: Path, first_line: str, name: str) -> None:
    path = _write(tmp_path / name, first_line + "1,2,F\n")
    assert read_header(path) == ["row_id", "subject_id", "gender"]


def test_ddl_covers_required_tables() -> None:
    assert set(README_COUNTS) <= set(DDL)
    assert columns("chartevents")[:6] == ["row_id", "subject_id", "hadm_id", "icustay_id", "itemid", "charttime"]


def test_every_demo_header_matches_ddl() -> None:
    files = find_table_files(demo_dir())
    for table, path in files.items():
        assert table in DDL, path
        assert sorted(read_header(path)) == sorted(columns(table)), path


# ---- the live server: the whole demo (loaded once per session by the pg_demo fixture) ---
pg = pytest.mark.postgres


# DuckDB's sniffer must not guess the quote char: CHARTEVENTS has no quotes in its first 20k rows.
_CSV_OPTS = "header=true, quote='\"', escape='\"'"


def _duckdb_count(path: Path) -> int:
    """Records in a CSV by DuckDB's parser (quoted newlines count once), independent of PG."""
    con = duckdb.connect()
    try:
        return con.execute(f"SELECT count(*) FROM read_csv(?, {_CSV_OPTS}, all_varchar=true)",
                           [str(path)]).fetchone()[0]
    finally:
        con.close()


@pg
def test_demo_counts_match_readme(pg_demo) -> None:  # noqa: F811
    logging.getLogger(__name__).info("demo loaded in %.2fs", pg_demo.seconds)  # shown with -o log_cli=true
    assert {t: pg_demo.counts.get(t) for t in README_COUNTS} == README_COUNTS


@pg
def test_demo_counts_match_csv_records_and_tables(pg_demo) -> None:  # noqa: F811
    files = find_table_files(demo_dir())
    assert set(pg_demo.counts) == set(files)
    with psycopg.connect(pg_demo.dsn) as conn:
        for table, path in files.items():
            in_db = conn.execute(f"SELECT count(*) FROM mimiciii.{table}").fetchone()[0]
            assert pg_demo.counts[table] == in_db == _duckdb_count(path), table


@pg
@pytest.mark.parametrize(
    "table,column,data_type,length,precision",
    [
        ("admissions", "row_id", "integer", None, None),
        ("admissions", "hadm_id", "integer", None, None),
        ("admissions", "admittime", "timestamp without time zone", None, 0),
        ("admissions", "hospital_expire_flag", "smallint", None, None),
        ("patients", "dob", "timestamp without time zone", None, 0),
        ("icustays", "los", "double precision", None, None),
        ("chartevents", "charttime", "timestamp without time zone", None, 0),
        ("chartevents", "valuenum", "double precision", None, None),
        ("chartevents", "value", "character varying", 255, None),
        ("labevents", "value", "character varying", 200, None),
        ("outputevents", "newbottle", "character", 1, None),
        ("datetimeevents", "value", "timestamp without time zone", None, 0),
    ],
)
def test_demo_column_types(pg_demo, table, column, data_type, length, precision) -> None:  # noqa: F811
    with psycopg.connect(pg_demo.dsn) as conn:
        row = conn.execute(
            "SELECT data_type, character_maximum_length, datetime_precision FROM information_schema.columns "
            "WHERE table_schema = 'mimiciii' AND table_name = %s AND column_name = %s",
            (table, column),
        ).fetchone()
    assert row == (data_type, length, precision)


@pg
def test_demo_constraints_as_mimic_code(pg_demo) -> None:  # noqa: F811
    with psycopg.connect(pg_demo.dsn) as conn:
        rows = conn.execute(
            "SELECT tc.table_name, tc.constraint_type, kcu.column_name FROM information_schema.table_constraints tc "
            "JOIN information_schema.key_column_usage kcu USING (constraint_schema, constraint_name) "
            "WHERE tc.table_schema = 'mimiciii' AND tc.table_name IN ('admissions', 'chartevents')"
        ).fetchall()
        not_null = conn.execute(
            "SELECT is_nullable FROM information_schema.columns WHERE table_schema = 'mimiciii' "
            "AND table_name = 'admissions' AND column_name IN ('dischtime', 'deathtime') ORDER BY column_name"
        ).fetchall()
    assert sorted(rows) == [
        ("admissions", "PRIMARY KEY", "row_id"), ("admissions", "UNIQUE", "hadm_id"),
        ("chartevents", "PRIMARY KEY", "row_id"),
    ]
    assert not_null == [("YES",), ("NO",)]  # deathtime nullable, dischtime NOT NULL


@pg
@pytest.mark.parametrize(
    "table,expr",
    [
        ("chartevents", "count(valuenum)"),
        ("chartevents", "sum(valuenum)"),
        ("chartevents", "count(hadm_id)"),
        ("chartevents", "epoch(max(charttime)) - epoch(min(charttime))"),
        ("chartevents", "sum(length(value))"),
        ("labevents", "count(hadm_id)"),
        ("labevents", "count(*) FILTER (WHERE flag = 'abnormal')"),
        ("d_items", "count(label)"),
        ("d_icd_diagnoses", "sum(length(long_title))"),  # embedded "" quotes
        ("patients", "count(dod)"),
    ],
)
def test_demo_values_match_duckdb(pg_demo, table: str, expr: str) -> None:  # noqa: F811
    """Aggregates over loaded values equal DuckDB's over the CSV (NULLs, quotes, numbers, times)."""
    import sqlglot

    path = find_table_files(demo_dir())[table]
    duck = duckdb.connect()
    cols = {c: part.split(None, 1)[1].replace(" NOT NULL", "")
            for c, part in zip(columns(table), DDL[table].split(","))}
    expected = duck.execute(f"SELECT {expr} FROM read_csv(?, {_CSV_OPTS}, columns=?)", [str(path), cols]).fetchone()[0]
    pg_sql = sqlglot.transpile(f"SELECT {expr} FROM mimiciii.{table}", read="duckdb", write="postgres")[0]
    with psycopg.connect(pg_demo.dsn) as conn:
        got = conn.execute(pg_sql).fetchone()[0]
    assert float(got) == pytest.approx(float(expected), rel=1e-12)


# ---- the live server: small hand-made directories --------------------------------------
def _demo_rows(table: str, n: int) -> tuple[list[str], list[list[str]]]:
    with gzip.open(find_table_files(demo_dir())[table], "rt", newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader)
        return header, [next(reader) for _ in range(n)]


def _csv_text(header: list[str], rows: list[list[str]], quote_all: bool = False) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, quoting=csv.QUOTE_ALL if quote_all else csv.QUOTE_MINIMAL, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buf.getvalue()


def _count(dsn: str, schema: str, table: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute(f"SELECT count(*) FROM {schema}.{table}").fetchone()[0]


@pg
def test_uppercase_quoted_reordered_plain_csv(pg_server, tmp_path: Path) -> None:  # noqa: F811
    """Full-release style: UPPERCASE quoted header, plain .csv, columns in another order."""
    header, rows = _demo_rows("patients", 5)
    order = list(reversed(range(len(header))))
    body = [[r[i] for i in order] for r in rows]
    _write(tmp_path / "PATIENTS.csv", _csv_text([header[i].upper() for i in order], body, quote_all=False))
    counts = load_mimic_csv(pg_server.dsn, tmp_path, schema="upper_t")
    assert counts == {"patients": 5}
    with psycopg.connect(pg_server.dsn) as conn:
        got = conn.execute(
            "SELECT row_id, gender, to_char(dob, 'YYYY-MM-DD HH24:MI:SS'), dod IS NULL FROM upper_t.patients ORDER BY "
            "row_id"
        ).fetchall()
    want = sorted((int(r[0]), r[2], r[3], r[4] == "") for r in rows)
    assert got == want


@pg
@pytest.mark.parametrize(
    "column,value,fragments",
    [
        (0, "abc", ["line 3", "column row_id", "integer"]),
        (2, "FFFFFF", ["line 3", "column gender", "value too long"]),
        (3, "", ["null value", "dob", "line 3"]),
        (3, "2101-13-45 00:00:00", ["line 3", "column dob", "out of range"]),
    ],
    ids=["text_in_int", "too_long", "not_null", "bad_timestamp"],
)
def test_bad_row_names_file_line_column_and_hides_value(pg_server, tmp_path, column, value,  # noqa: F811
                                                        fragments) -> None:
    header, rows = _demo_rows("patients", 3)
    good_dir, bad_dir = tmp_path / "good", tmp_path / "bad"
    good_dir.mkdir(), bad_dir.mkdir()
    _write(good_dir / "PATIENTS.csv.gz", _csv_text(header, rows))
    load_mimic_csv(pg_server.dsn, good_dir, schema="bad_t")
    subject_id = rows[1][1]  # raw id of the bad row: must not leak into the message
    rows[1][column] = value
    _write(bad_dir / "PATIENTS.csv.gz", _csv_text(header, rows))
    with pytest.raises(PgLoadError) as info:
        load_mimic_csv(pg_server.dsn, bad_dir, schema="bad_t")
    msg = str(info.value)
    assert "PATIENTS.csv.gz" in msg and "bad_t.patients" in msg
    for fragment in fragments:
        assert fragment in msg
    assert subject_id not in msg
    assert not value or value not in msg
    assert info.value.__cause__ is None and info.value.__suppress_context__  # no chained server text
    assert _count(pg_server.dsn, "bad_t", "patients") == 3  # failed load rolled back, old table intact


@pg
def test_duplicate_row_id_fails_primary_key(pg_server, tmp_path: Path) -> None:  # noqa: F811
    header, rows = _demo_rows("admissions", 2)
    rows[1][0] = rows[0][0]
    _write(tmp_path / "ADMISSIONS.csv", _csv_text(header, rows))
    with pytest.raises(PgLoadError, match="admissions_rowid_pk"):
        load_mimic_csv(pg_server.dsn, tmp_path, schema="dup_t")


@pg
@pytest.mark.parametrize(
    "header_edit,match",
    [
        (lambda h: h + ["extra"], r"unknown columns \['extra'\]"),
        (lambda h: h[:-1], r"missing columns \['expire_flag'\]"),
    ],
    ids=["unknown", "missing"],
)
def test_header_mismatch(pg_server, tmp_path: Path, header_edit, match) -> None:  # noqa: F811
    header, rows = _demo_rows("patients", 1)
    _write(tmp_path / "PATIENTS.csv", _csv_text(header_edit(header), rows))
    with pytest.raises(PgLoadError, match=match):
        load_mimic_csv(pg_server.dsn, tmp_path, schema="hdr_t")


@pg
def test_corrupt_gzip(pg_server, tmp_path: Path) -> None:  # noqa: F811
    header, rows = _demo_rows("patients", 3)
    data = gzip.compress(_csv_text(header, rows).encode())
    (tmp_path / "PATIENTS.csv.gz").write_bytes(data[:-12] + b"\x00" * 12)  # broken trailer
    with pytest.raises(PgLoadError, match="PATIENTS.csv.gz"):
        load_mimic_csv(pg_server.dsn, tmp_path, schema="gz_t")


@pg
def test_skips_with_warnings_and_logs_without_password(pg_server, tmp_path: Path, caplog) -> None:  # noqa: F811
    header, rows = _demo_rows("patients", 2)
    _write(tmp_path / "PATIENTS.csv", _csv_text(header, rows))
    _write(tmp_path / "NOT_A_TABLE.csv", "a,b\n1,2\n")
    with caplog.at_level(logging.INFO, logger="pipeline.data.mimic.sources.pgload"):
        counts = load_mimic_csv(pg_server.dsn, tmp_path, schema="skip_t", tables=["PATIENTS", "admissions"])
    assert counts == {"patients": 2}
    text = caplog.text
    assert "NOT_A_TABLE.csv: not a MIMIC-III table" in text
    assert "skipping admissions" in text
    assert "loaded 2 rows into skip_t.patients" in text
    assert pg_server.password not in text and "***" in text


@pg
def test_bad_password_error_is_redacted(pg_server, tmp_path: Path) -> None:  # noqa: F811
    wrong = "Wr0ng-" + pg_server.password[::-1]
    dsn = pg_server.dsn.replace(pg_server.password, wrong)
    with pytest.raises(PgLoadError) as info:
        load_mimic_csv(dsn, demo_dir(), tables=["patients"])
    assert wrong not in str(info.value) and "***" in str(info.value)


@pytest.mark.parametrize(
    "kwargs,match",
    [({"tables": ["patients", "vitals"]}, "not MIMIC-III tables"), ({"schema": "Bad-Schema"}, "schema name")],
)
def test_bad_arguments(tmp_path: Path, kwargs, match) -> None:
    with pytest.raises(ValueError, match=match):
        load_mimic_csv("postgresql://u:p@127.0.0.1:1/db", tmp_path, **kwargs)


# ---- the harness itself ----------------------------------------------------------------
@pg
def test_temp_postgres_cleans_up_after_failed_start(pg_server, monkeypatch) -> None:  # noqa: F811
    """A server that cannot start raises with the server log tail and leaves no directory."""
    monkeypatch.setattr(pgserver, "_TEST_SETTINGS", pgserver._TEST_SETTINGS + "shared_buffers = banana\n")
    server = TempPostgres(pgserver.PgServerConfig(start_attempts=1))
    roots = []
    monkeypatch.setattr(server, "_start_server", _spy(server._start_server, lambda: roots.append(server.root)))
    with pytest.raises(RuntimeError, match="shared_buffers"):
        server.start()
    assert roots and not roots[0].exists() and server.root is None
    server.stop()  # idempotent


def _spy(fn, before):
    def wrapped(*args, **kwargs):
        before()
        return fn(*args, **kwargs)

    return wrapped
