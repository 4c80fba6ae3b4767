"""MEDS in and out (pipeline.data.meds, issue 37): a MEDS dataset the project did not write (meds-testing-helpers'
sample) extracted with a task config written for its codes and with its own label files; the edge cases on a
small dataset written here; bad input; predictions scored by meds-evaluation. The demo round trips (export ->
extract against the direct extraction) are in test_meds_export.py."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.core.contracts import MEDS_FEATURES
from pipeline.data.meds.config import MedsConfig
from pipeline.data.meds.flow import extract_meds
from pipeline.data.meds.layout import MedsError

ROOT = Path(__file__).resolve().parents[1]
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


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> Path:
    """meds-testing-helpers' static sample dataset (sharded by split, with a task's label files)."""
    from meds_testing_helpers.dataset import MEDSDataset
    from meds_testing_helpers.static_sample_data import SIMPLE_STATIC_SHARDED_BY_SPLIT_WITH_TASKS

    root = tmp_path_factory.mktemp("sample") / "meds"
    MEDSDataset.from_yaml(SIMPLE_STATIC_SHARDED_BY_SPLIT_WITH_TASKS).write(root)
    return root


def _cohort(out: Path) -> pd.DataFrame:
    link = pq.read_table(out / "_private" / "link.parquet").to_pandas()
    parts = [pq.read_table(out / f"{s}.parquet").to_pandas().assign(split=s) for s in ("train", "val", "test")]
    return pd.concat(parts).merge(link, on="key")


def test_sample_dataset_with_a_task_config(sample, tmp_path):
    task = tmp_path / "task.yaml"
    task.write_text(SAMPLE_TASK)
    result = extract_meds(sample, tmp_path / "f", MedsConfig(min_patients=1), task=task)
    cohort = _cohort(tmp_path / "f")
    assert dict(zip(cohort["subject_id"], cohort["label"].astype(bool))) == SAMPLE_EXPECTED
    assert dict(zip(cohort["subject_id"], cohort["split"])) == SAMPLE_SPLITS
    # prediction time = admission + 30 min; every bag starts before it, within the hourly bags
    adm = {239684: "2010-05-11 17:41:51", 1195293: "2010-06-20 19:23:52"}
    for s, t in adm.items():
        row = cohort[cohort["subject_id"] == s].iloc[0]
        assert row["prediction_time"] == pd.Timestamp(t) + pd.Timedelta(minutes=30)
        assert all(-1.0 <= h < 0.0 for h in row["bag_hours"]) and row["n_events"] > 0
    m = result.manifest
    assert m["release"] == "meds:" + Path(sample).name and m["time_origin"] == "prediction_time"
    assert m["config"]["prediction_hours"] == 0.0
    assert m["tables"]["data"]["rows_read"] == m["tables"]["data"]["static_rows"] + m["tables"]["data"]["used"] + \
        m["tables"]["data"]["quarantined"] + m["tables"]["data"]["outside_window"]
    vocab = json.loads((tmp_path / "f" / "vocab.json").read_text())
    assert "static:EYE_COLOR//BROWN" in vocab["context"] and "ADMISSION:<oov>" in vocab["tokens"]
    schema = pq.read_schema(tmp_path / "f" / "train.parquet")
    assert tuple(schema.names) == tuple(c for c in MEDS_FEATURES.names() if c != "bag_values")
    # the labels used, in the MEDS label schema, for the data owner
    from meds import LabelSchema

    labels = pq.read_table(tmp_path / "f" / "_private" / "labels" / "labels.parquet")
    LabelSchema.validate(labels)
    assert labels.num_rows == 6 and (tmp_path / "f" / "_private").stat().st_mode & 0o077 == 0


def test_sample_label_files_several_per_subject(sample, tmp_path):
    labels = sample / "task_labels" / "boolean_value_task"
    extract_meds(sample, tmp_path / "f", MedsConfig(min_patients=1), labels=labels)
    cohort = _cohort(tmp_path / "f")
    given = pd.concat(pq.read_table(f).to_pandas() for f in sorted(labels.glob("*.parquet")))
    assert len(cohort) == len(given) == 21
    got = set(zip(cohort["subject_id"], cohort["prediction_time"], cohort["label"].astype(bool)))
    assert got == set(zip(given["subject_id"], given["prediction_time"], given["boolean_value"]))
    assert cohort["key"].is_unique  # one pseudonym per (subject, prediction time)
    # a subject's later labels see at least the events of its earlier ones (same admission, growing window)
    s = cohort[cohort["subject_id"] == 68729].sort_values("prediction_time")
    assert list(s["n_events"]) == sorted(s["n_events"])


# ---------------------------------------------------------------------------- a small dataset of our own


T0 = datetime(2020, 3, 1, 12, 0, 0)


def _write(root: Path, rows: list[tuple], splits: dict[int, str] | None = None, labels: list[tuple] | None = None,
           dataset: dict | None = None, schema_override: dict | None = None) -> Path:
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


def _tiny(root: Path) -> Path:
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
    return _write(root, sorted(rows, key=lambda r: (r[0], r[1] is not None, r[1] or T0)), splits, labels)


def test_edge_cases(tmp_path):
    root = _tiny(tmp_path / "tiny")
    result = extract_meds(root, tmp_path / "f", MedsConfig(min_patients=2), labels=root / "labels")
    cohort = _cohort(tmp_path / "f")
    acc = result.manifest["tables"]
    # subject 9 is in no split: its two labels quarantined with the reason, never silently dropped
    assert 9 not in set(cohort["subject_id"])
    assert acc["labels"]["quarantine_reasons"] == {"subject in no split of subject_splits.parquet": 2}
    q = pq.read_table(tmp_path / "f" / "quarantine" / "labels.parquet").to_pandas()
    assert len(q) == 2 and set(q["reason"]) == {"subject in no split of subject_splits.parquet"}
    # static rows (null time) are context, not events
    assert acc["data"]["static_rows"] == 10
    at_t = cohort[(cohort["subject_id"] == 1) & (cohort["prediction_time"] == pd.Timestamp(T0))].iloc[0]
    # the event at exactly T is used (MEDS's inclusive end) and lands in the last hourly bag [-1, 0);
    # the event 31 days back is outside the 30-day lookback
    assert at_t["n_events"] == 3 and list(at_t["bag_hours"]) == [-48.0, -1.0]
    earlier = cohort[(cohort["subject_id"] == 1) & (cohort["prediction_time"] < pd.Timestamp(T0))].iloc[0]
    assert earlier["n_events"] == 1  # only the event 30 h before T is within [T - 12 h - 30 d, T - 12 h]
    # a label for a subject without events: zero bags, its context only
    empty = cohort[cohort["subject_id"] == 10].iloc[0]
    assert empty["n_events"] == 0 and len(empty["bags"]) == 0 and len(empty["context"]) >= 1
    assert np.isnan(empty["age"])
    # a code unseen in training maps to its source's OOV token (RARE has no group: the catch-all)
    vocab = json.loads((tmp_path / "f" / "vocab.json").read_text())
    test_row = cohort[(cohort["subject_id"] == 8) & (cohort["prediction_time"] == pd.Timestamp(T0))].iloc[0]
    oov = vocab["tokens"].index("meds:<oov>")
    assert oov in [t for bag in test_row["bags"] for t in bag]
    assert not any("RARE" in t for t in vocab["tokens"])
    # text values of a closed vocabulary become tokens
    assert "VITAL:VITAL//X:t:high" in vocab["tokens"]
    assert at_t["age"] == pytest.approx(40 * 365 / 365.2425, abs=1e-3)


def _bad(tmp_path: Path, kind: str) -> tuple[Path, dict]:
    root = _tiny(tmp_path / "bad")
    if kind == "type":
        frame = pq.read_table(root / "data" / "0.parquet")
        frame = frame.set_column(0, "subject_id", frame.column("subject_id").cast(pa.string()))
        pq.write_table(frame, root / "data" / "0.parquet")
    elif kind == "unsorted":
        frame = pq.read_table(root / "data" / "0.parquet").to_pandas()
        frame = pd.concat([frame.iloc[:3].iloc[::-1], frame.iloc[3:]])
        pq.write_table(pa.Table.from_pandas(frame, schema=pq.read_schema(root / "data" / "0.parquet"),
                                            preserve_index=False), root / "data" / "0.parquet")
    elif kind == "unknown":
        labels = pq.read_table(root / "labels" / "labels.parquet").to_pandas()
        labels.loc[3, "subject_id"] = 999
        pq.write_table(pa.Table.from_pandas(labels, schema=pq.read_schema(root / "labels" / "labels.parquet"),
                                            preserve_index=False), root / "labels" / "labels.parquet")
    elif kind == "no-metadata":
        for f in (root / "metadata").iterdir():
            f.unlink()
        (root / "metadata").rmdir()
    elif kind == "aces":
        (root / "task.yaml").write_text("predicates:\n  adm: {code: ADM}\ntrigger: nothing\nwindows: [1, 2\n")
        return root, {"task": root / "task.yaml"}
    return root, {"labels": root / "labels"}


@pytest.mark.parametrize("kind, expected", [
    ("type", r"data/0\.parquet: not a MEDS data file: Columns with incorrect types: subject_id \(want int64"),
    ("unsorted", r"data/0\.parquet: row \d+ is out of time order"),
    ("unknown", r"labels\.parquet: row 3: a label for a subject that is neither in the dataset"),
    ("no-metadata", r"bad: no metadata/ directory"),
    ("aces", r"task\.yaml: not a valid ACES task config"),
])
def test_bad_input_one_line_nothing_written(tmp_path, kind, expected):
    root, flags = _bad(tmp_path, kind)
    out = tmp_path / "new" / "features"
    with pytest.raises(MedsError, match=expected) as err:
        extract_meds(root, out, MedsConfig(min_patients=2), **flags)
    assert "\n" not in str(err.value)
    assert not out.exists() and not out.parent.exists()  # nothing half-written, not even the folders


def test_shipped_task_needs_a_known_dataset(tmp_path):
    root = _tiny(tmp_path / "tiny")
    with pytest.raises(MedsError, match="no shipped task config fits this dataset"):
        extract_meds(root, tmp_path / "f")


def test_predictions_scored_by_meds_evaluation(sample, tmp_path):
    from meds_evaluation.evaluate import evaluate_binary_classification
    from meds_evaluation.schema import PredictionSchema

    from pipeline.data.meds.predictions import write_predictions

    labels = sample / "task_labels" / "boolean_value_task"
    extract_meds(sample, tmp_path / "f", MedsConfig(min_patients=1), labels=labels)
    cohort = _cohort(tmp_path / "f")
    rng = np.random.default_rng(0)
    noise = 0.6 * rng.random(len(cohort))
    risk = pd.DataFrame({"key": cohort["key"], "risk_mean": np.clip(0.3 * cohort["label"] + noise, 0, 1)})
    out = write_predictions(risk, tmp_path / "f" / "_private" / "link.parquet",
                            tmp_path / "f" / "_private" / "labels", tmp_path / "_private" / "predictions.parquet",
                            threshold=0.5)
    table = pq.read_table(out)
    PredictionSchema.validate(table)
    assert table.num_rows == len(cohort) and out.stat().st_mode & 0o077 == 0
    import polars as pl

    metrics = evaluate_binary_classification(pl.from_arrow(table))
    s = metrics["samples_equally_weighted"]
    from sklearn.metrics import roc_auc_score

    joined = cohort.merge(risk)
    assert s["roc_auc_score"] == pytest.approx(roc_auc_score(joined["label"], joined["risk_mean"]), abs=1e-6)
    assert s["binary_accuracy"] == pytest.approx(float(((joined["risk_mean"] >= 0.5) == joined["label"]).mean()))
    with pytest.raises(MedsError, match="not in this link file"):
        write_predictions(pd.DataFrame({"key": ["0" * 32], "risk_mean": [0.5]}),
                          tmp_path / "f" / "_private" / "link.parquet", labels, tmp_path / "p2.parquet")


def test_docs_show_the_meds_features_contract():
    assert MEDS_FEATURES.markdown() in (ROOT / "docs" / "meds.md").read_text()
