"""Scoring with MEDS (issue 37; docs/meds.md): a census of a MEDS dataset (``score --source MEDS_DIR``) extracted with
the training run's settings and vocabulary, and the data owner's prediction file in meds-evaluation's schema
(``data.meds.write_predictions``) beside every score of MEDS features.

The prediction file's probability is the risk the run reports as calibrated where the run has a calibration
(``risk_calibrated``), else ``risk_mean``; its decision (``predicted_boolean_value``) is taken at the decision
threshold given to ``score`` (``--decision-threshold``), else the run's own (its policy's, in calibrated units;
else ``model_info``'s ``decision_threshold``, a number or a record with ``threshold``), else left out (the file
then holds the probability alone, which meds-evaluation scores without the threshold metrics). The file holds
subject ids and prediction times: it goes to ``_private/`` beside the scores (0700 / 0600), with ``link.parquet``
(pseudonym -> subject_id, prediction_time of every scored row) and, for a census, ``unscored.csv`` (the times not
scored and why).
"""

from __future__ import annotations

import logging
from dataclasses import fields
from pathlib import Path

import pandas as pd
import pyarrow as pa

from pipeline.core import fileio
from pipeline.data.meds.layout import MedsError
from pipeline.data.mimic.sources.tables import Release, release_of

log = logging.getLogger(__name__)

CALIBRATED = "risk_calibrated"  # the risk table's calibrated risk, where the run has a calibration
PREDICTIONS = "predictions.parquet"  # the data owner's prediction file, in _private/


def check_arguments(source, cohort, as_of, task, times, threshold: float | None) -> bool:
    """Whether ``score``'s ``source`` is a MEDS dataset (a directory with data/), after checking that the MEDS
    arguments (``task``, ``times``) come with one and the MIMIC ones (``cohort``, ``as_of``) do not."""
    from pipeline.data.meds.layout import is_meds

    meds_source = source is not None and is_meds(source)
    if (task is not None or times is not None) and not meds_source:
        raise MedsError("task and times choose a MEDS census's prediction times: they apply to a MEDS source only")
    if meds_source and (cohort is not None or as_of is not None):
        raise MedsError(f"{'cohort' if cohort is not None else 'as_of'} applies to a MIMIC source; a MEDS census is "
                        "chosen by its prediction times (times) or a task config (task)")
    if threshold is not None and not 0.0 <= threshold <= 1.0:
        raise MedsError(f"decision_threshold must lie in [0, 1], got {threshold}")
    return meds_source


def is_meds_features(files: list[Path]) -> bool:
    """Whether feature files come from a MEDS extraction (their manifest records ``meds:<dataset_name>``)."""
    manifest = Path(files[0]).parent / "manifest.json" if files else None
    return manifest is not None and manifest.exists() and release_of(fileio.read_json(manifest)) is Release.meds


def census_features(source: str | Path, run, out_dir: Path, task: str | Path | None = None,
                    times: str | Path | None = None):
    """The census of the MEDS dataset ``source`` extracted into ``out_dir`` with ``run``'s extraction settings and
    vocabulary (nothing refitted): ``data.meds.extract_meds``'s result (``files["cohort"]``, ``excluded``)."""
    from pipeline.data.meds.config import MedsConfig
    from pipeline.data.meds.flow import extract_meds
    from pipeline.data.mimic.extraction.tokens import Vocab

    saved = dict((run.manifest or {}).get("config") or {})
    if not saved:
        raise MedsError("the model's run has no features/manifest.json with the extraction settings; extract the "
                        "census first and score its features (--data)")
    known = {f.name for f in fields(MedsConfig)} - {"split", "split_seed", "train_fraction", "val_fraction"}
    cfg = MedsConfig(**{k: v for k, v in saved.items() if k in known and v is not None})
    return extract_meds(source, out_dir, cfg, task=task, vocab=Vocab.from_json(run.vocab), times=times)


def decision_threshold(run, given: float | None) -> tuple[float | None, str]:
    """(the decision threshold of the prediction file, where it comes from): ``given``, else the run's policy's
    (calibrated units, as ``risk_calibrated`` and the risk table's ``high_risk``), else a recorded one, else None."""
    if given is not None:
        return float(given), "--decision-threshold"
    policy = getattr(getattr(run, "info", None), "policy", None)
    chosen = ((policy or {}).get("threshold") or {}).get("threshold")
    if chosen is not None:
        return float(chosen), "the run's decision threshold (calibrated risk)"
    recorded = (getattr(run, "model_info", None) or {}).get("decision_threshold")
    if isinstance(recorded, dict):
        recorded = recorded.get("threshold")
    if recorded is not None:
        return float(recorded), "the run's decision threshold"
    return None, "none (the run records none; give --decision-threshold): no predicted_boolean_value"


def write_predictions(scores: Path, link: Path, labels: Path | None, private: Path, run,
                      given: float | None) -> tuple[Path, str]:
    """The data owner's prediction file ``private/predictions.parquet`` of the scores at ``scores`` (module
    docstring) and ``private/link.parquet`` (the scored rows' pseudonyms); (the file, what it holds, in words)."""
    import pyarrow.parquet as pq

    from pipeline.data.meds.predictions import write_predictions as write

    columns = pq.read_schema(scores).names
    calibrated = CALIBRATED in columns and bool(getattr(getattr(run, "info", None), "policy", None))
    probability = CALIBRATED if calibrated else "risk_mean"  # a run without calibration leaves the column null
    threshold, said = decision_threshold(run, given)
    _private(private)
    path = write(scores, link, labels, private / PREDICTIONS, threshold=threshold, probability=probability,
                 metadata=prediction_metadata(run, probability, threshold, said))
    if (private / "link.parquet").resolve() != Path(link).resolve():  # never shrink the extraction's own link
        keys = set(pq.read_table(scores, columns=["key"]).column("key").to_pylist())
        table = pq.read_table(link)
        table = table.filter(pa.array([k in keys for k in table.column("key").to_pylist()]))
        with fileio.atomic_path(private / "link.parquet", mode=0o600) as tmp:
            pq.write_table(table, tmp)
    at = f"decision threshold {threshold:g} ({said})" if threshold is not None else f"decision threshold {said}"
    return path, f"probability {probability}, {at}" + ("" if labels is not None else ", no labels (a census)")


def prediction_metadata(run, probability: str, threshold: float | None, said: str) -> dict:
    """What the prediction file predicts, in the words of the run's task (``runs.load.Run.words``): the task, and
    each column's meaning (the file's metadata: ``data.meds.predictions.write_predictions``)."""
    words = run.words
    decided = (f"{probability} at or above {threshold:g} ({said}): {words.outcome} predicted" if threshold is not None
               else "absent: no decision threshold")
    return {"task": words.to_json(), "run_id": getattr(run, "run_id", None),
            "columns": {"boolean_value": f"the label: whether {words.outcome} followed the prediction time "
                                         f"({words.prediction_time})",
                        "predicted_boolean_probability": f"the predicted probability of {words.outcome} "
                                                         f"({probability})",
                        "predicted_boolean_value": decided}}


def feature_predictions(summary, files: list[Path], run, link: bool, threshold: float | None):
    """``summary`` (``serving.score.ScoreSummary``) of scored features; for MEDS features with their data owner's
    files beside them and ``link``: the prediction file and the link written to ``_private/`` beside the scores."""
    private = Path(files[0]).parent / "_private"
    if link and is_meds_features(files) and (private / "link.parquet").exists():
        labels = private / "labels" if (private / "labels").is_dir() else None
        summary.predictions_file, summary.predictions_note = write_predictions(
            summary.out, private / "link.parquet", labels, summary.out.parent / "_private", run, threshold)
        summary.link_file = summary.out.parent / "_private" / "link.parquet"
    return summary


def census_done(summary, result, run, link: bool, threshold: float | None):
    """``summary`` of a scored MEDS census (``result``: its extraction) with what was not scored, and with ``link``
    the data owner's files: the prediction file, the link, ``unscored.csv``."""
    from pipeline.data.meds import census

    summary.not_scored_by = census.counts(result.excluded)
    summary.not_scored = len(result.excluded)
    if summary.not_scored:
        log.warning("%d prediction times of the census have no score: %s", summary.not_scored,
                    ", ".join(f"{k} {v}" for k, v in summary.not_scored_by.items() if v))
    if link:
        private = summary.out.parent / "_private"
        summary.predictions_file, summary.predictions_note = write_predictions(
            summary.out, result.link_file, None, private, run, threshold)
        summary.link_file = private / "link.parquet"
        summary.unscored_file = write_unscored(private / "unscored.csv", result.excluded)
    return summary


def write_unscored(path: Path, skipped: pd.DataFrame) -> Path:
    """``_private/unscored.csv``: the census times not scored (subject_id, prediction_time, reason)."""
    frame = skipped[["subject_id", "prediction_time", "reason"]].copy()
    frame["prediction_time"] = pd.to_datetime(frame["prediction_time"], unit="us").dt.strftime("%Y-%m-%d %H:%M:%S")
    _private(path.parent)
    return fileio.write_text(path, frame.to_csv(index=False), mode=0o600)


def _private(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)


EVALUATION = "evaluation.json"  # --meds-dev-result DIR: meds-evaluation's output on the prediction file
RESULT = "result.json"  # --meds-dev-result DIR: the MEDS-DEV result package (meds-dev-pack-result's format)


class MedsDevResult:
    """``score --meds-dev-result DIR`` (docs/meds.md): the run's prediction file on features of a MEDS-DEV task
    (``extract --task meds-dev:TASK``) scored by meds-evaluation as its command line scores it (4 samples per
    subject, seed 0; a file without ``predicted_boolean_value``, a run without a decision threshold, is given it
    null, which meds-evaluation reads as no decision: the probability's metrics alone) into
    ``DIR/evaluation.json``, then packaged with the dataset, task and model names as
    ``meds-dev-pack-result`` packages it into ``DIR/result.json`` (``data.meds.medsdev.pack_result``). ``check``
    says what is wrong before anything is scored."""

    def __init__(self, out: Path, dataset: str, task: str, model: str):
        self.out, self.dataset, self.task, self.model = Path(out), dataset, task, model

    @classmethod
    def check(cls, out: Path, model: str | None, data: Path | None, link: bool) -> MedsDevResult:
        """The package to write for ``score``'s ``data`` (features of a MEDS-DEV task, scored with their labels and
        ``link``, so that the prediction file is written) under MEDS-DEV's model name ``model``."""
        from pipeline.core.errors import naming
        from pipeline.data.meds.medsdev import check_names

        if out is None:
            raise naming(MedsError("`meds_dev_model` names the model of a MEDS-DEV result (`meds_dev_result` DIR)"),
                         "meds_dev_model", "meds_dev_result")
        if not model:
            raise naming(MedsError("`meds_dev_result` needs the model's MEDS-DEV name (`meds_dev_model` NAME)"),
                         "meds_dev_result", "meds_dev_model")
        if data is None or not link:
            raise naming(MedsError("`meds_dev_result` packages the prediction file of labelled MEDS features: give "
                                   "them as `data`, and not --no-link"), "meds_dev_result", "data")
        manifest = Path(data) / "manifest.json" if Path(data).is_dir() else Path(data).parent / "manifest.json"
        try:
            recorded = ((fileio.read_json(manifest).get("task") or {}).get("meds_dev")) or {}
        except (OSError, ValueError):
            recorded = {}
        if not recorded:
            raise naming(MedsError(f"`meds_dev_result`: {manifest} records no MEDS-DEV task (extract the features "
                                   "with --task meds-dev:TASK)"), "meds_dev_result")
        check_names(recorded["dataset"], recorded["task"], model)
        try:
            import meds_evaluation  # noqa: F401
        except ImportError as exc:
            raise naming(MedsError(f"`meds_dev_result` needs meds-evaluation (the dev extra: pip install -e '.[dev]', "
                                   f"which make setup does): {exc}"), "meds_dev_result") from None
        return cls(out, recorded["dataset"], recorded["task"], model)

    def write(self, predictions: Path | None) -> str:
        """``DIR/evaluation.json`` and ``DIR/result.json`` from the prediction file ``predictions``; what was written,
        in words."""
        import json

        import polars as pl
        from meds_evaluation.evaluate import evaluate_binary_classification

        from pipeline.data.meds.medsdev import pack_result

        if predictions is None or "boolean_value" not in pq_names(predictions):
            raise MedsError("--meds-dev-result: no labelled prediction file was written (MEDS features with their "
                            "_private/labels beside them are needed)")
        frame = pl.read_parquet(predictions)
        if "predicted_boolean_value" not in frame.columns:  # no decision threshold: the probability's metrics alone
            frame = frame.with_columns(pl.lit(None, dtype=pl.Boolean).alias("predicted_boolean_value"))
        try:
            metrics = evaluate_binary_classification(frame, samples_per_subject=4, resampling_seed=0)
        except (ValueError, pl.exceptions.PolarsError) as exc:  # e.g. a single class: no AUC
            raise MedsError(f"{predictions}: meds-evaluation cannot score it ({' '.join(str(exc).split())[:200]})"
                            ) from None
        evaluation = fileio.write_text(self.out / EVALUATION, json.dumps(metrics, indent=4))
        result = pack_result(evaluation, self.dataset, self.task, self.model, self.out / RESULT)
        return (f"MEDS-DEV result: {result} (dataset {self.dataset}, task {self.task}, model {self.model}; "
                f"meds-evaluation's output {evaluation})")


def pq_names(path: Path) -> list[str]:
    import pyarrow.parquet as pq

    return pq.read_schema(path).names
