"""MIMIC sources: where the tables come from, each exposed as a SQL relation of one shape.

A source is MIMIC-III or MIMIC-IV (``source.release``), detected from its layout: a directory of
tables, or one with ``hosp/`` and ``icu/`` modules; a ``mimiciii`` schema, or ``mimiciv_hosp`` and
``mimiciv_icu``.

- ``tables``: the releases and the tables and columns the pipeline reads from each, with their types.
- ``base``: ``SourceError`` (and ``CrossReleaseError``: data of one release met a model of the other), a
  table's description, the empty stand-in of a missing optional table.
- ``csvdir``: a directory of CSV / CSV.gz files read by embedded DuckDB (layout detected).
- ``postgres``: a PostgreSQL database (mimic-code's schemas); the SQL runs inside it.
- ``stage``: a Parquet stage of a CSV directory (``cli.py stage``), read like it, typed once.
- ``pgload``: loads a CSV directory into PostgreSQL with mimic-code's table definitions
  (``ddl_mimic4``: MIMIC-IV's).

``open_source`` picks the kind from the location: a ``postgresql://`` (or key=value) DSN, else a stage (a directory with
``stage.json``), else a CSV directory.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.data.mimic.sources.base import SourceError, TableInfo


def is_dsn(location: str | Path) -> bool:
    """Whether ``location`` names a PostgreSQL database (URI or key=value DSN) rather than a directory."""
    text = str(location)
    return text.startswith(("postgresql://", "postgres://")) or " dbname=" in f" {text}"


def open_source(location: str | Path, con, schema: str | None = None):
    """The source at ``location`` (DSN or CSV directory), with its relations on the DuckDB connection ``con``."""
    if is_dsn(location):
        from pipeline.data.mimic.sources.postgres import PostgresSource

        return PostgresSource(str(location), con, schema=schema or "mimiciii")
    from pipeline.data.mimic.sources.stage import StageSource, is_stage

    if is_stage(location):
        return StageSource(Path(location), con)
    from pipeline.data.mimic.sources.csvdir import CsvSource

    return CsvSource(Path(location), con)


__all__ = ["SourceError", "TableInfo", "is_dsn", "open_source"]
