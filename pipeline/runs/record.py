"""What every trained run records, written in one place: ``write_run``.

Every kind of run ends the same way: a mortality run (``workflows.train``), a classical baseline
(``workflows.baselines_run``), a Laplace run (``workflows.laplace_run``) and a vision run
(``workflows.vision_run``). What a run records beside its model comes from its task (for a mortality model the
refer measure, its threshold, the validation summary and the policy: ``tasks.mortality.validation``).
``write_run`` writes the run's ``model_info.json``,
its own copies of the training ``vocab.json`` and redacted ``manifest.json`` and the features tags
(directory, split mode, MIMIC release) where it was trained on features, logs the metrics and artifacts
under ``runs.store``'s names, the model file under ``checkpoint/`` and, for a model that scores features,
the pyfunc. So every run carries the same layout and is read back by ``runs.load.load_run`` alike.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from pipeline.core import fileio
from pipeline.core.redact import redact_json
from pipeline.runs import store
from pipeline.runs.identity import (
    FEATURES_ID_TAG,
    FEATURES_SOURCE_TAG,
    features_id,
    features_identity,
    read_manifest,
    source_of,
)

__all__ = ["copy_inputs", "features_id", "tag_features", "write_artifacts", "write_run"]


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
    """Tag a run with the features it was trained on: evaluate finds them (their folder), compare groups by
    their identity (``runs.identity``: their content, not their folder) and split mode and labels them by
    source and release, score checks the release."""
    manifest = read_manifest(fdir)
    if (identity := features_identity(manifest)) is not None:
        tracker.set_tag(FEATURES_ID_TAG, identity)
        tracker.set_tag(FEATURES_SOURCE_TAG, source_of(manifest))
    tracker.set_tag(store.FEATURES_DIR_TAG, str(Path(fdir).resolve()))
    tracker.set_tag(store.SPLIT_MODE_TAG, store.features_split_mode(fdir))
    tracker.set_tag(store.RELEASE_TAG, store.features_dir_release(fdir))


def write_artifacts(out: Path, artifacts: dict) -> tuple[Path, ...]:
    """A task's own files of a run (``Finished.artifacts``: name -> a function writing the file at a path), written
    into ``out``; their paths, for ``write_run``'s ``artifacts``."""
    paths = []
    for name, write in artifacts.items():
        write(Path(out) / name)
        paths.append(Path(out) / name)
    return tuple(paths)


def write_run(tracker, out: Path, *, info: dict, checkpoint: Path, step: int, fdir: Path | None = None,
              validation=None, score_samples: int | None = None, metrics: dict | None = None,
              artifacts: tuple[Path, ...] = (), pyfunc: bool | None = None) -> Path:
    """The one writer of a finished run's records (see the module docstring); returns the model_info path.

    ``info``: the model's part of ``model_info.json`` (with ``validation``'s part and ``score_samples`` added);
    ``fdir``: the features it was trained on (copied into ``out`` where it holds none, tagged); ``metrics``
    (with ``validation``'s scalars) are logged at ``step``; ``artifacts`` beside ``model_info.json``; the model
    file ``checkpoint`` under ``checkpoint/``; ``pyfunc`` (default: when trained on features) logs the MLflow
    model that scores a features table.
    """
    out = Path(out)
    if fdir is not None:
        copy_inputs(Path(fdir), out, replace=False)
    full = {**info, **(validation.info() if validation is not None else {})}
    if score_samples is not None:
        full["score_samples"] = score_samples
    fileio.write_json(out / store.MODEL_INFO, full)
    if fdir is not None:
        tag_features(tracker, Path(fdir))
    tracker.log_metrics({**(validation.scalars if validation is not None else {}), **(metrics or {})}, step)
    for path in (out / store.MODEL_INFO, *artifacts):
        tracker.log_artifact(path)
    for name in (store.VOCAB, store.MANIFEST):
        if fdir is not None and (out / name).exists():
            tracker.log_artifact(out / name, store.FEATURES_ARTIFACTS)
    tracker.log_artifact(checkpoint, store.CHECKPOINT_ARTIFACTS)
    if fdir is not None if pyfunc is None else pyfunc:
        tracker.log_pyfunc(checkpoint=checkpoint, vocab=out / store.VOCAB, model_info=out / store.MODEL_INFO,
                           default_samples=score_samples)
    return out / store.MODEL_INFO
