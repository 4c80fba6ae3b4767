"""What every trained run records, written in one place.

A mortality run (``training.loop``), a classical baseline (``training.baselines``) and a Laplace
run (``laplace.run``) end the same way: the refer threshold and the validation summary come from
the validation draws (``validation_summary``), then ``record_run`` writes the run's directory
(``model_info.json``, its own copies of the training ``vocab.json`` and redacted
``manifest.json``), tags the run with the features it was trained on (directory, split mode,
MIMIC release), logs the metrics and artifacts under ``runs.store``'s names and the pyfunc.
So every kind of run carries the same tags, the same ``val_metrics`` and ``val_reliability``
(``score``'s cohort report draws the latter) and is read back by ``runs.store`` alike.
"""

from __future__ import annotations

import math
import shutil
from dataclasses import dataclass
from pathlib import Path

from pipeline import fileio, metrics, predict
from pipeline.redact import redact_json

from . import store

VAL_METRICS = (*metrics.METRICS, "n", "positives")  # model_info.json's val_metrics
LOGGED = (*metrics.METRICS, "mean_mutual_information")  # logged as best_val_<name>


@dataclass
class Validation:
    """The validation summary stored with a model."""

    refer_threshold: float  # MI above which an admission is referred (the ``refer_fraction`` most uncertain)
    refer_fraction: float  # the share of validation admissions the threshold refers
    metrics: dict  # VAL_METRICS of the predictive on validation
    reliability: dict  # the reliability diagram: counts, mean_p, observed (15 bins; empty bins None)
    scalars: dict  # best_val_<metric> for MLflow (LOGGED) and refer_threshold

    def info(self) -> dict:
        """Its part of ``model_info.json``."""
        return {"refer_threshold": self.refer_threshold, "refer_fraction": self.refer_fraction,
                "val_metrics": self.metrics, "val_reliability": self.reliability}


def validation_summary(logits, labels, refer_fraction: float) -> Validation:
    """Refer threshold and metrics from validation logits (S, K, N) or (S, N) and labels (N,)."""
    threshold = predict.refer_threshold(metrics.mutual_information(logits), refer_fraction)
    report = metrics.evaluate_predictions(logits, labels, n_bootstrap=0)
    reliability = {k.removeprefix("reliability_"): [None if v is None or math.isnan(v) else v for v in report[k]]
                   for k in ("reliability_counts", "reliability_mean_p", "reliability_observed")}
    scalars = {f"best_val_{k}": report[k] for k in LOGGED if k in report}
    return Validation(refer_threshold=threshold, refer_fraction=refer_fraction,
                      metrics={k: report[k] for k in VAL_METRICS}, reliability=reliability,
                      scalars={**scalars, "refer_threshold": threshold})


def copy_inputs(fdir: Path, out: Path, replace: bool = True) -> None:
    """The run's own ``vocab.json`` / ``manifest.json`` (artifacts stay right if the features change later);
    the manifest's strings pass the tracking redaction (DSN passwords, dates). ``replace`` False keeps a
    copy ``out`` already holds (a Laplace run holds its MAP run's vocabulary)."""
    out.mkdir(parents=True, exist_ok=True)
    if (fdir / store.VOCAB).exists() and (replace or not (out / store.VOCAB).exists()):
        with fileio.atomic_path(out / store.VOCAB) as tmp:
            shutil.copyfile(fdir / store.VOCAB, tmp)
    if (fdir / store.MANIFEST).exists() and (replace or not (out / store.MANIFEST).exists()):
        fileio.write_json(out / store.MANIFEST, redact_json(fileio.read_json(fdir / store.MANIFEST)))


def tag_features(tracker, fdir: Path) -> None:
    """Tag a run with the features it was trained on: evaluate finds them, compare groups by split mode,
    score checks the release."""
    tracker.set_tag(store.FEATURES_DIR_TAG, str(Path(fdir).resolve()))
    tracker.set_tag(store.SPLIT_MODE_TAG, store.features_split_mode(fdir))
    tracker.set_tag(store.RELEASE_TAG, store.features_dir_release(fdir))


def record_run(tracker, out: Path, fdir: Path, *, info: dict, validation: Validation, checkpoint: Path,
               score_samples: int, step: int, metrics_extra: dict | None = None,
               artifacts: tuple[Path, ...] = ()) -> Path:
    """Write ``out/model_info.json`` (``info`` with ``validation``'s part and ``score_samples``), copy
    the features' vocab and manifest into ``out`` where it holds none, tag the features, log the metrics at ``step``,
    the artifacts (model_info, ``artifacts``, the features' copies, ``checkpoint``) and the pyfunc.
    Returns the model_info path."""
    out = Path(out)
    copy_inputs(Path(fdir), out, replace=False)
    full = {**info, **validation.info(), "score_samples": score_samples}
    fileio.write_json(out / store.MODEL_INFO, full)
    tag_features(tracker, Path(fdir))
    tracker.log_metrics({**validation.scalars, **(metrics_extra or {})}, step)
    for path in (out / store.MODEL_INFO, *artifacts):
        tracker.log_artifact(path)
    for name in (store.VOCAB, store.MANIFEST):
        if (out / name).exists():
            tracker.log_artifact(out / name, store.FEATURES_ARTIFACTS)
    tracker.log_artifact(checkpoint, store.CHECKPOINT_ARTIFACTS)
    tracker.log_pyfunc(checkpoint=checkpoint, vocab=out / store.VOCAB, model_info=out / store.MODEL_INFO,
                       default_samples=score_samples)
    return out / store.MODEL_INFO
