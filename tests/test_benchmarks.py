"""benchmarks/ and experiments/ are packages run as ``python -m benchmarks.NAME`` / ``python -m experiments.NAME``:
no ``sys.path`` lines, scripts import each other through their package, benchmarks never import experiments,
and every script shows its ``--help`` the way ``python -m`` runs it."""

from __future__ import annotations

import ast
import runpy
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("benchmarks", "experiments")
MODULES = sorted(p for pkg in PACKAGES for p in (ROOT / pkg).glob("*.py") if p.name != "__init__.py")


def dotted(path: Path) -> str:
    return f"{path.parent.name}.{path.stem}"


def test_both_are_packages_with_a_readme():
    for pkg in PACKAGES:
        assert (ROOT / pkg / "__init__.py").exists(), f"{pkg}/ has no __init__.py"
        assert (ROOT / pkg / "README.md").exists(), f"{pkg}/ has no README.md saying what belongs there"
    assert {dotted(p) for p in MODULES} >= {"benchmarks.extract", "benchmarks.report", "experiments.paired_compare"}


@pytest.mark.parametrize("path", MODULES, ids=dotted)
def test_no_path_manipulation(path):
    text = path.read_text(encoding="utf-8")
    for pattern in ("sys.path", "PYTHONPATH", "spec_from_file_location"):
        assert pattern not in text, f"{path.relative_to(ROOT)}: {pattern} (import through the package instead)"


@pytest.mark.parametrize("path", MODULES, ids=dotted)
def test_imports_go_through_the_packages(path):
    """``import report`` / ``from paired_compare import ...`` only worked with the script's folder on sys.path;
    a benchmark importing an experiment would make the cost of a thing depend on a study of it."""
    siblings = {p.stem for p in MODULES}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else [])
        for name in names:
            top = name.split(".")[0]
            where = f"{path.relative_to(ROOT)}:{node.lineno}: import {name}"
            assert top not in siblings, f"{where} (import it as {PACKAGES[0]}.{top} or {PACKAGES[1]}.{top})"
            assert not (path.parent.name == "benchmarks" and top == "experiments"), f"{where} (benchmarks/ never " \
                                                                                    "imports experiments/)"


def _is_script(path: Path) -> bool:
    return 'if __name__ == "__main__":' in path.read_text(encoding="utf-8")


@pytest.mark.parametrize("path", MODULES, ids=dotted)
@pytest.mark.filterwarnings("ignore:.*found in sys.modules:RuntimeWarning")  # runpy of an imported module
def test_each_runs_as_a_module(path, monkeypatch, capsys):
    """A script prints its usage for ``--help`` (as ``python -m`` runs it: runpy, the module as __main__); a
    helper module imports."""
    module = dotted(path)
    if not _is_script(path):
        __import__(module)
        return
    monkeypatch.setattr(sys, "argv", [str(path), "--help"])
    with pytest.raises(SystemExit) as done:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    assert done.value.code in (0, None), f"python -m {module} --help exited {done.value.code}"
    assert "usage:" in capsys.readouterr().out, f"python -m {module} --help printed no usage"
