"""MEDS datasets for the tests (issue 37): meds-testing-helpers' static sample written to disk, a task config written
for its codes, and small datasets written here (``write_dataset``, ``tiny_dataset``: the edge cases)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

SAMPLE_TASK = """\
predicates:
  admission:
    code: { regex: "^ADMISSION//" }
  discharge:
    code: DISCHARGE
trigger: admission
windows:
  gap:
    start: trigger
    end: start + 30m
    start_inclusive: False
    end_inclusive: True
    has:
      discharge: (None, 0)
    index_timestamp: end
  target:
    start: gap.end
    end: start + 1h
    start_inclusive: False
    end_inclusive: True
    label: discharge
"""
# discharged within the hour after admission + 30 min, from the sample's admission and discharge times
SAMPLE_EXPECTED = {239684: False, 1195293: True, 68729: False, 814703: True, 754281: False, 1500733: False}
SAMPLE_SPLITS = {239684: "train", 1195293: "train", 68729: "train", 814703: "train", 754281: "val", 1500733: "test"}
# the end-to-end task on the sample's codes: at every event (the trigger _ANY_EVENT, the prediction time the event's
# time), is the subject discharged within the next 2 h; 28 labels, both classes in every split (20 / 3 / 5)
DISCHARGE_2H_TASK = """\
predicates:
  discharge:
    code: DISCHARGE
trigger: _ANY_EVENT
windows:
  target:
    start: trigger
    end: start + 2h
    start_inclusive: False
    end_inclusive: True
    label: discharge
    index_timestamp: start
"""


def write_sample(root: Path) -> Path:
    """meds-testing-helpers' static sample dataset (sharded by split, with a task's label files) at ``root``."""
    from meds_testing_helpers.dataset import MEDSDataset
    from meds_testing_helpers.static_sample_data import SIMPLE_STATIC_SHARDED_BY_SPLIT_WITH_TASKS

    MEDSDataset.from_yaml(SIMPLE_STATIC_SHARDED_BY_SPLIT_WITH_TASKS).write(root)
    return root


T0 = datetime(2020, 3, 1, 12, 0, 0)


def write_dataset(root: Path, rows: list[tuple], splits: dict[int, str] | None = None,
                  labels: list[tuple] | None = None, dataset: dict | None = None,
                  schema_override: dict | None = None) -> Path:
    """A MEDS dataset: ``rows`` (subject_id, time, code, numeric_value, text_value) in one shard."""
    (root / "data").mkdir(parents=True)
    (root / "metadata").mkdir()
    frame = pd.DataFrame(rows, columns=["subject_id", "time", "code", "numeric_value", "text_value"])
    schema = pa.schema([("subject_id", pa.int64()), ("time", pa.timestamp("us")), ("code", pa.string()),
                        ("numeric_value", pa.float32()), ("text_value", pa.large_string())])
    for name, typ in (schema_override or {}).items():
        schema = schema.set(schema.get_field_index(name), pa.field(name, typ))
        frame[name] = frame[name].astype(str)
    pq.write_table(pa.Table.from_pandas(frame, schema=schema, preserve_index=False), root / "data" / "0.parquet")
    (root / "metadata" / "dataset.json").write_text(json.dumps(dataset or {"dataset_name": "tiny"}))
    if splits is not None:
        pq.write_table(pa.table({"subject_id": pa.array(list(splits), pa.int64()),
                                 "split": pa.array(list(splits.values()), pa.string())}),
                       root / "metadata" / "subject_splits.parquet")
    if labels is not None:
        (root / "labels").mkdir()
        pq.write_table(pa.table({"subject_id": pa.array([r[0] for r in labels], pa.int64()),
                                 "prediction_time": pa.array([r[1] for r in labels], pa.timestamp("us")),
                                 "boolean_value": pa.array([r[2] for r in labels], pa.bool_())}),
                       root / "labels" / "labels.parquet")
    return root


def tiny_dataset(root: Path) -> Path:
    """Subjects 1-6 train, 7 val, 8 test, 9 in no split, 10 with only a static row (no events)."""
    rows, labels = [], []
    for s in range(1, 11):
        rows.append((s, None, "GENDER//F" if s % 2 else "GENDER//M", None, None))
        if s == 10:
            labels.append((s, T0, False))
            continue
        rows.append((s, T0 - timedelta(days=40 * 365), "MEDS_BIRTH", None, None))
        rows.append((s, T0 - timedelta(days=31), "LAB//1//mg", 1.0 * s, None))  # before the 30-day lookback
        rows.append((s, T0 - timedelta(hours=30), "LAB//1//mg", 2.0 * s, None))  # a daily bag
        rows.append((s, T0 - timedelta(minutes=30), "LAB//1//mg", 3.0 * s, None))  # the last hourly bag
        rows.append((s, T0, "VITAL//X", None, "high" if s % 2 else "low"))  # at exactly the prediction time
        if s == 8:
            rows.append((s, T0 - timedelta(hours=2), "RARE//only-in-test", None, None))  # unseen in training
        rows.append((s, T0 + timedelta(hours=5), "MEDS_DEATH" if s % 3 == 0 else "DISCHARGE", None, None))
        labels.append((s, T0, s % 3 == 0))
        labels.append((s, T0 - timedelta(hours=12), False))  # a second label per subject
    splits = {s: "train" for s in range(1, 7)} | {7: "tuning", 8: "held_out", 10: "train"}
    return write_dataset(root, sorted(rows, key=lambda r: (r[0], r[1] is not None, r[1] or T0)), splits, labels)
