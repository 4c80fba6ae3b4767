"""The synthetic MIMIC-III generator with a known true risk (test data and the main job's benchmark).

- ``simulation``: the generative model (its docstring is the specification), ``MODEL`` and ``SynthConfig``.
- ``generator``: ``generate``, the writer that runs the model chunk by chunk (in parallel with ``workers``).
- ``catalog_chart``, ``catalog_icu``, ``catalog_hosp``: the static catalog (items, units, value models) by
  table family: CHARTEVENTS, the other ICU tables (and D_ITEMS), the hospital tables.
- ``chunk``: the simulated chunk and the helpers every builder shares.  ``csvgz``: arrow columns and the
  deterministic gzip CSV writer.
- ``tables``: the v1.4 layouts (``COLUMNS``) and the non-event tables.  ``events_chart``, ``events_icu``,
  ``events_hosp``: one builder per event table.  ``mimic4``: the same world in MIMIC-IV's layout.
- ``limits``: the arguments' limits (standard library only; the CLI's options read them).

Production code never imports this package (the extraction must not be able to read the truth).
Names load their module on first use (``pipeline.core.lazy``): the CLI reads ``limits`` without numpy.
"""

from pipeline.core.lazy import lazy

_HOMES = {"COLUMNS": "tables", "TRUTH_COLUMNS": "tables", "MODEL": "simulation", "SynthConfig": "simulation",
          "SynthSummary": "generator", "generate": "generator"}
__all__ = sorted(_HOMES)
__getattr__, __dir__ = lazy(__name__, _HOMES)
