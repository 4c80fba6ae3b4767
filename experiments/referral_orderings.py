"""Does Bayesian uncertainty buy coverage? The refer rule's coverage per ordering measure and model kind
(issue 35, item 5; docs/experiments/2026-12-04-referral-orderings.md, its design and decision rule).

    export MIMIC_DEID_KEY=synthetic-data-only-not-a-secret MLFLOW_TRACKING_URI=sqlite:////ABS/runs/exp/mlflow.db
    python cli.py synth --out runs/w20k/mimic --patients 20000 --seed 0 --workers 2
    python cli.py benchmark-models --synth runs/w20k/mimic --patients 20000 --out runs/w20k/bench \\
        --models rank1-gaussian --models rank1-cauchy --models deterministic --models deep-ensemble \\
        --seeds 0 --seeds 1 --seeds 2 --splits random --splits era --jobs 2 \\
        --max-steps 12000 --eval-every 250 --set patience=8 --set max_epochs=40 --experiment referral-orderings
    python -m experiments.referral_orderings extras --bench runs/w20k/bench --seeds 0 1 2
    python -m experiments.referral_orderings table --bench runs/w20k/bench --cache runs/exp/pool-cache \\
        --json docs/experiments/2026-12-04-referral-orderings-both-splits.json

The grid's flags reproduce ``train``'s budget (at most 12,000 steps, early stopping with patience 8, at most
40 epochs). ``extras`` adds, per split mode and seed, the default Laplace on the deterministic run
(``cli.py laplace --run``; ``--laplace-map`` names another grid variant to fit it on) and ``gbm``
(``cli.py train --model gbm --seed S`` on the grid's features), each a child process, their run ids recorded
in ``BENCH/referral-extra-runs.json`` (beside the grid's ``runs.json``).

``table`` takes every run's test split (``referral_guarantee.pool_of_run``: predicted at the run's
``score_samples`` with seed 0, its calibrated risk, decision threshold and every ordering's measure from its
own ``Policy``, the true risk joined) and, per split mode:

- ``--partitions`` (R) seeded random partitions of the test admissions into a calibration half and an
  evaluation half, the same for every run and ordering of the split; on each the refer rule
  (``fit_refer_rule``: LTT, the miss rate, each alpha of ``--alphas``, delta 0.1) is fitted on the calibration
  half, its candidate cuts from the whole test split's measures (label-free, fixed across partitions); the
  evaluation half gives the coverage (1 - referral rate; 0 when the rule refers everyone), the share kept and
  below the decision threshold (context, not in the rule: a kept admission flagged high-risk never adds to the
  miss rate, so an ordering that keeps the flagged ones gains coverage without keeping more unflagged ones) and
  the true kept miss rate (``check.true_kept_risk``, from the true risk);
- on the whole test split: AUGRC with the Brier loss and with the 0/1 loss at the run's decision threshold
  (``metrics.augrc``), and the referral gain against the truth (``metrics.referral_gain`` of the measure against
  KL(true || calibrated risk));
- paired differences, each ordering minus ``risk``, per (split, kind) and pooled as the decision rule reads
  them, with a two-level percentile bootstrap (seeds resampled within each (split, kind); partitions
  resampled and shared by every run and ordering of a split).

For a point model (no admission's risk moves under its posterior: deterministic, gbm) the posterior orderings
(mi, sd, band, decision) are 0 everywhere and are reported as n/a. It then applies the report's decision rule
(``decide``) and prints what it says.

Every partition of a split calibrates on half of the same one realization of the test outcomes, so the table's
share above alpha is not a check of the level (an unlucky realization moves every partition the same way).
``redraw`` checks one run's orderings against both references:

    python -m experiments.referral_orderings redraw --bench runs/w20k/bench --kind gbm --mode random --seed 0 \
        --cache runs/exp/pool-cache

the whole split's kept miss rate at each partition's cut from the realized outcomes and from the true risk, and
``check.check_guarantee`` on the run's pool (calibration sets of half the split with outcomes drawn afresh from the
true risk, 200 times): the share of draws above alpha, which the guarantee bounds by delta, evaluated on the rest of
the split (as the table's halves) and, the exact i.i.d. setting, with the calibration set drawn with replacement
and the risk over the whole split.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

from experiments.referral_guarantee import Pool, pool_of_run
from pipeline.bayes import metrics
from pipeline.bayes.referral import ReferSettings, Risk
from pipeline.bayes.referral.check import REPEATS, check_guarantee, true_kept_risk
from pipeline.bayes.referral.options import Ordering
from pipeline.bayes.referral.rule import Reference, fit_refer_rule
from pipeline.core import fileio

ORDERINGS = tuple(o.value for o in Ordering)  # risk, entropy, mi, sd, band, decision, va_decision, va_width
POSTERIOR_ONLY = ("mi", "sd", "band", "decision")  # 0 for every admission of a point model
POSTERIOR_KINDS = ("rank1-gaussian", "rank1-cauchy", "deep-ensemble", "laplace")  # the decision rule's step 1
POINT_KINDS = ("deterministic", "gbm")  # its step 2
KINDS = ("rank1-gaussian", "rank1-cauchy", "deep-ensemble", "laplace", "deterministic", "gbm")  # table order
DEFAULTS = {"posterior": "decision", "point": "va_decision"}  # ``ordering auto`` when the rule was written
POINT_ORDERINGS = ("risk", "entropy", "va_decision", "va_width")  # what a point model can rank by
ALPHAS = (0.05, 0.10)
DELTA = 0.1
MARGIN = 0.01  # the rule's non-inferiority margin: 1 percentage point of coverage
EXTRA_FILE = "referral-extra-runs.json"  # BENCH/...: the Laplace and gbm runs ``extras`` trained
ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------- the runs


def _child(argv: list[str]) -> str:
    """Run ``cli.py ARGV`` (nice 10, one torch thread) and return the run id it prints."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = ["nice", "-n", "10", sys.executable, str(ROOT / "cli.py"), *argv]
    print("$ " + " ".join(cmd[3:]), flush=True)
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    found = re.findall(r"run_id: ([0-9a-f]{32})", done.stdout)
    if not found:
        raise SystemExit(f"{' '.join(argv)} printed no run_id:\n{done.stdout[-2000:]}")
    return found[-1]


def extras(bench: Path, seeds: list[int], modes: list[str], threads: int, laplace_map: str = "deterministic") -> None:
    """Laplace on each ``laplace_map`` grid run (a variant's name) and gbm per split and seed, recorded in
    ``EXTRA_FILE`` under those names (already recorded ones are skipped)."""
    path = bench / EXTRA_FILE
    done = fileio.read_json(path) if path.exists() else []
    have = {(r["variant"], r["split_mode"], r["seed"]) for r in done}
    grid = fileio.read_json(bench / "runs.json")
    maps = {(r["split_mode"], r["seed"]): r["run_id"] for r in grid if r["variant"] == laplace_map}
    for mode in modes:
        for seed in seeds:
            argvs = {  # each extra row's command (None: no MAP run to fit Laplace on)
                "laplace": ["laplace", "--run", maps[(mode, seed)]] if (mode, seed) in maps else None,
                "gbm": ["train", "--data", str(bench / f"features-{mode}"), "--model", "gbm", "--seed", str(seed),
                        "--threads", str(threads), "--no-progress"]}
            jobs = [(variant, argv) for variant, argv in argvs.items()
                    if argv is not None and (variant, mode, seed) not in have]
            for variant, argv in jobs:
                run_id = _child(argv)
                done.append({"run_id": run_id, "variant": variant, "split_mode": mode, "seed": seed})
                fileio.write_json(path, done)
                print(f"{variant} {mode} seed {seed}: {run_id}", flush=True)


def runs_of(bench: Path) -> list[dict]:
    """The grid's runs and the extras, the latest run of each (variant, split mode, seed)."""
    rows = fileio.read_json(bench / "runs.json")
    if (bench / EXTRA_FILE).exists():
        rows += fileio.read_json(bench / EXTRA_FILE)
    latest = {(r["variant"], r["split_mode"], int(r["seed"])): r for r in rows}
    return list(latest.values())


# ---------------------------------------------------------------------------- one run's numbers


def partitions(n: int, r: int, seed: int) -> np.ndarray:
    """(R, N) bool: the calibration half of each of ``r`` seeded random partitions of ``n`` admissions."""
    rng = np.random.default_rng(seed)
    out = np.zeros((r, n), dtype=bool)
    for i in range(r):
        out[i, rng.permutation(n)[: n // 2]] = True
    return out


def available(pool: Pool) -> list[str]:
    """The orderings this run can rank by (a point model: none of the posterior's; no Venn-Abers: none of its)."""
    return [o for o in ORDERINGS if o in pool.measures and (pool.spread or o not in POSTERIOR_ONLY)]


def coverage(pool: Pool, parts: np.ndarray, alphas=ALPHAS, delta: float = DELTA) -> dict:
    """ordering -> alpha -> {"coverage", "kept_low", "true_miss", "refer_all"}: (R,) per partition (module docstring;
    ``kept_low``: the share of the evaluation half kept and below the decision threshold, the admissions whose deaths
    the promise is about: a kept flagged admission never adds to the miss rate)."""
    out = {}
    y, q, r, t = pool.labels, pool.true_risk, pool.risk, pool.threshold
    for o in available(pool):
        u = pool.measures[o]
        ref = Reference(u, r)
        out[o] = {}
        for a in alphas:
            s = ReferSettings(alpha=a, delta=delta)
            cov, low, miss = np.empty(len(parts)), np.empty(len(parts)), np.empty(len(parts))
            refer_all = np.zeros(len(parts), dtype=bool)
            for i, cal in enumerate(parts):
                rule = fit_refer_rule(u[cal], r[cal], y[cal], t, s, o, reference=ref, strict=False)
                ev = ~cal
                referred = rule.refer(u[ev])
                cov[i] = 1.0 - referred.mean()
                low[i] = float((~referred & (r[ev] < t)).mean())
                miss[i] = true_kept_risk(q[ev], r[ev], ~referred, t, Risk.MISS)
                refer_all[i] = bool(referred.all())
            out[o][f"{a:g}"] = {"coverage": cov, "kept_low": low, "true_miss": miss, "refer_all": refer_all}
    return out


def whole_split(pool: Pool) -> dict:
    """ordering -> AUGRC (Brier, 0/1) and referral gain against the truth, on the whole test split."""
    y, r = pool.labels, pool.risk
    brier = metrics.selective_loss(y, r, metrics.SelectiveLoss.BRIER)
    zero_one = metrics.selective_loss(y, r, metrics.SelectiveLoss.ZERO_ONE, threshold=pool.threshold)
    error = metrics.kl_to_truth(pool.true_risk, r)
    return {o: {"augrc_brier": metrics.augrc(brier, pool.measures[o]),
                "augrc_zero_one": metrics.augrc(zero_one, pool.measures[o]),
                "referral_gain": metrics.referral_gain(error, pool.measures[o])} for o in available(pool)}


def redraw(pool: Pool, orderings: list[str], parts: np.ndarray, alphas=ALPHAS, delta: float = DELTA,
           repeats: int = REPEATS, seed: int = 0) -> dict:
    """ordering -> alpha -> the table's promise against two references: ``realized`` / ``true``, the whole test
    split's kept miss rate from its one realization of outcomes and from the true risk, at each partition's cut
    (means over the partitions: the table calibrates every partition on halves of that one realization); and
    ``check_guarantee`` on the pool with calibration sets of half the split and outcomes drawn afresh from the true
    risk, ``repeats`` times, evaluated both ways (its module docstring): ``redrawn`` on the rest of the split (the
    table's halves), ``iid`` drawn with replacement and evaluated over the whole split; each the share above alpha,
    its standard error, the mean kept miss rate and referral."""
    y, q, r, t = pool.labels, pool.true_risk, pool.risk, pool.threshold
    out: dict = {}
    for o in orderings:
        u = pool.measures[o]
        ref = Reference(u, r)
        out[o] = {}
        for a in alphas:
            s = ReferSettings(alpha=a, delta=delta)
            realized, true = [], []
            for cal in parts:
                kept = ~fit_refer_rule(u[cal], r[cal], y[cal], t, s, o, reference=ref, strict=False).refer(u)
                realized.append(true_kept_risk(y, r, kept, t, Risk.MISS))  # the outcomes as the "true risk"
                true.append(true_kept_risk(q, r, kept, t, Risk.MISS))
            out[o][f"{a:g}"] = {"realized": float(np.mean(realized)), "true": float(np.mean(true))}
            for name, evaluate in (("redrawn", "rest"), ("iid", "pool")):
                g = check_guarantee(q, r, u, t, len(q) // 2, s, repeats=repeats, seed=seed, evaluate=evaluate).overall
                out[o][f"{a:g}"][name] = {"above": g.above, "se": g.se, "mean_risk": g.mean_risk,
                                          "referral": g.mean_referral, "refer_all": g.refer_all,
                                          "repeats": g.n_repeats}
    return out


# ---------------------------------------------------------------------------- paired differences


def bootstrap_mean(groups: list[tuple[str, np.ndarray]], n_boot: int, seed: int) -> np.ndarray:
    """(B,) replicates of the mean over ``groups`` of each group's mean (S, R) difference: per replicate the
    partitions are resampled once per split (shared by the split's groups), the seeds within each group."""
    rng = np.random.default_rng(seed)
    splits = sorted({s for s, _ in groups})
    r = groups[0][1].shape[1]
    out = np.empty(n_boot)
    for b in range(n_boot):
        idx = {s: rng.integers(0, r, r) for s in splits}
        means = []
        for s, d in groups:
            per_seed = d[:, idx[s]].mean(axis=1)
            means.append(per_seed[rng.integers(0, d.shape[0], d.shape[0])].mean())
        out[b] = float(np.mean(means))
    return out


def paired(cov: dict, ordering: str, alpha: str, cells: list[tuple[str, str]], n_boot: int, seed: int) -> dict | None:
    """The mean coverage difference ``ordering`` - risk over ``cells`` ((split, kind) pairs that have both) and
    its 95% interval; None when no cell has the ordering."""
    groups = []
    for split, kind in cells:
        seeds = cov.get(split, {}).get(kind, {})
        ds = [np.asarray(c[ordering][alpha]["coverage"]) - np.asarray(c["risk"][alpha]["coverage"])
              for c in seeds.values() if ordering in c]
        if ds:
            groups.append((split, np.stack(ds)))
    if not groups:
        return None
    mean = float(np.mean([d.mean() for _, d in groups]))
    lo, hi = np.percentile(bootstrap_mean(groups, n_boot, seed), [2.5, 97.5])
    return {"diff": mean, "ci": [float(lo), float(hi)], "cells": len(groups),
            "pairs": int(sum(d.size for _, d in groups))}


def decide(cov: dict, n_boot: int, seed: int) -> dict:
    """The report's decision rule (its steps 1 and 2) on the coverage of every (split, kind, seed)."""
    out = {}
    for family, kinds, candidates in (("posterior", POSTERIOR_KINDS, ORDERINGS), ("point", POINT_KINDS,
                                                                                 POINT_ORDERINGS)):
        cells = [(s, k) for s in cov for k in kinds if k in cov[s]]
        diffs = {o: {a: paired(cov, o, a, cells, n_boot, seed) for a in (f"{x:g}" for x in ALPHAS)}
                 for o in candidates if o != "risk"}
        ok = {o: all(v is not None and v["ci"][0] > -MARGIN for v in d.values()) for o, d in diffs.items()}
        current = DEFAULTS[family]
        eligible = ["risk"] + [o for o in diffs if ok[o]]

        def key(o: str) -> tuple[float, float]:
            return (0.0, 0.0) if o == "risk" else (diffs[o]["0.1"]["diff"], diffs[o]["0.05"]["diff"])

        best = max(eligible, key=key)
        out[family] = {"cells": cells, "current": current, "keep": bool(ok.get(current)), "diffs": diffs,
                       "eligible": eligible, "best": best, "default": current if ok.get(current) else best}
    return out


# ---------------------------------------------------------------------------- tables


def _fmt(v, spec: str = "+.3f") -> str:
    return "n/a" if v is None or (isinstance(v, float) and not np.isfinite(v)) else format(v, spec)


def _pp(d: dict | None) -> str:
    """A difference and its interval in percentage points."""
    return "n/a" if d is None else f"{100 * d['diff']:+.2f} [{100 * d['ci'][0]:+.2f}, {100 * d['ci'][1]:+.2f}]"


def print_tables(result: dict) -> None:
    for split, kinds in result["splits"].items():
        info = result["pools"][split]
        print(f"\n### {split} split: test {info['admissions']:,} admissions, {info['deaths']:,} deaths; "
              f"{result['partitions']} partitions into {info['admissions'] // 2:,} calibration / "
              f"{info['admissions'] - info['admissions'] // 2:,} evaluation admissions\n")
        print("Mean coverage on the evaluation half (LTT, miss rate, delta 0.1; over seeds x partitions), the share "
              "kept and below the decision threshold, the mean true kept miss rate, and the share of (seed, partition) "
              "whose true kept miss rate exceeds alpha:\n")
        head = ["kind", "seeds", "ordering"] + [f"{h} a={a}" for a in ("0.05", "0.1")
                                                for h in ("coverage", "kept unflagged", "true miss", "> alpha")]
        head += ["AUGRC brier", "AUGRC 0/1", "referral gain"]
        print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
        for kind in [k for k in KINDS if k in kinds] + [k for k in kinds if k not in KINDS]:
            rec = kinds[kind]
            for o in ORDERINGS:
                row = rec["orderings"].get(o)
                if row is None:
                    print(f"| {kind} | {rec['n_seeds']} | {o} | " + " | ".join(["n/a"] * (len(head) - 3)) + " |")
                    continue
                cells = []
                for a in ("0.05", "0.1"):
                    c = row["alpha"][a]
                    cells += [f"{c['coverage']:.3f}", f"{c['kept_low']:.3f}", f"{c['true_miss']:.4f}",
                              f"{c['above']:.3f}"]
                cells += [f"{row['augrc_brier']:.5f}", f"{row['augrc_zero_one']:.5f}", _fmt(row["referral_gain"])]
                print(f"| {kind} | {rec['n_seeds']} | {o} | " + " | ".join(cells) + " |")
        print("\nPaired coverage difference, ordering - risk [95% CI], percentage points:\n")
        head = ["kind"] + [f"{o} a={a}" for o in ORDERINGS if o != "risk" for a in ("0.05", "0.1")]
        print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
        for kind in [k for k in KINDS if k in kinds]:
            cells = []
            for o in ORDERINGS:
                if o == "risk":
                    continue
                for a in ("0.05", "0.1"):
                    d = kinds[kind]["paired"].get(o, {}).get(a)
                    cells.append(_pp(d))
            print(f"| {kind} | " + " | ".join(cells) + " |")
    print("\n### The decision rule (pooled over splits and kinds; coverage difference against risk, pp)\n")
    for family, d in result["decision"].items():
        print(f"{family} models ({', '.join(sorted({k for _, k in d['cells']}))}), current default {d['current']}:")
        for o, by_a in d["diffs"].items():
            shown = ", ".join(f"a={a}: {_pp(v)}" for a, v in by_a.items())
            print(f"  {o}: {shown}")
        verdict = "keep" if d["keep"] else f"switch to {d['default']}"
        print(f"  -> {verdict} (eligible: {', '.join(d['eligible'])}; best by coverage at 10%: {d['best']})")


# ---------------------------------------------------------------------------- main


def table(args) -> None:
    runs = runs_of(args.bench)
    modes = args.modes or sorted({r["split_mode"] for r in runs})
    result: dict = {"bench": str(args.bench), "partitions": args.partitions, "alphas": list(ALPHAS), "delta": DELTA,
                    "reference": "the whole test split's measures (label-free)", "bootstrap": args.bootstrap,
                    "runs": [], "pools": {}, "splits": {}, "coverage_by_seed": {}}
    cov: dict = {}
    for mode in modes:
        parts, keys = None, None
        per_kind: dict = {}
        for run in sorted((r for r in runs if r["split_mode"] == mode), key=lambda r: (r["variant"], r["seed"])):
            pool = pool_of_run(run["run_id"], args.cache)
            if keys is None:
                keys, parts = pool.keys, partitions(len(pool.keys), args.partitions, args.seed)
                result["pools"][mode] = {"admissions": len(keys), "deaths": int(pool.labels.sum()),
                                         "true_risk_sum": float(pool.true_risk.sum())}
            elif not np.array_equal(keys, pool.keys):
                raise SystemExit(f"run {run['run_id']}: its test split holds other admissions than the split's first")
            c = coverage(pool, parts)
            cov.setdefault(mode, {}).setdefault(run["variant"], {})[int(run["seed"])] = c
            per_kind.setdefault(run["variant"], []).append((run, pool, c, whole_split(pool)))
            result["runs"].append({**run, "threshold": pool.threshold, "ordering": pool.ordering,
                                   "spread": pool.spread, "n_calibration": pool.n_calibration,
                                   "calibration": pool.policy.get("calibration", {}).get("method")})
            print(f"{mode} {run['variant']} seed {run['seed']}: done", flush=True)
        kinds = {}
        for kind, items in per_kind.items():
            orderings = {}
            for o in ORDERINGS:
                have = [(c[o], w[o]) for _, _, c, w in items if o in c]
                if len(have) < len(items):
                    continue
                alpha = {}
                for a in (f"{x:g}" for x in ALPHAS):
                    cv = np.stack([h[0][a]["coverage"] for h in have])
                    tm = np.stack([h[0][a]["true_miss"] for h in have])
                    alpha[a] = {"coverage": float(cv.mean()), "true_miss": float(tm.mean()),
                                "kept_low": float(np.mean([h[0][a]["kept_low"] for h in have])),
                                "above": float((tm > float(a)).mean()),
                                "refer_all": float(np.mean([h[0][a]["refer_all"].mean() for h in have]))}
                orderings[o] = {"alpha": alpha, **{k: float(np.nanmean([h[1][k] for h in have]))
                                                   for k in ("augrc_brier", "augrc_zero_one", "referral_gain")}}
            diffs = {o: {a: paired(cov, o, a, [(mode, kind)], args.bootstrap, args.seed) for a in ("0.05", "0.1")}
                     for o in orderings if o != "risk"}
            kinds[kind] = {"n_seeds": len(items), "seeds": sorted(int(r["seed"]) for r, _, _, _ in items),
                           "orderings": orderings, "paired": diffs}
        result["splits"][mode] = kinds
    result["decision"] = decide(cov, args.bootstrap, args.seed)
    result["coverage_by_seed"] = {  # per run: the mean over the partitions
        m: {k: {str(sd): {o: {a: {"coverage": float(np.mean(x["coverage"])),
                                  "kept_low": float(np.mean(x["kept_low"])),
                                  "true_miss": float(np.mean(x["true_miss"]))} for a, x in byo.items()}
                          for o, byo in c.items()} for sd, c in seeds.items()} for k, seeds in kinds.items()}
        for m, kinds in cov.items()}
    print_tables(result)
    if args.json:
        fileio.write_json(args.json, result)
        print(f"\njson: {args.json}")


def redraw_command(args) -> None:
    run = next((r for r in runs_of(args.bench) if (r["variant"], r["split_mode"], int(r["seed"])) ==
                (args.kind, args.mode, args.seed)), None)
    if run is None:
        raise SystemExit(f"{args.bench}: no {args.kind} run of the {args.mode} split with seed {args.seed}")
    pool = pool_of_run(run["run_id"], args.cache)
    orderings = args.orderings or available(pool)
    unknown = sorted(set(orderings) - set(available(pool)))
    if unknown:
        raise SystemExit(f"--orderings: {', '.join(unknown)} not available to this run ({', '.join(available(pool))})")
    res = redraw(pool, orderings, partitions(len(pool.keys), args.partitions, args.seed), repeats=args.repeats,
                 seed=args.seed)
    print(f"{args.kind} {args.mode} seed {args.seed} ({run['run_id']}): test {len(pool.keys):,} admissions, "
          f"{int(pool.labels.sum()):,} deaths, true risk sum {pool.true_risk.sum():.1f}\n")
    print("| ordering | alpha | whole split's kept miss rate, realized | from the true risk | redrawn, the rest: "
          "share > alpha | mean kept miss rate | referred | refers all | i.i.d., the whole split: share > alpha "
          "| mean kept miss rate | referred |\n|" + "---|" * 11)
    for o, by_a in res.items():
        for a, v in by_a.items():
            g, i = v["redrawn"], v["iid"]
            print(f"| {o} | {a} | {v['realized']:.4f} | {v['true']:.4f} | {g['above']:.3f} +- {g['se']:.3f} "
                  f"| {g['mean_risk']:.4f} | {g['referral']:.3f} | {g['refer_all']}/{g['repeats']} "
                  f"| {i['above']:.3f} +- {i['se']:.3f} | {i['mean_risk']:.4f} | {i['referral']:.3f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    ex = sub.add_parser("extras", help="train the Laplace and gbm runs of the grid's splits and seeds")
    ex.add_argument("--bench", type=Path, required=True, help="benchmark-models --out directory")
    ex.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds")
    ex.add_argument("--modes", nargs="+", default=["random", "era"], help="split modes")
    ex.add_argument("--threads", type=int, default=1, help="gbm's threads")
    ex.add_argument("--laplace-map", default="deterministic", help="the grid variant whose runs Laplace is fitted on")
    tb = sub.add_parser("table", help="the coverage tables, paired differences and the decision rule")
    tb.add_argument("--bench", type=Path, required=True, help="benchmark-models --out directory")
    tb.add_argument("--modes", nargs="+", default=None, help="split modes (default: every one the runs have)")
    tb.add_argument("--partitions", type=int, default=50, help="calibration/evaluation partitions of test (R)")
    tb.add_argument("--bootstrap", type=int, default=2000, help="bootstrap replicates of the paired intervals")
    tb.add_argument("--seed", type=int, default=0, help="seed of the partitions and the bootstrap")
    tb.add_argument("--cache", type=Path, default=None, help="cache of the runs' test pools (.npz)")
    tb.add_argument("--json", type=Path, default=None, help="write the results here")
    rd = sub.add_parser("redraw", help="one kind's orderings with the outcomes redrawn from the true risk")
    rd.add_argument("--bench", type=Path, required=True, help="benchmark-models --out directory")
    rd.add_argument("--kind", required=True, help="the model kind (a grid variant, laplace or gbm)")
    rd.add_argument("--mode", default="random", help="split mode")
    rd.add_argument("--seed", type=int, default=0, help="the run's seed (and the partitions' and draws' seed)")
    rd.add_argument("--orderings", nargs="+", default=None, help="orderings (default: every one the run has)")
    rd.add_argument("--partitions", type=int, default=50, help="the table's partitions (R)")
    rd.add_argument("--repeats", type=int, default=REPEATS, help="draws of the calibration set")
    rd.add_argument("--cache", type=Path, default=None, help="cache of the runs' test pools (.npz)")
    args = ap.parse_args()
    if args.command == "extras":
        extras(args.bench, args.seeds, args.modes, args.threads, args.laplace_map)
    elif args.command == "redraw":
        redraw_command(args)
    else:
        table(args)


if __name__ == "__main__":
    main()
