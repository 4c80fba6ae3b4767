"""The promise across eras (issue 43, item 4; docs/experiments/2026-12-06-promise-across-eras.md holds the design and
the decision rule, written before any result): the shift detectors, re-certification and the outcome monitor on the
era split and the random split of a 20,000-patient synthetic world.

    export MIMIC_DEID_KEY=synthetic-data-only-not-a-secret MLFLOW_TRACKING_URI=sqlite:////ABS/runs/exp/mlflow.db
    # the runs: the grid of experiments.referral_orderings (rank1-gaussian, deterministic, deep-ensemble; seeds 0-2;
    # --splits random --splits era) and its extras (the default Laplace on each deterministic run)
    python -m experiments.promise_across_eras run --bench runs/w20k/bench --cache runs/exp/era-cache \\
        --json docs/experiments/2026-12-06-promise-across-eras.json

Per run (``era_pool_of_run``, cached as .npz beside ``referral_guarantee.pool_of_run``'s test pool, which it reuses):
the test split as the refer rule sees it (``Pool``: outcomes, true risk, calibrated risk, every ordering's measure,
the decision threshold), its raw risk, the run's ``Policy`` (its calibration half's measures and outcomes kept in it),
the validation split's feature matrix (``tasks.mortality.shift.feature_matrix``, the one ``score``'s shift check uses)
with its calibration mask and true risk, and the test split's matrix. On the era split the test split is the new
(MetaVision) era; on the random split it is the same era as the calibration half.

(a) ``detectors``: ``--draws`` cohorts of each ``--sizes`` drawn from the test split without replacement; each
detector's p-value against the run's calibration half (``shift.u_test`` per measure, ``shift.mmd_test`` and
``shift.domain_test`` on the features against the calibration half's matrix); a detector flags a cohort when its
p-value (the combined ones: Holm over their measures, ``shift.holm``) is at most ``--level``.

(b) ``promise``: the kept miss rate from the truth (``check.true_kept_risk``: sum q [kept, unflagged] / sum q over
the evaluation admissions) and the share kept and unflagged, for: the run's rule as it is (on the whole test split);
``recertify`` (the run's flags kept; and ``--refit-threshold`` variant) with k of ``--labelled`` test admissions as
the new labelled set, outcomes drawn from the true risk, the cuts from the rest of the test split (label-free),
evaluated on the rest, ``--draws`` times; and the importance-weighted rule (``referral.weighted``) on the run's
calibration half, its weights from a domain classifier fitted on the selection half's features against the test
split's, the calibration outcomes redrawn from their true risk ``--draws`` times, evaluated on the whole test split.
The oracle: the model's own ranking cut on the test split at the largest kept share whose true miss rate is at most
alpha (``oracle_kept``). The exact test's floor (``floor_of``, added after the interim look, outside the decision
rule): what a rule certified on k labelled admissions keeps in expectation, computed from the truth without drawing
(``referral.power``), and the labelled set whose rule comes within the margin of the oracle.

(c) ``monitor``: ``--streams`` streams of the test split in random order, outcomes drawn from the true risk, kept and
flagged by the ranking cut whose true miss rate is alpha (the worst stream that keeps the promise: false alarms) and
by the cut whose true miss rate is 2 alpha (a broken promise: the alarm's delay in admissions and deaths).

It prints per split, kind and setting the pooled shares with their Monte Carlo errors, and applies the decision rule
(``decide``).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import sparse

from experiments.referral_guarantee import Pool, pool_of_run
from experiments.referral_orderings import runs_of
from pipeline.bayes import monitor, shift
from pipeline.bayes.referral import Policy, Predictive, Risk, fit_weighted_refer_rule, power, recertify
from pipeline.bayes.referral.check import true_kept_risk
from pipeline.bayes.referral.rule import Reference
from pipeline.core import fileio
from pipeline.core.contracts import DEFAULT_BATCH
from pipeline.core.errors import PipelineError

SIZES = (50, 100, 250, 500, 1000)  # cohort sizes of (a)
LABELLED = (100, 250, 500, 1000, 2000)  # new labelled admissions of (b)
DRAWS = 200  # cohorts (a), labelled sets and redraws (b)
STREAMS = 200  # streams of (c)
LEVEL = 0.05  # the shift check's level
MEASURES = ("risk", "mi", "sd", "decision")  # the model outputs the check compares
KINDS = ("rank1-gaussian", "deterministic", "deep-ensemble", "laplace")
POWER_SIZES = ("250", "500")  # the decision rule's power sizes
MARGIN = 0.05  # re-certification: within 5 points of the oracle's kept-unflagged share
DETECTORS = {  # name -> the p-values it combines (Holm)
    "check (outputs + features by MMD)": (*MEASURES, "mmd"),
    "check (outputs + features by classifier)": (*MEASURES, "classifier"),
    "outputs only": MEASURES, "features by MMD": ("mmd",), "features by classifier": ("classifier",),
    **{f"{m} alone": (m,) for m in MEASURES}}
DEFAULT_DETECTOR = "check (outputs + features by MMD)"  # check_shift's default before the study


@dataclass
class EraPool:
    """One run's test split and calibration half, as the study reads them."""

    pool: Pool  # the test split (``referral_guarantee``): outcomes, true risk, calibrated risk, measures, threshold
    raw: np.ndarray  # (M,) the test split's raw predictive risk
    policy: Policy  # the run's policy (its calibration half's arrays in ``kept``)
    val_features: sparse.csr_matrix  # (V, d) the validation split's feature matrix
    calibration: np.ndarray  # (V,) bool: the calibration half of validation
    val_true_risk: np.ndarray  # (V,) the validation admissions' true risk
    features: sparse.csr_matrix  # (M, d) the test split's feature matrix

    @property
    def reference(self) -> dict[str, np.ndarray]:
        """The calibration half's measures (the shift check's reference)."""
        return {k: np.asarray(v) for k, v in self.policy.kept["calibration"]["measures"].items() if k in MEASURES}


def _save_csr(prefix: str, x) -> dict:
    x = sparse.csr_matrix(x)
    return {f"{prefix}_data": x.data, f"{prefix}_indices": x.indices, f"{prefix}_indptr": x.indptr,
            f"{prefix}_shape": np.asarray(x.shape)}


def _load_csr(z, prefix: str) -> sparse.csr_matrix:
    return sparse.csr_matrix((z[f"{prefix}_data"], z[f"{prefix}_indices"], z[f"{prefix}_indptr"]),
                             shape=tuple(z[f"{prefix}_shape"]))


def era_pool_of_run(run_id: str, cache: Path | None = None) -> EraPool:
    """The run's ``EraPool`` (module docstring), cached under ``cache`` by run id."""
    pool = pool_of_run(run_id, cache)
    path = None if cache is None else Path(cache) / f"{run_id}-era.npz"
    if path is not None and path.exists():
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in ("raw", "calibration", "val_true_risk")}
            val_x, test_x = _load_csr(z, "val"), _load_csr(z, "test")
        policy = Policy.from_dict(fileio.read_json(path.with_suffix(".json")))
        return EraPool(pool, arrays["raw"], policy, val_x, arrays["calibration"].astype(bool), arrays["val_true_risk"],
                       test_x)
    era = _predict_era(run_id, pool)
    if path is not None:
        with fileio.atomic_path(path) as tmp, open(tmp, "wb") as fh:
            np.savez_compressed(fh, raw=era.raw, calibration=era.calibration, val_true_risk=era.val_true_risk,
                                **_save_csr("val", era.val_features), **_save_csr("test", era.features))
        fileio.write_json(path.with_suffix(".json"), era.policy.to_dict())
    return era


def _predict_era(run_id: str, pool: Pool) -> EraPool:
    from pipeline.data import features
    from pipeline.engine import predict as engine_predict
    from pipeline.runs.load import load_run
    from pipeline.tasks.mortality import predict, risk
    from pipeline.tasks.mortality.shift import feature_matrix
    from pipeline.tasks.mortality.truth import features_true_risk

    with tempfile.TemporaryDirectory(prefix="era-") as tmp:
        run = load_run(run_id, tmp)
    policy = risk.policy_of(run.info)
    fdir = Path(run.features_dir or "")
    test = features.load_split(fdir / "test.parquet", values=True)
    val = features.load_split(fdir / "val.parquet", values=True)
    if not np.array_equal(np.asarray(test.keys).astype(str), pool.keys):
        raise SystemExit(f"run {run_id}: the cached test pool holds other admissions than {fdir}/test.parquet")
    raw = pool.raw
    if raw is None:  # a pool cached before it kept the raw risk: predicted again, with the same draws
        pred = predict.feature_predictions(run.model, test, engine_predict.score_samples(None, run.info),
                                           DEFAULT_BATCH, run.info.max_bags, run.info.max_tokens,
                                           engine_predict.seeded_generator(0))
        raw = np.asarray(pred.summary.mean, dtype=np.float64)
    if not np.allclose(policy.calibrator.apply(raw), pool.risk):  # the same draws as pool_of_run's
        raise SystemExit(f"run {run_id}: the test split's risks differ from the cached pool's")
    share = float(run.train_config.get("calibration_share") or 0.0)
    mask = features.calibration_mask(val.keys, share)
    if int(mask.sum()) != len(policy.kept["calibration"]["labels"]):
        raise SystemExit(f"run {run_id}: calibration_share {share} gives {int(mask.sum())} validation admissions, the "
                         f"policy kept {len(policy.kept['calibration']['labels'])}")
    widths = len(run.vocab["tokens"]), len(run.vocab["context"])  # the matrix score's shift check ships
    q_val = features_true_risk(fdir, val)
    return EraPool(pool, raw, policy,
                   feature_matrix(val, *widths), mask, np.asarray(q_val), feature_matrix(test, *widths))


# ---------------------------------------------------------------------------- (a) the detectors


def detector_p_values(ep: EraPool, cohort: np.ndarray, seed: int) -> dict[str, float]:
    """Every single test's p-value of the test-split admissions ``cohort`` against the calibration half."""
    ref = ep.reference
    out = {m: shift.u_test(ep.pool.measures[m][cohort], ref[m], m).p_value for m in MEASURES
           if m in ref and np.ptp(ref[m]) > 0}
    cal_x = ep.val_features[ep.calibration]
    out["mmd"] = shift.mmd_test(cal_x, ep.features[cohort], seed=seed).p_value
    out["classifier"] = shift.domain_test(cal_x, ep.features[cohort], seed=seed).p_value
    return out


def flags(p: dict[str, float], level: float = LEVEL) -> dict[str, bool]:
    """Which detectors flag a cohort of p-values ``p`` (a detector's measures the run lacks are left out)."""
    out = {}
    for name, parts in DETECTORS.items():
        have = [p[k] for k in parts if k in p]
        if have:
            out[name] = bool(shift.holm(np.array(have)).min() <= level)
    return out


def detectors(ep: EraPool, sizes=SIZES, draws: int = DRAWS, seed: int = 0, level: float = LEVEL) -> dict:
    """size -> detector -> share of cohorts flagged."""
    rng = np.random.default_rng(seed)
    m = len(ep.pool.labels)
    out = {}
    for n in sizes:
        hits: dict[str, int] = {}
        for i in range(draws):
            f = flags(detector_p_values(ep, rng.choice(m, size=min(n, m), replace=False), seed + i), level)
            for k, v in f.items():
                hits[k] = hits.get(k, 0) + int(v)
        out[str(n)] = {k: v / draws for k, v in hits.items()}
    return out


# ---------------------------------------------------------------------------- (b) the promise


def oracle_kept(q: np.ndarray, r: np.ndarray, threshold: float, alpha: float) -> float:
    """The largest share kept and unflagged by the model's own ranking (lowest risk first) whose true miss rate is at
    most alpha: the best any cut of this ranking can do on this population (``referral.power.oracle_share``)."""
    return power.oracle_share(q, r, threshold, alpha)


def floor_of(ep: EraPool, labelled=LABELLED, margin: float = MARGIN) -> dict:
    """The exact test's floor on the new era (``referral.power``, from the truth, no draw): the kept-unflagged share
    a rule with the run's flags, certified on k labelled admissions, keeps in expectation, and the labelled set that
    comes within ``margin`` of the oracle. Derived from the run's arrays in seconds, so never cached."""
    pol, q = ep.policy, ep.pool.true_risk
    alpha, delta = pol.config.alpha, pol.config.delta
    t = min(pol.calibrator.raw_threshold(pol.threshold.threshold), 2.0)
    curve = power.MissCurve.of(q, ep.raw, t)
    return {"expected": {str(k): curve.expected(alpha, delta, k) for k in labelled},
            "needed": curve.needed(alpha, delta, margin), "mortality": curve.p_death}


def _outcome(q: np.ndarray, r_cal: np.ndarray, referred: np.ndarray, high: np.ndarray) -> tuple[float, float]:
    """(true kept miss rate, share kept and unflagged)."""
    kept = ~referred
    miss = float((q * (kept & ~high)).sum() / q.sum())
    return miss, float((kept & ~high).mean())


def promise(ep: EraPool, labelled=LABELLED, draws: int = DRAWS, seed: int = 0) -> dict:
    """setting -> {"miss": (R,), "kept": (R,), ...} (module docstring)."""
    pol, pool = ep.policy, ep.pool
    alpha = pol.config.alpha
    rng = np.random.default_rng(seed)
    q, m = pool.true_risk, len(pool.true_risk)
    cols = pol.apply(Predictive(ep.raw))
    miss, kept = _outcome(q, cols.risk_calibrated, cols.refer, cols.high_risk)
    t_raw = pol.calibrator.raw_threshold(pol.threshold.threshold)
    out = {"as_is": {"miss": [miss], "kept": [kept]},
           "oracle": oracle_kept(q, ep.raw, min(t_raw, 2.0), alpha), "alpha": alpha, "delta": pol.config.delta}
    for k in labelled:
        if k >= m:
            continue
        for refit in (False, True):
            rec = {"miss": [], "kept": [], "refer_all": 0, "refused": 0}
            for _ in range(draws):
                idx = rng.permutation(m)
                cal, rest = idx[:k], idx[k:]
                y = (rng.random(k) < q[cal]).astype(np.float64)
                sub = int(rng.integers(1 << 31))
                try:
                    if y.sum() < 2 or y.sum() > k - 2:
                        raise PipelineError("fewer than 2 deaths or survivors")
                    new = recertify(pol, Predictive(ep.raw[cal]), y, reference=Predictive(ep.raw[rest]),
                                    refit_threshold=refit, seed=sub)
                except PipelineError:
                    # recertify refuses the set (no death in a half, one class for the map): no new promise, so
                    # the new era is referred whole (counted: refused and refer_all)
                    rec["miss"].append(0.0)
                    rec["kept"].append(0.0)
                    rec["refer_all"] += 1
                    rec["refused"] += 1
                    continue
                c = new.apply(Predictive(ep.raw[rest]))
                mr, kr = _outcome(q[rest], c.risk_calibrated, c.refer, c.high_risk)
                rec["miss"].append(mr)
                rec["kept"].append(kr)
                rec["refer_all"] += int(c.refer.all())
            out[f"recertified {k}" + (" (threshold refitted)" if refit else "")] = rec
    out["weighted"] = weighted(ep, draws, rng)
    return out


def weighted(ep: EraPool, draws: int, rng: np.random.Generator) -> dict:
    """The importance-weighted rule on the calibration half, redrawn outcomes, evaluated on the whole test split."""
    pol, pool = ep.policy, ep.pool
    cal = pol.kept["calibration"]
    sel_x = ep.val_features[~ep.calibration]
    model = shift.fit_domain(sel_x, ep.features)
    w = model.weights(ep.val_features[ep.calibration])
    q_cal = ep.val_true_risk[ep.calibration]
    u = np.asarray(cal["measures"][pol.ordering.value])
    r = np.asarray(cal["risk"])
    ref = Reference(pool.measures[pol.ordering.value], pool.risk)
    t = pol.threshold.threshold
    rec = {"miss": [], "kept": [], "refer_all": 0, "ess": None}
    for _ in range(draws):
        y = (rng.random(q_cal.shape[0]) < q_cal).astype(np.float64)
        wr = fit_weighted_refer_rule(u, r, y, w, t, pol.config.settings(), pol.ordering.value, ref, strict=False)
        referred = wr.refer(pool.measures[pol.ordering.value])
        rec["miss"].append(true_kept_risk(pool.true_risk, pool.risk, ~referred, t, Risk.MISS))
        rec["kept"].append(float((~referred & (pool.risk < t)).mean()))
        rec["refer_all"] += int(referred.all())
        rec["ess"] = wr.ess_deaths
    return rec


# ---------------------------------------------------------------------------- (c) the monitor


def monitor_streams(ep: EraPool, streams: int = STREAMS, seed: int = 0) -> dict:
    """False alarms on streams that keep the promise exactly, and the alarm's delay on streams missing 2 alpha."""
    pol, pool = ep.policy, ep.pool
    alpha, delta = pol.config.alpha, pol.config.delta
    q, r, t = pool.true_risk, pool.risk, pol.threshold.threshold
    rng = np.random.default_rng(seed)
    out = {}
    for name, target in (("stationary", alpha), ("broken", 2.0 * alpha)):
        low = np.flatnonzero(r < t)
        order = low[np.argsort(r[low], kind="stable")]
        k = int(np.searchsorted(np.cumsum(q[order]) / q.sum(), target, side="right"))
        refer = np.ones(len(q), dtype=bool)
        refer[order[:k]] = False  # keep the k lowest-risk unflagged: true miss rate just at or below the target
        high = r >= t
        alarms, at, deaths = 0, [], []
        for _ in range(streams):
            perm = rng.permutation(len(q))
            y = (rng.random(len(q)) < q[perm]).astype(int)
            s = monitor.update(monitor.start(alpha, delta), y, refer[perm], high[perm])
            alarms += int(s.alarm)
            if s.alarm:
                at.append(s.alarm_at)
                deaths.append(s.alarm_deaths)
        out[name] = {"true_miss": float(np.cumsum(q[order])[k - 1] / q.sum()) if k else 0.0, "alarms": alarms,
                     "streams": streams, "median_alarm_at": float(np.median(at)) if at else None,
                     "median_alarm_deaths": float(np.median(deaths)) if deaths else None}
    return out


# ---------------------------------------------------------------------------- the decision rule


def _se(p: float, n: int) -> float:
    return float(np.sqrt(max(p * (1.0 - p), 1.0 / max(n, 1)) / max(n, 1)))


def pooled_detectors(results: dict, mode: str) -> dict:
    """size -> detector -> (mean share flagged over the split's runs, cohorts pooled)."""
    cells = [r["detectors"] for kinds in results.get(mode, {}).values() for r in kinds.values() if "detectors" in r]
    out: dict = {}
    for size in sorted({s for c in cells for s in c}, key=int):
        names = sorted({k for c in cells if size in c for k in c[size]})
        out[size] = {k: float(np.mean([c[size][k] for c in cells if size in c and k in c[size]])) for k in names}
    return out


def decide(results: dict, draws: int, level: float = LEVEL) -> dict:
    """The design's decision rule (docs/experiments/2026-12-06-promise-across-eras.md) on ``results``
    (mode -> kind -> seed -> {"detectors", "promise", "monitor"})."""
    power, null = pooled_detectors(results, "era"), pooled_detectors(results, "random")
    n_null = draws * sum(len(k) for k in results.get("random", {}).values())
    bound = level + 2.0 * _se(level, n_null)
    names = sorted({k for s in power.values() for k in s})
    eligible = [k for k in names if all(s.get(k, 1.0) <= bound for s in null.values())]
    mean_power = {k: float(np.mean([power[s][k] for s in POWER_SIZES if s in power and k in power[s]] or [0.0]))
                  for k in names}
    best = max(eligible, key=lambda k: mean_power[k]) if eligible else None
    keep = DEFAULT_DETECTOR in eligible and (best is None or mean_power[best] <= mean_power[DEFAULT_DETECTOR] + 0.02)
    detector = {"eligible": eligible, "false_alarm_bound": bound, "mean_power": mean_power, "best": best,
                "default": DEFAULT_DETECTOR if keep else best, "keep": keep}
    cells = [r["promise"] for r in (x for kinds in results.get("era", {}).values() for x in kinds.values())
             if "promise" in r]
    settings = sorted({k for c in cells for k in c if isinstance(c[k], dict)}, key=_setting_order)
    table = {}
    for name in settings:
        misses = np.concatenate([np.asarray(c[name]["miss"]) for c in cells if name in c])
        kept = np.concatenate([np.asarray(c[name]["kept"]) for c in cells if name in c])
        near = np.concatenate([np.asarray(c[name]["kept"]) >= c["oracle"] - MARGIN for c in cells if name in c])
        alpha, delta = cells[0]["alpha"], cells[0]["delta"]
        above = float((misses > alpha).mean())
        table[name] = {"above": above, "se": _se(above, misses.size), "valid": above <= delta + 2 * _se(above,
                                                                                                        misses.size),
                       "kept": float(kept.mean()), "n": int(misses.size),
                       "near": float((near & (misses <= alpha)).mean()),  # one draw within the margin and alpha
                       "refer_all": int(sum(c[name].get("refer_all", 0) for c in cells if name in c)),
                       "refused": int(sum(c[name].get("refused", 0) for c in cells if name in c))}
    floors = [r["floor"] for r in (x for kinds in results.get("era", {}).values() for x in kinds.values())
              if "floor" in r]
    for name, row in table.items():
        if name.startswith("recertified ") and "(" not in name:
            have = [f["expected"][name.split()[1]] for f in floors if name.split()[1] in f["expected"]]
            row["floor"] = float(np.mean(have)) if have else None
    needed = [f["needed"] for f in floors]
    floor = {"needed": needed, "needed_median": float(np.median([n for n in needed if n is not None]))
             if any(n is not None for n in needed) else None,
             "mortality": float(np.mean([f["mortality"] for f in floors])) if floors else None}
    oracle = float(np.mean([c["oracle"] for c in cells])) if cells else float("nan")
    modes = {}
    sizes = sorted({int(k.split()[1]) for k in table if k.startswith("recertified ")})
    at = 1000 if 1000 in sizes else (sizes[-1] if sizes else None)  # the mode is compared at 1,000 (or the largest)
    for refit in ("", " (threshold refitted)"):
        ok = [k for k in sizes if table[f"recertified {k}{refit}"]["valid"]
              and table[f"recertified {k}{refit}"]["kept"] >= oracle - MARGIN]
        cell = table.get(f"recertified {at}{refit}", {})
        modes["flags kept" if not refit else "threshold refitted"] = {
            "smallest_k": ok[0] if ok else None, "compared_at": at,
            "kept": cell.get("kept") if cell.get("valid") else None}
    valid_modes = {m: v for m, v in modes.items() if v["kept"] is not None}
    mode = max(valid_modes, key=lambda m: valid_modes[m]["kept"]) if valid_modes else None
    w, a = table.get("weighted"), table.get("as_is")
    return {"detector": detector, "promise": table, "oracle": oracle, "floor": floor, "recertify": modes,
            "recertify_mode": mode,
            "weighted_recommended": bool(w and a and w["valid"] and w["kept"] > a["kept"]),
            "monitor": decide_monitor(results)}


def _setting_order(name: str) -> tuple:
    """(b)'s rows in reading order: as is, re-certified by labelled size (flags kept, then refitted), weighted."""
    if name.startswith("recertified "):
        return 1, int(name.split()[1]), "(" in name
    return (0,) if name == "as_is" else (2, name)


def decide_monitor(results: dict, delta: float = 0.1) -> dict:
    """Rule 3: the stationary streams alarm in at most delta + 2 Monte Carlo standard errors of them, the broken
    ones in at least 1 - delta (pooled over splits, kinds and seeds; per split as context)."""
    counts: dict = {}
    for mode, kinds in results.items():
        for seeds in kinds.values():
            for r in seeds.values():
                for name, v in r.get("monitor", {}).items():
                    for key in ("pooled", mode):
                        c = counts.setdefault(key, {}).setdefault(name, [0, 0])
                        c[0], c[1] = c[0] + int(v["alarms"]), c[1] + int(v["streams"])
    out = {}
    for key, by in counts.items():
        st, br = by.get("stationary", [0, 0]), by.get("broken", [0, 0])
        false = st[0] / st[1] if st[1] else float("nan")
        caught = br[0] / br[1] if br[1] else float("nan")
        out[key] = {"false_alarms": false, "false_alarms_se": _se(false, st[1]) if st[1] else float("nan"),
                    "caught": caught, "streams": st[1],
                    "passes": bool(st[1] and br[1] and false <= delta + 2 * _se(false, st[1])
                                   and caught >= 1 - delta)}
    return out


def print_decision(d: dict) -> None:
    det = d["detector"]
    print(f"\n### (a) detectors: false alarms at most {det['false_alarm_bound']:.3f} on every same-era cohort size: "
          f"{', '.join(det['eligible']) or 'none'}")
    for k, v in sorted(det["mean_power"].items(), key=lambda kv: -kv[1]):
        print(f"  {k}: mean power at {' and '.join(POWER_SIZES)} admissions {v:.3f}")
    print(f"  -> default detector: {det['default']} ({'kept' if det['keep'] else 'changed'})")
    print(f"\n### (b) the promise on the new era (oracle kept-unflagged share {d['oracle']:.3f})")
    print("| setting | share of draws above alpha ± se | valid | mean kept and unflagged | the exact test's floor "
          f"| draws within {MARGIN:.0%} of the oracle and alpha | draws | referred all (refused) |\n"
          "|---|---|---|---|---|---|---|---|")
    for k, v in d["promise"].items():
        fl = "-" if v.get("floor") is None else f"{v['floor']:.3f}"
        print(f"| {k} | {v['above']:.3f} ± {v['se']:.3f} | {'yes' if v['valid'] else 'no'} | {v['kept']:.3f} "
              f"| {fl} | {v.get('near', float('nan')):.3f} | {v['n']} | {v.get('refer_all', 0)} "
              f"({v.get('refused', 0)}) |")
    fl = d.get("floor") or {}
    if fl.get("needed"):
        got = [n for n in fl["needed"] if n is not None]
        span = f" (runs: {min(got):,} to {max(got):,})" if got else ""
        print(f"  the exact test's floor (expected, from the truth): within {MARGIN:.0%} of the oracle from "
              + (f"about {fl['needed_median']:,.0f} labelled admissions, median over {len(got)} runs{span}"
                 if got else "no labelled set up to the search's limit")
              + f"; mortality {fl['mortality']:.3f}")
    for m, v in d["recertify"].items():
        print(f"  recertify, {m}: smallest labelled size within {MARGIN:.0%} of the oracle: {v['smallest_k']}")
    print(f"  -> recertify's default: {d['recertify_mode']}; weighted rule recommended: {d['weighted_recommended']}")
    print("\n### (c) the monitor, rule 3 (stationary streams alarmed; broken streams alarmed)")
    for key, v in d.get("monitor", {}).items():
        print(f"  {key}: false alarms {v['false_alarms']:.3f} ± {v['false_alarms_se']:.3f} of {v['streams']:,} "
              f"streams, broken streams caught {v['caught']:.3f} -> {'passes' if v['passes'] else 'fails'}")


def print_detectors(results: dict) -> None:
    for mode in results:
        table = pooled_detectors(results, mode)
        what = "power (new era)" if mode == "era" else "false alarms (same era)"
        print(f"\n### {mode} split: share of cohorts flagged at level {LEVEL}, {what}\n")
        sizes = list(table)
        names = sorted({k for s in table.values() for k in s})
        print("| detector | " + " | ".join(sizes) + " |\n|" + "---|" * (len(sizes) + 1))
        for k in names:
            print(f"| {k} | " + " | ".join(f"{table[s].get(k, float('nan')):.3f}" for s in sizes) + " |")


def print_monitor(results: dict) -> None:
    print("\n### (c) the monitor\n\n| split | kind | seed | stream | true miss | alarms | median alarm at (deaths) |\n"
          "|---|---|---|---|---|---|---|")
    for mode, kinds in results.items():
        for kind, seeds in kinds.items():
            for seed, r in seeds.items():
                for name, v in r.get("monitor", {}).items():
                    at = "-" if v["median_alarm_at"] is None else (f"{v['median_alarm_at']:,.0f} "
                                                                   f"({v['median_alarm_deaths']:,.0f})")
                    print(f"| {mode} | {kind} | {seed} | {name} | {v['true_miss']:.4f} | {v['alarms']} / "
                          f"{v['streams']} | {at} |")


def study(eras: dict, sizes=SIZES, labelled=LABELLED, draws: int = DRAWS, streams: int = STREAMS,
          seed: int = 0, saved=None, saved_only: bool = False) -> dict:
    """(a), (b) and (c) on ``eras`` (mode -> kind -> seed -> EraPool): (b) on the era split only. ``saved(mode,
    kind, seed)``: the path of one run's results (None: not kept), read when it exists, written when computed,
    so a study cut short resumes where it stopped with the same numbers (every run's draws start at ``seed``).
    ``saved_only``: the runs not saved yet are left out (and said), nothing computed: an interim look."""
    results: dict = {}
    for mode, kinds in eras.items():
        for kind, seeds in kinds.items():
            for s, ep in seeds.items():
                path = None if saved is None else saved(mode, kind, s)
                if path is not None and path.exists():
                    r, how = fileio.read_json(path), "read"
                elif saved_only:
                    print(f"{mode} {kind} seed {s}: not saved yet, left out", flush=True)
                    continue
                else:
                    r = {"detectors": detectors(ep, sizes, draws, seed), "monitor": monitor_streams(ep, streams,
                                                                                                    seed)}
                    if mode == "era":
                        r["promise"] = promise(ep, labelled, draws, seed)
                    r, how = json.loads(json.dumps(_plain(r))), "done"  # as a saved run reads back
                    if path is not None:
                        fileio.write_json(path, r)
                if mode == "era":
                    r = {**r, "floor": floor_of(ep, labelled)}
                results.setdefault(mode, {}).setdefault(kind, {})[str(s)] = r
                print(f"{mode} {kind} seed {s}: {how}", flush=True)
    return results


def saved_in(cache: Path | None, ids: dict, sizes, labelled, draws: int, streams: int, seed: int):
    """``study``'s ``saved``: one JSON per run under ``cache``, named by the run id and every setting that changes
    its numbers (None without a cache)."""
    if cache is None:
        return None
    tag = (f"d{draws}-s{streams}-seed{seed}-sizes{'_'.join(map(str, sizes))}-"
           f"labelled{'_'.join(map(str, labelled))}")
    return lambda mode, kind, s: Path(cache) / f"{ids[(mode, kind, s)]}-study-{tag}.json"


def _plain(x):
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, np.ndarray)):
        return [_plain(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    return x


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    rn = sub.add_parser("run", help="the study on every run of the grid")
    rn.add_argument("--bench", type=Path, required=True, help="benchmark-models --out directory (with its extras)")
    rn.add_argument("--cache", type=Path, default=None, help="cache of the runs' pools (.npz)")
    rn.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="cohort sizes of (a)")
    rn.add_argument("--labelled", type=int, nargs="+", default=list(LABELLED), help="labelled set sizes of (b)")
    rn.add_argument("--draws", type=int, default=DRAWS, help="cohorts, labelled sets and redraws per run")
    rn.add_argument("--streams", type=int, default=STREAMS, help="monitor streams per run and kind of stream")
    rn.add_argument("--seed", type=int, default=0, help="seed of every draw")
    rn.add_argument("--json", type=Path, default=None, help="write the results here")
    rn.add_argument("--modes", nargs="+", default=None, help="only these split modes (default: every one)")
    rn.add_argument("--kinds", nargs="+", default=None, choices=KINDS,
                    help="only these model kinds (default: every one; processes on disjoint kinds share one --cache)")
    rn.add_argument("--saved-only", action="store_true", help="an interim look: the runs whose results --cache "
                    "holds, nothing computed")
    args = ap.parse_args()
    eras: dict = {}
    ids: dict = {}
    for run in runs_of(args.bench):
        if run["variant"] in (args.kinds or KINDS) and (args.modes is None or run["split_mode"] in args.modes):
            ids[(run["split_mode"], run["variant"], int(run["seed"]))] = run["run_id"]
            eras.setdefault(run["split_mode"], {}).setdefault(run["variant"], {})[int(run["seed"])] = \
                era_pool_of_run(run["run_id"], args.cache)
    saved = saved_in(args.cache, ids, args.sizes, args.labelled, args.draws, args.streams, args.seed)
    results = study(eras, args.sizes, args.labelled, args.draws, args.streams, args.seed, saved, args.saved_only)
    print_detectors(results)
    print_monitor(results)
    decision = decide(results, args.draws)
    print_decision(decision)
    if args.json:
        fileio.write_json(args.json, _plain({"results": results, "decision": decision, "draws": args.draws,
                                             "streams": args.streams, "seed": args.seed, "level": LEVEL}))
        print(f"\njson: {args.json}")


if __name__ == "__main__":
    main()
