"""The typer app of the command line, its ``vision`` group, and what every command shares.

``command`` registers a command whose library errors (``PipelineError``) print as one line (exit
code 2), a config error naming each field as the user gave it (``names.spell``: ``--max-steps``, a
settings file's key), and any other exception as one line pointing to a log file with its traceback
(exit code 3). The commands live in a module each (``pipeline.cli.main`` imports them all).
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import typing
from pathlib import Path
from typing import Callable

import typer

from pipeline.cli import options
from pipeline.cli.names import spell
from pipeline.core.errors import PipelineError

HELP = "Command line of the MIMIC-III / MIMIC-IV mortality-risk pipeline."  # the app's help line
LOG_DIR_ENV = "PIPELINE_LOG_DIR"  # where an unexpected error's traceback goes (default runs/logs)
CONTEXT = {"max_content_width": 100}

app = typer.Typer(cls=options.WholeWordsGroup, add_completion=False, no_args_is_help=True, help=HELP,
                  rich_markup_mode=None, context_settings=CONTEXT)
vision_app = typer.Typer(cls=options.WholeWordsGroup, add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                         help="Image benchmarks (issue 14): rank-1 WRN / ResNet-50 on digits, CIFAR-10/100 and "
                              "corruptions, tracked in MLflow.", context_settings=CONTEXT)
app.add_typer(vision_app, name="vision", short_help="Image benchmarks: train and evaluate WRN / ResNet-50.")


def command(*args, on: typer.Typer | None = None, **kwargs) -> Callable:
    """``app.command`` (``on``: a sub-app's) whose function reports a ``PipelineError`` as one line
    ``error: ...`` (exit 2) and any other exception as one line pointing to a log file with its
    traceback (exit 3)."""

    def register(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def run(*a, **kw):
            try:
                return fn(*a, **kw)
            except PipelineError as exc:
                ctx = options.get_current_context(silent=True)
                fail(spell(exc, ctx.meta.get(options.TYPED, {}) if ctx else {}))
            except (typer.Exit, typer.Abort, options.ClickException):
                raise
            except KeyboardInterrupt:
                typer.secho("interrupted", err=True, fg=typer.colors.RED)
                raise typer.Exit(code=130) from None
            except Exception as exc:  # a bug or an environment problem: never a raw traceback on the screen
                unexpected(fn.__name__, exc)

        return (on or app).command(*args, cls=options.WholeWordsCommand, **kwargs)(run)

    return register


def fail(message: str) -> typing.NoReturn:
    """``error: message`` in red on stderr; exit code 2."""
    typer.secho(f"error: {message}", err=True, fg=typer.colors.RED)
    raise typer.Exit(code=2)


def unexpected(name: str, exc: BaseException) -> typing.NoReturn:
    """One line naming the exception and the log file that holds its traceback; exit code 3."""
    import tempfile
    import traceback

    first = (str(exc).strip().splitlines() or [""])[0][:200]
    try:
        folder = Path(os.environ.get(LOG_DIR_ENV) or Path("runs") / "logs")
        folder.mkdir(parents=True, exist_ok=True)
        fd, path = tempfile.mkstemp(prefix=f"{name}-error-", suffix=".log", dir=folder)
        with os.fdopen(fd, "w") as fh:
            fh.write(f"cli.py {' '.join(sys.argv[1:2])}: unexpected {type(exc).__name__}\n")
            traceback.print_exception(exc, file=fh)
        where = f"the traceback is in {path}"
    except OSError as err:
        where = f"the traceback could not be written ({type(err).__name__}); run with PYTHONFAULTHANDLER or a debugger"
    typer.secho(f"error: unexpected {type(exc).__name__} in `{name.replace('_', '-')}`: {first} ({where})",
                err=True, fg=typer.colors.RED)
    raise typer.Exit(code=3)


def setup_logging(verbose: bool) -> None:
    """Log lines on stderr: INFO with ``--verbose``, else WARNING."""
    level = logging.INFO if verbose else logging.WARNING
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    for handler in logging.getLogger().handlers:
        handler.setLevel(level)  # a logger lowered for a status line (progress.LogStatus) does not print more
