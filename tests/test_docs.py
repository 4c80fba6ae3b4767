"""The docs cannot drift from the code and the measurements.

- Every section between ``<!-- figures:NAME -->`` markers in README.md and docs/ is exactly what
  its renderer (``benchmarks.report.RENDERERS``) renders from ``benchmarks/results/NAME.json``, every
  results file is shown on some page and every renderer has its results file (the engine's own
  mechanics are tested here too).
- Links between the pages resolve (files and heading anchors).
- Module paths and ``module.name`` references in the README and the docs pages name code that
  exists (the dated reports under docs/experiments/ are records and may name old modules, and so is
  the command a results file says it was written by, ``Written by `...```).
- Every ``cli.py COMMAND --flag`` and ``make TARGET`` the docs show exists.
- The README stays short.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from benchmarks import report

ROOT = Path(__file__).resolve().parents[1]

PAGES = report.pages()
EXPERIMENTS = ROOT / "docs" / "experiments"
CURRENT_PAGES = [p for p in PAGES if EXPERIMENTS not in p.parents]  # pages that describe the code as it is
MARKED = [(page, s.name) for page in PAGES for s in report.sections(page.read_text(encoding="utf-8"), page)]


def rel(page: Path) -> str:
    return str(page.relative_to(ROOT))


# ------------------------------------------------------------------------------------------ figures


@pytest.mark.parametrize("page, name", MARKED, ids=[f"{rel(p)}:{n}" for p, n in MARKED])
def test_marked_section_is_its_json_rendered(page, name):
    text = page.read_text(encoding="utf-8")
    assert report.rendered_page(text, rel(page), only={name}) == text, (
        f"{rel(page)}: figures:{name} differs from benchmarks/results/{name}.json; "
        f"run `python -m benchmarks.report {name}` (or the benchmark) and commit the page")


def test_every_results_file_has_a_renderer_and_a_page():
    results = sorted(p.stem for p in report.RESULTS.glob("*.json"))
    assert "extract" in results
    shown = {name for _, name in MARKED}
    for name in results:
        assert report.renderer(name, report.load(name)), f"benchmarks/results/{name}.json has no renderer"
        assert name in shown, f"benchmarks/results/{name}.json is shown on no page (add a figures:{name} section)"
        assert (name in report.RENDERERS) != ("renderer" in report.load(name)), (
            f"benchmarks/results/{name}.json: a benchmark's renderer is in report.RENDERERS, an experiment's in "
            "its JSON")
    assert set(report.RENDERERS) <= set(results), "a renderer in report.RENDERERS without its results file"


def test_benchmarks_name_no_experiment():
    """benchmarks/ never imports experiments/ (tests/test_architecture.py's rule), by name either: no string of
    the report engine names an experiment module."""
    assert "experiments." not in " ".join(report.RENDERERS.values())
    assert not any(v.startswith("experiments") for v in report.RENDERERS.values())


@pytest.fixture
def tiny_root(tmp_path):
    """A checkout with one results file and one page holding its section between other text."""
    src = json.loads(report.results_path("extract").read_text())
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    report.results_path("extract", tmp_path).write_text(json.dumps(src))
    (tmp_path / "docs").mkdir()
    page = tmp_path / "docs" / "page.md"
    page.write_text("# Page\n\nbefore\n\n<!-- figures:extract -->\nstale figures 1.0\n"
                    "<!-- /figures:extract -->\n\nafter\n")
    return tmp_path, page


def test_update_rewrites_only_between_the_markers(tiny_root):
    root, page = tiny_root
    assert report.check(root) == ["docs/page.md: figures:extract"]
    assert report.update(root=root) == [page]
    text = page.read_text()
    expected = report.render("extract", report.load("extract", root))
    assert text == ("# Page\n\nbefore\n\n<!-- figures:extract -->\n" + expected
                    + "<!-- /figures:extract -->\n\nafter\n")
    assert report.check(root) == []
    assert report.update(root=root) == []  # idempotent


def test_a_changed_figure_or_result_is_caught(tiny_root):
    root, page = tiny_root
    report.update(root=root)
    text = page.read_text()
    assert "**4.0 min**" in text
    page.write_text(text.replace("**4.0 min**", "**3.9 min**"))
    assert report.check(root) == ["docs/page.md: figures:extract"]
    report.update(root=root)
    data = report.load("extract", root)
    data["full_scale_extrapolated_s"] = 600.0
    report.results_path("extract", root).write_text(json.dumps(data))
    assert report.check(root) == ["docs/page.md: figures:extract"]
    report.update(root=root)
    assert "**10.0 min** (target 5 min: not met" in page.read_text()


def test_write_results_records_provenance_and_updates_the_pages(tiny_root):
    root, page = tiny_root
    data = report.load("extract", root)
    data.pop("commit", None)
    path = report.write_results("extract", {**data, "commit": "abc1234", "date": "2026-12-01"}, root=root)
    assert path == report.results_path("extract", root)
    assert json.loads(path.read_text())["commit"] == "abc1234"
    assert "at commit `abc1234` on 2026-12-01" in page.read_text()
    assert report.check(root) == []
    other = report.write_results("extract", {**data, "commit": "def5678"}, path=root / "elsewhere.json", root=root)
    assert json.loads(other.read_text())["commit"] == "def5678"
    assert "abc1234" in page.read_text()  # a results file elsewhere does not touch the docs


def test_provenance_names_a_commit_and_a_date():
    p = report.provenance()
    assert re.fullmatch(r"([0-9a-f]{7,}|unknown)(\+dirty)?", p["commit"])
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", p["date"])


@pytest.mark.parametrize("text, message", [
    ("<!-- figures:extract -->\nx\n", "never closed"),
    ("x\n<!-- /figures:extract -->\n", "closes nothing"),
    ("<!-- figures:extract -->\n<!-- /figures:rank1_lstm -->\n", "closes figures:extract"),
    ("<!-- figures:a -->\n<!-- figures:b -->\n<!-- /figures:b -->\n<!-- /figures:a -->\n", "opens inside"),
    ("see <!-- figures:extract -->\n<!-- /figures:extract -->\n", "alone on its line"),
], ids=["unclosed", "stray-close", "mismatch", "nested", "inline"])
def test_bad_markers_are_an_error_naming_the_page(text, message):
    with pytest.raises(report.ReportError, match=message) as err:
        report.sections(text, "docs/x.md")
    assert "docs/x.md" in str(err.value)


def test_unknown_section_or_missing_results_is_an_error(tmp_path):
    with pytest.raises(report.ReportError, match="no renderer for figures:nope"):
        report.render("nope", {})
    with pytest.raises(report.ReportError, match="does not exist"):
        report.load("extract", tmp_path)


# ------------------------------------------------------------------------------------------ links


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped (not - or _), spaces to -."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.DOTALL)
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} +(.+?) *$", text, flags=re.MULTILINE)}


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_links_resolve(page):
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.DOTALL)
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):  # http(s):, mailto:
            continue
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        assert dest.exists(), f"{rel(page)}: link to {target} (no such file)"
        if anchor and dest.suffix == ".md":
            assert anchor in anchors(dest), f"{rel(page)}: link to {target} (no such heading in {dest.name})"


# ------------------------------------------------------------------------------------------ code names

PATH = re.compile(r"(?<![\w/.])((?:pipeline|benchmarks|experiments|tests|sql|mlflow|docs)/[\w./-]*[\w/])")
DOTTED = re.compile(r"`((?:[a-z_][a-z0-9_]*\.)+[A-Za-z_][A-Za-z0-9_]*)(?:\(\))?`")
FILE_SUFFIXES = {"py", "md", "csv", "json", "parquet", "png", "pt", "gz", "sql", "log", "yaml", "toml", "db", "txt",
                 "npy", "npz"}
MODULES = {p.stem if p.name != "__init__.py" else p.parent.name: [] for p in (ROOT / "pipeline").rglob("*.py")}
for _p in (ROOT / "pipeline").rglob("*.py"):
    MODULES[_p.stem if _p.name != "__init__.py" else _p.parent.name].append(_p)


def defines(module: Path, name: str) -> bool:
    """``name`` is a word of the module's source (a def, class, assignment, import or lazy export)."""
    return re.search(rf"\b{re.escape(name)}\b", module.read_text(encoding="utf-8")) is not None


def module_files(dotted: list[str]) -> tuple[list[Path], list[str]]:
    """The files of the longest module prefix of ``dotted`` and the names left over."""
    if dotted[0] == "pipeline":
        for cut in range(len(dotted), 0, -1):
            base = ROOT.joinpath(*dotted[:cut])
            for cand in (base.with_suffix(".py"), base / "__init__.py"):
                if cand.exists():
                    return [cand], dotted[cut:]
        return [], dotted
    files, rest = module_files(["pipeline", *dotted])  # a package-relative name: models.predict
    if files and len(rest) < len(dotted) - 1:
        return files, rest
    return MODULES.get(dotted[0], []), dotted[1:]


def code_references(page: Path) -> tuple[list[str], list[str]]:
    """Repository paths and backticked ``module.name`` references of a page (HTML comments left out, and the
    command a results file records under its figures, a record of what ran then)."""
    text = re.sub(r"<!--.*?-->", "", page.read_text(encoding="utf-8"), flags=re.DOTALL)
    text = re.sub(r"<sub>Written by `[^`]*`", "<sub>Written by", text)
    return PATH.findall(text), DOTTED.findall(text)


@pytest.mark.parametrize("page", CURRENT_PAGES, ids=rel)
def test_paths_and_module_names_in_the_docs_exist(page):
    paths, dotted = code_references(page)
    for path in paths:  # an upper-case part is a placeholder (NAME, DIR): some file must fit it
        pattern = "/".join(re.sub(r"\b[A-Z][A-Z_]+\b(?=\.|$)", "*", part) for part in path.split("/"))
        found = [base for base in (ROOT, page.parent)  # from the root, or relative to the page (a link's target)
                 if (base / path).exists() or any(base.glob(pattern.rstrip("/")))]
        assert found, f"{rel(page)}: {path} does not exist"
    for ref in dotted:
        parts = ref.split(".")
        if parts[-1] in FILE_SUFFIXES or (parts[0] != "pipeline" and parts[0] not in MODULES):
            continue  # a file name, or not a pipeline module (mlflow.pyfunc, torch.mm, ...)
        files, rest = module_files(parts)
        assert files, f"{rel(page)}: `{ref}`: no module {parts[0]}"
        assert not rest or any(defines(f, rest[0]) for f in files), f"{rel(page)}: `{ref}`: not in {files}"


def code_spans(text: str) -> list[str]:
    """Inline code spans and the lines of fenced code blocks."""
    blocks = re.findall(r"```[^\n]*\n(.*?)```", text, flags=re.DOTALL)
    rest = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    indented = re.findall(r"^(?: {4}|\t)(\S.*)$", rest, flags=re.MULTILINE)
    return [line for b in blocks for line in b.splitlines()] + indented + re.findall(r"`([^`]+)`", rest)


@pytest.fixture(scope="module")
def cli_options() -> dict[str, set[str]]:
    import typer

    import cli  # the repository root is on sys.path (pyproject's pytest pythonpath)

    def options(group, prefix: str = "") -> dict[str, set[str]]:  # a sub-app's commands as "group command"
        out = {}
        for name, cmd in group.commands.items():
            out[prefix + name] = {opt for p in cmd.params for opt in (*p.opts, *p.secondary_opts)}
            if hasattr(cmd, "commands"):
                out.update(options(cmd, f"{prefix}{name} "))
        return out

    return options(typer.main.get_command(cli.app))


def cli_uses(page: Path) -> list[tuple[str, list[str]]]:
    """(command, its --flags) of every ``python ... cli.py COMMAND ...`` the page shows as code; COMMAND may be
    two words (a sub-app's command: ``vision train``) when a second lower-case word follows."""
    uses = []
    for span in code_spans(page.read_text(encoding="utf-8")):
        for m in re.finditer(r"(?:python\S*|torchrun[^|;]*?)\s+cli\.py\s+([a-z][a-z-]*(?:\s+[a-z][a-z-]*(?=\s|$))?)"
                             r"([^|;]*)", span):
            uses.append((" ".join(m.group(1).split()), re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", m.group(2))))
    return uses


def make_uses(page: Path) -> list[str]:
    return [t for span in code_spans(page.read_text(encoding="utf-8"))
            for t in re.findall(r"(?<![\w-])make ([a-z][\w-]*)", span)]


def test_the_checks_read_the_docs():
    """The scanners below find what the README shows (so an empty scan cannot pass for a clean one)."""
    readme = ROOT / "README.md"
    commands = {c for c, _ in cli_uses(readme)}
    assert {"synth", "extract", "load-postgres", "train", "evaluate", "compare", "score",
            "benchmark-models"} <= commands
    assert ("extract", ["--source", "--schema", "--out"]) in cli_uses(readme)
    assert {"main", "test"} <= set(make_uses(readme))
    paths, dotted = code_references(ROOT / "docs" / "evaluation.md")
    assert "pipeline/bayes/metrics/" in paths and "metrics.ece_floor" in dotted


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_cli_commands_and_flags_in_the_docs_exist(page, cli_options):
    for command, flags in cli_uses(page):
        if command not in cli_options and command.split()[0] in cli_options:  # a second word that is an argument
            command = command.split()[0]
        assert command in cli_options, f"{rel(page)}: `cli.py {command}`: no such command"
        for flag in flags:
            assert flag in cli_options[command] | {"--help"}, f"{rel(page)}: `cli.py {command} {flag}`: no such option"


def test_make_targets_in_the_docs_exist():
    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), flags=re.MULTILINE))
    for page in PAGES:
        for target in make_uses(page):
            assert target in targets, f"{rel(page)}: `make {target}`: no such target"


def test_the_readme_stays_short():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= 250, f"README.md has {lines} lines (at most 250: move details to docs/)"


def test_the_readme_map_names_every_package_and_both_releases():
    """The repository map lists each package of pipeline/ (laplace/, vision/, baselines/ were missing);
    the title and pyproject's description say MIMIC-III and MIMIC-IV, as the pipeline reads both."""
    import tomllib

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("## Repository", 1)[1].split("```")[1]
    packages = sorted(p.parent.name for p in (ROOT / "pipeline").glob("*/__init__.py"))
    missing = [p for p in packages if not re.search(rf"(?<![\w/]){re.escape(p)}/", block)]
    assert packages and not missing, f"README.md's repository map lacks {missing}"
    assert "MIMIC-III and MIMIC-IV" in text.splitlines()[0]
    description = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["description"]
    assert "MIMIC-III and MIMIC-IV" in description
