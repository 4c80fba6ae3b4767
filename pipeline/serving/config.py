"""Settings of a scoring run (``ScoreConfig``: one comment per field, the CLI help); torch-, numpy- and
pyarrow-free, so ``cli.py`` builds ``score``'s options from them without loading them."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.bayes.referral.config import GROUP_FAMILIES
from pipeline.bayes.referral.options import Ordering
from pipeline.bayes.referral.settings import Risk
from pipeline.core.configs import check_at_least, check_choice, invalid
from pipeline.core.contracts import DEFAULT_BATCH


@dataclass
class ScoreConfig:
    """Settings of one scoring run."""

    samples: int | None = None  # Monte Carlo samples per mixture component
    batch_size: int = DEFAULT_BATCH  # admissions per forward pass (memory grows with it; the draws depend on it)
    chunk_rows: int = 4096  # admissions read from Parquet at a time (each chunk is batched by length on its own)
    seed: int = 0  # torch seed of the weight draws (same seed, rows, chunk_rows and batch_size -> same scores)
    threads: int | None = None  # torch intra-op threads (unset: torch's default)
    alpha: float | None = None  # re-derive the run's refer rule for this promise: the kept admissions' risk at most
        # alpha (unset: the run's rule, as trained)
    delta: float | None = None  # re-derive the refer rule at this confidence 1 - delta (unset: the run's)
    risk: str | None = None  # re-derive the refer rule for this risk: miss_rate | brier (unset: the run's)
    ordering: str | None = None  # re-derive the refer rule ranking by: risk | entropy | mi | sd | band | decision |
        # va_decision | va_width (unset: the run's)
    refer_group: str | None = None  # re-derive the refer rule per group of a context family: age | gender |
        # admission_type | admission_location (unset: the run's)

    def __post_init__(self) -> None:
        check_at_least(self, 1, ("batch_size", "chunk_rows", "samples"))
        for name in ("alpha", "delta"):
            value = getattr(self, name)
            if value is not None and not 0.0 < float(value) < 1.0:
                raise invalid(self, f"{name} must lie strictly between 0 and 1, got {value}", name)
        if self.risk is not None:
            check_choice(self, "risk", Risk)
            self.risk = self.risk.value
        if self.ordering is not None:
            check_choice(self, "ordering", Ordering)
            self.ordering = self.ordering.value
        if self.refer_group is not None and self.refer_group not in GROUP_FAMILIES:
            raise invalid(self, f"refer_group must be one of {list(GROUP_FAMILIES)}, got {self.refer_group!r}",
                          "refer_group")

    def referral_changes(self) -> dict:
        """The refer rule's settings to re-derive (``Policy.rederive``), those set."""
        pairs = (("alpha", self.alpha), ("delta", self.delta), ("risk", self.risk), ("ordering", self.ordering),
                 ("group", self.refer_group))
        return {k: v for k, v in pairs if v is not None}
