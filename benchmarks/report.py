"""Figures in the docs, rendered from the results JSON of the benchmarks and experiments so that they cannot drift.

A benchmark (or an experiment) ends with ``write_results(name, result)``: the result goes to
``benchmarks/results/<name>.json`` (atomically, with the command, commit and date it was measured
at), and every docs page that holds a section

    <!-- figures:NAME -->
    ...
    <!-- /figures:NAME -->

gets that section rewritten from the JSON by NAME's renderer. Text outside the markers is never
touched. ``tests/test_docs.py`` renders every marked section again and fails when a page differs
from its JSON, so a figure in a marked section is the figure the script wrote.

A renderer lives beside the script that writes its JSON (a ``render(result) -> str`` there, or in a
sibling module where the script is long). A benchmark's is named in ``RENDERERS`` as ``"module:function"``;
an experiment's is recorded in its JSON (``renderer``, which its script passes to ``write_results``), so
this package names no experiment: benchmarks never import experiments. Either is imported when a section
needs it. This module is the engine alone: markers, loading, provenance, the Markdown table every renderer
uses.

    python -m benchmarks.report           # rewrite every marked section from its JSON
    python -m benchmarks.report --check   # exit 1, naming each section that differs from its JSON
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pipeline.core import fileio
from pipeline.core.tables import markdown_table

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
MARKER = re.compile(r"<!-- (/?)figures:([a-z0-9_]+) -->")
RENDERERS: dict[str, str] = {  # figures:NAME -> the "module:function" that renders results/NAME.json
    "baselines": "benchmarks.baselines:render",
    "device_mortality": "benchmarks.device_mortality:render",
    "extract": "benchmarks.extract:render",
    "extract_mimic4": "benchmarks.extract_mimic4:render",
    "full_scale": "benchmarks.full_scale:render",
    "full_scale_mimic4": "benchmarks.full_scale:render",
    "ghost_bn": "benchmarks.ghost_bn:render",
    "laplace_fit": "benchmarks.laplace_figures:render_fit",
    "laplace_jacobian_groups": "benchmarks.laplace_figures:render_jacobian_groups",
    "meds_export": "benchmarks.meds_export:render",
    "promise_checks": "benchmarks.promise_checks:render",
    "rank1_lstm": "benchmarks.rank1_lstm:render",
    "recertify_cost": "benchmarks.recertify_cost:render",
    "referral_cost": "benchmarks.referral_cost:render",
    "serve_load": "benchmarks.serve_load:render",
    "serve_load_2048": "benchmarks.serve_load:render",
    "serve_load_samples12": "benchmarks.serve_load:render",
    "vision_params": "benchmarks.vision_params:render",
    "vision_step": "benchmarks.vision_step:render",
    "vision_step_w4": "benchmarks.vision_step:render",
    "vision_step_w8": "benchmarks.vision_step:render",
}


class ReportError(Exception):
    """A docs page's markers or a results file cannot be rendered (names the page or file)."""


def pages(root: Path = ROOT) -> list[Path]:
    """The pages that may hold marked sections: README.md and every Markdown file under docs/."""
    found = [root / "README.md"] if (root / "README.md").exists() else []
    return found + sorted((root / "docs").rglob("*.md"))


@dataclass
class Section:
    name: str
    start: int  # offset just after the opening marker's line
    end: int  # offset of the closing marker


def sections(text: str, page: Path | str = "<text>") -> list[Section]:
    """The marked sections of a page, in order; unbalanced or nested markers are an error."""
    found, open_name, open_at = [], None, 0
    for m in MARKER.finditer(text):
        closing, name = m.group(1) == "/", m.group(2)
        line = text.count("\n", 0, m.start()) + 1
        line_start = text.rfind("\n", 0, m.start()) + 1
        line_end = text.find("\n", m.end())
        if text[line_start:len(text) if line_end < 0 else line_end].strip() != m.group(0):
            raise ReportError(f"{page}:{line}: a figures marker must stand alone on its line")
        if not closing:
            if open_name is not None:
                raise ReportError(f"{page}:{line}: figures:{name} opens inside figures:{open_name}")
            open_name, open_at = name, text.find("\n", m.end()) + 1 or len(text)
        else:
            if open_name != name:
                raise ReportError(f"{page}:{line}: /figures:{name} closes "
                                  f"{'nothing' if open_name is None else 'figures:' + open_name}")
            found.append(Section(name, open_at, line_start))
            open_name = None
    if open_name is not None:
        raise ReportError(f"{page}: figures:{open_name} is never closed")
    return found


def results_path(name: str, root: Path = ROOT) -> Path:
    """Where a benchmark's results live: ``benchmarks/results/<name>.json`` under ``root``."""
    return root / RESULTS.relative_to(ROOT) / f"{name}.json"


def load(name: str, root: Path = ROOT) -> dict:
    path = results_path(name, root)
    if not path.exists():
        raise ReportError(f"{path} does not exist: run the benchmark that writes it")
    return fileio.read_json(path)


RENDERER_PACKAGES = ("benchmarks.", "experiments.")  # where a JSON's recorded renderer may live


def renderer(name: str, result: dict | None = None) -> Callable[[dict], str]:
    """The function that renders figures:NAME: the benchmark's in ``RENDERERS``, else the one its results
    record (``renderer``: an experiment's), imported from its module."""
    spec = RENDERERS.get(name) or (result or {}).get("renderer")
    if not spec:
        raise ReportError(f"no renderer for figures:{name} (benchmarks: {sorted(RENDERERS)}; an experiment's "
                          "results record theirs)")
    module, _, function = spec.partition(":")
    if not module.startswith(RENDERER_PACKAGES):
        raise ReportError(f"figures:{name}: renderer {spec!r} is not in {RENDERER_PACKAGES}")
    return getattr(importlib.import_module(module), function)


def render(name: str, result: dict) -> str:
    """The Markdown of a section (ends with a newline)."""
    body = renderer(name, result)(result).strip("\n")
    return f"{body}\n\n{_provenance(name, result)}\n"


def rendered_page(text: str, page: Path | str = "<text>", root: Path = ROOT, only: set[str] | None = None) -> str:
    """``text`` with every marked section (or those named in ``only``) rendered from its JSON."""
    out, pos = [], 0
    for s in sections(text, page):
        if only is not None and s.name not in only:
            continue
        out += [text[pos:s.start], render(s.name, load(s.name, root))]
        pos = s.end
    return "".join(out) + text[pos:]


def update(names: set[str] | None = None, root: Path = ROOT) -> list[Path]:
    """Rewrite the marked sections (all, or those in ``names``) of every page; the pages changed."""
    changed = []
    for page in pages(root):
        text = page.read_text(encoding="utf-8")
        new = rendered_page(text, page.relative_to(root), root, names)
        if new != text:
            fileio.write_text(page, new)
            changed.append(page)
    return changed


def check(root: Path = ROOT) -> list[str]:
    """``page: figures:NAME`` for every marked section that differs from its JSON's rendering."""
    stale = []
    for page in pages(root):
        text = page.read_text(encoding="utf-8")
        rel = page.relative_to(root)
        for s in sections(text, rel):
            if text[s.start:s.end] != render(s.name, load(s.name, root)):
                stale.append(f"{rel}: figures:{s.name}")
    return stale


def provenance() -> dict:
    """Where and when a result is measured: the checkout's commit (``+dirty`` when tracked files
    other than the docs and the results differ from it) and the UTC date. A benchmark takes it
    when it starts (the checkout may move while it runs) and passes it to ``write_results``."""
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return ""

    # a checkout copied without .git (a device machine's working tree) names its commit in BENCH_COMMIT
    commit = git("rev-parse", "--short=7", "HEAD") or os.environ.get("BENCH_COMMIT", "unknown")
    if git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!docs", ":!README.md", ":!benchmarks/results"):
        commit += "+dirty"
    return {"commit": commit, "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")}


def write_results(name: str, result: dict, path: Path | None = None, root: Path = ROOT,
                  renderer: str | None = None) -> Path:
    """Write a benchmark's result (with ``provenance()`` added unless it holds its own, and ``renderer``, the
    ``"module:function"`` of an experiment's renderer) and, when it is the canonical
    ``benchmarks/results/<name>.json``, re-render the docs sections that show it."""
    result = {**provenance(), **result, **({"renderer": renderer} if renderer else {})}
    canonical = results_path(name, root)
    path = canonical if path is None else Path(path)
    fileio.write_json(path, result)
    print(f"wrote {path}")
    if path.resolve() == canonical.resolve():
        for page in update({name}, root):
            print(f"updated {page.relative_to(root)} (figures:{name})")
    return path


def command(module: str) -> str:
    """How this run was started, for the results' ``command``: ``python -m MODULE ARGS``."""
    return " ".join(["python -m", module, *sys.argv[1:]])


def table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table (every renderer's): ``core.tables.markdown_table``."""
    return markdown_table(header, rows)


def _provenance(name: str, r: dict) -> str:
    """The line under every section: the command, commit and date the JSON records, and its path."""
    commit = r.get("commit", "")
    commit = commit[:7] if re.fullmatch(r"[0-9a-f]{40}", commit) else commit  # a full hash: its short form
    when = ((f"at commit `{commit}` on {r['date']}" if "date" in r else f"at commit `{commit}`") if "commit" in r
            else "(this JSON predates the commit and date fields; `git log` of the file dates it)")
    return (f"<sub>Written by `{r.get('command', 'the benchmark').strip()}` {when}; "
            f"figures from `benchmarks/results/{name}.json`.</sub>")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only report the sections that differ from their JSON")
    ap.add_argument("names", nargs="*", help="render only these figures:NAME sections (default: all)")
    args = ap.parse_args(argv)
    try:
        if args.check:
            stale = check()
            for item in stale:
                print(f"differs from its JSON: {item}")
            return 1 if stale else 0
        for page in update(set(args.names) or None):
            print(f"updated {page.relative_to(ROOT)}")
    except ReportError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
