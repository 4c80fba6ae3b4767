"""A config dataclass's fields as command-line options (typer), and what a command line hands back.

``with_config_options`` adds one option per field of one or more config dataclasses to a typer
command, its help the comment after the field (``comments.field_help``), so a long list of settings is
declared once, in its config; with them ``--config FILE``, ``--set KEY=VALUE`` and ``--print-config``
(``pipeline.cli.settings``). ``config_options`` lists those fields (``mlflow/render_mlproject.py``
writes the MLproject from it). ``spread`` and ``refuse_words`` hand the bare words after the options to
the repeatable options they belong to. ``WholeWordsGroup`` and ``WholeWordsCommand`` print help wrapped
at spaces only. Imports no torch.
"""

from __future__ import annotations

import functools
import inspect
import types
import typing
from dataclasses import MISSING, dataclass, field, fields
from enum import Enum
from pathlib import Path
from typing import Any, Callable, Optional

import typer
import typer.core

try:  # typer vendors its own click (typer._click); older typers use click itself
    from typer import _click as click
    from typer._click.globals import get_current_context
except ImportError:  # pragma: no cover
    import click
    from click import get_current_context

from pipeline.cli import settings as files
from pipeline.cli.comments import field_help
from pipeline.cli.names import ALIASES, BY_NAME, config_options, option_name
from pipeline.core.errors import ConfigError

__all__ = ["ALIASES", "ClickException", "SettingsFile", "TYPED", "WholeWordsCommand", "WholeWordsGroup", "at_least",
           "command_option", "config_options", "get_current_context", "int_or_none", "option_flags", "refuse_words",
           "spread", "with_config_options"]

ClickException = click.ClickException  # what click reports itself (usage errors): commands let it through
NON_BREAKING_HYPHEN = "\u2011"  # what the help wraps around instead of "-"
TYPED = "pipeline.cli.typed"  # click's ctx.meta key: how each setting was given (names.spell reads it)
EXPLICIT = {"COMMANDLINE", "ENVIRONMENT", "PROMPT"}  # click's parameter sources that the user gave


@dataclass
class SettingsFile:
    """Where a command's fields sit in its settings file (``settings.layout``) and what else it holds."""

    sections: dict[type, str] = field(default_factory=dict)  # class -> its table (default: the top level)
    keys: dict[tuple[type, str], str] = field(default_factory=dict)  # a field's key of its own ("model.name")
    only: tuple[type, ...] = ()  # classes set by the file and --set only (no flags): benchmark-models' train
    exclude: dict[type, tuple[str, ...]] = field(default_factory=dict)  # fields no file sets (the code does)
    baseline: Callable | None = None  # Settings -> {class: {field: value}} beneath the user's: a preset's
    beneath: str = ""  # what the help says lies between the defaults and the file ("--preset")
    example: str = ""  # --set's example keys ("model.lstm_hidden=128")
    set_help: str = ""  # --set's help, where the command says it in its own words


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
                        shown: dict | None = None, notes: dict | None = None,
                        settings_file: SettingsFile | None = None) -> Callable:
    """Add one ``Optional`` option per config field to a command: the function receives the fields the
    user set as ``settings`` (a ``settings.Settings``: {config class: {field: value}}); an unset option is
    None and keeps the config's (or the preset's) default, shown in its help. ``exclude``: fields offered
    by no option (besides ``names.NOT_CLI``). The dicts below are keyed by field name, or by (class, field)
    where two classes share a name: ``rename``: the parameter and option name (default:
    ``names.OPTION_NAMES``, the name its errors use); ``flags``: the option's own spellings (e.g.
    ``--direct/--via-mlflow``); ``limits``: typer's ``min``/``max`` (``at_least``); ``shown``: the default
    said in words, where the field's is None; ``notes``: words said after the default. A
    ``tuple[X, ...]`` field is a repeatable option, handed over as a tuple. A class with ``COMMAND_OPTIONS``
    (a command's own options, HfArgumentParser style) is offered as it declares itself (``command_option``):
    the command receives every one of its fields. The function's own parameters come first, then each
    class's fields in order, then ``--config``, ``--set`` and ``--print-config``, laid out by
    ``settings_file`` (``pipeline.cli.settings``: their precedence); a config error raised inside names
    each field as the user gave it (``TYPED``)."""
    rename, own_flags, limits, said_as, notes = rename or {}, flags or {}, limits or {}, shown or {}, notes or {}
    spec = settings_file or SettingsFile()

    def of(table: dict, cls: type, name: str, default=None):  # a dict's entry for the field
        return table.get((cls, name), table.get(name, default))

    def decorate(fn: Callable) -> Callable:
        sig, hints = inspect.signature(fn), typing.get_type_hints(fn)  # hints: read in fn's own module
        base = [p.replace(annotation=hints.get(p.name, p.annotation)) for p in sig.parameters.values()
                if p.name != "settings"]
        extra, owner, tuples, spelled = [], {}, set(), {}
        for cls, name, annotation, default, doc in config_options(*classes, exclude=exclude):
            optional = typing.get_origin(annotation) in (typing.Union, types.UnionType)  # X | None: X
            typ = next(a for a in typing.get_args(annotation) if a is not type(None)) if optional else annotation
            if typing.get_origin(typ) is tuple and typing.get_args(typ)[1:] == (Ellipsis,):  # a repeatable option
                typ, tuples = list[typing.get_args(typ)[0]], tuples | {name}
            param = of(rename, cls, name, option_name(cls, name))
            if getattr(cls, "COMMAND_OPTIONS", False):  # a command's own options: as the class declares them
                declared = next(f for f in fields(cls) if f.name == name).metadata.get("flags")
                extra.append(inspect.Parameter(param, inspect.Parameter.KEYWORD_ONLY, annotation=Optional[typ]
                                               if optional else typ, default=command_option(cls, name, param, typ)))
            else:
                declared = of(own_flags, cls, name)
                option = typer.Option(None, *(declared or option_flags(param, typ)), show_default=False,
                                      help=_help(doc, default, param, declared, of(said_as, cls, name),
                                                 of(notes, cls, name)), **of(limits, cls, name, {}))
                extra.append(inspect.Parameter(param, inspect.Parameter.KEYWORD_ONLY, default=option,
                                               annotation=Optional[typ]))
            owner[param] = (cls, name)
            spelled[(cls, name)] = declared[0].split("/")[0] if declared else "--" + param.replace("_", "-")
        skip = {c: (*exclude, *spec.exclude.get(c, ())) for c in (*classes, *spec.only)}
        layout = functools.cache(lambda: files.layout((*classes, *spec.only), spec.sections, spec.keys, skip,
                                                      {(c, n): of(limits, c, n, {}) for c, n in spelled}))
        extra += _settings_parameters(spec)

        @functools.wraps(fn)
        def run(*args, **kwargs):
            ctx, lay = get_current_context(), layout()  # the layout: on first use (--help needs none)
            path, words, show = kwargs.pop("config_file"), kwargs.pop("set_"), kwargs.pop("print_config")
            values: dict[type, dict[str, Any]] = {c: {} for c in (*classes, *spec.only)}
            typed = dict(spelled)
            typed_flags = {}
            for n, (cls, name) in owner.items():
                value = kwargs.pop(n, None)
                value = tuple(value) if name in tuples and value is not None else value
                if getattr(cls, "COMMAND_OPTIONS", False):
                    values[cls][name] = value  # every field of a command's own options, defaults too
                    if ctx.get_parameter_source(n).name in EXPLICIT:
                        typed_flags[(cls, name)] = value
                elif value not in (None, ()):
                    typed_flags[(cls, name)] = value
            given = set(typed_flags)
            for key, value, where in [*(files.read_file(path, lay) if path else []),
                                      *files.read_words(list(words or []), lay)]:
                if (key.cls, key.field) not in typed_flags:  # the flags typed win
                    values[key.cls][key.field] = value
                    typed[(key.cls, key.field)] = where
                given.add((key.cls, key.field))
            for (cls, name), value in typed_flags.items():
                values[cls][name] = value
            ctx.meta[TYPED] = {**{(BY_NAME, n): t for (_, n), t in reversed(typed.items())},
                               **{(c.__name__, n): t for (c, n), t in typed.items()}}
            required = [(spelled[(k.cls, k.field)], values[k.cls][k.field]) for k in lay.required]
            settings = files.Settings(values, lay=lay, given=given, typed=typed, command=_command(ctx),
                                      required=required, baseline=spec.baseline)
            if show:
                typer.echo(settings.toml(), nl=False)
                raise typer.Exit()
            return fn(*args, settings=settings, **kwargs)

        run.__signature__ = sig.replace(parameters=[*base, *extra])
        run.__annotations__ = {**{p.name: p.annotation for p in base}, **{p.name: p.annotation for p in extra}}
        del run.__wrapped__  # typer must read __signature__, not the wrapped function's
        return run

    return decorate


def _command(ctx) -> str:
    """The command as ``cli.py`` runs it (``cli.py vision train``), however it was started (``mimic-risk``)."""
    return " ".join(["cli.py", *ctx.command_path.split()[1:]])


def _help(doc: str, default, param: str, spelled: list[str] | None, said, note: str | None) -> str:
    """A config field's help: its comment, capitalized, then the default (said in words where given) and a note."""
    doc = doc[:1].upper() + doc[1:]
    said = said if default is None else shown_default(default, param)
    if isinstance(default, bool) and spelled:  # the spelling of its own flag pair
        said = spelled[0].split("/")[0 if default else 1].lstrip("-")
    if said is None:
        return doc if note is None else f"{doc} [{note}]"
    return f"{doc} [default: {said}{'; ' + note if note else ''}]".strip()


def _settings_parameters(spec: SettingsFile) -> list[inspect.Parameter]:
    """``--config``, ``--set`` and ``--print-config`` as keyword parameters, their help as ``spec`` says."""
    kw = inspect.Parameter.KEYWORD_ONLY
    order = " < ".join(filter(None, ("the defaults", spec.beneath, "this file", "--set", "the flags typed")))
    example = f", e.g. {spec.example}" if spec.example else ""
    return [
        inspect.Parameter("config_file", kw, annotation=Optional[Path], default=typer.Option(
            None, "--config", metavar="FILE", help=f"Settings file (TOML; --print-config writes one): a key per "
            f"option. Precedence: {order}.")),
        inspect.Parameter("set_", kw, annotation=Optional[list[str]], default=typer.Option(
            None, "--set", metavar="KEY=VALUE", help=spec.set_help or f"One setting (repeatable): a key of the "
            f"settings file{example}, or a bare field name; the value as JSON or TOML, else text. Over --config, "
            "under the flags typed.")),
        inspect.Parameter("print_config", kw, annotation=bool, default=typer.Option(
            False, "--print-config", help="Print the effective settings as a settings file (TOML, what --config "
            "reads back) and exit.")),
    ]


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


class OneLineUsageError(click.exceptions.UsageError):
    """A usage error (an unknown option, a value out of its range, a missing option) said as every other mistake
    of the command line is: one line ``error: ...`` naming the option, and where the help is (exit code 2)."""

    def show(self, file=None) -> None:
        where = _command(self.ctx) if self.ctx is not None else "cli.py"
        typer.secho(f"error: {' '.join(self.format_message().split())} (see {where} --help)", err=True,
                    fg=typer.colors.RED)


def _one_line(exc: click.exceptions.UsageError) -> click.exceptions.UsageError:
    """``exc`` as a ``OneLineUsageError`` (the help that no arguments ask for stays as it is)."""
    if isinstance(exc, (OneLineUsageError, click.exceptions.NoArgsIsHelpError)):
        return exc
    said = OneLineUsageError(_plain(exc), exc.ctx)
    said.exit_code = exc.exit_code
    return said


def _plain(exc: click.exceptions.UsageError) -> str:
    """A usage error's message without pydantic's wording of a bad value (typer checks values with pydantic):
    ``Value error, 'vall' is not one of 'val', 'test'.`` is ``'vall' is not one of 'val', 'test'``, and ``Input
    should be a valid integer, unable to parse ...`` says what was typed: ``'abc' is not an integer``."""
    text = exc.format_message()
    errors = getattr(exc.__cause__, "errors", None)
    problems = errors() if callable(errors) else []
    if not isinstance(exc, click.exceptions.BadParameter) or not problems:
        return text
    first, typed = problems[0], problems[0].get("input")
    if first.get("type") == "value_error":
        why = str(first.get("ctx", {}).get("error", first.get("msg", ""))).rstrip(".")
    else:
        kind = {"int_parsing": "an integer", "float_parsing": "a number", "bool_parsing": "true or false"}
        bound = {"greater_than_equal": ("ge", "at least"), "greater_than": ("gt", "above"),
                 "less_than_equal": ("le", "at most"), "less_than": ("lt", "below")}.get(first.get("type"))
        limit = first.get("ctx", {}).get(bound[0]) if bound else None
        msg = str(first.get("msg", ""))
        why = (f"{typed!r} is not {kind[first['type']]}" if first.get("type") in kind else
               f"{typed!r} is out of range (it must be {bound[1]} {limit})" if limit is not None else
               f"{typed!r}: {msg[:1].lower() + msg[1:]}")
    head = text.split(":", 1)[0] if text.startswith("Invalid value for") else "Invalid value"
    return f"{head}: {why}"


class WholeWordsGroup(typer.core.TyperGroup):
    """A typer group (``typer.Typer(cls=...)``) whose help wraps at spaces only and whose usage errors are one
    line (``OneLineUsageError``)."""

    context_class = WholeWordsContext

    def make_context(self, info_name, args, parent=None, **extra):
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.exceptions.UsageError as exc:
            raise _one_line(exc) from None

    def resolve_command(self, ctx, args):
        try:
            return super().resolve_command(ctx, args)
        except click.exceptions.UsageError as exc:
            raise _one_line(exc) from None


class WholeWordsCommand(typer.core.TyperCommand):
    """A typer command (``app.command(cls=...)``) whose help wraps at spaces only and whose usage errors are one
    line (``OneLineUsageError``)."""

    context_class = WholeWordsContext

    def make_context(self, info_name, args, parent=None, **extra):
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.exceptions.UsageError as exc:
            raise _one_line(exc) from None
