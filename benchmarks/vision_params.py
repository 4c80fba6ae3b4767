"""Parameter overhead of the rank-1 / BatchEnsemble factors over the deterministic networks.

    .venv/bin/python -m benchmarks.vision_params [--out benchmarks/results/vision_params.json]

Counts trainable parameters (``parameter_report``) of ResNet-50 (1,000 classes) and WRN-28-10
(10 classes) for K = 4 and K = 10, shared and per-member BatchNorm, and the cost of one
component's factors (mean and scale of Σ (C_in + C_out) entries), the figure the paper's "0.4%
for a 10-component ResNet-50" matches.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks import report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=report.results_path("vision_params"))
    args = ap.parse_args()

    import torch

    from pipeline.tasks.vision import Method, VisionConfig, parameter_report

    prov = report.provenance()

    torch.set_num_threads(1)
    rows = []
    for arch, kw in (("resnet50", {"num_classes": 1000}), ("wrn", {"depth": 28, "width": 10, "num_classes": 10})):
        for method in ("batchensemble", "rank1"):
            for k in (4, 10):
                for member_bn in (False, True):
                    cfg = VisionConfig(arch=arch, method=method, ensemble_size=k, member_batchnorm=member_bn, **kw)
                    rows.append({**parameter_report(cfg), "member_batchnorm_option": member_bn})
    for r in rows:
        per_component_entries = r["factor_entries"] // r["components"]
        r["one_component_mean_and_scale"] = 2 * per_component_entries
        r["one_component_pct"] = 100.0 * 2 * per_component_entries / r["deterministic"]
    report.write_results("vision_params", {**prov, "command": report.command(__spec__.name),
                                           "rows": rows}, path=args.out)
    print("| network | method | K | per-member BN | deterministic | extra | extra % | factors | member biases "
          "| member BN |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['arch']} | {r['method']} | {r['components']} | {r['member_batchnorm_option']} | "
              f"{r['deterministic']:,} | {r['extra']:,} | {r['extra_pct']:.2f} | {r['factors']:,} | "
              f"{r['member_biases']:,} | {r['member_batchnorm']:,} |")
    rn = next(r for r in rows if r["arch"] == "resnet50" and Method(r["method"]).stochastic)  # mean and scale
    print(f"\nResNet-50: {rn['factor_entries'] // rn['components']:,} factor entries per component; one component's "
          f"mean and scale = {rn['one_component_mean_and_scale']:,} parameters = {rn['one_component_pct']:.3f}%")


def render(r: dict) -> str:
    """docs/vision.md's figures:vision_params section, from the results JSON: rank-1 (the method with a posterior
    scale, ``Method.stochastic``) before BatchEnsemble."""
    from pipeline.tasks.vision import Method

    rows = r["rows"]
    shared = [x for x in rows if not x["member_batchnorm_option"]]
    per_member = {(x["arch"], x["method"], x["components"]): x for x in rows if x["member_batchnorm_option"]}
    names = {"resnet50": "ResNet-50", "wrn": "WRN-28-10"}
    methods = {"rank1": "rank-1", "batchensemble": "BatchEnsemble"}  # the methods' names in the table
    table = []
    for x in sorted(shared, key=lambda x: (x["arch"], not Method(x["method"]).stochastic, x["components"])):
        pm = per_member.get((x["arch"], x["method"], x["components"]))
        table.append([names.get(x["arch"], x["arch"]), methods.get(x["method"], x["method"]),
                      str(x["components"]), f"{x['deterministic']:,}", f"{x['extra']:,}", f"{x['extra_pct']:.2f}",
                      f"{x['factors']:,}", f"{x['member_biases']:,}", f"{pm['extra_pct']:.2f}" if pm else "n/a"])
    rn = next(x for x in rows if x["arch"] == "resnet50" and Method(x["method"]).stochastic)
    return (report.table(["network", "method", "K", "deterministic", "extra parameters", "extra %", "of which factors",
                    "head biases", "with per-member BN: extra %"], table)
            + f"\n\nResNet-50: {rn['factor_entries'] // rn['components']:,} factor entries per component; one "
              f"component's mean and scale = {rn['one_component_mean_and_scale']:,} parameters = "
              f"{rn['one_component_pct']:.3f}% of the deterministic network.")


if __name__ == "__main__":
    main()
