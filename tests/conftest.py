"""Shared fixtures: the MIMIC-III demo, a fixed de-identification key, extracted features."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Tests never touch a real key file: a fixed test key (never a production secret).
os.environ.setdefault("MIMIC_DEID_KEY", "test-only-deid-key")
os.environ.setdefault("MLFLOW_TRACKING_URI", f"sqlite:///{ROOT / '.pytest_cache' / 'mlflow-tests.db'}")


def demo_path() -> Path:
    env = os.environ.get("MIMIC_DEMO_DIR")
    candidates = [Path(env)] if env else []
    candidates += [ROOT.parent / "shared" / "mimic-iii-demo", ROOT / "shared" / "mimic-iii-demo"]
    for cand in candidates:
        if (cand / "ADMISSIONS.csv.gz").exists():
            return cand
    raise FileNotFoundError(f"MIMIC-III demo not found in {[str(c) for c in candidates]}; set MIMIC_DEMO_DIR")


@pytest.fixture(scope="session")
def demo_dir() -> Path:
    return demo_path()


@pytest.fixture(scope="session")
def demo_features(demo_dir, tmp_path_factory):
    """The demo extracted once per session with the default configuration."""
    from pipeline.extraction import extract

    out = tmp_path_factory.mktemp("demo_features")
    return extract(demo_dir, out)


@pytest.fixture(scope="session")
def synth_features(tmp_path_factory):
    """A small synthetic MIMIC-III (2,500 patients, thinned events) and its features.

    Returns (root, ExtractResult): tables in root/mimic (truth in root/mimic/_truth)."""
    from pipeline.extraction import extract
    from pipeline.synth import SynthConfig, generate

    root = tmp_path_factory.mktemp("synth")
    generate(root / "mimic", patients=2500, seed=7, config=SynthConfig(density=0.05))
    return root, extract(root / "mimic", root / "features")


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread():
    """The test models are tiny: one intra-op thread avoids OpenMP sync stalls on a small shared CPU."""
    import torch

    torch.set_num_threads(1)
    yield


def pytest_terminal_summary(terminalreporter):
    """Name the PostgreSQL each server of the session ran: version, binaries' source (tests/pgserver.py)."""
    for line in getattr(sys.modules.get("pgserver"), "STARTED", []):
        terminalreporter.write_line(f"postgres: {line}")
