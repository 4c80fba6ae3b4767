"""Which feature test should the shift check use? The cross-fitted domain classifier against the kernel MMD test,
power and false-alarm rate on synthetic shifts (issue 43, item 1's choice; docs/referral.md, "When the patients
change", reports what this printed).

    python -m experiments.shift_detectors [--reps 100] [--null-reps 200] [--sizes 50 100 250 500 1000]
        [--settings ...] [--json P]

A reference of ``--reference`` (1,000) admissions and cohorts of each size, per setting:

- ``null-gaussian``, ``null-counts``: cohort and reference from one distribution (Gaussian, 50 columns; token
  counts, 500 columns, Poisson with Gamma-distributed rates): the false-alarm rate at level 0.05;
- ``mean-sparse``: 3 of 50 Gaussian columns shifted by 0.3 sd;
- ``mean-dense``: all 50 shifted by 0.06 sd;
- ``scale``: all 50 with sd 1.2 (a change no linear classifier sees);
- ``tokens``: 500 token counts, 20% of the events of 10 frequent tokens recorded under 10 other tokens (a charting
  system's new item ids, as MIMIC's CareVue -> MetaVision).

Each test at level 0.05 (no multiplicity: one test per cohort). It prints the share of cohorts flagged per setting,
size and test, with its Monte Carlo standard error.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from pipeline.bayes.shift import domain_test, mmd_test
from pipeline.core import fileio

LEVEL = 0.05
SETTINGS = ("null-gaussian", "null-counts", "mean-sparse", "mean-dense", "scale", "tokens")
D_GAUSS, D_TOKENS = 50, 500


def draw(setting: str, n: int, shifted: bool, rng: np.random.Generator, rates: np.ndarray) -> np.ndarray:
    """``n`` rows of ``setting``, the shifted distribution when ``shifted``."""
    if setting in ("null-counts", "tokens"):
        lam = np.tile(rates, (n, 1))
        if shifted and setting == "tokens":
            moved = 0.2 * lam[:, :10]
            lam[:, :10] -= moved
            lam[:, 10:20] += moved
        return rng.poisson(lam).astype(np.float64)
    x = rng.normal(size=(n, D_GAUSS))
    if not shifted or setting == "null-gaussian":
        return x
    if setting == "mean-sparse":
        x[:, :3] += 0.3
    elif setting == "mean-dense":
        x += 0.06
    elif setting == "scale":
        x *= 1.2
    return x


def run(sizes: list[int], reps: int, null_reps: int, m: int, seed: int, settings=SETTINGS) -> dict:
    out: dict = {}
    rates = np.sort(np.random.default_rng(seed).gamma(0.5, 2.0, D_TOKENS))[::-1]  # frequent tokens first
    for setting in settings:
        r = null_reps if setting.startswith("null") else reps
        out[setting] = {}
        for n in sizes:
            rng = np.random.default_rng([seed, n, SETTINGS.index(setting)])
            hits = {"classifier": 0, "mmd": 0}
            secs = {"classifier": 0.0, "mmd": 0.0}
            for i in range(r):
                ref = draw(setting, m, False, rng, rates)
                coh = draw(setting, n, True, rng, rates)
                for name, test in (("classifier", domain_test), ("mmd", mmd_test)):
                    t0 = time.perf_counter()
                    p = test(ref, coh, seed=i).p_value
                    secs[name] += time.perf_counter() - t0
                    hits[name] += int(p <= LEVEL)
            out[setting][str(n)] = {k: {"rate": hits[k] / r, "se": float(np.sqrt(hits[k] / r * (1 - hits[k] / r) / r)),
                                        "reps": r, "mean_s": secs[k] / r} for k in hits}
            c, k = out[setting][str(n)]["classifier"], out[setting][str(n)]["mmd"]
            print(f"| {setting} | {n} | {c['rate']:.3f} ± {c['se']:.3f} | {k['rate']:.3f} ± {k['se']:.3f} | "
                  f"{1000 * c['mean_s']:.0f} / {1000 * k['mean_s']:.0f} |", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[50, 100, 250, 500, 1000], help="cohort sizes")
    ap.add_argument("--reps", type=int, default=100, help="cohorts per shifted setting and size")
    ap.add_argument("--null-reps", type=int, default=200, help="cohorts per null setting and size")
    ap.add_argument("--reference", type=int, default=1000, help="reference admissions")
    ap.add_argument("--seed", type=int, default=0, help="seed")
    ap.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=SETTINGS, help="settings run")
    ap.add_argument("--json", default=None, help="write the rates here")
    args = ap.parse_args()
    print(f"level {LEVEL}; reference {args.reference}; share of cohorts flagged ± its Monte Carlo se\n")
    print("| setting | cohort | domain classifier | MMD (permutation) | ms per test (classifier / MMD) |\n"
          "|---|---|---|---|---|")
    res = run(args.sizes, args.reps, args.null_reps, args.reference, args.seed, args.settings)
    if args.json:
        fileio.write_json(args.json, {"level": LEVEL, "reference": args.reference, "results": res})


if __name__ == "__main__":
    main()
