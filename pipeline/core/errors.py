"""The one base of every error the library raises on bad input or a failed run.

Each stage names its own subclass (``SourceError``, ``FeatureError``, ``EvalError`` ...), so a
caller can catch one stage's errors or all of them; the CLI catches ``PipelineError`` once and
prints its message as one line. Messages name the file, table, column or row at fault and speak
of the library's arguments (``data``, ``samples``); a config's own checks name its fields
(``max_steps must be >= 1, got 0``) and say which (``configs.invalid``: ``config``, ``fields``), and an error
about a function's arguments says which it names (``naming``: ``arguments``), so the command line can spell
each as the user typed it (``--max-steps``, ``--out``, a settings file's key).
"""

from __future__ import annotations


class PipelineError(Exception):
    """Bad input, configuration or state; the message is one line a user can act on."""

    config: type | None = None  # a config's own check: the config class whose fields the message names
    fields: tuple[str, ...] = ()  # those fields, each named in the message as written in the class
    arguments: tuple[str, ...] = ()  # the library function's arguments the message names (``out_dir``, ``as_of``)


class ConfigError(PipelineError, ValueError):
    """An invalid setting of a config dataclass (the message names the field)."""


class TrainError(PipelineError, ValueError):
    """Training inputs or settings that cannot work (missing features, a run directory already used, a
    checkpoint to resume that does not fit)."""


def naming(exc: PipelineError, *arguments: str) -> PipelineError:
    """``exc``, recording that its message names the library function's ``arguments`` as they are written in
    its signature (``as_of``, ``out_dir``): the command line says each as the user typed it (``--as-of``)."""
    exc.arguments = arguments
    return exc


def resumable(exc: BaseException, how: str, *arguments: str) -> BaseException:
    """``exc`` (an interruption) with how to resume what it stopped (``resume``: words that name the library
    function's ``arguments`` in backquotes, spelled by the command line as its options)."""
    exc.resume, exc.arguments = how, arguments
    return exc
