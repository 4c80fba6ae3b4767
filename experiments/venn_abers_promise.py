"""What ``risk_calibrated`` and the Venn-Abers interval promise each other on a census, per recalibration map
(docs/experiments/2026-12-06-venn-abers-promise.md).

A trained run's validation halves are predicted as training predicts them and one policy is fitted per map
(``tasks.mortality.validation.fit_run_policy`` with ``ReferralConfig(calibration=...)``); each is applied to the same
predictions of a census (``--source``: every admission at its prediction time, extracted with the run's vocabulary as
``score --source`` extracts it; or ``--data``: a features file). Printed per map: the rows, those whose calibrated
risk lies outside [risk_va_low, risk_va_high], their share, the largest distance outside, and rows with p0 > p1.

    python -m experiments.venn_abers_promise --run RUN_ID --source runs/main/mimic
"""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

METHODS = ("auto", "none", "temperature", "platt", "isotonic", "venn_abers")  # the run's own choice first


def census(run, source: str | None, data: str | None, tmp: Path):
    """The census's FeatureSet: ``data`` as given, or ``source`` extracted with the run's settings and vocabulary."""
    from pipeline.data import features
    from pipeline.serving.score import extract_cohort

    path = Path(data) if data else extract_cohort(source, run.manifest, run.vocab, tmp / "census").files["cohort"]
    return features.load_split(path, values=run.model.value_channel)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", required=True, help="run id (its features and validation halves are used)")
    ap.add_argument("--source", help="MIMIC source whose census is scored")
    ap.add_argument("--data", help="or a features Parquet file as the census")
    ap.add_argument("--seed", type=int, default=0, help="the census's Monte Carlo draws")
    a = ap.parse_args(argv)
    import torch

    from pipeline.bayes.referral.config import ReferralConfig
    from pipeline.core.contracts import DEFAULT_BATCH
    from pipeline.data import features
    from pipeline.runs.load import load_run
    from pipeline.tasks.mortality import predict, risk
    from pipeline.tasks.mortality.inputs import split_validation
    from pipeline.tasks.mortality.train_config import TrainConfig
    from pipeline.tasks.mortality.validation import fit_run_policy

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="va-") as tmp:
        run = load_run(a.run, Path(tmp) / "model")
        tc, info = run.train_config, run.info
        fdir = run.resolve_features(None)
        values = run.model.value_channel
        sel, cal = split_validation(features.load_split(fdir / "val.parquet", values=values),
                                    float(tc.get("calibration_share", TrainConfig.calibration_share)))
        fs = census(run, a.source, a.data, Path(tmp))
        samples = predict.score_samples(None, info)
        pred = predict.feature_predictions(run.model, fs, samples, DEFAULT_BATCH, info.max_bags, info.max_tokens,
                                           predict.seeded_generator(a.seed))
        view = risk.predictive(pred)
        base = ReferralConfig()  # the defaults (make main's run trains with them)
        fraction = float(tc.get("refer_fraction", TrainConfig.refer_fraction))
        print(f"census: {len(fs):,} admissions; calibration half {len(cal):,} ({int(cal.label.sum())} positives), "
              f"selection half {len(sel):,}; recorded map: {(info.policy or {}).get('calibration', {}).get('method')}")
        print(f"{'map':12s} {'chosen':12s} {'rows':>7s} {'outside':>8s} {'share':>7s} {'max out':>8s} {'p0>p1':>6s}")
        for method in METHODS:
            cfg = replace(base, calibration=method, fraction=fraction)
            policy = fit_run_policy(run.model, sel, cal, samples=samples,
                                    batch_size=int(tc.get("eval_batch_size", DEFAULT_BATCH)), max_bags=info.max_bags,
                                    max_tokens=info.max_tokens, seed=int(tc.get("seed", 0)),
                                    context_vocab=run.vocab["context"], config=cfg, words=run.words)
            if policy is None or policy.venn_abers is None:
                print(f"{method:12s} no policy or no Venn-Abers interval")
                continue
            c = policy.apply(view)
            r, lo, hi = c.risk_calibrated, c.va_low, c.va_high
            out = (r < lo - 1e-12) | (r > hi + 1e-12)
            far = float(np.maximum(lo - r, r - hi).max()) if out.any() else 0.0
            print(f"{method:12s} {policy.calibration['method']:12s} {len(r):7,d} {int(out.sum()):8,d} "
                  f"{out.mean():7.1%} {far:8.4f} {int((lo > hi).sum()):6d}")


if __name__ == "__main__":
    main()
