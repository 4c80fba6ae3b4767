"""The typer app of the command line, its ``vision`` group, and what every command shares.

``command`` registers a command under the one error and interruption policy of the command line:

- a library error (``PipelineError``): one line ``error: ...``, exit code 2, naming what the user typed: a
  config field or a library argument said as the user gave it (``names.spell``: ``--max-steps``, ``--out``, a
  settings file's key), or the file, table, column or row at fault;
- Ctrl-C (SIGINT), whatever the library or a dependency made of it (DuckDB's "query interrupted"): one line
  ``interrupted``, and how to resume where the command can (``core.errors.resumable``, or the command's own
  ``on_interrupt`` words), exit code 130; outputs are atomic, so nothing half-written stays, and an MLflow run
  the command started ends KILLED (``runs.tracking``);
- a closed stdout (``cli.py compare | head -1``): no message and no log, exit code 1 (typer's, as for
  ``--help``);
- any other exception (a bug or an environment problem): one line pointing to a log file with its traceback,
  exit code 3.

The commands live in a module each (``pipeline.cli.main`` imports them all).
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import signal
import sys
import threading
import typing
from pathlib import Path
from typing import Callable

import typer

from pipeline.cli import options
from pipeline.cli.names import spell
from pipeline.core.errors import PipelineError
from pipeline.core.progress import UserFormatter

HELP = ("Command line of the clinical risk pipeline: MIMIC-III / MIMIC-IV in-hospital mortality, or any binary task of "
        "a MEDS dataset.")  # the app's help line
LOG_DIR_ENV = "PIPELINE_LOG_DIR"  # where an unexpected error's traceback goes (default runs/logs)
CONTEXT = {"max_content_width": 100}

app = typer.Typer(cls=options.WholeWordsGroup, add_completion=False, no_args_is_help=True, help=HELP,
                  rich_markup_mode=None, context_settings=CONTEXT)
vision_app = typer.Typer(cls=options.WholeWordsGroup, add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                         help="Image benchmarks (issue 14): rank-1 WRN / ResNet-50 on digits, CIFAR-10/100 and "
                              "corruptions, tracked in MLflow.", context_settings=CONTEXT)
app.add_typer(vision_app, name="vision", short_help="Image benchmarks: train and evaluate WRN / ResNet-50.")


def command(*args, on: typer.Typer | None = None, on_interrupt: str | None = None, **kwargs) -> Callable:
    """``app.command`` (``on``: a sub-app's) whose function runs under the policy of the module docstring;
    ``on_interrupt``: what the ``interrupted`` line adds when the interrupted call says nothing itself."""

    def register(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def run(*a, **kw):
            with Interrupts() as caught:
                try:
                    result = fn(*a, **kw)
                    sys.stdout.flush()  # a closed stdout shows here, inside the policy, not at exit
                    return result
                except (typer.Exit, typer.Abort, options.ClickException):
                    raise
                except KeyboardInterrupt as exc:
                    interrupted(exc, on_interrupt)
                except Exception as exc:  # noqa: BLE001 - the policy above, in its order
                    if closed_stdout(exc):
                        raise BrokenPipeError(errno.EPIPE, "stdout closed") from None  # typer: quiet, exit 1
                    if caught.seen:  # Ctrl-C turned into another error by a library (DuckDB, MLflow)
                        interrupted(exc, on_interrupt)
                    if isinstance(exc, PipelineError):
                        ctx = options.get_current_context(silent=True)
                        fail(spell(exc, ctx.meta.get(options.TYPED, {}) if ctx else {}))
                    unexpected(fn.__name__, exc)  # a bug or an environment problem: never a raw traceback

        return (on or app).command(*args, cls=options.WholeWordsCommand, **kwargs)(run)

    return register


class Interrupts:
    """While active (in the main thread): SIGINT is noted (``seen``) before it raises ``KeyboardInterrupt`` as
    Python's own handler does, so an error a library makes of it is still known as an interruption."""

    def __init__(self) -> None:
        self.seen = False
        self._previous = None

    def _handler(self, signum, frame) -> None:
        self.seen = True
        raise KeyboardInterrupt

    def __enter__(self) -> "Interrupts":
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handler)
        return self

    def __exit__(self, *exc) -> bool:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
        return False


def closed_stdout(exc: BaseException) -> bool:
    """Whether ``exc`` is a write to a closed pipe (stdout's reader went away)."""
    return isinstance(exc, BrokenPipeError) or (isinstance(exc, OSError) and exc.errno == errno.EPIPE)


def interrupted(exc: BaseException, on_interrupt: str | None = None) -> typing.NoReturn:
    """``interrupted`` and how to resume (``exc.resume``, its library arguments spelled as options, else
    ``on_interrupt``) in red on stderr; exit code 130."""
    how = getattr(exc, "resume", None)
    if how:
        ctx = options.get_current_context(silent=True)
        said = PipelineError(how)
        said.arguments = tuple(getattr(exc, "arguments", ()))
        how = spell(said, ctx.meta.get(options.TYPED, {}) if ctx else {})
    how = how or on_interrupt
    typer.secho("interrupted" + (f"; {how}" if how else ""), err=True, fg=typer.colors.RED)
    raise typer.Exit(code=130)


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
    """Log lines on stderr (``UserFormatter``): INFO with ``--verbose``, else WARNING."""
    level = logging.INFO if verbose else logging.WARNING
    logging.basicConfig(level=level, stream=sys.stderr)
    for handler in logging.getLogger().handlers:
        handler.setFormatter(UserFormatter())
        handler.setLevel(level)  # a logger lowered for a status line (progress.LogStatus) does not print more
