"""What the referral policy costs (issue 35's Performance section): scoring with it against without, and fitting
it at the end of ``train`` against ``train``'s wall time.

    .venv/bin/python -m benchmarks.referral_cost [--features DIR] [--threads 1] [--n 3000] [--repeat 5]
        [--skip-train] [--skip-score] [--json PATH]

(1) **Scoring** (``benchmarks.score.policy_ratio``, the same as ``python -m benchmarks.score --policy``): the
default rank-1 model scores the same random admissions through ``score_files`` with a fitted ``Policy`` in its
``ModelInfo`` and with none, alternating in one process, best of ``--repeat``. Target: at most 1.05x.

(2) **Training**: the 8,000-patient benchmark world (``--features``, or generated once under
``benchmarks/.cache/referral_8k/``: ``synth`` 8,000 patients, seed 0, and ``extract`` with the synthetic key) is
trained in this process with ``train``'s defaults (rank-1, seed 0, ``--threads``), tracked to a throwaway MLflow
store as ``cli.py train`` tracks. ``validation.fit_run_policy`` (the two validation halves predicted at
``score_samples``, the recalibration map chosen and fitted, Venn-Abers, the decision threshold and the refer rule)
is wrapped with a timer, and so is ``fit_policy`` inside it (the fitting alone, without the predictions); their
seconds are set against the ``train`` call's wall seconds. Target: at most 5%.

Figures go to ``benchmarks/results/referral_cost.json`` and docs/performance.md's ``figures:referral_cost``
section (``render``) when both parts ran.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from pathlib import Path

from benchmarks import report
from benchmarks.harness import CACHE, PY, ROOT, cached
from pipeline.core import fileio

SYNTH_KEY = "synthetic-data-only-not-a-secret"  # the Makefile's key for synthetic data (not a secret)
TARGETS = {"score_ratio": 1.05, "train_share": 0.05}  # issue 35's Performance section
PATIENTS = 8000  # the 8k benchmark world


def world_features() -> Path:
    """The 8k benchmark world's features (``synth`` and ``extract`` in child processes, made once)."""
    def make(out: Path) -> None:
        env = {**os.environ, "MIMIC_DEID_KEY": os.environ.get("MIMIC_DEID_KEY", SYNTH_KEY)}
        for argv in (["synth", "--out", str(out / "mimic"), "--patients", str(PATIENTS), "--seed", "0", "--workers",
                      "2"], ["extract", "--source", str(out / "mimic"), "--out", str(out / "features")]):
            subprocess.run([PY, str(ROOT / "cli.py"), *argv], cwd=ROOT, env=env, check=True,
                           stdout=subprocess.DEVNULL)

    return cached(CACHE / "referral_8k", make) / "features"


def train_share(features_dir: Path, threads: int, seed: int = 0) -> dict:
    """Wall seconds of one default rank-1 ``train`` run and of the policy fitted at its end (module docstring)."""
    import pipeline.bayes.referral.policy as policy_module
    from pipeline.tasks.mortality import validation
    from pipeline.tasks.mortality.train_config import TrainConfig
    from pipeline.workflows.train import train

    secs = {"fit_run_policy": [], "fit_policy": []}

    def timed(owner, name: str):
        inner = getattr(owner, name)

        def wrapper(*a, **kw):
            t0 = time.perf_counter()
            out = inner(*a, **kw)
            secs[name].append(time.perf_counter() - t0)
            return out
        setattr(owner, name, wrapper)
        return inner

    restore = [(validation, "fit_run_policy", timed(validation, "fit_run_policy")),
               (policy_module, "fit_policy", timed(policy_module, "fit_policy"))]
    try:
        with tempfile.TemporaryDirectory(prefix="referral-cost-") as tmp:
            os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{tmp}/mlflow.db"  # a throwaway store, tracked as the CLI
            cfg = TrainConfig(seed=seed, threads=threads, progress=False)
            t0 = time.perf_counter()
            result = train(features_dir, "rank1", cfg, out_dir=Path(tmp) / "run", experiment="referral-cost",
                           artifact_location=str(Path(tmp) / "artifacts"))
            wall = time.perf_counter() - t0
    finally:
        for owner, name, inner in restore:
            setattr(owner, name, inner)
    if len(secs["fit_run_policy"]) != 1 or result.policy is None:
        raise SystemExit(f"train fitted {len(secs['fit_run_policy'])} policies (expected one, with a calibration half)")
    policy = result.policy
    return {"train_s": wall, "fit_run_policy_s": secs["fit_run_policy"][0], "fit_policy_s": sum(secs["fit_policy"]),
            "share": secs["fit_run_policy"][0] / wall, "steps": result.steps, "best_step": result.best_step,
            "threads": threads, "seed": seed, "calibration": policy.calibration.get("method"),
            "calibration_n": policy.rule.overall.n, "calibration_deaths": policy.rule.overall.deaths,
            "ordering": policy.ordering.value, "rule_status": policy.rule.overall.status.value,
            "features": str(features_dir)}


def render(r: dict) -> str:
    """The docs section: both figures against their targets."""
    s, t = r["score"], r["train"]
    verdict = (lambda ok: "**met**" if ok else "**not met**")  # noqa: E731
    rows = [["scoring: `score_files` with the policy / without, same admissions, same process",
             f"{s['policy_secs']:.2f} s / {s['none_secs']:.2f} s = **{s['ratio']:.3f}x** (median runs "
             f"{s['median_ratio']:.3f}x)",
             f"<= {TARGETS['score_ratio']:g}x: {verdict(s['ratio'] <= TARGETS['score_ratio'])}"],
            ["training: `validation.fit_run_policy` / the whole `train` call (8k world, rank-1 defaults)",
             f"{t['fit_run_policy_s']:.1f} s / {t['train_s']:.1f} s = **{100 * t['share']:.2f}%** (of which "
             f"`fit_policy` {t['fit_policy_s']:.2f} s)", f"<= {100 * TARGETS['train_share']:g}%: "
             f"{verdict(t['share'] <= TARGETS['train_share'])}"]]
    return "\n".join([
        report.table(["what", "measured", "target (issue 35)"], rows), "",
        f"Scoring: {s['n']:,} random admissions, {s['samples']} samples x K = {s['draws']} draws, batch "
        f"{s['batch_size']}, {s['threads']} torch thread(s), best of {s['repeat']} alternating runs; the policy: "
        f"calibration {s['calibration']}, ordering {s['ordering']}, rule {s['rule_status']}. Training: "
        f"{t['steps']:,} steps (best {t['best_step']:,}), {t['threads']} torch thread(s); the policy fitted on "
        f"{t['calibration_n']:,} calibration admissions ({t['calibration_deaths']} deaths): calibration "
        f"{t['calibration']}, ordering {t['ordering']}, rule {t['rule_status']}. The load average was "
        f"{r['load_average']:.1f} on 2 cores (a shared machine: the ratios, not the seconds, are the figures)."])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--features", type=Path, default=None, help="the 8k world's features (default: made once)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (training and scoring)")
    ap.add_argument("--n", type=int, default=3000, help="admissions scored")
    ap.add_argument("--samples", type=int, default=None,
                    help="samples per component at scoring (default: the contract's DEFAULT_SAMPLES)")
    ap.add_argument("--batch-size", type=int, default=None, help="admissions per forward pass at scoring")
    ap.add_argument("--hidden", type=int, default=0, help="LSTM units at scoring (0: the default model's)")
    ap.add_argument("--repeat", type=int, default=5, help="scorings of each kind (alternating)")
    ap.add_argument("--skip-score", action="store_true", help="only the training part")
    ap.add_argument("--skip-train", action="store_true", help="only the scoring part")
    ap.add_argument("--json", type=Path, default=None, help="write the results here instead of benchmarks/results/")
    args = ap.parse_args()
    from pipeline.core.contracts import DEFAULT_BATCH, DEFAULT_SAMPLES

    args.samples = args.samples or DEFAULT_SAMPLES
    args.batch_size = args.batch_size or DEFAULT_BATCH
    prov = report.provenance()
    result: dict = {"command": report.command(__spec__.name), "targets": TARGETS}
    if not args.skip_score:
        from benchmarks.score import policy_ratio, print_policy_ratio

        result["score"] = policy_ratio(args)
        print_policy_ratio(result["score"])
    if not args.skip_train:
        t = train_share(args.features or world_features(), args.threads)
        result["train"] = t
        print(f"train (rank-1 defaults, 8k world, {t['steps']:,} steps, {t['threads']} thread(s)): "
              f"{t['train_s']:.1f} s wall; validation.fit_run_policy {t['fit_run_policy_s']:.2f} s = "
              f"{100 * t['share']:.2f}% of it (fit_policy alone {t['fit_policy_s']:.2f} s); "
              f"target <= {100 * TARGETS['train_share']:g}%: "
              f"{'met' if t['share'] <= TARGETS['train_share'] else 'NOT met'}")
    result["load_average"] = os.getloadavg()[0]
    if args.json:
        fileio.write_json(args.json, {**prov, **result})
    elif not (args.skip_score or args.skip_train):  # a part alone is printed, never written over the figures
        report.write_results("referral_cost", {**prov, **result})


if __name__ == "__main__":
    main()
