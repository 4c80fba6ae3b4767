"""A fitted baseline: featurizer + predictor, scored like any model, stored as arrays.

``BaselineModel.feature_logits(fs, samples)`` gives the (S, K, N) logits that
``predict.feature_logits`` gives for a torch model: a point model, so K = 1 and the S draws
are one draw repeated (its mutual information is 0 and it refers by its predictive entropy, as a
deterministic LSTM). The model file (``baseline.npz``) is ``numpy.savez`` of named arrays plus a JSON
``meta`` string (kind, settings, refer threshold, validation metrics) and is read with
``allow_pickle=False``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pipeline.core import fileio
from pipeline.core.errors import PipelineError
from pipeline.data.features import FeatureSet
from pipeline.tasks.mortality.baselines.config import BaselineKind
from pipeline.tasks.mortality.baselines.featurize import Featurizer
from pipeline.tasks.mortality.baselines.predictors import LinearPredictor, TreePredictor

FILE_FORMAT = 1  # bump when the arrays or meta change meaning
PREDICTORS = {BaselineKind.LOGREG: LinearPredictor, BaselineKind.GBM: TreePredictor}  # kind -> predictor class


class BaselineFileError(PipelineError, ValueError):
    """A baseline model file that is missing, unreadable or of another format."""


@dataclass
class BaselineModel:
    """A classical baseline ready to score FeatureSets."""

    kind: BaselineKind  # logreg | gbm
    featurizer: Featurizer  # column layout (vocabulary, window)
    predictor: LinearPredictor | TreePredictor  # the fitted numbers
    meta: dict = field(default_factory=dict)  # kind-independent record: settings, refer threshold, metrics

    components = 1  # K of a point model (what scoring reads: models.predict.RiskModel)
    value_channel = False  # the featurizer counts tokens; it never reads bag_values
    gaussian_logits = False  # a point logit per admission
    scores_features = True  # scores a FeatureSet itself (feature_logits), no batches

    def logits(self, fs: FeatureSet) -> np.ndarray:
        """(N,) float64 logits of a FeatureSet whose ids lie in the vocabulary."""
        return self.predictor.logits(self.featurizer.matrix(fs))

    def feature_logits(self, fs: FeatureSet, samples: int = 1) -> np.ndarray:
        """(S, 1, N) float32: the point model's logits as ``samples`` identical draws."""
        if samples < 1:
            raise ValueError(f"samples must be >= 1, got {samples}")
        z = self.logits(fs).astype(np.float32)  # (N,)
        return np.broadcast_to(z, (samples, 1, z.shape[0])).copy()  # (N,) -> (S, 1, N)

    def save(self, path: Path | str) -> Path:
        """Write ``path`` (npz, atomically)."""
        arrays = {f"featurizer.{k}": v for k, v in self.featurizer.to_arrays().items()}
        arrays |= {f"predictor.{k}": v for k, v in self.predictor.to_arrays().items()}
        meta = {"format": FILE_FORMAT, "kind": self.kind.value, **self.meta}
        arrays["meta"] = np.array(json.dumps(meta, sort_keys=True))
        with fileio.atomic_path(path) as tmp, open(tmp, "wb") as fh:
            np.savez(fh, **arrays)
        return Path(path)

    @classmethod
    def load(cls, path: Path | str) -> "BaselineModel":
        """Read a file written by ``save`` (no pickle)."""
        path = Path(path)
        if not path.exists():
            raise BaselineFileError(f"{path}: baseline model file not found")
        try:
            with np.load(path, allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
            meta = json.loads(str(arrays.pop("meta")))
        except (OSError, ValueError, KeyError) as exc:
            raise BaselineFileError(f"{path}: not a baseline model file ({exc})") from None
        if meta.get("format") != FILE_FORMAT:
            raise BaselineFileError(f"{path}: baseline file format {meta.get('format')}, expected {FILE_FORMAT}")
        kind = BaselineKind(meta.pop("kind"))
        meta.pop("format")
        part = {p: {k.split(".", 1)[1]: v for k, v in arrays.items() if k.startswith(p + ".")}
                for p in ("featurizer", "predictor")}
        return cls(kind, Featurizer.from_arrays(part["featurizer"]), PREDICTORS[kind].from_arrays(part["predictor"]),
                   meta)
