"""The import graph of `pipeline/`: no circle, and none of the forbidden arrows that
docs/architecture.md lists (its ``forbidden-imports`` block is this test's list). Every import
counts, inside functions too, so a function-level import cannot hide a circle. No module is
over ~400 lines unless its docstring says why it is one concern."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "pipeline"
MAX_LINES = 420  # "about 400"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def lazy_homes(package: str) -> dict[str, str]:
    """Name -> submodule of a package whose names load lazily (``pipeline.lazy``)."""
    mod = importlib.import_module(package)
    return {k: f"{package}.{v}" for k, v in getattr(mod, "_HOMES", {}).items()}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """Pipeline modules imported anywhere in ``path`` (``from pkg import X`` -> ``pkg.X`` when X is a
    module, the module a lazy package loads X from, else ``pkg``)."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "pipeline"}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            if target.split(".")[0] != "pipeline":
                continue
            homes = lazy_homes(target) if target in known else {}
            for a in node.names:
                sub = f"{target}.{a.name}"
                out.add(sub if sub in known else homes.get(a.name, target))
    return {m for m in out if m in known and m != name}


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {name: imports_of(name, path, set(mods)) for name, path in mods.items()}


def forbidden_rules() -> list[tuple[str, str, set[str]]]:
    """(importer prefix, imported prefix, allowed exceptions) from docs/architecture.md."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = re.search(r"```forbidden-imports\n(.*?)```", text, re.S)
    assert block, "docs/architecture.md has no ```forbidden-imports block"
    rules = []
    for line in block.group(1).splitlines():
        line = line.split("#")[0].strip()
        if not line:
            continue
        m = re.match(r"^(\S+)\s+->\s+(\S+)(?:\s+except\s+(.+))?$", line)
        assert m, f"cannot read rule {line!r}"
        rules.append((m.group(1), m.group(2), set((m.group(3) or "").replace(",", " ").split())))
    return rules


def _under(module: str, prefix: str) -> bool:
    return prefix == "*" or module == prefix or module.startswith(prefix + ".")


def test_no_import_circle():
    g = graph()
    index, low, stack, on, cycles = {}, {}, [], set(), []

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in g[v]:
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
                cycles.append(sorted(comp))

    for v in g:
        if v not in index:
            visit(v)
    assert not cycles, f"import circles: {cycles}"


def test_no_forbidden_arrow():
    g = graph()
    bad = []
    for importer, imported, allowed in forbidden_rules():
        for mod, deps in g.items():
            if not _under(mod, importer):
                continue
            bad += [f"{mod} -> {d}" for d in deps
                    if _under(d, imported) and not _under(d, importer) and d not in allowed]
    assert not bad, "forbidden imports:\n" + "\n".join(sorted(set(bad)))


def test_the_rules_bite():
    """The reader finds a planted arrow: a synthetic graph edge of each rule is reported."""
    rules = forbidden_rules()
    assert len(rules) >= 5
    mods = set(modules())
    for importer, imported, _ in rules:
        assert any(_under(m, importer) for m in mods), f"rule names no module: {importer}"
        assert any(_under(m, imported) for m in mods), f"rule names no module: {imported}"


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
