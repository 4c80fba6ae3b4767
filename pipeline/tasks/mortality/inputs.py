"""What every mortality training run reads, torch-free (the LSTMs' loop and the baselines share it):
the vocabulary sizes and the train / val splits of a features directory (the run's own copies of its
inputs: ``runs.record.copy_inputs``; the guard against overwriting a run: ``engine.checkpoints.check_fresh``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pipeline.core import fileio
from pipeline.core.contracts import VOCAB_FILE
from pipeline.core.errors import TrainError
from pipeline.data import features


def vocab_sizes(fdir: Path) -> dict:
    """Token and context vocabulary sizes of a features directory (its vocab.json)."""
    vocab_file = fileio.features_folder(fdir, TrainError) / VOCAB_FILE
    if not vocab_file.exists():
        raise TrainError(f"{vocab_file}: not found; is {fdir} a features directory written by the extraction?")
    vocab = fileio.read_json(vocab_file)
    return {"tokens": len(vocab["tokens"]), "context": len(vocab["context"])}


def load_inputs(fdir: Path, values: bool = False) -> tuple[dict, features.FeatureSet, features.FeatureSet]:
    """Vocabulary sizes and the train / val splits (ids checked against the vocabulary); with ``values``
    (a model with a value channel) their ``bag_values``, required."""
    sizes = vocab_sizes(fdir)
    splits = [features.load_split(fdir / f"{name}.parquet", values=values) for name in ("train", "val")]
    for fs in splits:
        fs.check_vocab(sizes["tokens"], sizes["context"])
        if values:
            fs.require_values()
    return sizes, splits[0], splits[1]


__all__ = ["TrainError", "load_inputs", "vocab_sizes"]


def split_validation(val: features.FeatureSet, share: float) -> tuple[features.FeatureSet, features.FeatureSet]:
    """(selection, calibration) halves of a validation split: the admissions whose pseudonym hashes into ``share``
    are kept apart for calibration (``features.calibration_mask``: the same admissions for every run of the
    features), the others choose the checkpoint, the refer measure and the decision threshold."""
    if share <= 0.0:
        return val, features.subset(val, np.zeros(0, dtype=np.int64))
    mask = features.calibration_mask(val.keys, share)
    return features.subset(val, np.flatnonzero(~mask)), features.subset(val, np.flatnonzero(mask))
