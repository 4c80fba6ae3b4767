"""Settings of the classical baselines: ``BaselineKind`` and ``BaselineConfig`` (one comment per field).

Imports only the standard library, so ``cli.py`` names the baseline kinds without importing
scikit-learn or torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from pipeline.core.configs import check_at_least, config_dict
from pipeline.core.errors import ConfigError


class BaselineKind(str, Enum):
    """Classical baselines (names as used by ``train --model``)."""

    LOGREG = "logreg"  # L2 logistic regression on sparse counts, C chosen on validation
    GBM = "gbm"  # histogram gradient boosting, rounds and tree size chosen on validation


BASELINES = tuple(k.value for k in BaselineKind)


@dataclass
class BaselineConfig:
    """How the baselines featurize, fit and choose their settings (on validation only)."""

    seed: int = 0  # seeds the GBM (ties and nothing else: with a validation set given, the fit is deterministic)
    recent_hours: float = 24.0  # second count block: bags starting at most this many hours before the prediction time
    min_admissions: int = 5  # a token column is kept when it occurs in at least this many training admissions
    logreg_c_min: float = 1e-4  # smallest inverse L2 strength C tried (the grid is log-spaced)
    logreg_c_max: float = 1e2  # largest C tried
    logreg_c_steps: int = 13  # values of C tried on validation (validation NLL picks one)
    logreg_max_iter: int = 2000  # L-BFGS iterations per fit
    gbm_columns: int = 1500  # sparse columns given to the GBM (the most frequent in training) besides the dense ones
    gbm_learning_rate: float = 0.05  # shrinkage of every boosting round
    gbm_max_rounds: int = 2000  # boosting rounds at most; the best prefix on validation is kept
    gbm_patience: int = 50  # stop after this many rounds without a lower validation loss
    gbm_leaves: tuple[int, ...] = (7, 15, 31)  # max leaf nodes tried (validation NLL picks one)
    gbm_min_leaf: tuple[int, ...] = (20, 100)  # min admissions per leaf tried
    gbm_l2: float = 1.0  # L2 regularisation of the leaf values
    threads: int | None = None  # OpenMP threads of the GBM (None: scikit-learn's default)

    def __post_init__(self) -> None:
        self.gbm_leaves, self.gbm_min_leaf = tuple(self.gbm_leaves), tuple(self.gbm_min_leaf)
        if not self.recent_hours > 0:
            raise ConfigError(f"recent_hours must be > 0, got {self.recent_hours}")
        if not 0 < self.logreg_c_min <= self.logreg_c_max:
            raise ConfigError("need 0 < logreg_c_min <= logreg_c_max")
        check_at_least(self, 1, ("min_admissions", "logreg_c_steps", "logreg_max_iter", "gbm_columns",
                                 "gbm_max_rounds", "gbm_patience", "threads"))
        if not self.gbm_leaves or min(self.gbm_leaves) < 2 or not self.gbm_min_leaf or min(self.gbm_min_leaf) < 1:
            raise ConfigError("gbm_leaves must be >= 2 and gbm_min_leaf >= 1 (non-empty)")
        if not self.gbm_learning_rate > 0 or self.gbm_l2 < 0:
            raise ConfigError("gbm_learning_rate must be > 0 and gbm_l2 >= 0")

    def to_dict(self) -> dict:
        """JSON-able settings (tuples as lists)."""
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in config_dict(self).items()}

