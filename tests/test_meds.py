"""MEDS in and out (pipeline.data.meds, issue 37): a MEDS dataset the project did not write (meds-testing-helpers'
sample) extracted with a task config written for its codes and with its own label files; the edge cases on a
small dataset written here; bad input; predictions scored by meds-evaluation. The demo round trips (export ->
extract against the direct extraction) are in test_meds_export.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers.meds import SAMPLE_EXPECTED, SAMPLE_SPLITS, SAMPLE_TASK, T0, tiny_dataset, write_sample

from pipeline.core.contracts import MEDS_FEATURES
from pipeline.data.meds.config import MedsConfig
from pipeline.data.meds.flow import extract_meds
from pipeline.data.meds.layout import MedsError

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> Path:
    """meds-testing-helpers' static sample dataset (sharded by split, with a task's label files)."""
    return write_sample(tmp_path_factory.mktemp("sample") / "meds")


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


def test_edge_cases(tmp_path):
    root = tiny_dataset(tmp_path / "tiny")
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
    root = tiny_dataset(tmp_path / "bad")
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
    root = tiny_dataset(tmp_path / "tiny")
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


# ---------------------------------------------------------------------------- a census (score --source MEDS_DIR)


def _vocab(features: Path):
    from pipeline.data.mimic.extraction.tokens import Vocab

    return Vocab.from_json(json.loads((features / "vocab.json").read_text()))


def test_a_census_gets_the_labelled_extractions_features(sample, tmp_path):
    """Scored at the label files' times with the trained vocabulary, every row of the census is the labelled row of
    the same (subject, time): the same pseudonym, bags, hours, context and events; nothing refitted."""
    labels = sample / "task_labels" / "boolean_value_task"
    extract_meds(sample, tmp_path / "f", MedsConfig(min_patients=1), labels=labels)
    census = extract_meds(sample, tmp_path / "c", MedsConfig(min_patients=1), vocab=_vocab(tmp_path / "f"),
                          times=sorted(labels.glob("*.parquet"))[1])
    got = pq.read_table(tmp_path / "c" / "cohort.parquet").to_pandas().set_index("key")
    want = _cohort(tmp_path / "f").set_index("key").loc[got.index]
    assert len(got) == 11 and got["label"].isna().all()
    for col in ("bags", "bag_hours", "context"):
        assert [list(map(list, x)) if col == "bags" else list(x) for x in got[col]] == \
               [list(map(list, x)) if col == "bags" else list(x) for x in want[col]], col
    assert list(got["n_events"]) == list(want["n_events"])
    assert not (tmp_path / "c" / "vocab.json").exists() and not (tmp_path / "c" / "_private" / "labels").exists()
    m = census.manifest
    assert m["splits"] == {"cohort": {"admissions": 11, "positives": None, "label_rate": None, "patients": 3}}
    assert m["tables"]["census"] == {"rows_read": 11, "scored": 11, "not_scored": 0,
                                     "not_scored_by": {k: 0 for k in ("absent: no such subject_id in data/",
                                                                      "after the data's last event",
                                                                      "duplicate (subject_id, prediction_time)")}}


def test_a_census_from_a_task_needs_no_outcome(sample, tmp_path):
    """The task without its label window: a stay with no discharge yet (its DISCHARGE row removed) has no label
    but has a prediction time; the others are the labelled run's times."""
    from pipeline.data.meds.labels import run_task
    from pipeline.data.meds.layout import detect

    task = tmp_path / "task.yaml"
    task.write_text(SAMPLE_TASK.replace("end: start + 1h", "end: start -> discharge"))  # to the discharge
    shard = sample / "data" / "held_out" / "0.parquet"
    open_stay = tmp_path / "open"
    import shutil

    shutil.copytree(sample, open_stay)
    table = pq.read_table(shard)
    pq.write_table(table.filter(pa.compute.not_equal(table.column("code"), "DISCHARGE")),
                   open_stay / "data" / "held_out" / "0.parquet")
    layout = detect(open_stay)
    labelled = run_task(task, layout).to_pandas()
    census = run_task(task, layout, census=True).to_pandas()
    assert 1500733 not in set(labelled["subject_id"]) and 1500733 in set(census["subject_id"])
    assert list(census.columns) == ["subject_id", "prediction_time"]
    rest = census[census["subject_id"] != 1500733]
    assert set(zip(rest["subject_id"], rest["prediction_time"])) == \
           set(zip(labelled["subject_id"], labelled["prediction_time"]))


def test_census_times_that_cannot_be_scored_are_listed(sample, tmp_path):
    labels = sample / "task_labels" / "boolean_value_task"
    extract_meds(sample, tmp_path / "f", MedsConfig(min_patients=1), labels=labels)
    times = tmp_path / "times.csv"
    times.write_text("subject_id,prediction_time\n239684,2010-05-11 18:00:00\n239684,2010-05-11 18:00\n"
                     "42,2010-05-11 18:00:00\n68729,2031-01-01 00:00:00\n68729,2010-05-26 03:00:00\n")
    result = extract_meds(sample, tmp_path / "c", MedsConfig(min_patients=1), vocab=_vocab(tmp_path / "f"),
                          times=times)
    assert pq.read_table(tmp_path / "c" / "cohort.parquet").num_rows == 2
    skipped = result.excluded.sort_values("subject_id")
    assert list(skipped["subject_id"]) == [42, 68729, 239684]
    assert list(skipped["reason"]) == ["absent: no such subject_id in data/", "after the data's last event",
                                       "duplicate (subject_id, prediction_time)"]
    bad = tmp_path / "bad.csv"
    bad.write_text("subject_id,prediction_time\n239684,2010-05-11 18:00:00\n239684,soon\n")
    with pytest.raises(MedsError, match=r"bad\.csv: line 3: no prediction_time") as err:
        extract_meds(sample, tmp_path / "d", vocab=_vocab(tmp_path / "f"), times=bad)
    assert "soon" not in str(err.value) and not (tmp_path / "d").exists()


def test_predictions_without_labels_or_threshold_follow_the_schema(sample, tmp_path):
    from meds_evaluation.schema import PredictionSchema

    from pipeline.data.meds.predictions import write_predictions

    labels = sample / "task_labels" / "boolean_value_task"
    extract_meds(sample, tmp_path / "f", MedsConfig(min_patients=1), labels=labels)
    cohort = _cohort(tmp_path / "f")
    risk = pd.DataFrame({"key": cohort["key"], "risk_mean": 0.2, "risk_calibrated": np.linspace(0, 1, len(cohort))})
    link = tmp_path / "f" / "_private" / "link.parquet"
    census = pq.read_table(write_predictions(risk, link, None, tmp_path / "p1.parquet", threshold=0.5,
                                             probability="risk_calibrated"))
    PredictionSchema.validate(census)
    assert census.column_names == ["subject_id", "prediction_time", "predicted_boolean_value",
                                   "predicted_boolean_probability"]
    joined = census.to_pandas().merge(cohort, on=["subject_id", "prediction_time"]).merge(risk, on="key")
    assert (joined["predicted_boolean_value"] == (joined["risk_calibrated"] >= 0.5)).all()
    labelled = pq.read_table(write_predictions(risk, link, tmp_path / "f" / "_private" / "labels",
                                               tmp_path / "p2.parquet", threshold=None))
    PredictionSchema.validate(labelled)
    assert "predicted_boolean_value" not in labelled.column_names and labelled.num_rows == len(cohort)
