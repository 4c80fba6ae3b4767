"""Helpers for the ``@dataclass`` configs of every stage (torch-free).

``config_dict``: a config as JSON-able values (str enums -> their value). Every config validates itself
in ``__post_init__``; its errors name the fields as the class writes them (``max_steps must be >= 1, got
0``) and record which (``invalid``, ``check_at_least``, ``check_choice``): the command line
(``pipeline.cli``) says each as the user typed it. Each field's comment is its meaning (the CLI's help).
"""

from __future__ import annotations

from dataclasses import asdict
from enum import Enum

from pipeline.core.errors import ConfigError, PipelineError


def config_dict(cfg) -> dict:
    """JSON-able dict of a dataclass config: str enums -> their values, in nested dicts too."""

    def plain(v):
        if isinstance(v, Enum):
            return v.value
        return {k: plain(x) for k, x in v.items()} if isinstance(v, dict) else v

    return {k: plain(v) for k, v in asdict(cfg).items()}


def invalid(cfg, message: str, *names: str, error: type[PipelineError] = ConfigError) -> PipelineError:
    """``error(message)`` of a config's own check: ``message`` names fields ``names`` of ``cfg`` (a config class or
    instance) as they are written in the class, and the error records which (``config``, ``fields``), so the
    command line can say each as the user typed it (``--max-steps``, a settings file's key)."""
    exc = error(message)
    exc.config, exc.fields = cfg if isinstance(cfg, type) else type(cfg), names
    return exc


def check_at_least(cfg, low: float, names: tuple[str, ...], error: type[PipelineError] = ConfigError) -> None:
    """Raise ``error`` naming the first field in ``names`` that is set (not None) and below ``low``."""
    for name in names:
        value = getattr(cfg, name)
        if value is not None and value < low:
            raise invalid(cfg, f"{name} must be >= {low}, got {value}", name, error=error)


def check_choice(cfg, name: str, enum: type[Enum], error: type[PipelineError] = ConfigError) -> None:
    """Set field ``name`` to its ``enum`` member, or raise naming the field and the choices."""
    value = getattr(cfg, name)
    try:
        setattr(cfg, name, enum(value))
    except ValueError:
        raise invalid(cfg, f"{name} must be one of {[e.value for e in enum]}, got "
                           f"{getattr(value, 'value', value)!r}", name, error=error) from None
