"""What a run keeps for the shift check: a compact, de-identified reference sample of its calibration half.

``ShiftReference`` holds, per measure, the calibration admissions' values (the calibrated risk; for a posterior
model its mutual information, sd and decision uncertainty: named as the refer rule's orderings), and optionally a
row sample of their feature matrix (dense or sparse, at most ``MAX_ROWS`` rows, drawn with a seed) with the
feature columns' names, so that a cohort's matrix can be checked to have the same columns. No key, no identifier
and no date: values of measures and features only, in a shuffled order (``make_reference`` permutes the rows, so
the file's order says nothing about the admissions').

Two round trips, both plain: ``to_dict`` / ``from_dict`` (JSON: lists; a sparse matrix as its CSR arrays) and
``save`` / ``load`` (one ``.npz``, written atomically through ``core.fileio``, read with ``allow_pickle=False``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import sparse

from pipeline.bayes.shift.domain import as_matrix
from pipeline.core import fileio

MAX_ROWS = 2000  # feature rows kept at most (the domain classifier's reference sample)
FORMAT = 1  # the file format's version


@dataclass
class ShiftReference:
    """The reference of the shift check (module docstring)."""

    measures: dict[str, np.ndarray]  # measure name -> (M,) its values on the reference admissions
    features: np.ndarray | sparse.csr_matrix | None = None  # (R, d) a row sample of their feature matrix
    columns: list[str] | None = None  # the d feature columns' names (None: unnamed)
    n: int = 0  # reference admissions the measures describe
    source: str = "the calibration admissions"  # what the reference is, in words

    def check_columns(self, columns: list[str] | None) -> None:
        """Refuse a cohort matrix whose columns differ from the reference's (naming the first difference)."""
        if self.columns is None or columns is None:
            return
        if list(columns) != list(self.columns):
            diff = next((i for i, (a, b) in enumerate(zip(columns, self.columns)) if a != b),
                        min(len(columns), len(self.columns)))
            raise ValueError(f"cohort features: column {diff} is {columns[diff] if diff < len(columns) else None!r}, "
                             f"the reference's is {self.columns[diff] if diff < len(self.columns) else None!r} "
                             f"({len(columns)} against {len(self.columns)} columns): not the run's vocabulary")

    def to_dict(self) -> dict:
        feats = None
        if sparse.issparse(self.features):
            f = self.features
            feats = {"sparse": True, "shape": list(f.shape), "data": f.data.tolist(), "indices": f.indices.tolist(),
                     "indptr": f.indptr.tolist()}
        elif self.features is not None:
            feats = {"sparse": False, "rows": np.asarray(self.features).tolist()}
        return {"format": FORMAT, "n": self.n, "source": self.source,
                "measures": {k: np.asarray(v).tolist() for k, v in self.measures.items()},
                "features": feats, "columns": self.columns}

    @classmethod
    def from_dict(cls, d: dict) -> ShiftReference:
        if d.get("format") != FORMAT:
            raise ValueError(f"shift reference: format {d.get('format')!r}, this version reads {FORMAT}")
        f = d.get("features")
        if f is None:
            feats = None
        elif f["sparse"]:
            feats = sparse.csr_matrix((np.asarray(f["data"], np.float64), np.asarray(f["indices"], np.int64),
                                       np.asarray(f["indptr"], np.int64)), shape=tuple(f["shape"]))
        else:
            feats = np.asarray(f["rows"], dtype=np.float64)
        return cls({k: np.asarray(v, dtype=np.float64) for k, v in d["measures"].items()}, feats, d.get("columns"),
                   int(d["n"]), d.get("source", "the calibration admissions"))

    def save(self, path: Path | str) -> Path:
        """One .npz (arrays, and the rest as a JSON string), written atomically."""
        arrays = {f"measure_{k}": np.asarray(v, dtype=np.float64) for k, v in self.measures.items()}
        meta = {"format": FORMAT, "n": self.n, "source": self.source, "columns": self.columns,
                "features": None if self.features is None else ("sparse" if sparse.issparse(self.features)
                                                                 else "dense")}
        if sparse.issparse(self.features):
            f = self.features
            arrays.update(f_data=f.data, f_indices=f.indices, f_indptr=f.indptr, f_shape=np.asarray(f.shape))
        elif self.features is not None:
            arrays["f_rows"] = np.asarray(self.features, dtype=np.float64)
        arrays["meta"] = np.asarray(json.dumps(meta))
        with fileio.atomic_path(path) as tmp:
            with open(tmp, "wb") as fh:
                np.savez_compressed(fh, **arrays)
        return Path(path)

    @classmethod
    def load(cls, path: Path | str) -> ShiftReference:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            if meta.get("format") != FORMAT:
                raise ValueError(f"{path}: shift reference format {meta.get('format')!r}, this version reads {FORMAT}")
            measures = {k.removeprefix("measure_"): z[k] for k in z.files if k.startswith("measure_")}
            if meta["features"] == "sparse":
                feats = sparse.csr_matrix((z["f_data"], z["f_indices"], z["f_indptr"]), shape=tuple(z["f_shape"]))
            elif meta["features"] == "dense":
                feats = z["f_rows"]
            else:
                feats = None
        return cls(measures, feats, meta["columns"], int(meta["n"]), meta["source"])


def make_reference(measures: dict, features=None, columns: list[str] | None = None, max_rows: int = MAX_ROWS,
                   seed: int = 0, source: str = "the calibration admissions") -> ShiftReference:
    """The reference of ``measures`` (name -> (M,)) and optionally ``features`` (M, d), rows shuffled, at most
    ``max_rows`` feature rows kept (drawn with ``seed``)."""
    ms = {k: np.asarray(v, dtype=np.float64).ravel() for k, v in measures.items()}
    sizes = {v.shape[0] for v in ms.values()}
    if len(sizes) > 1:
        raise ValueError(f"reference measures: different lengths {sorted(sizes)}")
    n = sizes.pop() if sizes else 0
    for k, v in ms.items():
        bad = np.flatnonzero(~np.isfinite(v))
        if bad.size:
            raise ValueError(f"reference measure {k}[{int(bad[0])}] = {float(v[bad[0]])!r}: must be finite")
    rng = np.random.default_rng(seed)
    order = rng.permutation(n)
    ms = {k: v[order] for k, v in ms.items()}
    feats = None
    if features is not None:
        f = as_matrix(features, "reference features")
        if columns is not None and len(columns) != f.shape[1]:
            raise ValueError(f"reference features: {f.shape[1]} columns but {len(columns)} names")
        rows = rng.permutation(f.shape[0])[: int(max_rows)]
        feats = f[rows]
        n = n or f.shape[0]
    return ShiftReference(ms, feats, None if columns is None else list(columns), int(n), source)
