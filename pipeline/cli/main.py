"""The whole command line: the app with every command registered (each module's ``@command``), and ``main``,
the entry point of ``cli.py`` and of the installed ``mimic-risk`` script."""

from __future__ import annotations

from pipeline.cli import (  # noqa: F401  (imported for their commands)
    benchmark_models,
    compare,
    evaluate,
    extract,
    laplace,
    load_postgres,
    score,
    serve,
    stage,
    synth,
    train,
    vision,
)
from pipeline.cli.app import LOG_DIR_ENV, app
from pipeline.cli.names import ALIASES, config_options

__all__ = ["ALIASES", "LOG_DIR_ENV", "app", "config_options", "main"]


def main() -> None:
    """The console script's entry point (``mimic-risk``, pyproject's [project.scripts]): the app."""
    app()
