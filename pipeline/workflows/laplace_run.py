"""A Laplace run: subnetwork Laplace fitted on a trained (MAP) run, logged as a run of its own.

``fit_laplace_run`` loads the MAP run (any model URI or checkpoint file, ``runs.load.load_run``), checks it
is a deterministic model, and fits the task-free algorithm (``bayes.laplace.fit.fit_laplace_batches``) on
its task's training data: a mortality run's training features (``tasks.mortality.laplace.fit_laplace``),
an image run's training images. The prior precision comes from the validation split unless given. A
mortality run then chooses the refer measure and threshold on validation as training does (with the probit
predictive from the Gaussian logit N(μ, σ²) of each admission: its spread, percentiles and mutual
information; with ``samples``, from the Monte Carlo draws); an image run records its validation metrics.
The run is written as every run is (``runs.record.write_run``): ``best.pt`` (the Laplace checkpoint with
its MAP task's key, which ``runs.formats.load_model`` reads like any model), ``model_info.json``, the fit
report, for a mortality run the training vocabulary, manifest and pyfunc, in a new MLflow run tagged with
its parent (``mlflow.parentRunId``). Evaluate, compare, score and the pyfunc then take it like any run;
its rows in ``compare`` read ``laplace-<selection>-<S>``.
"""

from __future__ import annotations

import logging
import math
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from pipeline.bayes.laplace.config import LaplaceConfig, Predictive
from pipeline.bayes.laplace.errors import LaplaceError
from pipeline.bayes.laplace.fit import LaplaceReport
from pipeline.bayes.laplace.model import LAPLACE_FORMAT, save_laplace
from pipeline.bayes.referral.config import ReferralConfig
from pipeline.core import fileio
from pipeline.core.configs import config_dict
from pipeline.core.devices import resolve_device
from pipeline.data import features
from pipeline.engine import predict
from pipeline.engine.checkpoints import BEST, CHECKPOINT_FORMAT
from pipeline.runs import record, store
from pipeline.runs.info import ModelInfo, RunKind
from pipeline.runs.load import Run, load_run, resolve_features
from pipeline.runs.store import DATASET_TAG, LABEL_TAG, VISION_EXPERIMENT
from pipeline.runs.tracking import make_tracker, run_id_line
from pipeline.runs.truth import features_true_risk
from pipeline.tasks.mortality.laplace import fit_laplace
from pipeline.tasks.mortality.task import split_validation
from pipeline.tasks.mortality.train_config import TrainConfig

log = logging.getLogger(__name__)

DEFAULT_EXPERIMENT = store.LAPLACE_EXPERIMENT  # MLflow experiment of Laplace runs when none is given
REPORT = "laplace_report.json"  # the fit report artifact
PARENT_TAG = "mlflow.parentRunId"  # MLflow's own tag: the UI nests the run under its MAP run

assert LAPLACE_FORMAT == CHECKPOINT_FORMAT, "a Laplace best.pt is read by runs.checkpoint"


@dataclass
class LaplaceRunResult:
    """What ``fit_laplace_run`` produced."""

    run_id: str | None  # the new MLflow run (None without tracking)
    parent_run_id: str | None  # the MAP run
    label: str  # laplace-<selection>-<S> (compare's row name)
    report: LaplaceReport  # the fit report
    refer_threshold: float  # threshold of the refer measure chosen on validation
    val_metrics: dict  # validation metrics of the Laplace predictive at score_samples draws
    out_dir: Path  # the run's files (best.pt, model_info.json, ...)
    policy: object | None = None  # bayes.referral.policy.Policy of a mortality run (None: no calibration half)

    def summary(self) -> str:
        """What ``cli.py laplace`` prints: the fit in one line, then the run id."""
        r = self.report
        refer = "" if self.refer_threshold != self.refer_threshold else (  # NaN: a vision run refers nobody
            f"uncertainty cut {self.refer_threshold:.6g}, ")
        return (f"{self.label}: S={r.subnet_size} of D={r.n_params} weights, prior precision {r.prior_precision:.4g} "
                f"({r.prior_source}), validation NLL {self.val_metrics['nll']:.4f} (MAP {r.val_nll_map:.4f}), "
                f"{refer}files in {self.out_dir}\n" + "".join(line + "\n" for line in self._policy())
                + run_id_line(self.run_id))

    def _policy(self) -> list[str]:
        if self.refer_threshold != self.refer_threshold:  # a vision run: no decisions
            return []
        from pipeline.workflows.train import policy_lines

        return policy_lines(self.policy)


def fit_laplace_run(map_uri: str, cfg: LaplaceConfig, *, data: Path | str | None = None,
                    samples: int | None = None, out_dir: Path | str | None = None, tracking: bool = True,
                    experiment: str | None = None, run_name: str | None = None,
                    device: str | None = None, threads: int | None = None,
                    referral: ReferralConfig | None = None) -> LaplaceRunResult:
    """Fit Laplace on the MAP run ``map_uri`` and log it (see the module docstring), on ``device``
    (``pipeline.core.devices.resolve_device``: None is cuda when available, else cpu; mortality runs),
    with ``threads`` torch intra-op threads (None: torch's default).

    ``samples``: Monte Carlo draws of the linearized model per admission, stored as the run's
    ``score_samples``; with it the predictive is Monte Carlo (``cfg.predictive`` = mc), without
    it the probit approximation with one draw.

    A vision run (tag ``run_kind`` = vision, or an image model's checkpoint file) is fitted on its
    images (on the CPU); ``data`` is then a CIFAR directory.
    """
    if threads:
        import torch

        torch.set_num_threads(threads)
    device = resolve_device(device)  # a device not here fails first
    with tempfile.TemporaryDirectory(prefix="laplace-") as tmp:
        rm = load_run(map_uri, tmp)
    _check_map(map_uri, rm.info)
    cfg, draws = _predictive(cfg, samples)
    if rm.kind is RunKind.VISION:
        return _fit_vision(rm, map_uri, cfg, draws, data=data, samples=samples, out_dir=out_dir, tracking=tracking,
                           experiment=experiment, run_name=run_name)
    rm.model = rm.model.to(device)
    fdir = resolve_features(rm, data)
    values = rm.model.value_channel  # a value-channel model reads bag_values and needs it
    train_fs = features.load_split(fdir / "train.parquet", values=values)
    val_all = features.load_split(fdir / "val.parquet", values=values)
    share = float(rm.train_config.get("calibration_share", 0.0))  # the MAP run's halves: it chose its checkpoint
    val_fs, cal_fs = split_validation(val_all, share)  # on the selection half; calibration stays apart
    for fs in (train_fs, val_fs, cal_fs):
        fs.check_vocab(len(rm.vocab["tokens"]), len(rm.vocab["context"]))
        if values:
            fs.require_values()
    cfg = replace(cfg, max_bags=rm.info.max_bags, max_tokens=rm.info.max_tokens,
                  swag_l2=float(rm.train_config.get("l2", cfg.swag_l2)))  # the MAP run's penalty
    model, report = fit_laplace(rm.model, train_fs, val_fs, cfg)  # raises LaplaceError for a Bayesian model

    pred = predict.feature_predictions(model, val_fs, draws, cfg.batch_size, cfg.max_bags, cfg.max_tokens,
                                       predict.seeded_generator(cfg.seed))  # logits (S, 1, N), the Gaussian's summary
    map_train = rm.train_config
    refer_fraction = map_train.get("refer_fraction", TrainConfig.refer_fraction)  # the MAP run's
    val = record.validation_summary(pred.logits, val_fs.label, refer_fraction, summary=pred.summary,
                                    true_risk=features_true_risk(fdir, val_fs), model_kind="laplace")
    threshold, val_metrics = val.refer_threshold, val.metrics
    policy = record.fit_run_policy(model, val_fs, cal_fs, samples=draws, batch_size=cfg.batch_size,
                                   max_bags=cfg.max_bags, max_tokens=cfg.max_tokens, seed=cfg.seed,
                                   context_vocab=rm.vocab["context"],
                                   config=replace(referral or ReferralConfig(), fraction=refer_fraction))

    seed = (rm.params or {}).get("train.seed", map_train.get("seed"))
    train_config = {"score_samples": draws, "max_bags": cfg.max_bags, "max_tokens": cfg.max_tokens,
                    "seed": seed, "refer_fraction": refer_fraction, "calibration_share": share}
    vocab_sizes = {"tokens": len(rm.vocab["tokens"]), "context": len(rm.vocab["context"])}

    def write(out: Path) -> None:  # a mortality run's own files
        fileio.write_json(out / store.VOCAB, rm.vocab)  # the MAP run's vocabulary (the features' may differ)

    return _write_run(model, report, cfg, samples, rm, train_config=train_config, fdir=fdir, validation=val,
                      checkpoint={**val.checkpoint_entries(), "vocab_sizes": vocab_sizes, "step": rm.info.step,
                                  "val_nll": val_metrics["nll"], "policy": policy and policy.to_dict()},
                      info={"vocab_sizes": vocab_sizes, "policy": policy and policy.to_dict(arrays=False)},
                      params={"train": {"seed": seed}, "features": record.features_id(fdir), "n_train": len(train_fs),
                              "n_val": len(val_fs), "referral": (referral or ReferralConfig()).to_dict()},
                      tags={}, before=write, refer_threshold=threshold, val_metrics=val_metrics,
                      tracking=tracking, experiment=experiment or DEFAULT_EXPERIMENT, run_name=run_name,
                      out_dir=out_dir, policy=policy)


# ---------------------------------------------------------------------------- vision runs


def _fit_vision(vr: Run, map_uri: str, cfg: LaplaceConfig, draws: int, *, data: Path | str | None,
                samples: int | None, out_dir: Path | str | None, tracking: bool, experiment: str | None,
                run_name: str | None) -> LaplaceRunResult:
    """Laplace on a deterministic image model (a vision run or its checkpoint file), logged as a vision run.

    The GGN is the multi-class one (Λ = diag(p) - p pᵀ per image) over the run's training images (its
    dataset and seed's split; ``data``: the CIFAR directory instead of the recorded one), the prior
    precision is chosen on its validation images unless given, and the predictive is the multi-class
    probit (softmax of κ ⊙ μ) or, with ``samples``, Monte Carlo over the linearized model. The new run
    (experiment ``vision`` unless named) holds ``checkpoint/best.pt``, ``model_info.json`` and the fit
    report, tagged ``run_kind`` = vision and with its parent: the vision evaluation takes it like any
    vision run. No refer threshold (nobody is referred from an image benchmark).
    """
    import numpy as np
    import torch

    from pipeline.bayes.laplace.fit import fit_laplace_batches
    from pipeline.bayes.metrics import multiclass as mm
    from pipeline.tasks.vision.evaluate import image_batches
    from pipeline.workflows.vision_run import run_splits

    if not vr.train_config:
        raise LaplaceError(f"{map_uri}: the vision run records no training settings (dataset, seed)")
    splits = run_splits(vr.train_config, data)
    train, val = splits.train, splits.val
    n = len(train)
    keep = np.arange(n)
    if cfg.max_train is not None and cfg.max_train < n:
        keep = np.sort(np.random.default_rng(cfg.seed).choice(n, cfg.max_train, replace=False))

    def chunks(images, order: np.ndarray):
        for start in range(0, len(order), cfg.batch_size):
            idx = order[start:start + cfg.batch_size]
            yield {"images": torch.from_numpy(images.floats(idx)),  # (B, C, H, W) in [0, 1]
                   "label": torch.from_numpy(images.labels[idx])}  # (B,) class ids

    val_batches = (lambda: chunks(val, np.arange(len(val)))) if len(val) else None
    model, report = fit_laplace_batches(vr.model, lambda: chunks(train, keep), val_batches, cfg, n_train=n,
                                        n_train_used=len(keep))  # raises LaplaceError for a Bayesian model
    logits = predict.draws_of(model)(image_batches(val, cfg.batch_size), draws, cfg.seed)  # (S, 1, N, C)
    val_all = mm.evaluate_predictions(logits, val.labels, components=1)
    val_metrics = {k: val_all[k] for k in ("nll", "accuracy", "ece", "brier", "n")}

    tc = dict(vr.train_config)
    vision = store.RunKind.VISION.value

    return _write_run(model, report, cfg, samples, vr, train_config={**tc, "score_samples": draws},
                      metrics={f"best_val_{k}": v for k, v in val_metrics.items() if k != "n"},
                      checkpoint={"run_kind": vision, "refer_threshold": None, "step": vr.info.step,
                                  "val_nll": val_metrics["nll"]},
                      info={"run_kind": vision, "score_samples": draws, "val_metrics": val_metrics},
                      params={"train": {k: v for k, v in tc.items() if k != "model"},
                              "map_model": tc.get("model") or {}, "n_train": n, "n_val": len(val)},
                      tags={store.RUN_KIND_TAG: vision, DATASET_TAG: str(tc.get("dataset"))},
                      refer_threshold=math.nan, val_metrics=val_metrics, tracking=tracking,
                      experiment=experiment or VISION_EXPERIMENT, run_name=run_name, out_dir=out_dir)


# ---------------------------------------------------------------------------- the steps both share


def _check_map(uri: str, info: ModelInfo) -> None:
    """Refuse a Laplace run as the MAP run."""
    if info.model_kind == "laplace":
        raise LaplaceError(f"{uri} is already a Laplace run; give the MAP run it was fitted on")


def _predictive(cfg: LaplaceConfig, samples: int | None) -> tuple[LaplaceConfig, int]:
    """(config, draws per admission): with ``samples`` the Monte Carlo predictive at that many draws (on a copy:
    the caller's config is left as it was), without it ``cfg``'s predictive and one draw."""
    if samples is None:
        return cfg, 1
    if samples < 1:
        raise LaplaceError(f"samples must be >= 1, got {samples}")
    return replace(cfg, predictive=Predictive.MC), samples


def _write_run(model, report: LaplaceReport, cfg: LaplaceConfig, samples: int | None, rm: Run, *,
               train_config: dict, checkpoint: dict, info: dict, params: dict, tags: dict, refer_threshold: float,
               val_metrics: dict, tracking: bool, experiment: str, run_name: str | None, out_dir: Path | str | None,
               fdir: Path | None = None, validation=None, metrics: dict | None = None, before=None,
               policy=None) -> LaplaceRunResult:
    """Save, record and log a fitted Laplace model as a run of its own (ended KILLED on Ctrl-C, FAILED on any
    other exception).

    Writes ``best.pt`` (the model with ``train_config``, the ``checkpoint`` entries and its MAP network's task
    key) and the fit report into ``out_dir`` (default ``runs/laplace/<run id>``, untracked
    ``runs/laplace/<label>``), logs the Laplace settings and ``params``, tags ``tags``, the label and the
    parent; ``before(out)`` writes a kind's own files, then ``runs.record.write_run`` writes and logs the rest:
    ``model_info.json`` holds the Laplace settings, the MAP model and ``info``; the metrics, the prior
    precisions and ``metrics``.
    """
    with make_tracker(tracking, experiment=experiment, run_name=run_name or model.label) as tracker:
        out = Path(out_dir) if out_dir else Path("runs") / "laplace" / (tracker.run_id or model.label)
        out.mkdir(parents=True, exist_ok=True)
        save_laplace(out / BEST, model, {"model_kind": "laplace", "train_config": train_config,
                                         "map_family": rm.kind.value, **checkpoint})
        settings = {k: v for k, v in model.settings().items() if not k.startswith("param_")}
        model_info = {"model_kind": "laplace", "model_label": model.label, "laplace": settings,
                      "map_kind": rm.info.model_kind, "map_config": rm.info.model_config,
                      "parent_run_id": rm.run_id, "train_config": train_config, **info}
        fileio.write_json(out / REPORT, report.to_dict())
        tracker.log_params({"model_kind": "laplace", "laplace": config_dict(cfg) | {"samples": samples}, **params,
                            "parent_run_id": rm.run_id or "none"})
        for key, value in {**tags, LABEL_TAG: model.label}.items():
            tracker.set_tag(key, value)
        if rm.run_id:
            tracker.set_tag(PARENT_TAG, rm.run_id)
        if before is not None:
            before(out)
        record.write_run(tracker, out, fdir=fdir, info=model_info, validation=validation, checkpoint=out / BEST,
                         score_samples=train_config.get("score_samples") if fdir is not None else None, step=0,
                         artifacts=(out / REPORT,),
                         metrics={"laplace_prior_precision": report.prior_precision,
                                  "laplace_subnet_prior_precision": report.subnet_prior_precision, **(metrics or {})})
    return LaplaceRunResult(tracker.run_id, rm.run_id, model.label, report, refer_threshold, val_metrics, out, policy)
