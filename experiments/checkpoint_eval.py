"""Val and test metrics of a mortality checkpoint file against the true risk, without its tracking store.

    .venv/bin/python -m experiments.checkpoint_eval CHECKPOINT FEATURES_DIR TRUTH_CSV [--samples S]

For a run whose MLflow store is gone (``benchmarks.full_scale`` trains into a temporary one): loads
``CHECKPOINT`` (``best.pt``), draws ``--samples`` weight samples per component over FEATURES_DIR's val
and test splits (seed 0, as ``evaluate``) and prints ``evaluate``'s table for each, with the true risk
of TRUTH_CSV (the synthetic world's ``_truth/truth.csv.gz``) joined through the features' link file.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from pipeline.core.contracts import DEFAULT_SAMPLES


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("features", type=Path)
    ap.add_argument("truth", type=Path)
    ap.add_argument("--samples", type=int, default=DEFAULT_SAMPLES,
                    help="weight samples per component [the pipeline's default]")
    ap.add_argument("--bootstrap", type=int, default=200, help="bootstrap resamples of the intervals")
    args = ap.parse_args(argv)
    import torch

    from pipeline.data import features
    from pipeline.runs.formats import load_model
    from pipeline.tasks.mortality.truth import load_true_risk
    from pipeline.workflows.evaluate import format_table, report_of, sample_logits

    torch.set_num_threads(1)
    model, _ = load_model(args.checkpoint)
    for split in ("val", "test"):
        fs = features.load_split(args.features / f"{split}.parquet")
        risk = load_true_risk(args.truth, args.features / "_private" / "link.csv", fs.keys)
        logits = sample_logits(model, fs, args.samples)  # (S, K, N)
        print(format_table({**report_of(logits, fs.label, risk, n_bootstrap=args.bootstrap), "split": split}))


if __name__ == "__main__":
    main()
