"""Lazy package attributes: a package names what it offers, and each name's module loads on first use.

Used by the packages whose modules import torch or mlflow (``layers``, ``models``, ``training``),
so that their torch-free parts (configs, choices) can be imported by ``cli.py --help`` and by the
configs of other stages without importing torch::

    __getattr__, __dir__ = lazy(__name__, {"train": "loop", "TrainConfig": "config"})

A name that is also its submodule's name (``extraction.extract``, the function in ``extract.py``)
stays the name: the import system sets ``package.<submodule>`` to the module when the submodule
is first imported directly (``from pipeline.extraction.extract import write_parquet``), which
would otherwise make a later ``from pipeline.extraction import extract`` the module.
"""

from __future__ import annotations

import importlib
import sys
import types
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

    same = {name for name, home in homes.items() if name == home}
    if same:
        module = sys.modules[package]

        class Package(type(module)):
            def __setattr__(self, name: str, value) -> None:
                if name in same and isinstance(value, types.ModuleType) and value.__name__ == f"{package}.{name}":
                    value = getattr(value, name)  # the submodule just loaded: the name, not the module
                super().__setattr__(name, value)

        module.__class__ = Package
    return __getattr__, __dir__
