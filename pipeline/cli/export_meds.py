"""``cli.py export-meds``: a MIMIC-III or MIMIC-IV source written as a MEDS 0.4 dataset (``data.meds.export_meds``);
its options are ``ExportConfig``'s fields (a settings file too). The export holds subject ids and dates: it is the
data owner's (docs/meds.md)."""

from __future__ import annotations

from pathlib import Path

import typer

from pipeline.cli.app import command, setup_logging
from pipeline.cli.options import at_least, with_config_options
from pipeline.data.meds.config import ExportConfig


@command(short_help="Export MIMIC-III or MIMIC-IV as a MEDS dataset (the data owner's: ids and dates).")
@with_config_options(ExportConfig, limits={
    **at_least(1, "subjects_per_shard", "threads", "row_group_rows"),
    **dict.fromkeys(("train_fraction", "val_fraction"), {"min": 0.0, "max": 1.0})})
def export_meds(
    source: str = typer.Option(..., help="MIMIC-III or MIMIC-IV CSV directory (MIMIC-IV: hosp/ and icu/), a stage "
                                          "written by `stage`, or a postgresql:// DSN (as `extract` takes them)."),
    out: Path = typer.Option(..., help="The MEDS dataset's directory (data/, metadata/; a new or empty one, or an "
                                       "earlier export, which is replaced)."),
    schema: str = typer.Option("mimiciii", help="PostgreSQL schema holding the MIMIC-III tables; when it has none, "
                                                "MIMIC-IV's mimiciv_hosp and mimiciv_icu. For MIMIC-IV: a prefix P "
                                                "(P_hosp, P_icu) or 'HOSP,ICU'."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log each stage."),
    settings: dict = None,
) -> None:
    """Write the MIMIC source as a MEDS 0.4 dataset: events sharded by subject and sorted by time, codes as
    MIMIC_IV_MEDS writes them, code metadata, subject splits, dataset.json; unusable rows quarantined and counted."""
    setup_logging(verbose)
    from pipeline.data.meds.export import export_meds as run_export

    result = run_export(source, out, ExportConfig(**settings[ExportConfig]), schema=schema)
    typer.echo(result.summary())
    for name, t in result.manifest["tables"].items():
        typer.echo(f"  {name:20s} rows_read={t['rows_read']:12,d} exported={t['exported']:12,d} "
                   f"quarantined={t['quarantined']:9,d}")
    typer.echo(f"extract it with: cli.py extract --source {result.out} --out FEATURES_DIR")
