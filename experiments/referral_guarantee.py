"""The refer rule's guarantee checked against the truth (issue 35, item 4), on a trained run's test split.

    MIMIC_DEID_KEY=synthetic-data-only-not-a-secret MLFLOW_TRACKING_URI=sqlite:////ABS/runs/exp/mlflow.db
    python cli.py synth --out runs/w46k/mimic --patients 46520 --seed 0 --workers 2
    python cli.py extract --source runs/w46k/mimic --out runs/w46k/features
    python cli.py train --data runs/w46k/features --model rank1 --seed 0 --threads 1      # prints run_id: RUN
    python -m experiments.referral_guarantee --run RUN --cache runs/exp/pool-cache \\
        --json docs/experiments/2026-12-04-referral-guarantee.json

The pool is the run's **test** split (never used by training, its checkpoint, its recalibration map or its
decision threshold), predicted as scoring predicts (``predict.feature_predictions`` at the run's
``score_samples`` with seed 0) and joined with the synthetic world's true risk (``tasks.mortality.truth``). The run's
``Policy`` gives each pool admission its calibrated risk r (the run's map), the decision (the run's threshold)
and its ordering measure u (the run's ordering: decision uncertainty for a posterior model by default). The
calibration size is the run's own calibration half (``policy.rule.overall.n``).

``check.check_guarantee`` then repeats ``--repeats`` times: draw that many pool admissions as a calibration set,
draw their outcomes from the true risk, fit the refer rule, and compute the kept admissions' risk on the rest of
the pool from the true risk (``--evaluate pool``: the calibration set drawn with replacement and the risk over the
whole pool, the exact i.i.d. setting; the rest can overstate the failure share when the calibration set takes a
large part of the pool, ``check``'s docstring). Per setting it prints the share of repeats whose true kept risk exceeds
alpha (LTT promises at most delta; ``Share.holds``: within 2 Monte Carlo standard errors), the mean true kept risk,
the mean referral rate and how often the rule referred everyone. Settings: the miss rate at alpha 0.05 (the
default) and 0.10, the Brier score at ``--brier-alpha``, the default setting per group (each ``--group`` family: a
cut per group; the share is per group), the default setting with the cuts from the calibration set's own measures
(``reference="calibration"``; the others take them from the pool, label-free), and the plug-in rule (``method
plugin``: the fewest referrals whose calibration risk meets alpha, no finite-sample correction) at each alpha for
contrast. A setting whose calibration size cannot certify alpha at delta (fewer deaths, or for the Brier score
admissions, than ``bounds.required_size``) refers everyone, and the table says so.

``pool_of_run`` (the run's test split with its truth and policy measures, cached as .npz) is shared with
``experiments.referral_orderings``.
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.bayes.referral import ReferSettings, Risk, RuleMethod
from pipeline.bayes.referral.bounds import required_size
from pipeline.bayes.referral.check import EVALUATIONS, REPEATS, GuaranteeCheck, check_guarantee
from pipeline.core import fileio
from pipeline.core.contracts import DEFAULT_BATCH

GROUP_FAMILIES = ("gender", "age")  # context families of the per-group check
DELTA = 0.1  # the default delta


@dataclass
class Pool:
    """A run's test split as the refer rule sees it, with the true risk."""

    run_id: str  # the run
    keys: np.ndarray  # (M,) admission pseudonyms
    labels: np.ndarray  # (M,) observed outcomes
    true_risk: np.ndarray  # (M,) the synthetic world's true risk
    risk: np.ndarray  # (M,) the calibrated risk (the run's map)
    threshold: float  # the run's decision threshold (calibrated units)
    measures: dict  # ordering -> (M,) measure (``Policy.measures``)
    groups: dict  # context family -> (M,) group
    spread: bool  # the posterior moves some admission's risk (else a point model)
    ordering: str  # the run's own ordering (``auto`` resolved)
    n_calibration: int  # the run's calibration half: admissions
    deaths_calibration: int  # and deaths
    policy: dict  # the run's policy summary (``Policy.to_dict(arrays=False)``)
    raw: np.ndarray | None = None  # (M,) the raw (uncalibrated) risk (None: a pool cached before it was kept)


def pool_of_run(run_id: str, cache: Path | None = None, features_dir: Path | None = None) -> Pool:
    """The test split of run ``run_id`` (its features directory's, or ``features_dir``'s) as a ``Pool``; cached
    by run id under ``cache``."""
    path = None if cache is None else Path(cache) / f"{run_id}-test-pool.npz"
    if path is not None and path.exists():
        z = np.load(path, allow_pickle=False)
        meta = fileio.read_json(path.with_suffix(".json"))
        measures = {k.removeprefix("measure_"): z[k] for k in z.files if k.startswith("measure_")}
        groups = {k.removeprefix("group_"): z[k] for k in z.files if k.startswith("group_")}
        return Pool(run_id, z["keys"], z["labels"], z["true_risk"], z["risk"], meta["threshold"], measures, groups,
                    meta["spread"], meta["ordering"], meta["n_calibration"], meta["deaths_calibration"],
                    meta["policy"], z["raw"] if "raw" in z.files else None)
    pool = _predict_pool(run_id, features_dir)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(path, keys=pool.keys, labels=pool.labels, true_risk=pool.true_risk, risk=pool.risk,
                            **({} if pool.raw is None else {"raw": pool.raw}),
                            **{f"measure_{k}": v for k, v in pool.measures.items()},
                            **{f"group_{k}": v for k, v in pool.groups.items()})
        fileio.write_json(path.with_suffix(".json"), {
            "threshold": pool.threshold, "spread": pool.spread, "ordering": pool.ordering,
            "n_calibration": pool.n_calibration, "deaths_calibration": pool.deaths_calibration,
            "policy": pool.policy})
    return pool


def _predict_pool(run_id: str, features_dir: Path | None) -> Pool:
    from pipeline.data import features
    from pipeline.runs.load import load_run
    from pipeline.tasks.mortality import predict, risk
    from pipeline.tasks.mortality.truth import features_true_risk

    with tempfile.TemporaryDirectory(prefix="pool-") as tmp:
        run = load_run(run_id, tmp)
    policy = risk.policy_of(run.info)
    if policy is None:
        raise SystemExit(f"run {run_id} has no policy (trained before calibration, or without a calibration half)")
    fdir = Path(features_dir or run.features_dir or "")
    fs = features.load_split(fdir / "test.parquet", values=True)
    q = features_true_risk(fdir, fs)
    if q is None:
        raise SystemExit(f"{fdir}: no true risk (a synthetic source and its _private/link.csv are needed)")
    pred = predict.feature_predictions(run.model, fs, predict.score_samples(None, run.info), DEFAULT_BATCH,
                                       run.info.max_bags, run.info.max_tokens, predict.seeded_generator(0))
    groups = {f: features.context_groups(fs, run.vocab["context"], f) for f in GROUP_FAMILIES}
    pv = risk.predictive(pred, groups)
    cal = policy.calibrator.apply(pv.mean)
    measures = policy.measures(pv, cal, policy.threshold.flag(cal))
    return Pool(run_id, np.asarray(fs.keys).astype(str), np.asarray(fs.label, dtype=np.float64), q, cal,
                float(policy.threshold.threshold), measures, groups, bool(pv.spread), policy.ordering.value,
                int(policy.rule.overall.n), int(policy.rule.overall.deaths), policy.to_dict(arrays=False),
                np.asarray(pv.mean, dtype=np.float64))


@dataclass
class Setting:
    """One row of the check: the rule's settings and how its cuts and groups are taken."""

    name: str  # the row's label
    settings: ReferSettings  # alpha, delta, the risk, the method
    group: str | None = None  # context family of a per-group rule
    reference: str = "pool"  # the candidate cuts: the pool's measures (label-free) or the calibration set's


def settings_of(alphas, brier_alpha: float, groups, delta: float = DELTA) -> list[Setting]:
    """The rows of the check (see the module docstring)."""
    miss = [Setting(f"LTT miss_rate alpha {a:g}", ReferSettings(alpha=a, delta=delta)) for a in alphas]
    brier = Setting(f"LTT brier alpha {brier_alpha:g}", ReferSettings(alpha=brier_alpha, delta=delta, risk=Risk.BRIER))
    a0 = alphas[0]
    grouped = [Setting(f"LTT miss_rate alpha {a0:g} per {g}", ReferSettings(alpha=a0, delta=delta, group_column=g), g)
               for g in groups]
    own = Setting(f"LTT miss_rate alpha {a0:g}, cuts from the calibration set", ReferSettings(alpha=a0, delta=delta),
                  reference="calibration")
    plug = [Setting(f"plug-in miss_rate alpha {a:g}", ReferSettings(alpha=a, delta=delta, method=RuleMethod.PLUGIN))
            for a in alphas]
    plug.append(Setting(f"plug-in brier alpha {brier_alpha:g}", ReferSettings(
        alpha=brier_alpha, delta=delta, risk=Risk.BRIER, method=RuleMethod.PLUGIN)))
    return [*miss, brier, *grouped, own, *plug]


def _share_dict(share, delta: float) -> dict:
    return {**dataclasses.asdict(share), "holds": share.holds(delta)}


def check_row(pool: Pool, setting: Setting, measure: str, repeats: int, seed: int, evaluate: str = "rest") -> dict:
    """One setting checked on the pool (``check_guarantee``, evaluated on ``evaluate``), as plain JSON."""
    s = setting.settings
    groups = None if setting.group is None else pool.groups[setting.group]
    chk: GuaranteeCheck = check_guarantee(pool.true_risk, pool.risk, pool.measures[measure], pool.threshold,
                                          pool.n_calibration, s, groups=groups, repeats=repeats, seed=seed,
                                          reference=setting.reference, evaluate=evaluate)
    needed = required_size(s.alpha, s.delta)
    expected = pool.n_calibration * float(pool.true_risk.mean()) if s.risk is Risk.MISS else pool.n_calibration
    out = {"name": setting.name, "settings": s.to_dict(), "group": setting.group, "reference": setting.reference,
           "needed": needed, "expected_units": expected, "too_small": s.method is RuleMethod.LTT and expected < needed,
           "overall": _share_dict(chk.overall, s.delta)}
    if chk.groups is not None:
        sizes = {g: int((groups == g).sum()) for g in chk.groups}
        out["groups"] = {g: {**_share_dict(v, s.delta), "pool_admissions": sizes[g],
                             "expected_deaths": pool.n_calibration * sizes[g] / len(groups) * float(
                                 pool.true_risk[groups == g].mean())} for g, v in chk.groups.items()}
    return out


def _line(label: str, share: dict, s: dict, note: str = "") -> str:
    mc = 2 * max(share["se"], 1.0 / share["n_repeats"])
    holds = "n/a (no guarantee)" if s["method"] != "ltt" else ("yes" if share["holds"] else "**no**")
    return (f"| {label} | {share['above']:.3f} ± {mc:.3f} | {holds} | {share['mean_risk']:.4f} | "
            f"{share['mean_referral']:.3f} | {share['refer_all']} / {share['n_repeats']} |{note}")


def table(rows: list[dict], delta: float = DELTA) -> str:
    """The rows as a Markdown table (``above``: share of repeats whose true kept risk exceeds alpha, ± 2 MC se)."""
    out = [f"| setting | share above alpha (± 2 se) | <= delta {delta:g}? | mean true kept risk | mean referral | "
           "refer-all |", "|---|---|---|---|---|---|"]
    for r in rows:
        note = f" too small: needs {r['needed']} calibration units, expects {r['expected_units']:.0f}" if (
            r["too_small"]) else ""
        out.append(_line(r["name"], r["overall"], r["settings"], note))
        for g, share in (r.get("groups") or {}).items():
            out.append(_line(f"&nbsp;&nbsp;{r['group']} {g} ({share['pool_admissions']:,} in the pool, "
                             f"{share['expected_deaths']:.0f} deaths per calibration set expected)", share,
                             r["settings"]))
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", required=True, help="the trained run (MLflow run id) whose policy is checked")
    ap.add_argument("--features", type=Path, default=None, help="its features directory (default: the run's tag)")
    ap.add_argument("--ordering", default=None, help="the ordering measure (default: the run's own)")
    ap.add_argument("--alphas", type=float, nargs="+", default=[0.05, 0.10], help="miss-rate alphas (first: groups)")
    ap.add_argument("--brier-alpha", type=float, default=0.05, help="alpha of the Brier rows")
    ap.add_argument("--groups", nargs="*", default=list(GROUP_FAMILIES), help="context families of per-group rows")
    ap.add_argument("--repeats", type=int, default=REPEATS, help="calibration sets drawn per setting")
    ap.add_argument("--seed", type=int, default=0, help="seed of the draws")
    ap.add_argument("--cache", type=Path, default=None, help="cache of the run's test pool (.npz)")
    ap.add_argument("--evaluate", choices=EVALUATIONS, default="rest",
                    help="the kept risk over the rest of the pool (calibration drawn without replacement), or over "
                         "the whole pool with the calibration set drawn with replacement (the exact i.i.d. setting)")
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    args = ap.parse_args()
    pool = pool_of_run(args.run, args.cache, args.features)
    measure = args.ordering or pool.ordering
    m, deaths = len(pool.labels), int(pool.labels.sum())
    print(f"run {args.run}: test pool {m:,} admissions, {deaths:,} deaths (true-risk sum {pool.true_risk.sum():.1f}); "
          f"calibration size {pool.n_calibration:,} (the run's calibration half, {pool.deaths_calibration:,} deaths); "
          f"decision threshold {pool.threshold:.4f}; ordering {measure} (the run's: {pool.ordering}); "
          f"{args.repeats} repeats; the kept risk over "
          f"{'the whole pool (i.i.d. draws)' if args.evaluate == 'pool' else 'the rest of the pool'}")
    if pool.n_calibration >= m:
        raise SystemExit(f"the pool ({m}) is not larger than the calibration size ({pool.n_calibration})")
    rows = []
    for setting in settings_of(args.alphas, args.brier_alpha, args.groups):
        rows.append(check_row(pool, setting, measure, args.repeats, args.seed, args.evaluate))
        print("\n".join(table(rows[-1:]).splitlines()[2:]), flush=True)
    print()
    print(table(rows))
    if args.json:
        fileio.write_json(args.json, {
            "run_id": args.run, "pool": {"admissions": m, "deaths": deaths,
                                         "true_risk_sum": float(pool.true_risk.sum())},
            "n_calibration": pool.n_calibration, "deaths_calibration": pool.deaths_calibration,
            "threshold": pool.threshold, "ordering": measure, "repeats": args.repeats, "seed": args.seed,
            "evaluate": args.evaluate,
            "policy": pool.policy, "rows": rows})
        print(f"\njson: {args.json}")


if __name__ == "__main__":
    main()
