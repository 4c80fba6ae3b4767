"""The one base of every error the library raises on bad input or a failed run.

Each stage names its own subclass (``SourceError``, ``FeatureError``, ``EvalError`` ...), so a
caller can catch one stage's errors or all of them; the CLI catches ``PipelineError`` once and
prints its message as one line. Messages name the file, table, column or row at fault and speak
of the library's arguments (``data``, ``samples``); a config's own checks name its fields
(``max_steps must be >= 1, got 0``) and say which (``configs.invalid``: ``config``, ``fields``), so the
command line can spell each as the user typed it (``--max-steps``, a settings file's key).
"""

from __future__ import annotations


class PipelineError(Exception):
    """Bad input, configuration or state; the message is one line a user can act on."""

    config: type | None = None  # a config's own check: the config class whose fields the message names
    fields: tuple[str, ...] = ()  # those fields, each named in the message as written in the class


class ConfigError(PipelineError, ValueError):
    """An invalid setting of a config dataclass (the message names the field)."""


class TrainError(PipelineError, ValueError):
    """Training inputs or settings that cannot work (missing features, a run directory already used, a
    checkpoint to resume that does not fit)."""
