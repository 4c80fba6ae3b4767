"""Digits corruption benchmark: every method x seeds, clean and five corruptions x five severities.

    .venv/bin/python -m experiments.vision_digits [--seeds 0 1 2] [--jobs 2] [--epochs 20]
        [--samples 2] [--out benchmarks/results/vision_digits.json]

scikit-learn's 1,797 digits, upsampled to 16x16 and split 60/20/20 by seed (each seed its own
split, initialisation and draws); a small Wide ResNet (WRN-10-1: 16/32/64 filters) per method,
trained with the published recipe scaled to a short run (``train_vision``: SGD Nesterov, lr 0.1 x
distinct/128, warm-up 1 epoch, decays at 80/160/180 of 200 epochs rescaled, KL annealed over
0.8 of the run as 200 of 250 epochs, tiled batch of 64 rows); evaluated with ``--samples``
draws per rank-1 component on the clean test split and on every corruption x severity
(``workflows.vision_run.evaluate_model``). Runs go to a pool of ``--jobs`` single-threaded processes; the raw
results and the summary (mean ± sd over seeds) are written to ``--out`` (atomically) and the
tables printed as markdown.

    .venv/bin/python -m experiments.vision_digits --combine A.json B.json --out C.json

merges result files instead (a later file's runs replace the earlier files' runs of the same
method; each file's command and commit are kept under ``sources``) and prints the tables.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import subprocess
import time
from pathlib import Path

from benchmarks import report
from benchmarks.harness import ROOT

METHODS = {  # name -> VisionConfig overrides
    "deterministic": {"method": "deterministic"},
    "batchensemble": {"method": "batchensemble"},
    "rank1-gaussian": {"method": "rank1", "prior": "gaussian"},
    "rank1-cauchy": {"method": "rank1", "prior": "cauchy"},  # Cauchy prior and posterior
    "rank1-cauchy-normal-q": {"method": "rank1", "prior": "cauchy", "posterior": "normal"},  # not in the default set
    "rank1-gaussian-normal-init": {"method": "rank1", "prior": "gaussian", "factor_init": "normal"},  # not default
    "deep-ensemble": {"method": "deep-ensemble"},
}
DEFAULT_METHODS = ["deterministic", "batchensemble", "rank1-gaussian", "rank1-cauchy", "deep-ensemble"]
# The rendered tables: (metric, title); rows in METHODS' order.
TABLES = (("nll", "NLL"), ("accuracy", "Accuracy"), ("ece", "ECE (top-label, 15 bins)"))


def members(method: str, k: int) -> int:
    """K of ``method``'s model (a ``METHODS`` name) at ensemble size ``k``: ``VisionConfig.components``, 1 for the
    deterministic network."""
    from pipeline.tasks.vision import VisionConfig

    return VisionConfig(**{"ensemble_size": k, **METHODS[method]}).components


def run_one(job: tuple[str, int, dict]) -> dict:
    """Train and evaluate one (method, seed); everything JSON-able."""
    import torch

    from pipeline.tasks.vision import VisionTrainConfig, load_splits
    from pipeline.workflows.vision_run import evaluate_model, train_vision

    method, seed, settings = job
    torch.set_num_threads(1)
    model = {"arch": "wrn", "depth": settings["depth"], "width": settings["width"], "ensemble_size": settings["k"],
             **METHODS[method]}
    cfg = VisionTrainConfig(dataset="digits", image_size=settings["size"], seed=seed, model=model,
                            epochs=settings["epochs"], batch_size=settings["batch"],
                            kl_anneal_epochs=0.8 * settings["epochs"], eval_samples=settings["samples"], threads=1,
                            log_every=100, eval_every_epochs=0.0, progress=False)
    splits = load_splits(cfg)
    result = train_vision(cfg, splits=splits)
    start = time.perf_counter()
    evaluation = evaluate_model(result.model, splits.test, samples=settings["samples"], seed=seed)
    return {"method": method, "seed": seed, "train_config": cfg.to_dict(),
            "model_config": result.model_config.to_dict(), "steps": result.steps, "train_seconds": result.seconds,
            "eval_seconds": time.perf_counter() - start, "final_train": result.final_train,
            "val": {m: result.val_metrics[m] for m in ("nll", "accuracy", "ece")}, "report": evaluation.to_dict()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--methods", nargs="+", default=DEFAULT_METHODS, choices=list(METHODS))
    ap.add_argument("--jobs", type=int, default=2, help="parallel single-threaded processes")
    ap.add_argument("--epochs", type=float, default=20.0)
    ap.add_argument("--batch", type=int, default=64, help="tiled rows per step (batch / K distinct images)")
    ap.add_argument("--depth", type=int, default=10)
    ap.add_argument("--width", type=int, default=1)
    ap.add_argument("--k", type=int, default=4, help="ensemble size K")
    ap.add_argument("--size", type=int, default=16, help="digit image side after upsampling")
    ap.add_argument("--samples", type=int, default=2, help="evaluation samples per rank-1 component")
    ap.add_argument("--out", type=Path, default=report.results_path("vision_digits"))
    ap.add_argument("--combine", type=Path, nargs="+", help="merge these result files (later files win per method)")
    args = ap.parse_args()

    from pipeline.reports.vision_summary import summarize_runs

    if args.combine:
        combine(args.combine, args.out)
        return

    commit, dirty = code_version()  # before the pool imports the code: the runs use this version
    settings = {k: getattr(args, k) for k in ("epochs", "batch", "depth", "width", "k", "size", "samples")}
    jobs = [(m, s, settings) for m in args.methods for s in args.seeds]
    jobs.sort(key=lambda j: members(j[0], args.k) == 1)  # the long K-member runs first
    start = time.perf_counter()
    with mp.get_context("spawn").Pool(args.jobs) as pool:
        runs = []
        for run in pool.imap_unordered(run_one, jobs):
            runs.append(run)
            print(f"[{time.perf_counter() - start:6.0f} s] {run['method']} seed {run['seed']}: train "
                  f"{run['train_seconds']:.0f} s, eval {run['eval_seconds']:.0f} s, clean NLL "
                  f"{run['report']['clean']['nll']:.4f} acc {run['report']['clean']['accuracy']:.4f}", flush=True)
    wall = time.perf_counter() - start
    runs.sort(key=lambda r: (args.methods.index(r["method"]), r["seed"]))
    summary = summarize_runs(runs)
    summary = {m: summary[m] for m in args.methods}
    report.write_results(args.out.stem, {"command": report.command(__spec__.name),
                                         "commit": commit, "uncommitted_changes": dirty,
                                         "settings": {**settings, "seeds": args.seeds, "jobs": args.jobs},
                                         "wall_seconds": wall, "summary": summary, "runs": runs}, path=args.out,
                         renderer=renderer_of(args.out.stem))
    print_tables(summary, args.seeds)
    print(f"\n{len(runs)} runs in {wall:.0f} s wall with {args.jobs} processes")


def code_version() -> tuple[str, list[str]]:
    """HEAD's commit and the tracked files that differ from it (``git status --porcelain -uno``)."""
    def git(*cmd: str) -> str:
        return subprocess.run(["git", *cmd], cwd=ROOT, capture_output=True, text=True).stdout

    return git("rev-parse", "HEAD").strip(), [line[3:] for line in git("status", "--porcelain", "-uno").splitlines()]


def print_tables(summary: dict, seeds) -> None:
    from pipeline.reports.vision_summary import markdown_table

    for metric in ("nll", "accuracy", "ece"):
        print(f"\n{metric} (mean ± sd over seeds {list(seeds)}; severity columns: mean over the corruptions)\n")
        print(markdown_table(summary, metric))


def combine(files: list[Path], out: Path) -> None:
    """Merge result files: per method, the runs of the last file that has it."""
    from pipeline.core import fileio
    from pipeline.reports.vision_summary import summarize_runs

    by_method: dict[str, list[dict]] = {}
    provider: dict[str, str] = {}
    sources = []
    for path in files:
        data = fileio.read_json(path)
        methods = sorted({r["method"] for r in data["runs"]})
        sources.append({"file": str(path), "command": data["command"], "commit": data["commit"],
                        "settings": data["settings"], "wall_seconds": data["wall_seconds"], "methods": methods})
        for m in methods:
            by_method[m] = [r for r in data["runs"] if r["method"] == m]
            provider[m] = str(path)
    order = [m for m in METHODS if m in by_method]
    runs = [r for m in order for r in sorted(by_method[m], key=lambda r: r["seed"])]
    summary = summarize_runs(runs)
    for src in sources:
        src["methods_used"] = [m for m in order if provider[m] == src["file"]]
    print_tables({m: summary[m] for m in order}, sorted({r["seed"] for r in runs}))
    report.write_results(out.stem, {"command": report.command(__spec__.name),
                                    "combined_from": sources, "summary": {m: summary[m] for m in order},
                                    "runs": runs}, path=out, renderer=renderer_of(out.stem))


def renderer_of(name: str) -> str:
    """The renderer of a digits results file (recorded in it, ``benchmarks.report``): the combined table of
    ``vision_digits``, the recipes' claims table, or one source run's tables."""
    function = {"vision_digits": "render", "vision_digits_recipes": "render_recipes"}.get(name, "render_source")
    return f"experiments.vision_digits:{function}"


def ordered(methods) -> list[str]:
    """Methods in ``METHODS``' order (the tables' rows), any others after them by name."""
    order = list(METHODS)
    return sorted(methods, key=lambda m: (order.index(m) if m in order else len(order), m))


def _cell(stat: dict, digits: int = 3) -> str:
    if stat.get("n", 2) == 1:
        return f"{stat['mean']:.{digits}f}"
    return f"{stat['mean']:.{digits}f} ± {stat['sd']:.{digits}f}"


def severity_tables(summary: dict) -> list[str]:
    """Per metric: a row per method, columns clean and the severities (mean ± sd over seeds)."""
    methods = ordered(summary)
    settings = ["clean"] + sorted({s for m in methods for s in summary[m] if s != "clean"}, key=int)
    out = []
    for metric, title in TABLES:
        rows = [[m, *(_cell(summary[m][s][metric]) if s in summary[m] else "n/a" for s in settings)]
                for m in methods]
        out += [f"{title} (mean ± sd over seeds; severity columns: mean over the corruptions)", "",
                report.table(["method", *(s if s == "clean" else f"severity {s}" for s in settings)], rows), ""]
    return out


def _mean(values) -> float:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else float("nan")


def render(r: dict) -> str:
    """docs/experiments/2026-12-01-vision-digits.md's figures:vision_digits section (the combined runs)."""
    summary, runs = r["summary"], r["runs"]
    methods = ordered(summary)
    seeds = sorted({run["seed"] for run in runs})
    out = [f"{len(methods)} methods x seeds {', '.join(map(str, seeds))}; clean test images and five corruptions "
           "x five severities.", ""]
    out += severity_tables(summary)
    corruptions = list(runs[0]["report"]["corrupted"])
    worst = str(max(int(s) for s in runs[0]["report"]["by_severity"]))
    rows = []
    for m in methods:
        mine = [run["report"]["corrupted"] for run in runs if run["method"] == m]
        rows.append([m, *(f"{_mean(c[name][worst]['nll'] for c in mine):.2f} / "
                          f"{_mean(c[name][worst]['accuracy'] for c in mine):.2f}" for name in corruptions)])
    out += [f"Severity {worst} by corruption, NLL / accuracy (mean over seeds):", "",
            report.table(["method", *(c.replace("_", " ") for c in corruptions)], rows), ""]
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
            report.table(["method", "disagreement of the members' labels", "/ error rate", "mean MI (nats)"], rows)]
    sources = r.get("combined_from") or []
    if sources:
        out += ["", "Combined from (a later file's runs replace an earlier file's runs of the same method):", ""]
        out += [f"- `{s['file']}`: {', '.join(s['methods_used'])} (`{s['command']}` at `{s['commit'][:7]}`, "
                f"{s['wall_seconds'] / 60:.0f} min wall)" for s in sources]
    return "\n".join(out)


def render_source(r: dict) -> str:
    """One raw run of this script (figures:vision_digits_main, _rerun, _normal_init): what ran, where, how long,
    and its clean figures."""
    st = r["settings"]
    methods = ordered(r["summary"])
    head = (f"WRN-{st['depth']}-{st['width']} at {st['size']}x{st['size']}, K = {st['k']}, {st['epochs']:g} epochs, "
            f"{st['batch']} tiled rows per step, {st['samples']} evaluation samples per component; seeds "
            f"{', '.join(map(str, st['seeds']))}; {r['wall_seconds'] / 60:.0f} min wall with {st['jobs']} processes.")
    rows = [[m, *(_cell(r["summary"][m]["clean"][k]) for k, _ in TABLES)] for m in methods]
    out = [head, "", report.table(["method", "clean NLL", "clean accuracy", "clean ECE"], rows)]
    if r.get("commit_note"):
        out += ["", f"Note recorded with the file: {r['commit_note']}."]
    return "\n".join(out)


if __name__ == "__main__":
    main()


# The seed paper's image claims (Dusenberry et al. 2020, section 4), each as (where, claim, method, than,
# metrics, setting): "method is better than ``than`` on each metric" on digits' clean test set or the
# mean over the corruptions x severities. Lower is better for NLL and ECE, higher for accuracy.
CLAIMS = (
    ("CIFAR-10, Table 1", "Gaussian rank-1 beats the deterministic network", "rank1-gaussian", "deterministic",
     ("nll", "accuracy", "ece"), "clean"),
    ("CIFAR-10, Table 1", "Cauchy rank-1 beats the deterministic network", "rank1-cauchy", "deterministic",
     ("nll", "accuracy", "ece"), "clean"),
    ("CIFAR-10, Table 1", "Gaussian rank-1 beats BatchEnsemble", "rank1-gaussian", "batchensemble",
     ("nll", "accuracy", "ece"), "clean"),
    ("CIFAR-10, Table 1", "Cauchy rank-1 beats BatchEnsemble", "rank1-cauchy", "batchensemble",
     ("nll", "accuracy", "ece"), "clean"),
    ("CIFAR-10-C, Table 1", "under corruption, Gaussian rank-1 beats BatchEnsemble (NLL 1.02 -> 0.74)",
     "rank1-gaussian", "batchensemble", ("nll", "accuracy", "ece"), "corrupted"),
    ("CIFAR-10-C, Table 1", "under corruption, Cauchy rank-1 beats BatchEnsemble", "rank1-cauchy", "batchensemble",
     ("nll", "accuracy", "ece"), "corrupted"),
    ("CIFAR-100, Table 3", "Cauchy rank-1 beats the deep ensemble on every metric", "rank1-cauchy", "deep-ensemble",
     ("nll", "accuracy", "ece"), "clean"),
    ("CIFAR-100-C, Table 3", "under corruption, Cauchy rank-1 beats the deep ensemble", "rank1-cauchy",
     "deep-ensemble", ("nll", "accuracy", "ece"), "corrupted"),
    ("CIFAR-100, Table 3", "Gaussian rank-1: slightly lower accuracy than BatchEnsemble, better NLL and ECE",
     "rank1-gaussian", "batchensemble", ("nll", "ece"), "clean"),
    ("CIFAR-100, Table 3", "Cauchy rank-1 beats Gaussian rank-1", "rank1-cauchy", "rank1-gaussian",
     ("nll", "accuracy", "ece"), "clean"),
    ("CIFAR-100-C, Table 3", "under corruption, Cauchy rank-1 beats Gaussian rank-1", "rank1-cauchy",
     "rank1-gaussian", ("nll", "accuracy", "ece"), "corrupted"),
)


def _seed_values(runs: list[dict], method: str, metric: str, setting: str) -> list[float]:
    """Per seed: the clean metric, or its mean over every corruption x severity."""
    out = []
    for run in runs:
        if run["method"] != method:
            continue
        rep = run["report"]
        if setting == "clean":
            out.append(rep["clean"][metric])
        else:
            out.append(_mean(rep["by_severity"][s][metric] for s in rep["by_severity"]))
    return out


def _mean_sd(values: list[float]) -> tuple[float, float]:
    """Mean and sd over seeds (``core.tables.mean_sd``: ddof = 1; undefined, NaN, for one seed)."""
    from pipeline.core.tables import mean_sd

    return mean_sd(values)[:2]


def claim_rows(r: dict) -> list[list[str]]:
    """One row per (claim, metric): the two methods' mean ± sd over seeds and whether the claim holds ("holds" /
    "does not hold", with "(within seed noise)" when the means differ by less than the larger sd over seeds)."""
    runs, rows = r["runs"], []
    for where, claim, method, than, metrics, setting in CLAIMS:
        if not (_seed_values(runs, method, "nll", setting) and _seed_values(runs, than, "nll", setting)):
            continue
        for metric in metrics:
            (a, sa), (b, sb) = (_mean_sd(_seed_values(runs, m, metric, setting)) for m in (method, than))
            better = a > b if metric == "accuracy" else a < b
            verdict = "holds" if better else "does not hold"
            if abs(a - b) < max(sa, sb):
                verdict += " (within seed noise)"
            rows.append([where, claim, setting, metric, f"{a:.3f} ± {sa:.3f}", f"{b:.3f} ± {sb:.3f}", verdict])
    return rows


def render_claims(r: dict) -> str:
    """The table of each image claim of the seed paper on digits (``CLAIMS``, ``claim_rows``)."""
    seeds = sorted({run["seed"] for run in r["runs"]})
    head = (f"Each image claim of the seed paper as it stands on digits: the first method's mean ± sd over seeds "
            f"{', '.join(map(str, seeds))} against the second's, on the clean test set or the mean over the 5 "
            "corruptions x 5 severities (each seed's mean, then mean ± sd over seeds). A difference smaller than "
            "the larger sd over seeds is marked as within seed noise.")
    rows = claim_rows(r)
    methods = {claim: (method, than) for _, claim, method, than, _, _ in CLAIMS}
    made_by = {m: src["command"].split(" --out ")[0].removeprefix("python -m experiments.")
               for src in r.get("combined_from") or [] for m in src["methods_used"]}

    def runs(claim: str) -> str:  # the commands whose runs the row compares (the combined files' commands)
        return "; ".join(f"`{made_by[m]}`" if m in made_by else f"`{m}`" for m in methods[claim])
    body = [[w, c, runs(c), s, m, a, b, v] for w, c, s, m, a, b, v in rows]
    return "\n".join([head, "", report.table(["paper", "claim", "runs (commands)", "set", "metric", "first",
                                              "second", "on digits"], body)])


def render_recipes(r: dict) -> str:
    """docs/vision.md's figures:vision_digits_recipes section: the tables (``render``), then the claims."""
    return render(r) + "\n\n" + render_claims(r)
