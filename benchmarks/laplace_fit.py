"""Subnetwork Laplace: fit time and peak memory against S, on the LSTM 64 and the paper-scale LSTM 256.

    .venv/bin/python -m benchmarks.laplace_fit [--features DIR] [--sizes 1000 2000 5000 10000]
        [--hidden 64 256] [--steps 400] [--max-train N] [--selection wasserstein] [--threads 1]

1. Features: ``--features`` or the default synthetic benchmark (``make main``'s: 2,000 patients,
   density 1, seed 0, the Makefile's fixed key), generated once into benchmarks/.cache.
2. One deterministic MAP run per LSTM size (``--steps`` training steps, default settings otherwise),
   trained once into benchmarks/.cache.
3. Every (LSTM size, S) is fitted in a child process (``fit_laplace`` on the training split,
   ``--selection`` rule, the prior precision given as the MAP run's own 2·l2·N_train, so no grid
   search; one torch thread): wall time per stage and the fit's peak RSS above the RSS it started
   from (VmHWM reset by /proc/self/clear_refs after loading the model and the features, so the
   loading's transient peak does not hide small fits; ru_maxrss where that is not possible) and
   after a warm-up fit on 4 admissions (the first use of autograd, the LSTM kernels and LAPACK
   allocates the same whatever S),
   with the growth exponent of that increment
   against S (least squares on log-log, and between consecutive sizes) and the ratio LSTM 256 / 64
   at equal S. One more child times the grid search (``--grid-size`` values of λ) at the smallest S.
4. Scoring throughput on the test split, in this one process: the MAP model against its Laplace
   model at the smallest and the largest S (probit predictive, and 25 MC draws), in alternating
   blocks (median of ``--repeats``); ratio = MAP admissions/s over Laplace admissions/s.

Writes benchmarks/results/laplace_fit.json (``--out`` elsewhere) and prints the table; the default
path also rewrites the docs section that shows it (``benchmarks.laplace_figures``: docs/laplace.md).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import resource
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks import harness, report
from pipeline.core import fileio
from pipeline.data.features import load_split
from pipeline.tasks.mortality.train_config import TrainConfig
from pipeline.workflows import train as training

CACHE = harness.CACHE / "laplace"
RESULT = report.results_path("laplace_fit")
SYNTH_KEY = "synthetic-data-only-not-a-secret"  # the Makefile's key for synthetic data (not a secret)


def default_features() -> Path:
    """The default synthetic benchmark's features (generated once)."""
    def make(out: Path) -> None:
        os.environ.setdefault("MIMIC_DEID_KEY", SYNTH_KEY)
        from pipeline.data.mimic.extraction import extract
        from pipeline.data.mimic.synth import generate

        generate(out / "mimic", patients=2000, seed=0)
        extract(out / "mimic", out / "features")
        shutil.rmtree(out / "mimic")

    return harness.cached(CACHE / "synth_p2000_d1_s0", make) / "features"


def add_map_options(ap: argparse.ArgumentParser) -> None:
    """The options every script on these MAP runs takes (this one, ``laplace_jacobian_groups``,
    ``experiments.laplace_selection``): the features, the MAP runs' training steps, torch threads."""
    ap.add_argument("--features", type=Path, default=None, help="features directory (default: the synthetic benchmark)")
    ap.add_argument("--steps", type=int, default=400, help="training steps of the MAP runs")
    ap.add_argument("--threads", type=int, default=1)


def start(args: argparse.Namespace) -> tuple[dict, tuple, Path]:
    """A measuring run begins: torch's threads set; the provenance and the load average as it starts (the
    machine is shared: timings move with the load); the features (``--features`` or the default benchmark's)."""
    import torch

    torch.set_num_threads(args.threads)
    return report.provenance(), os.getloadavg(), args.features or default_features()


def map_run(features: Path, hidden: int, steps: int) -> Path:
    """best.pt of a deterministic MAP run with ``hidden`` LSTM units (trained once)."""

    out = CACHE / f"map_h{hidden}_steps{steps}_{features.parent.name}"
    if (out / "best.pt").exists():
        return out / "best.pt"
    shutil.rmtree(out, ignore_errors=True)
    cfg = TrainConfig(max_steps=steps, eval_every=max(steps // 4, 1), threads=1, progress=False,
                               model={"lstm_hidden": hidden})
    result = training.train(features, "deterministic", cfg, out_dir=out, tracking=False)
    return result.best_checkpoint


def _status_mb(field: str) -> float | None:
    """VmRSS / VmHWM of this process in MB (None where /proc is not there)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def reset_peak() -> bool:
    """Reset this process's peak RSS (VmHWM) to its current RSS (Linux clear_refs 5); False if not possible."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def peak_mb() -> float:
    """Peak RSS in MB: VmHWM (resettable), else ru_maxrss (the whole process's)."""
    hwm = _status_mb("VmHWM")
    return hwm if hwm is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(args: argparse.Namespace) -> None:
    """One fit; prints a JSON line."""
    import torch

    from pipeline.bayes.laplace import LaplaceConfig, save_laplace
    from pipeline.runs.formats import load_model
    from pipeline.tasks.mortality.laplace import fit_laplace

    torch.set_num_threads(args.threads)
    model, info = load_model(args.checkpoint)
    features = Path(args.features)
    train_fs, val_fs = load_split(features / "train.parquet"), load_split(features / "val.parquet")
    lam = 2.0 * info.train_config["l2"] * len(train_fs)  # the MAP run's own Gaussian prior, summed-NLL scale
    cfg = LaplaceConfig(selection=args.selection, subnet_size=args.size,
                        prior_precision=None if args.grid_size else lam, grid_size=args.grid_size or 1,
                        max_train=args.max_train, max_bags=info.max_bags, max_tokens=info.max_tokens)
    warm = LaplaceConfig(**{**vars(cfg), "subnet_size": 10, "max_train": 4, "prior_precision": lam})
    fit_laplace(model, train_fs, None, warm)  # first use of autograd, the LSTM kernels, LAPACK: not the fit's memory
    gc.collect()
    resettable = reset_peak()  # the fit's own peak, not the transient peak of loading the features
    base = _status_mb("VmRSS") if resettable else peak_mb()
    t0 = time.perf_counter()
    laplace, report = fit_laplace(model, train_fs, val_fs, cfg)
    wall = time.perf_counter() - t0
    peak = peak_mb()
    if args.save:
        save_laplace(args.save, laplace)
    print(json.dumps({"hidden": model.cfg.lstm_hidden, "n_params": report.n_params, "subnet_size": report.subnet_size,
                      "fit_s": wall, "stages_s": report.seconds, "peak_rss_mb": peak, "base_rss_mb": base,
                      "fit_rss_mb": peak - base, "peak_reset": resettable,
                      "posterior_mb": report.posterior_bytes / 2**20,
                      "prior_precision": report.prior_precision, "prior_source": report.prior_source,
                      "val_nll_map": report.val_nll_map, "val_nll": report.val_nll, "n_train_used": report.n_train_used,
                      "per_tensor": report.per_tensor}))


def run_child(argv: list[str]) -> dict:
    """One fit in a fresh process (``--child``): its JSON line."""
    return harness.run_module(__spec__.name, "--child", *argv).last_json()


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of log y on log x."""
    lx, ly = np.log(xs), np.log(ys)
    return float(np.polyfit(lx, ly, 1)[0])


def summarize(fits: list[dict], hiddens: list[int], sizes: list[int]) -> tuple[dict, dict]:
    """Growth of the fit's RSS with S per LSTM size, and LSTM 256 / 64 at equal S; prints them.

    The increment is a floor (buffers that do not grow with S) plus the S x S matrices: least squares
    RSS = a + b·S² gives both, and the exponent of RSS - a against S is that of the S-dependent part.
    """
    growth = {}
    for hidden in hiddens:
        rows = sorted((r for r in fits if r["hidden"] == hidden), key=lambda r: r["subnet_size"])
        s = [r["subnet_size"] for r in rows]
        mem = [r["fit_rss_mb"] for r in rows]
        if len(s) < 2:
            continue
        a, b = np.linalg.lstsq(np.stack([np.ones(len(s)), np.square(s)], 1), np.asarray(mem), rcond=None)[0]
        above = [m - a for m in mem]
        positive = min(mem) > 0  # exponents need positive increments (tiny fits may not raise the peak at all)
        growth[str(hidden)] = {
            "rss_exponent_all": slope(s, mem) if positive else None,
            "rss_exponent_steps": [math.log(hi / lo) / math.log(y / x) for x, y, lo, hi in zip(s, s[1:], mem, mem[1:])]
            if positive else None,
            "rss_floor_mb": float(a),
            "rss_bytes_per_s2": float(b) * 2**20,  # 16 = two float64 S x S matrices (the GGN and its factor)
            "rss_exponent_above_floor": slope(s, above) if min(above) > 0 else None,
            "time_exponent_all": slope(s, [r["fit_s"] for r in rows]),
        }
        g = growth[str(hidden)]

        def fmt(x: float | None) -> str:
            return "n/a" if x is None else f"{x:.2f}"

        steps = ", ".join(fmt(e) for e in g["rss_exponent_steps"] or [])
        print(f"LSTM {hidden}: fit RSS = {a:.1f} MB + {g['rss_bytes_per_s2']:.1f} bytes x S^2 (least squares); "
              f"exponent of the part above that floor {fmt(g['rss_exponent_above_floor'])}; of the whole increment "
              f"{fmt(g['rss_exponent_all'])} (steps {steps or 'n/a'})")
    same_s = {}
    if len(hiddens) == 2:
        lo, hi = sorted(hiddens)
        for size in sizes:
            a = next(r for r in fits if r["hidden"] == lo and r["subnet_size"] == size)
            b = next(r for r in fits if r["hidden"] == hi and r["subnet_size"] == size)
            same_s[str(size)] = {"rss_ratio": b["fit_rss_mb"] / a["fit_rss_mb"], "time_ratio": b["fit_s"] / a["fit_s"],
                                 "d_ratio": b["n_params"] / a["n_params"]}
            print(f"S={size}: LSTM {hi} / LSTM {lo}: fit RSS x{same_s[str(size)]['rss_ratio']:.2f}, fit time "
                  f"x{same_s[str(size)]['time_ratio']:.2f} (D x{same_s[str(size)]['d_ratio']:.2f})")
    return growth, same_s


def throughput(models: dict, fs, repeats: int, batch_size: int) -> dict[str, float]:
    """Admissions/s per named (model, samples), alternating blocks, median over ``repeats``."""
    import torch

    from pipeline.tasks.mortality import predict

    times: dict[str, list[float]] = {name: [] for name in models}
    for _ in range(repeats):
        for name, (model, samples) in models.items():
            torch.manual_seed(0)
            t0 = time.perf_counter()
            predict.feature_logits(model, fs, samples, batch_size)
            times[name].append(time.perf_counter() - t0)
    return {name: len(fs) / statistics.median(ts) for name, ts in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_map_options(ap)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 2000, 5000, 10000])
    ap.add_argument("--hidden", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--selection", default="wasserstein")
    ap.add_argument("--max-train", type=int, default=None, help="training admissions in the GGN (default: all)")
    ap.add_argument("--grid-size", type=int, default=17, help="λ values of the timed grid search (0: skip)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=RESULT, help="results file (the default also updates the docs)")
    ap.add_argument("--summarize", action="store_true", help="only recompute the growth figures of --out's fits")
    # child mode
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--checkpoint", help=argparse.SUPPRESS)
    ap.add_argument("--size", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--save", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        args.grid_size = args.grid_size or 0
        child(args)
        return
    if args.summarize:
        result = fileio.read_json(args.out)
        hiddens = sorted({r["hidden"] for r in result["fits"]})
        sizes = sorted({r["subnet_size"] for r in result["fits"]})
        result["growth"], result["same_s"] = summarize(result["fits"], hiddens, sizes)
        fileio.write_json(args.out, result)  # the fits' own provenance (or none), not this checkout's
        if args.out.resolve() == RESULT.resolve():
            report.update({"laplace_fit"})
        return

    from pipeline.bayes.laplace import Predictive, load_laplace
    from pipeline.runs.formats import load_model

    measured, load_start, features = start(args)
    common = ["--features", str(features), "--selection", args.selection, "--threads", str(args.threads)]
    if args.max_train:
        common += ["--max-train", str(args.max_train)]
    fits, scoring, grid = [], {}, None
    small, large = min(args.sizes), max(args.sizes)
    with tempfile.TemporaryDirectory(prefix="laplace-bench-") as tmp:
        for hidden in args.hidden:
            t0 = time.perf_counter()
            ckpt = map_run(features, hidden, args.steps)
            print(f"MAP LSTM {hidden}: {ckpt} ({time.perf_counter() - t0:.0f} s)", flush=True)
            for size in args.sizes:
                save = [] if size not in (small, large) else ["--save", str(Path(tmp) / f"h{hidden}_s{size}.pt")]
                row = run_child([*common, "--checkpoint", str(ckpt), "--size", str(size), "--grid-size", "0", *save])
                fits.append(row)
                st = row["stages_s"]
                print(f"LSTM {hidden:3d} D={row['n_params']:7d} S={size:6d}: fit {row['fit_s']:6.1f} s (select "
                      f"{st['select']:.1f}, GGN {st['ggn']:.1f}, factor {st['factorize']:.1f}, validation "
                      f"{st.get('validation', 0):.1f}), fit RSS +{row['fit_rss_mb']:7.1f} MB (posterior "
                      f"{row['posterior_mb']:.1f} MB), val NLL MAP {row['val_nll_map']:.4f} -> {row['val_nll']:.4f}",
                      flush=True)
            if args.grid_size and grid is None:
                grid = run_child([*common, "--checkpoint", str(ckpt), "--size", str(small),
                                  "--grid-size", str(args.grid_size)])
                print(f"grid search, LSTM {hidden} S={small}: {args.grid_size} values of λ in "
                      f"{grid['stages_s']['prior_search']:.1f} s; λ = {grid['prior_precision']:.4g}, val NLL "
                      f"{grid['val_nll_map']:.4f} -> {grid['val_nll']:.4f}", flush=True)
            test_fs = load_split(features / "test.parquet")
            map_model, _ = load_model(ckpt)
            models = {"map": (map_model, 1)}
            for size in sorted({small, large}):
                laplace, _ = load_laplace(Path(tmp) / f"h{hidden}_s{size}.pt", map_model=load_model(ckpt)[0])
                laplace.predictive = Predictive.PROBIT
                models[f"laplace_s{size}_probit"] = (laplace, 1)
                mc, _ = load_laplace(Path(tmp) / f"h{hidden}_s{size}.pt", map_model=load_model(ckpt)[0])
                mc.predictive = Predictive.MC
                models[f"laplace_s{size}_mc25"] = (mc, 25)
            rates = throughput(models, test_fs, args.repeats, batch_size=256)
            scoring[str(hidden)] = {"admissions": len(test_fs), "admissions_per_s": rates,
                                    "map_over_laplace": {k: rates["map"] / v for k, v in rates.items() if k != "map"}}
            print(f"scoring LSTM {hidden} ({len(test_fs)} test admissions): " + ", ".join(
                f"{k} {v:.1f}/s" for k, v in rates.items()), flush=True)
            for k, v in scoring[str(hidden)]["map_over_laplace"].items():
                print(f"  MAP / {k}: {v:.1f}x", flush=True)

    growth, same_s = summarize(fits, args.hidden, args.sizes)
    report.write_results("laplace_fit", {
        **measured, "command": report.command(__spec__.name),
        "features": str(features), "threads": args.threads, "selection": args.selection, "map_steps": args.steps,
        "max_train": args.max_train, "grid_size": args.grid_size, "repeats": args.repeats,
        "cpu_count": os.cpu_count(), "loadavg_start": load_start, "loadavg_end": os.getloadavg(), "fits": fits,
        "growth": growth, "same_s": same_s, "grid_search": grid, "scoring": scoring,
    }, args.out)


if __name__ == "__main__":
    main()
