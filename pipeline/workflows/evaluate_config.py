"""Settings of an evaluation (``EvalConfig``: one comment per field, the CLI help) and the split it reads;
torch- and numpy-free, so ``cli.py`` builds its options from them without loading either."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from pipeline.core.configs import check_at_least, invalid
from pipeline.core.contracts import DEFAULT_BATCH


class Split(str, Enum):
    """Feature split evaluated."""

    VAL = "val"
    TEST = "test"


@dataclass
class EvalConfig:
    """Settings of one evaluation."""

    samples: int | None = None  # Monte Carlo samples per mixture component (S·K draws in all)
    batch_size: int = DEFAULT_BATCH  # admissions per forward pass (memory grows with it; the draws depend on it)
    n_bootstrap: int = 1000  # bootstrap resamples for the 95% intervals (0: none)
    seed: int = 0  # torch seed of the weight draws and numpy seed of the bootstrap
    threads: int | None = None  # torch intra-op threads (unset: torch's default)
    log_to_run: bool = True  # log metrics, tag and artifacts to the MLflow run
    target_risk: float = 0.05  # selective prediction: the coverage reached at this risk of the kept (Brier and 0/1)

    def __post_init__(self) -> None:
        check_at_least(self, 1, ("samples", "batch_size", "threads"))
        check_at_least(self, 0, ("n_bootstrap",))
        if not 0.0 < float(self.target_risk) < 1.0:
            raise invalid(self, f"target_risk must lie strictly between 0 and 1, got {self.target_risk}",
                          "target_risk")
