"""What every training run reads and copies, torch-free (the LSTMs' loop and the baselines share it):
the vocabulary sizes and the train / val splits of a features directory, and the guard against
overwriting a run directory (the run's own copies of its inputs: ``runs.record.copy_inputs``)."""

from __future__ import annotations

from pathlib import Path

from pipeline.core import fileio
from pipeline.core.errors import PipelineError
from pipeline.data import features
from pipeline.engine.checkpoints import LAST
from pipeline.runs import store


class TrainError(PipelineError, ValueError):
    """Training inputs or settings that cannot work (missing features, a checkpoint to resume that does not fit)."""


def vocab_sizes(fdir: Path) -> dict:
    """Token and context vocabulary sizes of a features directory (its vocab.json)."""
    vocab_file = fdir / store.VOCAB
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


def check_fresh(out_dir, marker: str = LAST) -> None:
    """Raise unless ``out_dir`` is None or holds no ``marker`` file (a run's last checkpoint / model file)."""
    if out_dir is not None and (Path(out_dir) / marker).exists():
        raise TrainError(f"{Path(out_dir) / marker} exists; resume from it or choose another output directory")
