"""The synthetic MIMIC-III generator with a known true risk (test data and the main job's benchmark).

- ``generator``: the generative model (its docstring) and ``generate``.
- ``catalog``: the static catalog (items, units, value models).
- ``tables``: the table writers and shared building blocks.  ``events``: one builder per event table.
- ``limits``: the arguments' limits (standard library only; the CLI's options read them).

Production code never imports this package (the extraction must not be able to read the truth).
Names load their module on first use (``pipeline.lazy``): the CLI reads ``limits`` without numpy.
"""

from pipeline.lazy import lazy

_HOMES = dict.fromkeys(("COLUMNS", "MODEL", "TRUTH_COLUMNS", "SynthConfig", "SynthSummary", "generate"), "generator")
__all__ = sorted(_HOMES)
__getattr__, __dir__ = lazy(__name__, _HOMES)
