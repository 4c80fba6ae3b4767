"""The mortality models on one torch device (a GPU): the rank-1 LSTM against ``nn.LSTM``, whole training
steps through the device data path at the GPU preset, scoring a whole MIMIC-III cohort, a full-scale training
run, and the image models in bf16, each as a ratio to a baseline timed in the same process (or against its
issue-38 target).

    python -m benchmarks.device_mortality [--device cuda] [--hidden 64 --hidden 256] [--batch 1024] [--reps 20]
        [--score-n 58976] [--samples S] [--cpu-score-n 3000] [--parts layer,train,score,fullscale,vision]
        [--json PATH] [--merge PART.json ...]

Five parts, each reported even when another fails (its error is recorded instead):

1. **LSTM layer**: forward + backward of a K = 4 rank-1 LSTM (``LSTMRank1``, both sampling modes) on a
   member-major tiled batch of K·B rows against ``nn.LSTM`` (cuDNN on a GPU) on the same input, equal and
   variable lengths (``benchmarks.rank1_lstm.candidates``: the variable-length reference is nn.LSTM on
   packed input), at each ``--hidden``. Median of ``--reps`` interleaved rounds after warm-up; on a GPU
   each call is timed to ``torch.cuda.synchronize``. ``per_example`` / ``per_member`` are the reference
   kernels; the fused paths beside them (``LSTMKernel.FUSED``): ``per_example_fused`` (the Triton kernel,
   float32 products; where triton compiles, or on the CPU in its interpreter), ``per_example_fused_tf32``
   (TF32 products, on CUDA: cuDNN's LSTM uses TF32 by default), ``per_member_fused`` (PyTorch's fused
   kernel per member block at any lengths).
2. **Training step** (``benchmarks.device_training.recipe_rows``): the mortality plan's whole step of both
   models under the default preset collated on the CPU, the GPU preset collated on the CPU and the GPU preset
   on the device data path, at each ``--train-hidden``: ms per step and distinct admissions per second
   (targets: rank-1 >= 50,000/s, deterministic >= 150,000/s at the GPU preset).
3. **Scoring**: ``--score-n`` admissions of random features shaped like the synthetic benchmark (the
   MIMIC-III cohort size by default) through ``serving.score.score_files`` (chunked Parquet in, the risk
   table out) with ``--samples`` x K draws of an untrained rank-1 model (the weights do not change the
   cost) on ``--device``, against the same call on this machine's CPU (all its cores) over the first
   ``--cpu-score-n`` admissions; then the same admissions in memory scored with their features resident on
   the device at each ``--score-batch`` (target: <= 1 s), and the device data path against collated batches
   at the contract's batching (``benchmarks.device_training.resident_score_rows``). Peak device memory.
4. **Image models** (``benchmarks.device_vision``): a Wide ResNet training step of every method in fp32,
   bf16 autocast and bf16 channels-last, and the deterministic network on K times the images.
5. **Full scale** (``benchmarks.device_training.fullscale_part``): a whole rank-1 training run at the GPU
   preset on random features of full-scale MIMIC-III's shape for the CPU default's epochs (target: <= 60 s).

Without CUDA ``--device cpu`` runs the same measurements (small sizes make it a smoke run). Writes
benchmarks/results/device_mortality.json (``--json`` elsewhere), whose ``render`` is docs/performance.md's
``figures:device_mortality`` section. ``--merge`` joins the JSON of runs of single parts (``--parts``, each in
its own process: ``benchmarks/gpu_run.sh``) into one results file, each part as its run recorded it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

from benchmarks import report
from benchmarks.device_vision import render_vision, vision_rows
from pipeline.core.contracts import DEFAULT_SAMPLES

LAYER_CANDIDATES = ("per_example", "per_member", "per_example_fused", "per_example_fused_tf32", "per_member_fused")


def _sync(device) -> None:
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def _median_ms(runs: dict, reps: int, device, failed: dict | None = None) -> dict[str, float]:
    """Median milliseconds of forward + backward per candidate, rounds interleaved, after two warm-ups. With
    ``failed``, a candidate whose warm-up raises is left out and its error recorded there (by name)."""
    for name in list(runs):
        try:
            for _ in range(2):
                runs[name]().square().mean().backward()
            _sync(device)
        except Exception as exc:  # noqa: BLE001 - a fused path that fails on this device is a finding
            if failed is None:
                raise
            traceback.print_exc()
            failed[name] = f"{type(exc).__name__}: {exc}"[:500]
            del runs[name]
    _sync(device)
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(reps):
        for name, run in runs.items():
            start = time.perf_counter()
            run().square().mean().backward()
            _sync(device)
            times[name].append(time.perf_counter() - start)
    return {name: 1e3 * statistics.median(t) for name, t in times.items()}


def fused_candidates(device) -> tuple[str, ...]:
    """The fused layer candidates this device runs: the Triton kernel where it compiles (CUDA) or is
    interpreted (CPU tensors under TRITON_INTERPRET=1), TF32 on CUDA only; PyTorch's per block everywhere."""
    import torch

    from pipeline.bayes.layers import triton_lstm

    cuda = torch.device(device).type == "cuda"
    triton = triton_lstm.available() and (cuda or triton_lstm.interpreted())
    return ("per_example_fused",) * triton + ("per_example_fused_tf32",) * (triton and cuda) + ("per_member_fused",)


def layer_rows(args, device) -> list[dict]:
    """Part 1: the rank-1 LSTM layer against nn.LSTM at each hidden size, equal and variable lengths."""
    import torch

    from benchmarks.rank1_lstm import candidates

    rows = []
    fused = fused_candidates(device)
    for hidden in args.hidden:
        for variable in (False, True):
            torch.manual_seed(0)
            runs = candidates(args.components * args.batch, args.steps, args.input, hidden, args.components,
                              variable, device, fused)
            failed: dict[str, str] = {}
            ms = _median_ms(runs, args.reps, device, failed)
            ref = ms["nn.LSTM"]
            row = {"hidden": hidden, "lengths": "variable" if variable else "equal", "reference_ms": ref}
            for name in (c for c in LAYER_CANDIDATES if c in ms):
                row[f"{name}_ms"], row[name] = ms[name], ms[name] / ref
            row |= {f"{name}_error": error for name, error in failed.items()}
            print(f"  H={hidden:4d} {row['lengths']:8s} nn.LSTM {ref:7.2f} ms  " + "  ".join(
                f"{name} {row[name + '_ms']:7.2f} ms ({row[name]:.2f}x)" for name in LAYER_CANDIDATES if name in row),
                flush=True)
            rows.append(row)
    return rows


def _score_once(run, path: Path, out: Path, samples: int, threads: int, n: int | None = None) -> tuple[float, int]:
    """Seconds and admissions of one ``score_files`` call (the first ``n`` admissions when given)."""
    import pyarrow.parquet as pq

    from pipeline.serving.score import ScoreConfig, score_files

    if n is not None:
        sub = path.with_name(f"first{n}.parquet")
        if not sub.exists():
            pq.write_table(pq.read_table(path).slice(0, n), sub)
        path = sub
    start = time.perf_counter()
    summary = score_files(run, [path], out, ScoreConfig(samples=samples, threads=threads))
    return time.perf_counter() - start, summary.admissions


def score_part(args, device, fdir: Path, vocab: dict) -> dict:
    """Part 3: scoring ``--score-n`` admissions on the device against the CPU (first ``--cpu-score-n``), then the
    same admissions in memory with their features resident on the device (``device_training``)."""
    import torch

    from benchmarks.device_training import resident_score_rows
    from pipeline.runs.info import ModelInfo
    from pipeline.runs.load import Run
    from pipeline.tasks.mortality import MortalityConfig, build_model

    cfg = MortalityConfig(len(vocab["tokens"]), len(vocab["context"]), components=args.components)
    torch.manual_seed(0)
    model = build_model("rank1", cfg).eval()
    meta = ModelInfo.of_model("rank1", refer_threshold=0.01, score_samples=args.samples)
    data, out = fdir / "train.parquet", fdir / "scores.parquet"
    threads = os.cpu_count() or 1
    cpu = Run(model, meta, None, vocab)
    cpu_secs, cpu_n = _score_once(cpu, data, out, args.samples, threads, args.cpu_score_n)
    print(f"  CPU ({threads} threads): {cpu_n} admissions in {cpu_secs:.1f} s ({cpu_n / cpu_secs:.0f}/s)", flush=True)
    on_device = Run(model.to(device), meta, None, vocab)
    if torch.device(device).type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    _score_once(on_device, data, out, args.samples, threads, args.cpu_score_n)  # warm-up (kernels, allocator)
    secs, n = _score_once(on_device, data, out, args.samples, threads)
    peak = torch.cuda.max_memory_allocated(device) / 2**20 if torch.device(device).type == "cuda" else None
    r = {"admissions": n, "draws": args.samples * args.components, "seconds": secs, "per_s": n / secs,
         "cpu_admissions": cpu_n, "cpu_seconds": cpu_secs, "cpu_per_s": cpu_n / cpu_secs, "cpu_threads": threads,
         "speedup": (n / secs) / (cpu_n / cpu_secs), "peak_device_mb": peak}
    print(f"  {device}: {n} admissions x {r['draws']} draws in {secs:.1f} s ({r['per_s']:.0f}/s), "
          f"{r['speedup']:.1f}x the CPU's rate" + (f", peak device memory {peak:.0f} MB" if peak else ""), flush=True)
    try:
        r["resident"] = resident_score_rows(args, device, fdir)
    except Exception as exc:  # noqa: BLE001 - recorded beside the score_files figures
        traceback.print_exc()
        r["resident_error"] = f"{type(exc).__name__}: {exc}"[:500]
    return r


def _part(name: str, fn, *a) -> dict:
    """Run one part; its result, or the error it raised (the other parts still run)."""
    print(f"{name}:", flush=True)
    start = time.perf_counter()
    try:
        return {"result": fn(*a), "seconds": time.perf_counter() - start}
    except Exception as exc:  # noqa: BLE001 - a part's failure is a finding to record, not a reason to stop
        traceback.print_exc()
        return {"error": f"{type(exc).__name__}: {exc}", "seconds": time.perf_counter() - start}


PARTS = ("layer", "train", "score", "vision", "fullscale")
CONFIG = ("hidden", "batch", "steps", "input", "components", "reps", "train_steps", "train_n", "train_hidden",
          "gpu_rows", "score_n", "cpu_score_n", "samples", "score_batch", "check_n", "full_train", "full_val",
          "full_epochs", "vision_depth", "vision_width", "vision_size", "vision_images", "vision_bn_rows",
          "vision_steps")


def arguments() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None, help="torch device (default: cuda when available, else cpu)")
    ap.add_argument("--hidden", type=int, action="append", default=None, help="part 1: LSTM units (repeatable; "
                    "default 64 and 256)")
    ap.add_argument("--batch", type=int, default=64, help="part 1: admissions B (rows = K·B)")
    ap.add_argument("--steps", type=int, default=48, help="part 1: time steps T")
    ap.add_argument("--input", type=int, default=33, help="part 1: LSTM input size D")
    ap.add_argument("--components", type=int, default=4, help="K")
    ap.add_argument("--reps", type=int, default=20, help="part 1: timed rounds")
    ap.add_argument("--train-steps", type=int, default=40, help="part 2: timed steps per recipe")
    ap.add_argument("--train-n", type=int, default=8000, help="part 2: training admissions of the features")
    ap.add_argument("--train-hidden", type=int, action="append", default=None, help="part 2: LSTM units "
                    "(repeatable; default 64)")
    ap.add_argument("--gpu-rows", type=int, default=None, help="parts 2 and 5: rows a step of the GPU preset "
                    "(unset: the preset's; small for a smoke run)")
    ap.add_argument("--score-n", type=int, default=58_976, help="part 3: admissions scored on the device")
    ap.add_argument("--cpu-score-n", type=int, default=3000, help="part 3: admissions scored on the CPU")
    ap.add_argument("--samples", type=int, default=DEFAULT_SAMPLES,
                    help="part 3: samples per component (draws = samples x K) [contracts.DEFAULT_SAMPLES]")
    ap.add_argument("--score-batch", type=int, action="append", default=None, help="part 3: admissions a batch "
                    "of the resident scoring (repeatable; default 128 (the contract's), 1024, 4096)")
    ap.add_argument("--check-n", type=int, default=2000, help="part 3: admissions of the resident-vs-collated check")
    ap.add_argument("--vision-depth", type=int, default=28, help="part 4: WRN depth")
    ap.add_argument("--vision-width", type=int, default=10, help="part 4: WRN width")
    ap.add_argument("--vision-size", type=int, default=32, help="part 4: image side")
    ap.add_argument("--vision-images", type=int, default=128, help="part 4: distinct images per step")
    ap.add_argument("--vision-bn-rows", type=int, default=64, help="part 4: BatchNorm ghost batch rows")
    ap.add_argument("--vision-steps", type=int, default=12, help="part 4: timed steps per variant (4 blocks)")
    ap.add_argument("--full-train", type=int, default=46_000, help="part 5: training admissions (MIMIC-III's "
                    "cohort of 58,976, about 78%%)")
    ap.add_argument("--full-val", type=int, default=6_500, help="part 5: validation admissions")
    ap.add_argument("--full-epochs", type=float, default=4.8, help="part 5: epochs of distinct admissions (the "
                    "CPU default's at full scale)")
    ap.add_argument("--parts", default="layer,train,score,vision,fullscale", help="which parts to run, "
                    "comma-separated")
    ap.add_argument("--json", type=Path, default=None, help="results file (default: "
                    "benchmarks/results/device_mortality.json, which also updates the docs)")
    ap.add_argument("--merge", type=Path, nargs="+", default=None, help="join these results files of single "
                    "parts into --json (no measurement); the ones that do not exist are left out")
    ap.add_argument("--command", default=None, help="with --merge: the command that made the parts")
    args = ap.parse_args()
    args.hidden = args.hidden or [64, 256]
    args.train_hidden = args.train_hidden or [64]
    args.score_batch = args.score_batch or [128, 1024, 4096]
    return args


def merge(files: list[Path], command: str | None) -> dict:
    """One results dict of the results files of single parts: each part's entry as its run wrote it, the
    settings and provenance of the first file, every run's command."""
    from pipeline.core import fileio

    runs = [fileio.read_json(f) for f in files if Path(f).exists()]
    if not runs:
        raise SystemExit(f"--merge: none of {[str(f) for f in files]} exists")
    out = {k: v for k, v in runs[0].items() if k not in PARTS}
    out["config"] = {k: v for r in runs for k, v in r.get("config", {}).items()}
    out["commands"] = [r["command"] for r in runs]
    out["command"] = command or " && ".join(out["commands"])
    for r in runs:  # each part with the settings of its own run
        out.update({k: {**r[k], "config": r.get("config", {})} for k in PARTS if k in r})
    return out


def main() -> None:
    args = arguments()
    if args.merge:
        report.write_results("device_mortality", merge(args.merge, args.command), args.json)
        return
    import torch

    from benchmarks.device_training import fullscale_part, recipe_rows, shaped_features
    from pipeline.core.devices import resolve_device

    device = resolve_device(args.device)
    measured, command = report.provenance(), report.command(__spec__.name)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"command: {' '.join([Path(sys.executable).name, *sys.argv])}\ntorch {torch.__version__}, device "
          f"{device} ({name}), {os.cpu_count()} CPUs", flush=True)
    parts = set(args.parts.split(","))
    result = {**measured, "command": command, "torch": torch.__version__, "triton": _triton_version(),
              "device": str(device), "device_name": name, "cpus": os.cpu_count(),
              "config": {k: getattr(args, k) for k in CONFIG}}
    with tempfile.TemporaryDirectory() as tmp:
        run = {  # each part, run in PARTS' order where --parts names it (its inputs written outside its error capture)
            "layer": lambda: _part("1. LSTM layer, forward + backward", layer_rows, args, device),
            "train": lambda: _part("2. training step", recipe_rows, args, device,
                                   shaped_features(Path(tmp) / "train", args.train_n, max(1, args.train_n // 8))),
            "score": lambda: _score(args, device, Path(tmp) / "score"),
            "vision": lambda: _part("4. image models, fp32 and bf16", vision_rows, args, device),
            "fullscale": lambda: _part("5. full-scale training", fullscale_part, args, device, Path(tmp)),
        }
        for key in PARTS:
            if key in parts:
                result[key] = run[key]()
    report.write_results("device_mortality", result, args.json)


def _score(args, device, folder: Path) -> dict:
    """Part 3 on ``args.score_n`` random admissions, written to ``folder`` first (timed)."""
    from benchmarks.device_training import shaped_features
    from pipeline.core import fileio

    start = time.perf_counter()
    sdir = shaped_features(folder, args.score_n)
    print(f"  ({args.score_n} random admissions written in {time.perf_counter() - start:.0f} s)", flush=True)
    return _part("3. scoring", score_part, args, device, sdir, fileio.read_json(sdir / "vocab.json"))


def _triton_version() -> str | None:
    try:
        import triton
    except ImportError:
        return None
    return triton.__version__


def _error_or(part: dict | None, render_fn, title: str) -> str:
    """A part's text: rendered, or its title and that it failed (the error) or was not run in this JSON."""
    if part is None:
        return f"**{title}**: not run in this run."
    return f"**{title}**: failed: `{part['error']}`" if "error" in part else render_fn(part["result"])


def render(r: dict) -> str:
    """docs/performance.md's figures:device_mortality section, from the results JSON."""
    from benchmarks.device_training import render_fullscale, render_resident, render_train

    triton = f", triton {r['triton']}" if r.get("triton") else ""
    out = [f"On {r['device_name']} (`{r['device']}`, torch {r['torch']}{triton}, {r['cpus']} CPUs beside it).", ""]

    def cfg(part: str) -> dict:  # the settings a part ran with (a merged file keeps each part's own)
        return {**r["config"], **(r.get(part) or {}).get("config", {})}

    c = cfg("layer")

    def layer(rows):
        names = [n for n in LAYER_CANDIDATES if any(n in x or f"{n}_error" in x for x in rows)]
        body = [[str(x["hidden"]), x["lengths"], f"{x['reference_ms']:.2f}"]
                + [f"{x[n + '_ms']:.2f} ({x[n]:.2f}x)" if n in x else "failed" for n in names] for x in rows]
        return "\n".join([
            f"**1. LSTM layer**, forward + backward, K = {c['components']} on {c['components'] * c['batch']} tiled "
            f"rows, T = {c['steps']}, D = {c['input']}, rank-1 ms (ratio to nn.LSTM; median of {c['reps']} "
            "interleaved rounds; per_example / per_member: the reference kernels, *_fused: LSTMKernel.FUSED; "
            "target <= 1.5x):", "",
            report.table(["LSTM units", "lengths", "nn.LSTM ms", *names], body)])

    def score(s):
        peak = f", peak device memory {s['peak_device_mb']:,.0f} MB" if s.get("peak_device_mb") else ""
        text = (f"**3. Scoring** (`score_files`: Parquet in, risk table out, the contract's batching) "
                f"{s['admissions']:,} admissions x {s['draws']} draws: **{s['seconds']:.1f} s** ({s['per_s']:,.0f} "
                f"admissions/s{peak}); the same call on the CPU ({s['cpu_threads']} threads) over "
                f"{s['cpu_admissions']:,} admissions: {s['cpu_per_s']:,.0f} admissions/s, so the device scores "
                f"**{s['speedup']:.1f}x** as fast.")
        if "resident" in s:
            text += "\n\n" + render_resident(s["resident"], s["draws"])
        elif "resident_error" in s:
            text += f"\n\nWith the features resident on the device: failed: `{s['resident_error']}`"
        return text

    out += [_error_or(r.get("layer"), layer, "1. LSTM layer"), "",
            _error_or(r.get("train"), lambda rows: render_train(rows, cfg("train")), "2. Training step"), "",
            _error_or(r.get("score"), score, "3. Scoring"), "",
            _error_or(r.get("vision"), lambda rows: "**4.** " + render_vision(rows, cfg("vision")), "4. Image models"),
            "",
            _error_or(r.get("fullscale"), render_fullscale, "5. Full scale")]
    return "\n".join(out)


if __name__ == "__main__":
    main()
