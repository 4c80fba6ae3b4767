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
    ("regex_guarded_cast", "SELECT CASE WHEN regexp_matches(s, '^[0-9]+([.][0-9]+)?$') THEN CAST(s AS DOUBLE) END" + ORDER, S),
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
