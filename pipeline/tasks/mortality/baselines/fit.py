"""Fitting the baselines with scikit-learn, every choice made on the validation split.

- logistic regression: L2 (L-BFGS) on the sparse matrix, the dense columns standardized on
  training; C from a log-spaced grid, the one with the lowest validation NLL kept (the fit on
  training alone: validation only chooses, as for the LSTMs' checkpoints).
- gradient boosting: ``HistGradientBoostingClassifier`` on the dense dense-plus-frequent-token
  columns, fitted with the validation split as its early-stopping set; the ensemble is cut back
  to its best round on validation (scikit-learn keeps the ``patience`` rounds after it), for
  each tree size of a small grid, and the size with the lowest validation NLL kept.

Both return a numpy predictor (``predictors``) and a record of the search. scikit-learn is
imported inside the functions.
"""

from __future__ import annotations

import numpy as np

from pipeline.core.errors import PipelineError
from pipeline.tasks.mortality.baselines.config import BaselineConfig
from pipeline.tasks.mortality.baselines.featurize import Featurizer, Rows
from pipeline.tasks.mortality.baselines.predictors import LinearPredictor, TreePredictor


class BaselineFitError(PipelineError, ValueError):
    """Training data a baseline cannot be fitted on (one class only, no admissions)."""


def nll(y: np.ndarray, logits: np.ndarray) -> float:
    """Mean Bernoulli NLL of 0/1 labels under logits (stable)."""
    z = np.asarray(logits, np.float64)
    return float(np.mean(np.logaddexp(0.0, z) - np.asarray(y, np.float64) * z))


def kept_columns(featurizer: Featurizer, x: Rows, min_admissions: int) -> np.ndarray:
    """Sparse columns with at least ``min_admissions`` nonzero training rows, then every dense column."""
    counts = x.column_counts()
    dense = featurizer.dense_columns
    sparse = np.flatnonzero(counts >= min_admissions)
    return np.concatenate([sparse[sparse < dense[0]], dense]).astype(np.int64)


def _check(y: np.ndarray, split: str) -> None:
    if y.size == 0 or np.unique(y).size < 2:
        raise BaselineFitError(f"the {split} split needs admissions of both labels to fit a baseline "
                               f"({y.size} admissions, {int(np.sum(y))} deaths)")


def fit_logreg(featurizer: Featurizer, xtr: Rows, ytr: np.ndarray, xva: Rows, yva: np.ndarray,
               cfg: BaselineConfig) -> tuple[LinearPredictor, dict]:
    """L2 logistic regression, C chosen by validation NLL; (predictor, {"C", "val_nll", "search"})."""
    from sklearn.linear_model import LogisticRegression

    _check(ytr, "train")
    _check(yva, "val")
    columns = kept_columns(featurizer, xtr, cfg.min_admissions)
    dense = np.isin(columns, featurizer.dense_columns)
    dtr = xtr.dense(columns[dense])
    center = np.zeros(columns.shape[0])
    scale = np.ones(columns.shape[0])
    sd = dtr.std(axis=0)
    center[dense] = dtr.mean(axis=0)
    scale[dense] = np.where(sd > 0, 1.0 / np.where(sd > 0, sd, 1.0), 1.0)
    a_tr = _standardized(xtr, columns, center, scale)  # validation is scored by the predictor itself
    search, best = [], None
    for c in np.geomspace(cfg.logreg_c_min, cfg.logreg_c_max, cfg.logreg_c_steps):
        est = LogisticRegression(C=float(c), solver="lbfgs", max_iter=cfg.logreg_max_iter)
        est.fit(a_tr, ytr)
        pred = LinearPredictor(columns, center, scale, est.coef_[0].astype(np.float64), float(est.intercept_[0]))
        val = nll(yva, pred.logits(xva))
        search.append({"C": float(c), "val_nll": val, "iterations": int(est.n_iter_[0])})
        if best is None or val < best[1]:
            best = (pred, val, float(c))
    return best[0], {"C": best[2], "val_nll": best[1], "columns": int(columns.shape[0]), "search": search}


def _standardized(x: Rows, columns: np.ndarray, center: np.ndarray, scale: np.ndarray):
    """CSR (N, len(columns)) of (x - center)·scale over ``columns`` (center is 0 off the dense columns,
    which the featurizer stores for every row, so centring them keeps the others sparse)."""
    from scipy import sparse

    where = np.full(x.shape[1], -1, dtype=np.int64)
    where[columns] = np.arange(columns.shape[0])
    keep = where[x.cols] >= 0
    j = where[x.cols[keep]]
    vals = (x.vals[keep] - center[j]) * scale[j]
    return sparse.csr_matrix((vals, (x.rows[keep], j)), shape=(x.shape[0], columns.shape[0]))


def gbm_columns(featurizer: Featurizer, xtr: Rows, cfg: BaselineConfig) -> np.ndarray:
    """The ``gbm_columns`` most frequent kept sparse columns (ties by index), then the dense ones."""
    kept = kept_columns(featurizer, xtr, cfg.min_admissions)
    dense = featurizer.dense_columns
    sparse = kept[kept < dense[0]]
    counts = xtr.column_counts()[sparse]
    top = sparse[np.lexsort((sparse, -counts))[: cfg.gbm_columns]]
    return np.concatenate([np.sort(top), dense]).astype(np.int64)


def fit_gbm(featurizer: Featurizer, xtr: Rows, ytr: np.ndarray, xva: Rows, yva: np.ndarray,
            cfg: BaselineConfig) -> tuple[TreePredictor, dict]:
    """Boosted trees, early-stopped on validation and cut to the best round; tree size by validation NLL."""
    from sklearn.ensemble import HistGradientBoostingClassifier
    from threadpoolctl import threadpool_limits

    _check(ytr, "train")
    _check(yva, "val")
    columns = gbm_columns(featurizer, xtr, cfg)
    dtr, dva = xtr.dense(columns), xva.dense(columns)
    search, best = [], None
    with threadpool_limits(cfg.threads):
        for leaves in cfg.gbm_leaves:
            for min_leaf in cfg.gbm_min_leaf:
                est = HistGradientBoostingClassifier(
                    learning_rate=cfg.gbm_learning_rate, max_iter=cfg.gbm_max_rounds, max_leaf_nodes=leaves,
                    min_samples_leaf=min_leaf, l2_regularization=cfg.gbm_l2, early_stopping=True,
                    n_iter_no_change=cfg.gbm_patience, scoring="loss", random_state=cfg.seed)
                est.fit(dtr, ytr, X_val=dva, y_val=yva)
                rounds = int(np.argmax(est.validation_score_))  # entry 0: before any tree
                pred = tree_predictor(est, columns, rounds)
                val = nll(yva, pred.logits(xva))
                search.append({"max_leaf_nodes": leaves, "min_samples_leaf": min_leaf, "rounds": rounds,
                               "rounds_fitted": int(est.n_iter_), "val_nll": val})
                if best is None or val < best[1]:
                    best = (pred, val, leaves, min_leaf, rounds)
    pred, val, leaves, min_leaf, rounds = best
    return pred, {"max_leaf_nodes": leaves, "min_samples_leaf": min_leaf, "rounds": rounds, "val_nll": val,
                  "columns": int(columns.shape[0]), "search": search}


def tree_predictor(est, columns: np.ndarray, rounds: int | None = None) -> TreePredictor:
    """The first ``rounds`` trees (all when None) of a fitted binary ``HistGradientBoostingClassifier``."""
    trees = [p[0] for p in est._predictors[: est.n_iter_ if rounds is None else rounds]]
    roots, parts, offset = [], [], 0
    for tree in trees:
        nodes = tree.nodes
        if nodes["is_categorical"].any():
            raise BaselineFitError("categorical splits are not supported by the array predictor")
        roots.append(offset)
        parts.append((nodes, offset))
        offset += nodes.shape[0]

    def cat(field: str, shift: bool = False) -> np.ndarray:
        if not parts:
            return np.zeros(0)
        return np.concatenate([n[field].astype(np.int64) + off if shift else n[field] for n, off in parts])

    leaf = cat("is_leaf").astype(bool) if parts else np.zeros(0, bool)
    return TreePredictor(
        columns=np.asarray(columns, np.int64), baseline=float(np.ravel(est._baseline_prediction)[0]),
        roots=np.asarray(roots, np.int64), feature=cat("feature_idx").astype(np.int64),
        threshold=cat("num_threshold").astype(np.float64), missing_left=cat("missing_go_to_left").astype(bool),
        left=cat("left", True).astype(np.int64), right=cat("right", True).astype(np.int64), is_leaf=leaf,
        value=cat("value").astype(np.float64))
