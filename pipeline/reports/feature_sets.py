"""Which feature set a run's table rows belong to, by content (``runs.identity``), never by a folder's name.

``of_run`` gives a run's section: the identity of the features its evaluations read (every evaluation
records it), else of the features it was trained on (tag ``features_id``); a run written before either
was recorded is identified from the manifest it logged (``features/manifest.json``: the same identity), and
one without even that by its recorded source (the features folder and release it was tagged with), which
the table says. A run evaluated on features other than those it trained on is a row of its own (``[trained on
<identity>]``); a split evaluated on other features than the run's other splits is left out of its section
(its figures, true risk included, describe other admissions), with a warning.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from pipeline.runs import store
from pipeline.runs.identity import FEATURES_ID_TAG, FEATURES_SOURCE_TAG, features_identity, label, source_of

log = logging.getLogger(__name__)


class Identified(str, Enum):
    """How a run's feature set was told."""

    CONTENT = "content"  # the identity the run or its evaluations recorded
    MANIFEST = "manifest"  # computed from the manifest the run logged (written before the identity was recorded)
    SOURCE = "source"  # the run records no manifest either: its features folder and release stand for it


HOW_ORDER = [h.value for h in Identified]  # the most direct first


@dataclass(frozen=True)
class FeatureSet:
    """A section of the table."""

    key: str  # the identity (runs.identity), or "source:<folder>|<release>" for a run identified by its source
    label: str  # the feature set in words: release, source, identity
    how: Identified  # how it was told


def trained_on(run, tmp: Path) -> FeatureSet:
    """The feature set ``run`` (a ``runs.load.RunRecord``) was trained on (see the module docstring)."""
    tags = run.tags
    release = tags.get(store.RELEASE_TAG)
    if tags.get(FEATURES_ID_TAG):
        identity = tags[FEATURES_ID_TAG]
        return FeatureSet(identity, label(release, tags.get(FEATURES_SOURCE_TAG), identity), Identified.CONTENT)
    manifest = _logged_manifest(run.run_id, tmp)
    identity = features_identity(manifest)
    if identity is not None:
        return FeatureSet(identity, label(manifest.get("release", release), source_of(manifest), identity),
                          Identified.MANIFEST)
    folder = tags.get(store.FEATURES_DIR_TAG) or str(run.params.get("features") or "unknown")
    return FeatureSet(f"source:{folder}|{release}", label(release, f"the features folder {folder}", None),
                      Identified.SOURCE)


def of_run(run, reports: dict[str, dict], tmp: Path) -> tuple[FeatureSet, FeatureSet, list[str]]:
    """(the run's section, the feature set it was trained on, the splits left out of the section) for an
    evaluated run and its evaluation reports by split."""
    trained = trained_on(run, tmp)
    evaluated = {split: rep.get("features_id") for split, rep in reports.items()}
    ids = set(evaluated.values())
    if len(ids) == 1 and None not in ids:  # every evaluation says what it read
        (identity,) = ids
        if identity == trained.key:
            return trained, trained, []
        rep = next(iter(reports.values()))
        section = FeatureSet(identity, rep.get("features_label") or label(None, None, identity), Identified.CONTENT)
        return section, (section if trained.how is Identified.SOURCE else trained), []
    others = [split for split, identity in evaluated.items() if identity is not None and identity != trained.key]
    for split in others:
        log.warning("run %s: its %s evaluation read other features (%s) than it was trained on (%s) while its other "
                    "splits did not: its %s figures are left out", run.run_id, split, evaluated[split], trained.key,
                    split)
    return trained, trained, others


def _logged_manifest(run_id: str, tmp: Path) -> dict | None:
    """The features manifest a run logged (``features/manifest.json``), or None."""
    from pipeline.core import fileio

    try:
        path = store.client().download_artifacts(run_id, f"{store.FEATURES_ARTIFACTS}/{store.MANIFEST}",
                                                 str(Path(tmp) / run_id / "manifest"))
    except Exception:  # noqa: BLE001 - MlflowException and store errors alike: the run logged none
        return None
    return fileio.read_json(path)


def notes(summary: list[dict]) -> list[str]:
    """What the table says of how its feature sets were told: the runs identified otherwise than by the
    identity they recorded."""
    out = []
    for how, words in ((Identified.MANIFEST, "identified from the manifest each logged"),
                       (Identified.SOURCE, "grouped by their recorded source (the features folder and release they "
                                           "were tagged with: they logged no manifest)")):
        labels = sorted({r["features_label"] for r in summary if r.get("identified_by") == how.value})
        if labels:
            out.append(f"runs written before feature sets were recorded by content are {words}: {'; '.join(labels)}")
    return out
