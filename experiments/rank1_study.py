"""Why rank-1's spread does not beat a deterministic model's entropy: one change at a time, on validation.

    .venv/bin/python -m experiments.rank1_study --bench runs/exp/u8k --synth runs/data/bench8k/mimic \
        --out runs/exp/study \
        [--variants signs --variants prior03 ...] [--seeds 0 --seeds 1 --seeds 2] [--jobs 2] \
        [--cache DIR] [--json PATH]

Issue 26, Build 5: if rank-1's best referral gain (against the synthetic truth) is not above the
deterministic LSTM's entropy, find out why. Each variant changes one setting of the default rank-1
model (``rank1-gaussian``) and is trained by the benchmark grid (``workflows.grid.run_grid``) with the
settings of ``--bench``'s grid (``--max-steps``, ``--eval-every``: 4,000 and 250 as ``benchmark-models
--max-steps 4000`` ran it), on ``--bench``'s random-split
features (linked, not re-extracted), for the same seeds. The default's runs are ``--bench``'s own
``rank1-gaussian`` runs.

Variants (``VARIANTS``):
- ``signs``: BatchEnsemble's random-sign factor start under a N(1, 1) prior (the ``rank1-signs``
  variant) instead of the normal start around 1 under N(1, 0.1);
- ``prior03``: a wider factor prior, N(1, 0.3);
- ``k8``: K = 8 mixture components instead of 4;
- ``permember``: per-member factor draws in training (one draw per member per batch, as evaluation
  draws), instead of one draw per admission;
- ``init05``: an initial posterior stddev of 0.05 instead of 1e-3 (added after the first four: their
  trained factor scales had stayed near their start, 3.4e-3 against the prior's 0.1).

The rule, written before the first result: per variant and seed, the referral gain of the measure the
run's refer flag would use (the one of highest validation gain, as ``choose_refer_measure`` picks) and
the mixture NLL, both on validation; the variant's difference from the default, paired by seed, with a
95% interval from 1,000 bootstrap resamples of the validation admissions shared by every pair. A
variant is adopted as the rank-1 default only when its gain difference's interval lies above 0 and
its NLL difference's interval lies below +0.002 (no more than a rounding's worse); it is then checked
on test before the default changes. Otherwise the default stays and the report says why.

Every run's recorded settings are printed beside it, so that a variant whose change did not reach the
model (a setting the training ignores) shows as such instead of as a null result.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np

from experiments.paired_compare import _features, find_runs
from experiments.uncertainty_truth import gain_replicates, run_summary
from pipeline.bayes import metrics
from pipeline.core import fileio
from pipeline.tasks.mortality.validation import choose_refer_measure

DEFAULT = "rank1-gaussian"  # the grid variant every study variant changes one setting of
VARIANTS: dict[str, dict] = {  # name -> MortalityConfig settings over the default's
    "signs": {"factor_init": "random_sign", "prior_stddev": 1.0},
    "prior03": {"prior_stddev": 0.3},
    "k8": {"components": 8},
    "permember": {"sampling": "per_member"},
    "init05": {"init_stddev": 0.05},
}
GAIN_MARGIN = 0.0  # the gain difference's lower bound must exceed this
NLL_MARGIN = 0.002  # the NLL difference's upper bound must stay below this


def train_variant(bench: Path, synth: Path, out: Path, name: str, seeds: tuple[int, ...], jobs: int,
                  steps: dict) -> Path:
    """The variant's grid at ``out/name`` (random split only, ``bench``'s features linked in)."""
    from pipeline.workflows.grid import RUNS_FILE, GridConfig, run_grid

    root = out / name
    root.mkdir(parents=True, exist_ok=True)
    link = root / "features-random"
    if not link.exists():
        os.symlink((bench / "features-random").resolve(), link)
    done = {r["seed"] for r in fileio.read_json(root / RUNS_FILE)} if (root / RUNS_FILE).exists() else set()
    todo = tuple(s for s in seeds if s not in done)
    if todo:
        cfg = GridConfig(seeds=todo, variants=(DEFAULT,), split_modes=("random",), jobs=jobs,
                         experiment=f"study-{name}", model_overrides=VARIANTS[name], **steps)
        run_grid(synth, root, cfg)  # the source is only checked: the features are linked
    return root


def val_record(run: dict, fs, risk, idx: np.ndarray, cache: Path | None) -> dict:
    """A run on validation: its chosen measure, that measure's referral gain and the mixture NLL, each
    with its replicates over the bootstrap resamples ``idx`` (B, N), computed once per run."""
    summary, logits = run_summary(run, fs, "val", cache)
    chosen = choose_refer_measure(summary, risk)[0].value
    error, score = metrics.kl_to_truth(risk, summary.mean), summary.measure(chosen)
    nll = metrics.mixture_nll_per_example(logits.reshape(-1, logits.shape[-1]), fs.label)  # (N,)
    return {"chosen": chosen, "gain": metrics.referral_gain(error, score),
            "gain_reps": gain_replicates(error, score, idx), "nll": float(nll.mean()),
            "nll_reps": nll[idx].mean(axis=1)}


def recorded(run: dict) -> dict:
    """The run's model settings that differ from the default rank-1's (as its checkpoint records them)."""
    from pipeline.runs.store import client
    from pipeline.tasks.mortality.variants import VARIANT_SPECS, model_defaults

    params = client().get_run(run["run_id"]).data.params
    defaults = {**model_defaults(), **{f"model.{k}": str(v) for k, v in VARIANT_SPECS[DEFAULT][1].items()}}
    return {k[len("model."):]: v for k, v in params.items()
            if k.startswith("model.") and k in defaults and str(v) != defaults[k]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", type=Path, required=True, help="benchmark-models --out with rank1-gaussian runs")
    ap.add_argument("--synth", type=Path, required=True, help="the synthetic source of --bench's features")
    ap.add_argument("--out", type=Path, required=True, help="directory of the variants' grids")
    ap.add_argument("--variants", action="append", choices=list(VARIANTS), default=None, help="default: all")
    ap.add_argument("--seeds", action="append", type=int, default=None, help="default: 0, 1, 2")
    ap.add_argument("--max-steps", type=int, default=4000, help="training steps: --bench's grid's (default 4000)")
    ap.add_argument("--eval-every", type=int, default=250, help="validation interval: --bench's grid's (default 250)")
    ap.add_argument("--jobs", type=int, default=2, help="parallel training processes")
    ap.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples of validation admissions")
    ap.add_argument("--cache", type=Path, default=None, help="cache of per-run summaries (.npz)")
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    args = ap.parse_args()
    seeds = tuple(args.seeds or (0, 1, 2))
    names = args.variants or list(VARIANTS)
    steps = {"max_steps": args.max_steps, "eval_every": args.eval_every}
    _, fs, risk, _ = _features(args.bench, "random", "val")
    if risk is None:
        raise SystemExit(f"{args.bench}/features-random: no true risk (a synthetic source is needed)")
    idx = metrics.bootstrap_indices(len(fs), args.bootstrap, 0)  # (B, N), shared by every pair
    base = {r["seed"]: r for r in find_runs(args.bench) if r["model"] == DEFAULT and r["split_mode"] == "random"}
    missing = sorted(set(seeds) - set(base))
    if missing:
        raise SystemExit(f"{args.bench}: no {DEFAULT} random-split run for seed(s) {missing}")
    ref = {s: val_record(base[s], fs, risk, idx, args.cache) for s in seeds}
    out: dict = {"bench": str(args.bench), "settings": steps, "rule": {"gain_margin": GAIN_MARGIN,
                 "nll_margin": NLL_MARGIN}, "n_val": len(fs), "deaths_val": int(fs.label.sum()), "variants": {}}
    print(f"validation (random split): n={len(fs)}, deaths={int(fs.label.sum())}; referral gain against "
          f"KL(true || predicted) of each run's chosen measure; differences paired by seed")
    rows = {DEFAULT: ref}
    for name in names:
        root = train_variant(args.bench, args.synth, args.out, name, seeds, args.jobs, steps)
        runs = {r["seed"]: r for r in find_runs(root) if r["split_mode"] == "random"}
        rows[name] = {s: val_record(runs[s], fs, risk, idx, args.cache) | {"recorded": recorded(runs[s])}
                      for s in seeds}
    print("| variant | recorded settings | seeds | val nll | chosen | chosen gain | gain - default [95% CI] "
          "| nll - default [95% CI] | adopt |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, recs in rows.items():
        gains = {s: r["gain"] for s, r in recs.items()}
        row = {"seeds": list(seeds), "nll": float(np.mean([r["nll"] for r in recs.values()])),
               "chosen": [recs[s]["chosen"] for s in seeds], "chosen_gain": float(np.mean(list(gains.values()))),
               "recorded": recs[seeds[0]].get("recorded", {}), "per_seed": {
                   s: {"nll": recs[s]["nll"], "chosen": recs[s]["chosen"], "gain": gains[s]} for s in seeds}}
        cells = ["", ""]
        if name != DEFAULT:
            g_reps = [recs[s]["gain_reps"] - ref[s]["gain_reps"] for s in seeds]  # paired by seed, (B,) each
            n_reps = [recs[s]["nll_reps"] - ref[s]["nll_reps"] for s in seeds]
            g_diff = [gains[s] - ref[s]["gain"] for s in seeds]
            n_diff = [recs[s]["nll"] - ref[s]["nll"] for s in seeds]
            g_ci = metrics.percentile_interval(np.mean(g_reps, axis=0))
            n_ci = metrics.percentile_interval(np.mean(n_reps, axis=0))
            row["gain_diff"] = {"diff": float(np.mean(g_diff)), "ci": [float(g_ci[0]), float(g_ci[1])]}
            row["nll_diff"] = {"diff": float(np.mean(n_diff)), "ci": [float(n_ci[0]), float(n_ci[1])]}
            row["adopt"] = bool(g_ci[0] > GAIN_MARGIN and n_ci[1] < NLL_MARGIN)
            cells = [f"{row['gain_diff']['diff']:+.3f} [{g_ci[0]:+.3f}, {g_ci[1]:+.3f}]",
                     f"{row['nll_diff']['diff']:+.4f} [{n_ci[0]:+.4f}, {n_ci[1]:+.4f}]"]
        said = ", ".join(f"{k}={v}" for k, v in sorted(row["recorded"].items())) or "(default)"
        print(f"| {name} | {said} | {len(seeds)} | {row['nll']:.4f} | {','.join(row['chosen'])} | "
              f"{row['chosen_gain']:+.3f} | {cells[0]} | {cells[1]} | {'yes' if row.get('adopt') else 'no'} |")
        out["variants"][name] = row
    if args.json:
        fileio.write_json(args.json, out)
        print(f"\njson: {args.json}")


if __name__ == "__main__":
    main()
