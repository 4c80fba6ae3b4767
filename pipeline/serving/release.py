"""Which MIMIC release a model was trained on and its inputs come from; scoring across releases.

A features manifest records its source's release (``manifest["release"]``: "mimic-iii" or
"mimic-iv"); a trained run keeps a copy of its training features' manifest, so the model records
the release it was trained on. Manifests written before releases were recorded are MIMIC-III's
(the only release read then). Scoring features of one release with a model of the other is refused
unless asked for explicitly (``cross_release``): item ids, units and what is recorded when differ
between the releases, so most tokens fall out of the model's vocabulary. When asked, the share of
out-of-vocabulary tokens is measured on what was scored and reported.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from pipeline.core import fileio
from pipeline.data.mimic.sources.base import CrossReleaseError
from pipeline.data.mimic.sources.tables import Release, release_of
from pipeline.runs.store import MANIFEST

log = logging.getLogger(__name__)


def files_release(files: list[Path]) -> Release | None:
    """The release of feature files, from the ``manifest.json`` beside them (``release_of``; None: no manifest)."""
    manifests = {Path(f).parent / MANIFEST for f in files}
    found = {release_of(fileio.read_json(m)) for m in manifests if m.exists()}
    if len(found) > 1:
        raise CrossReleaseError(f"the feature files {sorted(map(str, files))} come from different releases "
                                f"{sorted(r.value for r in found)}")
    return found.pop() if found else None


def check(model_release: Release, data_release: Release | None, cross_release: bool, what: str,
          features: bool = False) -> bool:
    """Whether scoring ``what`` (of ``data_release``) with a model of ``model_release`` crosses releases;
    refused (``CrossReleaseError``) unless ``cross_release``. Unknown data release: not checked. ``features``:
    ``what`` are features, whose own vocabulary another release's model cannot read: the message says to
    score their source instead."""
    if data_release is None:
        log.warning("%s records no release (no manifest.json beside it): not checked against the model's (%s)",
                    what, Release(model_release).title)
        return False
    if data_release == model_release:
        return False
    if features:  # another release's features index their own vocabulary: only its source can be scored
        raise CrossReleaseError(
            f"{what} is {Release(data_release).title} but the model was trained on {Release(model_release).title}: "
            "refused: features of another release index their own vocabulary, which the model cannot read; score their "
            "MIMIC source instead, extracted with the model's vocabulary (--source DIR --cross-release; the share "
            "of out-of-vocabulary tokens is then reported)", Release(model_release), Release(data_release))
    if not cross_release:
        raise CrossReleaseError(
            f"{what} is {Release(data_release).title} but the model was trained on "
            f"{Release(model_release).title}: refused; score across releases only when asked explicitly "
            "(--cross-release; the share of out-of-vocabulary tokens is then reported)",
            Release(model_release), Release(data_release))
    return True


def oov_share(files: list[Path], n_sources: int) -> float | None:
    """Share of the bag tokens of ``files`` that are out of vocabulary: ids 1..``n_sources``, the
    per-source OOV tokens (a bag holds each token once). None when there is no token at all."""
    oov = total = 0
    for f in files:
        bags = pq.read_table(f, columns=["bags"]).column("bags")
        for chunk in bags.chunks:
            ids = chunk.flatten().flatten().to_numpy(zero_copy_only=False)
            total += len(ids)
            oov += int(np.count_nonzero((ids >= 1) & (ids <= n_sources)))
    return oov / total if total else None
