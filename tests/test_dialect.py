"""DuckDB vs PostgreSQL (15 and 16): which DuckDB SQL forms keep their meaning after sqlglot transpiles them.

Each case runs a DuckDB query in DuckDB, transpiles it with
`sqlglot.transpile(sql, read="duckdb", write="postgres")`, runs that on the live test server,
and checks the recorded verdict: SAME rows, a PG_ERROR (the form does not exist there), or
DIFFERENT rows (it runs on both but means something else). The table `t` holds edge cases:
hour boundaries, negative spans, 1800s birth dates (MIMIC's >89 shift), NULLs, .5 ties, mixed case.
"""

from __future__ import annotations

import math
from decimal import Decimal
from enum import Enum

import pytest

from pipeline.data.mimic.sources.dialect import Dialect, to_dialect

duckdb = pytest.importorskip("duckdb")
psycopg = pytest.importorskip("psycopg")
sqlglot = pytest.importorskip("sqlglot")

pytestmark = pytest.mark.postgres

SETUP = [
    "CREATE TABLE t (g INTEGER, x DOUBLE PRECISION, s VARCHAR(20), a TIMESTAMP, b TIMESTAMP)",
    "INSERT INTO t VALUES "
    "(1, 2.5, 'b', TIMESTAMP '2101-01-01 10:59:00', TIMESTAMP '2101-01-01 11:01:00'), "
    "(1, NULL, 'a', TIMESTAMP '2101-01-01 11:01:00', TIMESTAMP '2101-01-01 10:59:00'), "
    "(2, -2.5, NULL, TIMESTAMP '1801-06-15 00:00:00', TIMESTAMP '2101-01-03 09:30:00'), "
    "(2, 7.0, 'B', TIMESTAMP '2101-01-02 23:30:00', NULL), "
    "(3, 3.5, '12.5', TIMESTAMP '2101-02-28 00:00:00', TIMESTAMP '2101-03-01 00:00:00')",
]


class Verdict(str, Enum):
    """What happens to a DuckDB form after transpiling to PostgreSQL."""

    SAME = "same"  # runs on both, same rows
    PG_ERROR = "pg_error"  # transpiled SQL fails on PostgreSQL
    DIFFERENT = "different"  # runs on both, different rows


S, E, D = Verdict.SAME, Verdict.PG_ERROR, Verdict.DIFFERENT
ORDER = " FROM t ORDER BY g, x NULLS LAST"

CASES: list[tuple[str, str, Verdict]] = [
    # --- hour differences -------------------------------------------------------------
    ("date_diff_hour_boundaries", "SELECT date_diff('hour', a, b)" + ORDER, S),
    ("date_diff_day", "SELECT date_diff('day', a, b)" + ORDER, S),
    ("date_diff_minute", "SELECT date_diff('minute', a, b)" + ORDER, S),
    ("date_diff_year", "SELECT date_diff('year', a, b)" + ORDER, S),
    ("epoch_minus_epoch_hours", "SELECT (epoch(b) - epoch(a)) / 3600" + ORDER, S),
    ("epoch_of_interval_hours", "SELECT epoch(b - a) / 3600" + ORDER, S),
    ("extract_epoch_interval_hours", "SELECT EXTRACT(EPOCH FROM (b - a)) / 3600" + ORDER, S),
    ("floor_hours_to_int", "SELECT CAST(floor((epoch(b) - epoch(a)) / 3600) AS INTEGER)" + ORDER, S),
    ("age_years_fractional", "SELECT (epoch(b) - epoch(a)) / (365.25 * 86400)" + ORDER, S),
    # --- integer division and rounding -------------------------------------------------
    ("slash_is_float_division", "SELECT 7 / 2, -7 / 2, g / 2" + ORDER, S),
    ("double_slash_truncates", "SELECT 7 // 2, -7 // 2, g // 2" + ORDER, S),
    ("modulo_sign", "SELECT -7 % 3, g % 2" + ORDER, S),
    ("divide_by_zero_double", "SELECT x / 0" + ORDER, E),
    ("divide_by_nullif_zero", "SELECT x / NULLIF(g - g, 0)" + ORDER, S),
    ("round_double_half", "SELECT round(x)" + ORDER, D),
    ("round_decimal_half", "SELECT round(CAST(x AS DECIMAL(10, 2)))" + ORDER, S),
    ("floor_plus_half", "SELECT floor(x + 0.5)" + ORDER, S),
    ("cast_double_to_int", "SELECT CAST(x AS INTEGER)" + ORDER, S),
    # --- casts ------------------------------------------------------------------------
    ("cast_double", "SELECT CAST(g AS DOUBLE), CAST('3.5' AS DOUBLE), x::DOUBLE" + ORDER, S),
    ("cast_varchar", "SELECT CAST(g AS VARCHAR), g::VARCHAR" + ORDER, S),
    ("try_cast_double", "SELECT TRY_CAST(s AS DOUBLE)" + ORDER, E),
    ("regex_guarded_cast",
     "SELECT CASE WHEN regexp_matches(s, '^[0-9]+([.][0-9]+)?$') THEN CAST(s AS DOUBLE) END" + ORDER, S),
    ("cast_decimal_text_to_int", "SELECT CAST('12.5' AS INTEGER)", E),
    # --- timestamps and intervals ------------------------------------------------------
    ("date_trunc_hour_day", "SELECT date_trunc('hour', a), date_trunc('day', a)" + ORDER, S),
    ("interval_24_hours", "SELECT a + INTERVAL '24 hours', a - INTERVAL 1 DAY" + ORDER, S),
    ("interval_times_column", "SELECT a + x * INTERVAL '1 hour'" + ORDER, S),
    ("interval_column_unit", "SELECT a + INTERVAL (g) HOUR" + ORDER, E),
    ("to_hours", "SELECT a + to_hours(g)" + ORDER, E),
    ("window_filter", "SELECT g FROM t WHERE b <= a + INTERVAL '24 hours' ORDER BY g, x", S),
    ("cast_to_date", "SELECT CAST(a AS DATE)" + ORDER, S),
    ("extract_hour", "SELECT extract(hour FROM a), date_part('hour', a)" + ORDER, S),
    ("strftime", "SELECT strftime(a, '%Y-%m-%d %H')" + ORDER, S),
    # --- NULLs, strings, hashes ---------------------------------------------------------
    ("coalesce", "SELECT COALESCE(x, 0), COALESCE(s, 'none'), ifnull(x, -1)" + ORDER, S),
    ("concat_pipe_null", "SELECT 'v:' || s, CAST(g AS VARCHAR) || '_' || s" + ORDER, S),
    ("concat_fn_skips_null", "SELECT concat('v:', s), concat_ws('_', g, s)" + ORDER, S),
    ("md5", "SELECT md5(CAST(g AS VARCHAR))" + ORDER, S),
    ("sha256_text", "SELECT sha256(CAST(g AS VARCHAR))" + ORDER, E),  # PG sha256 takes bytea
    ("hash", "SELECT hash(g)" + ORDER, E),
    ("lower_like_ilike", "SELECT lower(s), s LIKE 'b%', s ILIKE 'b'" + ORDER, S),
    # same only because the test cluster uses the C collation (byte order, like DuckDB)
    ("order_by_string_c_collation", "SELECT s FROM t ORDER BY s", S),
    # --- aggregates and windows ---------------------------------------------------------
    ("order_desc_nulls", "SELECT x FROM t ORDER BY x DESC", S),
    ("row_number_desc", "SELECT g, row_number() OVER (PARTITION BY g ORDER BY x DESC)" + ORDER, S),
    ("qualify", "SELECT g, x FROM t QUALIFY row_number() OVER (PARTITION BY g ORDER BY x DESC) = 1 ORDER BY g", S),
    ("distinct_on", "SELECT DISTINCT ON (g) g, x FROM t ORDER BY g, x DESC", S),
    ("count_filter", "SELECT g, count(*) FILTER (WHERE x > 1) FROM t GROUP BY g ORDER BY g", S),
    ("sum_boolean", "SELECT g, sum(x > 1) FROM t GROUP BY g ORDER BY g", E),
    ("avg_int_and_double", "SELECT g, avg(g), avg(x) FROM t GROUP BY g ORDER BY g", S),
    ("median_quantile", "SELECT g, median(x), quantile_cont(x, 0.25) FROM t GROUP BY g ORDER BY g", S),
    ("string_agg_ordered", "SELECT g, string_agg(s, ',' ORDER BY s) FROM t GROUP BY g ORDER BY g", S),
    ("list_agg", "SELECT g, list(x ORDER BY x) FROM t GROUP BY g ORDER BY g", S),
    ("arg_max", "SELECT g, arg_max(s, x) FROM t GROUP BY g ORDER BY g", E),
    ("first_ordered", "SELECT g, first(s ORDER BY x) FROM t GROUP BY g ORDER BY g", E),
    ("any_value", "SELECT g, any_value(g) FROM t GROUP BY g ORDER BY g", E),
    ("group_by_all", "SELECT g, count(*) FROM t GROUP BY ALL ORDER BY g", E),
    ("select_exclude", "SELECT * EXCLUDE (a, b)" + ORDER, E),
    ("greatest_least_skip_null", "SELECT greatest(x, 1.0), least(x, 1.0)" + ORDER, S),
]
# Verdicts that changed with a PostgreSQL release: name -> (first major version, verdict from then on).
# The SQL under sql/ must still avoid these forms: a user's server may be older than the test server.
CHANGED_IN: dict[str, tuple[int, Verdict]] = {"any_value": (16, S)}  # ANY_VALUE is new in PostgreSQL 16


def _norm(value):
    """Compare numbers by value (PG numeric vs DuckDB int/double) and floats with tolerance."""
    if isinstance(value, (Decimal, int)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, list):
        return [_norm(v) for v in value]
    return value


def _same(duck_rows, pg_rows) -> bool:
    if len(duck_rows) != len(pg_rows):
        return False
    for dr, pr in zip(duck_rows, pg_rows):
        if len(dr) != len(pr):
            return False
        for dv, pv in zip(map(_norm, dr), map(_norm, pr)):
            if isinstance(dv, float) and isinstance(pv, float):
                if not (dv == pv or math.isclose(dv, pv, rel_tol=1e-12, abs_tol=1e-12)):
                    return False
            elif dv != pv:
                return False
    return True


@pytest.fixture(scope="module")
def engines(pg_server):  # noqa: F811
    """(DuckDB connection, PostgreSQL connection) both holding table t."""
    dcon = duckdb.connect()
    dsn = pg_server.create_database("dialect_test")
    pcon = psycopg.connect(dsn, autocommit=True)
    for stmt in SETUP:
        dcon.execute(stmt)
        pcon.execute(stmt)
    yield dcon, pcon
    pcon.close()
    dcon.close()


def transpile(sql: str) -> str:
    return sqlglot.transpile(sql, read="duckdb", write="postgres")[0]


@pytest.mark.parametrize("name,sql,verdict", CASES, ids=[c[0] for c in CASES])
def test_transpiled_form(engines, name: str, sql: str, verdict: Verdict) -> None:
    dcon, pcon = engines
    if name in CHANGED_IN and pcon.info.server_version >= CHANGED_IN[name][0] * 10_000:
        verdict = CHANGED_IN[name][1]
    duck_rows = dcon.execute(sql).fetchall()  # every case is valid DuckDB
    pg_sql = transpile(sql)
    try:
        pg_rows = pcon.execute(pg_sql).fetchall()
    except psycopg.Error as exc:
        assert verdict is Verdict.PG_ERROR, f"{name}: PostgreSQL rejected {pg_sql!r}: {exc}"
        return
    got = Verdict.SAME if _same(duck_rows, pg_rows) else Verdict.DIFFERENT
    assert got is verdict, f"{name}: {pg_sql!r}\nduckdb={duck_rows}\npostgres={pg_rows}"


@pytest.mark.parametrize(
    "duck_sql,expected",
    [
        # boundaries crossed: 10:59 -> 11:01 crosses one hour boundary
        ("date_diff('hour', TIMESTAMP '2101-01-01 10:59:00', TIMESTAMP '2101-01-01 11:01:00')", 1),
        # fractional hours: 2 minutes
        ("(epoch(TIMESTAMP '2101-01-01 11:01:00') - epoch(TIMESTAMP '2101-01-01 10:59:00')) / 3600", 2 / 60),
        ("epoch(TIMESTAMP '2101-01-01 11:01:00' - TIMESTAMP '2101-01-01 10:59:00') / 3600", 2 / 60),
        # 300 calendar-year boundaries from a shifted 1801 birth date
        ("date_diff('year', TIMESTAMP '1801-06-15 00:00:00', TIMESTAMP '2101-01-03 09:30:00')", 300),
    ],
)
def test_hour_difference_values(engines, duck_sql: str, expected: float) -> None:
    dcon, pcon = engines
    sql = f"SELECT {duck_sql}"
    assert math.isclose(float(dcon.execute(sql).fetchone()[0]), expected)
    assert math.isclose(float(pcon.execute(transpile(sql)).fetchone()[0]), expected)


@pytest.mark.parametrize(
    "duck_sql,fragment",
    [
        ("SELECT date_diff('hour', a, b) FROM t", "DATE_TRUNC('HOUR'"),
        ("SELECT epoch(b) - epoch(a) FROM t", "DATE_PART('epoch', b)"),
        ("SELECT g / 2 FROM t", "CAST(g AS DOUBLE PRECISION) / 2"),
        ("SELECT g // 2 FROM t", "DIV(g, 2)"),
        ("SELECT TRY_CAST(s AS DOUBLE) FROM t", "CAST(s AS DOUBLE PRECISION)"),
        ("SELECT x FROM t ORDER BY x DESC", "DESC NULLS LAST"),
        ("SELECT regexp_matches(s, '^[0-9]+$') FROM t", "s ~ '^[0-9]+$'"),
    ],
)
def test_sqlglot_rewrites(duck_sql: str, fragment: str) -> None:
    """Pin the sqlglot rewrites the verdicts above depend on (an upgrade may change them)."""
    assert fragment in transpile(duck_sql)


# ---- the files of sql/: every one transpiles; the local-DuckDB ones run alike on PostgreSQL -----

def _sample_params() -> dict[str, object]:
    """A value for every ${parameter} of sql/ (tables by name, small numbers, nested SELECTs)."""
    from pipeline.core import contracts
    from pipeline.data.mimic.extraction import queries
    from pipeline.data.mimic.sources.tables import TABLES, TABLES_IV

    params: dict[str, object] = {name: name for name in [*TABLES, *TABLES_IV]}
    params.update(prediction_hours=24.0, lookback_days=30.0, open_admissions="FALSE", cohort_filter="TRUE",
                  link_key="subject_id", window="ev_a", quantiles="0.500000", min_patients=2, text_max_len=8,
                  max_text_values=3, event_filter="TRUE", edge=0.0, value_clip=5.0,
                  census_columns=", ".join(contracts.COHORT_COLUMNS))
    params["events"] = queries.strip_comments(queries.render(queries.EVENT_SQL["chartevents"], **params))
    params["staged"] = queries.strip_comments(queries.render(queries.STAGED[queries.MIMIC4], **params))
    params["used"] = queries.strip_comments(queries.render(queries.EVENTS_USED, window="ev_a"))
    params["tokens"] = queries.strip_comments(queries.render(queries.TOKENS, **params))
    return params


def test_every_sql_file_is_in_the_build_order():
    """Every file of sql/ is run: by the MIMIC extraction (its build order) or by the MEDS extraction and export
    (sql/meds/, their own)."""
    from pipeline.data.meds.export import EXPORT_SQL
    from pipeline.data.meds.flow import CONTEXT, EVENTS_WINDOW
    from pipeline.data.mimic.extraction import queries

    meds = {EVENTS_WINDOW, CONTEXT, EXPORT_SQL["admissions"], *EXPORT_SQL["patients"].values(), EXPORT_SQL["icustays"],
            EXPORT_SQL["events"], EXPORT_SQL["structural"]}
    on_disk = {p.relative_to(queries.SQL_DIR).with_suffix("").as_posix() for p in queries.SQL_DIR.rglob("*.sql")}
    assert on_disk == set(queries.BUILD_ORDER) | meds and not meds & set(queries.BUILD_ORDER)
    assert len(queries.BUILD_ORDER) == len(set(queries.BUILD_ORDER))
    iii, iv = queries.build_order(queries.MIMIC3), queries.build_order(queries.MIMIC4)
    assert set(iii) | set(iv) == set(queries.BUILD_ORDER)
    shared = set(iii) & set(iv)  # everything but the mapping of each release onto the staging shape
    assert all("/" not in name for name in shared) and all("/" in name for name in set(iii) ^ set(iv))


def test_every_sql_file_transpiles_to_postgres():
    """Each file of the build order, rendered, is one statement that sqlglot turns into PostgreSQL
    without DuckDB-only forms left (epoch(), lambdas, list functions, GROUP BY ALL)."""
    from pipeline.data.mimic.extraction import queries

    params = _sample_params()
    for name in queries.BUILD_ORDER:
        sql = queries.render(name, **params)
        pg = to_dialect(sql, Dialect.postgres)
        for duck_only in ("EPOCH(", "LAMBDA", "LIST_", "GROUP BY ALL", "QUANTILE_CONT"):
            assert duck_only not in pg.upper(), f"{name}: {duck_only} left in {pg}"


_LOCAL_TABLES = {
    "cohort": ("hadm_id BIGINT, subject_id BIGINT, dob_epoch DOUBLE PRECISION, admit_epoch DOUBLE PRECISION",
               [(12, 2, -1.0e9, 10.0), (11, 1, None, 5.0), (13, 2, -1.0e9, 20.0), (14, 3, 0.0, 30.0)]),
    "admissions_classified": ("admit_epoch DOUBLE PRECISION, disch_epoch DOUBLE PRECISION, exclusion VARCHAR",
                              [(100.0, 200.0, None), (150.0, None, "newborn"), (900.0, 950.0, "quarantine:x"),
                               (120.0, 300.0, None)]),
    "adm": ("hadm_id BIGINT, subject_id BIGINT, adm_idx BIGINT, split VARCHAR",
            [(11, 1, 0, "train"), (12, 2, 1, "train"), (13, 2, 2, "train"), (14, 3, 3, "val")]),
    "ev_a": ("row_id BIGINT, hadm_id BIGINT, source VARCHAR, item VARCHAR, valuenum DOUBLE PRECISION, "
             "valuetext VARCHAR, t_hours DOUBLE PRECISION, reason VARCHAR",
             [(1, 11, "chart", "211", 10.0, "10", -100.0, None), (2, 12, "chart", "211", 20.0, "20", 0.0, None),
              (3, 13, "chart", "211", 20.0, "20", 0.25, None), (4, 14, "chart", "211", 25.0, "25", 23.9, None),
              (5, 11, "chart", "211", 40.0, "40", 5.0, None), (6, 12, "chart", "211", 30.0, "30", 5.5, None),
              (7, 11, "chart", "212", None, " a:b ", 1.0, None),
              (8, 12, "chart", "212", None, "Normal Sinus Rhythm", 2.0, None),
              (9, 13, "chart", "212", None, " a:b", -30.0, None), (10, 11, "chart", "999", 7.0, "7", 3.0, None),
              (11, 11, "chart", "211", 5.0, "5", 1.0, "ERROR flag set"),
              (12, 99, "chart", "211", 1.0, "1", 1.0, None)]),
    "ev_b": ("row_id BIGINT, hadm_id BIGINT, source VARCHAR, item VARCHAR, valuenum DOUBLE PRECISION, "
             "valuetext VARCHAR, t_hours DOUBLE PRECISION, reason VARCHAR",
             [(1, 11, "lab", "50800", None, "ART", -0.5, None), (2, 12, "lab", "50800", None, "VEN", 3.0, None),
              (3, 14, "lab", "50800", None, None, 4.0, None), (4, 11, "lab", "50800", None, "ART", -0.25, None),
              (5, 13, "lab", "51000", None, "x" * 30, 6.0, None), (6, 12, "lab", "51000", None, "y" * 30, 6.0, None),
              (7, 11, "lab", "51000", None, "z" * 30, 6.0, None), (8, 12, "lab", "51000", None, "w" * 30, 7.0, None)]),
}


def _close(a, b) -> bool:
    """Equal rows, floats within 1e-12 (relative), lists element by element, numerics by value."""
    a, b = _norm(a), _norm(b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float):
        return a == b or math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12)
    return a == b


@pytest.fixture(scope="module")
def local_engines(pg_server):  # noqa: F811
    """DuckDB and PostgreSQL connections holding the same small extraction tables."""
    dcon = duckdb.connect()
    pcon = psycopg.connect(pg_server.create_database("sql_files_test"), autocommit=True)
    for name, (cols, rows) in _LOCAL_TABLES.items():
        for con, mark in ((dcon, "?"), (pcon, "%s")):
            con.execute(f"CREATE TABLE {name} ({cols})")
            width = len(rows[0])
            if con is dcon:
                con.executemany(f"INSERT INTO {name} VALUES ({', '.join([mark] * width)})", rows)
            else:
                with con.cursor() as cur:
                    cur.executemany(f"INSERT INTO {name} VALUES ({', '.join([mark] * width)})", rows)
    yield dcon, pcon
    pcon.close()
    dcon.close()


def _both(engines, sql: str, ordered: bool):
    """The rows of a DuckDB-dialect query on DuckDB and, transpiled, on PostgreSQL."""

    dcon, pcon = engines
    duck = dcon.execute(sql).fetchall()
    pg = pcon.execute(to_dialect(sql, Dialect.postgres)).fetchall()
    if not ordered:
        key = lambda row: tuple((v is None, str(v)) for v in row)  # noqa: E731
        duck, pg = sorted(duck, key=key), sorted(pg, key=key)
    assert len(duck) == len(pg) and all(_close(d, p) for d, p in zip(duck, pg)), f"{sql}\nduckdb={duck}\npostgres={pg}"
    return duck


def _create(engines, table: str, sql: str) -> None:

    dcon, pcon = engines
    dcon.execute(f"CREATE TABLE {table} AS {sql}")
    pcon.execute(f"CREATE TABLE {table} AS {to_dialect(sql, Dialect.postgres)}")


def test_local_sql_files_give_the_same_rows_on_postgres(local_engines):
    """03-06 and 30-45 (the cohort reads and the whole token/bag chain) on both engines, each step's
    output the next step's input, edge cases included: a value equal to a cut point, values below
    and above every cut, an item in one patient only (no bins), text with ':' and blanks, a text
    item over the distinct-value limit, an event of an admission not kept, quarantined rows,
    hourly and daily bags, duplicate tokens in one bag."""
    from pipeline.data.mimic.extraction import queries, tokens

    eng = local_engines
    assert _both(eng, queries.render(queries.COHORT_SUBJECTS), ordered=False) == [(1, None), (2, -1.0e9), (3, 0.0)]
    assert [r[0] for r in _both(eng, queries.render(queries.COHORT_ROWS), ordered=True)] == [11, 12, 13, 14]
    assert _both(eng, queries.render(queries.COHORT_ELIGIBLE), ordered=True) == [(2,)]
    assert _both(eng, queries.render(queries.DATA_END), ordered=True) == [(150.0, 300.0)]
    assert _both(eng, queries.events_union([]), ordered=True) == []
    _create(eng, "events", queries.events_union(["ev_a", "ev_b"]))
    events = _both(eng, "SELECT * FROM events", ordered=False)
    assert len(events) == 10 + 8  # ev_a: the quarantined row and HADM_ID 99 (not in adm) dropped
    last = _both(eng, queries.render(queries.LAST_EVENT), ordered=False)
    assert dict(last) == {0: 6.0, 1: 7.0, 2: 6.0, 3: 23.9}

    n_bins, min_patients, max_text, text_len = 3, 2, 3, 8
    quantiles = ", ".join(f"{i / n_bins:.6f}" for i in range(1, n_bins))
    bins = _both(eng, queries.render(queries.FIT_BINS, quantiles=quantiles, min_patients=min_patients), ordered=True)
    assert [k for k, _ in bins] == ["chart:211"]  # chart:999 is seen in one patient only
    text_items = _both(eng, queries.render(queries.FIT_TEXT_ITEMS, text_max_len=text_len, max_text_values=max_text),
                       ordered=True)
    assert text_items == [("chart:212",), ("lab:50800",)]  # lab:51000 has 4 distinct values in train

    dcon, pcon = eng
    vocab = tokens.fit(dcon, n_bins, min_patients, max_text, text_len)
    tokens.register(dcon, vocab)  # as the extraction does before tokenizing: the fitted vocabulary
    ranges = tokens.bin_ranges(vocab.bins).to_pylist()
    assert [(r["bin"], r["lo"], r["hi"]) for r in ranges] == [
        (0, -math.inf, vocab.bins["chart:211"][0]), (1, vocab.bins["chart:211"][0], vocab.bins["chart:211"][1]),
        (2, vocab.bins["chart:211"][1], math.inf)]
    with pcon.cursor() as cur:
        cur.execute("CREATE TABLE bin_ranges_t (key VARCHAR, bin INTEGER, lo DOUBLE PRECISION, hi DOUBLE PRECISION, "
                    "center DOUBLE PRECISION, scale DOUBLE PRECISION)")
        cur.executemany("INSERT INTO bin_ranges_t VALUES (%s, %s, %s, %s, %s, %s)", [tuple(r.values()) for r in ranges])
        cur.execute("CREATE TABLE text_items_t (key VARCHAR)")
        cur.executemany("INSERT INTO text_items_t VALUES (%s)", [(k,) for k in vocab.text_items])
        cur.execute("CREATE TABLE vocab_t (token VARCHAR, tid INTEGER)")
        cur.executemany("INSERT INTO vocab_t VALUES (%s, %s)", [(t, i) for i, t in enumerate(vocab.tokens)])
    kept = _both(eng, queries.render(queries.FIT_VOCABULARY, tokens=tokens.token_sql(text_len, "e.split = 'train'"),
                                    min_patients=min_patients), ordered=True)
    assert [t for (t,) in kept] == [t for t in vocab.tokens if not t.endswith("<oov>") and t != tokens.PAD]
    assert ("chart:212:t: a;b",) not in kept and ("chart:212:t:a;b",) in kept  # trimmed, ':' -> ';'

    toks = _both(eng, tokens.token_sql(text_len), ordered=False)
    by_value = {(r[4], r[3]): r[5] for r in toks}
    cuts = vocab.bins["chart:211"]
    assert by_value[("chart", 5.0)] == f"chart:211:q{sum(c <= 40.0 for c in cuts)}"
    assert {t for t in by_value.values() if t.startswith("chart:211:q")} >= {"chart:211:q0", "chart:211:q2"}
    assert by_value[("chart", 3.0)] == "chart:999"
    assert by_value[("lab", 6.0)] == "lab:51000"  # free text (too many values): item token only

    _create(eng, "tokenized", queries.render(queries.TOKENIZED, tokens=tokens.token_sql(text_len)))
    _both(eng, "SELECT * FROM tokenized", ordered=False)
    for edge in (0.0, 12.0):
        bags = _both(eng, queries.render(queries.BAGS, edge=edge), ordered=True)
        assert sum(r[4] for r in bags) == len(events)
        assert all(r[2] == sorted(set(r[2])) and len(r[3]) == len(r[2]) for r in bags)  # ids, a value beside each
    assert any(v != 0.0 for r in bags for v in r[3])  # chart:211's binned values carry their channel
    nested = tokens.bag(dcon, 24.0, 12.0).to_pylist()
    assert [r["adm_idx"] for r in nested] == [0, 1, 2, 3] and sum(r["n_events"] for r in nested) == len(events)
    assert nested[0]["bag_hours"] == sorted(nested[0]["bag_hours"]) and nested[0]["bag_hours"][0] == -108.0
