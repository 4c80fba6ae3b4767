"""Helpers for the ``@dataclass`` configs of every stage (torch-free).

``config_dict``: a config as JSON-able values (str enums -> their value). ``field_help``: the
comment written after each field (going on over deeper comment-only lines below it), which the
CLI shows as the option's help and the docs as its meaning, so a setting is described once, where
it is declared. ``option``: a field as the user types it (``--max-steps``), which every config's
``__post_init__`` errors name (``check_at_least``, ``check_choice``).
"""

from __future__ import annotations

import functools
import inspect
import io
import tokenize
from dataclasses import asdict, fields
from enum import Enum

from pipeline.core.errors import ConfigError


def config_dict(cfg) -> dict:
    """JSON-able dict of a dataclass config: str enums -> their values, in nested dicts too."""

    def plain(v):
        if isinstance(v, Enum):
            return v.value
        return {k: plain(x) for k, x in v.items()} if isinstance(v, dict) else v

    return {k: plain(v) for k, v in asdict(cfg).items()}


@functools.cache
def field_help(cls: type) -> dict[str, str]:
    """``{field: comment}`` of a dataclass, from the ``# comment`` after each field in its source; a
    comment goes on over the comment-only lines right below it that are indented deeper than the field
    (joined with one space), so a long help wraps within the line limit."""
    names = {f.name for f in fields(cls)}
    out: dict[str, str] = {}
    current = last = None  # the field being declared; the field whose comment may go on
    for tok in tokenize.generate_tokens(io.StringIO(inspect.getsource(cls)).readline):
        if tok.type == tokenize.NAME and tok.start[1] == 4 and tok.string in names and current is None:
            current = tok.string  # a field name at class-body indentation starts a declaration
        elif tok.type == tokenize.COMMENT and current is not None:
            out[current] = tok.string.lstrip("#").strip()
        elif tok.type == tokenize.COMMENT and last in out and tok.start[1] > 4:
            out[last] += " " + tok.string.lstrip("#").strip()  # a comment-only line below the field, deeper
        elif tok.type == tokenize.NEWLINE:
            current, last = None, current
        elif tok.type != tokenize.NL or not tok.line.strip().startswith("#"):
            last = None  # code, a blank line or a shallower comment ends the continuation
    return out


def option(cls: type, name: str) -> str:
    """How a user types config field ``name`` of ``cls`` (a class or an instance): ``max_steps`` ->
    ``--max-steps``; a field whose option has a name of its own (``OPTION_NAMES``, e.g. ``n_bins``:
    ``bins``) -> that name; a field no option offers (in ``NOT_CLI``, or not in ``CLI_FIELDS`` where a config lists
    those) -> its own name. Config errors name settings so, as the user typed them."""
    cls = cls if isinstance(cls, type) else type(cls)
    offered = getattr(cls, "CLI_FIELDS", None)
    if name in getattr(cls, "NOT_CLI", ()) or (offered is not None and name not in offered):
        return name  # set in Python only: the argument's own name
    return "--" + getattr(cls, "OPTION_NAMES", {}).get(name, name).replace("_", "-")


def check_at_least(cfg, low: float, names: tuple[str, ...], error: type[Exception] | None = None) -> None:
    """Raise ``error`` (default ``ConfigError``) naming the option of the first field in ``names`` that
    is set (not None) and below ``low``."""
    for name in names:
        value = getattr(cfg, name)
        if value is not None and value < low:
            raise (error or ConfigError)(f"{option(cfg, name)} must be >= {low}, got {value}")


def check_choice(cfg, name: str, enum: type[Enum], error: type[Exception] | None = None) -> None:
    """Set field ``name`` to its ``enum`` member, or raise naming the option and the choices."""
    value = getattr(cfg, name)
    try:
        setattr(cfg, name, enum(value))
    except ValueError:
        raise (error or ConfigError)(f"{option(cfg, name)} must be one of {[e.value for e in enum]}, got "
                                     f"{getattr(value, 'value', value)!r}") from None
