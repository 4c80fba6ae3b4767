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
import math
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
    commit = r.get("commit", "")
    commit = commit[:7] if re.fullmatch(r"[0-9a-f]{40}", commit) else commit  # a full hash: its short form
    when = ((f"at commit `{commit}` on {r['date']}" if "date" in r else f"at commit `{commit}`") if "commit" in r
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


# ------------------------------------------------------------------------- subnetwork Laplace


def _load_average(r: dict) -> str:
    """'load average A at the start, B at the end' where the result recorded it."""
    start, end = r.get("loadavg_start"), r.get("loadavg_end")
    if start is None:
        return "load average not recorded"
    text = f"load average {start[0]:.1f} at the start"
    return text + (f", {end[0]:.1f} at the end" if end is not None else "") + f" on {r.get('cpu_count', '?')} CPUs"


def render_laplace_fit(r: dict) -> str:
    fits = sorted(r["fits"], key=lambda f: (f["hidden"], f["subnet_size"]))
    hiddens = sorted({f["hidden"] for f in fits})
    n_train = sorted({f["n_train_used"] for f in fits})
    head = (f"{', '.join(f'{n:,}' for n in n_train)} training admissions in the GGN "
            f"({'all' if r.get('max_train') is None else 'a subsample of ' + format(r['max_train'], ',')}), "
            f"{r['selection']} selection, λ given (the MAP run's 2·l2·N_train, no grid), MAP runs of "
            f"{r['map_steps']} steps, {r['threads']} torch thread(s), {_load_average(r)}. Wall seconds per stage; "
            f"fit RSS is the peak resident memory of the fit above the memory it started from"
            + (" (VmHWM reset after loading and after a warm-up fit)" if all(f.get("peak_reset") for f in fits) else "")
            + ":")
    rows = []
    for f in fits:
        st = f["stages_s"]
        rows.append([str(f["hidden"]), f"{f['n_params']:,}", f"{f['subnet_size']:,}", f"{f['fit_s']:.1f}",
                     f"{st['select']:.1f}", f"{st['ggn']:.1f}", f"{st['factorize']:.1f}",
                     f"{st.get('validation', 0.0):.1f}", f"{f['fit_rss_mb']:,.1f}", f"{f['posterior_mb']:,.1f}"])
    out = [head, "", _table(["LSTM", "D", "S", "fit s", "select s", "GGN s", "Cholesky s", "validation s",
                             "fit RSS MB", "factor C MB"], rows), ""]
    growth = r.get("growth", {})
    if growth:
        by_size = sorted(growth.items(), key=lambda kv: int(kv[0]))  # [(LSTM size, its growth figures)]
        fits_txt = "; ".join(f"LSTM {h}: fit RSS = {g['rss_floor_mb']:.1f} MB + {g['rss_bytes_per_s2']:.1f} bytes·S²"
                             for h, g in by_size)
        above = " / ".join(f"{g['rss_exponent_above_floor']:.2f}" if g.get("rss_exponent_above_floor") else "n/a"
                           for _, g in by_size)
        whole = " / ".join("n/a" if g.get("rss_exponent_all") is None else f"{g['rss_exponent_all']:.2f}"
                           for _, g in by_size)
        last = " / ".join("n/a" if not g.get("rss_exponent_steps") else f"{g['rss_exponent_steps'][-1]:.2f}"
                          for _, g in by_size)
        sizes = sorted({f["subnet_size"] for f in fits})
        out.append(f"- Memory against S (least squares): {fits_txt}; 16 bytes·S² is two float64 S x S matrices (the "
                   f"GGN and its Cholesky factor). Growth exponent of the part above the floor: **{above}** "
                   f"(LSTM {' / '.join(str(h) for h in hiddens)}); of the whole increment {whole} over "
                   f"{sizes[0]:,}..{sizes[-1]:,}, {last} from {sizes[-2]:,} to {sizes[-1]:,}.")
    same = r.get("same_s", {})
    if same and len(hiddens) == 2:
        lo, hi = hiddens
        keys = sorted(same, key=int)
        d_ratio = same[keys[0]]["d_ratio"]
        rss = ", ".join(f"x{same[k]['rss_ratio']:.2f}" for k in keys)
        tim = ", ".join(f"x{same[k]['time_ratio']:.2f}" for k in keys)
        out.append(f"- Same S on the LSTM {hi} ({d_ratio:.1f} times the weights) against the LSTM {lo}, for S = "
                   f"{', '.join(f'{int(k):,}' for k in keys)}: fit RSS {rss}; fit time {tim}.")
        g_lo, g_hi = growth.get(str(lo)), growth.get(str(hi))
        d_lo = next(f["n_params"] for f in fits if f["hidden"] == lo)
        d_hi = next(f["n_params"] for f in fits if f["hidden"] == hi)
        if g_lo and g_hi:
            diff = g_hi["rss_floor_mb"] - g_lo["rss_floor_mb"]
            out.append(f"- The floors differ by {diff:.1f} MB for the LSTM {hi}'s {d_hi - d_lo:,} more weights "
                       f"({diff * 2**20 / (d_hi - d_lo):.0f} bytes each).")
    sel = {h: [f["stages_s"]["select"] for f in fits if f["hidden"] == h] for h in hiddens}
    out.append("- Wasserstein selection (the diagonal pass over all D weights) took "
               + "; ".join(f"{min(v):.1f}-{max(v):.1f} s on the LSTM {h}" for h, v in sel.items())
               + ", whatever S.")
    grid = r.get("grid_search")
    if grid:
        big = max((f for f in fits if f["hidden"] == grid["hidden"]), key=lambda f: f["subnet_size"])
        n_grid = r.get("grid_size")
        what = f"{n_grid} values of λ" if n_grid else "the benchmark's default grid of λ"
        per = (f"; each value costs one Cholesky factorization ({big['stages_s']['factorize']:.1f} s at S = "
               f"{big['subnet_size']:,} on this LSTM)")
        out.append(f"- Grid search ({what}, LSTM {grid['hidden']}, S = {grid['subnet_size']:,}): "
                   f"{grid['stages_s']['prior_search']:.1f} s on top of the validation Jacobians{per}; it chose "
                   f"λ = {_lam(grid['prior_precision'])}.")
    scoring = r.get("scoring", {})
    if scoring:
        def size(key: str) -> int:  # laplace_s<S>_probit | laplace_s<S>_mc25
            return int(re.search(r"_s(\d+)_", key).group(1))

        names = sorted({k for s in scoring.values() for k in s["map_over_laplace"]},
                       key=lambda k: (size(k), k.endswith("mc25")))
        label = {k: f"S = {size(k):,} " + ("MC x25" if k.endswith("mc25") else "probit") for k in names}
        admissions = sorted({s["admissions"] for s in scoring.values()})
        out += ["", (f"Scoring throughput on the {', '.join(str(a) for a in admissions)} test admissions "
                     f"(`predict.feature_logits`, batches of 256, one process, the models in alternating blocks, "
                     f"median of the repeats): admissions/s, and MAP admissions/s over Laplace admissions/s in "
                     f"brackets:"), ""]
        rows = []
        for h, s in sorted(scoring.items(), key=lambda kv: int(kv[0])):
            rates = s["admissions_per_s"]
            rows.append([h, f"{rates['map']:,.1f}"] + [f"{rates[k]:,.1f} (x{s['map_over_laplace'][k]:.1f})"
                                                       for k in names])
        out.append(_table(["LSTM", "MAP adm/s"] + [label[k] for k in names], rows))
    return "\n".join(out)


def _lam(value: float) -> str:
    """A prior precision, 3 significant digits (1e4 rather than 1e+04)."""
    return f"{value:.3g}".replace("e+0", "e").replace("e+", "e").replace("e-0", "e-")


def _per_module(per_tensor: dict) -> str:
    """Selected weights per module (the first part of the parameter name), largest first."""
    counts: dict[str, int] = {}
    for name, n in per_tensor.items():
        counts[name.split(".")[0]] = counts.get(name.split(".")[0], 0) + n
    return ", ".join(f"{m} {n:,}" for m, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def render_laplace_selection(r: dict) -> str:
    rows = []
    map_nll = {round(row["val_nll_map"], 5) for row in r["rows"]}
    for row in r["rows"]:
        grid = [g["val_nll"] for g in row.get("grid", [])]
        ties = len(grid) > 1 and max(grid) - min(grid) == 0.0
        edge = " (grid edge" + (", every λ ties)" if ties else ")") if row["at_grid_edge"] else ""
        if row["settings"].get("hessian") == "diag":
            chosen = f"every weight (D = {row['subnet_size']:,}), diagonal"
        else:
            chosen = _per_module(row["per_tensor"])
        rows.append([row["variant"], f"{row['subnet_size']:,}", f"{_lam(row['prior_precision'])}{edge}",
                     f"{row['val_nll']:.5f}", f"{row['val_nll'] - row['val_nll_map']:+.5f}", chosen])
    unused = max(row.get("unused_weights", 0) for row in r["rows"])
    head = (f"LSTM {r['hidden']} MAP run ({r['map_steps']} steps; {unused:,} of its weights have a zero GGN diagonal: "
            f"no training logit depends on them); λ chosen on the validation split over the default grid; validation "
            f"NLL of the probit predictive at that λ (MAP model: {', '.join(f'{v:.5f}' for v in sorted(map_nll))}):")
    return "\n".join([head, "", _table(["variant", "S", "λ", "validation NLL", "- MAP", "selected weights per module"],
                                       rows)])


def render_laplace_jacobian_groups(r: dict) -> str:
    groups = sorted({row["group"] for row in r["rows"]})
    keys = sorted({(row["hidden"], row["weights"]) for row in r["rows"]}, key=lambda k: (k[0], k[1] != "all"))
    ms = {(row["hidden"], row["weights"], row["group"]): row["ms_per_admission"] for row in r["rows"]}
    rows = [[str(h), "all D" if w == "all" else f"{int(w):,} random", *(f"{ms[(h, w, g)]:.1f}" if (h, w, g) in ms
                                                                         else "" for g in groups)] for h, w in keys]
    head = (f"Milliseconds per admission for the subnetwork Jacobian, {r['admissions']} training admissions (longest "
            f"first), {r['threads']} torch thread(s), {_load_average(r)}; columns: admissions per backward group:")
    return "\n".join([head, "", _table(["LSTM", "Jacobian w.r.t.", *(str(g) for g in groups)], rows)])
# ------------------------------------------------------------------------- image benchmarks (issue 14)

VISION_METHODS = ("deterministic", "batchensemble", "rank1-gaussian", "rank1-cauchy", "rank1-cauchy-normal-q",
                  "rank1-gaussian-normal-init", "deep-ensemble")  # table order (others follow)
VISION_TABLES = (("nll", "NLL"), ("accuracy", "Accuracy"), ("ece", "ECE (top-label, 15 bins)"))
VISION_TRAIN_TARGET = 1.3  # rank-1 training step / deterministic step (issue 14)


def _ordered(methods) -> list[str]:
    return sorted(methods, key=lambda m: (VISION_METHODS.index(m) if m in VISION_METHODS else len(VISION_METHODS), m))


def _cell(stat: dict, digits: int = 3) -> str:
    if stat.get("n", 2) == 1:
        return f"{stat['mean']:.{digits}f}"
    return f"{stat['mean']:.{digits}f} ± {stat['sd']:.{digits}f}"


def _severity_tables(summary: dict) -> list[str]:
    """Per metric: a row per method, columns clean and the severities (mean ± sd over seeds)."""
    methods = _ordered(summary)
    settings = ["clean"] + sorted({s for m in methods for s in summary[m] if s != "clean"}, key=int)
    out = []
    for metric, title in VISION_TABLES:
        rows = [[m, *(_cell(summary[m][s][metric]) if s in summary[m] else "n/a" for s in settings)]
                for m in methods]
        out += [f"{title} (mean ± sd over seeds; severity columns: mean over the corruptions)", "",
                _table(["method", *(s if s == "clean" else f"severity {s}" for s in settings)], rows), ""]
    return out


def _mean(values) -> float:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else float("nan")


def render_vision_digits(r: dict) -> str:
    summary, runs = r["summary"], r["runs"]
    methods = _ordered(summary)
    seeds = sorted({run["seed"] for run in runs})
    out = [f"{len(methods)} methods x seeds {', '.join(map(str, seeds))}; clean test images and five corruptions "
           "x five severities.", ""]
    out += _severity_tables(summary)
    corruptions = list(runs[0]["report"]["corrupted"])
    worst = str(max(int(s) for s in runs[0]["report"]["by_severity"]))
    rows = []
    for m in methods:
        mine = [run["report"]["corrupted"] for run in runs if run["method"] == m]
        rows.append([m, *(f"{_mean(c[name][worst]['nll'] for c in mine):.2f} / "
                          f"{_mean(c[name][worst]['accuracy'] for c in mine):.2f}" for name in corruptions)])
    out += [f"Severity {worst} by corruption, NLL / accuracy (mean over seeds):", "",
            _table(["method", *(c.replace("_", " ") for c in corruptions)], rows), ""]
    rows = []
    for m in methods:
        clean = [run["report"]["clean"] for run in runs if run["method"] == m]
        if clean[0].get("components", 1) == 1:
            continue
        rows.append([m, f"{_mean(c.get('disagreement') for c in clean):.3f}",
                     f"{_mean(c.get('disagreement_normalized') for c in clean):.1f}",
                     f"{_mean(c.get('mean_mutual_information') for c in clean):.3f}"])
    out += ["Diversity on the clean test set (mean over seeds; the normalised disagreement is n/a where a seed's "
            "ensemble made no error):", "",
            _table(["method", "disagreement of the members' labels", "/ error rate", "mean MI (nats)"], rows)]
    sources = r.get("combined_from") or []
    if sources:
        out += ["", "Combined from (a later file's runs replace an earlier file's runs of the same method):", ""]
        out += [f"- `{s['file']}`: {', '.join(s['methods_used'])} (`{s['command']}` at `{s['commit'][:7]}`, "
                f"{s['wall_seconds'] / 60:.0f} min wall)" for s in sources]
    return "\n".join(out)


def render_vision_digits_source(r: dict) -> str:
    """One raw run of benchmarks/vision_digits.py: what ran, where, how long, and its clean figures."""
    st = r["settings"]
    methods = _ordered(r["summary"])
    head = (f"WRN-{st['depth']}-{st['width']} at {st['size']}x{st['size']}, K = {st['k']}, {st['epochs']:g} epochs, "
            f"{st['batch']} tiled rows per step, {st['samples']} evaluation samples per component; seeds "
            f"{', '.join(map(str, st['seeds']))}; {r['wall_seconds'] / 60:.0f} min wall with {st['jobs']} processes.")
    rows = [[m, *(_cell(r["summary"][m]["clean"][k]) for k, _ in VISION_TABLES)] for m in methods]
    out = [head, "", _table(["method", "clean NLL", "clean accuracy", "clean ECE"], rows)]
    if r.get("commit_note"):
        out += ["", f"Note recorded with the file: {r['commit_note']}."]
    return "\n".join(out)


def render_vision_rank1_diagnose(r: dict) -> str:
    runs = r["runs"]
    names = [m for m in _ordered(runs)]
    rows = [
        ["training NLL, last step", *(f"{runs[m]['train_nll_last_step']:.3f}" for m in names)],
        ["KL at the end (nats)", *(f"{runs[m]['kl']:,.0f}" for m in names)],
        ["factor means below zero at the end (start: 50%)", *(f"{runs[m]['share_means_below_zero']:.2%}" for m in names)],
        ["mean \\|factor mean - 1\\|", *(f"{runs[m]['mean_abs_mean_minus_1']:.3f}" for m in names)],
        ["posterior scale, 10% / 50% / 99% quantiles (start 0.0316)",
         *(" / ".join(f"{runs[m]['scale_quantiles'][q]:.4f}" for q in ("0.1", "0.5", "0.99")) for m in names)],
        ["clean NLL / ECE / MI, sampled", *(" / ".join(f"{runs[m]['clean_sampled'][k]:.3f}" for k in
                                                      ("nll", "ece", "mean_mutual_information")) for m in names)],
        ["clean NLL / ECE / MI at the posterior means", *(" / ".join(f"{runs[m]['clean_posterior_means'][k]:.3f}" for k in
                                                                   ("nll", "ece", "mean_mutual_information"))
                                                          for m in names)],
    ]
    return (f"Seed {r['seed']}, {runs[names[0]]['factor_entries']:,} factor entries per model:\n\n"
            + _table(["", *names], rows))


def render_vision_params(r: dict) -> str:
    rows = r["rows"]
    shared = [x for x in rows if not x["member_batchnorm_option"]]
    per_member = {(x["arch"], x["method"], x["components"]): x for x in rows if x["member_batchnorm_option"]}
    names = {"resnet50": "ResNet-50", "wrn": "WRN-28-10"}
    table = []
    for x in sorted(shared, key=lambda x: (x["arch"], x["method"] != "rank1", x["components"])):
        pm = per_member.get((x["arch"], x["method"], x["components"]))
        table.append([names.get(x["arch"], x["arch"]), "rank-1" if x["method"] == "rank1" else "BatchEnsemble",
                      str(x["components"]), f"{x['deterministic']:,}", f"{x['extra']:,}", f"{x['extra_pct']:.2f}",
                      f"{x['factors']:,}", f"{x['member_biases']:,}", f"{pm['extra_pct']:.2f}" if pm else "n/a"])
    rn = next(x for x in rows if x["arch"] == "resnet50" and x["method"] == "rank1")
    return (_table(["network", "method", "K", "deterministic", "extra parameters", "extra %", "of which factors",
                    "head biases", "with per-member BN: extra %"], table)
            + f"\n\nResNet-50: {rn['factor_entries'] // rn['components']:,} factor entries per component; one "
              f"component's mean and scale = {rn['one_component_mean_and_scale']:,} parameters = "
              f"{rn['one_component_pct']:.3f}% of the deterministic network.")


def render_vision_step(r: dict) -> str:
    c, t, e = r["config"], r["train_step_seconds"], r["eval_images_per_second"]
    ratio = r["train_ratio_rank1_to_deterministic"]
    load = r.get("load_average_after")
    head = (f"`benchmarks/vision_step.py --steps {c['steps']} --blocks {c['blocks']}`: {r['arch']} "
            f"({c.get('width')} x 16/32/64 filters), K = {c['k']}, a tiled batch of {c['batch']} rows "
            f"({c['batch'] // c['k']} distinct images tiled {c['k']} times; the deterministic network gets the same "
            f"rows), {c['threads']} thread(s); medians over {c['blocks']} interleaved blocks of {c['steps']} steps"
            + (f"; load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1 / 5 / 15 min) at the end" if load else "")
            + ":")
    rows = [
        ["training step, deterministic", f"{t['deterministic'] * 1e3:.0f} ms", "1.00"],
        ["training step, BatchEnsemble", f"{t['batchensemble'] * 1e3:.0f} ms",
         f"{r['train_ratio_batchensemble_to_deterministic']:.2f}"],
        ["training step, rank-1 (per-example draws)", f"{t['rank1'] * 1e3:.0f} ms", f"**{ratio:.2f}**"],
        ["evaluation, deterministic, one pass", f"{e['deterministic']:.0f} images/s", ""],
        [f"evaluation, rank-1, {c['samples']} samples x {c['k']} members ({r['eval_rank1_draws_per_image']} draws)",
         f"{e['rank1']:.2f} images/s", f"{r['eval_ratio_rank1_to_one_deterministic_pass']:.0f}x"],
        [f"the same per draw; per draw against deterministic passes of {c['eval_batch'] * r['eval_rank1_draws_per_image']:,} "
         "images", "", f"{r['eval_ratio_per_draw']:.2f}x; {r['eval_ratio_per_draw_same_rows']:.2f}x"],
    ]
    rss = r.get("peak_rss_mib")
    if rss:
        rows.append(["peak RSS (each alone in a fresh process): training det / BE / rank-1",
                     f"{rss['train_deterministic']:.0f} / {rss['train_batchensemble']:.0f} / {rss['train_rank1']:.0f} "
                     "MiB", ""])
        rows.append([f"peak RSS: evaluation det / rank-1 ({c['eval_batch']} images x {r['eval_rank1_draws_per_image']} "
                     "draws per pass)", f"{rss['eval_deterministic']:.0f} / {rss['eval_rank1']:.0f} MiB", ""])
    met = "met" if ratio <= r.get("train_target_ratio", VISION_TRAIN_TARGET) else "**not met**"
    return (head + "\n\n" + _table(["", "time or rate", "ratio"], rows)
            + f"\n\nTraining target (rank-1 at most {r.get('train_target_ratio', VISION_TRAIN_TARGET):g}x the "
              f"deterministic step): {met} ({ratio:.2f}x).")


def render_vision_digits_cli(r: dict) -> str:
    cmds = r["commands"]
    runs = r.get("runs") or {}
    flags = "; ".join(f"{m}: `{f}`" for m, f in r["method_flags"].items())
    out = ["```", f"python {cmds['train']}", f"python {cmds['evaluate']}", f"python {cmds['compare']}", "```", "",
           f"Method flags (M): {flags}. One (method, seed) per process, {runs.get('jobs', '?')} at a time"
           + (f", {runs['wall_s'] / 60:.0f} min wall for the runs (load average {runs['load_average_start'][0]:.1f} at "
              f"the start, {runs['load_average_end'][0]:.1f} at the end, {runs['cpus']} CPUs)" if "wall_s" in runs else "")
           + f". `compare` printed, for {r['dataset']} (seeds per method: "
           + ", ".join(f"{m} {n}" for m, n in r["seeds"].items()) + "):", ""]
    out += _severity_tables(r["summary"])
    match = r.get("library_match") or {}
    if match:
        worst = max(v for v in match.values() if v is not None)
        out.append(f"Against the library benchmark (`benchmarks/results/vision_digits.json`, the same settings): the "
                   f"largest difference of any mean is {worst:.2g} (" + ", ".join(
                       f"{m} {v:.2g}" for m, v in match.items() if v is not None) + ").")
    return "\n".join(out).rstrip()


def render_extract_mimic4(r: dict) -> str:
    """benchmarks/extract_mimic4.py's own rendering (its tables follow its JSON's structure)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("extract_mimic4", Path(__file__).with_name("extract_mimic4.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.markdown(r)


def _server_label(server: dict) -> str:
    """'workers 1, threads 1, via MLflow' / 'direct' (the serve defaults: one worker, one thread, direct)."""
    workers, threads = server.get("workers", "1"), server.get("threads", "1")
    path = "via MLflow" if "via-mlflow" in server else "direct"
    default = workers == "1" and threads == "1" and path == "direct"
    return f"workers {workers}, threads {threads}, {path}{' (default)' if default else ''}"


def render_serve_load(r: dict) -> str:
    """benchmarks/serve_load.py: one row per server configuration and number of clients."""
    samples = r.get("samples")
    samples = "the model's score_samples" if samples is None else samples
    head = (f"{r['batch']}-admission requests ({r['distinct']} distinct bodies) from `{r['features']}`, "
            f"{r['requests']} requests per row, samples per component "
            f"{samples}; {r['cpus']} CPUs, "
            f"shared; load average {r['load_average'][0]:.1f} at the start, {r['load_average'][-1]:.1f} at the end.")
    rows = []
    for server in r["servers"]:
        for i, row in enumerate(server["rows"]):
            rows.append([_server_label(server["server"]) if i == 0 else "", str(row["clients"]),
                         f"{row['admissions_per_s']:,.0f}", f"{row['p50_ms']:,.0f}", f"{row['p99_ms']:,.0f}",
                         str(row["errors"]), str(row["lost_rows"]), f"{row['identical']}/{row['requests']}",
                         f"{row['server_cpu_ms_per_request']:,.0f}"])
    return head + "\n\n" + _table(["server", "clients", "admissions/s", "p50 ms", "p99 ms", "errors", "lost rows",
                                   "identical to alone", "server CPU ms per request"], rows)


# ------------------------------------------------------------------------- classical baselines


def render_baselines(r: dict) -> str:
    """benchmarks/baselines.py: training and scoring time of logreg / gbm against the LSTMs; the featurizer."""
    samples = r["samples"]
    head = (f"On `{r['features']}` ({r['test_admissions']:,} test admissions), {r['threads']} thread, load average "
            f"{r['load_average'][0]:.1f} on {r['cpus']} CPUs at the start, one process, back to back. Training: "
            f"the baselines' whole validation search as `train --model logreg|gbm` runs it (featurizing train and "
            f"val included, no MLflow); the LSTMs' default recipe for {r['lstm_steps']:,} steps (periodic "
            f"validation included, no MLflow). Scoring the test split: baselines one draw, LSTMs {samples} "
            f"samples per component (best of 3). Ratios against the rank-1 LSTM:")
    rows = [[name, f"{r['train_seconds'][name]:.1f}", f"{ratio['train']:.3f}", f"{r['score_seconds'][name]:.3f}",
             f"{ratio['score']:.4f}"] for name, ratio in r["ratios_to_rank1"].items()]
    out = [head, "", _table(["model", "train s", "train / rank-1", "score test s", "score / rank-1"], rows), ""]
    lg, gb = r.get("logreg_fit"), r.get("gbm_fit")
    if lg and gb:
        out.append(f"Chosen on validation: logreg C = {lg['chosen']['C']:g} ({lg['chosen']['columns']:,} columns); "
                   f"gbm {gb['chosen']['max_leaf_nodes']} leaves, min {gb['chosen']['min_samples_leaf']} per leaf, "
                   f"{gb['chosen']['rounds']} rounds ({gb['chosen']['columns']:,} columns). Of the baselines' "
                   f"training time, featurizing: logreg {lg['featurize']:.1f} s, gbm {gb['featurize']:.1f} s.")
        out.append("")
    f = r["featurize"]
    prow = [[f"{p['admissions']:,}", f"{p['seconds']:.2f}", f"{p['per_admission_ms']:.3f}"] for p in f["points"]]
    extrapolated = (f"Extrapolated linearly from the largest to {f['target']:,} admissions (MIMIC-III's cohort): "
                    f"{f['extrapolated_target_seconds']:.1f} s. This is an extrapolation, not a measurement.")
    out += ["The featurizer (all three splits of each benchmark, best of 3):", "",
            _table(["admissions", "seconds", "ms per admission"], prow), "", extrapolated]
    if "replicated" in f:
        rep = f["replicated"]
        out += ["", f"Measured on {rep['admissions']:,} admissions made by repeating the larger benchmark's "
                   f"(their shapes, not new patients): {rep['seconds']:.1f} s, {rep['stored_values']:,} stored values."]
    return "\n".join(out)


def render_learning_curves(r: dict) -> str:
    """benchmarks/learning_curves.py: test NLL gap to the true risk and AUC-PR against the training set's size."""
    st = r["settings"]
    tr = r["true_risk_test"]
    test_n = r["records"][0]["test"]["n"]
    head = (f"One synthetic world (`{st['world']}`: {st['world_train_patients']:,} training patients, "
            f"{st['world_train_admissions']:,} training admissions), its own validation and test admissions "
            f"({test_n:,} test admissions) for every point; a point of N patients trains on 0.8·N of the world's "
            f"training patients (a fixed random subset per seed, nested across sizes). LSTMs: the default recipe "
            f"at {st['max_steps']:,} steps, best checkpoint by validation NLL; `gbm`: its validation search. "
            f"Seeds {', '.join(map(str, st['seeds']))}; mean ± sd over seeds. Test NLL of the true risk: "
            f"{tr['nll']:.4f}, its AUC-PR {tr['auc_pr']:.4f}.")

    def cell(row: dict, key: str, fmt: str = ".4f") -> str:
        mean, sd = row[f"{key}_mean"], row[f"{key}_sd"]
        return f"{mean:{fmt}} ± {sd:{fmt}}" if sd is not None and math.isfinite(sd) else f"{mean:{fmt}}"

    rows = [[f"{x['size']:,}", x["model"], str(x["seeds"]), f"{x['train_admissions']:,.0f}", cell(x, "val_nll"),
             cell(x, "test_nll"), cell(x, "test_nll_gap"), cell(x, "test_auc_pr"), cell(x, "test_ece")]
            for x in sorted(r["summary"], key=lambda x: (x["model"], x["size"]))]
    out = [head, "", _table(["patients", "model", "seeds", "train admissions", "val NLL", "test NLL", "test NLL gap",
                             "test AUC-PR", "test ECE"], rows)]
    if r.get("oracle_test"):
        o = r["oracle_test"]
        out += ["", f"Features oracle on the same test admissions: NLL {o['nll']:.4f}, AUC-PR {o['auc_pr']:.4f}."]
    if st.get("png"):
        out += ["", f"![learning curves]({Path(st['png']).name})"]
    return "\n".join(out)


RENDERERS: dict[str, Callable[[dict], str]] = {
    "baselines": render_baselines,
    "learning_curves": render_learning_curves,
    "extract": render_extract,
    "extract_mimic4": render_extract_mimic4,
    "serve_load": render_serve_load,
    "serve_load_2048": render_serve_load,
    "serve_load_samples12": render_serve_load,
    "rank1_lstm": render_rank1_lstm,
    "laplace_fit": render_laplace_fit,
    "laplace_selection": render_laplace_selection,
    "laplace_jacobian_groups": render_laplace_jacobian_groups,
    "vision_digits": render_vision_digits,
    "vision_digits_main": render_vision_digits_source,
    "vision_digits_rerun": render_vision_digits_source,
    "vision_digits_normal_init": render_vision_digits_source,
    "vision_digits_cli": render_vision_digits_cli,
    "vision_rank1_diagnose": render_vision_rank1_diagnose,
    "vision_params": render_vision_params,
    "vision_step": render_vision_step,
    "vision_step_w4": render_vision_step,
    "vision_step_w8": render_vision_step,
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
