"""Serving test helpers: the pyfunc's input columns, fixed draws, a free port, request bodies, and
`mlflow models serve` of a model URI started and stopped around a test."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterator

import pandas as pd

from pipeline.core.contracts import FEATURES, Use

INPUT = list(FEATURES.names(Use.REQUIRED))  # the pyfunc's required input columns
COLUMNS = [*INPUT, "observed_hours"]  # and its optional window column (bag_values: value-channel models only)
PARAMS = {"samples": 3, "seed": 5}  # fixed draws: served and in-process predictions must agree


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def records(frame: pd.DataFrame, observed_hours: list[float]) -> dict:
    """A dataframe_split request of ``frame``'s admissions with their observed_hours, at PARAMS."""
    rows = [[r.key, [int(c) for c in r.context], [float(h) for h in r.bag_hours],
             [[int(t) for t in b] for b in r.bags], int(r.n_events), h]
            for r, h in zip(frame.itertuples(), observed_hours)]
    return {"dataframe_split": {"columns": COLUMNS, "data": rows}, "params": PARAMS}


def strict(constant: str):
    """``json.loads(parse_constant=strict)``: NaN / Infinity would break strict clients."""
    raise ValueError(f"the server answered with {constant}, which is not JSON")


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM the server's process group, SIGKILL after 20 s."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=20)


def wait_for_ping(proc: subprocess.Popen, port: int, log: Path, timeout_s: float = 120) -> None:
    """Until the server on ``port`` answers /ping (its log's tail if it exits first)."""
    deadline = time.monotonic() + timeout_s
    while True:
        assert proc.poll() is None, log.read_text()[-3000:]
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=5) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        assert time.monotonic() < deadline, f"server did not answer /ping within {timeout_s:.0f} s"
        time.sleep(0.5)


@contextlib.contextmanager
def mlflow_serve(uri: str, workdir: Path) -> Iterator[int]:
    """``mlflow models serve`` of ``uri`` on a free loopback port (log: workdir/serve.log); yields the port."""
    port = free_port()
    bindir = str(Path(sys.executable).parent)
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "PATH": f"{bindir}:{os.environ['PATH']}"}
    cmd = [str(Path(bindir) / "mlflow"), "models", "serve", "-m", uri, "--env-manager", "local", "-p", str(port),
           "-h", "127.0.0.1"]
    with open(workdir / "serve.log", "wb") as log:
        proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_for_ping(proc, port, workdir / "serve.log")
            yield port
        finally:
            stop(proc)
