"""``cli.py recertify`` (workflows.recertify, tasks.mortality.recertify; issue 43 item 2): a run's promise refitted
for a new period as a child run that ``score`` applies, with and without outcomes, and every input it refuses."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers.features import FEATURE_SCHEMA
from typer.testing import CliRunner

import cli
from pipeline.bayes.referral import power
from pipeline.runs import store

pytestmark = pytest.mark.usefixtures("tracking_store")


def run(*args: str):
    return CliRunner().invoke(cli.app, [str(a) for a in args])


def period(root: Path, feats: Path, frame: pd.DataFrame, name: str) -> Path:
    """``frame`` as ``root/name.parquet`` beside the run's vocab.json and manifest.json (a new period's features)."""
    root.mkdir(parents=True, exist_ok=True)
    for f in ("vocab.json", "manifest.json"):
        if not (root / f).exists():
            shutil.copy(feats / f, root / f)
    path = root / f"{name}.parquet"
    pq.write_table(pa.Table.from_pandas(frame.reset_index(drop=True), schema=FEATURE_SCHEMA, preserve_index=False),
                   path)
    return path


def new_era(feats: Path) -> pd.DataFrame:
    """The test split as a new era would record it: token 1 in every bag (a new coding of an event)."""
    t = pq.read_table(feats / "test.parquet").to_pandas()
    t["bags"] = [[sorted({1, *b}) for b in bags] for bags in t["bags"]]
    t["bag_values"] = [[[0.0] * len(b) for b in bags] for bags in t["bags"]]
    t["n_events"] = [sum(len(b) for b in bags) for bags in t["bags"]]
    return t


def child_of(output: str) -> str:
    m = re.search(r"^run_id: ([0-9a-f]{32}) \(parent ([0-9a-f]{32})\)$", output, re.M)
    assert m, output
    return m.group(1)


def runs_in(experiment: str) -> int:
    c = store.client()
    exp = c.get_experiment_by_name(experiment)
    return len(c.search_runs([exp.experiment_id])) if exp else 0


def test_a_shifted_period_is_said_recertified_as_a_child_run_and_scored_with_its_promise(promise_run, tmp_path):
    parent, feats = promise_run
    era = new_era(feats)
    labelled = period(tmp_path / "era", feats, era.iloc[:300], "labelled")
    rest = period(tmp_path / "era", feats, era.iloc[300:], "rest")
    before = run("score", "--model", parent, "--data", rest, "--out", tmp_path / "s1.parquet", "--json",
                 tmp_path / "s1.json", "--report", tmp_path / "s1.html", "--threads", "1")
    assert before.exit_code == 0, before.output
    said = next(line for line in before.output.splitlines() if line.startswith("  shift check: "))
    assert said.startswith("  shift check: these 300 admissions differ from the calibration admissions (p ")
    assert said.endswith("the promise assumes they do not; see `recertify`"), said
    js = pd.read_json(tmp_path / "s1.json", typ="series")
    assert js["shift"]["verdict"] == "shifted" and js["shift"]["measures"]["features"]["differs"]
    assert js["shift"]["sentence"] in said and js["admissions"] == 300
    page = (tmp_path / "s1.html").read_text()
    assert '<div class="warn shift">These 300 admissions differ from the calibration admissions' in page
    assert page.index("warn shift") < page.index("<h2>Summary</h2>")  # a banner, at the top

    result = run("recertify", "--run", parent, "--data", labelled, "--alpha", "0.2", "--threads", "1")
    assert result.exit_code == 0, result.output
    child = child_of(result.output)
    deaths = int(era.iloc[:300]["label"].sum())
    assert result.output.startswith(f"re-certified run {parent} on 300 labelled admissions of the new period "
                                    f"({deaths} in-hospital deaths): new run {child}")  # the manifest's words
    assert "  before: these 300 admissions differ from the calibration admissions" in result.output
    allowed = int(power.certifiable_misses(deaths, 0.2, 0.1)[0])
    assert (f"  what more outcomes would buy: {deaths} deaths let the exact test pass a cut only if it misses at most "
            f"{allowed} of them") in result.output
    tags = store.client().get_run(child).data.tags
    assert tags["mlflow.parentRunId"] == parent and tags["recertified_from"] == parent
    assert tags["features_dir"] == store.client().get_run(parent).data.tags["features_dir"]
    files = {a.path for a in store.client().list_artifacts(child)}
    assert {"shift_reference.npz", "recertification.json", "model_info.json", "checkpoint", "features"} <= files
    record = json.loads(Path(store.client().download_artifacts(child, "recertification.json", str(tmp_path))
                             ).read_text())
    more = record["more_outcomes"]
    assert more["deaths"] == deaths and more["misses_allowed"] == allowed and more["labelled"] == 300
    assert 0.0 <= more["kept"] <= 1.0 and more["risks"] == "the recalibrated risks, taken as true"
    after = run("score", "--model", child, "--data", rest, "--out", tmp_path / "s2.parquet", "--threads", "1")
    assert after.exit_code == 0, after.output
    assert f"(calibrated on 300 admissions, {deaths} deaths)" in after.output or "refer every admission" in after.output
    assert f"re-certified on 300 admissions of a new period ({deaths} deaths)" in after.output
    assert "from the admissions the promise was re-certified on" in after.output  # the child's own reference


def test_refit_threshold_and_a_set_too_small_for_the_promise(promise_run, tmp_path):
    parent, feats = promise_run
    test = pq.read_table(feats / "test.parquet").to_pandas()
    data = period(tmp_path / "p", feats, test.iloc[:400], "new")
    refit = run("recertify", "--run", parent, "--data", data, "--alpha", "0.3", "--refit-threshold", "--threads", "1")
    assert refit.exit_code == 0, refit.output
    assert "refitted on half the new admissions" in refit.output
    few = period(tmp_path / "p", feats, test.iloc[:40], "few")
    deaths = int(test.iloc[:40]["label"].sum())
    n = runs_in("promise-tests")
    small = run("recertify", "--run", parent, "--data", few, "--alpha", "0.05", "--threads", "1")
    assert small.exit_code == 2 and small.output.strip().splitlines() == [
        f"error: --delta 0.1 at --alpha 0.05 needs at least 45 calibration deaths even with no error; the "
        f"calibration data hold {deaths} (of 40 admissions)"], small.output
    halves = run("recertify", "--run", parent, "--data", few, "--refit-threshold", "--alpha", "0.2", "--threads", "1")
    assert halves.exit_code == 2 and "needs at least" in halves.output and "--alpha 0.2" in halves.output
    assert "half of them with --refit-threshold" in halves.output
    assert runs_in("promise-tests") == n  # nothing recorded


def test_without_outcomes_the_weighted_rule_says_what_it_assumes(promise_run, tmp_path):
    parent, feats = promise_run
    test = pq.read_table(feats / "test.parquet").to_pandas()
    mild = period(tmp_path / "w", feats, test[[len(b) <= 3 for b in test["bags"]]], "mild")  # a new case mix
    result = run("recertify", "--run", parent, "--data", mild, "--weighted", "--alpha", "0.5", "--delta", "0.5",
                 "--threads", "1")
    assert result.exit_code == 0, result.output
    assert "without outcomes (the run's calibration half re-weighted towards them)" in result.output
    assert "it assumes these patients differ from the calibration ones only in their features (covariate shift)" \
        in result.output
    child = child_of(result.output)
    scored = run("score", "--model", child, "--data", mild, "--out", tmp_path / "w.parquet", "--threads", "1")
    assert scored.exit_code == 0 and "(covariate shift)" in scored.output, scored.output
    again = run("score", "--model", child, "--data", mild, "--out", tmp_path / "w2.parquet", "--alpha", "0.4")
    assert again.exit_code == 2 and "importance-weighted" in again.output and not (tmp_path / "w2.parquet").exists()
    small = run("recertify", "--run", parent, "--data", mild, "--weighted", "--alpha", "0.05", "--threads", "1")
    assert small.exit_code == 2 and re.search(r"error: --delta 0.1 at --alpha 0.05, re-weighted .* needs at least "
                                              r"[\d,]+ calibration deaths", small.output), small.output


def test_outcomes_from_a_labels_file_and_those_left_out(promise_run, tmp_path):
    parent, feats = promise_run
    test = pq.read_table(feats / "test.parquet").to_pandas().iloc[:300]
    unlabelled = test.assign(label=pd.array([None] * len(test), dtype="Int8"))
    data = period(tmp_path / "u", feats, unlabelled, "census")
    labels = tmp_path / "outcomes.csv"
    test.iloc[:250][["key", "label"]].to_csv(labels, index=False)
    result = run("recertify", "--run", parent, "--data", data, "--labels", labels, "--alpha", "0.3", "--threads", "1")
    assert result.exit_code == 0, result.output
    assert (f"on 250 labelled admissions of the new period ({int(test.iloc[:250]['label'].sum())} in-hospital "
            "deaths); 50 without an outcome left out of it (the rule's candidate cuts come from all 300)"
            ) in result.output


@pytest.mark.parametrize("case", ["another vocabulary", "no labels", "unknown key", "repeated key", "no label column",
                                  "weighted with labels"])
def test_bad_input_is_one_line_naming_the_file_and_nothing_is_recorded(promise_run, tmp_path, case):
    parent, feats = promise_run
    test = pq.read_table(feats / "test.parquet").to_pandas().iloc[:100]
    data = period(tmp_path / "d", feats, test, "new")
    labels = tmp_path / "labels.csv"
    args = ["--data", data]
    if case == "another vocabulary":
        vocab = pd.read_json(data.parent / "vocab.json", typ="series").to_dict()
        vocab["tokens"] = [*vocab["tokens"][:-1], "chart:renamed"]
        pd.Series(vocab).to_json(data.parent / "vocab.json")
        said = f"{data}: extracted with {data.parent / 'vocab.json'}, another vocabulary than run {parent}'s"
    elif case == "no labels":
        data = period(tmp_path / "d", feats, test.assign(label=pd.array([None] * 100, dtype="Int8")), "census")
        args = ["--data", data]
        said = f"{data}: no outcomes (column 'label' is empty in its 100 admissions): recertify needs"
    elif case in ("unknown key", "repeated key"):
        frame = test[["key", "label"]].iloc[:5].copy()
        frame.iloc[2, 0] = "f" * 32 if case == "unknown key" else frame.iloc[0, 0]
        frame.to_csv(labels, index=False)
        args += ["--labels", labels]
        said = (f"{labels} row 3: key not among the new admissions' features" if case == "unknown key" else
                f"{labels} row 3: key repeated")
    elif case == "no label column":
        test[["key"]].assign(outcome=1).to_csv(labels, index=False)
        args += ["--labels", labels]
        said = f"{labels}: missing column(s) ['label']"
    else:
        test[["key", "label"]].to_csv(labels, index=False)
        args += ["--labels", labels, "--weighted"]
        said = "--labels gives outcomes, and the weighted rule is for a new period without them"
    n = runs_in("promise-tests")
    result = run("recertify", "--run", parent, *args, "--threads", "1")
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert said in lines[0], lines[0]
    assert runs_in("promise-tests") == n  # no run recorded


def test_a_mimic_source_is_extracted_with_the_runs_vocabulary_and_its_outcomes(demo_run, demo_dir, tmp_path):
    """--source as score --source extracts it: the whole demo, its outcomes from the extraction."""
    result = run("recertify", "--run", demo_run, "--source", demo_dir, "--alpha", "0.3", "--delta", "0.2",
                 "--threads", "1", "--samples", "2", "--experiment", "recertify-source")
    assert result.exit_code == 0, result.output
    head = result.output.splitlines()[0]
    assert head.startswith(f"re-certified run {demo_run} on ") and " labelled admissions of the new period (" in head
    child = child_of(result.output)
    assert store.client().get_run(child).data.tags["mlflow.parentRunId"] == demo_run
