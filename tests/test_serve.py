"""The logged pyfunc served: `mlflow models serve` (REST on 127.0.0.1) and
`mlflow.pyfunc.spark_udf` on a local Spark session, both against the in-process pyfunc."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from pipeline.predict import RISK_COLUMNS

INPUT = ["key", "context", "bag_hours", "bags", "n_events"]
PARAMS = {"samples": 3, "seed": 5}  # fixed draws: served and in-process predictions must agree
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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _records(frame: pd.DataFrame, observed_hours: list[float]) -> dict:
    rows = [[r.key, [int(c) for c in r.context], [float(h) for h in r.bag_hours],
             [[int(t) for t in b] for b in r.bags], int(r.n_events), h] for r, h in zip(frame.itertuples(), observed_hours)]
    return {"dataframe_split": {"columns": [*INPUT, "observed_hours"], "data": rows}, "params": PARAMS}


def _strict(constant: str):
    raise ValueError(f"the server answered with {constant}, which is not JSON")


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM the server's process group, SIGKILL after 20 s."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=20)


def test_mlflow_models_serve_answers_two_admissions(demo_run, census, expected, tmp_path):
    port = _free_port()
    bindir = str(Path(sys.executable).parent)
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "PATH": f"{bindir}:{os.environ['PATH']}"}
    cmd = [str(Path(bindir) / "mlflow"), "models", "serve", "-m", f"runs:/{demo_run}/model", "--env-manager", "local",
           "-p", str(port), "-h", "127.0.0.1"]
    log = open(tmp_path / "serve.log", "wb")
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=5) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            assert time.monotonic() < deadline, "server did not answer /ping within 120 s"
            time.sleep(0.5)
        req = urllib.request.Request(f"http://127.0.0.1:{port}/invocations", data=json.dumps(_records(census, [24.0, 5.5])).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            answer = json.loads(r.read(), parse_constant=_strict)  # NaN / Infinity would break strict clients
    finally:
        _stop(proc)
        log.close()
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
