"""Extraction: a MIMIC-III source -> de-identified, time-bagged token sequences (Parquet, ``contracts.FEATURES``).

- ``config``: ``ExtractConfig``, ``SplitMode``, ``ExtractResult``.
- ``extract``: the flow (cohort and events by the source's SQL, then local DuckDB + pyarrow:
  pseudonymise, split, fit bins and vocabulary on train, tokenise, bag, write).
- ``cohort``: split assignment by patient and context tokens.  ``tokens``: vocabulary, tokens, bags.
- ``accounting``: rows read = used + quarantined + outside the window, per table.
"""

from __future__ import annotations

from pipeline.extraction.config import ExtractConfig, ExtractResult, SplitMode
from pipeline.extraction.extract import extract

__all__ = ["ExtractConfig", "ExtractResult", "SplitMode", "extract"]
