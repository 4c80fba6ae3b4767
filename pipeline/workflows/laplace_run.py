"""A Laplace run: subnetwork Laplace fitted on a trained (MAP) run, logged as a run of its own.

``fit_laplace_run`` loads the MAP run (any model URI or checkpoint file, ``runs.load.load_run``), checks it
is a deterministic model, and fits the task-free algorithm (``bayes.laplace.fit.fit_laplace_batches``) on
what its task gives (``Task.laplace_data``: a mortality run's training features, an image run's training
images; the MAP run's caps and L2). The prior precision comes from the validation split unless given. The
task then finishes the fitted model as it finishes a trained one (``Task.finish``: a mortality run chooses the
refer measure and threshold on validation as training does, with the probit predictive from the Gaussian logit
N(μ, σ²) of each admission: its spread, percentiles and mutual information, or with ``samples`` the Monte
Carlo draws, and fits its policy; an image run records its validation metrics). The run is written as every
run is (``runs.record.write_run``): ``best.pt`` (the Laplace checkpoint with its MAP task's key, which
``runs.formats.load_model`` reads like any model), ``model_info.json``, the fit report, the files its task
adds (a mortality run's training vocabulary; its manifest and pyfunc), in a new MLflow run tagged with its
parent (``mlflow.parentRunId``). Evaluate, compare, score and the pyfunc then take it like any run of its
task; its rows in ``compare`` read ``laplace-<selection>-<S>``.
"""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from pipeline.bayes.laplace.config import LaplaceConfig, Predictive
from pipeline.bayes.laplace.errors import LaplaceError
from pipeline.bayes.laplace.fit import LaplaceReport, fit_laplace_batches
from pipeline.bayes.laplace.model import LAPLACE_FORMAT, LinearizedLaplaceModel, save_laplace
from pipeline.bayes.referral.config import ReferralConfig
from pipeline.core import fileio
from pipeline.core.configs import config_dict
from pipeline.core.devices import resolve_device
from pipeline.engine.checkpoints import BEST, CHECKPOINT_FORMAT
from pipeline.runs import record, store
from pipeline.runs.load import Run, load_run
from pipeline.runs.store import LABEL_TAG
from pipeline.runs.tracking import make_tracker, run_id_line
from pipeline.tasks.base import TASK_KEY, Finished, FinishSettings, LaplaceData

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
    refer_threshold: float | None  # threshold of the refer measure chosen on validation (None: the task refers nobody)
    val_metrics: dict  # validation metrics of the Laplace predictive at score_samples draws
    out_dir: Path  # the run's files (best.pt, model_info.json, ...)
    policy: object | None = None  # bayes.referral.policy.Policy of a mortality run (None: no calibration half)
    lines: list[str] | None = None  # what its task says of it (Finished.lines: the policy's sentences)

    def summary(self) -> str:
        """What ``cli.py laplace`` prints: the fit in one line, then the run id."""
        r = self.report
        refer = "" if self.refer_threshold is None else f"uncertainty cut {self.refer_threshold:.6g}, "
        return (f"{self.label}: S={r.subnet_size} of D={r.n_params} weights, prior precision {r.prior_precision:.4g} "
                f"({r.prior_source}), validation NLL {self.val_metrics['nll']:.4f} (MAP {r.val_nll_map:.4f}), "
                f"{refer}files in {self.out_dir}\n" + "".join(line + "\n" for line in self.lines or [])
                + run_id_line(self.run_id))


def fit_laplace_run(map_uri: str, cfg: LaplaceConfig, *, data: Path | str | None = None,
                    samples: int | None = None, out_dir: Path | str | None = None, tracking: bool = True,
                    experiment: str | None = None, run_name: str | None = None,
                    device: str | None = None, threads: int | None = None,
                    referral: ReferralConfig | None = None) -> LaplaceRunResult:
    """Fit Laplace on the MAP run ``map_uri`` and log it (see the module docstring), on ``device``
    (``pipeline.core.devices.resolve_device``: None is cuda when available, else cpu), with ``threads`` torch
    intra-op threads (None: torch's default).

    ``samples``: Monte Carlo draws of the linearized model per example, stored as the run's ``score_samples``;
    with it the predictive is Monte Carlo (``cfg.predictive`` = mc), without it the probit approximation with
    one draw. ``data``: the training data instead of the MAP run's (a features directory; an image run's CIFAR
    directory). ``referral``: how a mortality run turns risks into decisions (its policy).
    """
    if threads:
        import torch

        torch.set_num_threads(threads)
    device = resolve_device(device)  # a device not here fails first
    with tempfile.TemporaryDirectory(prefix="laplace-") as tmp:
        rm = load_run(map_uri, tmp)
    if isinstance(rm.model, LinearizedLaplaceModel):
        raise LaplaceError(f"{map_uri} is already a Laplace run; give the MAP run it was fitted on")
    cfg, draws = _predictive(cfg, samples)
    rm.model = rm.model.to(device)
    task = rm.task
    ld = task.laplace_data(rm, data, cfg)
    cfg = replace(cfg, **ld.changes)
    model, report = fit_laplace_batches(rm.model, ld.train, ld.val, cfg, n_train=ld.n_train,
                                        n_train_used=ld.n_used)  # raises LaplaceError for a Bayesian model
    fin = task.finish(model, ld.data, FinishSettings(samples=draws, batch_size=cfg.batch_size, seed=cfg.seed,
                                                     draws_seed=cfg.seed, model_kind="laplace",
                                                     refer_fraction=ld.refer_fraction, referral=referral))
    return _write_run(model, report, cfg, samples, rm, ld, fin, tracking=tracking,
                      experiment=experiment or ld.experiment or DEFAULT_EXPERIMENT, run_name=run_name,
                      out_dir=out_dir, referral=referral)


def _predictive(cfg: LaplaceConfig, samples: int | None) -> tuple[LaplaceConfig, int]:
    """(config, draws per admission): with ``samples`` the Monte Carlo predictive at that many draws (on a copy:
    the caller's config is left as it was), without it ``cfg``'s predictive and one draw."""
    if samples is None:
        return cfg, 1
    if samples < 1:
        raise LaplaceError(f"samples must be >= 1, got {samples}")
    return replace(cfg, predictive=Predictive.MC), samples


def _write_run(model, report: LaplaceReport, cfg: LaplaceConfig, samples: int | None, rm: Run, ld: LaplaceData,
               fin: Finished, *, tracking: bool, experiment: str, run_name: str | None, out_dir: Path | str | None,
               referral: ReferralConfig | None) -> LaplaceRunResult:
    """Save, record and log a fitted Laplace model as a run of its own (ended KILLED on Ctrl-C, FAILED on any
    other exception).

    Writes ``best.pt`` (the model with its training settings, its MAP network's task key, what the task's data
    and ``finish`` record) and the fit report into ``out_dir`` (default ``runs/laplace/<run id>``, untracked
    ``runs/laplace/<label>``), logs the Laplace settings and the task's params, tags its task, the task's tags,
    the label and the parent; then ``runs.record.write_run`` writes and logs the rest: ``model_info.json`` holds
    the Laplace settings, the MAP model and what the task records; the metrics, the prior precisions.
    """
    train_config = {"score_samples": fin.score_samples, **ld.train_config}
    with make_tracker(tracking, experiment=experiment, run_name=run_name or model.label) as tracker:
        out = Path(out_dir) if out_dir else Path("runs") / "laplace" / (tracker.run_id or model.label)
        out.mkdir(parents=True, exist_ok=True)
        save_laplace(out / BEST, model, {"model_kind": "laplace", "train_config": train_config, TASK_KEY: rm.kind,
                                         **ld.entries, "step": rm.info.step, "val_nll": fin.val_nll,
                                         **fin.checkpoint})
        settings = {k: v for k, v in model.settings().items() if not k.startswith("param_")}
        model_info = {"run_kind": rm.kind, "model_kind": "laplace", "model_label": model.label, "laplace": settings,
                      "map_kind": rm.info.model_kind, "map_config": rm.info.model_config,
                      "parent_run_id": rm.run_id, "train_config": train_config, **ld.entries, **fin.info}
        fileio.write_json(out / REPORT, report.to_dict())
        params = {**ld.params, **({"features": record.features_id(ld.features_dir)} if ld.features_dir else {}),
                  **({"referral": (referral or ReferralConfig()).to_dict()} if fin.policy is not None
                     or fin.refer_threshold is not None else {})}
        tracker.log_params({"model_kind": "laplace", "laplace": config_dict(cfg) | {"samples": samples}, **params,
                            "parent_run_id": rm.run_id or "none"})
        for key, value in {store.RUN_KIND_TAG: rm.kind, **ld.tags, LABEL_TAG: model.label}.items():
            tracker.set_tag(key, value)
        if rm.run_id:
            tracker.set_tag(PARENT_TAG, rm.run_id)
        for name, content in ld.files.items():
            fileio.write_json(out / name, content)
        extra = record.write_artifacts(out, fin.artifacts)  # the task's own files (a shift reference)
        record.write_run(tracker, out, fdir=ld.features_dir, info=model_info, checkpoint=out / BEST,
                         score_samples=fin.score_samples, step=0, artifacts=(out / REPORT, *extra),
                         metrics={"laplace_prior_precision": report.prior_precision,
                                  "laplace_subnet_prior_precision": report.subnet_prior_precision, **fin.metrics},
                         pyfunc=ld.features_dir is not None and rm.task.serves)
    return LaplaceRunResult(tracker.run_id, rm.run_id, model.label, report, fin.refer_threshold, fin.val_metrics,
                            out, fin.policy, fin.lines)
