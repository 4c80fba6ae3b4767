"""``cli.py compare``: evaluated runs compared, mean ± sd over seeds (``reports.compare``, ``compare_vision``)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from pipeline.cli.app import command, setup_logging

EXTRA_ARGS = {"allow_extra_args": True}  # bare words after the options reach the command (ctx.args)


@command(context_settings=EXTRA_ARGS, options_metavar="[OPTIONS] [RUN_ID]...",
         short_help="Compare evaluated runs: mean ± sd over seeds.")
def compare(
    ctx: typer.Context,
    experiment: Optional[list[str]] = typer.Option(None, help="MLflow experiment whose evaluated runs (of every "
                                                              "kind) are compared; repeatable (default: "
                                                              "mimic-mortality, laplace and vision, those present)."),
    runs: Optional[list[str]] = typer.Option(None, "--runs", metavar="<run id>", help="Run ids to compare "
                                             "(repeatable; instead of --experiment); bare run ids after the options "
                                             "count too."),
    out: Path = typer.Option(Path("runs/compare"), help="Directory for compare.md and compare.csv."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log which runs are read."),
) -> None:
    """Models x (val, test) x (NLL, AUC-PR, ECE): mean ± sd over seeds, with the true-risk reference.

    RUN_ID...: run ids to compare (as --runs); none: every evaluated run of the experiments. Runs
    on different feature sets (told by their content, never a folder's name) are compared within
    their own feature set: a table section headed by its release and source, and one true-risk
    row each. Vision runs get their own section per dataset: methods x (clean, severities 1..5) x
    (NLL, accuracy, ECE) (vision.md, vision.csv, vision_<dataset>.png); without --experiment and
    run ids, the mimic-mortality, laplace and vision experiments.
    """
    setup_logging(verbose)
    from pipeline.cli.options import refuse_words, spread
    from pipeline.reports.compare import to_markdown
    from pipeline.reports.compare_vision import compare_all, vision_markdown
    from pipeline.runs.store import RUN_ID

    refuse_words(ctx.args, lambda w: w if RUN_ID.match(w) else None, hint="; run ids are 32 hex digits")
    result = compare_all(experiment, spread(runs, True, ctx.args, lambda w: w) or None, out)
    if result.mortality:
        typer.echo(to_markdown(result.mortality))
    if result.vision:
        typer.echo(vision_markdown(result.vision))
    typer.echo("tables: " + ", ".join(str(f) for f in result.files))
