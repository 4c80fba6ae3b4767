"""Extraction: a MIMIC-III source -> de-identified, time-bagged token sequences (Parquet, ``contracts.FEATURES``).

- ``config``: ``ExtractConfig``, ``SplitMode``, ``ExtractResult`` (standard library only).
- ``flow``: ``extract``, the flow (cohort and events by the source's SQL, then local DuckDB + pyarrow:
  pseudonymise, split, fit bins and vocabulary on train, tokenise, bag, write).
- ``cohort``: split assignment by patient and context tokens.  ``tokens``: vocabulary, tokens, bags.
- ``accounting``: rows read = used + quarantined + outside the window, per table.
Names load their module on first use (``pipeline.core.lazy``): the CLI reads ``SplitMode`` without pandas.
"""

from pipeline.core.lazy import lazy

_HOMES = {**dict.fromkeys(("ExtractConfig", "ExtractResult", "SplitMode"), "config"), "extract": "flow"}
__all__ = sorted(_HOMES)
__getattr__, __dir__ = lazy(__name__, _HOMES)
