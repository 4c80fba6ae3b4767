"""Shared fixtures: the MIMIC-III demo, a fixed de-identification key, extracted features, a
session-local MLflow tracking store with a tiny trained run, and the PostgreSQL server.

Plain helpers (no fixtures) live in tests/helpers/; no test module imports another one.
"""

from __future__ import annotations

import inspect
import os
import re
import sys

import pytest
from helpers.paths import ROOT, demo_path

# The PostgreSQL fixtures (one throwaway server per session, the demo loaded into it) are defined
# in tests/helpers/postgres.py and offered to every module from here.
from helpers.postgres import pg_demo, pg_dsn, pg_server  # noqa: F401
from helpers.runs import promise_run as _promise_run
from helpers.runs import trained_run

# Tests never touch a real key file: a fixed test key (never a production secret).
os.environ.setdefault("MIMIC_DEID_KEY", "test-only-deid-key")
os.environ.setdefault("MLFLOW_TRACKING_URI", f"sqlite:///{ROOT / '.pytest_cache' / 'mlflow-tests.db'}")
# Triton kernels run in Triton's interpreter on CPU tensors (tests/test_layers_fused.py); triton reads the switch
# when it is imported, so it is set before anything imports it. TRITON_INTERPRET=0 compiles them (a CUDA device).
os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(scope="session")
def demo_dir():
    return demo_path()


@pytest.fixture(scope="session")
def demo_features(demo_dir, tmp_path_factory):
    """The demo extracted once per session with the default configuration."""
    from pipeline.data.mimic.extraction import extract

    out = tmp_path_factory.mktemp("demo_features")
    return extract(demo_dir, out)


@pytest.fixture(scope="session")
def synth_features(tmp_path_factory):
    """A small synthetic MIMIC-III (2,500 patients, thinned events) and its features.

    Returns (root, ExtractResult): tables in root/mimic (truth in root/mimic/_truth)."""
    from pipeline.data.mimic.extraction import extract
    from pipeline.data.mimic.synth import SynthConfig, generate

    root = tmp_path_factory.mktemp("synth")
    generate(root / "mimic", patients=2500, seed=7, config=SynthConfig(density=0.05))
    return root, extract(root / "mimic", root / "features")


@pytest.fixture(scope="module")
def tracking_store(tmp_path_factory):
    """This session's own sqlite tracking store (no lock contention with other test sessions), for
    the environment (pipeline.runs, subprocesses) and for mlflow's fluent API alike; the working
    directory moves to the session folder, so artifacts (./mlruns) land there too. Modules that
    track runs request it for all their tests: ``pytestmark = pytest.mark.usefixtures("tracking_store")``."""
    import mlflow

    work = tmp_path_factory.getbasetemp() / "tracking"
    work.mkdir(exist_ok=True)
    uri = f"sqlite:///{work / 'mlflow.db'}"
    previous = mlflow.get_tracking_uri()
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(work)
        mp.setenv("MLFLOW_TRACKING_URI", uri)
        mlflow.set_tracking_uri(uri)
        yield uri
        mlflow.set_tracking_uri(previous)


@pytest.fixture(scope="module")
def demo_run(tracking_store, tmp_path_factory, demo_features):
    """Run id of the tiny rank-1 training on the demo features (helpers.runs.TINY; once per session)."""
    return trained_run(tmp_path_factory, demo_features.out_dir)


@pytest.fixture(scope="module")
def promise_run(tracking_store, tmp_path_factory):
    """(run id, features directory) of a tiny run whose calibration half certifies a promise at alpha 0.2
    (helpers.runs.promise_run; once per session): re-certification and the outcome monitor."""
    return _promise_run(tmp_path_factory)


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread():
    """The test models are tiny: one intra-op thread avoids OpenMP sync stalls on a small shared CPU."""
    import torch

    torch.set_num_threads(1)
    yield


# The fast loop, `pytest -m "not slow"`: a test is slow when it is marked so (a long test of its own),
# when it uses one of these fixtures (each trains a model, starts a server or PostgreSQL, or builds a
# synthetic world or a trained run), when it is a PostgreSQL test, or when it runs a subprocess.
SLOW_FIXTURES = frozenset({
    "pg_server", "pg_dsn", "pg_demo", "pg_features",  # PostgreSQL
    "served",  # cli.py serve
    "synth_features", "synth_dir", "small_synth", "worlds", "iv_demo", "iv_features", "whole_demo",  # worlds
    "demo_run", "promise_run", "cli_run", "baseline_runs", "det_run", "rank1_run", "iv_run", "map_run",  # runs
    "laplace_run",
    "census", "evaluated", "after", "feats", "small",  # a scored census, evaluated runs, training data
})
SPAWNS = re.compile(r"\bsubprocess\b|\bPopen\b|\bmlflow_serve\b")  # a test body that starts a process


def _spawns(item) -> bool:
    fn = getattr(item, "function", None)
    try:
        return fn is not None and bool(SPAWNS.search(inspect.getsource(fn)))
    except (OSError, TypeError):
        return False


def pytest_collection_modifyitems(config, items):
    """Mark slow what the fast loop leaves out (SLOW_FIXTURES, postgres, a subprocess); see above."""
    for item in items:
        if item.get_closest_marker("slow") is None and (
                SLOW_FIXTURES & set(item.fixturenames) or item.get_closest_marker("postgres") or _spawns(item)):
            item.add_marker(pytest.mark.slow)


def pytest_terminal_summary(terminalreporter):
    """Name the PostgreSQL each server of the session ran: version, binaries' source (tests/helpers/postgres.py)."""
    for line in getattr(sys.modules.get("helpers.postgres"), "STARTED", []):
        terminalreporter.write_line(f"postgres: {line}")
