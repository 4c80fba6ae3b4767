"""The one base of every error the library raises on bad input or a failed run.

Each stage names its own subclass (``SourceError``, ``FeatureError``, ``EvalError`` ...), so a
caller can catch one stage's errors or all of them; the CLI catches ``PipelineError`` once and
prints its message as one line. Messages name the file, table, column or row at fault and speak
of the library's arguments (``data``, ``samples``); a config's own checks name the setting as the
user types it (``--max-steps``, ``configs.option``).
"""

from __future__ import annotations


class PipelineError(Exception):
    """Bad input, configuration or state; the message is one line a user can act on."""


class ConfigError(PipelineError, ValueError):
    """An invalid setting of a config dataclass (the message names the setting)."""


class TrainError(PipelineError, ValueError):
    """Training inputs or settings that cannot work (missing features, a run directory already used, a
    checkpoint to resume that does not fit)."""
