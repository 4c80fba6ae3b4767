"""MEDS-DEV by name and a task in its own words (issue 44): `extract --task meds-dev:TASK` resolves the task's config
and the dataset's predicates from the installed meds-dev and gives the labels the task defines (a small dataset on
MIMIC_IV_MEDS's codes, labels derived by hand: tests/helpers/meds.py's icu_dataset); the features' manifest records
the outcome and the prediction time in words (pipeline.data.task), read back by `describe`, with the MIMIC
mortality words for older features; bad input is one line and writes nothing; a result is packaged byte for byte as
`meds-dev-pack-result` packages it, and `meds-dev-validate-result` (run as the console script) accepts it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from helpers.meds import icu_dataset, tiny_dataset
from typer.testing import CliRunner

import cli
from pipeline.core.errors import ConfigError
from pipeline.data import task as task_words
from pipeline.data.meds import medsdev
from pipeline.data.meds.layout import MedsError

ICU, READMISSION = "meds-dev:mortality/in_icu/first_24h", "meds-dev:readmission/general_hospital/30d"
BIN = Path(sys.executable).parent  # meds-dev's console scripts


def _run(*args):
    return CliRunner().invoke(cli.app, [str(a) for a in args])


def _labels(features: Path) -> dict:
    link = pq.read_table(features / "_private" / "link.parquet").to_pandas()
    feats = pd.concat(pq.read_table(features / f"{s}.parquet", columns=["key", "label"]).to_pandas()
                      for s in ("train", "val", "test")).merge(link, on="key")
    return {(int(s), pd.Timestamp(t)): bool(y) for s, t, y in zip(feats["subject_id"], feats["prediction_time"],
                                                                    feats["label"])}


@pytest.fixture(scope="module")
def icu(tmp_path_factory):
    return icu_dataset(tmp_path_factory.mktemp("icu") / "meds")


@pytest.mark.parametrize("name, outcome, outcomes, when, labels_at", [
    (ICU, "death in the ICU", "deaths in the ICU", "24 hours after the ICU admission", 1),
    (READMISSION, "hospital readmission within 30 days", "hospital readmissions within 30 days",
     "at the hospital discharge", 2)])
def test_a_meds_dev_task_by_name_gives_its_labels_and_its_words(icu, tmp_path, name, outcome, outcomes, when,
                                                                 labels_at):
    root, *expected = icu
    result = _run("extract", "--source", root, "--out", tmp_path / "f", "--task", name, "--min-patients", 1)
    assert result.exit_code == 0, result.output
    assert _labels(tmp_path / "f") == expected[labels_at - 1]
    assert f"task: MEDS-DEV {medsdev._package()[0]} task {name[len('meds-dev:'):]}" in result.output
    assert f"  outcome: {outcome} ({outcomes}), predicted {when}" in result.output
    said = task_words.describe(tmp_path / "f")
    assert (said.name, said.outcome, said.outcomes, said.prediction_time, said.source) == (
        name[len("meds-dev:"):], outcome, outcomes, when, "meds:MIMIC-IV")
    recorded = json.loads((tmp_path / "f" / "manifest.json").read_text())["task"]["meds_dev"]
    assert recorded["dataset"] == "MIMIC-IV" and not recorded["predicates_given"]
    if name == READMISSION:  # a readmission's words never speak of death
        assert "death" not in json.dumps(json.loads((tmp_path / "f" / "manifest.json").read_text())["task"])


def test_outcome_and_predicates_given(icu, tmp_path):
    root, expected, _ = icu
    predicates = tmp_path / "predicates.yaml"  # the dataset's predicates given as a file, the same codes
    predicates.write_text('predicates:\n  icu_admission:\n    code: { regex: "^ICU_ADMISSION//.*" }\n'
                          '  icu_discharge:\n    code: { regex: "^ICU_DISCHARGE//.*" }\n')
    result = _run("extract", "--source", root, "--out", tmp_path / "f", "--task", ICU, "--predicates", predicates,
                  "--outcome", "ICU death", "--min-patients", 1)
    assert result.exit_code == 0, result.output
    assert _labels(tmp_path / "f") == expected
    said = task_words.describe(tmp_path / "f")
    assert (said.outcome, said.outcomes) == ("ICU death", "ICU deaths") and "predicates given" in said.definition


@pytest.mark.parametrize("args, message", [
    (("--task", "meds-dev:mortality/in_icu/first_48h"),
     r"^error: task meds-dev:mortality/in_icu/first_48h: not a MEDS-DEV [\d.]+ task \(known: .*"
     r"mortality/in_icu/first_24h, readmission/general_hospital/30d\)$"),
    (("--task", ICU, "--outcome", ""), r"^error: --outcome '': give the outcome's name in words"),
    (("--task", ICU, "--outcome", "death|"), r"^error: --outcome 'death\|': give the outcome's name"),
    (("--predicates", "p.yaml"), r"^error: --predicates applies to a task \(--task: "),
    (("--task", ICU, "--predicates", "nowhere.yaml"), r"^error: --predicates nowhere.yaml: no such file$"),
    (("--task", ICU, "--predicates", "partial.yaml"),
     r"^error: partial.yaml: no predicate icu_admission, icu_discharge, which task mortality/in_icu/first_24h "
     r"leaves to the dataset \(no predicates for this task\)$"),
])
def test_bad_input_is_one_line_and_writes_nothing(icu, tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    Path("partial.yaml").write_text('predicates:\n  death:\n    code: MEDS_DEATH\n')
    result = _run("extract", "--source", icu[0], "--out", tmp_path / "f", *args)
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    assert re.search(message, result.output.strip()), result.output
    assert not (tmp_path / "f").exists()


def test_a_dataset_meds_dev_has_no_predicates_for_is_one_line(tmp_path):
    root = tiny_dataset(tmp_path / "tiny")  # dataset.json names the dataset "tiny"
    result = _run("extract", "--source", root, "--out", tmp_path / "f", "--task", ICU)
    assert result.exit_code == 2, result.output
    assert re.fullmatch(r"error: \S+dataset.json names the dataset 'tiny', not a MEDS-DEV [\d.]+ dataset \(known: "
                        r"MIMIC-IV\); give its predicates \(--predicates FILE\)", result.output.strip())
    assert not (tmp_path / "f").exists()
    with pytest.raises(MedsError, match="supports MIMIC-IV"):  # a task's supported datasets, as MEDS-DEV lists them
        with pytest.MonkeyPatch.context() as m:
            _, tasks, datasets, models = medsdev._package()
            m.setattr(medsdev, "_package", lambda: ("x", tasks, {**datasets, "tiny": datasets["MIMIC-IV"]}, models))
            medsdev.resolve(ICU, "tiny")


@pytest.mark.parametrize("text, expected", [
    ("readmission", ("readmission", "readmissions")), ("death in the ICU", ("death in the ICU", "deaths in the ICU")),
    ("in-hospital death", ("in-hospital death", "in-hospital deaths")), ("  sepsis  case ", ("sepsis case",
                                                                                             "sepsis cases")),
    ("emergency", ("emergency", "emergencies")), ("crisis|crises", ("crisis", "crises"))])
def test_an_outcome_in_words_singular_and_plural(text, expected):
    assert task_words.parse_outcome(text) == expected


@pytest.mark.parametrize("text", ["", " ", "a|b|c", "|deaths"])
def test_an_empty_outcome_is_refused(text):
    with pytest.raises(ConfigError, match="`outcome`"):
        task_words.parse_outcome(text)


@pytest.mark.parametrize("windows, trigger, expected", [
    ({"input": {"start": None, "end": "trigger + 24h", "index_timestamp": "end"}}, "icu_admission",
     "24 hours after the ICU admission"),
    ({"input": {"start": None, "end": "trigger", "index_timestamp": "end"}}, "hospital_discharge",
     "at the hospital discharge"),
    ({"gap": {"start": "trigger", "end": "start + 1d 12h", "index_timestamp": "end"}}, "admission",
     "1 day 12 hours after the admission"),
    ({"a": {"start": "trigger", "end": "start + 2h"}, "b": {"start": "a.end", "end": "start -> discharge",
                                                           "index_timestamp": "start"}}, "admission",
     "2 hours after the admission"),
    ({"b": {"start": "trigger", "end": "start -> ed_out", "index_timestamp": "end"}}, "admission",
     "at the next ED out"),
    ({"b": {"start": "trigger", "end": "start + 2h", "index_timestamp": "end"}}, "_ANY_EVENT",
     "2 hours after each event"),
    ({"b": {"start": "trigger - 2h", "end": "trigger", "index_timestamp": "start"}}, "admission", None),
])
def test_the_prediction_time_in_words(windows, trigger, expected):
    assert task_words.prediction_time_of({"trigger": trigger, "windows": windows}) == expected


def test_older_features_read_as_the_mimic_mortality_task(tmp_path):
    m = tmp_path / "manifest.json"
    m.write_text(json.dumps({"release": "mimic-iv", "config": {"prediction_hours": 12.0}}))
    said = task_words.describe(tmp_path)
    assert (said.outcome, said.outcomes, said.prediction_time, said.source) == (
        "in-hospital death", "in-hospital deaths", "12 hours after the hospital admission", "MIMIC-IV")
    assert task_words.of_manifest({}).prediction_time == "24 hours after the hospital admission"
    meds = {"release": "meds:MIMIC-IV", "task": {"task": "/x/tasks/readmission_30d.yaml", "shipped": False}}
    said = task_words.of_manifest(meds)
    assert (said.outcome, said.outcomes, said.source) == ("readmission 30d", "readmission 30ds", "meds:MIMIC-IV")
    assert task_words.of_manifest({"release": "meds:X", "task": {"task": "/t.yaml", "shipped": True}}).outcome == \
        "in-hospital death"
    with pytest.raises(ConfigError, match="not a readable features manifest"):
        task_words.describe(tmp_path / "nowhere")


def _evaluation(path: Path) -> Path:
    import polars as pl
    from meds_evaluation.evaluate import evaluate_binary_classification

    frame = pl.DataFrame({"subject_id": [1, 2, 3, 4, 5, 6], "prediction_time": [pd.Timestamp("2020-01-01")] * 6,
                          "boolean_value": [True, False, True, False, False, True],
                          "predicted_boolean_value": [True, False, False, False, True, True],
                          "predicted_boolean_probability": [0.9, 0.2, 0.4, 0.1, 0.6, 0.8]}).with_columns(
        pl.col("prediction_time").cast(pl.Datetime("us")), pl.col("predicted_boolean_probability").cast(pl.Float32))
    path.write_text(json.dumps(evaluate_binary_classification(frame), indent=4))
    return path


def test_a_result_package_is_meds_dev_pack_results_and_its_validator_accepts_it(tmp_path):
    evaluation = _evaluation(tmp_path / "evaluation.json")
    names = dict(dataset="MIMIC-IV", task="mortality/in_icu/first_24h", model="random_predictor")
    ours = medsdev.pack_result(evaluation, **names, out=tmp_path / "ours" / "result.json")
    theirs = tmp_path / "theirs.json"
    subprocess.run([BIN / "meds-dev-pack-result", *(f"{k}={v}" for k, v in names.items()),
                    f"evaluation_fp={evaluation}", f"result_fp={theirs}"], check=True, cwd=tmp_path)
    assert ours.read_bytes() == theirs.read_bytes()
    done = subprocess.run([BIN / "meds-dev-validate-result", f"result_fp={ours}"], cwd=tmp_path,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    bad = tmp_path / "bad.json"  # the validator is not a formality: it refuses a result it cannot read back
    bad.write_text(ours.read_text().replace('"timestamp"', '"time"'))
    assert subprocess.run([BIN / "meds-dev-validate-result", f"result_fp={bad}"], cwd=tmp_path,
                          capture_output=True).returncode != 0


@pytest.mark.parametrize("field, value, message", [
    ("model", "mimic_rank1", r"model 'mimic_rank1': not a MEDS-DEV [\d.]+ model \(known: .*random_predictor\)"),
    ("task", "mortality/in_hospital", r"task 'mortality/in_hospital': not a MEDS-DEV"),
    ("dataset", "MIMIC-III", r"dataset 'MIMIC-III': not a MEDS-DEV [\d.]+ dataset \(known: MIMIC-IV\)")])
def test_a_package_names_what_meds_dev_knows(tmp_path, field, value, message):
    names = dict(dataset="MIMIC-IV", task="mortality/in_icu/first_24h", model="random_predictor") | {field: value}
    with pytest.raises(MedsError, match=message):
        medsdev.pack_result(_evaluation(tmp_path / "e.json"), **names, out=tmp_path / "r.json")
    assert not (tmp_path / "r.json").exists()


@pytest.mark.slow  # trains a model
def test_score_packages_a_meds_dev_result_of_its_run(icu, tmp_path, tracking_store):
    root = icu[0]
    assert _run("extract", "--source", root, "--out", tmp_path / "f", "--task", ICU, "--min-patients", 1
                ).exit_code == 0
    out = _run("train", "--data", tmp_path / "f", "--max-steps", 10, "--eval-every", 5, "--eval-samples", 2,
               "--score-samples", 4, "--hidden", 8, "--embed-dim", 4, "--dense", 8, "--components", 2,
               "--threads", 1, "--experiment", "meds-dev-smoke").output
    run = re.search(r"run_id: (\w+)", out).group(1)
    refused = _run("score", "--model", run, "--data", tmp_path / "f", "--out", tmp_path / "s0", "--meds-dev-result",
                   tmp_path / "r0", "--meds-dev-model", "mimic_rank1")
    assert refused.exit_code == 2 and "not a MEDS-DEV" in refused.output and not (tmp_path / "s0").exists()
    result = _run("score", "--model", run, "--data", tmp_path / "f", "--out", tmp_path / "s", "--threads", 1,
                  "--meds-dev-result", tmp_path / "r", "--meds-dev-model", "random_predictor")
    assert result.exit_code == 0, result.output
    assert f"MEDS-DEV result: {tmp_path / 'r' / 'result.json'} (dataset MIMIC-IV, task mortality/in_icu/first_24h" \
        in result.output
    packed = json.loads((tmp_path / "r" / "result.json").read_text())
    assert packed["result"] == json.loads((tmp_path / "r" / "evaluation.json").read_text())
    assert "roc_auc_score" in packed["result"]["samples_equally_weighted"]
    done = subprocess.run([BIN / "meds-dev-validate-result", f"result_fp={tmp_path / 'r' / 'result.json'}"],
                          cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    # the census of the same task by name (its prediction times without the label window): the same rows
    census = _run("score", "--model", run, "--source", root, "--task", ICU, "--out", tmp_path / "c", "--threads", 1)
    assert census.exit_code == 0, census.output
    keys = set(pq.read_table(tmp_path / "c" / "scores.parquet", columns=["key"]).column("key").to_pylist())
    assert keys == set(pq.read_table(tmp_path / "s" / "scores.parquet", columns=["key"]).column("key").to_pylist())
