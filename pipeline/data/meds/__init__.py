"""MEDS in and out (docs/meds.md): any MEDS 0.4 dataset as a source, tasks from ACES configs, MIMIC-III and
MIMIC-IV exported as MEDS, predictions that meds-evaluation scores.

- ``layout``: a MEDS dataset's layout, every file checked against ``meds``' schemas (``MedsError``).
- ``labels``: label files, ACES task configs (es-aces) and the shipped ones (``tasks/``), the labels' cleaning.
- ``flow``: ``extract_meds``, a MEDS dataset -> feature files (``contracts.MEDS_FEATURES``), through the MIMIC
  extraction's own token, vocabulary and bag SQL; ``context``: its context tokens.
- ``export``: ``export_meds``, a MIMIC source (CSV, stage, PostgreSQL) -> a MEDS dataset (``codes``: its codes).
- ``predictions``: ``write_predictions``, a risk table -> meds-evaluation's prediction schema (data owner only).
- ``config``: ``MedsConfig``, ``ExportConfig`` (standard library only).
Names load their module on first use (``pipeline.core.lazy``); nothing here imports torch.
"""

from pipeline.core.lazy import lazy

_HOMES = {"ExportConfig": "config", "MedsConfig": "config", "MedsSplit": "config", "MedsError": "layout",
          "is_meds": "layout", "extract_meds": "flow", "export_meds": "export", "write_predictions": "predictions"}
__all__ = sorted(_HOMES)
__getattr__, __dir__ = lazy(__name__, _HOMES)
