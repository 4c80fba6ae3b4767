"""Issue 46, item 1: the tracking store found from a subfolder of the project, through the command line.

A model trained at a project's root (its ``mlflow.db`` and ``mlruns/`` there) is evaluated, scored and compared from
a nested subfolder with ``MLFLOW_TRACKING_URI`` unset, each in a real subprocess: every command finds the root's store
and the run's logged model, and none makes a store of its own in the subfolder. A command that reads runs where no
store exists refuses in one line and makes none; a new store is made at the checkout's root, never in a subfolder."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers.paths import ROOT

from pipeline.core import fileio
from pipeline.runs import store

TINY_TRAIN = ["--max-steps", "4", "--eval-every", "2", "--hidden", "8", "--embed-dim", "8", "--dense", "8",
              "--score-samples", "2", "--threads", "1", "--no-progress"]


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    return {**env, "PYTHONPATH": str(ROOT)}


def _cli(cwd, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "cli.py"), *args], cwd=cwd, env=_env(), capture_output=True,
                          text=True, timeout=600)


@pytest.mark.slow
def test_a_run_trained_at_the_root_is_read_from_a_subfolder(tmp_path, demo_features):
    project = tmp_path / "project"
    nested = project / "docs" / "experiments"
    nested.mkdir(parents=True)
    trained = _cli(project, "train", "--data", str(demo_features.out_dir), "--model", "rank1", *TINY_TRAIN)
    assert trained.returncode == 0, trained.stderr[-2000:]
    run_id = next(ln.split()[1] for ln in trained.stdout.splitlines() if ln.startswith("run_id: "))
    assert (project / "mlflow.db").is_file() and (project / "mlruns").is_dir()

    evaluated = _cli(nested, "evaluate", "--run", run_id, "--split", "test", "--samples", "2", "--bootstrap", "10",
                     "--threads", "1")
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
    assert "test: n=" in evaluated.stdout
    assert f"warning: tracking store: {project / 'mlflow.db'} (the nearest mlflow.db above" in evaluated.stderr
    scored = _cli(nested, "score", "--model", f"runs:/{run_id}/model", "--data", str(demo_features.out_dir),
                  "--out", "runs/scores", "--samples", "2", "--threads", "1")
    assert scored.returncode == 0, scored.stderr[-2000:]
    assert (nested / "runs" / "scores" / "scores.parquet").is_file()  # a path typed is the working directory's
    compared = _cli(nested, "compare")
    assert compared.returncode == 0, compared.stderr[-2000:]
    assert "rank1-gaussian" in compared.stdout and (nested / "runs" / "compare" / "compare.csv").is_file()
    for folder in (project / "docs", nested):  # no store, no artifacts, no lock made in a subfolder
        assert not {"mlflow.db", "mlflow.db.init.lock", "mlruns"} & {p.name for p in folder.iterdir()}
    again = _cli(nested, "evaluate", "--run", run_id, "--split", "test", "--samples", "2", "--bootstrap", "10",
                 "--threads", "1")
    assert again.returncode == 0, again.stderr[-2000:]  # the rerun finds the same store


@pytest.mark.slow
@pytest.mark.parametrize("command", [["evaluate", "--run", "0" * 32, "--split", "test"], ["compare"],
                                     ["score", "--model", f"runs:/{'0' * 32}/model", "--data", "x", "--out", "y"],
                                     ["serve", "--model", "0" * 32]])
def test_a_reading_command_makes_no_store_where_there_is_none(tmp_path, command):
    done = _cli(tmp_path, *command)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert f"no tracking store: no mlflow.db in the working directory {tmp_path} or any folder above it" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_new_store_is_made_at_the_checkouts_root_not_in_a_subfolder(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    (tmp_path / "cli.py").write_text("")
    (tmp_path / "docs" / "experiments").mkdir(parents=True)
    monkeypatch.setattr(fileio, "CHECKOUT", tmp_path)
    monkeypatch.chdir(tmp_path / "docs" / "experiments")
    assert store.default_store() == tmp_path / "mlflow.db"
    assert fileio.new_file_folder(tmp_path.parent) == tmp_path.parent  # outside the checkout: the working directory
    (tmp_path / "docs" / "mlflow.db").write_bytes(b"")  # an existing store nearer than the root wins
    monkeypatch.chdir(tmp_path / "docs" / "experiments")
    assert store.default_store() == tmp_path / "docs" / "mlflow.db"
