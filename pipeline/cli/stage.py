"""``cli.py stage``: a MIMIC CSV directory converted to Parquet once (``data.mimic.sources.stage.stage_csv``)."""

from __future__ import annotations

from pathlib import Path

import typer

from pipeline.cli.app import command, setup_logging
from pipeline.cli.options import at_least, with_config_options
from pipeline.data.mimic.sources.stage import StageConfig
from pipeline.data.mimic.sources.tables import Release


@command(short_help="Stage a MIMIC CSV directory as Parquet: re-extract in seconds.",
         on_interrupt="nothing was written to --out (a previous stage there is as it was); run the command again")
@with_config_options(StageConfig, limits=at_least(1, "row_group_rows", "workers", "threads"))
def stage(
    source: Path = typer.Option(..., help="MIMIC-III or MIMIC-IV CSV directory (TABLE.csv or TABLE.csv.gz; MIMIC-IV: "
                                           "hosp/ and icu/)."),
    out: Path = typer.Option(..., help="Stage directory (Parquet per table, stage.json); give it to `extract "
                                       "--source`."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log each table's conversion."),
    settings: dict = None,
) -> None:
    """Convert each table the extraction reads, typed as it types it, to Parquet once (with a manifest of the
    source files' sizes and checksums); `extract --source STAGE_DIR` then gives the same features, faster."""
    setup_logging(verbose)
    from pipeline.core.progress import Progress
    from pipeline.data.mimic.extraction.summary import stage_lines
    from pipeline.data.mimic.sources.stage import stage_csv

    with Progress("stage: per mille of the source bytes", 1000, plain=False) as bar:  # a bar on a terminal only
        m = stage_csv(source, out, StageConfig(**settings[StageConfig]),
                      progress=lambda done, total, status: bar.update(1000 * done // total, status))
    typer.echo(f"{Release(m['release']).title} stage written to {out}: {len(m['tables'])} tables")
    for line in stage_lines(m, source):
        typer.echo(line)
