"""``cli.py recertify``: a run's promise re-certified for a new period without retraining, as a new run that points
at its parent (issue 43, item 2).

``recertify_run(run, data=... | source=...)`` reads admissions of the new period in the run's vocabulary: features
(``data``: a features file or directory, MIMIC or MEDS, whose ``vocab.json`` must be the run's), or a source
extracted as ``score --source`` extracts one (a MIMIC source with its outcomes; a MEDS census, its outcomes from
``labels``). Their outcomes are the features' ``label`` column, or ``labels`` (a CSV of key,label or MEDS label
files, read as ``monitor`` reads them); admissions without one are left out and counted. The run's model predicts
them as ``score`` does, and (``tasks.mortality.recertify``) the recalibration map and the refer rule are refitted on
them (the decision threshold too with ``refit_threshold``), or, with ``weighted`` and no outcomes, the run's
calibration half is re-weighted towards them (valid under covariate shift only, which the rule's sentence says). A
set too small for the asked alpha and delta is refused, naming the size needed.

The new run (MLflow, in the parent's experiment unless ``experiment``): the parent's model file with the new policy
in it, its ``model_info.json`` (the policy's summary, ``recertification``), vocabulary and manifest, the pyfunc,
and a shift reference of the admissions it was certified on; tags ``mlflow.parentRunId`` (the UI nests it under the
parent) and ``recertified_from`` (the parent's id), the parent's features tags. ``score`` of it applies the new
promise, with the size it was certified on.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.core.configs import check_at_least, invalid
from pipeline.core.contracts import DEFAULT_BATCH
from pipeline.core.errors import PipelineError, naming

PARENT_TAG = "mlflow.parentRunId"  # MLflow's own: the UI nests the new run under its parent
RECERTIFIED_TAG = "recertified_from"  # the parent run's id (this project's tag)
RECORD = "recertification.json"  # what the re-certification did, beside model_info.json
COPIED_TAGS = ("features_dir", "features_id", "features_source", "split_mode", "release", "run_kind", "model_label",
               "model_format")  # the parent's tags the new run carries (the same model, the same features)


class RecertifyError(PipelineError, ValueError):
    """Input a re-certification cannot use; the message names the file, column or row."""


@dataclass
class RecertifyConfig:
    """Settings of a re-certification (each comment its help)."""

    alpha: float | None = None  # the promise: the kept admissions miss at most alpha of the deaths (unset: the
        # run's)
    delta: float | None = None  # ... with confidence 1 - delta (unset: the run's)
    refit_threshold: bool = False  # also refit the decision threshold, at the run's sensitivity, on half the new
        # admissions (the other half fits the map and the rule); default: the run's flags kept
    weighted: bool = False  # no new outcomes: re-weight the run's calibration half towards the new admissions
        # (likelihood ratios of a domain classifier; valid under covariate shift only)
    max_weight: float = 5.0  # with --weighted: the cap on the weights (the calibration admissions' mean weight is 1)
    samples: int | None = None  # Monte Carlo samples per mixture component
    batch_size: int = DEFAULT_BATCH  # admissions per forward pass
    seed: int = 0  # seed of the weight draws and of the splits
    threads: int | None = None  # torch intra-op threads (unset: torch's default)

    def __post_init__(self) -> None:
        check_at_least(self, 1, ("batch_size", "samples"))
        for name in ("alpha", "delta"):
            value = getattr(self, name)
            if value is not None and not 0.0 < float(value) < 1.0:
                raise invalid(self, f"{name} must lie strictly between 0 and 1, got {value}", name)
        if not self.max_weight >= 1.0:
            raise invalid(self, f"max_weight must be at least 1 (the mean weight), got {self.max_weight}", "max_weight")
        if self.weighted and self.refit_threshold:
            raise invalid(self, "weighted keeps the run's decision threshold (no new outcomes to refit it on): give "
                          "one of weighted, refit_threshold", "weighted", "refit_threshold")


@dataclass
class RecertifyResult:
    """What a re-certification made."""

    run_id: str  # the new run
    parent: str  # the run it re-certified
    policy: object  # the new bayes.referral.policy.Policy
    mode: str  # labelled | refit_threshold | weighted
    admissions: int  # new admissions read
    used: int  # of which the promise was certified on (labelled), or re-weighted for (weighted)
    deaths: int  # deaths among the labelled ones (0: weighted)
    left_out: int  # admissions without an outcome, left out (labelled modes)
    out: Path  # the new run's files
    shift: object | None = None  # the new admissions against the parent's calibration half (shift.CohortCheck)
    notes: list[str] = field(default_factory=list)  # what else the command says
    outcomes: str = "deaths"  # the outcome's plural, in words (the run's features manifest: data.task)

    def summary(self) -> str:
        """What ``cli.py recertify`` prints."""
        what = (f"{self.used:,} labelled admissions of the new period ({self.deaths:,} {self.outcomes})"
                if self.mode != "weighted" else f"{self.used:,} admissions of the new period, without outcomes "
                                               "(the run's calibration half re-weighted towards them)")
        left = (f"; {self.left_out:,} without an outcome left out of it (the rule's candidate cuts come from all "
                f"{self.admissions:,})" if self.left_out else "")
        lines = [f"re-certified run {self.parent} on {what}{left}: new run {self.run_id}"]
        if self.shift is not None:
            lines.append(f"  before: {self.shift.sentence()}")
        lines += [f"  {line}" for line in (*self.notes, *self.policy.lines())]
        return "\n".join(lines) + f"\nrun_id: {self.run_id} (parent {self.parent})"


def recertify_run(run: str, *, data: Path | str | None = None, source: str | None = None,
                  labels: Path | str | None = None, cohort: Path | str | None = None, schema: str = "mimiciii",
                  as_of: str | None = None, times: Path | str | None = None, task: Path | str | None = None,
                  run_data: Path | str | None = None, cfg: RecertifyConfig | None = None,
                  out_dir: Path | str | None = None, experiment: str | None = None,
                  device: str | None = None) -> RecertifyResult:
    """Re-certify run ``run`` on the new period's ``data`` or ``source`` (module docstring); ``run_data``: the run's
    training features (``weighted``: its selection half; default the folder the run was trained on)."""
    import numpy as np
    import torch

    from pipeline.core.devices import resolve_device
    from pipeline.runs.load import load_run
    from pipeline.tasks.mortality import KEY as MORTALITY
    from pipeline.tasks.mortality import recertify as rc
    from pipeline.tasks.mortality import risk, shift
    from pipeline.tasks.mortality.validation import said_no_policy

    cfg = cfg or RecertifyConfig()
    if (data is None) == (source is None):
        raise naming(RecertifyError("give exactly one of `data` (features of the new period) or `source` (a MIMIC or "
                                    "MEDS source, extracted with the run's vocabulary)"), "data", "source")
    if cfg.weighted and labels is not None:
        raise naming(RecertifyError("`labels` gives outcomes, and the weighted rule is for a new period without them: "
                                    "re-certify on the outcomes (no weighted)"), "labels", "weighted")
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    with tempfile.TemporaryDirectory(prefix="recertify-") as tmp:
        rm = load_run(run, Path(tmp) / "model", resolve_device(device), kind=MORTALITY)
        if rm.run_id is None:
            raise naming(RecertifyError(f"{run}: recertify records a new run that points at its parent: give a tracked "
                                        "run (its id)"), "run")
        policy = risk.policy_of(rm.info)
        if policy is None:
            raise RecertifyError(f"run {rm.run_id} has no policy ({said_no_policy(rm.info)}): it made no promise "
                                 "to re-certify; train it again")
        files = _inputs(rm, data, source, Path(tmp), cohort, schema, as_of, times, task)
        sets = [_read(f, rm) for f in files]
        n = sum(len(fs) for fs in sets)
        if n == 0:
            raise RecertifyError(f"{files[0]}: no admissions")
        y, where = _outcomes(sets, files, labels)
        scorer = rm.scorer(samples=cfg.samples, batch_size=cfg.batch_size, policy=policy)
        pred, matrix = rc.predictions(scorer, sets, rm.vocab, scorer.generator(cfg.seed))
        before = shift.checker(rm, scorer, cfg.seed)
        before.sample.add(n, {k: v for k, v in policy.measures(pred, *_decided(policy, pred)).items()
                              if k in shift.MEASURES}, matrix if before.matrix else None)
        asked = rc.with_settings(policy, cfg.alpha, cfg.delta)
        notes: list[str] = []
        more = None  # what more outcomes would buy (labelled mode)
        if cfg.weighted:
            if not np.isnan(y).all():
                notes.append("the outcomes of these admissions were not used (weighted)")
            sel_x, cal_x = _run_halves(rm, run_data, policy)
            new, _, _ = rc.weighted_policy(asked, cal_x, sel_x, pred, matrix, cfg.max_weight, cfg.seed)
            rows, mode, deaths = np.arange(n), "weighted", 0
        else:
            rows = np.flatnonzero(~np.isnan(y))
            if not rows.size:
                raise naming(RecertifyError(f"{where}: no outcomes (column 'label' is empty in its {n:,} admissions): "
                                            "recertify needs the new period's outcomes: give `labels` (a CSV of "
                                            "key,label, or MEDS label files), or `weighted` without outcomes"),
                             "labels", "weighted")
            sub = rc.subset(pred, rows)
            new = rc.labelled(asked, sub, y[rows], reference=pred if rows.size < n else None,
                              refit_threshold=cfg.refit_threshold, seed=cfg.seed)
            mode, deaths = ("refit_threshold" if cfg.refit_threshold else "labelled"), int(y[rows].sum())
            more = None if cfg.refit_threshold else rc.more_outcomes(new, pred, rows.size, deaths)
            if more is not None:
                notes.append(rc.more_outcomes_line(more))
        ref = rc.reference(new, rc.subset(pred, rows), matrix[rows], rm.vocab, cfg.seed)
        record = {"mode": mode, "parent_run_id": rm.run_id, "admissions": n, "used": int(rows.size),
                  "more_outcomes": more,
                  "deaths": deaths, "left_out": 0 if cfg.weighted else int(n - rows.size), "samples": scorer.samples,
                  "settings": {k: v for k, v in vars(cfg).items() if k not in ("threads",)},
                  "sentence": new.sentence()}
        run_id, out = _record(rm, new, ref, record, Path(tmp), out_dir, experiment)
    from pipeline.data.task import of_manifest

    return RecertifyResult(run_id, rm.run_id, new, mode, n, int(rows.size), deaths, record["left_out"], out,
                           before.result(), notes, of_manifest(rm.manifest).outcomes)


def _decided(policy, pred):
    """(calibrated risk, high-risk flags) of ``pred`` under ``policy``, as ``Policy.measures`` takes them."""
    cal = policy.calibrator.apply(pred.mean)
    return cal, policy.threshold.flag(cal)


def _inputs(rm, data, source, tmp: Path, cohort, schema: str, as_of, times, task) -> list[Path]:
    """The feature files of the new period: ``data`` (its vocabulary the run's), or ``source`` extracted as
    ``score --source`` extracts it."""
    from pipeline.core import fileio
    from pipeline.serving import meds
    from pipeline.serving.score import extract_cohort, feature_files, parse_as_of

    if data is not None:
        files = feature_files(data)
        for f in files:
            vf = f.parent / "vocab.json"
            if vf.exists() and fileio.read_json(vf) != rm.vocab:
                raise naming(RecertifyError(f"{f}: extracted with {vf}, another vocabulary than run {rm.run_id}'s: "
                                            "token ids would mean other events; give the new period's source "
                                            "(`source`), extracted with the run's vocabulary"), "source")
        return files
    if meds.check_arguments(source, cohort, as_of, task, times, None):
        return [meds.census_features(source, rm, tmp / "features", task=task, times=times).files["cohort"]]
    from pipeline.serving.cohort import read_cohort
    from pipeline.serving.release import release_of

    condition = read_cohort(Path(cohort))[0] if cohort is not None else "TRUE"
    result = extract_cohort(source, rm.manifest, rm.vocab, tmp / "features", condition, schema,
                            parse_as_of(as_of) if as_of is not None else None, release=release_of(rm.manifest))
    return [result.files["cohort"]]


def _read(path: Path, rm):
    """A feature file as a FeatureSet, checked as ``score`` checks it (contract, vocabulary, rows)."""
    from pipeline.data import features
    from pipeline.data.consistency import check_rows

    values = bool(rm.model.value_channel)
    features.check_file(path, values=values)
    fs = features.load_split(path, require_labels=False, values=values)
    fs.check_vocab(len(rm.vocab["tokens"]), len(rm.vocab["context"]))
    window = ((rm.manifest or {}).get("config") or {}).get("prediction_hours")
    check_rows(fs, window)
    return fs


def _outcomes(sets: list, files: list[Path], labels):
    """((N,) outcomes, nan where none; what holds them, for messages): the features' ``label`` column, or
    ``labels`` by key (``serving.monitor.read_outcomes``: each key in the features, once)."""
    import numpy as np
    import pandas as pd

    from pipeline.serving.monitor import MonitorError, read_outcomes

    keys = np.concatenate([fs.keys for fs in sets])
    if labels is None:
        return np.concatenate([fs.label for fs in sets]).astype(np.float64), str(files[0] if len(files) == 1 else
                                                                                 files[0].parent)
    try:
        got = read_outcomes(labels)
    except MonitorError as exc:
        raise RecertifyError(str(exc)) from None
    rows = pd.Index(keys).get_indexer(got.keys)
    bad = np.flatnonzero(rows < 0)
    if bad.size:
        raise RecertifyError(f"{got.where[bad[0]]}: key not among the new admissions' features ({bad.size} such rows)")
    dup = np.flatnonzero(pd.Series(rows).duplicated().to_numpy())
    if dup.size:
        raise RecertifyError(f"{got.where[dup[0]]}: key repeated: one outcome per admission ({dup.size} repeated rows)")
    y = np.full(keys.shape[0], np.nan)
    y[rows] = got.labels
    return y, str(labels)


def _run_halves(rm, run_data, policy):
    """(selection half's matrix, calibration half's matrix) of the run's validation split (``weighted``)."""
    import numpy as np

    from pipeline.core import fileio
    from pipeline.data import features
    from pipeline.tasks.mortality.inputs import split_validation
    from pipeline.tasks.mortality.shift import feature_matrix

    fdir = Path(run_data) if run_data is not None else rm.features_dir
    if fdir is None:
        raise naming(RecertifyError(f"run {rm.run_id} does not record its features directory: give it (`run_data`) "
                                    "for its validation selection half"), "run_data")
    vf = fdir / "vocab.json"
    if not vf.exists() or fileio.read_json(vf) != rm.vocab:
        raise naming(RecertifyError(f"{fdir}: not the features run {rm.run_id} was trained on (its vocab.json "
                                    f"{'differs' if vf.exists() else 'is missing'})"), "run_data")
    val = features.load_split(fdir / "val.parquet")
    sel, cal = split_validation(val, float(rm.train_config.get("calibration_share") or 0.0))
    kept = (policy.kept.get("calibration") or {}).get("labels")
    if kept is None or len(cal) != len(kept) or not np.array_equal(np.asarray(cal.label, np.float64),
                                                                   np.asarray(kept, np.float64)):
        raise naming(RecertifyError(f"{fdir / 'val.parquet'}: its calibration half is not the one run {rm.run_id}'s "
                                    "policy kept: not the features the run was trained on"), "run_data")
    sizes = (len(rm.vocab["tokens"]), len(rm.vocab["context"]))
    return feature_matrix(sel, *sizes), feature_matrix(cal, *sizes)


def _record(rm, policy, ref, record: dict, tmp: Path, out_dir, experiment) -> tuple[str, Path]:
    """The new run (module docstring): (its id, its folder)."""
    from pipeline.core import fileio
    from pipeline.runs import record as writer
    from pipeline.runs import store
    from pipeline.runs.formats import FILES
    from pipeline.runs.tracking import make_tracker
    from pipeline.tasks.mortality.recertify import with_policy

    c = store.client()
    parent = c.get_run(rm.run_id)
    src = next((p for p in sorted(tmp.rglob("*")) if p.name in FILES.values()), None)
    if src is None:
        raise RecertifyError(f"run {rm.run_id}: no model file ({' or '.join(FILES.values())}) among its artifacts")
    name = experiment or c.get_experiment(parent.info.experiment_id).name
    with make_tracker(True, experiment=name, run_name=f"recertified-{rm.run_id[:8]}") as tracker:
        out = Path(out_dir) if out_dir is not None else Path("runs") / "recertify" / tracker.run_id
        out.mkdir(parents=True, exist_ok=True)
        with_policy(src, out / src.name, policy)
        fileio.write_json(out / store.VOCAB, rm.vocab)
        if rm.manifest:
            fileio.write_json(out / store.MANIFEST, rm.manifest)
        ref.save(out / store.SHIFT_REFERENCE)
        fileio.write_json(out / RECORD, record)
        info = {**rm.model_info, "policy": policy.to_dict(arrays=False), "recertification": record,
                "parent_run_id": rm.run_id}
        tracker.log_params({"recertify": record["settings"], "mode": record["mode"], "n_new": record["used"],
                            "parent_run_id": rm.run_id})
        tags = {k: v for k, v in parent.data.tags.items() if k in COPIED_TAGS}
        for key, value in {**tags, PARENT_TAG: rm.run_id, RECERTIFIED_TAG: rm.run_id}.items():
            tracker.set_tag(key, value)
        for f in (store.VOCAB, store.MANIFEST):
            if (out / f).exists():
                tracker.log_artifact(out / f, store.FEATURES_ARTIFACTS)
        writer.write_run(tracker, out, info=info, checkpoint=out / src.name, step=int(rm.info.step or 0),
                         score_samples=rm.info.score_samples, artifacts=(out / store.SHIFT_REFERENCE, out / RECORD),
                         pyfunc=True)
        return tracker.run_id, out
