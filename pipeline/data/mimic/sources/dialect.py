"""SQL dialects of the sources: DuckDB is the canonical one; PostgreSQL's SQL is generated from it
with sqlglot (mimic-code's way), never kept by hand."""

from __future__ import annotations

from enum import Enum


class Dialect(str, Enum):
    duckdb = "duckdb"
    postgres = "postgres"


def strip_comments(sql: str) -> str:
    return "\n".join(line for line in sql.splitlines() if not line.lstrip().startswith("--"))


def to_dialect(sql: str, dialect: Dialect | str) -> str:
    """Return `sql` (DuckDB dialect) in the target dialect."""
    dialect = Dialect(dialect)
    if dialect is Dialect.duckdb:
        return sql
    import sqlglot

    out = sqlglot.transpile(strip_comments(sql), read="duckdb", write=dialect.value)
    if len(out) != 1:
        raise ValueError(f"expected one SQL statement, got {len(out)}")
    return out[0]
