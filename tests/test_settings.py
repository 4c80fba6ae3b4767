"""pipeline.cli.settings: a command's fields laid out as a settings file's keys, values read from TOML and
from --set words (typed by their field, checked against the option's limits), and the file written back."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import ClassVar

import pytest

from pipeline.cli.settings import layout, read_file, read_words, render
from pipeline.core.errors import ConfigError


class Shade(str, Enum):
    LIGHT = "light"
    DARK = "dark"


@dataclass
class Own:
    """A command's own options."""

    path: Path  # required: on the command line only
    name: str = "x"  # a name
    jobs: int = field(default=2, metadata={"min": 1})  # workers
    COMMAND_OPTIONS: ClassVar[bool] = True


@dataclass
class Net:
    """A config."""

    width: int = 4  # units
    rate: float = 0.5  # a rate
    shade: Shade = Shade.LIGHT  # a colour
    clip: float | None = None  # a clip (unset: none)
    tags: tuple[str, ...] = ()  # tags
    label: str | None = None  # a label
    on: bool = False  # a switch
    kl_weight: float = 1.0  # a weight


LAYOUT = layout((Own, Net), sections={Net: "net"}, keys={(Own, "name"): "net.name"},
                limits={(Net, "width"): {"min": 1}})


def test_keys_sit_at_the_top_or_in_their_table_and_required_fields_are_not_keys():
    assert list(LAYOUT.keys) == ["jobs", "net.name", "net.width", "net.rate", "net.shade", "net.clip", "net.tags",
                                 "net.label", "net.on", "net.kl_weight"]
    assert [k.field for k in LAYOUT.required] == ["path"] and LAYOUT.bare["name"] == "net.name"
    with pytest.raises(ValueError, match="settings key 'jobs' of Clash.jobs is taken"):
        @dataclass
        class Clash:
            jobs: int = 1  # workers again

        layout((Own, Clash))


@pytest.mark.parametrize("word, field_name, value", [
    ("net.width=8", "width", 8), ("width=8", "width", 8), ("rate=1", "rate", 1.0), ("shade=dark", "shade", Shade.DARK),
    ("clip=none", "clip", None), ("clip=null", "clip", None), ("clip=2.5", "clip", 2.5), ("tags=a", "tags", ("a",)),
    ('tags=["a", "b"]', "tags", ("a", "b")), ("label=123", "label", "123"), ('label="q"', "label", "q"),
    ("label=none", "label", "none"), ("on=true", "on", True), ("net.kl-weight=2", "kl_weight", 2.0),
    ("jobs=3", "jobs", 3),
])
def test_set_words_are_typed_by_their_field(word, field_name, value):
    ((key, got, where),) = read_words([word], LAYOUT)
    assert key.field == field_name and got == value and type(got) is type(value)
    assert where == f"--set {word.split('=')[0]}"


@pytest.mark.parametrize("word, message", [
    ("width=wide", "--set width must be an integer, got 'wide'"),
    ("width=2.5", "--set width must be an integer, got 2.5"),
    ("width=0", "--set width must be >= 1, got 0"),
    ("jobs=0", "--set jobs must be >= 1, got 0"),
    ("on=1", "--set on must be true or false, got 1"),
    ("shade=blue", "--set shade must be one of ['light', 'dark'], got 'blue'"),
    ("net.width", "--set 'net.width': expected KEY=VALUE"),
    ("net.widht=3", "--set 'net.widht=3': unknown key 'net.widht' (did you mean 'net.width'?)"),
    ("path=p", "--set 'path=p': 'path' has no default: give it on the command line"),
])
def test_a_bad_word_is_one_error_naming_it(word, message):
    with pytest.raises(ConfigError) as err:
        read_words([word], LAYOUT)
    assert str(err.value).startswith(message), str(err.value)


def test_a_file_is_read_by_key_and_written_back(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text('jobs = 3\nwidth = 6\n[net]\nname = "n"\nrate = 0.25\nshade = "dark"\ntags = ["t"]\n')
    read = read_file(path, LAYOUT)
    values = {Own: {"jobs": 3, "name": "n", "path": Path("p")}, Net: {}}
    for key, value, _ in read:
        values[key.cls][key.field] = value
    assert values[Net] == {"width": 6, "rate": 0.25, "shade": Shade.DARK, "tags": ("t",)}
    given = {(k.cls, k.field) for k, _, _ in read} | {(Net, "clip")}  # clip set to None: written as "none"
    defaults = {Own: values[Own], Net: {"width": 4, "rate": 0.5, "shade": Shade.LIGHT, "clip": None, "tags": (),
                                        "label": None, "on": False, "kl_weight": 1.0, **values[Net]}}
    text = render(LAYOUT, defaults, given, ["a header"])
    assert text.startswith("# a header\n\njobs = 3\n\n[net]\nname = \"n\"\nwidth = 6\n")
    assert "# label: unset" in text and "# on = false" in text and 'clip = "none"' in text
    (tmp_path / "t.toml").write_text(text)
    again = {(k.field, v) for k, v, _ in read_file(tmp_path / "t.toml", LAYOUT)}
    assert again == {(k.field, v) for k, v, _ in read} | {("clip", None)}
    assert tomllib.loads(text)["net"]["shade"] == "dark"


@pytest.mark.parametrize("text, message", [
    ("[net]\nwidth = 'w'\n", "s.toml: net.width must be an integer, got 'w'"),
    ("[net.deep]\nx = 1\n", "s.toml: unknown key 'net.deep.x'"),
    ("width = \n", "--config {path}: not TOML: "),
])
def test_a_bad_file_names_the_file_and_the_key(tmp_path, text, message):
    path = tmp_path / "s.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        read_file(path, LAYOUT)
    assert message.format(path=path) in str(err.value), str(err.value)
