"""Command line of the MIMIC-III / MIMIC-IV mortality-risk pipeline.

The app and its commands live in ``pipeline/cli/`` (a module per command, each a thin typed wrapper over a
library function; ``pipeline.cli.main`` registers them). Heavy libraries (torch, mlflow, duckdb, pandas) are
imported inside the commands so that ``--help`` answers at once. A library error prints as one line (exit
code 2); any other exception is a bug or an environment problem: one line too, its traceback in a log file
(exit code 3). Settings files: ``--config FILE.toml``, ``--set KEY=VALUE``, ``--print-config``
(``pipeline.cli.settings``). Run it as ``python cli.py`` or, installed, as ``mimic-risk``.
"""

from __future__ import annotations

from pipeline.cli.main import ALIASES, LOG_DIR_ENV, app, config_options, main

__all__ = ["ALIASES", "LOG_DIR_ENV", "app", "config_options", "main"]  # ALIASES, config_options: render_mlproject.py's

if __name__ == "__main__":
    main()
