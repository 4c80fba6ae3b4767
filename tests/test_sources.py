"""pipeline.data.mimic.sources and pipeline.data.mimic.sources.base: which kind of source a location names, opening
it, the
short form of a database error (no statement echo that could quote a cohort's HADM_IDs), the empty
stand-in of a missing optional table, merged reject lists."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from pipeline.core.errors import PipelineError
from pipeline.data.mimic.sources import SourceError, is_dsn, open_source
from pipeline.data.mimic.sources.base import empty_relation, merge_rejects, short_error
from pipeline.data.mimic.sources.tables import TABLES


@pytest.mark.parametrize("location, dsn", [
    ("postgresql://u:pw@h:5432/mimic", True),
    ("postgres://h/mimic", True),
    ("dbname=mimic", True),
    ("host=h port=5432 dbname=mimic user=u", True),
    ("/data/mimic-iii", False),
    ("mimic-iii-demo", False),
    ("./postgresql", False),
    (Path("/data/postgresql:/x"), False),
    ("/data/mydbname=x", False),  # dbname= must start a key=value pair
])
def test_is_dsn(location, dsn):
    assert is_dsn(location) is dsn


def test_open_source_picks_the_kind(demo_dir):
    con = duckdb.connect()
    src = open_source(demo_dir, con)
    assert src.kind == "csv" and src.con is con and "admissions" in src.tables
    assert open_source(str(demo_dir), con).directory == Path(demo_dir)


def test_open_source_dsn_error_is_redacted(tmp_path):
    """A DSN goes to PostgreSQL: an unreachable server is one SourceError that never shows the password."""
    pytest.importorskip("psycopg")
    with pytest.raises(SourceError) as exc:
        open_source("postgresql://mimic:s3cr3t-pw@127.0.0.1:1/mimic?connect_timeout=5", duckdb.connect())
    message = str(exc.value)
    assert message.startswith("cannot connect to PostgreSQL postgresql://mimic:***@127.0.0.1:1/mimic")
    assert "s3cr3t-pw" not in message and "\n" not in message
    assert isinstance(exc.value, PipelineError)
    with pytest.raises(SourceError, match=f"source directory {tmp_path / 'x'} does not exist"):
        open_source(tmp_path / "x", duckdb.connect())


def test_short_error_drops_the_statement_echo():
    con = duckdb.connect()
    con.execute("CREATE TABLE t (hadm_id BIGINT)")
    with pytest.raises(duckdb.Error) as exc:  # a real DuckDB error quoting the statement
        con.execute("SELECT * FROM t WHERE hadm_id IN (100001, 100002) AND nosuchcolumn = 1")
    assert "100001" in str(exc.value)  # DuckDB echoes the statement ...
    short = short_error(exc.value)
    assert "100001" not in short and "nosuchcolumn" in short  # ... the short form does not
    with pytest.raises(duckdb.Error) as exc:
        con.execute("SELECT 100001 FROM")
    assert short_error(exc.value) == 'Parser Error: syntax error at or near "FROM"'  # nor DuckDB's ^^^^ line


@pytest.mark.parametrize("text, expected", [
    ("Binder Error: x\nLINE 1: SELECT 100001\n               ^\nCandidate: y\nmore", "Binder Error: x Candidate: y"),
    ('ERROR: syntax error at "100001"\n  LINE 3: ... 100001 ...\n ^', 'ERROR: syntax error at "100001"'),
    ("\n\nonly line\n\n", "only line"),
    ("", ""),
    ("x" * 600, "x" * 500),  # at most 500 characters
])
def test_short_error_forms(text, expected):
    assert short_error(RuntimeError(text)) == expected


def test_empty_relation_has_the_table_columns_and_no_rows():
    con = duckdb.connect()
    for name, spec in TABLES.items():
        rel = con.sql(f"SELECT * FROM {empty_relation(spec)}")
        assert rel.columns == [*spec.columns, "_error"], name
        assert [str(t) for t in rel.types] == [*spec.columns.values(), "VARCHAR"], name
        assert rel.fetchall() == [], name


def test_merge_rejects_keeps_the_first_reason_per_line_in_line_order():
    assert merge_rejects([(7, "a"), (2, "b")], [(2, "c"), (5, "d")], []) == [(2, "b"), (5, "d"), (7, "a")]
    assert merge_rejects() == []
