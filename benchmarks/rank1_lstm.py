"""Rank-1 LSTM cost against nn.LSTM, measured in one process (ratios only).

Run:  .venv/bin/python benchmarks/rank1_lstm.py [--batch 64] [--steps 48] [--hidden 64] [--reps 7]

Times forward + backward of a K = 4 rank-1 LSTM on a member-major tiled batch (K·B rows)
against ``nn.LSTM`` on the same (K·B, T, D) input, for both sampling modes, interleaving
the candidates and reporting best-of-rounds ratios. Also prints the parameter
overhead of the rank-1 factors over the deterministic LSTM + dense layers.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.layers import LSTMRank1, set_sampling  # noqa: E402
from pipeline.models import MortalityConfig, build_model  # noqa: E402


def fwd_bwd(run) -> float:
    start = time.perf_counter()
    out = run()
    out.square().mean().backward()
    return time.perf_counter() - start


def time_ratios(n: int, t_len: int, d: int, hidden: int, k: int, reps: int, variable: bool) -> dict[str, float]:
    """Best-of-rounds time of each candidate / best-of-rounds nn.LSTM time (rounds interleaved).

    The minimum is the run least disturbed by other processes on a shared machine.
    """
    x = torch.randn(n, t_len, d, requires_grad=True)
    lengths = torch.randint(1, t_len + 1, (n,)) if variable else torch.full((n,), t_len)
    lengths[0] = t_len
    base = nn.LSTM(d, hidden, batch_first=True)
    rank1 = LSTMRank1(d, hidden, 1, components=k)

    def run_base():
        if not variable:
            return base(x)[0]
        return base(pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False))[1][0]

    def run_rank1(mode):
        def run():
            set_sampling(rank1, mode)
            out, (h_n, _) = rank1(x, lengths)
            return out if not variable else h_n
        return run

    runs = {"nn.LSTM": run_base, "per_example": run_rank1("per_example"), "per_member": run_rank1("per_member")}
    for run in runs.values():  # warm-up
        fwd_bwd(run)
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(reps):  # interleaved rounds
        for name, run in runs.items():
            times[name].append(fwd_bwd(run))
    best = {name: min(v) for name, v in times.items()}
    return {name: best[name] / best["nn.LSTM"] for name in runs} | {"base_ms": 1e3 * best["nn.LSTM"]}


def count(module: nn.Module, skip: tuple[str, ...]) -> int:
    return sum(p.numel() for name, p in module.named_parameters() if not name.startswith(skip))


def param_overhead(hidden: int, k: int, kind: str) -> tuple[int, int, float]:
    """Extra parameters of ``kind`` over the deterministic LSTM + dense layers (embeddings excluded)."""
    cfg = MortalityConfig(token_vocab=100, context_vocab=10, lstm_hidden=hidden, components=k)
    skip = ("bag_embedding", "context_embedding")
    det = count(build_model("deterministic", cfg), skip)
    other = count(build_model(kind, cfg), skip)
    return det, other - det, (other - det) / det


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=64, help="admissions B (rows = K·B)")
    parser.add_argument("--steps", type=int, default=48, help="time steps T")
    parser.add_argument("--input", type=int, default=33, help="LSTM input size D (embedding 32 + time)")
    parser.add_argument("--hidden", type=int, default=64, help="LSTM hidden size H")
    parser.add_argument("--components", type=int, default=4, help="K")
    parser.add_argument("--reps", type=int, default=15, help="timed rounds")
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    k, n = args.components, args.components * args.batch
    print(f"command: {' '.join([Path(sys.executable).name, *sys.argv])}")
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, rows K*B = {k}*{args.batch} = {n}, "
          f"T = {args.steps}, D = {args.input}, H = {args.hidden}, "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print("\nforward+backward time / nn.LSTM time on the same tiled batch (best of interleaved rounds)")
    print(f"{'lengths':<10} {'nn.LSTM ms':>11} {'per_example':>12} {'per_member':>12}")
    for variable in (False, True):
        r = time_ratios(n, args.steps, args.input, args.hidden, k, args.reps, variable)
        print(f"{'variable' if variable else 'equal':<10} {r['base_ms']:>11.1f} {r['per_example']:>12.2f} "
              f"{r['per_member']:>12.2f}")
    print(f"\nparameter overhead over deterministic LSTM + dense layers at K = {k} (embeddings excluded)")
    print(f"{'H':>5} {'model':<14} {'deterministic':>14} {'extra':>8} {'overhead':>9}")
    for hidden in sorted({args.hidden, 256}):
        for kind in ("rank1", "batchensemble"):
            det, extra, frac = param_overhead(hidden, k, kind)
            print(f"{hidden:>5} {kind:<14} {det:>14,} {extra:>8,} {100 * frac:>8.2f}%")


if __name__ == "__main__":
    main()
