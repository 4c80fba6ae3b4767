"""Batch scoring cost: DEFAULT_SAMPLES samples x K = 4 over a cohort, peak memory, achieved FLOP/s.

    .venv/bin/python -m benchmarks.score [--n 3000] [--small 1000] [--samples S] [--threads 2]
                                         [--batch-size 128] [--target 58976] [--hidden H]
    .venv/bin/python -m benchmarks.score --policy [--n 3000] [--repeat 5] [--threads 1]

Scores random features shaped like the default synthetic benchmark (about 23 bags of about
31 tokens, 833 tokens) with the default rank-1 model (K = 4, LSTM 64 or ``--hidden``, dense 128; weights
untrained, which does not change the cost) through ``pipeline.serving.score.score_files``: chunked
Parquet reading, S·K draws per batch, Parquet output. Each size runs in a fresh child
process, so its peak RSS (ru_maxrss) is its own: equal peaks at two cohort sizes show that
memory is bounded by the chunk and batch sizes, not by the cohort. The time at ``--n`` is
extrapolated linearly to ``--target`` admissions (the MIMIC-III cohort size) and labelled so.

Achieved FLOP/s = analytic FLOPs / wall time of the whole ``score_files`` call (reading,
embeddings, risk table and writing included), the best of ``--repeat`` calls as for the references
(the median call sets the time extrapolation; the first call is printed too). FLOPs are counted for the LSTM and the
dense layers only (multiply-add = 2): per draw and real bag, 2·4H·(D+1) (input) + 2·4H·H
(recurrent); per draw and admission, 2·(H+D)·U + 2·U (dense and output); biases, gate
nonlinearities and the embeddings are not counted. References, in the same child with the
same thread count, each timed after the scoring (best of repeated runs; the machine is shared):
(a) ``torch.mm`` (batch_size·mean bags, D+1+H) x (D+1+H, 4H): one block's gate products;
(b) ``torch.mm`` (S·K·batch_size, H) x (H, 4H): one recurrent step of all draws of a batch
    with one shared weight (the figure tracked in the issue);
(c) ``torch.bmm`` (S·K, batch_size, D+1+H) x (S·K, D+1+H, 4H): one step of all draws of a
    batch with each draw's own weights, the product the blocks backend runs (``inference.Backend``:
    below ``FUSED_MIN_HIDDEN`` units; ``--backend`` forces one);
(d) PyTorch's fused LSTM (``nn.LSTM``, no grad) called as the fused backend calls it, one call per
    draw with its own weights, but on equal-length inputs with fixed weights (no per-batch weight
    building, no padding), over ``batch_size`` rows of round(mean bags) steps (cache-sized
    blocks), FLOPs counted as above; and the same kernel on all S·K·batch_size rows at once with one
    weight set (out of cache), the figure earlier versions printed as a ceiling;
(e) an ideal step: one shared-weight ``torch.mm`` (S·K·batch_size, D+H) x (D+H, 4H) (the rank-1
    form ((x∘s)W)∘r, no per-draw kernels) followed by the whole cell update (∘r + bias, the four
    gate nonlinearities, c and h) fused by ``torch.compile`` into one pass, in cache-sized row
    chunks as the evaluation path runs (``inference.CHUNK_ROWS`` per thread), FLOPs counted as above:
    what any LSTM step on these shapes costs at least with PyTorch on this machine (the gate
    nonlinearities are 5H transcendentals per row and step whatever the implementation).
    Reported as unavailable where torch.compile cannot build (no C++ compiler).
(f) an estimated ceiling from the gate nonlinearities: the analytic FLOPs at the best rate of (a)-(c)
    plus 5H sigmoids per draw and real bag (one layer) at the rate ``torch.sigmoid_`` reaches in place
    on a cache-sized (CHUNK_ROWS·threads, 4H) tensor, as a fraction of (b). It assumes the products
    and the sigmoids share the cores without overlap (both are vector floating-point work) and
    counts nothing else: the embeddings, the dense layers and the cell's other arithmetic only
    lower what an implementation with this sigmoid can reach.

The sampled forward passes alone (``predict.feature_logits`` on the loaded features: batching,
embeddings, LSTM, dense; no Parquet reading, risk table or writing) are timed too, best of
``--repeat``, and reported beside the end-to-end rate.

``--laplace``: instead, a linearized Laplace model with the probit predictive (a deterministic LSTM,
S = ``--subnet-size`` random weights, a random positive-definite posterior: the cost does not depend
on its values) scores ``--n`` admissions into a risk table two ways in one process, alternating,
best of ``--repeat``: the risk table from its Gaussian logits (``risk.score_features``: the moments
once, the spread and MI by Gauss-Hermite quadrature) against the probit scoring of before (the
probit logits as one draw, ``predict.feature_logits`` + ``risk_table``), and prints the ratio.

``--policy``: instead, the cost of the run's referral policy at scoring (issue 35: at most 1.05x). The default
rank-1 model (untrained) gets a ``Policy`` fitted as training fits one (``fit_policy``: recalibration chosen by
cross-fitted NLL, Venn-Abers, the decision threshold, the LTT refer rule ordered by decision uncertainty) on
two halves of other random admissions whose labels are drawn from a plausible risk (the model's risk mapped to
a 10% death rate); ``score_files`` then scores the same ``--n`` admissions with that policy in the run's
``ModelInfo`` and with none, alternating in one process, best of ``--repeat``, and prints the ratio.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.harness import run_module
from benchmarks.train_throughput import random_features
from pipeline.bayes import metrics
from pipeline.core import fileio
from pipeline.core.contracts import DEFAULT_BATCH, DEFAULT_SAMPLES
from pipeline.data import features
from pipeline.tasks.mortality import predict, risk


def analytic_flops(fs: features.FeatureSet, draws: int, d: int, h: int, u: int) -> float:
    """LSTM + dense FLOPs of ``draws`` weight draws over every admission of ``fs``."""
    # real LSTM steps: useful FLOPs only (padded steps the fused backend runs are not counted)
    bag_steps = float(fs.n_bags.sum())
    lstm = bag_steps * (2 * 4 * h * (d + 1) + 2 * 4 * h * h)
    dense = len(fs) * (2 * (h + d) * u + 2 * u)
    return draws * (lstm + dense)


def best_rate(fn, flops: float, min_s: float = 0.5) -> float:
    """FLOP/s of ``fn()`` doing ``flops`` (repeated for at least ``min_s`` seconds, best of 3)."""
    fn()
    reps = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        dt = time.perf_counter() - t0
        if dt >= min_s:
            break
        reps *= 2
    best = dt
    for _ in range(2):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        best = min(best, time.perf_counter() - t0)
    return flops * reps / best


def gemm_rate(m: int, k: int, n: int) -> float:
    """FLOP/s of torch.mm (m, k) x (k, n) in float32."""
    import torch

    a, b, out = torch.randn(m, k), torch.randn(k, n), torch.empty(m, n)
    return best_rate(lambda: torch.mm(a, b, out=out), 2.0 * m * k * n)


def bmm_rate(g: int, m: int, k: int, n: int) -> float:
    """FLOP/s of torch.bmm (g, m, k) x (g, k, n) in float32."""
    import torch

    a, b, out = torch.randn(g, m, k), torch.randn(g, k, n), torch.empty(g, m, n)
    return best_rate(lambda: torch.bmm(a, b, out=out), 2.0 * g * m * k * n)


def lstm_rate(rows: int, steps: int, d: int, h: int, blocks: int = 1) -> float:
    """FLOP/s of ``blocks`` nn.LSTM(d, h), each with its own weights, over (steps, rows, d), no grad,
    FLOPs as ``analytic_flops``."""
    import torch

    lstms, x = [torch.nn.LSTM(d, h) for _ in range(blocks)], torch.randn(steps, rows, d)

    def run() -> None:
        with torch.no_grad():
            for lstm in lstms:
                lstm(x)
    return best_rate(run, blocks * rows * steps * (2 * 4 * h * d + 2 * 4 * h * h), min_s=1.0)


def sigmoid_rate(h: int) -> float:
    """Elements/s of in-place ``torch.sigmoid_`` on a cache-sized (CHUNK_ROWS·threads, 4H) tensor."""
    import torch

    from pipeline.bayes.layers.inference import CHUNK_ROWS

    a = torch.randn(CHUNK_ROWS * torch.get_num_threads(), 4 * h)
    return best_rate(lambda: a.sigmoid_(), float(a.numel()))


def ideal_step_rate(rows: int, d: int, h: int) -> float | None:
    """FLOP/s of reference (e): shared-weight mm + a torch.compile-fused cell update (None if unavailable)."""
    import torch

    def cell(pre, r, b, u_prev, s_h):
        a = torch.sigmoid(torch.addcmul(b, pre, r))  # (rows, 4H): i, f, o, 2g
        i, f, o, g2 = a.split(h, 1)
        u = f * u_prev + 4.0 * i * g2 - 2.0 * i  # 2c
        return u, o * (torch.sigmoid(u) - 0.5) * s_h  # h/2 ∘ s, the next step's input

    try:
        fused = torch.compile(cell)
        z, w = torch.randn(rows, d + h), torch.randn(d + h, 4 * h) * 0.1
        pre, r, b = torch.empty(rows, 4 * h), torch.randn(4 * h), torch.randn(4 * h)
        u, s_h = torch.zeros(rows, h), torch.randn(h)
        fused(pre, r, b, u, s_h)
    except Exception as exc:  # noqa: BLE001 - a missing compiler shows up as many exception types
        print(f"reference (e) unavailable: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}", file=sys.stderr)
        return None

    from pipeline.bayes.layers.inference import CHUNK_ROWS

    chunk = CHUNK_ROWS * torch.get_num_threads()  # rows per pass, as the evaluation path (cache-sized)

    def step() -> None:
        for i in range(0, rows, chunk):
            torch.mm(z[i:i + chunk], w, out=pre[i:i + chunk])
            fused(pre[i:i + chunk], r, b, u[i:i + chunk], s_h)

    return best_rate(step, rows * (2 * 4 * h * (d + 1) + 2 * 4 * h * h))


def _time_recurrence() -> list[float]:
    """Wrap the model's call of ``inference.final_hidden`` so that each call's seconds are appended to
    the returned list (benchmark instrumentation only: the LSTM recurrence's share of a forward pass)."""
    from pipeline.tasks.mortality import network as mortality

    secs: list[float] = []
    inner = mortality.final_hidden

    def timed(*a, **kw):
        t0 = time.perf_counter()
        out = inner(*a, **kw)
        secs.append(time.perf_counter() - t0)
        return out
    mortality.final_hidden = timed
    return secs


def random_model(tmp: Path, args):
    """(features dir, vocabulary, MortalityConfig, model): ``args.n`` random admissions' features under ``tmp`` and
    the default rank-1 model over their vocabulary (``args.hidden`` units when given), seeded, in eval mode."""
    import torch

    from pipeline.tasks.mortality import MortalityConfig, build_model

    feats = random_features(tmp, n=args.n)
    vocab = fileio.read_json(feats / "vocab.json")
    cfg = MortalityConfig(len(vocab["tokens"]), len(vocab["context"]),
                          **({"lstm_hidden": args.hidden} if args.hidden else {}))
    torch.manual_seed(0)
    return feats, vocab, cfg, build_model("rank1", cfg).eval()


def child(args) -> dict:
    """Score ``args.n`` admissions once; report seconds, peak RSS and the reference GEMM rates."""
    import torch

    from pipeline.runs.info import ModelInfo
    from pipeline.runs.load import Run
    from pipeline.serving.score import ScoreConfig, score_files

    torch.set_num_threads(args.threads)
    if args.backend != "auto":  # instrumentation: the model calls final_hidden with Backend.AUTO
        from pipeline.bayes.layers import inference

        inference.FUSED_MIN_HIDDEN = 0 if args.backend == "fused" else 1 << 30
    with tempfile.TemporaryDirectory() as tmp:
        feats, vocab, cfg, model = random_model(Path(tmp), args)
        run = Run(model, ModelInfo.of_model("rank1", refer_threshold=0.01, score_samples=args.samples), None, vocab)
        score_cfg = ScoreConfig(samples=args.samples, batch_size=args.batch_size, threads=args.threads)
        fs = features.load_split(feats / "train.parquet")
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        times = []
        for _ in range(args.repeat):  # timed as the references are: repeated, the best and the median kept
            t0 = time.perf_counter()
            summary = score_files(run, [feats / "train.parquet"], Path(tmp) / "scores.parquet", score_cfg)
            times.append(time.perf_counter() - t0)
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        secs, median_secs = min(times), sorted(times)[len(times) // 2]
        forward, recurrence = [], []
        lstm_secs = _time_recurrence()
        for _ in range(args.repeat):  # the sampled forward passes alone, on the features already loaded
            lstm_secs.clear()
            t0 = time.perf_counter()
            predict.feature_logits(model, fs, args.samples, args.batch_size)
            forward.append(time.perf_counter() - t0)
            recurrence.append(sum(lstm_secs))
    d, h, u, k = cfg.embedding_dim, cfg.lstm_hidden, cfg.dense_units, cfg.components
    draws = args.samples * k
    flops = analytic_flops(fs, draws, d, h, u)
    mean_bags = float(fs.n_bags.mean())
    block_rows = int(args.batch_size * mean_bags)
    refs = {"gemm_block": lambda: gemm_rate(block_rows, d + 1 + h, 4 * h),
            "gemm_step": lambda: gemm_rate(draws * args.batch_size, h, 4 * h),
            "bmm_step": lambda: bmm_rate(draws, args.batch_size, d + 1 + h, 4 * h),
            "lstm": lambda: lstm_rate(draws * args.batch_size, round(mean_bags), d + 1, h),
            "lstm_blocks": lambda: lstm_rate(args.batch_size, round(mean_bags), d + 1, h, blocks=draws),
            "sigmoid": lambda: sigmoid_rate(h),
            "ideal_step": lambda: ideal_step_rate(draws * args.batch_size, d, h)}
    # after scoring, and once more: the best rate is the one least disturbed by other processes
    rates = {name: max((ref() for _ in range(2)), key=lambda v: -1.0 if v is None else v) for name, ref in refs.items()}
    sigmoids = draws * float(fs.n_bags.sum()) * 5 * h  # one layer, as analytic_flops
    return {"n": summary.admissions, "secs": secs, "median_secs": median_secs, "first_secs": times[0],
            "forward_secs": min(forward), "lstm_secs": recurrence[forward.index(min(forward))],
            "lstm_flops": analytic_flops(fs, draws, d, h, 0), "sigmoids": sigmoids,
            "peak_rss_mb": rss / 1024, "rss_before_mb": rss0 / 1024,
            "flops": flops, "mean_bags": mean_bags, "draws": draws, **rates, "block_rows": block_rows, "h": h,
            "d": d}


def laplace_ratio(args) -> dict:
    """Seconds of Gaussian-logit scoring and of the former probit scoring of one Laplace model, same admissions."""
    import torch

    from pipeline.bayes.laplace import LinearizedLaplaceModel, Posterior
    from pipeline.bayes.laplace.config import Predictive
    from pipeline.tasks.mortality import MortalityConfig, build_model

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        feats = random_features(Path(tmp), n=args.n)
        vocab = fileio.read_json(feats / "vocab.json")
        fs = features.load_split(feats / "train.parquet")
    torch.manual_seed(0)
    cfg = MortalityConfig(len(vocab["tokens"]), len(vocab["context"]),
                          **({"lstm_hidden": args.hidden} if args.hidden else {}))
    map_model = build_model("deterministic", cfg).eval()
    d = sum(p.numel() for p in map_model.parameters())
    s = min(args.subnet_size, d)
    a = torch.randn(s, 2 * s, dtype=torch.float64) / math.sqrt(2 * s)
    factor = torch.linalg.cholesky(a @ a.t() + torch.eye(s, dtype=torch.float64))  # (S, S) PD precision
    model = LinearizedLaplaceModel(map_model, torch.randperm(d)[:s].sort().values, Posterior(factor, 1.0),
                                   prior_precision=1.0, selection="random", hessian="full",
                                   predictive=Predictive.PROBIT).eval()

    def gaussian():
        return risk.score_features(model, fs, 1, 0.01, args.batch_size, refer_measure="entropy")

    def probit_before():  # the path of before: repeated probit logits -> the risk table of one draw
        logits = predict.feature_logits(model, fs, 1, args.batch_size)
        return risk.risk_table(logits, fs.keys, 0.01, n_events=fs.n_events, n_bags=fs.n_bags)

    times, tables = {"gaussian": [], "probit": []}, {}
    for _ in range(args.repeat):  # alternating: a load change hits both
        for name, fn in (("gaussian", gaussian), ("probit", probit_before)):
            t0 = time.perf_counter()
            tables[name] = fn()
            times[name].append(time.perf_counter() - t0)
    new, old = tables["gaussian"], tables["probit"]
    if not np.allclose(new["risk_mean"].to_numpy(), old["risk_mean"].to_numpy(), rtol=1e-5, atol=1e-7):
        raise SystemExit("the two paths disagree on risk_mean: not the same predictive")
    return {"n": len(new), "subnet_size": s, "n_params": d, "gaussian_secs": min(times["gaussian"]),
            "probit_secs": min(times["probit"]), "spread": int(new["has_spread"].sum()),
            "spread_before": int(old["has_spread"].sum())}


POLICY_TARGET = 1.05  # issue 35: scoring with the policy at most this times scoring without it


def fitted_policy(model, vocab: dict, samples: int, batch_size: int, n: int = 2000, seed: int = 1):
    """A ``Policy`` for ``model`` fitted as training fits one, on two halves of ``n`` other random admissions whose
    labels are drawn from the model's risk mapped to a 10% death rate (a plausible shape; the cost of applying a
    policy does not depend on its values)."""
    from scipy.special import expit, logit
    from scipy.stats import rankdata

    from pipeline.bayes.referral.policy import fit_policy

    with tempfile.TemporaryDirectory() as tmp:
        fs = features.load_split(random_features(Path(tmp), n=n, n_tokens=len(vocab["tokens"]), seed=seed)
                                 / "train.parquet")
    pred = predict.feature_predictions(model, fs, samples, batch_size, generator=predict.seeded_generator(seed))
    p = pred.summary.mean
    z = logit(np.clip((rankdata(p) - 0.5) / len(p), 1e-6, 1 - 1e-6))  # the model's ranking on a logistic scale
    y = (np.random.default_rng(seed).random(len(p)) < expit(-2.6 + 1.2 * z)).astype(np.float64)
    halves = []
    for part in (np.arange(len(p)) % 2 == 0, np.arange(len(p)) % 2 == 1):
        logits = pred.logits[:, :, part]
        halves.append((risk.predictive(predict.Predictions(logits, metrics.Summary.from_draws(logits))), y[part]))
    return fit_policy(halves[0][0], halves[0][1], halves[1][0], halves[1][1], seed=seed)


def policy_ratio(args) -> dict:
    """Seconds of ``score_files`` over the same admissions with the run's policy and without (alternating, best
    and median of ``args.repeat``), and what the policy was."""
    import pandas as pd
    import torch

    from pipeline.runs.info import ModelInfo
    from pipeline.runs.load import Run
    from pipeline.serving.score import ScoreConfig, score_files

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        feats, vocab, cfg, model = random_model(Path(tmp), args)
        policy = fitted_policy(model, vocab, args.samples, args.batch_size)
        runs = {name: Run(model, ModelInfo.of_model("rank1", refer_threshold=0.01, score_samples=args.samples,
                                                    policy=d), None, vocab)
                for name, d in (("policy", policy.to_dict()), ("none", None))}
        score_cfg = ScoreConfig(samples=args.samples, batch_size=args.batch_size, threads=args.threads)
        times = {name: [] for name in runs}
        for _ in range(args.repeat):  # alternating: a change of the machine's load hits both
            for name, run in runs.items():
                t0 = time.perf_counter()
                summary = score_files(run, [feats / "train.parquet"], Path(tmp) / f"{name}.parquet", score_cfg)
                times[name].append(time.perf_counter() - t0)
        with_policy, without = (pd.read_parquet(Path(tmp) / f"{n}.parquet") for n in ("policy", "none"))
    if not np.array_equal(with_policy["risk_mean"].to_numpy(), without["risk_mean"].to_numpy()):
        raise SystemExit("the two scorings disagree on risk_mean: not the same draws")
    best = {k: min(v) for k, v in times.items()}
    median = {k: float(np.median(v)) for k, v in times.items()}
    return {"n": summary.admissions, "samples": args.samples, "draws": args.samples * cfg.components,
            "threads": args.threads, "batch_size": args.batch_size, "repeat": args.repeat,
            "policy_secs": best["policy"], "none_secs": best["none"], "ratio": best["policy"] / best["none"],
            "policy_median_secs": median["policy"], "none_median_secs": median["none"],
            "median_ratio": median["policy"] / median["none"], "calibration": policy.calibration.get("method"),
            "ordering": policy.ordering.value, "rule_status": policy.rule.overall.status.value,
            "referred": int(with_policy["refer"].sum()), "high_risk": int(with_policy["high_risk"].sum()),
            "target": POLICY_TARGET}


def print_policy_ratio(r: dict) -> None:
    verdict = "met" if r["ratio"] <= r["target"] else "NOT met"
    print(f"scoring with the referral policy (calibration {r['calibration']}, ordering {r['ordering']}, rule "
          f"{r['rule_status']}: {r['referred']} referred, {r['high_risk']} high risk) against without, the same "
          f"{r['n']:,} admissions, {r['samples']} samples x K = {r['draws']} draws, batch {r['batch_size']}, "
          f"{r['threads']} torch threads, best of {r['repeat']} alternating runs: {r['policy_secs']:.2f} s against "
          f"{r['none_secs']:.2f} s, ratio {r['ratio']:.3f} (median runs {r['median_ratio']:.3f}); target <= "
          f"{r['target']:g}: {verdict}")


def run_child(n: int, args) -> dict:
    """One cohort size scored in a fresh process (``--child``), so that its peak RSS is its own: its JSON line."""
    return run_module(__spec__.name, "--child", "--n", str(n), "--samples", str(args.samples), "--threads",
                      str(args.threads), "--batch-size", str(args.batch_size), "--hidden", str(args.hidden),
                      "--repeat", str(args.repeat), "--backend", args.backend).last_json()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=3000, help="admissions scored for the timing")
    ap.add_argument("--small", type=int, default=1000, help="a smaller cohort, for the peak-RSS comparison")
    ap.add_argument("--samples", type=int, default=DEFAULT_SAMPLES, help="samples per component")
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    ap.add_argument("--batch-size", type=int, default=DEFAULT_BATCH, help="admissions per forward pass")
    ap.add_argument("--target", type=int, default=58_976, help="cohort size to extrapolate to")
    ap.add_argument("--hidden", type=int, default=0, help="LSTM units (0: the default model's)")
    ap.add_argument("--repeat", type=int, default=3, help="times each cohort is scored (best and median reported)")
    ap.add_argument("--backend", choices=["auto", "blocks", "fused"], default="auto",
                    help="recurrence backend (inference.Backend); auto: fused from inference.FUSED_MIN_HIDDEN units up")
    ap.add_argument("--laplace", action="store_true",
                    help="time Gaussian-logit against probit scoring of a Laplace model")
    ap.add_argument("--subnet-size", type=int, default=1000, help="--laplace: S, the subnetwork size")
    ap.add_argument("--policy", action="store_true",
                    help="time scoring with the run's referral policy against scoring without it")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.laplace:
        r = laplace_ratio(args)
        print(f"Laplace (probit predictive, S={r['subnet_size']} of D={r['n_params']}), n={r['n']} admissions, batch "
              f"{args.batch_size}, {args.threads} torch threads, best of {args.repeat} alternating runs: risk table "
              f"from the Gaussian logits (moments + {metrics.GH_NODES}-node quadrature) {r['gaussian_secs']:.2f} s, "
              f"probit logits as one draw (before) {r['probit_secs']:.2f} s: ratio "
              f"{r['gaussian_secs'] / r['probit_secs']:.3f} (target <= 1.2); admissions with a spread: {r['spread']} "
              f"(before: {r['spread_before']})")
        return
    if args.policy:
        print_policy_ratio(policy_ratio(args))
        return
    if args.child:
        print(json.dumps(child(args)))
        return
    small, big = run_child(args.small, args), run_child(args.n, args)
    rate = big["n"] / big["median_secs"]  # the time target: the median run
    achieved = big["flops"] / big["secs"]  # FLOP/s: the best run, as the references
    from pipeline.bayes.layers.inference import FUSED_MIN_HIDDEN

    backend = args.backend if args.backend != "auto" else ("fused" if big["h"] >= FUSED_MIN_HIDDEN else "blocks")
    print(f"scoring {args.samples} samples x K=4 = {big['draws']} draws, LSTM {big['h']} ({backend} backend), batch "
          f"{args.batch_size}, {args.threads} torch threads, random features ({big['mean_bags']:.1f} bags per "
          "admission on average)")
    for r in (small, big):
        print(f"  n={r['n']:6d}  best {r['secs']:5.1f} s, median {r['median_secs']:5.1f} s of {args.repeat} "
              f"(first {r['first_secs']:.1f} s)  {r['n'] / r['median_secs']:7.1f} admissions/s (median)  "
              f"peak RSS {r['peak_rss_mb']:7.1f} MB (after setup {r['rss_before_mb']:.1f} MB)")
    print(f"peak RSS ratio n={big['n']} / n={small['n']}: {big['peak_rss_mb'] / small['peak_rss_mb']:.3f} "
          f"(cohort ratio {big['n'] / small['n']:.1f})")
    print(f"extrapolated (linear in admissions, median run at n={big['n']}) to {args.target:,} admissions: "
          f"{args.target / rate / 60:.1f} min")
    forward = big["flops"] / big["forward_secs"]
    print(f"achieved LSTM+dense FLOP/s (best of {args.repeat} runs, as the references): {achieved / 1e9:.2f} GFLOP/s "
          f"end to end (median run {big['flops'] / big['median_secs'] / 1e9:.2f}); the sampled forward passes alone "
          f"(feature_logits, best {big['forward_secs']:.2f} s; the best whole run {big['secs']:.2f} s): "
          f"{forward / 1e9:.2f} GFLOP/s = {forward / big['gemm_step']:.1%} of the recurrent-step torch.mm")
    if not big["lstm_secs"]:
        raise SystemExit("the recurrence was never timed: is the model's fast inference path (inference.final_hidden) "
                         "off?")
    lstm = big["lstm_flops"] / big["lstm_secs"]
    print(f"  of which the LSTM recurrence (inference.final_hidden: weights and steps) took {big['lstm_secs']:.2f} s: "
          f"{lstm / 1e9:.2f} GFLOP/s of LSTM FLOPs = {lstm / big['gemm_step']:.1%} of the recurrent-step torch.mm; "
          f"the embeddings, dense layers and batching the other {big['forward_secs'] - big['lstm_secs']:.2f} s")
    print(f"  vs torch.mm ({big['block_rows']}, {big['d'] + 1 + big['h']}) x ({big['d'] + 1 + big['h']}, "
          f"{4 * big['h']}) [one block's gate work]: {big['gemm_block'] / 1e9:.2f} GFLOP/s -> "
          f"{achieved / big['gemm_block']:.1%}")
    print(f"  vs torch.mm ({big['draws'] * args.batch_size}, {big['h']}) x ({big['h']}, {4 * big['h']}) "
          f"[one recurrent step of all draws of a batch]: "
          f"{big['gemm_step'] / 1e9:.2f} GFLOP/s -> {achieved / big['gemm_step']:.1%}")
    print(f"  vs torch.bmm {big['draws']} x ({args.batch_size}, {big['d'] + 1 + big['h']}) x "
          f"({big['d'] + 1 + big['h']}, {4 * big['h']}) [one step of all draws, each its own weights]: "
          f"{big['bmm_step'] / 1e9:.2f} GFLOP/s -> {achieved / big['bmm_step']:.1%}")
    steps = round(big["mean_bags"])
    print(f"  PyTorch's fused nn.LSTM, one call per draw with its own weights ({big['draws']} x {args.batch_size} rows "
          f"x {steps} steps): {big['lstm_blocks'] / 1e9:.2f} GFLOP/s = {big['lstm_blocks'] / big['gemm_step']:.1%} of "
          f"the recurrent-step torch.mm (one weight set on all {big['draws'] * args.batch_size} rows at once: "
          f"{big['lstm'] / 1e9:.2f} GFLOP/s = {big['lstm'] / big['gemm_step']:.1%})")
    best_mm = max(big["gemm_block"], big["gemm_step"], big["bmm_step"])
    t_mm, t_sig = big["flops"] / best_mm, big["sigmoids"] / big["sigmoid"]
    print(f"  estimated ceiling from the gate nonlinearities: 5H sigmoids per draw and bag at "
          f"{args.threads * 1e9 / big['sigmoid']:.2f} ns per element and core ({big['sigmoid'] / 1e9:.2f} G/s in "
          f"place, cache-sized) take {t_sig:.2f} s beside {t_mm:.2f} s for the FLOPs at the best product rate above "
          f"({best_mm / 1e9:.2f} GFLOP/s); with nothing else costing time (no overlap of the two on these cores) "
          f"an implementation with this sigmoid reaches {big['flops'] / (t_mm + t_sig) / 1e9:.2f} GFLOP/s = "
          f"{big['flops'] / (t_mm + t_sig) / big['gemm_step']:.1%} of the recurrent-step torch.mm")
    if big["ideal_step"] is None:
        print("  ideal step (shared-weight mm + torch.compile-fused cell): unavailable here")
    else:
        print(f"  ideal step: shared-weight torch.mm ({big['draws'] * args.batch_size}, {big['d'] + big['h']}) x "
              f"({big['d'] + big['h']}, {4 * big['h']}) + the cell update fused by torch.compile achieves "
              f"{big['ideal_step'] / 1e9:.2f} GFLOP/s = {big['ideal_step'] / big['gemm_step']:.1%} of the "
              f"recurrent-step torch.mm; achieved end to end = {achieved / big['ideal_step']:.1%} of it")


if __name__ == "__main__":
    main()
