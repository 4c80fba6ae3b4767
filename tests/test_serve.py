"""The logged pyfunc served: `cli.py serve` (MLflow's scoring app behind the request guard: every bad
request a 4xx with one line, concurrent requests answered as alone), `mlflow models serve` (REST on
127.0.0.1) and `mlflow.pyfunc.spark_udf` on a local Spark session, against the in-process pyfunc."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from helpers.serving import COLUMNS, INPUT, PARAMS, free_port, mlflow_serve, records, stop, strict, wait_for_ping
from helpers.system import java_missing

from pipeline.tasks.mortality.risk import RISK_COLUMNS

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.usefixtures("tracking_store")  # demo_run (conftest) is tracked there


@pytest.fixture(scope="module")
def census(demo_features) -> pd.DataFrame:
    """Two admissions of the demo test split, the second with its events removed."""
    frame = pq.read_table(demo_features.out_dir / "test.parquet", columns=INPUT).to_pandas().head(2)
    frame.at[1, "bags"], frame.at[1, "bag_hours"], frame.at[1, "n_events"] = [], [], 0
    return frame.reset_index(drop=True)


@pytest.fixture(scope="module")
def expected(demo_run, census):
    import mlflow

    return mlflow.pyfunc.load_model(f"runs:/{demo_run}/model").predict(census, params=PARAMS)


def test_mlflow_models_serve_answers_two_admissions(demo_run, census, expected, tmp_path):
    with mlflow_serve(f"runs:/{demo_run}/model", tmp_path) as port:
        req = urllib.request.Request(f"http://127.0.0.1:{port}/invocations",
                                     data=json.dumps(records(census, [24.0, 5.5])).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            answer = json.loads(r.read(), parse_constant=strict)  # NaN / Infinity would break strict clients
    out = pd.DataFrame(answer["predictions"])
    assert list(out.columns) == list(RISK_COLUMNS) and len(out) == 2
    assert out["key"].tolist() == census["key"].tolist()
    assert out["no_events"].tolist() == [False, True] and out["n_events"].tolist()[1] == 0
    np.testing.assert_allclose(out["risk_mean"], expected["risk_mean"], rtol=1e-5)  # float32, other threads
    np.testing.assert_allclose(out["mutual_info"], expected["mutual_info"], rtol=1e-3, atol=1e-9)
    assert out["refer"].tolist() == expected["refer"].tolist()
    assert out["observed_hours"].tolist() == [24.0, 5.5]  # the second has not reached its 24 h prediction time
    assert out["before_prediction_time"].tolist() == [False, True]


@pytest.mark.slow
def test_spark_udf_scores_a_spark_dataframe(demo_run, census, expected, tmp_path, monkeypatch):
    pytest.importorskip("pyspark", reason="pyspark is the `spark` extra: pip install -e '.[spark]'")
    if why := java_missing():
        pytest.skip(f"a local Spark session needs Java: {why} (install a JDK, e.g. Debian's openjdk-17-jre-headless, "
                    "or set JAVA_HOME)")
    from pyspark.sql import SparkSession

    import mlflow

    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    monkeypatch.setenv("SPARK_LOCAL_IP", "127.0.0.1")
    spark = (SparkSession.builder.master("local[1]").appName("score-test")
             .config("spark.ui.enabled", "false").config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.sql.shuffle.partitions", "1").config("spark.local.dir", str(tmp_path))
             .getOrCreate())
    try:
        path = tmp_path / "census.parquet"
        census.to_parquet(path)
        sdf = spark.read.parquet(str(path)).coalesce(1)
        udf = mlflow.pyfunc.spark_udf(spark, f"runs:/{demo_run}/model", env_manager="local", params=PARAMS)
        scored = sdf.withColumn("risk", udf(*[sdf[c] for c in INPUT])).select("risk.*").toPandas()
    finally:
        spark.stop()
    assert list(scored.columns) == list(RISK_COLUMNS) and len(scored) == 2
    assert scored["key"].tolist() == census["key"].tolist() and scored["no_events"].tolist() == [False, True]
    np.testing.assert_allclose(scored["risk_mean"], expected["risk_mean"], rtol=1e-5)
    np.testing.assert_allclose(scored["risk_p95"], expected["risk_p95"], rtol=1e-5)


# ---------------------------------------------------------------------------- cli.py serve

MAX_ROWS = 40  # the served test model's --max-rows


@pytest.fixture(scope="module")
def rows(demo_features) -> list[list]:
    """Every demo admission as a dataframe_split row (key, context, bag_hours, bags, n_events, observed_hours)."""
    frame = pd.concat([pq.read_table(demo_features.out_dir / f"{s}.parquet", columns=COLUMNS).to_pandas()
                       for s in ("train", "val", "test")], ignore_index=True)
    return [[r.key, [int(c) for c in r.context], [float(h) for h in r.bag_hours],
             [[int(t) for t in b] for b in r.bags], int(r.n_events), float(r.observed_hours)]
            for r in frame.itertuples()]


@pytest.fixture(scope="module")
def served(demo_run, tmp_path_factory):
    """`cli.py serve` on a free port (one worker, one thread, --max-rows 40, --max-body-mb 1): (port, log file)."""
    work = tmp_path_factory.mktemp("served")
    port, log_path = free_port(), work / "serve.log"
    cmd = [sys.executable, str(ROOT / "cli.py"), "serve", "--model", f"runs:/{demo_run}/model", "--port", str(port),
           "--workers", "1", "--threads", "1", "--max-rows", str(MAX_ROWS), "--max-body-mb", "1"]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=work, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for_ping(proc, port, log_path, timeout_s=180)
        yield port, log_path
    finally:
        stop(proc)


def _get(port: int, path: str) -> int | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None


def _post(port: int, body: bytes, ctype: str = "application/json") -> tuple[int, bytes]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/invocations", data=body, headers={"Content-Type": ctype})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _split(data: list[list], columns=COLUMNS, **extra) -> bytes:
    return json.dumps({"dataframe_split": {"columns": list(columns), "data": data}, **extra}).encode()


def _with(rows: list[list], column: str, value) -> list[list]:
    i = COLUMNS.index(column)
    return [[*r[:i], value, *r[i + 1:]] for r in rows]


BAD = {  # name -> (body from the rows, content type, status, message)
    "missing column": (lambda r: _split([x[:3] + x[4:] for x in r], [c for c in COLUMNS if c != "bags"]), None, 400,
                       r"^missing column\(s\) \['bags'\]; required: "),
    "n_events not a number": (lambda r: _split(_with(r, "n_events", "many")), None, 400,
                              r"^column 'n_events' row 0 must be a whole number >= 0 \(3 such rows\)$"),
    "n_events NaN": (lambda r: _split(_with(r, "n_events", float("nan"))), None, 400,
                     r"^column 'n_events' row 0 must be a whole number >= 0"),
    "key not a string": (lambda r: _split(_with(r, "key", 7)), None, 400, r"^column 'key' row 0 is not a string$"),
    "negative observed_hours": (lambda r: _split(_with(r[:1], "observed_hours", 5.0) + _with(r[1:], "observed_hours",
                                                                                             -2.0)), None, 400,
                                r"^column 'observed_hours' row 1 must be a number of hours >= 0, or null when not "
                                r"recorded \(2 such rows\)$"),
    "bags not a list of lists": (lambda r: _split(_with(r, "bags", [1, 2])), None, 400,
                                 r"^column 'bags' row 0 is not a list<list<int32>>$"),
    "bags and bag_hours of different lengths": (lambda r: _split(_with(r, "bag_hours", [1.0])), None, 400,
                                                r"^row 0: 'bags' and 'bag_hours' have different lengths$"),
    "fractional token id": (lambda r: _split(_with(r, "context", [1.5])), None, 400,
                            r"^column 'context' row 0 is not a list<int32>$"),
    "token id outside the vocabulary": (lambda r: _split(_with(r, "context", [10 ** 6])), None, 400,
                                        r"^column 'context' row 0: a token id outside the model's vocabulary"),
    "empty body": (lambda r: b"", None, 400, r"^empty request body"),
    "not JSON": (lambda r: b'{"dataframe_split": ', None, 400, r"^the body is not valid JSON \(Expecting value at "),
    "no input key": (lambda r: json.dumps({"rows": r}).encode(), None, 400,
                     r"^the body must be a JSON object with exactly one of dataframe_split, dataframe_records"),
    "ragged table": (lambda r: _split([r[0], r[1][:4]]), None, 400,
                     r"^dataframe_split data row 1 must be a list of 6 values"),
    "no admissions": (lambda r: _split([]), None, 400, r"^the request holds no admissions \(0 rows\)$"),
    "unknown param": (lambda r: _split(r, params={"temperature": 2}), None, 400, r"^unknown params \['temperature'\]"),
    "bad param": (lambda r: _split(r, params={"samples": 0}), None, 400,
                  r"^param 'samples' must be a whole number >= 1$"),
    "too many admissions": (lambda r: _split([r[0]] * (MAX_ROWS + 1)), None, 413,
                            rf"^the request holds {MAX_ROWS + 1} admissions; the limit is {MAX_ROWS} per request"),
    "oversized body": (lambda r: b" " * 1_200_000 + _split(r), None, 413,
                       r"^the request body is 1,2\d\d,\d\d\d bytes; the limit is 1,000,000 \(1 MB\)"),
    "100k-deep nested JSON": (lambda r: b'{"dataframe_split": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", None, 400,
                              r"^the body nests JSON arrays or objects too deeply to be a table"),
    "n_events disagreeing with the bags": (lambda r: _split(_with([x for x in r if x[3]], "n_events", 0)), None, 400,
                                           r"^column 'n_events' row 0: fewer events than the bags hold tokens "
                                           r"\(each token of a bag stands for at least one event"),
    "bag_hours of 1e30": (lambda r: _split([[*x[:2], [1e30] * len(x[2]), *x[3:]] for x in r]), None, 400,
                          r"^column 'bag_hours' row 0: a bag starts outside the model's window \[-720, 24\) hours "
                          r"after admission"),
    "unsupported content type": (lambda r: b"<census/>", "application/xml", 415, r"^unsupported content type"),
    "unreadable CSV": (lambda r: b"key\n\x00\x01", "text/csv", 400,
                       r"^the body could not be read as a table of the features columns"),
}


@pytest.mark.parametrize("name", list(BAD))
def test_a_bad_request_gets_a_4xx_with_one_line_and_the_server_stays_up(served, rows, name):
    port, log_path = served
    make, ctype, status, message = BAD[name]
    code, body = _post(port, make(rows[:3]), ctype or "application/json")
    answer = json.loads(body)
    assert code == status, answer
    assert set(answer) == {"error_code", "message"} and re.search(message, answer["message"]), answer["message"]
    assert "\n" not in answer["message"] and "Traceback" not in answer["message"]
    assert not any(r[0] in body.decode() for r in rows[:3])  # no key (nor any other row content) echoed
    assert _get(port, "/ping") == 200
    code, good = _post(port, _split(rows[:2]))
    assert code == 200 and len(json.loads(good)["predictions"]) == 2


def test_the_server_log_has_the_detail_without_row_contents(served, rows):
    port, log_path = served
    for make, ctype, _, _ in BAD.values():
        _post(port, make(rows[:3]), ctype or "application/json")
    text = log_path.read_text()
    assert re.search(r"request \d+: 400, (\d+|\?) admissions, \d+ ms: missing column\(s\) \['bags'\]", text)
    assert "HTTP/1.1" not in text  # no access log beside the guard's line (one line per request)
    assert not any(r[0] in text for r in rows)  # no key of any admission
    assert "Traceback" not in text


def test_null_or_nan_observed_hours_means_not_recorded(served, rows):
    """The decision documented in docs/scoring.md: null / NaN observed_hours = not recorded, scored with
    observed_hours -1 and before_prediction_time false; a partial window is flagged from a number."""
    port, _ = served
    data = _with(rows[:1], "observed_hours", None) + _with(rows[1:2], "observed_hours", float("nan")) + \
        _with(rows[2:3], "observed_hours", 5.5)
    code, body = _post(port, _split(data))
    out = pd.DataFrame(json.loads(body, parse_constant=strict)["predictions"])
    assert code == 200 and out["observed_hours"].tolist() == [-1.0, -1.0, 5.5]
    assert out["before_prediction_time"].tolist() == [False, False, True]
    without = [r[:len(INPUT)] for r in rows[:3]]  # no observed_hours column at all: the same
    code, body = _post(port, _split(without, INPUT))
    assert code == 200 and pd.DataFrame(json.loads(body)["predictions"])["observed_hours"].tolist() == [-1.0] * 3


def test_concurrent_requests_are_answered_as_each_alone(served, rows):
    """8 clients at once, 4 distinct bodies (params and seed included): every answer is byte-identical to
    the same body's answer when nothing else runs, no error and no row lost."""
    from concurrent.futures import ThreadPoolExecutor

    port, _ = served
    bodies = [_split(rows[i * 8:(i + 1) * 8], params=p) for i, p in
              enumerate([{}, {"seed": 3}, {"samples": 3}, {"samples": 2, "seed": 1, "batch_size": 3}])]
    alone = [_post(port, b) for b in bodies]
    assert all(code == 200 for code, _ in alone)
    jobs = [i % len(bodies) for i in range(32)]
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda i: _post(port, bodies[i]), jobs))
    assert [code for code, _ in answers] == [200] * len(jobs)
    assert all(body == alone[i][1] for i, (_, body) in zip(jobs, answers))
    assert all(len(json.loads(body)["predictions"]) == 8 for _, body in answers)


def test_served_answers_equal_the_pyfunc_in_process(served, rows, demo_run):
    """The direct path (the guard's table to the model) and MLflow's own pyfunc predict give the same table."""
    import mlflow

    port, _ = served
    code, body = _post(port, _split(rows[:5], params=PARAMS))
    frame = pd.DataFrame(rows[:5], columns=COLUMNS)
    expected = mlflow.pyfunc.load_model(f"runs:/{demo_run}/model").predict(frame, params=PARAMS)
    pd.testing.assert_frame_equal(pd.DataFrame(json.loads(body)["predictions"]), expected, check_dtype=False)


def test_an_unforeseen_failure_is_a_500_line_and_the_log_names_where(caplog):
    """A bug in the model: the client gets one line with the request number, the log the exception's class
    and frames, never its message (it may quote a row)."""
    import asyncio
    import logging

    from pipeline.serving import guard, server

    class Broken:
        def check_request(self, frame, params):
            return None

        def predict(self, context, frame, params=None):
            raise RuntimeError("row 0 key 0123456789abcdef0123456789abcdef is odd")

    class Model:
        metadata = None

        def unwrap_python_model(self):
            return Broken()

    guard_ = guard.RequestGuard(None, guard.GuardedModel(Model()), server.ServeConfig(model="x"))
    sent = []

    async def receive():
        return {"type": "http.request", "body": _split([["k", [1], [0.0], [[1]], 1, 24.0]]), "more_body": False}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "path": "/invocations", "headers": [(b"content-type", b"application/json")]}
    with caplog.at_level(logging.INFO, logger="pipeline.serving.guard"):
        asyncio.run(guard_(scope, receive, send))
    assert sent[0]["status"] == 500
    answer = json.loads(sent[1]["body"])
    assert answer == {"error_code": "INTERNAL_ERROR", "message": "internal error while scoring (request 1; see the "
                                                                 "server log)"}
    assert "builtins.RuntimeError at test_serve.py:" in caplog.text and "0123456789abcdef" not in caplog.text


# ---------------------------------------------------------------------------- the guard in process


def _guard_call(body: bytes, python_model=None):
    """One request through a RequestGuard in this process: (status, answer, log records of the guard)."""
    import asyncio
    import logging

    from pipeline.serving import guard, server

    class Model:
        metadata = None

        def unwrap_python_model(self):
            return python_model

    guard_ = guard.RequestGuard(None, guard.GuardedModel(Model()), server.ServeConfig(model="x"))
    sent, records_ = [], []

    class Keep(logging.Handler):
        def emit(self, record):
            records_.append(record)

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "path": "/invocations", "headers": [(b"content-type", b"application/json")]}
    handler, glog = Keep(level=logging.DEBUG), logging.getLogger("pipeline.serving.guard")
    glog.addHandler(handler)
    level, glog.level = glog.level, logging.INFO
    try:
        asyncio.run(guard_(scope, receive, send))
    finally:
        glog.removeHandler(handler)
        glog.setLevel(level)
    return sent[0]["status"], json.loads(sent[1]["body"]) if sent[0]["status"] >= 400 else sent[1]["body"], records_


def test_a_100k_deep_json_is_a_400_not_a_500():
    """json.loads hits Python's recursion limit: a one-line 400, never a RecursionError's 500."""
    from pipeline.serving import guard

    body = b'{"dataframe_split": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    with pytest.raises(guard.Rejected) as rej:
        guard.table_of(body, 40)
    assert rej.value.status == 400 and "too deeply" in rej.value.message
    status, answer, logged = _guard_call(body)
    assert status == 400 and answer["error_code"] == "BAD_REQUEST" and "too deeply" in answer["message"]
    assert len(logged) == 1


@pytest.mark.parametrize("good", [True, False])
def test_each_request_gets_one_log_line(good):
    """docs/scoring.md: one line per request (status, admissions, milliseconds, and what went wrong)."""
    class Scorer:
        def check_request(self, frame, params):
            return None

        def predict(self, context, frame, params=None):
            if not good:
                raise RuntimeError("row 0 key 0123456789abcdef0123456789abcdef is odd")
            return pd.DataFrame({"risk_mean": [0.5] * len(frame)})

    status, _, logged = _guard_call(_split([["k", [1], [0.0], [[1]], 1, 24.0]] * 2), Scorer())
    assert status == (200 if good else 500)
    assert len(logged) == 1, [r.getMessage() for r in logged]
    line = logged[0].getMessage()
    assert re.match(rf"request 1: {status}, 2 admissions, \d+ ms", line), line
    if not good:
        assert "the model failed: builtins.RuntimeError at test_serve.py:" in line and "0123" not in line


@pytest.mark.parametrize("column, value, message", [
    ("n_events", 0, r"^column 'n_events' row 1: fewer events than the bags hold tokens"),
    ("bag_hours", 1e30, r"^column 'bag_hours' row 1: a bag starts outside the model's window \[-720, 24\) hours"),
    ("bag_hours", 24.0, r"^column 'bag_hours' row 1: a bag starts outside"),
    ("bag_hours", -1e6, r"^column 'bag_hours' row 1: a bag starts outside"),
])
def test_a_request_whose_bags_disagree_is_refused(rows, column, value, message):
    from pipeline.tasks.mortality.request import RequestError, read_request

    sizes = {"tokens": 10 ** 6, "context": 10 ** 6}
    frame = pd.DataFrame([r for r in rows if r[3]][:3], columns=COLUMNS)  # admissions with bags
    assert len(read_request(frame, sizes, 24.0, lookback_days=30.0)) == 3  # the demo's own rows pass
    n = len(frame.at[1, "bag_hours"])
    frame.at[1, column] = [value] * n if column == "bag_hours" else value
    with pytest.raises(RequestError, match=message):
        read_request(frame, sizes, 24.0, lookback_days=30.0)


def _json_block(text: str, after: str) -> str:
    """The first ```json block of ``text`` after the words ``after``."""
    return text.split(after, 1)[1].split("```json", 1)[1].split("```", 1)[0]


def test_the_served_answer_in_the_docs_is_what_the_server_returns(served):
    """Issue 46, item 5: docs/scoring.md showed 11 fields of an answer of 18. Its request, posted to `cli.py serve`,
    is answered with exactly the fields the page shows, in the server's order, and the same values of the fields the
    request decides (the risks depend on the model trained by the test session)."""
    text = (ROOT / "docs" / "scoring.md").read_text()
    request = json.loads(_json_block(text, "A request (`example.json`):"))
    shown = json.loads(_json_block(text, "answered (the demo model of the tests"))["predictions"]
    status, body = _post(served[0], json.dumps(request).encode())
    assert status == 200, body
    got = json.loads(body, parse_constant=strict)["predictions"]
    assert [list(p) for p in shown] == [list(p) for p in got] == [list(RISK_COLUMNS)] * 2, json.dumps(got)
    for name in ("key", "n_events", "no_events", "observed_hours", "before_prediction_time", "has_spread"):
        assert [p[name] for p in shown] == [p[name] for p in got], name
    assert all(type(a[k]) is type(b[k]) or {type(a[k]), type(b[k])} <= {int, float}  # the JSON types the page shows
               for a, b in zip(shown, got) for k in a), json.dumps(got)
