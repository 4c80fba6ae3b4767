"""Settings as files: ``--config FILE.toml``, ``--set KEY=VALUE`` and ``--print-config`` (spaCy, nanoGPT).

A command's settings file holds its options' fields, by key: a field of the command's own options at the
top level (``preset = "paper"``), a config's field in its table (``[train] max_steps = 4000``, ``[model]
lstm_hidden = 128``: ``train.max_steps``, ``model.lstm_hidden``); a few fields have a key of their own
(train's ``--model`` is ``model.name``). ``--set KEY=VALUE`` sets one key (a bare field name finds its
table, so ``--set lstm_hidden=128`` still works; ``-`` for ``_`` too); its value reads as JSON or TOML
(numbers, true/false, null, [lists]) and as text otherwise, and as text for a text field.

Precedence, lowest first: the config's defaults < the preset (``train --preset``, ``benchmark-models
--preset``) < ``--config FILE`` < ``--set`` < the flags typed. ``--print-config`` prints the effective
settings as TOML that ``--config`` reads back: what was set as ``key = value``, the rest as comments
showing the default (or the preset's value). Options without a default (``--data``, ``--run``) stay on
the command line. An unknown key or a bad value is one line naming the file (or ``--set``) and the key.
"""

from __future__ import annotations

import json
import math
import types
import typing
from dataclasses import MISSING, dataclass, field, fields
from enum import Enum
from pathlib import Path
from typing import Any

from pipeline.cli.names import config_options
from pipeline.core.errors import ConfigError

UNSET = "unset"  # how a printed settings file shows a field without a value
RUN_FILE = "settings.toml"  # a run's effective settings, as its command's --config reads them


@dataclass(frozen=True)
class Key:
    """One key of a settings file: the field it sets."""

    name: str  # the key as written: "model.lstm_hidden", "preset"
    cls: type  # the class whose field it is
    field: str  # the field
    annotation: Any  # the field's type
    limits: dict = field(default_factory=dict, hash=False, compare=False)  # "min" / "max" of a number


@dataclass
class Layout:
    """Where each offered field of a command sits in its settings file."""

    keys: dict[str, Key]  # key name -> key, top-level keys first, then each table's, in field order
    bare: dict[str, str]  # field name -> key name (the first class that has the field: top level first)
    sections: dict[type, str]  # class -> its table ("": the top level)
    required: list[Key]  # fields without a default: given on the command line only

    def key_of(self, cls: type, name: str) -> Key | None:
        return next((k for k in self.keys.values() if k.cls is cls and k.field == name), None)


def layout(classes: tuple[type, ...], sections: dict[type, str] | None = None,
           keys: dict[tuple[type, str], str] | None = None, exclude: dict[type, tuple[str, ...]] | None = None,
           limits: dict[tuple[type, str], dict] | None = None) -> Layout:
    """The layout of ``classes``' offered fields (``config_options``): each class in table ``sections[cls]``
    (default: the top level), a field under ``keys[(cls, field)]`` where given, without ``exclude[cls]``;
    ``limits``: the typer ``min``/``max`` of a field's option. A key two fields would share is an error
    (a ``ValueError`` at import: a command declared wrongly)."""
    sections, keys, exclude, limits = sections or {}, keys or {}, exclude or {}, limits or {}
    tables: dict[str, dict[str, Key]] = {sections.get(c, ""): {} for c in ("", *classes)}  # "" (the top) first
    bare, required = {}, []
    for cls in sorted(classes, key=lambda c: sections.get(c, "") != ""):  # the top level's classes first
        own = {f.name: f for f in fields(cls)}
        for _, name, annotation, _, _ in config_options(cls, exclude=exclude.get(cls, ())):
            f = own[name]
            meta = {k: v for k, v in f.metadata.items() if k in ("min", "max")}
            key = Key(keys.get((cls, name)) or ".".join(filter(None, (sections.get(cls, ""), name))), cls, name,
                      annotation, {**meta, **limits.get((cls, name), {})})
            if getattr(cls, "COMMAND_OPTIONS", False) and f.default is MISSING and f.default_factory is MISSING:
                required.append(key)  # typer asks for it on the command line
                continue
            table = key.name.rpartition(".")[0]
            if any(key.name in t for t in tables.values()):
                raise ValueError(f"settings key {key.name!r} of {cls.__name__}.{name} is taken")
            tables.setdefault(table, {})[key.name] = key
            bare.setdefault(name, key.name)
    every = {k: v for t in tables.values() for k, v in t.items()}
    return Layout(every, bare, {c: sections.get(c, "") for c in classes}, required)


def resolve(lay: Layout, name: str, where: str) -> Key:
    """The key ``name`` (dotted, or a bare field name; ``-`` for ``_``), or a ``ConfigError`` at ``where``."""
    text = name.strip().replace("-", "_")
    found = lay.keys.get(text) or lay.keys.get(lay.bare.get(text, ""))
    if found is None and text in {k.name for k in lay.required}:
        raise ConfigError(f"{where}: {name.strip()!r} has no default: give it on the command line")
    if found is None:
        import difflib

        close = difflib.get_close_matches(text, [*lay.keys, *lay.bare], n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(f"{where}: unknown key {name.strip()!r}{hint}; --print-config lists the keys")
    return found


def read_file(path: Path, lay: Layout) -> list[tuple[Key, Any, str]]:
    """(key, value, where) of every key a settings file sets; values typed by their field (``coerce``)."""
    import tomllib

    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"--config {path}: cannot be read ({exc.strerror or type(exc).__name__})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"--config {path}: not a UTF-8 text file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"--config {path}: not TOML: {exc}") from None
    out = []
    for name, value in _flat(data):
        key = resolve(lay, name, f"{path}")
        where = f"{path}: {name}"
        out.append((key, coerce(value, key, where), where))
    return out


def _flat(data: dict, prefix: str = "") -> list[tuple[str, Any]]:
    out = []
    for k, v in data.items():
        if isinstance(v, dict):
            out += _flat(v, f"{prefix}{k}.")
        else:
            out.append((f"{prefix}{k}", v))
    return out


def read_words(words: list[str], lay: Layout, option: str = "--set") -> list[tuple[Key, Any, str]]:
    """(key, value, where) of ``KEY=VALUE`` words (``option``'s values)."""
    out = []
    for word in words:
        name, sep, text = word.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"{option} {word!r}: expected KEY=VALUE (e.g. model.lstm_hidden=128)")
        key = resolve(lay, name, f"{option} {word!r}")
        where = f"{option} {name.strip()}"
        out.append((key, coerce(_word_value(text, key), key, where), where))
    return out


def _word_value(text: str, key: Key) -> Any:
    """A ``--set`` value: text for a text field (a JSON string unquoted), else JSON, else TOML, else text."""
    import tomllib

    if _base(key.annotation)[0] in (str, Path):
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            return text
        return value if isinstance(value, str) or value is None else text
    for parse in (json.loads, lambda t: tomllib.loads(f"v = {t}")["v"]):
        try:
            return parse(text)
        except ValueError:  # JSONDecodeError and TOMLDecodeError are ValueErrors
            continue
    return text


def _base(annotation) -> tuple[Any, bool]:
    """(the type without ``None``, whether ``None`` is allowed)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return (args[0] if len(args) == 1 else annotation), True
    return annotation, False


def coerce(value: Any, key: Key, where: str) -> Any:
    """``value`` as field ``key`` takes it (an enum member, a Path, a tuple), or a ``ConfigError`` naming
    ``where``: the wrong type, a choice not offered, a number outside the option's limits. ``None`` (JSON
    null, or the text "none" for a field that is not text) where the field may be unset."""
    typ, optional = _base(key.annotation)
    if optional and (value is None or (typ not in (str, Path) and isinstance(value, str) and value.lower() == "none")):
        return None
    if typing.get_origin(typ) is tuple and typing.get_args(typ)[1:] == (Ellipsis,):
        item = Key(key.name, key.cls, key.field, typing.get_args(typ)[0], key.limits)
        return tuple(coerce(v, item, where) for v in (value if isinstance(value, (list, tuple)) else [value]))
    return _scalar(value, typ, key.limits, where)


def _scalar(value: Any, typ: Any, limits: dict, where: str) -> Any:
    def bad(expected: str) -> ConfigError:
        return ConfigError(f"{where} must be {expected}, got {value!r}")

    if isinstance(typ, type) and issubclass(typ, Enum):
        try:
            return typ(getattr(value, "value", value))
        except ValueError:
            raise bad(f"one of {[e.value for e in typ]}") from None
    if typ is bool:
        if not isinstance(value, bool):
            raise bad("true or false")
        return value
    if typ is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad("an integer")
    elif typ is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad("a number")
        value = float(value)
    elif typ in (str, Path):
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise bad("text")
        return typ(str(value))
    else:
        raise bad(f"a {getattr(typ, '__name__', typ)} (not settable from a file)")
    if "min" in limits and value < limits["min"]:
        raise ConfigError(f"{where} must be >= {limits['min']}, got {value}")
    if "max" in limits and value > limits["max"]:
        raise ConfigError(f"{where} must be <= {limits['max']}, got {value}")
    return value


# ---------------------------------------------------------------------------- writing a settings file


def toml_value(value: Any) -> str:
    """``value`` as a TOML value (enums by their value, paths as text, tuples as arrays)."""
    if isinstance(value, Enum):
        value = value.value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ("nan" if math.isnan(value) else ("inf" if value > 0 else
                                                                                            "-inf"))
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return json.dumps(str(value), ensure_ascii=False)


def render(lay: Layout, values: dict[type, dict[str, Any]], given: set[tuple[type, str]], header: list[str]) -> str:
    """A settings file: ``header`` as comments, then every key; a field in ``given`` as ``key = value``, the
    others commented out with their value in ``values`` (the default or the preset's)."""
    lines = [f"# {h}" if h else "#" for h in header]
    section = None
    for key in lay.keys.values():
        table, _, name = key.name.rpartition(".")
        if table != section:
            lines += ["", f"[{table}]"] if table else [""]
            section = table
        value = values.get(key.cls, {}).get(key.field)
        if (key.cls, key.field) in given and value is not None:
            lines.append(f"{name} = {toml_value(value)}")
        elif (key.cls, key.field) in given:  # set to None: unset, shown as the text a field takes for it
            lines.append(f"{name} = \"none\"" if _base(key.annotation)[0] not in (str, Path) else f"# {name}: {UNSET}")
        else:
            lines.append(f"# {name} = {toml_value(value)}" if value is not None else f"# {name}: {UNSET}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------- what a command receives


class Settings(dict):
    """What a command with settings receives: ``{class: {field: value}}``, for a config only the fields the
    user set (its defaults, or the preset, give the rest), for a command's own options every field; and how
    each was given (``typed``), which fields were set at all (``given``), and the file it makes (``toml``)."""

    def __init__(self, values: dict[type, dict[str, Any]], *, lay: Layout, given: set[tuple[type, str]],
                 typed: dict[tuple[type, str], str], command: str, required: list[tuple[str, Any]],
                 baseline: Any = None) -> None:
        super().__init__(values)
        self.layout, self.given, self._typed, self.command, self.required = lay, given, typed, command, required
        self._baseline = baseline

    def given_fields(self, cls: type) -> set[str]:
        """The fields of ``cls`` the user set (a flag, the settings file or ``--set``)."""
        return {name for c, name in self.given if c is cls}

    def typed(self, cls: type, name: str) -> str:
        """How field ``name`` of ``cls`` was given: its flag (``--max-steps``), or ``FILE: key``, ``--set key``."""
        return self._typed[(cls, name)]

    def effective(self) -> dict[type, dict[str, Any]]:
        """Every offered field's value: the class default, the command's ``baseline`` (a preset's, a dataset's
        recipe), what the user set."""
        out = {cls: {f.name: _default(f) for f in fields(cls)} for cls in self.layout.sections}
        for cls, values in (self._baseline(self) if self._baseline else {}).items():
            out[cls].update(values)
        for cls, values in self.items():
            out[cls].update(values)
        return out

    def toml(self) -> str:
        """The settings file of these settings (``--print-config``; what ``--config`` reads back)."""
        import shlex

        given = [f"{flag} {shlex.quote(str(value))}" for flag, value in self.required]
        again = " ".join([self.command, *given, "--config FILE"])
        header = [f"Settings of `{self.command}`: `{again}` reads this file back.",
                  "Precedence: defaults < preset < --config FILE < --set KEY=VALUE < the flags typed.",
                  "A commented line is not set: it shows the default (or the preset's value)."]
        return render(self.layout, self.effective(), self.given, header)

    def record(self, run_id: str | None, out_dir: Path | str) -> Path:
        """Write these settings (``RUN_FILE``) into a run's directory and, tracked, log them as an artifact of
        the run (beside ``train_config.json``); returns the file."""
        from pipeline.core import fileio

        path = fileio.write_text(Path(out_dir) / RUN_FILE, self.toml())
        if run_id:
            from pipeline.runs import store

            store.client().log_artifact(run_id, str(path))
        return path


def _default(f) -> Any:
    if f.default is not MISSING:
        return f.default
    return f.default_factory() if f.default_factory is not MISSING else None
