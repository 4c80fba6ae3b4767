"""MIMIC in PostgreSQL as an extraction source: mimic-code's `mimiciii` schema, or its MIMIC-IV
schemas `mimiciv_hosp` and `mimiciv_icu` (found without being told; `schema` overrides).

The SQL of `sql/` is transpiled from DuckDB to PostgreSQL with sqlglot and runs inside the
database: the cohort and the windowed events are computed there, and only the cohort's
events before the prediction time stream out (server-side cursor, in chunks) into the
local DuckDB, where the same transforms as for CSV sources run.

Credentials come from the DSN, the environment (PGPASSWORD, PGUSER ...) or a pgpass file,
as libpq resolves them. The DSN is only ever shown redacted (`pipeline.core.redact.redact_dsn`).
"""

from __future__ import annotations

import logging

import pyarrow as pa

from pipeline.core.redact import redact_dsn
from pipeline.data.mimic.sources.base import SourceError, TableInfo, empty_relation, short_error
from pipeline.data.mimic.sources.dialect import Dialect, to_dialect
from pipeline.data.mimic.sources.tables import Release, tables_of

log = logging.getLogger(__name__)

CHUNK_ROWS = 200_000
# PostgreSQL type OIDs -> Arrow types (anything else is read as text).
_OID_TYPES = {
    16: pa.bool_(),
    20: pa.int64(),
    21: pa.int64(),
    23: pa.int64(),
    700: pa.float64(),
    701: pa.float64(),
    1700: pa.float64(),
}


DEFAULT_SCHEMA = "mimiciii"  # mimic-code's MIMIC-III schema; when absent, MIMIC-IV's (MIMIC4_PREFIX_hosp, _icu)
MIMIC4_PREFIX = "mimiciv"


class PostgresSource:
    """A live PostgreSQL database holding MIMIC-III (one schema) or MIMIC-IV (hosp and icu schemas).

    ``schema``: a MIMIC-III schema, a MIMIC-IV prefix P (schemas P_hosp and P_icu), a pair
    "HOSP,ICU", or a schema holding MIMIC-IV's tables together. The default (``mimiciii``) falls back
    to mimic-code's MIMIC-IV schemas ``mimiciv_hosp`` and ``mimiciv_icu`` when it has no tables."""

    kind = "postgres"

    def __init__(self, dsn: str, local_con, schema: str | None = DEFAULT_SCHEMA) -> None:
        import psycopg

        schema = schema or DEFAULT_SCHEMA
        self.local = local_con
        try:
            self.conn = psycopg.connect(dsn, autocommit=True)
        except Exception as exc:
            raise SourceError(f"cannot connect to PostgreSQL {redact_dsn(dsn)}: {short_error(exc)}") from None
        self.release, self.schemas, present = self._locate(schema, dsn)
        self.schema = ",".join(dict.fromkeys(self.schemas.values()))
        self.description = f"postgres:{redact_dsn(dsn)} schema={self.schema}"
        self.specs = tables_of(self.release)
        self.tables: dict[str, TableInfo] = {}
        for name, spec in self.specs.items():
            where = self.schemas[spec.module]
            if name not in present[where]:
                if spec.required:
                    raise SourceError(f"required table {where}.{name} not found in PostgreSQL")
                log.warning("optional table %s.%s not found: its events are skipped", where, name)
                continue
            info = TableInfo(name, f"{where}.{name}")
            for col in spec.columns:
                if col in present[where][name]:
                    info.columns[col] = col
                elif col in spec.optional_columns:
                    info.missing_optional.append(col)
                else:
                    raise SourceError(f"PostgreSQL table {where}.{name} has no column {col} (required)")
            self.tables[name] = info

    def _locate(self, schema: str, dsn: str) -> tuple[Release, dict[str, str], dict[str, dict[str, set[str]]]]:
        """(release, module -> schema, schema -> table -> columns) of the MIMIC tables that ``schema`` names."""
        names = [schema] + ([MIMIC4_PREFIX] if schema == DEFAULT_SCHEMA else [])
        for name in names:
            pair = [p.strip() for p in name.split(",")]
            hosp, icu = pair if len(pair) == 2 else (f"{name}_hosp", f"{name}_icu")
            cols = self._columns(list(dict.fromkeys([name, hosp, icu])))
            flat = cols.get(name, {})
            if flat and len(pair) == 1:
                if "anchor_age" in flat.get("patients", set()):  # MIMIC-IV's tables in one schema
                    return Release.mimic4, {"hosp": name, "icu": name}, cols
                return Release.mimic3, {"": name}, cols
            if cols.get(hosp) and cols.get(icu):
                return Release.mimic4, {"hosp": hosp, "icu": icu}, cols
            if cols.get(hosp) or cols.get(icu):
                found, missing = (hosp, icu) if cols.get(hosp) else (icu, hosp)
                raise SourceError(f"PostgreSQL schema {found} has MIMIC-IV tables but {missing} has none: a MIMIC-IV "
                                  f"source needs both modules ({redact_dsn(dsn)})")
        raise SourceError(f"PostgreSQL schema {schema!r} has no MIMIC-III tables, and there are no MIMIC-IV schemas "
                          f"{schema}_hosp and {schema}_icu ({redact_dsn(dsn)})")

    def _columns(self, schemas: list[str]) -> dict[str, dict[str, set[str]]]:
        rows = self.conn.execute(
            "SELECT table_schema, lower(table_name), lower(column_name) FROM information_schema.columns "
            "WHERE table_schema = ANY(%s)",
            (schemas,),
        ).fetchall()
        out: dict[str, dict[str, set[str]]] = {}
        for schema, table, col in rows:
            out.setdefault(schema, {}).setdefault(table, set()).add(col)
        return out

    def relation(self, name: str) -> str:
        spec = self.specs[name]
        if name not in self.tables:
            return empty_relation(spec)
        info = self.tables[name]
        cols = [c if c in info.columns else f"CAST(NULL AS {t}) AS {c}" for c, t in spec.columns.items()]
        return f"(SELECT {', '.join(cols)}, CAST(NULL AS VARCHAR) AS _error FROM {info.location})"

    def relations(self) -> dict[str, str]:
        return {name: self.relation(name) for name in self.specs}

    def _sql(self, sql: str) -> str:
        return to_dialect(sql, Dialect.postgres)

    def execute(self, sql: str, what: str) -> None:
        try:
            self.conn.execute(self._sql(sql))
        except Exception as exc:
            raise SourceError(f"{what} (PostgreSQL): {short_error(exc)}") from None

    def materialize(self, sql: str, table: str, what: str) -> None:
        try:
            self.conn.execute(f"DROP TABLE IF EXISTS pg_temp.{table}")
            self.conn.execute(f"CREATE TEMP TABLE {table} AS {self._sql(sql)}")
            self.conn.execute(f"ANALYZE {table}")
        except Exception as exc:
            raise SourceError(f"{what} (PostgreSQL): {short_error(exc)}") from None

    def _batches(self, sql: str, what: str):
        """Yield Arrow record batches of a query through a server-side cursor."""
        try:
            with self.conn.transaction(), self.conn.cursor(name="mimic_stream") as cur:
                cur.itersize = CHUNK_ROWS
                cur.execute(self._sql(sql))
                names = [d.name for d in cur.description]
                types = [_OID_TYPES.get(d.type_code, pa.string()) for d in cur.description]
                schema = pa.schema(list(zip(names, types)))
                yielded = False
                while rows := cur.fetchmany(CHUNK_ROWS):
                    cols = list(zip(*rows))
                    yield pa.record_batch([_array(c, t) for c, t in zip(cols, types)], schema=schema)
                    yielded = True
                if not yielded:
                    yield pa.record_batch([pa.array([], t) for t in types], schema=schema)
        except SourceError:
            raise
        except Exception as exc:
            raise SourceError(f"{what} (PostgreSQL): {short_error(exc)}") from None

    def fetch_arrow(self, sql: str, what: str) -> pa.Table:
        return pa.Table.from_batches(list(self._batches(sql, what)))

    def into_local(self, sql: str, table: str, what: str) -> None:
        """Stream the query result into a table of the local DuckDB, chunk by chunk."""
        first = True
        for batch in self._batches(sql, what):
            self.local.register("pg_chunk", batch)
            if first:
                self.local.execute(f"CREATE OR REPLACE TEMP TABLE {table} AS SELECT * FROM pg_chunk")
                first = False
            else:
                self.local.execute(f"INSERT INTO {table} SELECT * FROM pg_chunk")
            self.local.unregister("pg_chunk")

    concurrent_scans = False  # one psycopg connection

    def into_local_counted(self, sql: str, table: str, what: str, name: str) -> tuple[None, list]:  # noqa: ARG002
        """``into_local``; the server counts separately (``count_rows``): (None, no rejected lines)."""
        self.into_local(sql, table, what)
        return None, []

    def count_rows(self, name: str) -> tuple[int, list[tuple[int, str]]]:
        try:
            n = self.conn.execute(f"SELECT count(*) FROM {self.tables[name].location}").fetchone()[0]
        except Exception as exc:
            raise SourceError(f"{self.tables[name].location} (PostgreSQL): {short_error(exc)}") from None
        return int(n), []

    def scan_rejects(self, name: str) -> list[tuple[int, str]]:
        return []  # typed tables: nothing to reject while scanning

    def close(self) -> None:
        self.conn.close()


def _array(values, typ: pa.DataType) -> pa.Array:
    if pa.types.is_floating(typ):
        return pa.array([None if v is None else float(v) for v in values], typ)
    if pa.types.is_string(typ):
        return pa.array([None if v is None else str(v) for v in values], typ)
    return pa.array(values, typ)
