"""The import graph of `pipeline/`: no circle, and none of the forbidden arrows that
docs/architecture.md lists (its ``forbidden-imports`` block is this test's list). Every import
counts, inside functions too, so a function-level import cannot hide a circle. No module is
over ~400 lines unless its docstring says why it is one concern.

The checker (``graph``, ``forbidden_rules``, ``forbidden_arrows``, ``cycles``) takes a package
folder and a rules text, so ``test_the_rules_bite`` runs it on a small planted package."""

from __future__ import annotations

import ast
import importlib
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "pipeline"
MAX_LINES = 420  # "about 400"
CORE = ("errors", "contracts", "configs", "lazy", "fileio", "redact", "deid", "privacy", "sqlgen",
        "devices")  # pipeline/*.py
STAGES = ("sources", "extraction", "synth", "features", "batches", "layers", "models", "metrics", "predict",
          "progress", "runs", "training", "evaluation", "serving", "laplace", "vision", "grid", "baselines")


def module_name(path: Path, pkg_dir: Path) -> str:
    parts = path.relative_to(pkg_dir.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(pkg_dir: Path = PKG) -> dict[str, Path]:
    return {module_name(p, pkg_dir): p for p in sorted(pkg_dir.rglob("*.py"))}


def lazy_homes(package: str) -> dict[str, str]:
    """Name -> submodule of a package whose names load lazily (``pipeline.lazy``)."""
    mod = importlib.import_module(package)
    return {k: f"{package}.{v}" for k, v in getattr(mod, "_HOMES", {}).items()}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """Modules of the same top package imported anywhere in ``path`` (``from pkg import X`` -> ``pkg.X``
    when X is a module, the module a lazy package loads X from, else ``pkg``)."""
    top = name.split(".")[0]
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == top}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            if target.split(".")[0] != top:
                continue
            homes = lazy_homes(target) if target in known else {}
            for a in node.names:
                sub = f"{target}.{a.name}"
                out.add(sub if sub in known else homes.get(a.name, target))
    return {m for m in out if m in known and m != name}


def graph(pkg_dir: Path = PKG) -> dict[str, set[str]]:
    mods = modules(pkg_dir)
    return {name: imports_of(name, path, set(mods)) for name, path in mods.items()}


def rules_text(doc: Path = ROOT / "docs" / "architecture.md") -> str:
    """The ``forbidden-imports`` block of a Markdown page."""
    block = re.search(r"```forbidden-imports\n(.*?)```", doc.read_text(), re.S)
    assert block, f"{doc} has no ```forbidden-imports block"
    return block.group(1)


def forbidden_rules(text: str) -> list[tuple[str, str, set[str]]]:
    """(importer prefix, imported prefix, allowed exceptions) of a rules text: ``A -> B [except C, D]``
    per line; ``@name = X Y ...`` names a list (indented lines below it continue it), and ``@name``
    on either side of a rule stands for each of its entries (one rule per pair)."""
    lists: dict[str, list[str]] = {}
    rules, last = [], None
    for raw in text.splitlines():
        line = raw.split("#")[0].strip()
        if not line:
            continue
        if last is not None and raw[:1].isspace() and "->" not in line:
            lists[last] += line.replace(",", " ").split()
            continue
        alias = re.match(r"^(@\w+)\s*=\s*(.+)$", line)
        last = alias.group(1) if alias else None
        if alias:
            lists[last] = alias.group(2).replace(",", " ").split()
            continue
        m = re.match(r"^(\S+)\s+->\s+(\S+)(?:\s+except\s+(.+))?$", line)
        assert m, f"cannot read rule {line!r}"
        allowed = set((m.group(3) or "").replace(",", " ").split())
        for side in (m.group(1), m.group(2)):
            assert not side.startswith("@") or side in lists, f"rule {line!r}: {side} is not defined above it"
        for importer in lists.get(m.group(1), [m.group(1)]):
            rules += [(importer, imported, allowed) for imported in lists.get(m.group(2), [m.group(2)])]
    return rules


def _under(module: str, prefix: str) -> bool:
    return prefix == "*" or module == prefix or module.startswith(prefix + ".")


def forbidden_arrows(g: dict[str, set[str]], rules: list[tuple[str, str, set[str]]]) -> list[str]:
    """``importer -> imported`` for every edge of ``g`` that a rule forbids (sorted, unique)."""
    bad = []
    for importer, imported, allowed in rules:
        for mod, deps in g.items():
            if not _under(mod, importer):
                continue
            bad += [f"{mod} -> {d}" for d in deps
                    if _under(d, imported) and not _under(d, importer) and d not in allowed]
    return sorted(set(bad))


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of ``g`` (strongly connected components of more than one module)."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(g[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return found


def test_no_import_circle():
    assert not (found := cycles(graph())), f"import circles: {found}"


def test_no_forbidden_arrow():
    bad = forbidden_arrows(graph(), forbidden_rules(rules_text()))
    assert not bad, "forbidden imports:\n" + "\n".join(bad)


def test_the_core_imports_no_stage():
    """docs/architecture.md forbids every core module every stage package (one rule line per core module)."""
    rules = {(a, b) for a, b, _ in forbidden_rules(rules_text())}
    missing = [f"pipeline.{c} -> pipeline.{s}" for c in CORE for s in STAGES
               if (f"pipeline.{c}", f"pipeline.{s}") not in rules]
    assert not missing, "rules missing from docs/architecture.md:\n" + "\n".join(missing)
    on_disk = ({p.stem for p in PKG.glob("*.py") if p.stem != "__init__"}
               | {p.name for p in PKG.iterdir() if (p / "__init__.py").exists()})
    assert on_disk == set(CORE) | set(STAGES), "a module of pipeline/ is neither core nor a stage here"


def _plant(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root / next(iter(files)).split("/")[0]


def test_the_rules_bite(tmp_path, monkeypatch):
    """The checker reports a planted function-level import, a relative import and an import through a
    lazy package's name, and lets an ``except`` pass; a planted circle is found."""
    pkg = _plant(tmp_path, {
        "planted/__init__.py": "",
        "planted/core.py": "def f():\n    from planted.stage import thing  # inside a function\n    return thing\n",
        "planted/core2.py": "from .stage import thing  # relative\n",
        "planted/core3.py": "from planted.lazystage import Heavy  # a lazy package's name\n",
        "planted/core4.py": "from planted.stage import allowed\n",
        "planted/stage/__init__.py": "",
        "planted/stage/thing.py": "",
        "planted/stage/allowed.py": "",
        "planted/lazystage/__init__.py": "_HOMES = {'Heavy': 'heavy'}\n",
        "planted/lazystage/heavy.py": "import planted.core4\n",
        "planted/circle/__init__.py": "",
        "planted/circle/a.py": "from . import b\n",
        "planted/circle/b.py": "def g():\n    import planted.circle.a\n",
    })
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        g = graph(pkg)
    finally:  # lazy_homes imported the planted packages
        for name in [m for m in sys.modules if m == "planted" or m.startswith("planted.")]:
            del sys.modules[name]
    assert g["planted.core"] == {"planted.stage.thing"} and g["planted.core2"] == {"planted.stage.thing"}
    assert g["planted.core3"] == {"planted.lazystage.heavy"}
    rules = forbidden_rules("@core = planted.core planted.core2\n  planted.core3, planted.core4  # continued\n"
                            "@core -> planted.stage except planted.stage.allowed\n"
                            "planted.core3 -> planted.lazystage  # the lazy name's home\n")
    assert len(rules) == 5
    assert forbidden_arrows(g, rules) == ["planted.core -> planted.stage.thing", "planted.core2 -> planted.stage.thing",
                                          "planted.core3 -> planted.lazystage.heavy"]
    assert cycles(g) == [["planted.circle.a", "planted.circle.b"]]
    with pytest.raises(AssertionError, match="@stages is not defined"):
        forbidden_rules("planted.core -> @stages\n")


def test_nothing_imports_the_cli():
    for path in PKG.rglob("*.py"):
        tree = ast.parse(path.read_text())
        names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        names += [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module]
        assert "cli" not in names, path


@pytest.mark.parametrize("path", sorted(PKG.rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_module_size(path):
    lines = len(path.read_text().splitlines())
    if lines <= MAX_LINES:
        return
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    assert "one concern" in doc.lower(), f"{path}: {lines} lines and no docstring saying why it is one concern"
