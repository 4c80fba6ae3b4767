"""Which 95% interval of the ECE covers what it estimates, with its shown point inside (issue 46, item 2;
docs/experiments/2026-12-06-ece-interval.md, its design and decision rule).

    python -m experiments.ece_interval --json docs/experiments/2026-12-06-ece-interval.json

Simulated predictions (logit p ~ N(-2.4, 1)) in three worlds (logit q = a + b logit p: calibrated, the README's
test split's measured miscalibration, a strong one), test sizes 189 / 1,000 / 5,000, 300 replications each, the
bootstrap of ``evaluate`` (``metrics.report.bootstrap_replicates``, 1,000 resamples; its ECE replicates alone,
``ece_replicates``, checked equal to it once per cell). The population ECE of each world
is computed here on 2,000,000 draws of p with E[y | p] = q, by its own binning (``np.floor(15 p)``), not by
``metrics.ece``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from scipy.stats import norm

from pipeline.bayes.metrics.calibration import _bin_onehot, ece
from pipeline.bayes.metrics.report import bootstrap_indices, bootstrap_replicates

WORLDS = {"calibrated": (0.0, 1.0), "readme": (-0.22, 0.87), "strong": (0.5, 1.3)}  # (a, b) of logit q
SIZES = (189, 1000, 5000)
BINS = 15
LEVEL = 0.95


def expit(x):
    return 1.0 / (1.0 + np.exp(-x))


def draw(rng, n: int, a: float, b: float) -> tuple[np.ndarray, np.ndarray]:
    """(p, q): predictions and their true risk."""
    z = rng.normal(-2.4, 1.0, n)
    return expit(z), expit(a + b * z)


def population_ece(a: float, b: float, n: int = 2_000_000, seed: int = 12345) -> float:
    """Σ_b P(b)·|E[q - p | b]| on ``n`` draws (no label noise), binned independently of ``metrics.ece``."""
    p, q = draw(np.random.default_rng(seed), n, a, b)
    bins = np.minimum(np.floor(p * BINS).astype(int), BINS - 1)
    gap = np.bincount(bins, weights=q - p, minlength=BINS)
    return float(np.abs(gap).sum() / n)


def ece_replicates(y: np.ndarray, p: np.ndarray, idx: np.ndarray, chunk: int = 200) -> np.ndarray:
    """The ECE of every resample in ``idx`` (B, N), as ``bootstrap_replicates`` computes it (the same weights and
    products) without the other metrics; checked equal to it on each cell's first replication."""
    n = y.shape[0]
    gap = _bin_onehot(p, BINS) * (y - p)[:, None]  # (N, BINS)
    out = np.empty(idx.shape[0])
    for start in range(0, idx.shape[0], chunk):
        rows = idx[start:start + chunk]
        b = rows.shape[0]
        w = np.bincount((rows + np.arange(b)[:, None] * n).ravel(), minlength=b * n).reshape(b, n).astype(np.float64)
        out[start:start + b] = np.abs(w @ gap).sum(axis=1) / n
    return out


def intervals(theta: float, reps: np.ndarray) -> dict[str, tuple[float, float, float]]:
    """name -> (shown point, lower, upper) of each interval."""
    a = (1 - LEVEL) / 2
    lo, hi = np.quantile(reps, [a, 1 - a])
    share = float(np.clip((reps < theta).mean(), 0.5 / reps.size, 1 - 0.5 / reps.size))
    z0, z = norm.ppf(share), norm.ppf(1 - a)
    bc = np.quantile(reps, [norm.cdf(2 * z0 - z), norm.cdf(2 * z0 + z)])
    return {"percentile": (theta, float(lo), float(hi)),
            "bc": (theta, float(bc[0]), float(bc[1])),
            "basic": (max(0.0, 2 * theta - float(reps.mean())), max(0.0, 2 * theta - hi), max(0.0, 2 * theta - lo))}


def cell(world: str, n: int, reps: int, boots: int, seed: int) -> dict:
    a, b = WORLDS[world]
    truth = population_ece(a, b)
    rng = np.random.default_rng(seed)
    idx = bootstrap_indices(n, boots, seed)
    rows = {k: [] for k in ("percentile", "bc", "basic")}
    thetas, debiased = [], []
    for i in range(reps):
        p, q = draw(rng, n, a, b)
        y = (rng.random(n) < q).astype(np.float64)
        theta = ece(y, p, BINS)
        r = ece_replicates(y, p, idx)
        if i == 0:  # the same replicates as evaluate's bootstrap
            np.testing.assert_allclose(r, bootstrap_replicates(y, p, np.zeros(n), idx, BINS)["ece"], rtol=1e-12)
        found = intervals(theta, r)
        thetas.append(theta)
        debiased.append(found["basic"][0])
        for k, (point, lo, hi) in found.items():
            rows[k].append((lo <= truth <= hi, lo <= point <= hi, hi - lo))
    out = {"world": world, "a": a, "b": b, "n": n, "ece_pop": truth, "mean_ece": float(np.mean(thetas)),
           "mean_debiased": float(np.mean(debiased))}
    for k, v in rows.items():
        arr = np.array(v, dtype=np.float64)
        out[k] = {"coverage": float(arr[:, 0].mean()), "point_inside": float(arr[:, 1].mean()),
                  "mean_width": float(arr[:, 2].mean())}
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--reps", type=int, default=300)
    ap.add_argument("--boots", type=int, default=1000)
    args = ap.parse_args(argv)
    cells = []
    for i, world in enumerate(WORLDS):
        for j, n in enumerate(SIZES):
            c = cell(world, n, args.reps, args.boots, seed=100 * i + j)
            cells.append(c)
            print(f"{world:10s} n={n:5d} ECE_pop {c['ece_pop']:.4f} mean ECE {c['mean_ece']:.4f} debiased "
                  f"{c['mean_debiased']:.4f} | " + " | ".join(
                      f"{k} cover {c[k]['coverage']:.3f} inside {c[k]['point_inside']:.3f} width "
                      f"{c[k]['mean_width']:.4f}" for k in ("percentile", "bc", "basic")), flush=True)
    worst = {k: max(abs(c[k]["coverage"] - LEVEL) for c in cells) for k in ("percentile", "bc", "basic")}
    inside = {k: min(c[k]["point_inside"] for c in cells) for k in worst}
    eligible = [k for k in worst if inside[k] >= 0.99]
    chosen = min(eligible or worst, key=worst.get)
    print("worst |coverage - 0.95|: " + ", ".join(f"{k} {v:.3f}" for k, v in worst.items()))
    print("least share of points inside: " + ", ".join(f"{k} {v:.3f}" for k, v in inside.items()))
    print(f"adopted by the rule: {chosen}" + ("" if worst[chosen] <= 0.10 else " (worst case beyond 10 points)"))
    args.json.write_text(json.dumps({"cells": cells, "worst": worst, "inside": inside, "chosen": chosen,
                                     "reps": args.reps, "boots": args.boots}, indent=1) + "\n")


if __name__ == "__main__":
    main()
