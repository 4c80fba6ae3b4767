"""Issue 36, item 6: a features row that contradicts itself is refused, the checks written once beside the features
table's contract (``data.consistency.check_rows``): ``bag_hours`` not increasing, an empty bag, fewer ``n_events``
than the bags hold tokens (more is normal: events are counted before a bag's tokens are deduplicated), events
without any bag (``no_events`` against the bags), ``observed_hours`` beyond the prediction window. ``serve``
answers a 400 naming the column and row, ``score`` one line naming the file, column and row."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers.paths import ROOT
from helpers.serving import COLUMNS, free_port, stop, wait_for_ping
from typer.testing import CliRunner

import cli
from pipeline.data import features
from pipeline.data.consistency import check_rows

pytestmark = pytest.mark.usefixtures("tracking_store")


@pytest.fixture(scope="module")
def frame(demo_features) -> pd.DataFrame:
    """The demo's test admissions, with observed_hours, as a features table read back."""
    return pd.read_parquet(demo_features.out_dir / "test.parquet", columns=COLUMNS).reset_index(drop=True)


def _row_with_bags(frame: pd.DataFrame, at_least: int = 2) -> int:
    return int(np.flatnonzero(frame["bag_hours"].map(len) >= at_least)[1])


def contradictions(frame: pd.DataFrame) -> dict[str, tuple[pd.DataFrame, str, int]]:
    """name -> (the table with one row made to contradict itself, the column named, the row)."""
    i = _row_with_bags(frame)
    out = {}

    def changed(column: str, value) -> pd.DataFrame:
        f = frame.copy()
        f[column] = f[column].astype(object)
        f.at[i, column] = value
        return f

    hours = [float(h) for h in frame.at[i, "bag_hours"]]
    bags = [[int(t) for t in b] for b in frame.at[i, "bags"]]
    tokens = sum(len(b) for b in bags)
    out["bag_hours decreasing"] = (changed("bag_hours", hours[::-1]), "bag_hours", i)
    out["bag_hours repeated"] = (changed("bag_hours", [hours[0]] * len(hours)), "bag_hours", i)
    out["an empty bag"] = (changed("bags", [bags[0], [], *bags[2:]]), "bags", i)
    out["fewer events than tokens"] = (changed("n_events", tokens - 1), "n_events", i)
    empty = frame.copy()
    empty["bags"], empty["bag_hours"] = empty["bags"].astype(object), empty["bag_hours"].astype(object)
    empty.at[i, "bags"], empty.at[i, "bag_hours"] = [], []
    out["events but no bag"] = (empty, "n_events", i)
    out["observed_hours beyond the window"] = (changed("observed_hours", 1e9), "observed_hours", i)
    return out


def test_the_extractions_own_rows_pass(demo_features):
    for split in ("train", "val", "test"):
        fs = features.load_split(demo_features.out_dir / f"{split}.parquet")
        check_rows(fs, 24.0)


def test_more_events_than_tokens_is_normal(frame):
    f = frame.copy()
    f["n_events"] = f["n_events"] * 3 + 7 * (f["bags"].map(len) > 0)  # events repeat a bag's tokens
    check_rows(features.from_pandas(f, "more.parquet"), 24.0)


@pytest.mark.parametrize("name", ["bag_hours decreasing", "bag_hours repeated", "an empty bag",
                                  "fewer events than tokens", "events but no bag", "observed_hours beyond the window"])
def test_a_row_that_contradicts_itself_is_refused_naming_column_and_row(frame, name):
    table, column, row = contradictions(frame)[name]
    with pytest.raises(features.FeatureError) as err:
        check_rows(features.from_pandas(table, "hand.parquet"), 24.0, row0=100)
    message = str(err.value)
    assert message.startswith(f"hand.parquet: column {column!r} row {row + 100}: ") and "\n" not in message
    assert message.endswith("(1 such row)")
    assert str(table.at[row, "key"]) not in message  # names the place, quotes no value


@pytest.mark.parametrize("name", ["bag_hours decreasing", "an empty bag", "fewer events than tokens",
                                  "events but no bag", "observed_hours beyond the window"])
def test_the_pyfunc_refuses_it_naming_column_and_row(frame, name):
    from pipeline.tasks.mortality.request import RequestError, read_request

    table, column, row = contradictions(frame)[name]
    sizes = {"tokens": 10 ** 6, "context": 10 ** 6}
    assert len(read_request(frame, sizes, 24.0, lookback_days=30.0)) == len(frame)
    with pytest.raises(RequestError) as err:
        read_request(table, sizes, 24.0, lookback_days=30.0)
    assert str(err.value).startswith(f"column {column!r} row {row}: ")


def test_score_refuses_hand_written_parquet_in_one_line(demo_run, frame, tmp_path):
    for name, (table, column, row) in contradictions(frame).items():
        path = tmp_path / f"{name.replace(' ', '-')}.parquet"
        table.to_parquet(path)
        out = tmp_path / f"scores-{row}-{column}"
        result = CliRunner().invoke(cli.app, ["score", "--model", demo_run, "--data", str(path), "--out", str(out),
                                              "--samples", "2"])
        assert result.exit_code == 2, (name, result.output)
        (line,) = result.output.strip().splitlines()
        assert line.startswith(f"error: {path}: column {column!r} row {row}: "), (name, line)
        assert not out.exists() or not list(out.rglob("*.parquet")), name  # no scores half-written


# ---------------------------------------------------------------------------- cli.py serve


def _post(port: int, table: pd.DataFrame) -> tuple[int, dict]:
    data = [[r.key, [int(c) for c in r.context], [float(h) for h in r.bag_hours], [[int(t) for t in b] for b in r.bags],
             int(r.n_events), float(r.observed_hours)] for r in table.itertuples()]
    body = json.dumps({"dataframe_split": {"columns": COLUMNS, "data": data}}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/invocations", data=body,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_serve_answers_400_naming_column_and_row_and_a_taken_port_fails_first(demo_run, frame, tmp_path):
    port, log_path = free_port(), tmp_path / "serve.log"
    cmd = [sys.executable, str(ROOT / "cli.py"), "serve", "--model", f"runs:/{demo_run}/model", "--port", str(port),
           "--threads", "1"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        wait_for_ping(proc, port, log_path, timeout_s=180)
        code, answer = _post(port, frame.head(4))
        assert code == 200 and len(answer["predictions"]) == 4
        for name, (table, column, row) in contradictions(frame).items():
            code, answer = _post(port, table.head(max(row + 1, 4)))
            assert code == 400, (name, answer)
            assert answer["message"].startswith(f"column {column!r} row {row}: "), (name, answer)
        second = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert second.returncode == 2 and second.stdout == ""
        assert second.stderr.strip().splitlines() == [
            f"error: --port {port} on 127.0.0.1 is taken (Address already in use): another server listens there; "
            "stop it or choose another --port"]  # before the model loads: no "serving ..." line
    finally:
        stop(proc)
    assert "Traceback" not in Path(log_path).read_text()
