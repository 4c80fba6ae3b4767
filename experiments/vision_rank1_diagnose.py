"""Where the rank-1 digits models' in-distribution NLL goes: posterior scales, factor signs, means vs draws.

    .venv/bin/python -m experiments.vision_rank1_diagnose [--methods rank1-gaussian rank1-cauchy]
        [--seed 0] [--out benchmarks/results/vision_rank1_diagnose.json]

Trains each rank-1 variant exactly as ``vision_digits.py`` does (same settings, one seed), then
reports the learned posterior scales (softplus(rho)) and factor means (share below zero, mean
|mean - 1|), the KL, and the clean test metrics with the benchmark's draws (2 per component)
against the posterior means (``use_mean``: each component's W∘(r̄ s̄ᵀ), no sampling noise).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks import report
from experiments.vision_digits import METHODS, code_version, ordered


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--methods", nargs="+", default=["rank1-gaussian", "rank1-cauchy"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=report.results_path("vision_rank1_diagnose"))
    args = ap.parse_args()

    import torch
    import torch.nn.functional as F

    from pipeline.bayes.layers import Rank1Vector, set_sampling
    from pipeline.bayes.metrics import multiclass as mm
    from pipeline.tasks.vision import VisionTrainConfig, load_splits
    from pipeline.workflows.vision_run import image_logits as predict_logits
    from pipeline.workflows.vision_run import train_vision

    torch.set_num_threads(1)
    commit, dirty = code_version()
    out = {"commit": commit, "uncommitted_changes": dirty, "seed": args.seed, "runs": {}}
    for method in args.methods:
        model_cfg = {"arch": "wrn", "depth": 10, "width": 1, "ensemble_size": 4, **METHODS[method]}
        cfg = VisionTrainConfig(dataset="digits", image_size=16, seed=args.seed, model=model_cfg, epochs=20.0,
                                batch_size=64, kl_anneal_epochs=16.0, eval_samples=2, threads=1, log_every=100)
        splits = load_splits(cfg)
        result = train_vision(cfg, splits=splits)
        model = result.model
        vectors = [m for m in model.modules() if isinstance(m, Rank1Vector)]
        scales = torch.cat([F.softplus(v.rho).detach().ravel() for v in vectors])
        means = torch.cat([v.mean.detach().ravel() for v in vectors])
        x, y = splits.test.floats(), splits.test.labels
        sampled = mm.evaluate_predictions(predict_logits(model, x, 2, seed=args.seed), y, components=4)
        set_sampling(model, use_mean=True)
        at_means = mm.evaluate_predictions(predict_logits(model, x, 1, seed=args.seed), y, components=4)
        keys = ("nll", "accuracy", "ece", "mean_mutual_information", "disagreement")
        row = {"kl": result.final_train["kl"], "train_nll_last_step": result.final_train["nll"],
               "factor_entries": int(means.numel()),
               "scale_quantiles": {str(q): float(scales.quantile(q)) for q in (0.1, 0.5, 0.9, 0.99)},
               "scale_mean": float(scales.mean()), "share_means_below_zero": float((means < 0).float().mean()),
               "mean_abs_mean_minus_1": float((means - 1).abs().mean()),
               "clean_sampled": {k: sampled[k] for k in keys}, "clean_posterior_means": {k: at_means[k] for k in keys}}
        out["runs"][method] = row
        print(method, row, flush=True)
    report.write_results("vision_rank1_diagnose", {"command": report.command(__spec__.name), **out}, path=args.out,
                         renderer="experiments.vision_rank1_diagnose:render")


def render(r: dict) -> str:
    """docs/experiments/2026-12-01-vision-digits.md's figures:vision_rank1_diagnose section."""
    runs = r["runs"]
    names = [m for m in ordered(runs)]
    rows = [
        ["training NLL, last step", *(f"{runs[m]['train_nll_last_step']:.3f}" for m in names)],
        ["KL at the end (nats)", *(f"{runs[m]['kl']:,.0f}" for m in names)],
        ["factor means below zero at the end (start: 50%)",
         *(f"{runs[m]['share_means_below_zero']:.2%}" for m in names)],
        ["mean \\|factor mean - 1\\|", *(f"{runs[m]['mean_abs_mean_minus_1']:.3f}" for m in names)],
        ["posterior scale, 10% / 50% / 99% quantiles (start 0.0316)",
         *(" / ".join(f"{runs[m]['scale_quantiles'][q]:.4f}" for q in ("0.1", "0.5", "0.99")) for m in names)],
        ["clean NLL / ECE / MI, sampled", *(" / ".join(f"{runs[m]['clean_sampled'][k]:.3f}" for k in
                                                      ("nll", "ece", "mean_mutual_information")) for m in names)],
        ["clean NLL / ECE / MI at the posterior means",
         *(" / ".join(f"{runs[m]['clean_posterior_means'][k]:.3f}" for k in
                                                                   ("nll", "ece", "mean_mutual_information"))
                                                          for m in names)],
    ]
    return (f"Seed {r['seed']}, {runs[names[0]]['factor_entries']:,} factor entries per model:\n\n"
            + report.table(["", *names], rows))


if __name__ == "__main__":
    main()
