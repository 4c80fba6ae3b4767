"""Rank-1 LSTM cost against nn.LSTM, measured in one process (ratios only), and the
parameter overhead of the rank-1 factors.

Run:  .venv/bin/python -m benchmarks.rank1_lstm [--batch 64] [--steps 48] [--hidden 64] [--reps 15] [--threads 1]

Writes benchmarks/results/rank1_lstm.json (``--json`` elsewhere) and, for the default path, the
docs section that shows it (``render`` below: docs/performance.md).

Timing: forward + backward of a K = 4 rank-1 LSTM on a member-major tiled batch (K·B rows)
against ``nn.LSTM`` on the same (K·B, T, D) input, for both sampling modes. Candidates run
interleaved round by round; each ratio is best-of-rounds time / best-of-rounds nn.LSTM time
(the minimum is the run least disturbed by other processes). Equal lengths: loss on the
outputs. Variable lengths: loss on h_n; the reference is nn.LSTM on packed input (exact h_n and
c_n); the ``padded ref`` row instead compares with nn.LSTM run over all T steps with h_n
gathered from the outputs (exact h_n, but no c_n).

Every measurement runs under two allocator settings. ``default``: glibc's malloc returns
large freed blocks to the OS, so big per-call buffers are page-faulted in again on every call
(oneDNN's LSTM workspace is hit hardest). ``keep``: mallopt keeps freed memory in the heap,
so nobody pays page faults; this is the conservative figure for the rank-1 layer.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import os
import resource
import sys
import time
from pathlib import Path

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

from benchmarks import report
from pipeline.bayes.layers import LSTMKernel, LSTMRank1, set_lstm_kernel, set_sampling
from pipeline.tasks.mortality import MortalityConfig, build_model

EMBEDDINGS = ("bag_embedding", "context_embedding")
PARAM_TARGET_PCT = 5.0  # the project's target: rank-1 parameter overhead over the deterministic model, %


def fwd_bwd(run) -> tuple[float, int]:
    """Seconds and minor page faults of one forward + backward."""
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    start = time.perf_counter()
    run().square().mean().backward()
    elapsed = time.perf_counter() - start
    return elapsed, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults


def candidates(n: int, t_len: int, d: int, hidden: int, k: int, variable: bool, device: str = "cpu",
               fused: tuple[str, ...] = ()) -> dict:
    """Closures returning the tensor the loss is taken on, for each candidate, everything on ``device``
    (the packed reference's lengths stay on the CPU, as ``pack_padded_sequence`` takes them).

    ``per_example`` and ``per_member`` run the reference kernels (``LSTMKernel.REFERENCE``) on every device;
    ``fused`` adds the fused paths named: ``per_example_fused`` (the Triton kernel, float32 products),
    ``per_example_fused_tf32`` (the same with TF32 products, as cuDNN's LSTM by default), ``per_member_fused``
    (PyTorch's fused kernel per member block at any lengths: cuDNN on a GPU)."""
    x = torch.randn(n, t_len, d, device=device, requires_grad=True)
    lengths = torch.randint(1, t_len + 1, (n // k,)) if variable else torch.full((n // k,), t_len)
    lengths[0] = t_len
    lengths = lengths.repeat(k)  # tiled: every member block holds the same admissions
    base = nn.LSTM(d, hidden, batch_first=True).to(device)
    rank1 = LSTMRank1(d, hidden, 1, components=k).to(device)
    rows, on_device = torch.arange(n, device=device), lengths.to(device)

    def run_rank1(mode, kernel=LSTMKernel.REFERENCE, matmul_precision="highest"):
        def run():
            set_sampling(rank1, mode)
            set_lstm_kernel(rank1, kernel)
            before = torch.get_float32_matmul_precision()
            torch.set_float32_matmul_precision(matmul_precision)  # the Triton kernel's products follow it
            try:
                out, (h_n, _) = rank1(x, on_device)
            finally:
                torch.set_float32_matmul_precision(before)
            return h_n if variable else out
        return run

    if not variable:
        runs = {"nn.LSTM": lambda: base(x)[0]}
    else:
        runs = {"nn.LSTM": lambda: base(pack_padded_sequence(x, lengths, batch_first=True,
                                                              enforce_sorted=False))[1][0],
                "padded ref": lambda: base(x)[0][rows, on_device - 1]}
    extra = {"per_example_fused": run_rank1("per_example", LSTMKernel.FUSED),
             "per_example_fused_tf32": run_rank1("per_example", LSTMKernel.FUSED, "high"),
             "per_member_fused": run_rank1("per_member", LSTMKernel.FUSED)}
    unknown = set(fused) - set(extra)
    if unknown:
        raise ValueError(f"unknown fused candidates {sorted(unknown)}; choose from {sorted(extra)}")
    return runs | {"per_example": run_rank1("per_example"), "per_member": run_rank1("per_member")} | {
        name: extra[name] for name in fused}


def measure(runs: dict, reps: int) -> dict[str, tuple[float, float]]:
    """Best-of-rounds milliseconds and mean page faults per call, rounds interleaved."""
    for run in runs.values():  # warm-up
        fwd_bwd(run)
    times: dict[str, list[float]] = {name: [] for name in runs}
    faults: dict[str, list[int]] = {name: [] for name in runs}
    for _ in range(reps):
        for name, run in runs.items():
            seconds, pages = fwd_bwd(run)
            times[name].append(seconds)
            faults[name].append(pages)
    return {name: (1e3 * min(times[name]), sum(faults[name]) / reps) for name in runs}


def keep_freed_memory() -> bool:
    """Tell glibc's malloc to keep freed memory (no trimming, no per-block mmap)."""
    path = ctypes.util.find_library("c")
    if path is None:
        return False
    libc = ctypes.CDLL(path)
    if not hasattr(libc, "mallopt"):
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3  # from <malloc.h>
    return bool(libc.mallopt(m_mmap_threshold, 1 << 30)) and bool(libc.mallopt(m_trim_threshold, 1 << 30))


def timing_table(args: argparse.Namespace) -> list[dict]:
    """Print the timing table; its rows (ratios to the reference, reference milliseconds, faults)."""
    rows: list[dict] = []
    k, n = args.components, args.components * args.batch
    print("forward+backward time / nn.LSTM time on the same tiled batch "
          f"(best of {args.reps} interleaved rounds; faults = minor page faults per call)")
    print(f"{'malloc':<8} {'lengths':<10} {'ref':<11} {'ref ms':>7} {'per_example':>12} {'per_member':>11}   "
          f"{'faults ref / per_example / per_member':<38}")
    for regime in ("default", "keep"):
        if regime == "keep" and not keep_freed_memory():
            print("keep     (mallopt unavailable: not glibc)")
            break
        for variable in (False, True):
            torch.manual_seed(0)
            runs = candidates(n, args.steps, args.input, args.hidden, k, variable)
            res = measure(runs, args.reps)
            refs = ("nn.LSTM", "padded ref") if variable else ("nn.LSTM",)
            for ref in refs:
                label = ("variable" if variable else "equal") if ref == "nn.LSTM" else ""
                name = ("packed" if variable else "padded") if ref == "nn.LSTM" else "padded, h_n"
                ms = res[ref][0]
                print(f"{regime:<8} {label:<10} {name:<11} {ms:>7.1f} {res['per_example'][0] / ms:>12.2f} "
                      f"{res['per_member'][0] / ms:>11.2f}   "
                      f"{res[ref][1]:>6.0f} / {res['per_example'][1]:>6.0f} / {res['per_member'][1]:>6.0f}")
                rows.append({"malloc": regime, "lengths": "variable" if variable else "equal", "reference": name,
                             "reference_ms": ms, "per_example": res["per_example"][0] / ms,
                             "per_member": res["per_member"][0] / ms,
                             "faults": {"reference": res[ref][1], "per_example": res["per_example"][1],
                                        "per_member": res["per_member"][1]}})
    return rows


def grouped_counts(model: nn.Module) -> dict[str, int]:
    """Parameters of a mortality model by group, embeddings excluded."""
    groups = {"lstm weights": 0, "lstm bias": 0, "lstm factors": 0, "dense+out weights": 0, "dense+out bias": 0,
              "dense+out factors": 0}
    for name, p in model.named_parameters():
        if name.startswith(EMBEDDINGS):
            continue
        part = "lstm" if name.startswith("lstm.") else "dense+out"
        leaf = name.split(".")
        if "factors" in leaf or "r" in leaf or "s" in leaf:
            kind = "factors"
        elif any(x.startswith("bias") for x in leaf):
            kind = "bias"
        else:
            kind = "weights"
        groups[f"{part} {kind}"] += p.numel()
    return groups


def param_table(hidden: int, k: int) -> list[dict]:
    """Print the parameter table; its rows."""
    rows: list[dict] = []
    print(f"\nparameter overhead at K = {k} over the deterministic LSTM + dense layers (embeddings excluded);"
          "\n'1-bias' also drops nn.LSTM's redundant second bias (b_hh) from the deterministic count")
    print(f"{'H':>4} {'E':>4} {'model':<14} {'deterministic':>13} {'extra':>7} {'overhead':>9} {'1-bias':>7}   "
          "extra by group, % of deterministic")
    for h, e in sorted({(hidden, 32), (256, 32), (256, 128), (512, 32)}):
        cfg = MortalityConfig(token_vocab=100, context_vocab=10, lstm_hidden=h, embedding_dim=e, components=k)
        det = grouped_counts(build_model("deterministic", cfg))
        det_total, b_hh = sum(det.values()), 4 * h * cfg.lstm_layers
        for kind in ("rank1", "batchensemble"):
            other = grouped_counts(build_model(kind, cfg))
            extra = sum(other.values()) - det_total
            parts = ", ".join(f"{g} {100 * (other[g] - det[g]) / det_total:+.2f}"
                              for g in other if other[g] != det[g])
            print(f"{h:>4} {e:>4} {kind:<14} {det_total:>13,} {extra:>7,} {100 * extra / det_total:>8.2f}% "
                  f"{100 * (extra + b_hh) / (det_total - b_hh):>6.2f}%   {parts}")
            rows.append({"hidden": h, "embedding": e, "model": kind, "deterministic": det_total, "extra": extra,
                         "overhead_pct": 100 * extra / det_total,
                         "one_bias_overhead_pct": 100 * (extra + b_hh) / (det_total - b_hh)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=64, help="admissions B (rows = K·B)")
    parser.add_argument("--steps", type=int, default=48, help="time steps T")
    parser.add_argument("--input", type=int, default=33, help="LSTM input size D (embedding 32 + time)")
    parser.add_argument("--hidden", type=int, default=64, help="LSTM hidden size H")
    parser.add_argument("--components", type=int, default=4, help="K")
    parser.add_argument("--reps", type=int, default=15, help="timed rounds")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    parser.add_argument("--params-only", action="store_true", help="print only the parameter table (writes no JSON)")
    parser.add_argument("--json", type=Path, default=None,
                        help="results file (default: benchmarks/results/rank1_lstm.json, which also updates the docs)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    command = report.command(__spec__.name)
    measured = report.provenance()  # the checkout as the run starts
    print(f"command: {' '.join([Path(sys.executable).name, *sys.argv])}")
    load = os.getloadavg()[0]
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"rows K*B = {args.components}*{args.batch} = {args.components * args.batch}, T = {args.steps}, "
          f"D = {args.input}, H = {args.hidden}, load average {load:.1f} on {os.cpu_count()} CPUs\n")
    if args.params_only:
        param_table(args.hidden, args.components)
        return
    timing = timing_table(args)
    parameters = param_table(args.hidden, args.components)
    config = {name: getattr(args, name) for name in ("batch", "steps", "input", "hidden", "components", "reps",
                                                      "threads")}
    result = {**measured, "command": command, "torch": torch.__version__, "load_average": load, "cpus": os.cpu_count(),
              "config": config, "timing": timing, "parameters": parameters}
    report.write_results("rank1_lstm", result, args.json)


def render(r: dict) -> str:
    """docs/performance.md's figures:rank1_lstm section, from the results JSON."""
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
    out += [report.table(["allocator", "lengths", "reference (nn.LSTM)", "reference ms",
                          "per-example sampling (training)",
                    "per-member sampling (evaluation)"], rows), ""]
    out.append(f"Parameter overhead of the rank-1 factors over the deterministic LSTM + dense layers at "
               f"K = {c['components']} (embeddings excluded; counted, not timed; target {PARAM_TARGET_PCT:g}%):")
    out.append("")
    prow = [[str(p["hidden"]), str(p["embedding"]), p["model"], f"{p['deterministic']:,}", f"{p['extra']:,}",
             f"{p['overhead_pct']:.1f}%"] for p in r["parameters"]]
    out.append(report.table(["LSTM units", "embedding", "model", "deterministic parameters", "extra", "overhead"],
                            prow))
    return "\n".join(out)


if __name__ == "__main__":
    main()
