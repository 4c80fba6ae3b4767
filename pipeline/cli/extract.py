"""``cli.py extract``: de-identified features from MIMIC-III or MIMIC-IV (``data.mimic.extraction.extract``), or from a
MEDS dataset (``data.meds.extract_meds``, through ``pipeline.cli.meds``); its options are ``ExtractConfig``'s fields
(a settings file too)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from pipeline.cli.app import command, setup_logging
from pipeline.cli.options import at_least, with_config_options
from pipeline.data.mimic.extraction.config import ExtractConfig


@command(short_help="Extract de-identified features from MIMIC-III, MIMIC-IV or a MEDS dataset.",
         on_interrupt="nothing was written to --out (a previous extraction there is as it was); run the command again")
@with_config_options(ExtractConfig, limits={
    **at_least(1, "scan_workers", "threads", "n_bins", "max_text_values", "text_max_len"),
    **dict.fromkeys(("train_fraction", "val_fraction"), {"min": 0.0, "max": 1.0})})
def extract(
    source: str = typer.Option(..., help="MIMIC-III or MIMIC-IV CSV directory (MIMIC-IV: hosp/ and icu/), a stage "
                                          "written by `stage` (recommended for real data), a postgresql:// DSN, or "
                                          "a MEDS 0.4 dataset (a directory with data/ and metadata/)."),
    out: Path = typer.Option(..., help="Output directory for the features."),
    schema: str = typer.Option("mimiciii", help="PostgreSQL schema holding the MIMIC-III tables; when it has none, "
                                                "MIMIC-IV's mimiciv_hosp and mimiciv_icu. For MIMIC-IV: a prefix P "
                                                "(P_hosp, P_icu) or 'HOSP,ICU'."),
    labels: Path | None = typer.Option(
        None, help="A MEDS --source: MEDS label files of a binary task (a .parquet file or a directory of them: ACES's "
                   "output, MEDS-DEV's)."),
    task: Path | None = typer.Option(
        None, help="A MEDS --source: an ACES task config (YAML) run by es-aces, or meds-dev:TASK, a MEDS-DEV task by "
                   "name (e.g. meds-dev:mortality/in_icu/first_24h) with the predicates of the dataset that "
                   "metadata/dataset.json names. Neither --labels nor --task: the shipped config that fits the "
                   "dataset's metadata/dataset.json."),
    predicates: Path | None = typer.Option(
        None, help="With --task: a predicates file (YAML) whose predicates replace the task config's (a MEDS-DEV "
                   "task: instead of the package's for the dataset)."),
    outcome: str | None = typer.Option(
        None, help="A MEDS --source: what a positive label means, in words: NAME (e.g. readmission) or "
                   "'SINGULAR|PLURAL' (default: the task's own words, else the config's or the labels' file name)."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log each stage's time."),
    settings: dict = None,
) -> None:
    """Extract de-identified, time-bagged token sequences (one Parquet file per split)."""
    setup_logging(verbose)
    from pipeline.core.errors import ConfigError
    from pipeline.data.meds.layout import is_meds

    if is_meds(source):
        from pipeline.cli import meds
        from pipeline.data.meds.flow import extract_meds

        result = extract_meds(source, out, meds.meds_config(settings[ExtractConfig]), labels=labels, task=task,
                              predicates=predicates, outcome=outcome)
        meds.report(result)
        return
    given = [name for name, value in (("labels", labels), ("task", task), ("predicates", predicates),
                                      ("outcome", outcome)) if value is not None]
    if given:
        raise ConfigError(f"--{given[0]} applies to a MEDS --source (a directory with data/ and metadata/); {source} "
                          "is not one")
    from pipeline.core.progress import LogStatus
    from pipeline.data.mimic.extraction import extract as run_extract
    from pipeline.data.mimic.extraction.summary import quarantine_lines

    cfg = ExtractConfig(**settings[ExtractConfig])
    with LogStatus("extract", "pipeline.data.mimic.extraction"):  # on a terminal: the stage that just finished
        result = run_extract(source, out, cfg, schema=schema)
    m = result.manifest
    typer.echo(f"features written to {result.out_dir} (link file: {result.link_file}); release {m['release']}")
    typer.echo(f"task: {m['task']['outcome']}, predicted {m['task']['prediction_time']}")
    for name, s in m["splits"].items():
        typer.echo(f"  {name:6s} admissions={s['admissions']:6d} positives={s['positives']:5d} "
                   f"label_rate={s['label_rate']}")
    typer.echo(json.dumps({"cohort": m["cohort"], "vocab": m["vocab"]}))
    for line in quarantine_lines(m, result.out_dir):
        typer.echo(line)
