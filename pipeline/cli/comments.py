"""Each field's comment, read from the source: the option's help, so a setting is described once, where
it is declared (``field_help``; the library's configs are plain dataclasses with one comment per field)."""

from __future__ import annotations

import functools
import inspect
import io
import tokenize
from dataclasses import fields


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
