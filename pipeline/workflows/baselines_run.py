"""Training of the classical baselines (``train --model logreg|gbm``), logged like any run.

The same inputs as the LSTMs (``train`` / ``val`` Parquet, ``vocab.json``, ``manifest.json``),
featurized by ``baselines.Featurizer`` and fitted by ``tasks.mortality.baselines.fit`` with every choice made on
the validation split's selection half; then, as ``workflows.train`` does for an LSTM, the validation metrics
of the chosen model, the refer measure and threshold (a point model's draws agree: it refers by its
predictive entropy, its only uncertainty), the policy from both halves (recalibration on the calibration
half, the decision threshold, the refer rule with its guarantee: ``bayes.referral.policy``),
``model_info.json``, ``train_config.json``, the run's copies of the vocabulary and manifest, the model file
(``baseline.npz``, ``runs.formats``) and the MLflow pyfunc with the risk table. ``evaluate``, ``compare``,
``score``, serve and ``spark_udf`` then take the run like any other. Torch is never imported here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from pipeline.bayes.referral.config import ReferralConfig
from pipeline.core import fileio
from pipeline.core.contracts import DEFAULT_BATCH
from pipeline.data.task import describe
from pipeline.engine.checkpoints import check_fresh
from pipeline.runs import record, store
from pipeline.runs.formats import BASELINE_FILE, FORMAT_TAG, ModelFormat
from pipeline.runs.tracking import make_tracker, run_id_line
from pipeline.tasks.mortality import validation
from pipeline.tasks.mortality.baselines.config import BaselineConfig, BaselineKind
from pipeline.tasks.mortality.baselines.featurize import Featurizer
from pipeline.tasks.mortality.baselines.fit import fit_gbm, fit_logreg
from pipeline.tasks.mortality.baselines.model import BaselineModel
from pipeline.tasks.mortality.finish import shift_artifacts
from pipeline.tasks.mortality.inputs import load_inputs
from pipeline.tasks.mortality.task import split_validation
from pipeline.tasks.mortality.train_config import TrainConfig
from pipeline.tasks.mortality.truth import features_true_risk

FITS = {BaselineKind.LOGREG: fit_logreg, BaselineKind.GBM: fit_gbm}  # kind -> fitting function


@dataclass
class BaselineResult:
    """What a baseline training run produced."""

    run_id: str | None  # MLflow run id (None without tracking)
    kind: str  # logreg | gbm
    val_nll: float  # validation NLL of the chosen model
    chosen: dict  # the settings validation chose (C; tree size and rounds)
    refer_threshold: float  # threshold of the refer measure (a point model's: entropy) stored with the model
    out_dir: Path  # run directory
    model_file: Path  # baseline.npz
    val_metrics: dict = field(default_factory=dict)  # validation metrics of the chosen model
    seconds: dict = field(default_factory=dict)  # wall time of featurizing and fitting
    policy: object | None = None  # bayes.referral.policy.Policy (None: no calibration half)
    no_policy: str | None = None  # why it has none, in words (tasks.mortality.validation.no_policy)

    def summary(self) -> str:
        """What ``cli.py train`` prints for a baseline: the settings chosen, the fit, the run id."""
        chosen = " ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in self.chosen.items()
                          if k != "val_nll")
        from pipeline.workflows.train import policy_lines

        lines = [f"{self.kind}: {chosen} best_val_nll={self.val_nll:.6f} uncertainty_cut={self.refer_threshold:.6g} "
                 f"checkpoint={self.model_file}", *policy_lines(self.policy, self.no_policy)]
        return "\n".join(lines) + "\n" + run_id_line(self.run_id)


def prediction_hours(fdir: Path) -> float | None:
    """The features' prediction time (hours after ADMITTIME) from manifest.json, None when absent."""
    manifest = fdir / store.MANIFEST
    if not manifest.exists():
        return None
    return (fileio.read_json(manifest).get("config") or {}).get("prediction_hours")


def train_baseline(features_dir: Path | str, kind: BaselineKind | str, cfg: BaselineConfig | None = None, *,
                   out_dir: Path | str | None = None, tracking: bool = True, experiment: str | None = None,
                   run_name: str | None = None, artifact_location: str | None = None,
                   refer_fraction: float = TrainConfig.refer_fraction,
                   calibration_share: float = TrainConfig.calibration_share,
                   referral: ReferralConfig | None = None) -> BaselineResult:
    """Fit ``kind`` on ``features_dir``'s train split, choosing on its val split; log it as a run.

    The run directory defaults to ``runs/train/<run id>`` (untracked: ``runs/train/<kind>-s<seed>``);
    one that already holds a model file is an error.
    """
    cfg = cfg or BaselineConfig()
    kind = BaselineKind(kind)
    fdir = Path(features_dir)
    check_fresh(out_dir, BASELINE_FILE)
    t0 = time.perf_counter()
    vocab_sizes, train_fs, val_all = load_inputs(fdir)
    val_fs, cal_fs = split_validation(val_all, calibration_share)  # choices on one half, calibration on the other
    vocab = fileio.read_json(fdir / store.VOCAB)
    featurizer = Featurizer.from_vocab(vocab, prediction_hours(fdir), cfg.recent_hours).fit(train_fs)
    xtr, xva = featurizer.matrix(train_fs), featurizer.matrix(val_fs)
    t1 = time.perf_counter()
    predictor, chosen = FITS[kind](featurizer, xtr, train_fs.label, xva, val_fs.label, cfg)
    t2 = time.perf_counter()
    model = BaselineModel(kind, featurizer, predictor)
    logits = model.feature_logits(val_fs, 1)  # (1, 1, N)
    val = validation.validation_summary(logits, val_fs.label, refer_fraction,
                                        true_risk=features_true_risk(fdir, val_fs), model_kind=kind.value)
    settings = {k: v for k, v in chosen.items() if k != "search"}
    config = replace(referral or ReferralConfig(), fraction=refer_fraction)
    words = describe(fdir, missing_ok=True)
    policy = validation.fit_run_policy(model, val_fs, cal_fs, samples=1, batch_size=DEFAULT_BATCH, max_bags=None,
                                       max_tokens=None, seed=cfg.seed, context_vocab=vocab["context"], config=config,
                                       words=words)
    said = {"task_words": words.to_json(),
            "no_policy": None if policy else validation.no_policy(val_fs, cal_fs, config, calibration_share, words)}
    model.meta = {"model_config": settings, "train_config": cfg.to_dict(), "val_nll": float(val.metrics["nll"]),
                  **val.checkpoint_entries(), "rounds": settings.get("rounds"),
                  "policy": policy and policy.to_dict(), "calibration_share": calibration_share, **said}
    tracker = make_tracker(tracking, experiment=experiment, run_name=run_name, artifact_location=artifact_location)
    with tracker:  # the run ends KILLED on Ctrl-C, FAILED on any other exception, else FINISHED
        out = Path(out_dir) if out_dir is not None else Path("runs") / "train" / (tracker.run_id or
                                                                                 f"{kind.value}-s{cfg.seed}")
        check_fresh(out, BASELINE_FILE)
        record.copy_inputs(fdir, out)
        model.save(out / BASELINE_FILE)
        seconds = {"featurize": t1 - t0, "fit": t2 - t1}
        info = {"model_kind": kind.value, FORMAT_TAG: ModelFormat.BASELINE.value, "model_config": settings,
                "train_config": cfg.to_dict(), "vocab_sizes": vocab_sizes, "search": chosen.get("search", []),
                "seconds": seconds, "policy": policy and policy.to_dict(arrays=False), **said}
        fileio.write_json(out / store.TRAIN_CONFIG, {"model_kind": kind.value, **cfg.to_dict()})
        tracker.log_params({"model_kind": kind.value, "baseline": cfg.to_dict(), "chosen": settings,
                            "referral": (referral or ReferralConfig()).to_dict(), "n_train": len(train_fs),
                            "n_val": len(val_fs), "features": record.features_id(fdir)})
        tracker.set_tag(FORMAT_TAG, ModelFormat.BASELINE.value)
        extra = record.write_artifacts(out, shift_artifacts(policy, cal_fs, fdir, cfg.seed))
        record.write_run(tracker, out, fdir=fdir, info=info, validation=val, checkpoint=out / BASELINE_FILE,
                         score_samples=1, step=0, artifacts=(out / store.TRAIN_CONFIG, *extra),
                         metrics={"featurize_seconds": seconds["featurize"], "fit_seconds": seconds["fit"]})
    return BaselineResult(tracker.run_id, kind.value, float(val.metrics["nll"]), settings, val.refer_threshold, out,
                          out / BASELINE_FILE, dict(val.metrics), seconds, policy, said["no_policy"])


def is_baseline(model: str) -> bool:
    """Whether ``train --model`` names a classical baseline."""
    return model in {k.value for k in BaselineKind}

