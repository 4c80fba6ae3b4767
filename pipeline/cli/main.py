"""The whole command line: the app with every command registered (each module's ``@command``, in the order
``--help`` lists them), and ``main``, the entry point of ``cli.py`` and of the installed ``mimic-risk`` script."""

from __future__ import annotations

import importlib

from pipeline.cli.app import LOG_DIR_ENV, app
from pipeline.cli.names import ALIASES, config_options

__all__ = ["ALIASES", "COMMANDS", "LOG_DIR_ENV", "app", "config_options", "main"]

# The command modules of pipeline/cli/, in the order `cli.py --help` lists their commands (the stages' order).
COMMANDS = ("synth", "extract", "stage", "export_meds", "load_postgres", "train", "evaluate", "laplace", "compare",
            "score", "recertify", "monitor", "serve", "benchmark_models", "vision")
for _name in COMMANDS:
    importlib.import_module(f"pipeline.cli.{_name}")  # registers its commands on the app


def main() -> None:
    """The console script's entry point (``mimic-risk``, pyproject's [project.scripts]): the app."""
    app()
