"""Helpers for the ``@dataclass`` configs of every stage (torch-free).

``config_dict``: a config as JSON-able values (str enums -> their value). ``field_help``: the
one-line comment written after each field, which the CLI shows as the option's help and the
docs as its meaning, so a setting is described once, where it is declared.
"""

from __future__ import annotations

import functools
import inspect
import io
import tokenize
from dataclasses import asdict, fields
from enum import Enum


def config_dict(cfg) -> dict:
    """JSON-able dict of a dataclass config: str enums -> their values, in nested dicts too."""

    def plain(v):
        if isinstance(v, Enum):
            return v.value
        return {k: plain(x) for k, x in v.items()} if isinstance(v, dict) else v

    return {k: plain(v) for k, v in asdict(cfg).items()}


@functools.cache
def field_help(cls: type) -> dict[str, str]:
    """``{field: comment}`` of a dataclass, from the ``# comment`` after each field in its source."""
    names = {f.name for f in fields(cls)}
    out: dict[str, str] = {}
    current = None
    for tok in tokenize.generate_tokens(io.StringIO(inspect.getsource(cls)).readline):
        if tok.type == tokenize.NAME and tok.start[1] == 4 and tok.string in names and current is None:
            current = tok.string  # a field name at class-body indentation starts a declaration
        elif tok.type == tokenize.COMMENT and current is not None:
            out[current] = tok.string.lstrip("#").strip()
        elif tok.type == tokenize.NEWLINE:
            current = None
    return out
