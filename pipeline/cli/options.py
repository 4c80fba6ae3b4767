"""A config dataclass's fields as command-line options (typer), and what a command line hands back.

``with_config_options`` adds one option per field of one or more config dataclasses to a typer
command, its help the comment after the field (``configs.field_help``), so a long list of settings is
declared once, in its config. ``config_options`` lists those fields (``mlflow/render_mlproject.py``
writes the MLproject from it). ``parse_settings`` reads ``FIELD=VALUE`` words into settings, ``spread``
and ``refuse_words`` hand the bare words after the options to the repeatable options they belong to.
``WholeWordsGroup`` and ``WholeWordsCommand`` print help wrapped at spaces only. Imports no torch.
"""

from __future__ import annotations

import functools
import inspect
import json
import types
import typing
from dataclasses import MISSING, fields
from enum import Enum
from typing import Any, Callable, Optional

import typer
import typer.core

try:  # typer vendors its own click (typer._click); older typers use click itself
    from typer import _click as click
except ImportError:  # pragma: no cover
    import click

from pipeline.core.configs import field_help
from pipeline.core.errors import ConfigError

# Config fields offered by no option (set by the code, not by a user).
NOT_OPTIONS = {"model", "token_vocab", "context_vocab", "sampling"}
# Older, shorter option names kept beside the field names (scripts and the MLproject use them).
ALIASES = {"lstm_hidden": "hidden", "embedding_dim": "embed_dim", "lstm_layers": "layers", "dense_units": "dense"}
ClickException = click.ClickException  # what click reports itself (usage errors): commands let it through
NON_BREAKING_HYPHEN = "\u2011"  # what the help wraps around instead of "-"


def config_options(*classes: type, exclude: tuple[str, ...] = ()) -> list[tuple[type, str, Any, Any, str]]:
    """(config class, field, annotation, default, help) of every field offered as an option (not in
    ``NOT_OPTIONS`` unless the class is a command's own options, the class's own ``NOT_CLI`` nor ``exclude``)."""
    out = []
    for cls in classes:
        hints = typing.get_type_hints(cls)
        docs = field_help(cls)
        own = getattr(cls, "COMMAND_OPTIONS", False)  # a command's own options: a field named model is one
        skip = {*exclude, *getattr(cls, "NOT_CLI", ()), *(() if own else NOT_OPTIONS)}
        for f in fields(cls):
            if f.name in skip:
                continue
            default = f.default if f.default is not MISSING else None
            out.append((cls, f.name, hints[f.name], default, docs.get(f.name, "")))
    return out


def option_flags(name: str, annotation, aliases: dict[str, str] = ALIASES) -> list[str]:
    """``--field-name`` (``--x/--no-x`` for a boolean) and its alias."""
    names = [aliases[name], name] if name in aliases else [name]
    dashed = [f"--{n.replace('_', '-')}" for n in names]
    if annotation is bool:
        return [f"{d}/--no-{d[2:]}" for d in dashed]
    return dashed


def shown_default(default, name: str = "") -> str:
    """A default as the help says it: a flag's own spelling, an enum's value."""
    if isinstance(default, bool) and name:  # a flag: the option's own spelling
        return name.replace("_", "-") if default else f"no-{name.replace('_', '-')}"
    return str(default.value if isinstance(default, Enum) else default)


def with_config_options(*classes: type, exclude: tuple[str, ...] = (),
                        rename: dict | None = None, flags: dict | None = None, limits: dict | None = None,
                        shown: dict | None = None, notes: dict | None = None) -> Callable:
    """Add one ``Optional`` option per config field to a command: the function receives the fields the
    user set as ``settings`` ({config class: {field: value}}); an unset option is None and keeps the
    config's (or the preset's) default, shown in its help. ``exclude``: fields offered by no option
    (besides a class's ``NOT_CLI``). The dicts below are keyed by field name, or by (class, field) where
    two classes share a name: ``rename``: the parameter and option name (default: the class's
    ``OPTION_NAMES``, the name its errors use); ``flags``: the option's own spellings (e.g.
    ``--direct/--via-mlflow``); ``limits``: typer's ``min``/``max`` (``at_least``); ``shown``: the default
    said in words, where the field's is None; ``notes``: words said after the default. A
    ``tuple[X, ...]`` field is a repeatable option, handed over as a tuple. A class with ``COMMAND_OPTIONS``
    (a command's own options, HfArgumentParser style) is offered as it declares itself (``command_option``).
    The function's own parameters come first, then each class's fields in order."""
    rename, own_flags, limits, said_as, notes = rename or {}, flags or {}, limits or {}, shown or {}, notes or {}

    def of(table: dict, cls: type, name: str, default=None):  # a dict's entry for the field
        return table.get((cls, name), table.get(name, default))

    def decorate(fn: Callable) -> Callable:
        sig, hints = inspect.signature(fn), typing.get_type_hints(fn)  # hints: read in fn's own module
        base = [p.replace(annotation=hints.get(p.name, p.annotation)) for p in sig.parameters.values()
                if p.name != "settings"]
        extra, owner, tuples = [], {}, set()
        for cls, name, annotation, default, doc in config_options(*classes, exclude=exclude):
            optional = typing.get_origin(annotation) in (typing.Union, types.UnionType)  # X | None: X
            typ = next(a for a in typing.get_args(annotation) if a is not type(None)) if optional else annotation
            if typing.get_origin(typ) is tuple and typing.get_args(typ)[1:] == (Ellipsis,):  # a repeatable option
                typ, tuples = list[typing.get_args(typ)[0]], tuples | {name}
            param = of(rename, cls, name, getattr(cls, "OPTION_NAMES", {}).get(name, name))
            if getattr(cls, "COMMAND_OPTIONS", False):  # a command's own options: as the class declares them
                extra.append(inspect.Parameter(param, inspect.Parameter.KEYWORD_ONLY, annotation=Optional[typ]
                                               if optional else typ, default=command_option(cls, name, param, typ)))
                owner[param] = (cls, name)
                continue
            doc = doc[:1].upper() + doc[1:]
            spelled = of(own_flags, cls, name)
            said = of(said_as, cls, name) if default is None else shown_default(default, param)
            if isinstance(default, bool) and spelled:  # the spelling of its own flag pair
                said = spelled[0].split("/")[0 if default else 1].lstrip("-")
            note = of(notes, cls, name)
            if said is None:
                help_text = doc if note is None else f"{doc} [{note}]"
            else:
                help_text = f"{doc} [default: {said}{'; ' + note if note else ''}]".strip()
            option = typer.Option(None, *(spelled or option_flags(param, typ)), help=help_text,
                                  show_default=False, **of(limits, cls, name, {}))
            extra.append(inspect.Parameter(param, inspect.Parameter.KEYWORD_ONLY, default=option,
                                           annotation=Optional[typ]))
            owner[param] = (cls, name)

        @functools.wraps(fn)
        def run(*args, **kwargs):
            settings = {n: kwargs.pop(n) for n in owner if kwargs.get(n) not in (None, [])}
            for n in owner:
                kwargs.pop(n, None)
            return fn(*args, settings={c: {owner[n][1]: tuple(v) if owner[n][1] in tuples else v
                                           for n, v in settings.items() if owner[n][0] is c}
                                       for c in classes}, **kwargs)

        run.__signature__ = sig.replace(parameters=[*base, *extra])
        run.__annotations__ = {**{p.name: p.annotation for p in base}, **{p.name: p.annotation for p in extra}}
        del run.__wrapped__  # typer must read __signature__, not the wrapped function's
        return run

    return decorate


def command_option(cls: type, name: str, param: str, typ) -> Any:
    """Field ``name`` of a command's own options (a class with ``COMMAND_OPTIONS``) as a typer option: its
    default (typer shows it), its comment as written as the help (no default said in words); the field's
    metadata: ``flags`` its spellings, ``help`` a help of its own (e.g. a shared sentence), the rest typer's
    own (``min``, ``max``, ``envvar``). A field without a default is a required option."""
    f = next(f for f in fields(cls) if f.name == name)
    meta = dict(f.metadata)
    default = ... if f.default is MISSING else list(f.default) if isinstance(f.default, tuple) else f.default
    return typer.Option(default, *(meta.pop("flags", None) or option_flags(param, typ)),
                        help=meta.pop("help", field_help(cls).get(name, "")), **meta)


def at_least(low: float, *names: str) -> dict[str, dict]:
    """``limits`` of ``with_config_options``: each of ``names`` at least ``low``."""
    return {name: {"min": low} for name in names}


def parse_settings(pairs: list[str], *classes: type, option: str = "--set") -> tuple[dict, ...]:
    """``FIELD=VALUE`` words -> one settings dict per config class (the first class that has FIELD);
    values read as JSON where they parse (numbers, true/false, null), else as text. A word that is not
    ``FIELD=VALUE`` with a field offered as an option is a ``ConfigError`` naming ``option``."""
    names = [{f.name for f in fields(cls)} - NOT_OPTIONS for cls in classes]
    known = set().union(*names)
    out: tuple[dict, ...] = tuple({} for _ in classes)
    for pair in pairs:
        name, sep, text = pair.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or name not in known:
            raise ConfigError(f"{option} {pair!r}: expected FIELD=VALUE with FIELD one of {sorted(known)}")
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = text
        out[next(i for i, n in enumerate(names) if name in n)][name] = value
    return out


def int_or_none(word: str) -> int | None:
    """``word`` as an integer, None when it is not one."""
    return int(word) if word.lstrip("-").isdigit() else None


def spread(values: list | None, given: bool, words: list[str], accept: Callable[[str], Any]) -> list | None:
    """A repeatable option's values with the bare words after the options that ``accept`` takes (not
    None): ``--seeds 0 1 2`` = ``--seeds 0 --seeds 1 --seeds 2``. The taken words replace a default
    (``given`` False) and join values the user gave; with none taken, ``values`` as they were."""
    taken = [v for v in map(accept, words) if v is not None]
    if not taken:
        return values
    return (list(values or []) if given else []) + taken


def refuse_words(words: list[str], *accepts: Callable[[str], Any], hint: str = "") -> None:
    """A ``ConfigError`` naming the bare words no ``accept`` takes (``hint``: said after them)."""
    bad = [w for w in words if all(accept(w) is None for accept in accepts)]
    if bad:
        raise ConfigError(f"unexpected argument(s) {bad}{hint}")


class WholeWordsFormatter(click.HelpFormatter):
    """click's help formatter wrapping at spaces only: ``--no-verify-counts``, ``deep-ensemble`` stay whole
    (the text wraps with non-breaking hyphens, turned back into hyphens once written)."""

    def write_usage(self, prog: str, args: str = "", prefix: str | None = None) -> None:
        super().write_usage(prog, args.replace("-", NON_BREAKING_HYPHEN), prefix)

    def write_text(self, text: str) -> None:
        super().write_text(text.replace("-", NON_BREAKING_HYPHEN))

    def write_dl(self, rows, *args, **kwargs) -> None:
        super().write_dl([(a, b.replace("-", NON_BREAKING_HYPHEN)) for a, b in rows], *args, **kwargs)

    def getvalue(self) -> str:
        return super().getvalue().replace(NON_BREAKING_HYPHEN, "-")


class WholeWordsContext(click.Context):
    formatter_class = WholeWordsFormatter


class WholeWordsGroup(typer.core.TyperGroup):
    """A typer group (``typer.Typer(cls=...)``) whose help wraps at spaces only."""

    context_class = WholeWordsContext


class WholeWordsCommand(typer.core.TyperCommand):
    """A typer command (``app.command(cls=...)``) whose help wraps at spaces only."""

    context_class = WholeWordsContext
