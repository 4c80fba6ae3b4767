"""``cli.py load-postgres``: a MIMIC CSV directory loaded into PostgreSQL (``data.mimic.sources.pgload``)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from pipeline.cli.app import command, setup_logging


@command("load-postgres", short_help="Load MIMIC-III or MIMIC-IV CSV files into PostgreSQL.")
def load_postgres(
    source: Path = typer.Option(..., help="MIMIC-III CSV directory (TABLE.csv or TABLE.csv.gz), or MIMIC-IV's "
                                           "(hosp/, icu/)."),
    dsn: str = typer.Option(..., envvar="MIMIC_PG_DSN", help="PostgreSQL DSN (password better in PGPASSWORD or "
                                                             "~/.pgpass)."),
    schema: Optional[str] = typer.Option(None, help="Target schema (mimic-code layout) [default: mimiciii; for "
                                                    "MIMIC-IV the prefix of P_hosp and P_icu, mimiciv]."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log each table's load."),
) -> None:
    """Load a MIMIC-III or MIMIC-IV CSV directory into PostgreSQL with mimic-code's table definitions."""
    setup_logging(verbose)
    from pipeline.data.mimic.sources.pgload import load_mimic_csv, source_release, target_schema

    release = source_release(source)
    for table, n in load_mimic_csv(dsn, source, schema=schema).items():
        typer.echo(f"{target_schema(table, release, schema)}.{table}: {n} rows")
