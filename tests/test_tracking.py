"""pipeline.runs (tracking, pyfunc): `cli.py train` -> MLflow run -> pyfunc by URI, privacy of the
logged artifacts, and the MLproject. (The redaction itself: test_redact.py.)

One CLI run on the demo features (rank-1, 20 steps) is shared by the module; it uses its own
sqlite tracking store and artifact directory under a temporary folder.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from helpers import privacy_scan as privacy
from helpers.raw_ids import raw_ids_of

from pipeline.runs import store
from pipeline.tasks.mortality.risk import RISK_COLUMNS

ROOT = Path(__file__).resolve().parents[1]


def test_tracking_uri_default_and_env(monkeypatch, tmp_path):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    assert store.tracking_uri() == f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:////x/y.db")
    assert store.tracking_uri() == "sqlite:////x/y.db"


def test_a_dated_features_path_is_tagged_as_it_is(tracking_store, demo_features, tmp_path):
    """The features directory tag names a directory that exists (evaluate reads it back), a date in its
    path included; other tags still have their dates masked."""
    from pipeline.runs.record import tag_features
    from pipeline.runs.tracking import RunTracker

    dated = tmp_path / "2024-01-05" / "features"
    shutil.copytree(demo_features.out_dir, dated)
    tracker = RunTracker(experiment="dated-path")
    tag_features(tracker, dated)
    tracker.set_tag("note", "made 2024-01-05")
    tracker.end()
    tags = store.client().get_run(tracker.run_id).data.tags
    assert Path(tags[store.FEATURES_DIR_TAG]) == dated.resolve() and Path(tags[store.FEATURES_DIR_TAG]).is_dir()
    assert tags["note"] == "made <date>"


@pytest.mark.parametrize("raised", [None, RuntimeError, KeyboardInterrupt])
def test_a_tracker_block_ends_its_run_failed_on_any_exception(tracking_store, raised):
    """``with tracker``: FINISHED when the block returns, KILLED when it is interrupted (Ctrl-C), FAILED when it
    raises anything else, and the exception goes on."""
    from pipeline.runs.tracking import RunTracker

    tracker = RunTracker(experiment="with-block")
    if raised is None:
        with tracker:
            tracker.set_tag("note", "done")
    else:
        with pytest.raises(raised, match="stop"), tracker:
            tracker.set_tag("note", "stopping")
            raise raised("stop")
    run = store.client().get_run(tracker.run_id)
    expected = {None: "FINISHED", RuntimeError: "FAILED", KeyboardInterrupt: "KILLED"}[raised]
    assert run.info.status == expected and run.data.tags["note"]


def test_a_tracker_given_a_finished_run_leaves_its_status(tracking_store):
    """An evaluation's records on a finished run (reopen=False): a failing block does not mark the run FAILED."""
    from pipeline.runs.tracking import NullTracker, RunTracker

    first = RunTracker(experiment="with-block")
    with first:
        pass
    later = RunTracker(run_id=first.run_id, reopen=False)
    with pytest.raises(RuntimeError), later:
        later.set_tag("eval", "started")
        raise RuntimeError("evaluation failed")
    assert store.client().get_run(first.run_id).info.status == "FINISHED"
    with pytest.raises(KeyboardInterrupt), NullTracker():  # nothing tracked, nothing to end
        raise KeyboardInterrupt


def test_an_interrupted_training_run_ends_killed(tracking_store, demo_features, monkeypatch, tmp_path):
    """A run interrupted while it records (here a baseline's, the fastest to train) is KILLED in the store, the
    interrupt re-raised."""
    from pipeline.runs import record
    from pipeline.workflows.baselines_run import train_baseline

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(record, "write_run", interrupt)
    with pytest.raises(KeyboardInterrupt):
        train_baseline(demo_features.out_dir, "logreg", out_dir=tmp_path / "run", experiment="interrupted")
    runs = store.client().search_runs([store.client().get_experiment_by_name("interrupted").experiment_id])
    assert [r.info.status for r in runs] == ["KILLED"]


@pytest.fixture(scope="module")
def cli_run(demo_features, tmp_path_factory):
    """`cli.py train` on the demo features; yields (run_id, tracking uri, workdir, stdout)."""
    import mlflow

    work = tmp_path_factory.mktemp("cli_train")
    uri = f"sqlite:///{work / 'mlflow.db'}"
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, str(ROOT / "cli.py"), "train", "--data", str(demo_features.out_dir), "--model", "rank1",
           "--max-steps", "20", "--eval-every", "10", "--score-samples", "4", "--hidden", "16", "--embed-dim", "8",
           "--threads", "1", "--experiment", "cli-test", "--run-name", "demo"]
    proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = re.search(r"^run_id: ([0-9a-f]{32})$", proc.stdout, re.MULTILINE)
    assert m, proc.stdout
    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(uri)
    yield m.group(1), uri, work, proc.stdout
    mlflow.set_tracking_uri(previous)


@pytest.fixture(scope="module")
def loaded(cli_run):
    import mlflow

    return mlflow.pyfunc.load_model(f"runs:/{cli_run[0]}/model")


def test_run_logs_params_metrics_and_checkpoint_dir(cli_run):
    from mlflow.tracking import MlflowClient

    run_id, uri, work, stdout = cli_run
    run = MlflowClient(uri).get_run(run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "demo"
    p = run.data.params
    assert p["model_kind"] == "rank1" and p["model.lstm_hidden"] == "16" and p["train.max_steps"] == "20"
    # the distinct admissions a step (what experiments.early_stopping and training_budget count epochs by): B // K
    assert int(p["distinct_per_step"]) == int(p["train.batch_size"]) // int(p["model.components"]) < 64
    assert p["features"] == Path(str(p["features"])).name  # a directory name, never a full path
    client = MlflowClient(uri)
    loss = client.get_metric_history(run_id, "train_loss")
    assert [m.step for m in loss] == [10, 20] and all(np.isfinite(m.value) for m in loss)
    assert [m.step for m in client.get_metric_history(run_id, "val_nll")] == [10, 20]
    for name in ("train_nll", "train_kl", "best_val_nll", "best_val_auc_pr", "refer_threshold"):
        assert name in run.data.metrics, name
    assert (work / "runs" / "train" / run_id / "best.pt").exists()  # default checkpoint dir = run id
    assert f"checkpoint=runs/train/{run_id}/best.pt" in stdout


def test_pyfunc_predicts_risk_table(loaded, demo_features):
    frame = pq.read_table(demo_features.out_dir / "test.parquet").to_pandas()
    out = loaded.predict(frame)
    assert list(out.columns) == list(RISK_COLUMNS)
    assert out["key"].tolist() == frame["key"].tolist()
    assert out["n_events"].tolist() == frame["n_events"].tolist()
    assert out["refer"].dtype == bool and out["no_events"].dtype == bool
    assert ((out["risk_mean"] > 0) & (out["risk_mean"] < 1)).all() and (out["risk_sd"] > 0).all()
    assert (out["risk_p05"] <= out["risk_p95"]).all()
    assert (out["observed_hours"] == 24.0).all() and not out["before_prediction_time"].any()
    partial = frame.head(3).assign(observed_hours=[24.0, 5.5, float("nan")]).drop(columns="before_prediction_time")
    flagged = loaded.predict(partial)  # derived from observed_hours and the model's 24 h window
    assert flagged["before_prediction_time"].tolist() == [False, True, False]
    assert flagged["observed_hours"].tolist() == [24.0, 5.5, -1.0]
    schema = [c.name for c in loaded.metadata.get_output_schema().inputs]
    assert schema == list(RISK_COLUMNS)
    assert loaded.metadata.get_params_schema().to_dict()[0] == {"name": "samples", "type": "long", "default": 4,
                                                                "shape": None}


def test_pyfunc_params_and_zero_bag_rows(loaded, demo_features):
    frame = pq.read_table(demo_features.out_dir / "val.parquet").to_pandas().head(5)
    frame.loc[2, "n_events"] = 0
    frame.at[2, "bags"] = []
    frame.at[2, "bag_hours"] = []
    a = loaded.predict(frame, params={"samples": 3, "seed": 1})
    b = loaded.predict(frame, params={"samples": 3, "seed": 1})
    c = loaded.predict(frame, params={"samples": 3, "seed": 2})
    pd.testing.assert_frame_equal(a, b)
    assert not np.allclose(a["risk_mean"], c["risk_mean"])
    assert a["no_events"].tolist() == [False, False, True, False, False]
    assert np.isfinite(a.loc[2, ["risk_mean", "risk_sd", "mutual_info"]].astype(float)).all()


def test_pyfunc_rejects_out_of_vocabulary_ids(loaded, demo_features):
    frame = pq.read_table(demo_features.out_dir / "test.parquet").to_pandas().head(3)
    frame.at[1, "bags"] = [[1, 10**6]]
    frame.at[1, "bag_hours"] = [0.0]
    with pytest.raises(Exception, match=r"column 'bags' row 1: a token id outside the model's vocabulary") as err:
        loaded.predict(frame)
    assert "1000000" not in str(err.value)  # a request's values are not echoed


def test_pyfunc_loads_without_the_repository(cli_run, demo_features, tmp_path):
    """A fresh interpreter outside the repository loads the model from its code_paths copy."""
    run_id, uri, _, _ = cli_run
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"MLFLOW_TRACKING_URI": uri}
    script = ("import sys, mlflow, pandas as pd\n"
              "out = mlflow.pyfunc.load_model(sys.argv[1]).predict(pd.read_parquet(sys.argv[2]))\n"
              "import pipeline\n"
              "print(','.join(out.columns)); print(len(out)); print(pipeline.__file__)\n")
    proc = subprocess.run([sys.executable, "-c", script, f"runs:/{run_id}/model",
                           str(demo_features.out_dir / "test.parquet")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    columns, n, where = proc.stdout.strip().splitlines()[-3:]
    assert columns.split(",") == list(RISK_COLUMNS) and int(n) == pq.read_metadata(
        demo_features.out_dir / "test.parquet").num_rows
    plain = subprocess.run([sys.executable, "-c", "import pipeline"], cwd=tmp_path, env=env, capture_output=True)
    if plain.returncode != 0:  # not installed: it can only have come from the model's code copy
        assert not Path(where).resolve().is_relative_to(ROOT), where


def test_logged_artifacts_pass_privacy_scan(cli_run, demo_dir, tmp_path):
    import mlflow

    run_id = cli_run[0]
    run_dir = Path(mlflow.artifacts.download_artifacts(run_id=run_id, dst_path=str(tmp_path / "run")))
    names = sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if p.is_file())
    for expected in ("checkpoint/best.pt", "features/manifest.json", "features/vocab.json", "model_info.json",
                     "train_config.json", "shift_reference.npz"):
        assert expected in names
    model_dir = Path(mlflow.artifacts.download_artifacts(f"runs:/{run_id}/model", dst_path=str(tmp_path / "model")))
    assert (model_dir / "code" / "pipeline" / "tasks" / "mortality" / "network.py").exists()
    assert not list(model_dir.rglob("__pycache__"))
    assert {p.name for p in (model_dir / "artifacts").iterdir()} == {"best.pt", "vocab.json", "model_info.json",
                                                                     "extraction.json", "shift_reference.npz"}
    from pipeline.bayes.shift import ShiftReference  # the shift check's reference (binary: its strings scanned here)

    ref = ShiftReference.load(model_dir / "artifacts" / "shift_reference.npz")
    ids = raw_ids_of(demo_dir)
    assert ref.columns and not [c for c in [*ref.columns, ref.source] if privacy.check_string(c, ids)]
    extraction = json.loads((model_dir / "artifacts" / "extraction.json").read_text())
    assert set(extraction) <= {"config", "feature_version"}  # settings only: no counts, sources or paths
    findings = privacy.scan([run_dir, model_dir], raw_ids_of(demo_dir))
    # MLflow stamps every MLmodel with its own creation time (utc_time_created); that is the
    # only date allowed, and nothing else may be found.
    allowed = [f for f in findings if Path(f.path).name == "MLmodel" and f.problem == "calendar date"
               and _line(f).startswith("utc_time_created:")]
    assert findings == allowed and len(allowed) == 1, [str(f) for f in findings]


def _line(finding) -> str:
    n = int(finding.where.removeprefix("line "))
    return Path(finding.path).read_text().splitlines()[n - 1].strip()


def test_mlproject_parses_and_matches_cli():
    from mlflow.projects import _project_spec

    project = _project_spec.load_project(str(ROOT / "mlflow"))
    help_text = subprocess.run([sys.executable, str(ROOT / "cli.py"), "train", "--help"], capture_output=True,
                               text=True, env={**os.environ, "COLUMNS": "200"}).stdout
    for name in ("train", "train_paper"):
        entry = project.get_entry_point(name)
        cmd = entry.compute_command({"data": "/abs/features"}, storage_dir=None)
        assert cmd.startswith("cd .. && python cli.py train --data /abs/features --model rank1")
        for flag in re.findall(r"(--[a-z][a-z-]+)", cmd):
            assert flag in help_text, flag
    assert not (ROOT / "mlflow" / "__init__.py").exists()


@pytest.mark.slow
def test_mlflow_run_entry_point(demo_features, tmp_path):
    """`mlflow run mlflow/ -e train --env-manager local` on a copy laid out like the repository."""
    from mlflow.tracking import MlflowClient

    shutil.copytree(ROOT / "mlflow", tmp_path / "mlflow")
    (tmp_path / "cli.py").symlink_to(ROOT / "cli.py")
    (tmp_path / "pipeline").symlink_to(ROOT / "pipeline")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    cmd = [str(Path(sys.executable).parent / "mlflow"), "run", str(tmp_path / "mlflow"), "-e", "train",
           "--env-manager", "local", "--experiment-name", "mlproject-test", "-P", f"data={demo_features.out_dir}",
           "-P", "max_steps=4", "-P", "eval_every=4", "-P", "hidden=8", "-P", "embed_dim=8"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_id = re.search(r"^run_id: ([0-9a-f]{32})$", proc.stdout, re.MULTILINE).group(1)
    run = MlflowClient(uri).get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.params["train.max_steps"] == "4"
    assert (tmp_path / "runs" / "train" / run_id / "best.pt").exists()
