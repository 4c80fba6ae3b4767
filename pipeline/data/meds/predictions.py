"""A risk table (``contracts.RISK``, what ``score`` writes) as a prediction file in meds-evaluation's schema:
the MEDS label columns (subject_id, prediction_time, boolean_value) plus ``predicted_boolean_value`` (the risk
at or above the decision threshold) and ``predicted_boolean_probability`` (the risk: ``risk_mean``, or the
column the caller names, e.g. a calibrated risk). Without labels (a census) the file has no ``boolean_value``,
without a threshold no ``predicted_boolean_value``: meds-evaluation's schema holds either way.

The rows carry subject ids and prediction times, so the file is the data owner's (mode 0600, in a 0700
``_private/``-like folder the caller chooses): keys are resolved through the extraction's link
(``_private/link.parquet``, key -> subject_id, prediction_time) and the labels through its
``_private/labels/labels.parquet`` (or any MEDS label files). A scored key missing from the link is an error;
a scored row without a label is written with a null ``boolean_value`` only when ``require_labels`` is off.

``metadata`` (what the file predicts, in words: the task, each column's meaning) is stored as the Parquet file's
key-value metadata under ``METADATA_KEY`` (JSON; ``read_metadata`` reads it back), beside meds-evaluation's columns.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.core import fileio
from pipeline.data.meds.layout import MedsError

METADATA_KEY = b"mimic_risk.predictions"  # the file's metadata: its task and its columns in words (JSON)
SCHEMA = pa.schema([("subject_id", pa.int64()), ("prediction_time", pa.timestamp("us")), ("boolean_value", pa.bool_()),
                    ("predicted_boolean_value", pa.bool_()), ("predicted_boolean_probability", pa.float32())])


def write_predictions(risk: pd.DataFrame | str | Path, link: str | Path, labels: str | Path | None, out: str | Path,
                      threshold: float | None = 0.5, probability: str = "risk_mean",
                      require_labels: bool = True, metadata: dict | None = None) -> Path:
    """Write ``out`` (module docstring). ``risk``: the risk table (a frame, or the scores Parquet file);
    ``link``: the extraction's ``_private/link.parquet``; ``labels``: MEDS label files (a file or directory; None:
    a census, no ``boolean_value``); ``threshold``: the decision threshold on ``probability`` (None: no
    ``predicted_boolean_value``); ``metadata``: JSON stored with the file (module docstring)."""
    if isinstance(risk, (str, Path)):
        risk = pq.read_table(risk).to_pandas()
    for col in ("key", probability):
        if col not in risk.columns:
            raise MedsError(f"risk table: no column {col!r}")
    if threshold is not None and not 0.0 <= float(threshold) <= 1.0:
        raise MedsError(f"threshold must lie in [0, 1], got {threshold}")
    keys = pq.read_table(link).to_pandas()
    keys["prediction_time"] = keys["prediction_time"].astype("datetime64[us]")
    frame = risk[["key", probability]].merge(keys, on="key", how="left")
    missing = frame["subject_id"].isna()
    if missing.any():
        raise MedsError(f"{link}: {int(missing.sum())} scored key(s) are not in this link file (the features were "
                        "extracted elsewhere, or with another key)")
    if labels is not None:
        from pipeline.data.meds.labels import read_label_files

        table, _ = read_label_files(labels)
        table["prediction_time"] = table["prediction_time"].astype("datetime64[us]")
        table = table.drop_duplicates(["subject_id", "prediction_time"])[["subject_id", "prediction_time",
                                                                          "boolean_value"]]
        frame = frame.merge(table, on=["subject_id", "prediction_time"], how="left")
        if require_labels and frame["boolean_value"].isna().any():
            raise MedsError(f"{labels}: {int(frame['boolean_value'].isna().sum())} scored row(s) have no label there")
    p = frame[probability].astype("float64")
    columns = {
        "subject_id": pa.array(frame["subject_id"].astype("int64"), pa.int64()),
        "prediction_time": pa.array(frame["prediction_time"], pa.timestamp("us")),
        "boolean_value": pa.array(frame["boolean_value"].astype("boolean"), pa.bool_()) if labels is not None else None,
        "predicted_boolean_value": pa.array(p >= float(threshold), pa.bool_()) if threshold is not None else None,
        "predicted_boolean_probability": pa.array(p, pa.float32()),
    }
    schema = pa.schema([f for f in SCHEMA if columns[f.name] is not None])
    if metadata is not None:
        import json

        schema = schema.with_metadata({METADATA_KEY: json.dumps(metadata, sort_keys=True).encode()})
    out_table = pa.table([columns[n] for n in schema.names], schema=schema).sort_by(
        [("subject_id", "ascending"), ("prediction_time", "ascending")])
    _validate(out_table)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with fileio.atomic_path(out, mode=0o600) as tmp:
        pq.write_table(out_table, tmp)
    return out


def read_metadata(path: str | Path) -> dict | None:
    """What a prediction file says of itself (``metadata`` of ``write_predictions``), or None (a file without it)."""
    import json

    raw = (pq.read_schema(path).metadata or {}).get(METADATA_KEY)
    return None if raw is None else json.loads(raw)


def _validate(table: pa.Table) -> None:
    """meds-evaluation's PredictionSchema where it is installed (the dev extra), else meds' label schema's
    columns: the file is refused before it is written if it does not follow it."""
    try:
        from meds_evaluation.schema import PredictionSchema
    except ImportError:
        from meds import LabelSchema

        LabelSchema.validate(table.select([c for c in table.column_names if not c.startswith("predicted_")]))
        return
    PredictionSchema.validate(table)
