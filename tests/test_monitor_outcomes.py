"""``cli.py monitor`` (serving.monitor; issue 43 item 3): outcomes matched to a run's scores call after call, the
alarm printed and in the JSON, and every input it refuses with one line naming the file and row, nothing written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers.features import FEATURE_SCHEMA
from typer.testing import CliRunner

import cli
from pipeline.bayes import monitor as bm

pytestmark = pytest.mark.usefixtures("tracking_store")


def run(*args):
    return CliRunner().invoke(cli.app, [str(a) for a in args])


@pytest.fixture(scope="module")
def scored(promise_run, tmp_path_factory):
    """(run id, the scores of the run's test split, the test split's outcomes by key)."""
    run_id, feats = promise_run
    out = tmp_path_factory.mktemp("monitor")
    result = run("score", "--model", run_id, "--data", feats / "test.parquet", "--out", out / "scores.parquet",
                 "--threads", "1")
    assert result.exit_code == 0, result.output
    truth = pq.read_table(feats / "test.parquet", columns=["key", "label"]).to_pandas()
    return run_id, out / "scores.parquet", truth


def copy_scores(scores: Path, tmp: Path) -> Path:
    shutil.copy(scores, tmp / "scores.parquet")
    return tmp / "scores.parquet"


def test_repeated_calls_append_to_one_stream_as_one_pass_would(scored, tmp_path):
    run_id, scores, truth = scored
    scores = copy_scores(scores, tmp_path)
    order = truth.sample(frac=1.0, random_state=0)
    parts = np.array_split(np.arange(len(order)), 3)
    for i, part in enumerate(parts):
        order.iloc[part].to_csv(tmp_path / f"o{i}.csv", index=False)
        result = run("monitor", "--run", run_id, "--scores", scores, "--outcomes", tmp_path / f"o{i}.csv", "--json",
                     tmp_path / f"m{i}.json")
        assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "m2.json").read_text())
    table = pq.read_table(scores).to_pandas().set_index("key").loc[order["key"]]
    one = bm.update(bm.start(0.2, 0.1), order["label"].to_numpy(), table["refer"].to_numpy(),
                    table["high_risk"].to_numpy())  # the whole stream in one pass
    assert {k: report[k] for k in ("admissions", "deaths", "misses", "flagged", "alarm_at")} == \
        {"admissions": one.admissions, "deaths": one.deaths, "misses": one.misses, "flagged": one.flagged,
         "alarm_at": one.alarm_at}
    dead = order["label"].to_numpy() == 1
    kept = ~table["refer"].to_numpy() & ~table["high_risk"].to_numpy()
    assert report["misses"] == int((dead & kept).sum()) and report["deaths"] == int(dead.sum())  # counted directly
    assert report["received"] == len(parts[2]) and report["scored"] == len(truth) and report["alpha"] == 0.2
    assert (tmp_path / "scores.monitor.json").exists()  # the state beside the scores
    state = (tmp_path / "scores.monitor.json").read_text()
    assert not any(k in state for k in truth["key"])  # the state holds no key


def test_a_broken_promise_raises_the_alarm_in_words_and_json(scored, tmp_path):
    run_id, scores, truth = scored
    scores = copy_scores(scores, tmp_path)
    table = pq.read_table(scores).to_pandas()
    kept = table[~table["refer"] & ~table["high_risk"]]
    assert len(kept) >= 10, "the run keeps too few unflagged admissions for this test"
    broken = pd.DataFrame({"key": table["key"], "label": (~table["refer"] & ~table["high_risk"]).astype(int)})
    broken.to_csv(tmp_path / "o.csv", index=False)  # every death a miss
    result = run("monitor", "--run", run_id, "--scores", scores, "--outcomes", tmp_path / "o.csv", "--json",
                 tmp_path / "m.json")
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "m.json").read_text())
    at = report["alarm_at"]
    assert report["alarm"] and at >= int(np.flatnonzero(broken["label"].to_numpy())[0]) + 1
    assert result.output.startswith(f"ALARM: since admission {at:,} of this stream the model misses more than 20% "
                                    "of in-hospital deaths on the kept admissions, with 90% confidence")
    assert report["sentence"] in result.output
    # --fail-on-alarm: the same call continued exits 3 once the alarm is up (the state and JSON written first); a
    # stream without an alarm exits 0 with it
    (tmp_path / "none.csv").write_text("key,label\n")
    again = run("monitor", "--run", run_id, "--scores", scores, "--outcomes", tmp_path / "none.csv", "--json",
                tmp_path / "m2.json", "--fail-on-alarm")
    assert again.exit_code == 3 and again.output.startswith("ALARM: "), again.output
    assert json.loads((tmp_path / "m2.json").read_text())["alarm_at"] == at


def test_fail_on_alarm_exits_0_while_the_promise_holds(scored, tmp_path):
    run_id, scores, truth = scored
    scores = copy_scores(scores, tmp_path)
    truth.iloc[:20].to_csv(tmp_path / "o.csv", index=False)
    result = run("monitor", "--run", run_id, "--scores", scores, "--outcomes", tmp_path / "o.csv", "--fail-on-alarm")
    assert result.exit_code == 0 and not result.output.startswith("ALARM"), result.output


def test_meds_label_files_give_the_keys_as_the_meds_extraction_forms_them(scored, promise_run, tmp_path):
    """Scores whose keys are MEDS pseudonyms of (subject_id, prediction_time), their outcomes as MEDS label files."""
    from pipeline.data.meds.flow import pseudonym
    from pipeline.data.mimic import deid

    run_id, feats = promise_run
    frame = pq.read_table(feats / "test.parquet").to_pandas()
    key = deid.load_key(create=False)
    subjects, times = np.arange(len(frame)) + 100, np.full(len(frame), 1_700_000_000_000_000)
    frame["key"] = [pseudonym(key, s, t) for s, t in zip(subjects, times)]
    census = tmp_path / "census"
    census.mkdir()
    pq.write_table(pa.Table.from_pandas(frame, schema=FEATURE_SCHEMA, preserve_index=False), census / "cohort.parquet")
    for f in ("vocab.json", "manifest.json"):
        shutil.copy(feats / f, census / f)
    result = run("score", "--model", run_id, "--data", census / "cohort.parquet", "--out", tmp_path / "s.parquet",
                 "--threads", "1", "--no-link")
    assert result.exit_code == 0, result.output
    labels = pa.table({"subject_id": pa.array(subjects, pa.int64()),
                       "prediction_time": pa.array(times, pa.timestamp("us")),
                       "boolean_value": pa.array(frame["label"].astype(bool))})
    (tmp_path / "labels").mkdir()
    pq.write_table(labels, tmp_path / "labels" / "0.parquet")
    got = run("monitor", "--run", run_id, "--scores", tmp_path / "s.parquet", "--outcomes", tmp_path / "labels")
    assert got.exit_code == 0, got.output
    assert f"{len(frame):,} outcomes received now" in got.output
    assert f"{int(frame['label'].sum())} in-hospital deaths" in got.output or "deaths" in got.output


@pytest.mark.parametrize("case", ["unknown key", "repeated key", "received before", "no label column", "bad label",
                                  "another run's scores", "scores of no run"])
def test_bad_input_is_one_line_naming_file_and_row_and_nothing_is_written(scored, promise_run, tmp_path, case):
    run_id, scores, truth = scored
    scores = copy_scores(scores, tmp_path)
    state = tmp_path / "scores.monitor.json"
    outcomes = tmp_path / "o.csv"
    frame = truth.iloc[:5].copy()
    if case == "received before":
        truth.iloc[:3].to_csv(tmp_path / "first.csv", index=False)
        assert run("monitor", "--run", run_id, "--scores", scores, "--outcomes", tmp_path / "first.csv").exit_code == 0
    before = state.read_bytes() if state.exists() else None
    said = {"unknown key": f"{outcomes} row 3: key not in the scored cohort (1 such rows)",
            "repeated key": f"{outcomes} row 3: key repeated (first at {outcomes} row 1)",
            "received before": f"{outcomes} row 1: this admission's outcome was received in an earlier call (3 such "
                               "rows)",
            "no label column": f"{outcomes}: missing column(s) ['label']",
            "bad label": f"{outcomes} row 2: column 'label' is '7': an outcome is 0 or 1",
            "another run's scores": f"{scores}: scored by run {run_id}, not run ",
            "scores of no run": f"{scores}: the scores do not record the run that made them"}[case]
    other = run_id
    if case == "unknown key":
        frame.iloc[2, 0] = "f" * 32
    elif case == "repeated key":
        frame.iloc[2, 0] = frame.iloc[0, 0]
    elif case == "no label column":
        frame = frame.rename(columns={"label": "died"})
    elif case == "bad label":
        frame["label"] = frame["label"].astype(str)
        frame.iloc[1, 1] = "7"
    elif case == "another run's scores":  # a run of other features scored these admissions? the scores say which
        other = _another_run(promise_run)
    elif case == "scores of no run":
        t = pq.read_table(scores)
        pq.write_table(t.replace_schema_metadata({}), scores)
    frame.to_csv(outcomes, index=False)
    result = run("monitor", "--run", other, "--scores", scores, "--outcomes", outcomes)
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert said in lines[0], lines[0]
    assert (state.read_bytes() if state.exists() else None) == before  # nothing written


def _another_run(promise_run) -> str:
    """A second tracked run (a re-certification of the promise run: another run, the same model)."""
    from pipeline.runs import store

    run_id, _ = promise_run
    c = store.client()
    children = c.search_runs([c.get_run(run_id).info.experiment_id], f"tags.recertified_from = '{run_id}'")
    if children:
        return children[0].info.run_id
    exp = c.get_run(run_id).info.experiment_id
    return c.create_run(exp, run_name="another").info.run_id
