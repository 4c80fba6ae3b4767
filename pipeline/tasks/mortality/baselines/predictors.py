"""The fitted baselines as plain arrays: a logistic model and a boosted tree ensemble, numpy only.

Each predictor turns the featurizer's matrix (``featurize.Rows``) into one logit per admission
and round-trips through named arrays (``to_arrays`` / ``from_arrays``), so a model file holds
numbers alone: no pickle, no scikit-learn object, nothing executed on load. ``fit.py``
builds them from scikit-learn estimators and tests check that the logits agree with
scikit-learn's own.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.tasks.mortality.baselines.featurize import Rows

ROW_CHUNK = 2048  # admissions per block of the tree traversal (memory: chunk x trees indices)


@dataclass
class LinearPredictor:
    """logit = intercept + Σ_j coef_j (x_j - center_j) scale_j over the kept columns."""

    columns: np.ndarray  # (F_k,) int64 featurizer columns the model reads
    center: np.ndarray  # (F_k,) float64 subtracted before scaling (0 for sparse columns: sparsity kept)
    scale: np.ndarray  # (F_k,) float64 multiplier after centring
    coef: np.ndarray  # (F_k,) float64 weight of each standardized column
    intercept: float  # bias

    def weights(self, n_columns: int) -> tuple[np.ndarray, float]:
        """(F,) weight of every featurizer column and the constant, standardization folded in."""
        w = np.zeros(n_columns)
        w[self.columns] = self.coef * self.scale
        return w, float(self.intercept - np.sum(self.coef * self.scale * self.center))

    def logits(self, x: Rows) -> np.ndarray:
        """(N,) logits."""
        w, b = self.weights(x.shape[1])
        return x.dot(w) + b

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {"columns": self.columns, "center": self.center, "scale": self.scale, "coef": self.coef,
                "intercept": np.float64(self.intercept)}

    @classmethod
    def from_arrays(cls, a: dict[str, np.ndarray]) -> "LinearPredictor":
        return cls(np.asarray(a["columns"], np.int64), np.asarray(a["center"], np.float64),
                   np.asarray(a["scale"], np.float64), np.asarray(a["coef"], np.float64), float(a["intercept"]))


@dataclass
class TreePredictor:
    """logit = baseline + Σ over trees of the leaf value reached.

    Nodes of every tree are stored back to back; ``roots[t]`` is tree t's first node and child
    indices are absolute. A split sends x[feature] <= threshold left, a missing value (nan)
    left when ``missing_left``; ``feature`` indexes ``columns``.
    """

    columns: np.ndarray  # (F_g,) int64 featurizer columns the trees read
    baseline: float  # the constant before any tree (log-odds of the training rate)
    roots: np.ndarray  # (T,) int64 first node of each tree
    feature: np.ndarray  # (nodes,) int64 index into columns of a split node's feature
    threshold: np.ndarray  # (nodes,) float64 split threshold
    missing_left: np.ndarray  # (nodes,) bool where a missing value goes
    left: np.ndarray  # (nodes,) int64 absolute index of the left child
    right: np.ndarray  # (nodes,) int64 absolute index of the right child
    is_leaf: np.ndarray  # (nodes,) bool
    value: np.ndarray  # (nodes,) float64 leaf value (raw log-odds contribution)

    @property
    def n_trees(self) -> int:
        return int(self.roots.shape[0])

    def logits(self, x: Rows) -> np.ndarray:
        """(N,) logits, traversing every tree for blocks of ``ROW_CHUNK`` admissions."""
        xd = x.dense(self.columns)  # (N, F_g)
        out = np.full(xd.shape[0], self.baseline)
        if not self.n_trees:
            return out
        for lo in range(0, xd.shape[0], ROW_CHUNK):
            xb = xd[lo:lo + ROW_CHUNK]  # (B, F_g)
            node = np.broadcast_to(self.roots, (xb.shape[0], self.n_trees)).copy()  # (B, T)
            rows = np.arange(xb.shape[0])[:, None]  # (B, 1)
            while True:
                inner = ~self.is_leaf[node]  # (B, T)
                if not inner.any():
                    break
                v = xb[rows, self.feature[node]]  # (B, T) value of each node's split feature
                go_left = np.where(np.isnan(v), self.missing_left[node], v <= self.threshold[node])
                node = np.where(inner, np.where(go_left, self.left[node], self.right[node]), node)
            out[lo:lo + xb.shape[0]] += self.value[node].sum(axis=1)
        return out

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {"columns": self.columns, "baseline": np.float64(self.baseline), "roots": self.roots,
                "feature": self.feature, "threshold": self.threshold, "missing_left": self.missing_left,
                "left": self.left, "right": self.right, "is_leaf": self.is_leaf, "value": self.value}

    @classmethod
    def from_arrays(cls, a: dict[str, np.ndarray]) -> "TreePredictor":
        ints = {k: np.asarray(a[k], np.int64) for k in ("columns", "roots", "feature", "left", "right")}
        return cls(ints["columns"], float(a["baseline"]), ints["roots"], ints["feature"],
                   np.asarray(a["threshold"], np.float64), np.asarray(a["missing_left"], bool), ints["left"],
                   ints["right"], np.asarray(a["is_leaf"], bool), np.asarray(a["value"], np.float64))
