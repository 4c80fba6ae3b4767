"""Batch scoring of a census: features (or a MIMIC source) -> one risk row per admission.

Input is a features Parquet file / directory written by the extraction, or a MIMIC-III / MIMIC-IV
source extracted on the fly with the training vocabulary and bins (nothing refitted; the
de-identification key must be the training one for keys to match). A cohort file restricts
the source: a list of HADM_IDs (one per line, optional header) or a SQL condition on the
columns of ``sql/02_cohort.sql`` (``serving.cohort``). Features stream through in chunks (``features.iter_parquet``),
so memory is bounded by ``chunk_rows`` and ``batch_size``·S·K, and the output Parquet
(``contracts.RISK``) is written atomically.

For the data owner (``link``), beside the output in ``_private/`` (directory 0700, files 0600):
``link.csv`` (pseudonym -> HADM_ID of every scored admission; from the extraction, or from the
features' own ``_private/link.csv``) and, for a source, ``unscored.csv`` (HADM_ID, reason: absent,
quarantined with its reason, outside the cohort criteria, died or discharged before T;
``cohort.unscored``). Only counts per reason reach the console and the log. ``report``: the
cohort report (``serving.report``), keyed by pseudonym; with ``link`` a copy keyed by HADM_ID
goes to ``_private/`` too.
"""

from __future__ import annotations

import logging
import re
import tempfile
from dataclasses import fields
from pathlib import Path

import pyarrow as pa

from pipeline.core import fileio
from pipeline.core.contracts import COHORT_COLUMNS, RISK
from pipeline.core.devices import resolve_device
from pipeline.core.errors import naming
from pipeline.core.privacy import check_private
from pipeline.data import features
from pipeline.data.consistency import check_rows
from pipeline.data.mimic.sources.tables import Release
from pipeline.runs.load import evaluation, load_run
from pipeline.serving import cohort as cohort_mod
from pipeline.serving import release
from pipeline.serving.cohort import read_cohort
from pipeline.serving.config import ScoreConfig  # noqa: F401  (its home; imported from here too)
from pipeline.serving.decisions import no_policy, policy_report, run_policy
from pipeline.serving.summary import ScoreError, ScoreSummary, scores_schema  # noqa: F401  (their home)
from pipeline.tasks.mortality import KEY as MORTALITY
from pipeline.tasks.mortality import risk, shift

log = logging.getLogger(__name__)

SPLIT_FILES = ("cohort", "train", "val", "test")  # files scored in a features directory (cohort alone if present)
_COHORT_SQL_ERROR = re.compile(r"^cohort \(ADMISSIONS, PATIENTS\)(?: \(PostgreSQL\))?: (?:(\w+(?: \w+)? Error)\b)?")


# ---------------------------------------------------------------------------- inputs


def feature_files(data: Path | str) -> list[Path]:
    """The Parquet file itself, or a directory's ``cohort.parquet`` (else its train/val/test files)."""
    path = Path(data)
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise ScoreError(f"{path}: no such features file or directory")
    if (path / "cohort.parquet").exists():
        return [path / "cohort.parquet"]
    files = [path / f"{s}.parquet" for s in SPLIT_FILES[1:] if (path / f"{s}.parquet").exists()]
    if not files:
        raise ScoreError(f"{path}: no cohort.parquet or train/val/test.parquet in this directory")
    return files


def scores_path(out: Path | str) -> Path:
    """Where the scores go: ``FILE.parquet`` itself; a directory (one that exists, or a name without a
    suffix) -> ``DIR/scores.parquet``, so the data owner's ``_private/`` lands inside ``DIR``, not in
    its parent. Any other suffix (``x.csv``) is refused: the scores are Parquet, never silently."""
    path = Path(out)
    if path.is_dir() or (not path.suffix and not path.exists()):
        return path / "scores.parquet"
    if path.suffix.lower() != ".parquet":
        raise ScoreError(f"--out {out}: the scores are written as Parquet; name the file .parquet (e.g. "
                         f"{path.with_suffix('.parquet')}) or give a directory (it gets scores.parquet and _private/)")
    return path


def extract_cohort(source: str | Path, manifest: dict, vocab: dict, out_dir: Path, cohort_filter: str = "TRUE",
                   schema: str = "mimiciii", as_of: float | None = None, release: str | None = None):
    """Extract ``source`` with the training configuration and vocabulary; returns the ``ExtractResult``
    (``files["cohort"]``: cohort.parquet; ``excluded``: the admissions outside the cohort; ``as_of``,
    ``release``: see ``extract.extract``)."""
    from pipeline.data.mimic.extraction import ExtractConfig, SplitMode, extract
    from pipeline.data.mimic.extraction.tokens import Vocab

    saved = dict((manifest or {}).get("config") or {})
    if not saved:
        raise naming(ScoreError("the model's run has no features/manifest.json with the extraction settings; "
                                "extract the census first and score its features (`data`)"), "data")
    known = {f.name for f in fields(ExtractConfig)}
    if set(saved) - known:
        log.warning("extraction settings %s of the training run are unknown to this version; ignored",
                    sorted(set(saved) - known))
    cfg = ExtractConfig(**{k: v for k, v in saved.items() if k in known})
    cfg.split = SplitMode(cfg.split)
    return extract(source, out_dir, cfg, vocab=Vocab.from_json(vocab), schema=schema, cohort_filter=cohort_filter,
                   as_of=as_of, release=release)


# ---------------------------------------------------------------------------- scoring


def score_files(run, files: list[Path], out: Path | str, cfg: ScoreConfig) -> ScoreSummary:
    """Score Parquet feature ``files`` with a loaded ``runs.load.Run`` chunk by chunk into ``out``: the run's scorer
    (``Run.scorer``, its policy re-derived under ``cfg``: ``decisions.run_policy``) scores each chunk."""
    import pyarrow.parquet as pq
    import torch

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    scorer = run.scorer(samples=cfg.samples, batch_size=cfg.batch_size, policy=run_policy(run, cfg))
    samples = scorer.samples
    chosen_at = run.info.score_samples
    if chosen_at and int(chosen_at) != samples:
        log.warning("the refer threshold was chosen on validation with %d samples per component; scoring with %d "
                    "changes the mutual information's Monte Carlo noise, so the referred fraction can differ",
                    int(chosen_at), samples)
    if scorer.refer_threshold is None:
        raise ScoreError("the model has no refer threshold (best.pt of an unfinished training run)")
    policy = scorer.policy
    sizes = (len(run.vocab["tokens"]), len(run.vocab["context"]))
    values = scorer.value_channel  # a value-channel model reads (and needs) bag_values
    window = scorer.window_hours  # None: not recorded
    for f in files:
        features.check_file(f, values=values)
        _check_vocab_file(f, run.vocab)
    total = referred = empty = early = high = 0
    out = Path(out)
    gen = scorer.generator(cfg.seed)  # one stream for the whole run, chunk after chunk
    check = shift.checker(run, scorer, cfg.seed)  # the cohort against the run's calibration half (issue 43)
    with fileio.atomic_path(out) as tmp:
        with pq.ParquetWriter(tmp, scores_schema(run, policy, samples), compression="zstd") as writer:
            for f in files:
                for fs in _chunks(f, cfg.chunk_rows, values, window):
                    fs.check_vocab(*sizes)
                    table, measures = scorer.scored(fs, gen)
                    check.add(fs, measures)
                    writer.write_table(pa.Table.from_pandas(table, schema=RISK.arrow_schema(), preserve_index=False))
                    total += len(table)
                    referred += int(table["refer"].sum())
                    empty += int(table["no_events"].sum())
                    early += int(table["before_prediction_time"].sum())
                    high += int(table["high_risk"].sum())
    return ScoreSummary(out, total, referred, empty, samples, run.model.components, list(files),
                        before_prediction_time=early, high_risk=high, policy=policy, shift=check.result(),
                        no_policy=None if policy is not None else no_policy(run))


def _chunks(path: Path, chunk_rows: int, values: bool = False, window: float | None = None):
    """``features.iter_parquet`` with Arrow read errors turned into ``ScoreError`` naming the file, and every row
    checked not to contradict itself (``data.consistency.check_rows``, ``window``: the model's prediction window)."""
    it = features.iter_parquet(path, chunk_rows, values)
    row0 = 0
    while True:
        try:
            fs = next(it)
        except StopIteration:
            return
        except (pa.ArrowInvalid, OSError) as exc:
            raise ScoreError(f"{path}: cannot read the Parquet data ({exc})") from None
        check_rows(fs, window, row0)
        row0 += len(fs)
        yield fs


def _own_vocab(path: Path, vocab: dict) -> bool:
    """Whether the features file ``path`` indexes the model's ``vocab`` (True where no vocab.json is beside it)."""
    vf = path.parent / "vocab.json"
    return not vf.exists() or fileio.read_json(vf) == vocab


def _check_vocab_file(path: Path, vocab: dict) -> None:
    """A vocab.json next to the features must be the model's (else ids mean other tokens)."""
    if not _own_vocab(path, vocab):
        raise naming(ScoreError(f"{path}: the features were extracted with {path.parent / 'vocab.json'}, which is not "
                                "the model's vocabulary; score their MIMIC source instead (`source`), which is "
                                "extracted with the training vocabulary"), "source")


def score(model_uri: str, out: Path | str, *, data: Path | str | None = None, source: str | None = None,
          cohort: Path | str | None = None, cfg: ScoreConfig | None = None, schema: str = "mimiciii",
          as_of: str | None = None, report: Path | str | None = None, link: bool = True,
          cross_release: bool = False, device: str | None = None, task: Path | str | None = None,
          times: Path | str | None = None, decision_threshold: float | None = None) -> ScoreSummary:
    """Score ``data`` (features) or ``source`` (MIMIC-III or MIMIC-IV, optionally restricted by ``cohort``) into
    ``out``, the model on ``device`` (``pipeline.core.devices.resolve_device``: None is cuda when available, else cpu).

    ``as_of`` (with ``source``): when the source's data ends, a timestamp on its clock
    ("YYYY-MM-DD HH:MM[:SS]"); default the newest ADMITTIME or DISCHTIME in ADMISSIONS. Open
    admissions whose prediction time is later are scored on the hours observed and flagged.
    ``report``: an HTML cohort report; ``link``: the data owner's files in ``_private/`` beside
    ``out`` (see the module docstring). ``cross_release``: allow features (or a source) of another
    MIMIC release than the model's (``serving.release``); the summary then reports the share of
    out-of-vocabulary tokens.
    MEDS (``serving.meds``): a MEDS ``source`` is a census at ``times`` or ``task``'s prediction times; MEDS scores
    come with the data owner's prediction file (decision at ``decision_threshold``, else the run's).
    """
    from pipeline.serving import meds

    cfg = cfg or ScoreConfig()
    meds_source = meds.check_arguments(source, cohort, as_of, task, times, decision_threshold)
    out = scores_path(out)
    for folder, name in ((data, "data"), (source, "source")):  # the scores and _private/ not among the inputs' files
        if folder is not None and Path(folder).is_dir():
            fileio.refuse_inside(out.parent, folder, "scores and their _private/ files", ("out", name))
    if (data is None) == (source is None):
        raise naming(ScoreError("give exactly one of `data` (features) or `source` (a MIMIC source)"), "data", "source")
    if cohort is not None and source is None:
        raise naming(ScoreError("`cohort` restricts a source extraction (`source`); with features (`data`), filter "
                                "them instead"), "cohort", "source", "data")
    if as_of is not None and source is None:
        raise naming(ScoreError("`as_of` applies to a source extraction (`source`); features (`data`) record their "
                                "window already"), "as_of", "source", "data")
    as_of_epoch = parse_as_of(as_of) if as_of is not None else None
    if report is not None and Path(report).resolve().parent == (Path(out).resolve().parent / "_private"):
        raise ScoreError(f"{report}: the report keyed by pseudonym does not belong in _private/ (the data owner's "
                         "copy, keyed by HADM_ID, is written there with link)")
    if link:  # the data owner's files: never where `git add .` takes them (before any work is done)
        check_private(out.parent / "_private", what="the data owner's link file and reports by HADM_ID")
    with tempfile.TemporaryDirectory(prefix="score-") as tmp:
        run = load_run(model_uri, Path(tmp) / "model", resolve_device(device), kind=MORTALITY)
        model_release = release.release_of(run.manifest)
        if data is not None:
            files = feature_files(data)
            crossing = release.check(model_release, release.files_release(files), cross_release, str(data),
                                     features=not _own_vocab(files[0], run.vocab))
            summary = _with_oov(score_files(run, files, out, cfg), run, files, crossing)
            links = _features_links(files) if link else None
            return meds.feature_predictions(_finish(run, summary, links, report), files, run, link, decision_threshold)
        if meds_source:
            result = meds.census_features(source, run, Path(tmp) / "features", task=task, times=times)
            path, crossing = result.files["cohort"], release.check(model_release, Release.meds, cross_release, source)
            summary = _with_oov(score_files(run, [path], out, cfg), run, [path], crossing)
            return _finish(run, meds.census_done(summary, result, run, link, decision_threshold), None, report)
        condition, ids = read_cohort(Path(cohort)) if cohort is not None else ("TRUE", None)
        from pipeline.data.mimic.sources.base import SourceError

        try:
            result = extract_cohort(source, run.manifest, run.vocab, Path(tmp) / "features", condition, schema,
                                    as_of_epoch, release=None if cross_release else model_release)
        except SourceError as exc:
            m = _COHORT_SQL_ERROR.match(str(exc))
            if cohort is None or not m:
                raise
            # the database's message can quote the condition's values (HADM_IDs): only its kind is shown
            kind = m.group(1) or "rejected by the database"
            raise ScoreError(f"{cohort}: the cohort condition could not be run ({kind}); it must be one SQL "
                             f"expression over the columns {list(COHORT_COLUMNS)}, or the file a list of HADM_IDs; "
                             "the database's message is not shown (it can quote the file's values)") from None
        path = result.files["cohort"]
        summary = _with_oov(score_files(run, [path], out, cfg), run, [path],
                            release.files_release([path]) != model_release)
        from pipeline.data.mimic import deid

        table = deid.read_link_file(result.link_file)
        links = dict(zip(table["key"], table["hadm_id"].astype("int64")))
        missing = cohort_mod.unscored(result.excluded, set(links.values()), ids,
                                      None if cohort is None or ids is not None else condition)
        summary.not_scored_by = cohort_mod.counts(missing)
        summary.not_scored = len(missing)
        if summary.not_scored:
            log.warning("%d admissions of the census have no score: %s", summary.not_scored,
                        ", ".join(f"{k} {v}" for k, v in summary.not_scored_by.items() if v))
        if link:
            summary.unscored_file = _write_private(Path(out).parent / "_private" / "unscored.csv",
                                                   missing[["hadm_id", "reason"]].to_csv(index=False))
        return _finish(run, summary, links if link else None, report)


def _write_private(path: Path, text: str) -> Path:
    """A file of the data owner's (raw HADM_IDs): mode 0600 in a 0700 directory."""
    import os

    path.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    return fileio.write_text(path, text, mode=0o600)


def _features_links(files: list[Path]) -> dict | None:
    """pseudonym -> HADM_ID from the features' own ``_private/link.csv`` (None when the data owner's
    file is not beside them)."""
    from pipeline.data.mimic import deid

    path = files[0].parent / "_private" / "link.csv"
    if not path.exists():
        log.info("no %s beside the features: no link file written", path)
        return None
    table = deid.read_link_file(path)
    return dict(zip(table["key"], table["hadm_id"].astype("int64")))


def _finish(run, summary: ScoreSummary, links: dict | None, report: Path | str | None) -> ScoreSummary:
    """The link file and the reports of a scored census (see the module docstring)."""
    import pyarrow.parquet as pq

    from pipeline.data.mimic import deid
    from pipeline.serving import report as report_mod

    private = summary.out.parent / "_private"
    scores = pq.read_table(summary.out).to_pandas() if (links is not None or report is not None) else None
    if links is not None:
        keys = [k for k in scores["key"] if k in links]
        if len(keys) < len(scores):
            log.warning("%d scored admissions are not in the features' link file", len(scores) - len(keys))
        target = private / "link.csv"
        source = summary.inputs[0].parent / "_private" / "link.csv" if summary.inputs else None
        if source is None or not target.exists() or target.resolve() != source.resolve():  # never shrink extract's
            summary.link_file = deid.write_link_file(target, keys, [int(links[k]) for k in keys])
        else:
            summary.link_file = target
    if report is not None:
        inp = report_mod.ReportInput(
            scores=scores, run_id=run.run_id, model_kind=str(run.info.model_kind), samples=summary.samples,
            components=summary.components, refer_threshold=float(run.info.refer_threshold),
            val_metrics=run.model_info.get("val_metrics"),
            reliability=validation_reliability(run), not_scored=summary.not_scored_by,
            refer_measure=risk.refer_measure_of(run.info).value,
            refer_measure_source=run.model_info.get("refer_measure_source"),
            prediction_hours=((run.manifest or {}).get("config") or {}).get("prediction_hours"),
            splits=splits_of(summary.inputs) or cohort_mod.training_splits(run.features_dir, scores["key"]),
            scores_file=summary.out.name, shift=summary.shift and summary.shift.to_dict(), task=run.words,
            no_policy=summary.no_policy,
            **policy_report(summary.policy))
        summary.report = report_mod.write_report(report, inp)
        if links is not None:
            inp.ids = links
            summary.private_report = report_mod.write_report(private / Path(report).name, inp, mode=0o600)
    return summary


def splits_of(files: list[Path]) -> dict | None:
    """pseudonym -> split of scored features files named train/val/test.parquet (a features
    directory, or one of its files); None for anything else (a census's cohort.parquet)."""
    import pyarrow.parquet as pq

    if not files or any(f.stem not in SPLIT_FILES[1:] for f in files):
        return None
    return {k: f.stem for f in files for k in pq.read_table(f, columns=["key"]).column("key").to_pylist()}


def _with_oov(summary: ScoreSummary, run, files: list[Path], crossing: bool) -> ScoreSummary:
    """Across releases: the share of out-of-vocabulary tokens in what was scored, logged and reported."""
    if crossing:
        n_sources = sum(t.endswith(":<oov>") for t in run.vocab["tokens"])
        summary.oov_share = release.oov_share(files, n_sources)
        log.warning("scored across MIMIC releases: %s of the bag tokens are out of the model's vocabulary",
                    "none" if summary.oov_share is None else f"{summary.oov_share:.1%}")
    return summary


def parse_as_of(text: str) -> float:
    """Epoch seconds of a naive timestamp "YYYY-MM-DD HH:MM[:SS]" (the source's clock, as its tables)."""
    from datetime import datetime, timezone

    for fmt in ("%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M"):
        try:
            return datetime.strptime(text.strip(), fmt).replace(tzinfo=timezone.utc).timestamp()
        except ValueError:
            continue
    raise naming(ScoreError("`as_of` must be a timestamp YYYY-MM-DD HH:MM[:SS] on the source's clock"), "as_of")


def validation_reliability(run) -> dict | None:
    """The model's validation reliability bins (counts, mean_p, observed): recorded at training
    (``model_info.json``), else from the run's evaluation of ``val`` (``eval/val/metrics.json``),
    else None."""
    rel = run.model_info.get("val_reliability")
    if rel:
        return rel
    if run.run_id is None:
        return None
    with tempfile.TemporaryDirectory(prefix="eval-val-") as tmp:
        m = evaluation(run.run_id, "val", tmp)
    if m is None:  # not evaluated on val
        log.info("run %s has no validation reliability (train it again, or evaluate it on the val split)", run.run_id)
        return None
    return {"counts": m.get("reliability_counts"), "mean_p": m.get("reliability_mean_p"),
            "observed": m.get("reliability_observed")}

