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


def icu_dataset(root: Path, n: int = 16) -> tuple[Path, dict, dict]:
    """A MEDS dataset named MIMIC-IV on MIMIC_IV_MEDS's codes (what export-meds writes), for MEDS-DEV's in-ICU
    mortality and 30-day readmission tasks with MEDS-DEV's MIMIC-IV predicates: (root, the in-ICU labels, the
    readmission labels), each {(subject_id, prediction_time): label} as the tasks define them (by hand). Every
    subject: an admission at T0, an ICU stay from T0 + 1 h, labs; by subject_id % 4:
    0 dies in the ICU at T0 + 72 h (in-ICU: dead; readmission: no data after 30 days, not a label);
    1 leaves the ICU at T0 + 60 h and the hospital at T0 + 100 h, is readmitted 10 days later for two days, and has
      data 40 days after that (in-ICU: alive; readmission: the first discharge readmitted, the second not);
    2 leaves the ICU at T0 + 20 h, within the 48 h gap (in-ICU: not a label), the hospital at T0 + 48 h, a lab 60
      days later (readmission: not readmitted);
    3 leaves the ICU at T0 + 70 h, the hospital at T0 + 100 h and dies at home at T0 + 200 h (in-ICU: alive, its
      death after the ICU stay; readmission: the death within 30 days leaves no data after them, not a label)."""
    h, d = timedelta(hours=1), timedelta(days=1)
    rows, icu, readmission = [], {}, {}
    for s in range(1, n + 1):
        kind = s % 4
        rows += [(s, None, "GENDER//F" if s % 2 else "GENDER//M", None, None),
                 (s, T0 - 60 * 365 * d, "MEDS_BIRTH", None, None),
                 (s, T0, "HOSPITAL_ADMISSION//EW EMER.//EMERGENCY ROOM", None, None),
                 (s, T0 + h, "ICU_ADMISSION//Medical Intensive Care Unit (MICU)", None, None),
                 (s, T0 + 2 * h, "LAB//50912//mg/dL", 1.0 + s % 3, None),
                 (s, T0 + 10 * h, "LAB//220045//bpm", 80.0 + s, None)]
        if kind == 0:
            rows += [(s, T0 + 72 * h, "MEDS_DEATH", None, None),
                     (s, T0 + 72 * h, "HOSPITAL_DISCHARGE//DIED", None, None)]
        elif kind == 1:
            back = T0 + 100 * h + 10 * d
            rows += [(s, T0 + 60 * h, "ICU_DISCHARGE//Medical Intensive Care Unit (MICU)", None, None),
                     (s, T0 + 100 * h, "HOSPITAL_DISCHARGE//HOME", None, None),
                     (s, back, "HOSPITAL_ADMISSION//URGENT//TRANSFER FROM HOSPITAL", None, None),
                     (s, back + 2 * d, "HOSPITAL_DISCHARGE//HOME", None, None),
                     (s, back + 42 * d, "LAB//50912//mg/dL", 1.0, None)]
            readmission[(s, pd.Timestamp(T0 + 100 * h))] = True
            readmission[(s, pd.Timestamp(back + 2 * d))] = False
        elif kind == 2:
            rows += [(s, T0 + 20 * h, "ICU_DISCHARGE//Medical Intensive Care Unit (MICU)", None, None),
                     (s, T0 + 48 * h, "HOSPITAL_DISCHARGE//HOME", None, None),
                     (s, T0 + 48 * h + 60 * d, "LAB//50912//mg/dL", 1.0, None)]
            readmission[(s, pd.Timestamp(T0 + 48 * h))] = False
        else:
            rows += [(s, T0 + 70 * h, "ICU_DISCHARGE//Medical Intensive Care Unit (MICU)", None, None),
                     (s, T0 + 100 * h, "HOSPITAL_DISCHARGE//HOME", None, None),
                     (s, T0 + 200 * h, "MEDS_DEATH", None, None)]
        if kind != 2:
            icu[(s, pd.Timestamp(T0 + 25 * h))] = kind == 0
    third = n // 4
    splits = {s: "held_out" if s <= third else "tuning" if s <= 2 * third else "train" for s in range(1, n + 1)}
    rows.sort(key=lambda r: (r[0], r[1] is not None, r[1] or T0, r[2]))
    root = write_dataset(root, rows, splits, dataset={"dataset_name": "MIMIC-IV", "etl_name": "MIMIC_IV_MEDS",
                                                      "meds_version": "0.4.1"})
    return root, icu, readmission
