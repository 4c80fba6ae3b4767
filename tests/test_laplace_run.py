"""A Laplace run end to end: `cli.py laplace` on a trained deterministic run -> a new MLflow run
(tagged with its parent) that evaluate, compare, score and the pyfunc take like any run; and its
errors (a Bayesian run, a Laplace run, S larger than the network) as one line each."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers.runs import trained_run
from typer.testing import CliRunner

import cli
from pipeline.bayes.laplace import LaplaceConfig, LaplaceError, Predictive
from pipeline.data import batches, features
from pipeline.engine import predict
from pipeline.reports import compare
from pipeline.runs import store
from pipeline.runs.load import load_run
from pipeline.tasks.mortality import risk
from pipeline.workflows import evaluate
from pipeline.workflows.laplace_run import PARENT_TAG, fit_laplace_run

pytestmark = pytest.mark.usefixtures("tracking_store")


@pytest.fixture(scope="module")
def map_run(tmp_path_factory, demo_features):
    return trained_run(tmp_path_factory, demo_features.out_dir, kind="deterministic")


@pytest.fixture(scope="module")
def laplace_config():
    return LaplaceConfig(subnet_size=300, prior_precision=1.0)


@pytest.fixture(scope="module")
def laplace_run(map_run, laplace_config, tmp_path_factory):
    out = tmp_path_factory.mktemp("laplace-run")
    return fit_laplace_run(map_run, laplace_config, samples=5, out_dir=out, experiment="laplace-tests")


def test_the_callers_config_is_left_as_it_was(laplace_run, laplace_config):
    """samples switches the run's predictive to Monte Carlo and the MAP run's bag limits apply, on a copy."""
    assert laplace_run.run_id
    assert laplace_config == LaplaceConfig(subnet_size=300, prior_precision=1.0)
    assert laplace_config.predictive is Predictive.PROBIT


def test_the_run_records_its_parent_and_posterior(laplace_run, map_run):
    client = store.client()
    run = client.get_run(laplace_run.run_id)
    assert run.data.tags[PARENT_TAG] == map_run == laplace_run.parent_run_id
    assert run.data.tags["model_label"] == laplace_run.label == "laplace-wasserstein-300"
    assert run.data.params["laplace.subnet_size"] == "300" and run.data.params["train.seed"] == "0"
    rm = load_run(laplace_run.run_id)
    assert rm.info.model_kind == "laplace" and rm.info.score_samples == 5
    assert rm.info.refer_threshold == pytest.approx(laplace_run.refer_threshold)
    assert rm.model.subnet_size == 300 and rm.model.predictive.value == "mc"


def test_it_records_what_a_trained_run_records(laplace_run, map_run, tmp_path):
    """One writer of a run (runs.record): the same tags, model_info keys and artifacts as its MAP run."""
    client = store.client()
    lap, mp = client.get_run(laplace_run.run_id), client.get_run(map_run)
    for tag in (store.FEATURES_DIR_TAG, store.SPLIT_MODE_TAG, store.RELEASE_TAG):
        assert lap.data.tags[tag] == mp.data.tags[tag]
    import mlflow

    lap_info, map_info = (json.loads(Path(mlflow.artifacts.download_artifacts(
        run_id=r, artifact_path=store.MODEL_INFO, dst_path=str(tmp_path / r))).read_text())
        for r in (laplace_run.run_id, map_run))
    for key in ("refer_threshold", "refer_fraction", "score_samples", "val_metrics", "val_reliability"):
        assert key in lap_info and key in map_info
    assert lap_info["refer_fraction"] == map_info["refer_fraction"]  # the MAP run's, not a constant
    assert sum(lap_info["val_reliability"]["counts"]) == lap_info["val_metrics"]["n"]
    assert {m for m in lap.data.metrics if m.startswith("best_val_")} == {
        m for m in mp.data.metrics if m.startswith("best_val_")}


def test_evaluate_and_compare_take_it_like_any_run(laplace_run, map_run, demo_features, tmp_path):
    cfg = evaluate.EvalConfig(n_bootstrap=20)
    lap = evaluate.evaluate_run(laplace_run.run_id, "test", cfg, out_dir=tmp_path / "lap")
    assert lap.report["model_label"] == laplace_run.label and lap.report["samples"] == 5  # the run's score_samples
    assert lap.logits.shape == (5, 1, demo_features.manifest["splits"]["test"]["admissions"])
    assert lap.report["mean_mutual_information"] > 0  # Monte Carlo draws of the linearized model differ
    evaluate.evaluate_run(map_run, "test", cfg, out_dir=tmp_path / "map")
    summary, _ = compare.compare(run_ids=[map_run, laplace_run.run_id])
    assert {r["model"] for r in summary} >= {"deterministic", laplace_run.label}


def test_score_and_pyfunc_agree_with_predict(laplace_run, demo_features, tmp_path):
    import mlflow
    from pipeline.serving.score import ScoreConfig, score

    summary = score(f"runs:/{laplace_run.run_id}/model", tmp_path / "s.parquet",
                    data=demo_features.out_dir / "test.parquet", cfg=ScoreConfig(seed=3))
    scores = pd.read_parquet(summary.out)
    assert summary.samples == 5 and len(scores) == demo_features.manifest["splits"]["test"]["admissions"]
    frame = pd.read_parquet(demo_features.out_dir / "test.parquet")
    served = mlflow.pyfunc.load_model(f"runs:/{laplace_run.run_id}/model").predict(frame, params={"samples": 5})
    assert list(served.columns) == list(risk.RISK_COLUMNS)
    rm = load_run(laplace_run.run_id)
    fs = features.load_split(demo_features.out_dir / "test.parquet")
    # the probit mean needs no draws: the Monte Carlo mean approaches it (5 draws: loosely)
    rm.model.predictive = Predictive.PROBIT
    probit = risk.score_features(rm.model, fs, 1, 0.5)["risk_mean"].to_numpy()
    assert np.corrcoef(probit, scores["risk_mean"].to_numpy())[0, 1] > 0.95


def test_errors_are_one_line(tmp_path_factory, demo_features, laplace_run, map_run):
    rank1 = trained_run(tmp_path_factory, demo_features.out_dir, kind="rank1")
    with pytest.raises(LaplaceError, match="Laplace needs a deterministic model with one component"):
        fit_laplace_run(rank1, LaplaceConfig(subnet_size=10, prior_precision=1.0), tracking=False)
    with pytest.raises(LaplaceError, match="already a Laplace run"):
        fit_laplace_run(laplace_run.run_id, LaplaceConfig(subnet_size=10, prior_precision=1.0), tracking=False)
    res = CliRunner().invoke(cli.app, ["laplace", "--run", map_run, "--subnet-size", "99999999", "--no-tracking"])
    assert res.exit_code == 2 and "exceeds the model's" in res.output and "Traceback" not in res.output
    assert len(res.output.strip().splitlines()) == 1
    res = CliRunner().invoke(cli.app, ["laplace", "--run", map_run, "--prior-precision", "lots", "--no-tracking"])
    assert res.exit_code == 2 and "'auto' or a number" in res.output


@pytest.mark.parametrize("args, label", [
    (["--selection", "last-layer"], "laplace-last-layer-17"),  # the output layer of the tiny model: 16 + 1
    (["--selection", "random"], "laplace-random-1000"),  # the default S
    (["--hessian", "diag", "--subnet-size", "5"], "laplace-diag"),  # S is ignored by diag
], ids=["last-layer", "random", "diag"])
def test_cli_subnet_size_defaults_to_what_the_selection_needs(map_run, tmp_path, args, label):
    res = CliRunner().invoke(cli.app, ["laplace", "--run", map_run, *args, "--prior-precision", "1", "--no-tracking",
                                       "--out", str(tmp_path / "run")])
    assert res.exit_code == 0, res.output
    assert res.output.startswith(f"{label}: ")
    recorded = tmp_path / "run" / "settings.toml"  # the run's settings, as --config reads them
    again = CliRunner().invoke(cli.app, ["laplace", "--run", map_run, "--config", str(recorded), "--print-config"])
    assert again.exit_code == 0 and again.output == recorded.read_text()


@pytest.fixture(scope="module")
def probit_run(map_run, laplace_config, tmp_path_factory):
    """The default predictive (probit): the risk table's spread comes from each admission's Gaussian logit."""
    return fit_laplace_run(map_run, laplace_config, out_dir=tmp_path_factory.mktemp("probit-run"),
                           experiment="laplace-tests")


def test_a_probit_run_scores_its_gaussian_spread_and_refers(probit_run, demo_features, tmp_path):
    import mlflow
    from pipeline.serving.score import ScoreConfig, score

    rm = load_run(probit_run.run_id)
    assert rm.model.predictive is Predictive.PROBIT and rm.info.score_samples == 1
    assert rm.info.refer_measure in {m.value for m in risk.metrics.Measure}
    val = demo_features.out_dir / "val.parquet"
    summary = score(f"runs:/{probit_run.run_id}/model", tmp_path / "v.parquet", data=val, cfg=ScoreConfig(seed=0))
    t = pd.read_parquet(summary.out)
    fs = features.load_split(val)
    mu, var = predict.predict_moments(rm.model, [batches.collate(fs, np.arange(len(fs)))])
    reached = var > 0
    assert reached.any()
    assert list(t["has_spread"]) == list(reached)  # an admission on no subnetwork weight says so
    spread = t[t["has_spread"]]
    assert (spread["risk_sd"] > 0).all() and (spread["mutual_info"] > 0).all()
    assert (spread["risk_p05"] < spread["risk_mean"]).all() and (spread["risk_mean"] < spread["risk_p95"]).all()
    assert (t.loc[~t["has_spread"], "risk_sd"] == 0).all()
    policy = risk.policy_of(rm.info)  # fitted on the MAP run's calibration half, its draws the Gaussian logit's
    assert policy is not None and policy.ordering.value == "risk" and probit_run.policy is not None  # auto
    assert list(t["refer"]) == list(policy.rule.refer(t["risk_calibrated"].to_numpy()))
    assert t["risk_calibrated"].notna().all() and list(t["high_risk"]) == list(
        t["risk_calibrated"] >= policy.threshold.threshold)
    served = mlflow.pyfunc.load_model(f"runs:/{probit_run.run_id}/model").predict(pd.read_parquet(val))
    pd.testing.assert_frame_equal(served.reset_index(drop=True), t.reset_index(drop=True), check_exact=False,
                                  rtol=1e-12, atol=1e-12)
