"""The reachable optimum of a benchmark: a "features oracle", the best risk its features allow, estimated.

    .venv/bin/python -m experiments.features_oracle --bench runs/data/bench8k --world runs/data/lc20k/mimic
        [--modes random --modes era] [--lstm-steps 6000] [--threads 1] [--json PATH]
    .venv/bin/python -m experiments.features_oracle --bench FULL --modes random --lstm-hidden 0 --truth T

Without ``--world`` the oracle is fitted to the benchmark's own training admissions (their true risk,
a tenth of them held out to choose and stop), the cheaper estimate for a benchmark too large to
extract a bigger world for (the full-scale one): the same features and generator, fewer admissions
than a separate, larger world would give, so its bound is looser by the half-data refit's gain or so.

The synthetic true risk p is a function of the generator's hidden state (severity path, trend,
age, comorbidity); the features keep quantile-binned values in hourly / daily bags, so the best
any model of them can do is q*(x) = E[p | x], whose NLL lies between the true risk's and every
model's. It cannot be computed exactly (it integrates the hidden path over everything the bins
and bags lose), so this script estimates it from above: models fitted to the TRUE RISK itself
(soft labels: the cross-entropy against p, minimised by E[p | x]) on a large, separate sample of
the same generator (``--world``: another seed, extracted with the benchmark's own vocabulary and
bins, so the features mean the same), with none of the label noise a benchmark's models fight.
Candidates, each early-stopped and chosen on a held-out tenth of the world by its mean
KL(p || q) (never on the benchmark's test split):

- ``gbm``: gradient boosting on the baselines' featurizer (``pipeline.tasks.mortality.baselines``), with extra
  recent-count blocks for the last 2 and 6 hours (soft labels by duplicating every admission with
  labels 1 and 0 weighted p and 1 - p);
- ``lstm``: the deterministic LSTM of ``pipeline.tasks.mortality`` (the architecture every neural variant
  shares) trained on the soft labels, widths 64 and 128.

Its NLL is an upper bound on the optimum's; the bound's slack is estimated by refitting the best
candidate on half of the world (how much it still gains from data). For each split mode it
prints, on the benchmark's val and test admissions: the true risk, each oracle candidate and the
chosen one (NLL, AUC-PR, ECE, mean KL(p || q)), and writes the JSON. The world's extraction
with the benchmark's vocabulary is cached under ``BENCH/oracle-<mode>/``.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np

from benchmarks.baselines import subset
from pipeline.bayes import metrics
from pipeline.core import fileio
from pipeline.data import features
from pipeline.tasks.mortality.baselines.featurize import Featurizer, Rows
from pipeline.tasks.mortality.truth import find_truth, load_true_risk

RECENT = (24.0, 6.0, 2.0)  # recent-count blocks of the oracle's featurizer (hours before the prediction time)


def kl_bernoulli(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """KL(Bern(p) || Bern(q)) per admission (nats): the NLL a predictor q loses to p in expectation."""
    p = np.clip(p, 1e-12, 1 - 1e-12)
    q = np.clip(q, 1e-12, 1 - 1e-12)
    return p * np.log(p / q) + (1 - p) * np.log((1 - p) / (1 - q))


def scores(q: np.ndarray, labels: np.ndarray, truth: np.ndarray | None) -> dict:
    """NLL, AUC-PR, ECE of probabilities q against labels, and mean KL(p || q) against the true risk."""
    q = np.clip(q, 1e-7, 1 - 1e-7)
    out = {"nll": float(metrics.nll_from_probs(labels, q).mean()), "auc_pr": metrics.average_precision(labels, q),
           "ece": metrics.ece(labels, q)}
    if truth is not None:
        out["kl"] = float(kl_bernoulli(truth, q).mean())
    return out


def world_features(world: Path, bench_fdir: Path, cache: Path) -> tuple[features.FeatureSet, np.ndarray]:
    """The world's admissions extracted with the benchmark's vocabulary and bins, and their true risk."""
    from pipeline.serving.score import extract_cohort

    cohort = cache / "cohort.parquet"
    if not cohort.exists():
        extract_cohort(world, fileio.read_json(bench_fdir / "manifest.json"),
                       fileio.read_json(bench_fdir / "vocab.json"), cache)
    fs = features.load_split(cohort, require_labels=False)
    risk = load_true_risk(world / "_truth" / "truth.csv.gz", cache / "_private" / "link.csv", fs.keys)
    return fs, risk


def holdout(keys: np.ndarray, fraction: float = 0.1) -> np.ndarray:
    """A fixed pseudo-random tenth of the admissions, by key (True = held out)."""
    h = np.array([int(k[:8], 16) for k in keys], dtype=np.int64)
    return (h % 1000) < int(1000 * fraction)


class MultiWindow:
    """The baselines' featurizer with recent-count blocks for several windows (RECENT)."""

    def __init__(self, vocab: dict, prediction_hours: float | None, fit: features.FeatureSet) -> None:
        self.parts = [Featurizer.from_vocab(vocab, prediction_hours, h).fit(fit) for h in RECENT]

    def matrix(self, fs: features.FeatureSet) -> Rows:
        first = self.parts[0]
        v = first.n_tokens
        base = first.matrix(fs)
        rows, cols, vals, width = [base.rows], [base.cols], [base.vals], base.shape[1]
        for part in self.parts[1:]:
            x = part.matrix(fs)
            keep = (x.cols >= v) & (x.cols < 2 * v)  # its recent block only
            rows.append(x.rows[keep])
            cols.append(x.cols[keep] - v + width)
            vals.append(x.vals[keep])
            width += v
        return Rows(np.concatenate(rows), np.concatenate(cols), np.concatenate(vals), (base.shape[0], width))


def soft_gbm(x_fit: Rows, p_fit: np.ndarray, x_stop: Rows, p_stop: np.ndarray, columns: np.ndarray, leaves: int,
             seed: int = 0):
    """HistGradientBoosting on soft labels (each row twice: label 1 weight p, label 0 weight 1 - p),
    early-stopped on the held-out rows (soft too) and cut to the best round; returns (predict, rounds)."""
    from sklearn.ensemble import HistGradientBoostingClassifier

    from pipeline.tasks.mortality.baselines.fit import tree_predictor

    def doubled(x: Rows, p: np.ndarray):
        d = x.dense(columns)
        return np.vstack([d, d]), np.r_[np.ones(len(p)), np.zeros(len(p))], np.r_[p, 1 - p]

    xf, yf, wf = doubled(x_fit, p_fit)
    xs, ys, ws = doubled(x_stop, p_stop)
    est = HistGradientBoostingClassifier(learning_rate=0.05, max_iter=3000, max_leaf_nodes=leaves, min_samples_leaf=40,
                                         l2_regularization=1.0, early_stopping=True, n_iter_no_change=60,
                                         scoring="loss", random_state=seed)
    est.fit(xf, yf, sample_weight=wf, X_val=xs, y_val=ys, sample_weight_val=ws)
    rounds = int(np.argmax(est.validation_score_))
    pred = tree_predictor(est, columns, rounds)
    return (lambda x: 1 / (1 + np.exp(-pred.logits(x)))), rounds


def soft_lstm(fit: features.FeatureSet, p_fit: np.ndarray, stop: features.FeatureSet, p_stop: np.ndarray,
              vocab_sizes: dict, hidden: int, steps: int, seed: int = 0, eval_every: int = 500):
    """The deterministic LSTM trained on soft labels (BCE against p), the best state on the held-out KL."""
    import torch

    from pipeline.bayes.objective import Objective
    from pipeline.data import batches
    from pipeline.engine.loop import train_step
    from pipeline.tasks.mortality import build_model, model_config, predict

    torch.manual_seed(seed)
    model = build_model("deterministic", model_config({"lstm_hidden": hidden}, vocab_sizes))
    soft = features.FeatureSet(**{**fit.__dict__, "label": p_fit.astype(np.float32)})
    objective = Objective(model, "average", len(soft), 1e-4, 1)
    opt = torch.optim.Adam(model.parameters(), lr=3e-4)
    params = [q for q in model.parameters() if q.requires_grad]
    sampler = batches.TrainSampler(len(soft), 64, seed)
    best, best_state, curve = math.inf, None, []
    for step in range(1, steps + 1):
        model.train()
        train_step(objective, opt, params, batches.collate(soft, sampler.indices(step - 1, 0, 1)), 1.0, 7.3)
        if step % eval_every == 0 or step == steps:
            q = metrics.sigmoid(predict.feature_logits(model, stop, 1, 256)[0, 0])
            kl = float(kl_bernoulli(p_stop, q).mean())
            curve.append((step, kl))
            if kl < best:
                best, best_state = kl, {k: v.clone() for k, v in model.state_dict().items()}
    model.load_state_dict(best_state)

    def prob(fs: features.FeatureSet) -> np.ndarray:
        return metrics.sigmoid(predict.feature_logits(model, fs, 1, 256)[0, 0])

    return prob, curve


def run_mode(bench: Path, world: Path, mode: str, args) -> dict:
    fdir = bench / f"features-{mode}"
    vocab = fileio.read_json(fdir / "vocab.json")
    hours = (fileio.read_json(fdir / "manifest.json").get("config") or {}).get("prediction_hours")
    sizes = {"tokens": len(vocab["tokens"]), "context": len(vocab["context"])}
    t0 = time.perf_counter()
    truth_file = find_truth(fdir, args.truth)
    if world is None:  # the benchmark's own training admissions (disjoint from val and test) as the world
        wfs = features.load_split(fdir / "train.parquet")
        wrisk = load_true_risk(truth_file, fdir / "_private" / "link.csv", wfs.keys)
    else:
        wfs, wrisk = world_features(world, fdir, bench / f"oracle-{mode}")
    held = holdout(wfs.keys)
    fit_idx, stop_idx = np.flatnonzero(~held), np.flatnonzero(held)
    fit, stop = subset(wfs, fit_idx), subset(wfs, stop_idx)
    p_fit, p_stop = wrisk[fit_idx], wrisk[stop_idx]
    splits = {}
    for split in ("val", "test"):
        fs = features.load_split(fdir / f"{split}.parquet")
        splits[split] = (fs, load_true_risk(truth_file, fdir / "_private" / "link.csv", fs.keys))
    out = {"mode": mode, "world_admissions": len(wfs), "fit": len(fit), "stop": len(stop),
           "extract_seconds": time.perf_counter() - t0, "candidates": {}}
    for split, (fs, risk) in splits.items():
        out.setdefault("true_risk", {})[split] = scores(risk, fs.label, risk)
    mw = MultiWindow(vocab, hours, fit)
    x_fit, x_stop = mw.matrix(fit), mw.matrix(stop)
    counts = x_fit.column_counts()
    columns = np.flatnonzero(counts >= 20).astype(np.int64)
    cands = {}
    for leaves in (15, 63):
        t = time.perf_counter()
        prob, rounds = soft_gbm(x_fit, p_fit, x_stop, p_stop, columns, leaves)
        cands[f"gbm-{leaves}"] = (lambda fs, prob=prob: prob(mw.matrix(fs)), {"rounds": rounds,
                                                                              "seconds": time.perf_counter() - t})
    for hidden in args.lstm_hidden:
        t = time.perf_counter()
        prob, curve = soft_lstm(fit, p_fit, stop, p_stop, sizes, hidden, args.lstm_steps)
        cands[f"lstm-{hidden}"] = (prob, {"curve": curve, "seconds": time.perf_counter() - t})
    for name, (prob, info) in cands.items():
        rec = {"stop_kl": float(kl_bernoulli(p_stop, prob(stop)).mean()), **info}
        for split, (fs, risk) in splits.items():
            rec[split] = scores(prob(fs), fs.label, risk)
        out["candidates"][name] = rec
        print(f"{mode} {name}: held-out KL {rec['stop_kl']:.5f}; " + "; ".join(
            f"{s} nll {rec[s]['nll']:.4f} auc-pr {rec[s]['auc_pr']:.4f} ece {rec[s]['ece']:.4f} kl {rec[s]['kl']:.4f}"
            for s in splits), flush=True)
    chosen = min(out["candidates"], key=lambda n: out["candidates"][n]["stop_kl"])
    out["chosen"] = chosen
    # slack: the chosen kind refitted on half of the fit rows (more data's gain)
    half = fit_idx[: len(fit_idx) // 2]
    hfit, hp = subset(wfs, half), wrisk[half]
    if chosen.startswith("gbm"):
        prob, _ = soft_gbm(mw.matrix(hfit), hp, x_stop, p_stop, columns, int(chosen.split("-")[1]))
        hprob = lambda fs: prob(mw.matrix(fs))  # noqa: E731
    else:
        hprob, _ = soft_lstm(hfit, hp, stop, p_stop, sizes, int(chosen.split("-")[1]), args.lstm_steps)
    out["half_data"] = {"stop_kl": float(kl_bernoulli(p_stop, hprob(stop)).mean()),
                        **{s: scores(hprob(fs), fs.label, r) for s, (fs, r) in splits.items()}}
    for split in splits:
        t, o = out["true_risk"][split], out["candidates"][chosen][split]
        print(f"{mode} {split}: true risk nll {t['nll']:.4f} auc-pr {t['auc_pr']:.4f}; oracle ({chosen}) nll "
              f"{o['nll']:.4f} auc-pr {o['auc_pr']:.4f} ece {o['ece']:.4f} kl {o['kl']:.4f}; half data kl "
              f"{out['half_data'][split]['kl']:.4f}", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", type=Path, required=True, help="directory holding features-<mode> of the benchmark")
    ap.add_argument("--world", type=Path, default=None, help="a larger synthetic MIMIC-III of another seed "
                    "(unset: the benchmark's own training admissions, a cheaper estimate for a large benchmark)")
    ap.add_argument("--truth", type=Path, default=None, help="the world's truth.csv.gz [found from the features' "
                    "CSV source; give it for features extracted from a stage]")
    ap.add_argument("--modes", action="append", help="split modes [random, era]")
    ap.add_argument("--lstm-steps", type=int, default=6000, help="steps of each soft-label LSTM")
    ap.add_argument("--lstm-hidden", type=int, action="append",
                    help="LSTM widths [64, 128]; 0 alone: no LSTM candidate (the gbm ones only, minutes not hours)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--json", type=Path, default=None, help="results JSON [BENCH/oracle.json]")
    args = ap.parse_args()
    args.lstm_hidden = [h for h in (args.lstm_hidden or [64, 128]) if h > 0]
    import torch

    torch.set_num_threads(args.threads)
    results = {m: run_mode(args.bench, args.world, m, args) for m in (args.modes or ["random", "era"])}
    path = args.json or args.bench / "oracle.json"
    fileio.write_text(path, json.dumps(results, indent=1, default=float) + "\n")
    print(f"results: {path}")


if __name__ == "__main__":
    main()
