"""pipeline.cli.options: config fields as typer options (names, help, limits, what the command receives),
the settings file and --set beside them (precedence, how an error names a field), bare words spread into
repeatable options, help wrapped at spaces only."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import ClassVar

import pytest
import typer
from typer.testing import CliRunner

from pipeline.cli.options import (
    WholeWordsCommand,
    WholeWordsGroup,
    at_least,
    config_options,
    int_or_none,
    refuse_words,
    spread,
    with_config_options,
)
from pipeline.core.configs import check_at_least
from pipeline.core.errors import ConfigError
from pipeline.tasks.mortality.train_config import TrainConfig


class Colour(str, Enum):
    RED = "red"
    BLUE = "blue"


@dataclass
class Planted:
    """A config as the stages write them: one comment per field."""

    n_bins: int = 5  # quantile bins per item
    colour: Colour = Colour.RED  # the colour of the thing
    verify: bool = False  # check twice
    groups: tuple[str, ...] = ()  # groups used, oldest first
    threads: int | None = None  # worker threads
    model: dict | None = None  # set by the code
    secret: int = 0  # set in Python only

    def __post_init__(self) -> None:
        check_at_least(self, 1, ("n_bins", "threads"))


NAMES = {"rename": {"n_bins": "bins"}, "exclude": ("secret",)}  # what names.OPTION_NAMES, NOT_CLI say of a config


def _app(**kwargs) -> tuple[typer.Typer, dict]:
    seen: dict = {}
    app = typer.Typer(cls=WholeWordsGroup, rich_markup_mode=None)

    @app.command(cls=WholeWordsCommand)
    @with_config_options(Planted, **NAMES, **kwargs)
    def run(name: str = typer.Option("x", help="A name."), settings: dict | None = None) -> None:
        seen.update(name=name, settings=settings[Planted])

    @app.command(cls=WholeWordsCommand)
    def other() -> None:  # a second command keeps `run` a subcommand
        pass

    return app, seen


def test_config_fields_become_options_and_only_the_set_ones_reach_the_command():
    app, seen = _app(limits={**at_least(1, "n_bins"), "threads": {"min": 1, "max": 4}}, shown={"threads": "all cores"})
    res = CliRunner().invoke(app, ["run", "--bins", "3", "--colour", "blue", "--verify", "--groups", "a",
                                   "--groups", "b"])
    assert res.exit_code == 0, res.output
    assert seen == {"name": "x", "settings": {"n_bins": 3, "colour": Colour.BLUE, "verify": True, "groups": ("a", "b")}}
    CliRunner().invoke(app, ["run"])
    assert seen["settings"] == {}  # unset options keep the config's defaults
    res = CliRunner().invoke(app, ["run", "--threads", "9"])
    assert res.exit_code == 2 and "--threads" in res.output  # typer's limit
    text = " ".join(CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "200"}).output.split())
    assert "Quantile bins per item [default: 5]" in text and "Worker threads [default: all cores]" in text
    assert "--verify / --no-verify" in text and "[default: no-verify]" in text
    assert "--secret" not in text and "--model" not in text and "--n-bins" not in text  # excluded, NOT_OPTIONS, renamed


def test_a_flag_pair_of_its_own_and_a_note():
    app, _ = _app(flags={"verify": ["--twice/--once"]}, notes={(Planted, "n_bins"): "--preset x sets its own"})
    text = " ".join(CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "200"}).output.split())
    assert "--twice / --once" in text and "Check twice [default: once]" in text
    assert "Quantile bins per item [default: 5; --preset x sets its own]" in text


def test_config_options_lists_the_offered_fields():
    names = [name for _, name, *_ in config_options(Planted, exclude=("secret",))]
    assert names == ["n_bins", "colour", "verify", "groups", "threads"]
    assert "model" not in [name for _, name, *_ in config_options(TrainConfig)]


@dataclass
class Long:
    """One long help text full of hyphens."""

    flag: bool = False  # a long help text with --no-verify-counts and deep-ensemble and rank-1 and mean-field
        # and records-research and val-nll in it, wrapped at many widths


def test_help_wraps_at_spaces_not_at_hyphens():
    app = typer.Typer(cls=WholeWordsGroup, rich_markup_mode=None)

    @app.command(cls=WholeWordsCommand)
    @with_config_options(Long)
    def run(settings: dict | None = None) -> None:
        pass

    app.command("other", cls=WholeWordsCommand)(lambda: None)
    for width in range(50, 90):
        res = CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": str(width)}, terminal_width=width)
        text = " ".join(res.output.split())
        assert res.exit_code == 0 and "A long help text with --no-verify-counts and deep-ensemble" in text, res.output
        assert "\u2011" not in res.output and "--flag / --no-flag" in text
        broken = [ln for ln in res.output.splitlines() if ln.rstrip().endswith("-")]
        assert not broken, (width, broken)


def test_bare_words_join_the_options_they_belong_to():
    words = ["4", "gbm", "-1"]
    assert int_or_none("12") == 12 and int_or_none("-1") == -1 and int_or_none("x") is None
    assert spread([0, 1, 2], False, words, int_or_none) == [4, -1]  # they replace a default
    assert spread([7], True, words, int_or_none) == [7, 4, -1]  # and join what the user gave
    assert spread([7], True, ["gbm"], int_or_none) == [7] and spread(None, False, [], int_or_none) is None
    refuse_words(words, int_or_none, lambda w: w if w == "gbm" else None)
    with pytest.raises(ConfigError, match=r"^unexpected argument\(s\) \['gbm'\]; hint$"):
        refuse_words(words, int_or_none, hint="; hint")


@dataclass
class PlantedCommand:
    """A command's own options (COMMAND_OPTIONS): defaults typer shows, comments as written."""

    path: str  # the input, as written
    count: int = field(default=3, metadata={"min": 1})  # how many
    tags: tuple[str, ...] = ("a", "b")  # Tags (repeatable).
    quiet: bool = field(default=False, metadata={"flags": ["--quiet", "-q"]})  # Say less.
    shared: str | None = field(default=None, metadata={"help": "A shared sentence."})  # not this one
    COMMAND_OPTIONS: ClassVar[bool] = True


def test_command_options_keep_their_defaults_flags_and_help_as_written():
    seen: dict = {}
    app = typer.Typer(cls=WholeWordsGroup, rich_markup_mode=None)

    @app.command(cls=WholeWordsCommand)
    @with_config_options(PlantedCommand, Planted, **NAMES)
    def run(settings: dict | None = None) -> None:
        seen.update(own=settings[PlantedCommand], planted=settings[Planted])

    @app.command(cls=WholeWordsCommand)
    def other() -> None:
        pass

    runner = CliRunner()
    text = runner.invoke(app, ["run", "--help"], terminal_width=100).output
    assert "the input, as written  [required]" in text  # not capitalized, required: no default
    assert "how many  [default: 3; x>=1]" in text and "Tags (repeatable).  [default: a, b]" in text
    assert "-q, --quiet" in text and "A shared sentence." in text and "not this one" not in text
    assert text.index("--path") < text.index("--shared") < text.index("--bins")  # its fields first, in order
    assert runner.invoke(app, ["run"]).exit_code == 2  # --path missing
    assert runner.invoke(app, ["run", "--path", "p", "--count", "0"]).exit_code == 2  # below min
    assert runner.invoke(app, ["run", "--path", "p", "--tags", "x", "-q", "--bins", "4"]).exit_code == 0
    assert PlantedCommand(**seen["own"]) == PlantedCommand("p", 3, ("x",), True, None)
    assert seen["planted"] == {"n_bins": 4}
    assert [n for _, n, *_ in config_options(PlantedCommand)] == ["path", "count", "tags", "quiet", "shared"]
