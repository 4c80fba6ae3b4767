"""Benchmark figures in the docs, rendered from the benchmarks' results JSON so that they cannot drift.

A benchmark ends with ``write_results(name, result)``: the result goes to
``benchmarks/results/<name>.json`` (atomically, with the command, commit and date it was measured
at), and every docs page that holds a section

    <!-- figures:NAME -->
    ...
    <!-- /figures:NAME -->

gets that section rewritten from the JSON by ``RENDERERS[NAME]``. Text outside the markers is
never touched. ``tests/test_docs.py`` renders every marked section again and fails when a page
differs from its JSON, so a figure in a marked section is the figure the benchmark wrote.

    python benchmarks/report.py           # rewrite every marked section from its JSON
    python benchmarks/report.py --check   # exit 1, naming each section that differs from its JSON

Only the standard library and ``pipeline.fileio`` (atomic writes) are imported: rendering needs
neither torch nor the pipeline's stages.
"""

from __future__ import annotations

import argparse
import datetime
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from pipeline import fileio  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
MARKER = re.compile(r"<!-- (/?)figures:([a-z0-9_]+) -->")
# Targets named in the project's issues; the rendered sections say whether a run met them.
EXTRACT_TARGET_MIN = 5.0  # full MIMIC-III extraction, minutes
EXTRACT_TARGET_SPEEDUP = 20.0  # against the mimic3-benchmarks pattern
PARAM_TARGET_PCT = 5.0  # rank-1 parameter overhead over the deterministic model
EXTRACT_REFERENCES = (  # results key -> how the extraction section names it
    ("pandas_reference", "plain pandas (`benchmarks/pandas_reference.py`)"),
    ("mimic3_benchmarks_reference", "the mimic3-benchmarks pattern (`benchmarks/mimic3_benchmarks_reference.py`)"),
)


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


def render(name: str, result: dict) -> str:
    """The Markdown of a section (ends with a newline)."""
    if name not in RENDERERS:
        raise ReportError(f"no renderer for figures:{name} (known: {sorted(RENDERERS)})")
    body = RENDERERS[name](result).strip("\n")
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

    commit = git("rev-parse", "--short=7", "HEAD") or "unknown"
    if git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!docs", ":!README.md", ":!benchmarks/results"):
        commit += "+dirty"
    return {"commit": commit, "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")}


def write_results(name: str, result: dict, path: Path | None = None, root: Path = ROOT) -> Path:
    """Write a benchmark's result (with ``provenance()`` added unless it holds its own) and, when it is the
    canonical ``benchmarks/results/<name>.json``, re-render the docs sections that show it."""
    result = {**provenance(), **result}
    canonical = results_path(name, root)
    path = canonical if path is None else Path(path)
    fileio.write_json(path, result)
    print(f"wrote {path}")
    if path.resolve() == canonical.resolve():
        for page in update({name}, root):
            print(f"updated {page.relative_to(root)} (figures:{name})")
    return path


# ---------------------------------------------------------------------------------------------
# Renderers: results JSON -> Markdown. Figures are rounded here, once.

def _provenance(name: str, r: dict) -> str:
    when = (f"at commit `{r['commit']}` on {r['date']}" if "commit" in r
            else "(this JSON predates the commit and date fields; `git log` of the file dates it)")
    return (f"<sub>Written by `{r.get('command', 'the benchmark').strip()}` {when}; "
            f"figures from `benchmarks/results/{name}.json`.</sub>")


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def render_extract(r: dict) -> str:
    rows = [[f"{s['scale']:.0%}", f"{s['patients']:,}", f"{s['event_rows']:,}", f"{s['wall_s']:.1f} s",
             f"{s['events_per_s'] / 1e6:.2f} M", f"{s['peak_rss_mb']:,.0f} MB"] for s in r["scales"]]
    out = [_table(["scale of MIMIC-III's 46,520 patients", "patients", "event rows read", "wall", "rows/s",
                   "peak RSS"], rows), ""]
    minutes = r["full_scale_extrapolated_s"] / 60
    out.append(f"- Growth exponent of time in rows: {r['growth_exponent']:.2f}; the extrapolation takes it as at "
               f"least 1, so full MIMIC-III ({r['full_event_rows'] / 1e6:.1f} M event rows) extrapolates from the "
               f"largest run to **{minutes:.1f} min** (target {EXTRACT_TARGET_MIN:g} min: "
               f"{'met' if minutes <= EXTRACT_TARGET_MIN else 'not met'}; an extrapolation).")
    if "floor" in r:
        f = r["floor"]
        out.append(f"- Floor, same run: one DuckDB scan that parses and aggregates CHARTEVENTS "
                   f"({f['chartevents_rows']:,} rows) ran at {f['rows_per_s'] / 1e6:.2f} M rows/s; extraction "
                   f"runs at {r['extract_vs_floor']:.2f}x the floor's rate, end to end.")
    refs = [(key, label) for key, label in EXTRACT_REFERENCES if key in r]
    if refs:
        small = r["scales"][0]
        parts = []
        for key, label in refs:
            ref = r[key]
            speedup = ref["wall_s"] / small["wall_s"]
            parts.append(f"{label} {ref['wall_s']:.1f} s, so DuckDB is **{speedup:.1f}x** faster")
        m3 = r.get("mimic3_benchmarks_reference")
        verdict = ""
        if m3:
            met = m3["wall_s"] / small["wall_s"] >= EXTRACT_TARGET_SPEEDUP
            verdict = f" (target {EXTRACT_TARGET_SPEEDUP:g}x against the latter: {'met' if met else 'not met'})"
        out.append(f"- References at {small['scale']:.0%} ({small['wall_s']:.1f} s), same run, same cohort and "
                   f"window rules (the benchmark checks both count the same events): " + "; ".join(parts) + verdict
                   + ".")
    out.append(f"- Peak RSS at the largest scale: {r['scales'][-1]['peak_rss_mb']:,.0f} MB.")
    return "\n".join(out)


def render_rank1_lstm(r: dict) -> str:
    c = r["config"]
    head = (f"K = {c['components']}, {c['components'] * c['batch']} tiled rows, T = {c['steps']}, D = {c['input']}, "
            f"H = {c['hidden']}, {c['threads']} thread(s), best of {c['reps']} interleaved rounds (load average "
            f"{r['load_average']:.1f} on {r['cpus']} CPUs at the start); forward + backward time of the rank-1 LSTM / "
            f"`nn.LSTM` time on the same tiled batch:")
    out = [head, ""]
    rows = []
    for t in r["timing"]:
        rows.append([t["malloc"], t["lengths"], t["reference"], f"{t['reference_ms']:.1f}",
                     f"{t['per_example']:.2f}", f"{t['per_member']:.2f}"])
    out += [_table(["allocator", "lengths", "reference (nn.LSTM)", "reference ms", "per-example sampling (training)",
                    "per-member sampling (evaluation)"], rows), ""]
    out.append(f"Parameter overhead of the rank-1 factors over the deterministic LSTM + dense layers at "
               f"K = {c['components']} (embeddings excluded; counted, not timed; target {PARAM_TARGET_PCT:g}%):")
    out.append("")
    prow = [[str(p["hidden"]), str(p["embedding"]), p["model"], f"{p['deterministic']:,}", f"{p['extra']:,}",
             f"{p['overhead_pct']:.1f}%"] for p in r["parameters"]]
    out.append(_table(["LSTM units", "embedding", "model", "deterministic parameters", "extra", "overhead"], prow))
    return "\n".join(out)


RENDERERS: dict[str, Callable[[dict], str]] = {
    "extract": render_extract,
    "rank1_lstm": render_rank1_lstm,
}


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
