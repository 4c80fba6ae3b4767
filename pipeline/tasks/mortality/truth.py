"""The true risk of a synthetic source, joined to its features: the Bayes-optimal reference of every report.

Evaluation reports every metric against it; training, the baselines and Laplace choose a run's refer
measure by it on validation (``validation.validation_summary``), the only use of the truth before a test.

The synthetic generator writes ``<source>/_truth/truth.csv.gz`` (HADM_ID, TRUE_RISK) beside its
tables; the extraction never reads it. Evaluation finds it through the features' manifest and
joins it by the features' link file (pseudonym -> HADM_ID).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pipeline.core import fileio
from pipeline.core.errors import PipelineError


class TruthError(PipelineError, ValueError):
    """A truth file that is missing or does not cover the admissions."""


def find_truth(features_dir: Path, truth: Path | str | None = None) -> Path | None:
    """``truth`` or ``<source dir>/_truth/truth.csv.gz`` of the features' CSV source (for a stage: of the CSV
    directory its ``stage.json`` was staged from), when it exists."""
    if truth is not None:
        if not Path(truth).exists():
            raise TruthError(f"{truth}: truth file not found")
        return Path(truth)
    manifest_file = features_dir / "manifest.json"
    if not manifest_file.exists():
        return None
    location = str((fileio.read_json(manifest_file).get("source") or {}).get("location") or "")
    if location.startswith("stage:"):
        from pipeline.data.mimic.sources.stage import STAGE_FILE

        stage_file = Path(location.removeprefix("stage:")) / STAGE_FILE
        source = fileio.read_json(stage_file).get("source") if stage_file.exists() else None
        location = f"csv:{source}" if source else ""
    if not location.startswith("csv:"):
        return None
    cand = Path(location.removeprefix("csv:")) / "_truth" / "truth.csv.gz"
    return cand if cand.exists() else None


def load_true_risk(truth_file: Path, link_file: Path, keys) -> np.ndarray:
    """TRUE_RISK per key, shape (N,), joined through the features' link file (key -> HADM_ID)."""
    import pandas as pd

    from pipeline.data.mimic.deid import read_link_file

    link = read_link_file(link_file)
    truth = pd.read_csv(truth_file)
    truth.columns = [c.lower() for c in truth.columns]
    for col in ("hadm_id", "true_risk"):
        if col not in truth.columns:
            raise TruthError(f"{truth_file}: missing column {col.upper()} (have {list(truth.columns)})")
    risk = link.merge(truth[["hadm_id", "true_risk"]], on="hadm_id", how="left").set_index("key")["true_risk"]
    out = risk.reindex(np.asarray(keys).astype(str)).to_numpy(dtype=np.float64)
    missing = np.flatnonzero(np.isnan(out))
    if missing.size:
        raise TruthError(f"{truth_file}: no TRUE_RISK for {missing.size} admission(s) (first: features row "
                        f"{int(missing[0])}); is it the truth of the source these features came from?")
    return out


def features_true_risk(features_dir: Path, fs) -> np.ndarray | None:
    """The true risk of a FeatureSet of ``features_dir`` when its source is synthetic (else None)."""
    truth_file = find_truth(Path(features_dir))
    link = Path(features_dir) / "_private" / "link.csv"
    if truth_file is None or not link.exists():
        return None
    return load_true_risk(truth_file, link, fs.keys)
