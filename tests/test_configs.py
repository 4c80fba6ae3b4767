"""pipeline.core.configs: a config's fields as JSON-able values; every config validates itself and its errors
name the fields as the class writes them (the command line says them as typed: tests/test_cli.py); each
field's one-line comment is its help (read from the source by pipeline.cli.comments), which every config
dataclass of the library must have."""

from __future__ import annotations

import ast
import importlib
from dataclasses import dataclass, field, fields
from enum import Enum
from pathlib import Path

import pytest

from pipeline.cli.comments import field_help
from pipeline.core.configs import config_dict

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


@dataclass
class Wrapped:
    long: int = 1  # the first part of a long help,
        # its second part
        # and its third
    # a comment at the field's indentation is no continuation
    next_one: int = 2  # its own help
    after_blank: int = 3  # one line

        # a deeper comment after a blank line is no continuation either
    bare: int = 4
        # nor a deeper comment below a field without one
    last: int = 5  # ends
            # deeper still goes on

    def method(self) -> int:
        # a method's comment, deeper than the fields, continues nothing
        return self.last


def test_field_help_joins_a_comment_over_the_deeper_comment_lines_below_it():
    assert field_help(Wrapped) == {
        "long": "the first part of a long help, its second part and its third",
        "next_one": "its own help",
        "after_blank": "one line",
        "last": "ends deeper still goes on",
    }


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


# ---- every config validates itself; errors name the fields (and say which) -------------------
TRAIN_CONFIG = "pipeline.tasks.mortality.train_config"
EXTRACT_CONFIG = "pipeline.data.mimic.extraction.config"
BASELINE_CONFIG = "pipeline.tasks.mortality.baselines.config"


def _cfg(module: str, name: str):
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("module, name, kwargs, message, named", [
    (TRAIN_CONFIG, "TrainConfig", {"max_steps": -1}, "max_steps must be >= 0 (0: off), got -1", ("max_steps",)),
    (TRAIN_CONFIG, "TrainConfig", {"max_steps": 0, "max_epochs": 0},
     "max_steps and max_epochs are both off: training needs one of them to end", ("max_steps", "max_epochs")),
    (TRAIN_CONFIG, "TrainConfig", {"threads": 0}, "threads must be >= 1, got 0", ("threads",)),
    (TRAIN_CONFIG, "TrainConfig", {"lr": 0.0}, "lr must be > 0, got 0.0", ("lr",)),
    (TRAIN_CONFIG, "TrainConfig", {"anneal_steps": -1}, "anneal_steps must be >= 0, got -1", ("anneal_steps",)),
    (TRAIN_CONFIG, "TrainConfig", {"refer_fraction": 1.0}, "refer_fraction must lie in [0, 1)", ("refer_fraction",)),
    (TRAIN_CONFIG, "TrainConfig", {"nll": "sum"}, "nll must be one of", ("nll",)),
    (EXTRACT_CONFIG, "ExtractConfig", {"train_fraction": 0.9, "val_fraction": 0.3},
     "train_fraction 0.9 + val_fraction 0.3 must be < 1", ("train_fraction", "val_fraction")),
    (EXTRACT_CONFIG, "ExtractConfig", {"train_fraction": 1.2}, "train_fraction must lie in (0, 1)",
     ("train_fraction", "val_fraction")),
    (EXTRACT_CONFIG, "ExtractConfig", {"n_bins": 0}, "n_bins must be >= 1, got 0", ("n_bins",)),
    (EXTRACT_CONFIG, "ExtractConfig", {"scan_workers": 0}, "scan_workers must be >= 1", ("scan_workers",)),
    (EXTRACT_CONFIG, "ExtractConfig", {"prediction_hours": -1.0}, "prediction_hours must be a positive",
     ("prediction_hours",)),
    (EXTRACT_CONFIG, "ExtractConfig", {"split": "by-year"}, "split must be one of ['random', 'era']", ("split",)),
    ("pipeline.workflows.evaluate_config", "EvalConfig", {"n_bootstrap": -1}, "n_bootstrap must be >= 0, got -1",
     ("n_bootstrap",)),
    ("pipeline.workflows.evaluate_config", "EvalConfig", {"threads": 0}, "threads must be >= 1", ("threads",)),
    ("pipeline.serving.config", "ScoreConfig", {"chunk_rows": 0}, "chunk_rows must be >= 1, got 0", ("chunk_rows",)),
    ("pipeline.serving.server", "ServeConfig", {"model": "m", "timeout_s": 0}, "timeout_s must be >= 1, got 0",
     ("timeout_s",)),
    ("pipeline.serving.server", "ServeConfig", {"model": "m", "max_body_mb": 0}, "max_body_mb must be > 0",
     ("max_body_mb",)),
    ("pipeline.tasks.mortality.config", "MortalityConfig", {"token_vocab": 5, "context_vocab": 5, "lstm_hidden": 0},
     "lstm_hidden must be >= 1, got 0", ("lstm_hidden",)),
    ("pipeline.tasks.mortality.config", "MortalityConfig", {"token_vocab": 0, "context_vocab": 5},
     "token_vocab must be >= 1, got 0", ("token_vocab",)),
    ("pipeline.tasks.mortality.config", "MortalityConfig", {"token_vocab": 5, "context_vocab": 5, "bag_mode": "max"},
     "bag_mode must be one of", ("bag_mode",)),
    ("pipeline.tasks.mortality.config", "MortalityConfig", {"token_vocab": 5, "context_vocab": 5,
                                                            "value_channel": True, "bag_mode": "attention"},
     "value_channel pools linearly: bag_mode mean or sum, not attention", ("value_channel", "bag_mode")),
    ("pipeline.tasks.vision.model_config", "VisionConfig", {"depth": 11}, "depth must be 6n + 4", ("depth",)),
    ("pipeline.tasks.vision.model_config", "VisionConfig", {"clip": 0.0}, "clip must be > 0 or unset", ("clip",)),
    ("pipeline.tasks.vision.config", "VisionTrainConfig", {"dataset": "cifar10"},
     "data_dir is required for dataset cifar10", ("data_dir", "dataset")),
    ("pipeline.tasks.vision.config", "VisionTrainConfig", {"batch_size": 0}, "batch_size must be >= 1",
     ("batch_size",)),
    ("pipeline.tasks.vision.config", "VisionEvalConfig", {"severities": (9,)}, "severities must be some of",
     ("severities",)),
    ("pipeline.bayes.laplace.config", "LaplaceConfig", {"subnet_size": 0}, "subnet_size must be >= 1, got 0",
     ("subnet_size",)),
    ("pipeline.bayes.laplace.config", "LaplaceConfig", {"batch_size": 0}, "batch_size must be >= 1, got 0",
     ("batch_size",)),
    ("pipeline.bayes.laplace.config", "LaplaceConfig", {"hessian": "diag", "subnet_size": 10},
     "hessian diag is diagonal Laplace over every weight: leave subnet_size unset", ("hessian", "subnet_size")),
    (BASELINE_CONFIG, "BaselineConfig", {"threads": 0}, "threads must be >= 1", ("threads",)),
    (BASELINE_CONFIG, "BaselineConfig", {"gbm_patience": 0}, "gbm_patience must be >= 1, got 0", ("gbm_patience",)),
    ("pipeline.data.mimic.synth.simulation", "SynthConfig", {"density": 0.0}, "density must be in (0, 10]",
     ("density",)),
    ("pipeline.data.mimic.synth.simulation", "SynthConfig", {"chunk_patients": 0}, "chunk_patients must be >= 1", ()),
])
def test_configs_refuse_bad_settings_naming_the_fields(module, name, kwargs, message, named):
    """A config's own check names its fields as the class writes them (no flag, no class name) and says
    which (``fields``, ``config``): what the command line spells as the user typed them."""
    from pipeline.core.errors import PipelineError

    with pytest.raises(PipelineError) as err:
        _cfg(module, name)(**kwargs)
    text = str(err.value)
    assert text.startswith(message), text
    assert f"{name}." not in text and f"{name}:" not in text and "--" not in text  # no class names, no flags
    assert err.value.fields == named and (err.value.config is _cfg(module, name) or not named)
