"""pipeline.configs: a config's fields as JSON-able values, and each field's one-line comment as its
help (read from the source), which every config dataclass of the library must have."""

from __future__ import annotations

import ast
import importlib
from dataclasses import dataclass, field, fields
from enum import Enum
from pathlib import Path

import pytest

from pipeline.configs import config_dict, field_help

ROOT = Path(__file__).resolve().parents[1]


class Color(str, Enum):
    red = "red"
    blue = "blue"


@dataclass
class Example:
    size: int = 3  # how many
    color: Color = Color.red  # which colour: red or blue
    nested: dict = field(default_factory=lambda: {"c": Color.blue, "deep": {"c": Color.red}})  # overrides
    plain: str = "x"
    spread: tuple = (  # a value over
        1,  # lines: the last comment of the declaration wins
        2,
    )
    hash_in_default: str = "#not a comment"  # the comment after it
    ratio: float = 0.5  # a comment with # inside it

    def method(self) -> int:
        size = 4  # a local variable, not a field
        return size


def test_field_help_reads_each_fields_comment():
    assert field_help(Example) == {
        "size": "how many",
        "color": "which colour: red or blue",
        "nested": "overrides",
        "spread": "lines: the last comment of the declaration wins",
        "hash_in_default": "the comment after it",
        "ratio": "a comment with # inside it",
    }  # `plain` has no comment; `method`'s local is no field


def test_config_dict_gives_enum_values_also_nested():
    assert config_dict(Example()) == {"size": 3, "color": "red", "nested": {"c": "blue", "deep": {"c": "red"}},
                                      "plain": "x", "spread": (1, 2), "hash_in_default": "#not a comment",
                                      "ratio": 0.5}


def _config_classes() -> list[tuple[str, str]]:
    """(module, class) of every ``@dataclass`` named ``*Config`` under pipeline/."""
    out = []
    for path in sorted((ROOT / "pipeline").rglob("*.py")):
        tree = ast.parse(path.read_text())
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name.endswith("Config") and any(
                    "dataclass" in ast.unparse(d) for d in node.decorator_list):
                out.append((module, node.name))
    return out


CONFIGS = _config_classes()


def test_the_walk_finds_the_configs():
    names = {name for _, name in CONFIGS}
    assert {"ExtractConfig", "TrainConfig", "MortalityConfig", "EvalConfig", "ScoreConfig", "SynthConfig"} <= names


@pytest.mark.parametrize("module, name", CONFIGS)
def test_every_config_field_has_a_comment(module, name):
    """The CLI's option help and the docs come from these comments (one per field)."""
    cls = getattr(importlib.import_module(module), name)
    helps = field_help(cls)
    missing = [f.name for f in fields(cls) if not helps.get(f.name)]
    assert not missing, f"{module}.{name}: fields without a comment: {missing}"
