"""Settings of a scoring run (``ScoreConfig``: one comment per field, the CLI help); torch-, numpy- and
pyarrow-free, so ``cli.py`` builds ``score``'s options from them without loading them."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.core.configs import check_at_least
from pipeline.core.contracts import DEFAULT_BATCH


@dataclass
class ScoreConfig:
    """Settings of one scoring run."""

    samples: int | None = None  # Monte Carlo samples per mixture component
    batch_size: int = DEFAULT_BATCH  # admissions per forward pass (memory grows with it; the draws depend on it)
    chunk_rows: int = 4096  # admissions read from Parquet at a time (each chunk is batched by length on its own)
    seed: int = 0  # torch seed of the weight draws (same seed, rows, chunk_rows and batch_size -> same scores)
    threads: int | None = None  # torch intra-op threads (unset: torch's default)

    def __post_init__(self) -> None:
        check_at_least(self, 1, ("batch_size", "chunk_rows", "samples"))
