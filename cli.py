"""Command line of the MIMIC-III mortality-risk pipeline.

Each command is a thin typed wrapper over a library function in `pipeline/`; heavy
libraries (torch, mlflow, duckdb, pandas) are imported inside the commands so that
`python cli.py --help` answers at once.
"""

from __future__ import annotations

import json
import logging
import sys
from enum import Enum
from pathlib import Path
from typing import Optional

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__.splitlines()[0])


class SplitChoice(str, Enum):
    random = "random"
    era = "era"


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def _fail(message: str) -> None:
    typer.secho(f"error: {message}", err=True, fg=typer.colors.RED)
    raise typer.Exit(code=2)


@app.command()
def synth(
    out: Path = typer.Option(..., help="Directory for the synthetic MIMIC-III tables (TABLE.csv.gz)."),
    patients: int = typer.Option(2000, min=1, help="Number of patients."),
    seed: int = typer.Option(0, help="Random seed."),
    density: float = typer.Option(1.0, min=0.001, help="Event density scale (1.0 = about 5,400 CHARTEVENTS rows per ICU stay)."),
    verbose: bool = typer.Option(False, "--verbose", "-v"),
) -> None:
    """Generate a synthetic MIMIC-III (full-release layout) with a known true risk per admission."""
    _setup_logging(verbose)
    from pipeline import synth as synth_mod

    cfg = synth_mod.SynthConfig(density=density)
    summary = synth_mod.generate(out, patients=patients, seed=seed, config=cfg)
    typer.echo(summary.describe() if hasattr(summary, "describe") else str(summary))


@app.command()
def extract(
    source: str = typer.Option(..., help="MIMIC-III CSV directory, or a postgresql:// DSN."),
    out: Path = typer.Option(..., help="Output directory for the features."),
    schema: str = typer.Option("mimiciii", help="PostgreSQL schema holding the MIMIC-III tables."),
    prediction_hours: float = typer.Option(24.0, help="Prediction time, hours after ADMITTIME."),
    lookback_days: float = typer.Option(30.0, help="History used before the prediction time, in days."),
    hourly_hours: Optional[float] = typer.Option(None, help="Hours before the prediction time bagged hourly (default: prediction hours); older history is bagged daily."),
    min_patients: int = typer.Option(5, help="Tokens seen in fewer training patients become out-of-vocabulary."),
    bins: int = typer.Option(5, help="Quantile bins per numeric item."),
    split: SplitChoice = typer.Option(SplitChoice.random, help="random: 80/10/10 by patient; era: carevue train/val, metavision test."),
    split_seed: int = typer.Option(0, help="Seed of the patient split."),
    memory_limit: str = typer.Option("4GB", help="DuckDB memory limit."),
    verbose: bool = typer.Option(False, "--verbose", "-v"),
) -> None:
    """Extract de-identified, time-bagged token sequences (one Parquet file per split)."""
    _setup_logging(verbose)
    from pipeline.extract import ExtractConfig, SplitMode, extract as run_extract
    from pipeline.sources import SourceError

    cfg = ExtractConfig(
        prediction_hours=prediction_hours,
        lookback_days=lookback_days,
        hourly_hours=hourly_hours,
        min_patients=min_patients,
        n_bins=bins,
        split=SplitMode(split.value),
        split_seed=split_seed,
        memory_limit=memory_limit,
    )
    try:
        result = run_extract(source, out, cfg, schema=schema)
    except SourceError as exc:
        _fail(str(exc))
    m = result.manifest
    typer.echo(f"features written to {result.out_dir} (link file: {result.link_file})")
    for name, s in m["splits"].items():
        typer.echo(f"  {name:6s} admissions={s['admissions']:6d} positives={s['positives']:5d} label_rate={s['label_rate']}")
    typer.echo(json.dumps({"cohort": m["cohort"], "vocab": m["vocab"]}))


@app.command("load-postgres")
def load_postgres(
    source: Path = typer.Option(..., help="MIMIC-III CSV directory (TABLE.csv or TABLE.csv.gz)."),
    dsn: str = typer.Option(..., envvar="MIMIC_PG_DSN", help="PostgreSQL DSN (password better in PGPASSWORD or ~/.pgpass)."),
    schema: str = typer.Option("mimiciii", help="Target schema (mimic-code layout)."),
    verbose: bool = typer.Option(False, "--verbose", "-v"),
) -> None:
    """Load a MIMIC-III CSV directory into PostgreSQL with mimic-code's table definitions."""
    _setup_logging(verbose)
    from pipeline.pgload import PgLoadError, load_mimic_csv

    try:
        counts = load_mimic_csv(dsn, source, schema=schema)
    except PgLoadError as exc:
        _fail(str(exc))
    for table, n in counts.items():
        typer.echo(f"{schema}.{table}: {n} rows")


if __name__ == "__main__":
    app()
