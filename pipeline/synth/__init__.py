"""The synthetic MIMIC-III generator with a known true risk (test data and the main job's benchmark).

- ``generator``: the generative model (its docstring) and ``generate``.
- ``catalog``: the static catalog (items, units, value models).
- ``tables``: the table writers and shared building blocks.  ``events``: one builder per event table.

Production code never imports this package (the extraction must not be able to read the truth).
"""

from __future__ import annotations

from pipeline.synth.generator import COLUMNS, MODEL, TRUTH_COLUMNS, SynthConfig, SynthSummary, generate

__all__ = ["COLUMNS", "MODEL", "TRUTH_COLUMNS", "SynthConfig", "SynthSummary", "generate"]
