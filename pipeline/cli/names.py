"""What the command line calls each config field, and a config error said in those words.

The library's configs are plain dataclasses; what only the command line needs lives here, keyed by the
config class's name (so a table names a torch-side config, ``LaplaceConfig``, without importing it):
which fields no option offers (``NOT_OPTIONS``, ``NOT_CLI``), options named otherwise than their field
(``OPTION_NAMES``, ``ALIASES``), the fields of a config that the options of another class set
(``CLI_FIELDS``). ``config_options`` lists the offered fields; ``option`` spells one as a flag; ``spell``
turns a config error, which names fields (``max_steps must be >= 1, got 0``), into the words the user
typed (``--max-steps must be >= 1, got 0``, or the settings file's key), and an error naming a library
function's arguments in backquotes (```as_of``` , ``core.errors.naming``) into the options that set them
(``ARGUMENT_OPTIONS``: ``--as-of``, ``out_dir`` -> ``--out``). Imports no torch.
"""

from __future__ import annotations

import re
import typing
from dataclasses import MISSING, fields
from typing import Any

from pipeline.cli.comments import field_help
from pipeline.core.contracts import DEFAULT_SAMPLES
from pipeline.core.errors import PipelineError

# Config fields offered by no option, in any config (set by the code, not by a user).
NOT_OPTIONS = {"model", "token_vocab", "context_vocab", "sampling"}
# Fields of one config offered by no option, by config class (set from the data or by the code).
NOT_CLI: dict[str, tuple[str, ...]] = {
    "MortalityConfig": ("token_vocab", "context_vocab", "sampling"),
    "VisionTrainConfig": ("model", "lr_decay_epochs"),  # the model's settings are options of their own
    "VisionConfig": ("num_classes", "in_channels", "sampling"),
    "ReferralConfig": ("fraction",),  # the fixed-fraction rule's share is train's --refer-fraction
}
# Options named otherwise than their field, by config class.
OPTION_NAMES: dict[str, dict[str, str]] = {
    "ExtractConfig": {"n_bins": "bins"},
    "EvalConfig": {"n_bootstrap": "bootstrap", "log_to_run": "log"},
    "ServeConfig": {"timeout_s": "timeout"},
    "VisionConfig": {"clip": "factor_clip"},  # VisionTrainConfig has clip
    "VisionEvalConfig": {"corruptions": "corruption", "severities": "severity", "log_to_run": "log"},
    "ReferralConfig": {"group": "refer_group", "rule": "refer_rule"},
}
# Configs built from another class's options: the only fields an option of the same name sets.
CLI_FIELDS: dict[str, tuple[str, ...]] = {
    "LaplaceConfig": ("selection", "subnet_size", "hessian", "prior_precision", "prior_method", "exclude", "max_train",
                      "seed"),  # laplace's options
    "BaselineConfig": ("seed", "threads"),  # train's options
    "SynthConfig": ("density",),  # synth's options
}
# Library function arguments set by an option of another name (any other argument x_y: the option --x-y).
ARGUMENT_OPTIONS = {"out_dir": "out", "model_uri": "model", "features_dir": "data", "map_uri": "run", "run_ids": "runs"}
# Older, shorter option names kept beside the field names (scripts and the MLproject use them).
ALIASES = {"lstm_hidden": "hidden", "embedding_dim": "embed_dim", "lstm_layers": "layers", "dense_units": "dense"}

DEVICE_HELP = "Torch device: cpu, cuda, cuda:N [default: cuda when available, else cpu]."  # --device's help
SAMPLES_SHOWN = f"the model's score_samples; {DEFAULT_SAMPLES} when it has none"  # --samples' default in words
SAMPLES_DEFAULT = f"[default: {SAMPLES_SHOWN}]"  # --samples' help, where it is said in the help
BY_NAME = "*"  # the key of ``spell``'s table under which a command's fields are found by name


def config_options(*classes: type, exclude: tuple[str, ...] = ()) -> list[tuple[type, str, Any, Any, str]]:
    """(config class, field, annotation, default, help) of every field offered as an option (not in
    ``NOT_OPTIONS`` unless the class is a command's own options, nor the class's ``NOT_CLI``, nor ``exclude``)."""
    out = []
    for cls in classes:
        hints = typing.get_type_hints(cls)
        docs = field_help(cls)
        own = getattr(cls, "COMMAND_OPTIONS", False)  # a command's own options: a field named model is one
        skip = {*exclude, *NOT_CLI.get(cls.__name__, ()), *(() if own else NOT_OPTIONS)}
        for f in fields(cls):
            if f.name in skip:
                continue
            default = f.default if f.default is not MISSING else None
            out.append((cls, f.name, hints[f.name], default, docs.get(f.name, "")))
    return out


def option_name(cls: type | str, name: str) -> str:
    """The option's name of field ``name`` (``OPTION_NAMES``; else the field's own)."""
    return OPTION_NAMES.get(cls if isinstance(cls, str) else cls.__name__, {}).get(name, name)


def offered(cls: type | str, name: str) -> bool:
    """Whether an option of the command that sets config ``cls`` sets field ``name`` (not ``NOT_CLI``, and in
    ``CLI_FIELDS`` where the config has an entry there)."""
    key = cls if isinstance(cls, str) else cls.__name__
    return name not in NOT_CLI.get(key, ()) and (key not in CLI_FIELDS or name in CLI_FIELDS[key])


def option(cls: type | str, name: str) -> str:
    """How a user types config field ``name`` of ``cls`` (a class or its name): ``max_steps`` -> ``--max-steps``;
    a field whose option has a name of its own -> that name (``n_bins``: ``--bins``); a field no option
    offers -> its own name."""
    return "--" + option_name(cls, name).replace("_", "-") if offered(cls, name) else name


def spell(exc: PipelineError, typed: dict[tuple[str, str], str]) -> str:
    """``exc``'s message with each config field it names (``exc.fields`` of ``exc.config``) and each library
    argument it names in backquotes (``exc.arguments``: ```as_of```) said as the user gave it: ``typed`` maps
    (config class name, field) of the command's own settings to the flag or the settings file's key ({} outside
    such a command), and (``BY_NAME``, option name) to the same for a config that the command builds from its
    options (``LaplaceConfig``) and for its own options; otherwise ``option`` (an argument: ``argument``)."""
    text = str(exc)
    for name in exc.arguments:
        opt = ARGUMENT_OPTIONS.get(name, name)
        text = text.replace(f"`{name}`", typed.get((BY_NAME, opt)) or argument(name))
    if not exc.fields or exc.config is None:
        return text
    own = exc.config.__name__

    def said(name: str) -> str:
        if (own, name) in typed:
            return typed[(own, name)]
        if offered(own, name) and (BY_NAME, option_name(own, name)) in typed:
            return typed[(BY_NAME, option_name(own, name))]
        return option(own, name)

    names = sorted(set(exc.fields), key=len, reverse=True)
    pattern = re.compile(r"(?<![\w.-])(" + "|".join(map(re.escape, names)) + r")(?![\w-])")
    return pattern.sub(lambda m: said(m.group(1)), text)


def argument(name: str) -> str:
    """The option that sets library argument ``name``: ``as_of`` -> ``--as-of``, ``out_dir`` -> ``--out``."""
    return "--" + ARGUMENT_OPTIONS.get(name, name).replace("_", "-")
