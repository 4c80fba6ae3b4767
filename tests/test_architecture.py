"""The import graph of `pipeline/` (and of `benchmarks/`, `experiments/` and `cli.py` beside it): every
import runs down the ordered layers of docs/architecture.md (its ``layers`` block is this test's list),
each package imports only what its ``rules`` line allows, every module is in a layer, and there is no
circle between modules or packages. Every import counts, inside functions too, so a function-level
import cannot hide an arrow. No module is over ~400 lines (no docstring waives it).

The checker (``graph``, ``read_layers``, ``layer_violations``, ``read_rules``, ``rule_violations``,
``package_graph``, ``cycles``) takes a package folder and a rules text, so ``test_the_rules_bite`` and
``test_the_package_rules_bite`` run it on small planted packages."""

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


def module_name(path: Path, pkg_dir: Path) -> str:
    parts = path.relative_to(pkg_dir.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(pkg_dir: Path = PKG) -> dict[str, Path]:
    return {module_name(p, pkg_dir): p for p in sorted(pkg_dir.rglob("*.py"))}


def lazy_homes(package: str) -> dict[str, str]:
    """Name -> submodule of a package whose names load lazily (``pipeline.core.lazy``)."""
    mod = importlib.import_module(package)
    return {k: f"{package}.{v}" for k, v in getattr(mod, "_HOMES", {}).items()}


def imports_of(name: str, path: Path, known: set[str], tops: set[str] | None = None) -> set[str]:
    """Modules of the top packages ``tops`` (default: ``name``'s own) imported anywhere in ``path``
    (``from pkg import X`` -> ``pkg.X`` when X is a module, the module a lazy package loads X from, else
    ``pkg``)."""
    tops = tops or {name.split(".")[0]}
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] in tops}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            if target.split(".")[0] not in tops:
                continue
            homes = lazy_homes(target) if target in known else {}
            for a in node.names:
                sub = f"{target}.{a.name}"
                out.add(sub if sub in known else homes.get(a.name, target))
    return {m for m in out if m in known and m != name}


def graph(pkg_dir: Path = PKG) -> dict[str, set[str]]:
    mods = modules(pkg_dir)
    return {name: imports_of(name, path, set(mods)) for name, path in mods.items()}


def repo_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """The import graph of ``pipeline/``, ``benchmarks/``, ``experiments/`` and ``cli.py`` together."""
    mods = {**modules(root / "pipeline"), **modules(root / "benchmarks"), **modules(root / "experiments"),
            "cli": root / "cli.py"}
    tops = {"pipeline", "benchmarks", "experiments", "cli"}
    return {name: imports_of(name, path, set(mods), tops) for name, path in mods.items()}


def layers_text(doc: Path = ROOT / "docs" / "architecture.md", block: str = "layers") -> str:
    """The ``layers`` (or another named) block of a Markdown page."""
    found = re.search(rf"```{block}\n(.*?)```", doc.read_text(), re.S)
    assert found, f"{doc} has no ```{block} block"
    return found.group(1)


def read_rules(text: str) -> list[tuple[str, str, list[str]]]:
    """(subject, ``only`` | ``never``, names) per line of a rules text: ``A only B C`` (A's modules import
    nothing outside A but under B or C), ``A never B C`` (A's modules import nothing under B or C);
    ``#`` starts a comment."""
    rules = []
    for line in text.splitlines():
        words = line.split("#")[0].split()
        if not words:
            continue
        assert len(words) >= 2 and words[1] in ("only", "never"), f"not a rule: {line!r}"
        rules.append((words[0], words[1], words[2:]))
    return rules


def rule_violations(g: dict[str, set[str]], rules: list[tuple[str, str, list[str]]]) -> list[str]:
    """``importer -> imported (rule)`` for every edge of ``g`` that a rule forbids (sorted, unique)."""
    bad = []
    for subject, kind, names in rules:
        for mod, deps in g.items():
            if not _under(mod, subject):
                continue
            for d in deps:
                if _under(d, subject):
                    continue
                inside = any(_under(d, n) for n in names)
                if (kind == "only" and not inside) or (kind == "never" and inside):
                    bad.append(f"{mod} -> {d} ({subject} {kind} {' '.join(names)})".rstrip())
    return sorted(set(bad))


def read_layers(text: str) -> list[list[str]]:
    """The layers of a rules text, lowest first: one per line, its packages (or modules) separated by
    spaces; ``#`` starts a comment. A name may sit in one layer only."""
    layers = [line.split("#")[0].split() for line in text.splitlines()]
    layers = [layer for layer in layers if layer]
    names = [n for layer in layers for n in layer]
    assert len(names) == len(set(names)), f"a name is in two layers: {sorted(n for n in names if names.count(n) > 1)}"
    return layers


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def unit_of(module: str, layers: list[list[str]]) -> str | None:
    """The package (or core module) of ``layers`` that ``module`` belongs to: the longest that holds it."""
    held = [n for layer in layers for n in layer if _under(module, n)]
    return max(held, key=len) if held else None


def layer_violations(g: dict[str, set[str]], layers: list[list[str]]) -> list[str]:
    """``importer -> imported`` for every edge of ``g`` between two units where the imported one is not in
    a lower layer (same layer: peers; higher: upward), and every module in no layer (sorted, unique)."""
    rank = {n: i for i, layer in enumerate(layers) for n in layer}
    bad = []
    for mod, deps in g.items():
        um = unit_of(mod, layers)
        if um is None and "." not in mod:  # the top package's __init__ (its version): imports nothing
            assert not deps, f"{mod} imports {sorted(deps)}"
            continue
        if um is None:
            bad.append(f"{mod}: in no layer")
            continue
        for d in deps:
            ud = unit_of(d, layers)
            if ud is not None and ud != um and rank[ud] >= rank[um]:
                why = "a peer" if rank[ud] == rank[um] else "a higher layer"
                bad.append(f"{mod} -> {d} ({ud} is {why} of {um})")
    return sorted(set(bad))


def package_graph(g: dict[str, set[str]], layers: list[list[str]]) -> dict[str, set[str]]:
    """``g`` between the units of ``layers`` (a package's modules as one node)."""
    out: dict[str, set[str]] = {}
    for mod, deps in g.items():
        if (um := unit_of(mod, layers)) is None:
            continue
        out.setdefault(um, set())
        out[um] |= {u for d in deps if (u := unit_of(d, layers)) not in (None, um)}
    return out


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


def test_imports_run_down_the_layers():
    bad = layer_violations(graph(), read_layers(layers_text()))
    rules = rule_violations(repo_graph(), read_rules(layers_text(block="rules")))
    assert not bad + rules, "imports against docs/architecture.md's layers and rules:\n" + "\n".join(bad + rules)


def test_no_package_level_circle():
    pkgs = package_graph(graph(), read_layers(layers_text()))
    assert not (found := cycles(pkgs)), f"package circles: {found}"


def test_every_layer_unit_exists_and_every_module_has_one():
    """Each unit named in the layers is a module or package on disk, and every module of pipeline/ falls
    in one (nothing sits loose)."""
    layers = read_layers(layers_text())
    named = {n for layer in layers for n in layer}
    on_disk = set(modules())
    missing = sorted(n for n in named if n not in on_disk)
    assert not missing, f"named in the layers, not on disk: {missing}"
    loose = sorted(m for m in on_disk if "." in m and unit_of(m, layers) is None)
    assert not loose, f"on disk, in no layer: {loose}"


def test_the_package_rules_bite(tmp_path, monkeypatch):
    """``only`` and ``never`` rules report a planted import that breaks them and let the others pass."""
    pkg = _plant(tmp_path, {
        "planted/__init__.py": "",
        "planted/core/__init__.py": "",
        "planted/core/a.py": "from planted.core import b\n",
        "planted/core/b.py": "",
        "planted/toolbox/__init__.py": "",
        "planted/toolbox/t.py": "from planted.core import a\ndef f():\n    from planted.tasks.one import net\n",
        "planted/tasks/__init__.py": "",
        "planted/tasks/base.py": "",
        "planted/tasks/one/__init__.py": "",
        "planted/tasks/one/net.py": "from planted.toolbox import t\nfrom planted.tasks import base\n",
        "planted/engine/__init__.py": "",
        "planted/engine/loop.py": "from planted.tasks import base\nfrom planted.tasks.one import net\n",
    })
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        g = graph(pkg)
    finally:
        for name in [m for m in sys.modules if m == "planted" or m.startswith("planted.")]:
            del sys.modules[name]
    rules = read_rules("planted.core only  # nothing\n"
                       "planted.toolbox only planted.core\n"
                       "planted.tasks.one only planted.core planted.toolbox planted.tasks\n"
                       "planted.engine never planted.tasks.one\n")
    assert rule_violations(g, rules) == [
        "planted.engine.loop -> planted.tasks.one.net (planted.engine never planted.tasks.one)",
        "planted.toolbox.t -> planted.tasks.one.net (planted.toolbox only planted.core)"]
    with pytest.raises(AssertionError, match="not a rule"):
        read_rules("planted.core maybe planted.tasks\n")


def test_the_repository_graph_sees_benchmarks_and_experiments(tmp_path):
    """``repo_graph`` follows imports between pipeline/, benchmarks/, experiments/ and cli.py, so the rule
    ``benchmarks never experiments`` bites on a planted benchmark."""
    _plant(tmp_path, {"pipeline/__init__.py": "", "pipeline/core.py": "",
                      "benchmarks/__init__.py": "", "benchmarks/b.py": "import experiments.study\n",
                      "experiments/__init__.py": "", "experiments/study.py": "from pipeline import core\n"})
    (tmp_path / "cli.py").write_text("from benchmarks import b\n")
    g = repo_graph(tmp_path)
    assert g["benchmarks.b"] == {"experiments.study"} and g["experiments.study"] == {"pipeline.core"}
    assert g["cli"] == {"benchmarks.b"}
    assert rule_violations(g, read_rules("benchmarks never experiments\n")) == [
        "benchmarks.b -> experiments.study (benchmarks never experiments)"]


def _plant(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root / next(iter(files)).split("/")[0]


def test_the_rules_bite(tmp_path, monkeypatch):
    """The checker reports a planted function-level import, a relative import and an import through a
    lazy package's name running up the layers, an import between peers and a module in no layer, and
    lets a downward import pass; planted module and package circles are found."""
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
    layers = read_layers("planted.core planted.core2 planted.core3 planted.core4  # peers\n"
                         "planted.stage planted.lazystage\n"
                         "planted.circle\n")
    assert layers == [["planted.core", "planted.core2", "planted.core3", "planted.core4"],
                      ["planted.stage", "planted.lazystage"], ["planted.circle"]]
    up = "is a higher layer of"
    assert layer_violations(g, layers) == [  # upward, through a function, a relative import and a lazy name
        f"planted.core -> planted.stage.thing (planted.stage {up} planted.core)",
        f"planted.core2 -> planted.stage.thing (planted.stage {up} planted.core2)",
        f"planted.core3 -> planted.lazystage.heavy (planted.lazystage {up} planted.core3)",
        # heavy -> core4 runs down: allowed
        f"planted.core4 -> planted.stage.allowed (planted.stage {up} planted.core4)"]
    peers = read_layers("planted.core planted.core2 planted.core3 planted.circle\nplanted.stage\n"
                        "planted.lazystage planted.core4\n")
    assert ("planted.lazystage.heavy -> planted.core4 (planted.core4 is a peer of planted.lazystage)"
            in layer_violations(g, peers))
    assert layer_violations({"planted.loose": set()}, layers) == ["planted.loose: in no layer"]
    assert unit_of("planted.stage.thing", layers) == "planted.stage" and unit_of("elsewhere", layers) is None
    peers = read_layers("planted.stage planted.core4\nplanted.lazystage\n"
                        "planted.core planted.core2 planted.core3 planted.circle\n")
    assert ("planted.lazystage.heavy -> planted.core4 (planted.core4 is a peer of planted.lazystage)"
            not in layer_violations(g, peers))
    assert layer_violations({"planted.loose": set()}, layers) == ["planted.loose: in no layer"]
    assert cycles(g) == [["planted.circle.a", "planted.circle.b"]]
    two_way = {"planted.stage.x": {"planted.lazystage.y"}, "planted.lazystage.y": {"planted.stage.z"},
               "planted.stage.z": set()}
    assert cycles(package_graph(two_way, layers)) == [["planted.lazystage", "planted.stage"]]
    with pytest.raises(AssertionError, match="a name is in two layers"):
        read_layers("planted.core\nplanted.core\n")


def test_nothing_imports_the_cli():
    for path in PKG.rglob("*.py"):
        tree = ast.parse(path.read_text())
        names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        names += [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module]
        assert "cli" not in names, path


@pytest.mark.parametrize("path", sorted(PKG.rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_module_size(path):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{path}: {lines} lines (at most {MAX_LINES}): split it by concern"


def module_map(doc: Path = ROOT / "docs" / "architecture.md") -> dict[str, str]:
    """The module map of a page: package folder (``core/``, ``data/mimic/sources/``) -> the text of its entry
    (the code block after ``## Module map``; an entry starts at column 0, its continuation lines are indented)."""
    text = doc.read_text()
    block = re.search(r"## Module map.*?```\n(.*?)```", text, re.S)
    assert block, f"{doc} has no module map block"
    entries: dict[str, str] = {}
    current = None
    for line in block.group(1).splitlines():
        if line and not line[0].isspace():
            current, _, rest = line.partition(" ")
            entries[current] = rest
        elif current is not None:
            entries[current] += " " + line.strip()
    return entries


def test_the_module_map_names_every_module_and_folder():
    """docs/architecture.md's module map has an entry per folder of pipeline/ and names every module of the folder
    in it; every folder it names exists (finding 8 of issue 34: modules the page never named)."""
    entries = module_map()
    folders = {str(p.parent.relative_to(PKG)) + "/" for p in PKG.rglob("__init__.py") if p.parent != PKG}
    assert set(entries) == folders, (f"folders without an entry: {sorted(folders - set(entries))}; entries of no "
                                     f"folder: {sorted(set(entries) - folders)}")
    for folder, text in entries.items():
        words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text))
        missing = sorted(p.stem for p in (PKG / folder).glob("*.py") if p.stem != "__init__" and p.stem not in words)
        assert not missing, f"docs/architecture.md's module map: {folder} does not name {missing}"


_FORMER = ("training", "models", "evaluation", "vision", "layers", "metrics", "laplace", "sources", "extraction",
           "synth", "privacy", "baselines")  # packages before issue 34's layout: a name under one is stale
_TOPS = {"pipeline", "core", "data", "bayes", "tasks", "engine", "runs", "serving", "reports", "workflows", *_FORMER}
_SUFFIXES = {"py", "md", "csv", "json", "parquet", "png", "pt", "gz", "sql", "log", "yaml", "toml", "db", "txt", "npz"}


def test_every_module_and_name_a_docstring_names_exists():
    """A ``module.name`` (double backticks) or a ``pipeline/...`` path in the code's docstrings and comments names
    something that exists (finding 8 of issue 34: stale pointers), by the rules tests/test_docs.py applies to the
    docs."""
    sys.path.insert(0, str(ROOT / "tests"))
    import test_docs as td

    files = [*PKG.rglob("*.py"), *(ROOT / "benchmarks").glob("*.py"), *(ROOT / "experiments").glob("*.py"),
             ROOT / "cli.py"]
    bad = []
    for p in files:
        text = p.read_text()
        for m in re.finditer(r"``([a-z_][a-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+)(?:\(\))?``", text):
            parts = m.group(1).split(".")
            if parts[0] not in _TOPS or parts[-1] in _SUFFIXES:
                continue
            found, rest = td.module_files(parts)
            if not found or (rest and not any(td.defines(f, rest[0]) for f in found)):
                bad.append(f"{p.relative_to(ROOT)}: ``{m.group(1)}``")
        for m in re.finditer(r"(?<![\w/.])(pipeline/[\w./-]*[\w/])", text):
            if not (ROOT / m.group(1)).exists():
                bad.append(f"{p.relative_to(ROOT)}: {m.group(1)}")
    assert not bad, "stale names in docstrings:\n" + "\n".join(bad)


# ---------------------------------------------------------------------------- task and model-family names


def family_names() -> tuple[set[str], dict[str, set[str]]]:
    """(every task key of the registry and every model family's name, {enum class name: its member names}): the
    mortality task's ModelKind, the image task's Method, the classical BaselineKind and Laplace."""
    from pipeline.bayes.laplace.model import LinearizedLaplaceModel
    from pipeline.tasks.base import TASKS
    from pipeline.tasks.mortality.baselines.config import BaselineKind
    from pipeline.tasks.mortality.config import ModelKind
    from pipeline.tasks.vision.model_config import Method

    enums = (ModelKind, Method, BaselineKind)
    names = {*TASKS, *(m.value for e in enums for m in e), LinearizedLaplaceModel.kind}
    members = {e.__name__: {m.name for m in e} for e in enums}
    members["RunKind"] = {k.upper() for k in TASKS}  # the enum of task keys that the registry replaced
    return names, members


def name_comparisons(path: Path, names: set[str], members: dict[str, set[str]]) -> list[str]:
    """``file:line: name`` for each comparison (==, !=, is, is not, in, not in) of ``path`` against a task or
    model-family name: a string literal of ``names`` (alone or in a literal tuple, list or set) or a member of one of
    the ``members`` enums (``ModelKind.RANK1``, ``RunKind.VISION``)."""

    def named(node) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
            return repr(node.value)
        if isinstance(node, ast.Attribute):
            owner = node.value.id if isinstance(node.value, ast.Name) else getattr(node.value, "attr", None)
            if node.attr in members.get(owner, ()):
                return f"{owner}.{node.attr}"
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return next((n for e in node.elts if (n := named(e))), None)
        return None

    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Compare):
            found += [f"{path}:{node.lineno}: {n}" for side in (node.left, *node.comparators) if (n := named(side))]
    return found


def test_no_task_or_model_family_name_is_compared_outside_the_tasks_and_the_command_line():
    """Issue 44: what differs between tasks and model families is asked of the task (``pipeline.tasks``: its
    scorer, finish, label, words, a method's ``stochastic`` / ``tiled``, a model's ``components`` ...) or of the
    run (its ``distinct_per_step``, a Laplace model's own ``model_label``), never decided by comparing their
    names; the command line's options may name them. The library outside ``pipeline/tasks/`` and
    ``pipeline/cli/`` compares none, nor do the studies in benchmarks/ and experiments/: where one picks rows
    by name, the names are data its user gives (``--reference``, ``--laplace-map``, ``--a`` / ``--b``) or a
    table it iterates, never a literal it compares against."""
    names, members = family_names()
    files = [p for p in PKG.rglob("*.py") if p.relative_to(PKG).parts[0] not in ("tasks", "cli")]
    studies = [p for folder in ("benchmarks", "experiments") for p in sorted((ROOT / folder).rglob("*.py"))]
    assert len(studies) > 20  # the scan reads the studies' folders
    bad = [hit for p in [*files, ROOT / "cli.py", *studies] for hit in name_comparisons(p, names, members)]
    assert not bad, ("task or model-family names compared outside pipeline/tasks/ and pipeline/cli/:\n"
                     + "\n".join(bad))


def test_the_name_comparison_scan_bites(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text(
        "if kind == 'vision': pass\n"
        "if info.model_kind != \"laplace\": pass\n"
        "if method in ('gbm', 'x'): pass\n"
        "if run.kind is RunKind.VISION: pass\n"
        "if m == models.ModelKind.RANK1: pass\n"
        "if kind == other: pass\n"  # no name: not a hit
        "if method is Method.NONE: pass\n"  # another enum's member of the same class name (calibration): not a hit
        "labels = {'rank1': 1}\n")  # a name that is not compared: not a hit
    names, members = family_names()
    assert [h.split(": ", 1)[1] for h in name_comparisons(planted, names, members)] == [
        "'vision'", "'laplace'", "'gbm'", "RunKind.VISION", "ModelKind.RANK1"]
