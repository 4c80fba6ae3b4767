"""The MEDS path on the command line (issue 37): a MEDS dataset the project did not write (meds-testing-helpers'
sample, with a task config written for its codes) through extract -> train -> evaluate -> score, the census of
`score --source MEDS_DIR`, the prediction file meds-evaluation scores; `export-meds` then `extract` against the
direct extraction of the MIMIC-III demo; the options a MEDS source refuses; synth's layouts."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from helpers.meds import DISCHARGE_2H_TASK, tiny_dataset, write_sample
from typer.testing import CliRunner

import cli


def _cli(*args) -> str:
    result = CliRunner().invoke(cli.app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result.output


def _fails(*args) -> str:
    result = CliRunner().invoke(cli.app, [str(a) for a in args])
    assert result.exit_code == 2, result.output
    return result.output


def test_synth_offers_the_mimic_layouts_only(tmp_path):
    assert "'meds' is not one of 'mimic-iii', 'mimic-iv'" in _fails("synth", "--out", tmp_path / "s", "--layout",
                                                                      "meds")
    assert not (tmp_path / "s").exists()
    text = " ".join(_cli("synth", "--help").split())
    assert "--layout <mimic-iii|mimic-iv>" in text and "--proportions <mimic-iii|mimic-iv>" in text


def test_labels_and_task_need_a_meds_source(tmp_path):
    out = _fails("extract", "--source", tmp_path, "--out", tmp_path / "f", "--task", tmp_path / "t.yaml")
    assert out.strip().splitlines() == [f"error: --task applies to a MEDS --source (a directory with data/ and "
                                        f"metadata/); {tmp_path} is not one"]
    out = _fails("score", "--model", "abc", "--source", tmp_path, "--out", tmp_path / "s", "--times", tmp_path / "x")
    assert "times choose a MEDS census's prediction times: they apply to a MEDS source only" in out


def test_options_a_meds_source_has_no_use_for_are_refused(tmp_path):
    root = tiny_dataset(tmp_path / "tiny")
    base = ("extract", "--source", root, "--out", tmp_path / "f", "--labels", root / "labels")
    assert "error: --prediction-hours does not apply to a MEDS source" in _fails(*base, "--prediction-hours", 12)
    assert "error: --split era does not apply to a MEDS source" in _fails(*base, "--split", "era")
    assert "error: --lookback-days must be a positive number" in _fails(*base, "--lookback-days", 0)
    assert "not both" in _fails(*base, "--task", tmp_path / "t.yaml")
    assert not (tmp_path / "f").exists()
    # --split random: 80/10/10 by subject hash instead of subject_splits.parquet (8 usable subjects)
    out = _cli(*base, "--split", "random", "--min-patients", 2)
    m = json.loads((tmp_path / "f" / "manifest.json").read_text())
    assert m["config"]["split"] == "random" and "labels=" in out


def _expected_labels(root: Path) -> dict[tuple[int, pd.Timestamp], bool]:
    """DISCHARGE_2H_TASK's labels computed from the sample's rows here: at each distinct event time t of a subject,
    whether it has a DISCHARGE in (t, t + 2 h]."""
    rows = pd.concat(pq.read_table(f).to_pandas() for f in sorted((root / "data").rglob("*.parquet")))
    rows = rows[rows["time"].notna()]
    out = {}
    for (subject, t), _ in rows.groupby(["subject_id", "time"]):
        d = rows[(rows["subject_id"] == subject) & (rows["code"] == "DISCHARGE")]["time"]
        out[(int(subject), t)] = bool(((d > t) & (d <= t + pd.Timedelta(hours=2))).any())
    return out


@pytest.mark.slow  # trains a model
def test_a_meds_dataset_the_project_did_not_write_end_to_end(tmp_path, tracking_store):
    from meds_evaluation.evaluate import evaluate_binary_classification
    from meds_evaluation.schema import PredictionSchema
    from sklearn.metrics import roc_auc_score

    sample = write_sample(tmp_path / "sample")
    task = tmp_path / "task.yaml"
    task.write_text(DISCHARGE_2H_TASK)
    out = _cli("extract", "--source", sample, "--task", task, "--out", tmp_path / "f", "--min-patients", 1)
    assert f"task: the ACES config {task}" in out
    link = pq.read_table(tmp_path / "f" / "_private" / "link.parquet").to_pandas()
    feats = pd.concat(pq.read_table(tmp_path / "f" / f"{s}.parquet").to_pandas().assign(split=s)
                      for s in ("train", "val", "test")).merge(link, on="key")
    assert dict(zip(zip(feats["subject_id"], feats["prediction_time"]), feats["label"].astype(bool))) == \
        _expected_labels(sample)
    assert feats.groupby("split")["label"].agg(["size", "sum"]).to_dict() == \
        {"size": {"test": 5, "train": 20, "val": 3}, "sum": {"test": 3, "train": 11, "val": 1}}

    out = _cli("train", "--data", tmp_path / "f", "--max-steps", 20, "--eval-every", 10, "--eval-samples", 2,
               "--score-samples", 4, "--hidden", 16, "--embed-dim", 8, "--dense", 16, "--components", 2,
               "--threads", 1, "--experiment", "meds-smoke")
    run = re.search(r"run_id: (\w+)", out).group(1)
    out = _cli("evaluate", "--run", run, "--split", "test", "--threads", 1, "--no-log", "--out", tmp_path / "eval")
    assert "test: n=5 positives=3" in out
    assert json.loads((tmp_path / "eval" / "test" / "metrics.json").read_text())["n"] == 5

    # the features scored: the data owner's prediction file, in meds-evaluation's schema, scored by it
    out = _cli("score", "--model", run, "--data", tmp_path / "f", "--out", tmp_path / "s1", "--threads", 1,
               "--decision-threshold", 0.5)
    assert "MEDS predictions (data owner only; probability risk_" in out
    scores = pq.read_table(tmp_path / "s1" / "scores.parquet").to_pandas().merge(feats, on="key")
    risk = "risk_calibrated" if scores.get("risk_calibrated", pd.Series(dtype=float)).notna().any() else "risk_mean"
    predictions = pq.read_table(tmp_path / "s1" / "_private" / "predictions.parquet")
    PredictionSchema.validate(predictions)
    assert (tmp_path / "s1" / "_private").stat().st_mode & 0o077 == 0
    joined = predictions.to_pandas().merge(scores, on=["subject_id", "prediction_time"])
    assert len(joined) == 28 and (joined["boolean_value"] == joined["label"].astype(bool)).all()
    assert (joined["predicted_boolean_value"] == (joined[risk] >= 0.5)).all()
    import polars as pl

    metrics = evaluate_binary_classification(pl.from_arrow(predictions))["samples_equally_weighted"]
    assert metrics["roc_auc_score"] == pytest.approx(roc_auc_score(joined["label"], joined[risk]), abs=1e-6)

    # the census: the task's prediction times without its label, scored with the trained vocabulary
    out = _cli("score", "--model", run, "--source", sample, "--task", task, "--out", tmp_path / "s2", "--threads", 1)
    assert "not scored: 0" in out
    census = pq.read_table(tmp_path / "s2" / "scores.parquet").to_pandas()
    assert set(census["key"]) == set(feats["key"])
    census_predictions = pq.read_table(tmp_path / "s2" / "_private" / "predictions.parquet")
    PredictionSchema.validate(census_predictions)
    assert "boolean_value" not in census_predictions.column_names and census_predictions.num_rows == 28
    times = tmp_path / "times.csv"  # given times: one of a subject the data does not hold
    times.write_text("subject_id,prediction_time\n239684,2010-05-11 18:00:00\n7,2010-05-11 18:00:00\n")
    out = _cli("score", "--model", run, "--source", sample, "--times", times, "--out", tmp_path / "s3",
               "--threads", 1)
    assert "not scored: 1 (absent: no such subject_id in data/ 1" in out
    assert pq.read_table(tmp_path / "s3" / "scores.parquet").num_rows == 1
    assert (tmp_path / "s3" / "_private" / "unscored.csv").read_text().splitlines()[1] == \
        "7,2010-05-11 18:00:00,absent: no such subject_id in data/"


@pytest.mark.slow  # the MIMIC-III demo, exported and extracted twice
def test_export_meds_then_extract_through_the_cli(demo_dir, tmp_path):
    out = _cli("export-meds", "--source", demo_dir, "--out", tmp_path / "meds")
    assert out.startswith(f"MEDS dataset written to {tmp_path / 'meds'}") and "extract it with" in out
    out = _cli("extract", "--source", tmp_path / "meds", "--out", tmp_path / "f")
    assert "task: the shipped ACES config in_hospital_mortality_24h_mimic_export.yaml, chosen for this dataset" in out
    _cli("extract", "--source", demo_dir, "--out", tmp_path / "d")
    via, direct = (json.loads((tmp_path / d / "manifest.json").read_text()) for d in ("f", "d"))
    assert (via["cohort"]["admissions"], via["cohort"]["positives"]) == (117, 31)
    assert {k: direct["cohort"][k] for k in ("admissions", "positives")} == \
        {k: via["cohort"][k] for k in ("admissions", "positives")}
    assert {s: v["admissions"] for s, v in via["splits"].items()} == \
        {s: v["admissions"] for s, v in direct["splits"].items()}


def test_the_benchmark_states_its_targets_at_full_scale_only():
    from benchmarks.meds_export import render

    step = {"wall_s": 100.0, "cpu_s": 150.0, "peak_rss_mb": 3000.0, "load_average": 2.0}
    r = {"fraction": 0.5, "layout": "mimic-iv", "patients": 149856, "cpus": 2,
         "stages": {"export": dict(step), "extract_stage": dict(step), "extract_meds": {**step, "wall_s": 160.0}},
         "export": {"subjects": 1, "rows": 10, "shards": 1, "codes": 3, "bytes": 10 ** 9, "rows_read": 9,
                    "quarantined": 0},
         "stage_bytes": 10 ** 9, "cohort_stage": {"admissions": 5, "positives": 1},
         "cohort_meds": {"admissions": 5, "positives": 1}, "splits_stage": {"train": 5}, "splits_meds": {"train": 5},
         "meds_rows_read": 10, "meds_events_used": 7}
    text = render(r)
    assert "not applicable below full scale" in text and " met" not in text
    text = render({**r, "fraction": 1.0})
    assert "(targets 10 min: met; 4 GB: met)" in text and "**1.60x**" in text and "target 1.5x: not met" in text
    assert "split sizes the same" in text
