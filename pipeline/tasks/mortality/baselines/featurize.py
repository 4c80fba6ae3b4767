"""FeatureSet -> one flat row of numbers per admission, for the classical baselines.

From the same feature files as the LSTMs (nothing else is read), with V token ids, C context ids:

    [0, V)             window: in how many bags of the admission token t occurs (every bag:
                       the hourly bags, the daily ones and the history before the admission)
    [V, 2V)            recent: the same count over the bags starting ``recent_hours`` or less
                       before the prediction time (with the defaults, the 24 hourly bags)
    [2V, 2V + C)       context one-hot (age decade, gender, admission type and location)
    2V + C + (0..3)    age (years, the middle of the age-decade context token: the same
                       information the LSTM sees; the numeric ``age`` column is metadata and no
                       model reads it), log1p(n_events), log1p(bags), log1p(recent bags)

Counts enter as log1p(count). Token id 0 (padding) and context id 0 never get a value. The
matrix is held as duplicate-free COO triplets (``Rows``), so scoring needs numpy alone;
fitting converts it to scipy's CSR. Padding-free, time-order-free: a bag's start hour decides
only whether it is recent.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from pipeline.data.features import FeatureSet

DENSE = ("age", "log_events", "log_bags", "log_recent_bags")  # the dense columns, after the sparse blocks
_AGE_RANGE = re.compile(r"^age:(\d+)-(\d+)$")
_AGE_OPEN = re.compile(r"^age:(\d+)\+$")


def context_ages(context_vocab: list[str]) -> np.ndarray:
    """Age in years of each context token (the middle of its decade; ``age:90+`` -> 90), nan for the others."""
    out = np.full(len(context_vocab), np.nan)
    for i, tok in enumerate(context_vocab):
        m = _AGE_RANGE.match(tok)
        if m:
            out[i] = (int(m.group(1)) + int(m.group(2)) + 1) / 2.0
        elif _AGE_OPEN.match(tok):
            out[i] = float(_AGE_OPEN.match(tok).group(1))
    return out


@dataclass
class Rows:
    """A sparse (N, F) matrix as duplicate-free COO triplets (row-major order)."""

    rows: np.ndarray  # (Z,) int64 row of each stored value
    cols: np.ndarray  # (Z,) int64 column of each stored value
    vals: np.ndarray  # (Z,) float64 values
    shape: tuple[int, int]  # (N, F)

    def dot(self, weights: np.ndarray) -> np.ndarray:
        """X @ weights, (F,) -> (N,)."""
        return np.bincount(self.rows, weights=self.vals * weights[self.cols], minlength=self.shape[0])

    def dense(self, columns: np.ndarray) -> np.ndarray:
        """The columns ``columns`` as a dense float64 array (N, len(columns)); absent entries are 0."""
        where = np.full(self.shape[1], -1, dtype=np.int64)
        where[columns] = np.arange(len(columns))
        keep = where[self.cols] >= 0
        out = np.zeros((self.shape[0], len(columns)))
        out[self.rows[keep], where[self.cols[keep]]] = self.vals[keep]
        return out

    def column_counts(self) -> np.ndarray:
        """Rows with a nonzero value, per column (F,)."""
        return np.bincount(self.cols[self.vals != 0], minlength=self.shape[1])

    def to_csr(self):
        """scipy.sparse CSR matrix (fitting only)."""
        from scipy import sparse

        return sparse.csr_matrix((self.vals, (self.rows, self.cols)), shape=self.shape)


@dataclass
class Featurizer:
    """The column layout of one vocabulary and prediction window (see the module docstring)."""

    n_tokens: int  # V = len(vocab.json["tokens"])
    n_context: int  # C = len(vocab.json["context"])
    recent_from: float  # a bag starting at or after this hour (after ADMITTIME) is recent
    context_age: np.ndarray  # (C,) age of each context token, nan when it is not an age token
    age_fill: float = 0.0  # age of an admission whose context has no age token (the training mean)

    @classmethod
    def from_vocab(cls, vocab: dict, prediction_hours: float | None, recent_hours: float) -> "Featurizer":
        """The layout of ``vocab.json``; recent bags start at or after prediction_hours - recent_hours
        (the prediction time defaults to 24 h when the features do not record it)."""
        return cls(len(vocab["tokens"]), len(vocab["context"]), recent_from(prediction_hours, recent_hours),
                   context_ages(list(vocab["context"])))

    @property
    def n_columns(self) -> int:
        return 2 * self.n_tokens + self.n_context + len(DENSE)

    @property
    def dense_columns(self) -> np.ndarray:
        """Indices of the dense columns (the last ``len(DENSE)``)."""
        return np.arange(self.n_columns - len(DENSE), self.n_columns)

    def column_names(self) -> list[str]:
        """``window:<token id>``, ``recent:<token id>``, ``context:<context id>``, then ``DENSE``."""
        return ([f"window:{t}" for t in range(self.n_tokens)] + [f"recent:{t}" for t in range(self.n_tokens)]
                + [f"context:{c}" for c in range(self.n_context)] + list(DENSE))

    def fit(self, fs: FeatureSet) -> "Featurizer":
        """Set ``age_fill`` to the mean age of ``fs``'s admissions that have an age token."""
        ages = self._ages(fs)
        known = ages[~np.isnan(ages)]
        self.age_fill = float(known.mean()) if known.size else 0.0
        return self

    def _ages(self, fs: FeatureSet) -> np.ndarray:
        """(N,) age from the context tokens (the first age token of a row), nan without one."""
        ctx = fs.context  # (N, C_max) 0-padded
        if ctx.size == 0:
            return np.full(len(fs), np.nan)
        vals = self.context_age[np.clip(ctx, 0, self.n_context - 1)]  # (N, C_max)
        vals[ctx == 0] = np.nan
        has = ~np.isnan(vals)
        first = np.argmax(has, axis=1)
        out = vals[np.arange(len(fs)), first]
        out[~has.any(axis=1)] = np.nan
        return out

    def matrix(self, fs: FeatureSet) -> Rows:
        """The (N, F) feature matrix of a FeatureSet (ids must lie in the vocabulary: ``check_vocab``)."""
        n, v = len(fs), self.n_tokens
        n_bags = fs.n_bags  # (N,)
        bag_adm = np.repeat(np.arange(n, dtype=np.int64), n_bags)  # (M,) admission of each bag
        tok_bag = np.repeat(np.arange(len(fs.bag_hours), dtype=np.int64), np.diff(fs.token_offsets))  # (Z,)
        tok_adm = bag_adm[tok_bag]  # (Z,)
        tokens = fs.tokens.astype(np.int64)
        recent_bag = fs.bag_hours >= self.recent_from  # (M,)
        real = tokens != 0
        parts = [(tok_adm[real], tokens[real])]  # window block
        rec = real & recent_bag[tok_bag]
        parts.append((tok_adm[rec], v + tokens[rec]))  # recent block
        rows_c = np.repeat(np.arange(n, dtype=np.int64), fs.context.shape[1])
        ctx = fs.context.reshape(-1).astype(np.int64)
        parts.append((rows_c[ctx != 0], 2 * v + ctx[ctx != 0]))  # context block
        r = np.concatenate([p[0] for p in parts])
        k = np.concatenate([p[1] for p in parts])
        key = np.unique(r * self.n_columns + k, return_counts=True)  # sorted: row-major, duplicates counted
        r, k = key[0] // self.n_columns, key[0] % self.n_columns
        counts = key[1].astype(np.float64)
        vals = np.where(k < 2 * v, np.log1p(counts), 1.0)  # counts -> log1p; context one-hot stays 1
        ages = self._ages(fs)
        recent_bags = np.bincount(bag_adm[recent_bag], minlength=n)
        dense = np.stack([np.where(np.isnan(ages), self.age_fill, ages), np.log1p(fs.n_events.astype(np.float64)),
                          np.log1p(n_bags.astype(np.float64)), np.log1p(recent_bags.astype(np.float64))], 1)  # (N, 4)
        d_rows = np.repeat(np.arange(n, dtype=np.int64), len(DENSE))
        d_cols = np.tile(self.dense_columns, n)
        rows = np.concatenate([r, d_rows])
        cols = np.concatenate([k, d_cols])
        order = np.lexsort((cols, rows))
        return Rows(rows[order], cols[order], np.concatenate([vals, dense.reshape(-1)])[order],
                    (n, self.n_columns))

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The layout as named arrays (the model file stores them)."""
        return {"n_tokens": np.int64(self.n_tokens), "n_context": np.int64(self.n_context),
                "recent_from": np.float64(self.recent_from), "context_age": self.context_age,
                "age_fill": np.float64(self.age_fill)}

    @classmethod
    def from_arrays(cls, a: dict[str, np.ndarray]) -> "Featurizer":
        return cls(int(a["n_tokens"]), int(a["n_context"]), float(a["recent_from"]),
                   np.asarray(a["context_age"], dtype=np.float64), float(a["age_fill"]))

    def __eq__(self, other) -> bool:
        if not isinstance(other, Featurizer):
            return NotImplemented
        a, b = self.to_arrays(), other.to_arrays()
        return all(np.array_equal(a[k], b[k], equal_nan=True) for k in a)


def recent_from(prediction_hours: float | None, recent_hours: float) -> float:
    """Hour (after ADMITTIME) from which a bag counts as recent; the prediction time defaults to 24 h."""
    t = 24.0 if prediction_hours is None or not math.isfinite(float(prediction_hours)) else float(prediction_hours)
    return t - float(recent_hours)
