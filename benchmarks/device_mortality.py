"""The mortality models on one torch device (a GPU): the rank-1 LSTM against ``nn.LSTM``, whole training
steps, and scoring a whole MIMIC-III cohort, each as a ratio to a baseline timed in the same process.

    python -m benchmarks.device_mortality [--device cuda] [--hidden 64 --hidden 256] [--reps 20]
        [--score-n 58976] [--samples S] [--cpu-score-n 3000] [--json PATH]

Three parts, each reported even when another fails (its error is recorded instead):

1. **LSTM layer**: forward + backward of a K = 4 rank-1 LSTM (``LSTMRank1``, both sampling modes) on a
   member-major tiled batch of K·B rows against ``nn.LSTM`` (cuDNN on a GPU) on the same input, equal and
   variable lengths (``benchmarks.rank1_lstm.candidates``: the variable-length reference is nn.LSTM on
   packed input), at each ``--hidden``. Median of ``--reps`` interleaved rounds after warm-up; on a GPU
   each call is timed to ``torch.cuda.synchronize``.
2. **Training step**: the real step (collate on the CPU, copy, forward, NLL + KL + L2, backward, clipping,
   Adam; ``benchmarks.train_throughput.setup``) of the rank-1 model against the deterministic LSTM at the
   default preset, at each ``--hidden``: ms per step and admissions per second, median over blocks.
3. **Scoring**: ``--score-n`` admissions of random features shaped like the synthetic benchmark (the
   MIMIC-III cohort size by default) through ``serving.score.score_files`` (chunked Parquet in, the risk
   table out) with ``--samples`` x K draws of an untrained rank-1 model (the weights do not change the
   cost) on ``--device``; the baseline is the same call on this machine's CPU (all its cores) over the
   first ``--cpu-score-n`` admissions, compared in admissions per second. Peak device memory is reported.

Without CUDA ``--device cpu`` runs the same measurements (small sizes make it a smoke run). Writes
benchmarks/results/device_mortality.json (``--json`` elsewhere). No GPU has run it yet, so its docs
section does not exist: after the first GPU run, name ``device_mortality`` in ``report.RENDERERS``
(``render`` below) and put a ``figures:device_mortality`` section in docs/performance.md, where the
GPU paragraph says so.
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
from pipeline.core.contracts import DEFAULT_SAMPLES


def _sync(device) -> None:
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def _median_ms(runs: dict, reps: int, device) -> dict[str, float]:
    """Median milliseconds of forward + backward per candidate, rounds interleaved, after two warm-ups."""
    for run in runs.values():
        for _ in range(2):
            run().square().mean().backward()
    _sync(device)
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(reps):
        for name, run in runs.items():
            start = time.perf_counter()
            run().square().mean().backward()
            _sync(device)
            times[name].append(time.perf_counter() - start)
    return {name: 1e3 * statistics.median(t) for name, t in times.items()}


def layer_rows(args, device) -> list[dict]:
    """Part 1: the rank-1 LSTM layer against nn.LSTM at each hidden size, equal and variable lengths."""
    import torch

    from benchmarks.rank1_lstm import candidates

    rows = []
    for hidden in args.hidden:
        for variable in (False, True):
            torch.manual_seed(0)
            runs = candidates(args.components * args.batch, args.steps, args.input, hidden, args.components,
                              variable, device)
            ms = _median_ms(runs, args.reps, device)
            ref = ms["nn.LSTM"]
            row = {"hidden": hidden, "lengths": "variable" if variable else "equal", "reference_ms": ref,
                   "per_example_ms": ms["per_example"], "per_member_ms": ms["per_member"],
                   "per_example": ms["per_example"] / ref, "per_member": ms["per_member"] / ref}
            print(f"  H={hidden:4d} {row['lengths']:8s} nn.LSTM {ref:7.2f} ms  per_example {ms['per_example']:7.2f} "
                  f"ms ({row['per_example']:.2f}x)  per_member {ms['per_member']:7.2f} ms ({row['per_member']:.2f}x)",
                  flush=True)
            rows.append(row)
    return rows


def train_rows(args, device, fdir: Path, fs) -> list[dict]:
    """Part 2: whole training steps, rank-1 against the deterministic LSTM, at each hidden size."""
    from benchmarks.train_throughput import setup

    rows = []
    for hidden in args.hidden:
        runners = {kind: setup(kind, "default", fdir, fs, device, lstm_hidden=hidden)
                   for kind in ("deterministic", "rank1")}
        for run, _, _ in runners.values():
            run(3)
        secs: dict[str, list[float]] = {kind: [] for kind in runners}
        per_block = max(1, args.train_steps // 4)
        for _ in range(4):
            for kind, (run, _, _) in runners.items():
                secs[kind].append(run(per_block) / per_block)
        step = {kind: statistics.median(s) for kind, s in secs.items()}
        row = {"hidden": hidden}
        for kind, (_, distinct, _) in runners.items():
            row[kind] = {"step_ms": 1e3 * step[kind], "admissions_per_s": distinct / step[kind]}
        row["ratio"] = step["rank1"] / step["deterministic"]
        print(f"  H={hidden:4d} deterministic {row['deterministic']['step_ms']:7.2f} ms/step  rank-1 "
              f"{row['rank1']['step_ms']:7.2f} ms/step ({row['ratio']:.2f}x, "
              f"{row['rank1']['admissions_per_s']:.0f} admissions/s)", flush=True)
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
    """Part 3: scoring ``--score-n`` admissions on the device against the CPU (first ``--cpu-score-n``)."""
    import torch

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None, help="torch device (default: cuda when available, else cpu)")
    ap.add_argument("--hidden", type=int, action="append", default=None, help="LSTM units (repeatable; default "
                    "64 and 256)")
    ap.add_argument("--batch", type=int, default=64, help="part 1: admissions B (rows = K·B)")
    ap.add_argument("--steps", type=int, default=48, help="part 1: time steps T")
    ap.add_argument("--input", type=int, default=33, help="part 1: LSTM input size D")
    ap.add_argument("--components", type=int, default=4, help="K")
    ap.add_argument("--reps", type=int, default=20, help="part 1: timed rounds")
    ap.add_argument("--train-steps", type=int, default=40, help="part 2: timed steps per model and hidden size")
    ap.add_argument("--train-n", type=int, default=2000, help="part 2: admissions of the training features")
    ap.add_argument("--score-n", type=int, default=58_976, help="part 3: admissions scored on the device")
    ap.add_argument("--cpu-score-n", type=int, default=3000, help="part 3: admissions scored on the CPU")
    ap.add_argument("--samples", type=int, default=DEFAULT_SAMPLES,
                    help="part 3: samples per component (draws = samples x K) [contracts.DEFAULT_SAMPLES]")
    ap.add_argument("--parts", default="layer,train,score", help="which parts to run, comma-separated")
    ap.add_argument("--json", type=Path, default=None, help="results file (default: "
                    "benchmarks/results/device_mortality.json, which also updates the docs)")
    args = ap.parse_args()
    args.hidden = args.hidden or [64, 256]
    import torch

    from benchmarks.train_throughput import random_features
    from pipeline.core import fileio
    from pipeline.core.devices import resolve_device
    from pipeline.data import features

    device = resolve_device(args.device)
    measured, command = report.provenance(), report.command(__spec__.name)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"command: {' '.join([Path(sys.executable).name, *sys.argv])}\ntorch {torch.__version__}, device "
          f"{device} ({name}), {os.cpu_count()} CPUs", flush=True)
    parts = set(args.parts.split(","))
    result = {**measured, "command": command, "torch": torch.__version__, "device": str(device),
              "device_name": name, "cpus": os.cpu_count(),
              "config": {k: getattr(args, k) for k in ("hidden", "batch", "steps", "input", "components", "reps",
                                                       "train_steps", "train_n", "score_n", "cpu_score_n",
                                                       "samples")}}
    with tempfile.TemporaryDirectory() as tmp:
        if "layer" in parts:
            result["layer"] = _part("1. LSTM layer, forward + backward", layer_rows, args, device)
        if "train" in parts:
            tdir = random_features(Path(tmp) / "train", n=args.train_n)
            result["train"] = _part("2. training step", train_rows, args, device, tdir,
                                    features.load_split(tdir / "train.parquet"))
        if "score" in parts:
            start = time.perf_counter()
            sdir = random_features(Path(tmp) / "score", n=args.score_n)
            print(f"  ({args.score_n} random admissions written in {time.perf_counter() - start:.0f} s)", flush=True)
            result["score"] = _part("3. scoring", score_part, args, device, sdir, fileio.read_json(sdir / "vocab.json"))
    report.write_results("device_mortality", result, args.json)


def _error_or(part: dict | None, render_fn) -> str:
    if part is None:
        return "not run"
    return f"failed: `{part['error']}`" if "error" in part else render_fn(part["result"])


def render(r: dict) -> str:
    """docs/performance.md's figures:device_mortality section, from the results JSON."""
    c = r["config"]
    out = [f"On {r['device_name']} (`{r['device']}`, torch {r['torch']}, {r['cpus']} CPUs beside it).", ""]

    def layer(rows):
        body = [[str(x["hidden"]), x["lengths"], f"{x['reference_ms']:.2f}", f"{x['per_example_ms']:.2f}",
                 f"{x['per_example']:.2f}x", f"{x['per_member_ms']:.2f}", f"{x['per_member']:.2f}x"] for x in rows]
        return "\n".join([
            f"LSTM layer, forward + backward, K = {c['components']} on {c['components'] * c['batch']} tiled rows, "
            f"T = {c['steps']}, D = {c['input']} (median of {c['reps']} interleaved rounds):", "",
            report.table(["LSTM units", "lengths", "nn.LSTM ms", "rank-1 per-example ms", "ratio",
                          "rank-1 per-member ms", "ratio"], body)])

    def train(rows):
        body = [[str(x["hidden"]), f"{x['deterministic']['step_ms']:.2f}", f"{x['rank1']['step_ms']:.2f}",
                 f"{x['ratio']:.2f}x", f"{x['rank1']['admissions_per_s']:,.0f}"] for x in rows]
        return "\n".join([
            f"Whole training step at the default preset (collate on the CPU, copy, forward, loss, backward, Adam; "
            f"median over 4 blocks of {max(1, c['train_steps'] // 4)} steps):", "",
            report.table(["LSTM units", "deterministic ms", "rank-1 ms", "ratio", "rank-1 admissions/s"], body)])

    def score(s):
        peak = f", peak device memory {s['peak_device_mb']:,.0f} MB" if s.get("peak_device_mb") else ""
        return (f"Scoring (`score_files`: Parquet in, risk table out) {s['admissions']:,} admissions x "
                f"{s['draws']} draws: **{s['seconds']:.1f} s** ({s['per_s']:,.0f} admissions/s{peak}); the same "
                f"call on the CPU ({s['cpu_threads']} threads) over {s['cpu_admissions']:,} admissions: "
                f"{s['cpu_per_s']:,.0f} admissions/s, so the device scores **{s['speedup']:.1f}x** as fast.")

    out += [_error_or(r.get("layer"), layer), "", _error_or(r.get("train"), train), "",
            _error_or(r.get("score"), score)]
    return "\n".join(out)


if __name__ == "__main__":
    main()
