"""pipeline.core.lazy: a package's names load their module on first use, once; the torch-importing packages
stay cheap to import."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def pkg(tmp_path, monkeypatch):
    """A package ``lazypkg`` whose ``thing`` lives in ``lazypkg.heavy`` (which counts its imports)."""
    root = tmp_path / "lazypkg"
    root.mkdir()
    (root / "__init__.py").write_text(
        "from pipeline.core.lazy import lazy\n"
        "LIGHT = 1\n"
        "__getattr__, __dir__ = lazy(__name__, {'thing': 'heavy', 'other': 'heavy'})\n")
    (root / "heavy.py").write_text(
        "import builtins\n"
        "builtins.lazypkg_imports = getattr(builtins, 'lazypkg_imports', 0) + 1\n"
        "thing = object()\n"
        "other = 'o'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield importlib.import_module("lazypkg")
    for name in ("lazypkg", "lazypkg.heavy"):
        sys.modules.pop(name, None)
    import builtins

    if hasattr(builtins, "lazypkg_imports"):
        del builtins.lazypkg_imports


def test_names_load_their_module_on_first_use_only(pkg):
    import builtins

    assert "lazypkg.heavy" not in sys.modules  # importing the package loads nothing
    assert {"thing", "other", "LIGHT"} <= set(dir(pkg))  # listed before use
    thing = pkg.thing
    assert "lazypkg.heavy" in sys.modules and thing is sys.modules["lazypkg.heavy"].thing
    assert vars(pkg)["thing"] is thing  # cached on the package: later look-ups skip __getattr__
    from lazypkg import other
    from lazypkg import thing as again

    assert again is thing and other == "o"
    assert builtins.lazypkg_imports == 1  # the module ran once


def test_a_name_of_its_own_submodule_is_refused():
    """A name that is also its submodule's would be hidden by the module once the submodule is imported
    directly: ``lazy`` refuses it rather than patch the package's class."""
    from pipeline.core.lazy import lazy

    with pytest.raises(ValueError, match=r"\['run'\] would name both a submodule and an attribute"):
        lazy("somepkg", {"run": "run", "other": "heavy"})


def test_extract_is_the_function_whatever_was_imported_first():
    code = ("from pipeline.data.mimic.extraction.flow import write_parquet\n"
            "from pipeline.data.mimic.extraction import extract\n"
            "import inspect; assert inspect.isfunction(extract), extract\n"
            "print('ok')\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0 and proc.stdout == "ok\n", proc.stderr[-2000:]


def test_unknown_names_are_attribute_errors(pkg):
    with pytest.raises(AttributeError, match="module 'lazypkg' has no attribute 'nothing'"):
        pkg.nothing  # noqa: B018
    assert not hasattr(pkg, "heavy_thing") and "lazypkg.heavy" not in sys.modules
    with pytest.raises(ImportError):
        from lazypkg import nothing  # noqa: F401


def test_torch_packages_import_without_torch():
    """The lazy packages' configs and choices import without torch (what ``cli.py --help`` relies on)."""
    code = ("import sys\n"
            "import pipeline.bayes.layers, pipeline.tasks.mortality, pipeline.engine\n"
            "from pipeline.tasks.mortality import ModelKind, MortalityConfig\n"
            "from pipeline.tasks.mortality import TrainConfig\n"
            "import pipeline.tasks.base, pipeline.core.tables\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n"
            "print('ok')\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0 and proc.stdout == "ok\n", proc.stderr[-2000:]
