"""Lazy package attributes: a package names what it offers, and each name's module loads on first use.

Used by the packages whose modules import torch or mlflow (``layers``, ``models``, ``training``),
so that their torch-free parts (configs, choices) can be imported by ``cli.py --help`` and by the
configs of other stages without importing torch::

    __getattr__, __dir__ = lazy(__name__, {"train": "loop", "TrainConfig": "config"})

A name may not be its submodule's name (the import system sets ``package.<submodule>`` to the
module when the submodule is imported directly, which would hide the name): ``lazy`` refuses one.
"""

from __future__ import annotations

import importlib
import sys
from typing import Callable


def lazy(package: str, homes: dict[str, str]) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``: ``homes`` maps a public name to its submodule."""

    def __getattr__(name: str):
        if name not in homes:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{homes[name]}"), name)
        setattr(sys.modules[package], name, value)  # later look-ups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(homes))

    same = sorted(name for name, home in homes.items() if name == home)
    if same:
        raise ValueError(f"{package}: {same} would name both a submodule and an attribute; rename the submodule")
    return __getattr__, __dir__
