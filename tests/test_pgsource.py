"""PostgreSQL source: the same SQL inside a real server gives byte-identical features."""

from __future__ import annotations

import json
import logging

import pandas as pd
import pytest
from helpers.postgres import demo_dir as _demo_dir  # a plain function (the pg_* fixtures come from conftest)

from pipeline.core.contracts import COHORT_COLUMNS
from pipeline.core.redact import REDACTED
from pipeline.data.mimic.extraction import extract
from pipeline.data.mimic.sources import SourceError

FEATURES = ["train.parquet", "val.parquet", "test.parquet", "vocab.json"]


@pytest.fixture(scope="module")
def pg_features(pg_demo, tmp_path_factory):  # noqa: F811
    return extract(pg_demo.dsn, tmp_path_factory.mktemp("pg_features"), schema=pg_demo.schema)


def test_postgres_features_identical_to_duckdb(pg_features, demo_features):
    for name in FEATURES + ["quarantine/chartevents.parquet", "quarantine/admissions.parquet"]:
        assert (pg_features.out_dir / name).read_bytes() == (demo_features.out_dir / name).read_bytes(), name


def test_postgres_accounting_matches_duckdb(pg_features, demo_features):
    pg, dk = pg_features.manifest, demo_features.manifest
    assert pg["tables"] == dk["tables"]
    assert pg["splits"] == dk["splits"] and pg["cohort"] == dk["cohort"]
    assert pg["source"]["kind"] == "postgres"


def test_password_never_reaches_outputs_or_logs(pg_demo, tmp_path, caplog):  # noqa: F811
    password = pg_demo.dsn.split("://", 1)[1].split("@", 1)[0].split(":", 1)[1]
    assert len(password) >= 8
    caplog.set_level(logging.DEBUG)
    res = extract(pg_demo.dsn, tmp_path / "f", schema=pg_demo.schema)
    assert REDACTED in res.manifest["source"]["location"]
    for path in res.out_dir.rglob("*"):
        if path.is_file():
            assert password.encode() not in path.read_bytes(), path
    assert password not in caplog.text
    bad = pg_demo.dsn.replace(password, "wrong-password-xyz")
    with pytest.raises(SourceError) as err:
        extract(bad, tmp_path / "g", schema=pg_demo.schema)
    assert "wrong-password-xyz" not in str(err.value) and REDACTED in str(err.value)


def test_missing_schema_is_a_clear_error(pg_demo, tmp_path):  # noqa: F811
    with pytest.raises(SourceError, match="schema 'nope' has no MIMIC-III tables"):
        extract(pg_demo.dsn, tmp_path / "f", schema="nope")


def test_generated_postgres_sql_is_not_hand_kept():
    from pipeline.data.mimic.extraction import queries
    from pipeline.data.mimic.sources.dialect import to_dialect

    sql = to_dialect(queries.events_sql("chartevents", {"chartevents": "t"}), "postgres")
    assert "DATE_PART('epoch'" in sql and "epoch(" not in sql
    json.dumps(sql)


def test_postgres_census_matches_duckdb_and_checks_as_of(pg_demo, demo_features, tmp_path):  # noqa: F811
    """Scoring extraction (training vocabulary, data end from ADMISSIONS) gives the same cohort file,
    window columns included, on both engines; an --as-of before the newest record fails on both."""
    from pipeline.data.mimic.extraction.tokens import Vocab

    vocab = Vocab.from_json(json.loads((demo_features.out_dir / "vocab.json").read_text()))
    pg = extract(pg_demo.dsn, tmp_path / "pg", vocab=vocab, schema=pg_demo.schema)
    dk = extract(_demo_dir(), tmp_path / "dk", vocab=vocab)
    assert (pg.out_dir / "cohort.parquet").read_bytes() == (dk.out_dir / "cohort.parquet").read_bytes()
    census = "icu_system = 'metavision' AND age >= 18"  # a census condition, applied to the census columns
    pg = extract(pg_demo.dsn, tmp_path / "pg-c", vocab=vocab, schema=pg_demo.schema, cohort_filter=census)
    dk = extract(_demo_dir(), tmp_path / "dk-c", vocab=vocab, cohort_filter=census)
    assert (pg.out_dir / "cohort.parquet").read_bytes() == (dk.out_dir / "cohort.parquet").read_bytes()
    assert 0 < pg.manifest["cohort"]["admissions"] < 117 and pg.manifest["cohort_filter_applied"]
    by_id = [r.excluded.sort_values("hadm_id").reset_index(drop=True) for r in (pg, dk)]
    assert list(by_id[0].columns) == [*COHORT_COLUMNS, "exclusion"] and len(by_id[0]) > 0
    pd.testing.assert_frame_equal(by_id[0], by_id[1], check_dtype=False)
    for source, kw in ((pg_demo.dsn, {"schema": pg_demo.schema}), (_demo_dir(), {})):
        with pytest.raises(SourceError, match="`as_of` is before the newest ADMITTIME or DISCHTIME"):
            extract(source, tmp_path / "early", vocab=vocab, as_of=0.0, **kw)
