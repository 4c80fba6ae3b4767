"""A run in the words of its task (issue 44, item 2): MEDS-DEV's 30-day readmission and in-ICU mortality, extracted by
name from a small MEDS dataset on MIMIC_IV_MEDS's codes (tests/helpers/meds.py's icu_dataset, as test_meds_dev.py
uses it), trained, scored with the cohort report and evaluated through the command line: the console, the report, the
JSON files' text (evaluate's metrics.json, the run's model_info.json) and the MEDS prediction file's metadata name the
task's outcome, and a readmission run never reads as a death. The JSON's keys are an interface and stay as they are
(the policy's "deaths" counts, evaluate's "calibration_deaths"): only their text is searched.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers.meds import icu_dataset
from typer.testing import CliRunner

import cli

pytestmark = [pytest.mark.usefixtures("tracking_store"), pytest.mark.slow]  # every test trains a model

DEATH = re.compile(r"death|died|mortality", re.I)
TASKS = {"readmission": ("meds-dev:readmission/general_hospital/30d", "hospital readmission within 30 days",
                         "hospital readmissions within 30 days"),
         "icu": ("meds-dev:mortality/in_icu/first_24h", "death in the ICU", "deaths in the ICU")}


def _run(*args):
    result = CliRunner().invoke(cli.app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result.output


def _texts(value) -> list[str]:
    """Every string value of a JSON document (its keys left out: an interface)."""
    if isinstance(value, dict):
        return [t for v in value.values() for t in _texts(v)]
    if isinstance(value, list):
        return [t for v in value for t in _texts(v)]
    return [value] if isinstance(value, str) else []


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return icu_dataset(tmp_path_factory.mktemp("meds") / "meds", n=64)[0]


@pytest.fixture(scope="module", params=sorted(TASKS))
def chain(request, dataset, tmp_path_factory):
    """(task, {what: text}) of extract, train, score --report and evaluate of one task, at toy size."""
    name = request.param
    task, _, _ = TASKS[name]
    out = tmp_path_factory.mktemp(f"chain-{name}")
    said = {"extract": _run("extract", "--source", dataset, "--out", out / "f", "--task", task, "--min-patients", 1)}
    said["train"] = _run("train", "--data", out / "f", "--max-steps", 20, "--eval-every", 10, "--eval-samples", 2,
                         "--score-samples", 4, "--hidden", 8, "--embed-dim", 4, "--dense", 8, "--components", 2,
                         "--threads", 1, "--experiment", f"words-{name}")
    run = re.search(r"run_id: (\w+)", said["train"]).group(1)
    said["score"] = _run("score", "--model", run, "--data", out / "f" / "test.parquet", "--out", out / "s",
                         "--report", out / "s" / "report.html", "--threads", 1)
    said["evaluate"] = _run("evaluate", "--run", run, "--split", "test", "--out", out / "e", "--threads", 1)
    said["report"] = (out / "s" / "report.html").read_text()
    for what, path in (("metrics.json", out / "e" / "test" / "metrics.json"),
                       ("model_info.json", next(Path("runs/train").glob(f"{run}/model_info.json")))):
        said[what] = "\n".join(_texts(json.loads(path.read_text())))
    from pipeline.data.meds.predictions import read_metadata

    said["predictions"] = "\n".join(_texts(read_metadata(out / "s" / "_private" / "predictions.parquet")))
    return name, said


def test_a_run_names_its_tasks_outcome_everywhere(chain):
    name, said = chain
    _, outcome, outcomes = TASKS[name]
    assert f"<h1>Risk of {outcome}: cohort report</h1>" in said["report"]
    assert f"Predicted probability of {outcome} after the prediction time" in said["report"]
    for what in ("train", "score"):  # the policy's lines, or why the run has none, count the outcome
        assert outcomes in said[what] or f"no {outcome}" in said[what] or f"only {outcomes}" in said[what], what
    assert outcomes in said["evaluate"] and f"predicted probability of {outcome}" in said["predictions"]
    assert outcome in said["metrics.json"] and outcome in said["model_info.json"]  # the task, in words
    for what, text in said.items():  # never the MIMIC cohorts' words
        assert "in-hospital death" not in text and "Mortality risk" not in text, what
        assert "trained before risks were recalibrated" not in text, what


def test_no_outcome_but_the_tasks_own_is_named(chain):
    """A readmission run never reads as a death; an in-ICU mortality run says "death in the ICU" (and the task's name,
    mortality/in_icu/first_24h), never another death."""
    name, said = chain
    task, outcome, outcomes = TASKS[name]
    own = re.compile("|".join(re.escape(w) for w in (outcomes, outcome, task.removeprefix("meds-dev:"))), re.I)
    found = {what: DEATH.findall(own.sub("", text)) for what, text in said.items()}
    assert not any(found.values()), found


def test_train_score_and_the_report_say_why_a_run_has_no_policy(tmp_path):
    """Issue 46, item 2, through the command line: a toy in-ICU task whose validation halves hold a single outcome
    (24 subjects: the calibration half one admission, dead in the ICU). `train` says which half held what, with
    --calibration-share as typed; the run records it (model_info.json's no_policy); `score` and the report say the
    same reason, never "trained before risks were recalibrated"."""
    import html

    from pipeline.bayes.referral.config import ReferralConfig
    from pipeline.data import features
    from pipeline.data.task import describe
    from pipeline.tasks.mortality.inputs import split_validation
    from pipeline.tasks.mortality.validation import no_policy

    root = icu_dataset(tmp_path / "meds", n=24)[0]
    _run("extract", "--source", root, "--out", tmp_path / "f", "--task", TASKS["icu"][0], "--min-patients", 1)
    sel, cal = split_validation(features.load_split(tmp_path / "f" / "val.parquet"), 0.5)
    why = no_policy(sel, cal, ReferralConfig(), 0.5, describe(tmp_path / "f"))
    assert why is not None and "--calibration-share 0.5" in why and "death in the ICU" in why.replace("deaths", "death")
    trained = _run("train", "--data", tmp_path / "f", "--max-steps", 10, "--eval-every", 5, "--eval-samples", 2,
                   "--score-samples", 4, "--hidden", 8, "--embed-dim", 4, "--dense", 8, "--components", 2,
                   "--threads", 1, "--experiment", "words-no-policy")
    assert (f"no calibration: {why}; the run has no recalibration, decision threshold or refer rule and scores with no "
            "promise") in trained
    run = re.search(r"run_id: (\w+)", trained).group(1)
    assert json.loads(Path(f"runs/train/{run}/model_info.json").read_text())["no_policy"] == why
    scored = _run("score", "--model", run, "--data", tmp_path / "f" / "test.parquet", "--out", tmp_path / "s",
                  "--report", tmp_path / "s" / "report.html", "--threads", 1)
    assert f"  no calibration: {why}; risk_calibrated is empty" in scored
    page = html.unescape((tmp_path / "s" / "report.html").read_text())
    assert f"No calibration: {why}; the risks are the model" in page
    assert "trained before" not in scored + page + trained
