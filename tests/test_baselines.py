"""pipeline.tasks.mortality.baselines + training.baselines + runs.formats: the featurizer against a hand computation,
the array predictors against scikit-learn, choices made on validation, the model file, and a
baseline run through evaluate, score and the pyfunc like any run (same columns, same errors)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from helpers.runs import trained_run
from helpers.serving import INPUT, PARAMS, mlflow_serve, records, strict

from pipeline.core.errors import ConfigError
from pipeline.data.features import FeatureSet, load_split
from pipeline.engine.checkpoints import CheckpointError
from pipeline.runs import formats, store
from pipeline.runs.load import load_run
from pipeline.tasks.mortality.baselines.config import BaselineConfig, BaselineKind
from pipeline.tasks.mortality.baselines.featurize import DENSE, Featurizer, context_ages
from pipeline.tasks.mortality.baselines.fit import BaselineFitError, fit_gbm, fit_logreg, nll, tree_predictor
from pipeline.tasks.mortality.baselines.model import BaselineFileError, BaselineModel
from pipeline.tasks.mortality.risk import RISK_COLUMNS

ROOT = Path(__file__).resolve().parents[1]
FAST = dict(logreg_c_steps=3, gbm_leaves=(7,), gbm_min_leaf=(20,), gbm_max_rounds=60, gbm_patience=10, threads=1)

# ---------------------------------------------------------------------------- the featurizer by hand

VOCAB = {"tokens": ["<pad>", "a", "b", "c", "d", "e"], "context": ["<pad>", "age:<other>", "age:40-49", "gender:F",
                                                                    "age:90+"]}


def hand_set() -> FeatureSet:
    """Three admissions: four bags (one before admission), none, one; see test_featurizer_by_hand."""
    bags = [[[1, 2], [2], [2, 3], [3, 5]], [], [[4]]]
    hours = [[-48.0, 3.0, 20.0, 23.0], [], [23.0]]
    bag_off = np.cumsum([0] + [len(b) for b in bags])
    flat = [b for adm in bags for b in adm]
    tok_off = np.cumsum([0] + [len(b) for b in flat])
    return FeatureSet(keys=np.array(["k0", "k1", "k2"]), label=np.array([1, 0, 0], np.float32),
                      n_events=np.array([9, 0, 1], np.int32),
                      context=np.array([[2, 3], [4, 0], [1, 3]], np.int32), bag_offsets=bag_off.astype(np.int64),
                      bag_hours=np.array([h for adm in hours for h in adm], np.float32),
                      token_offsets=tok_off.astype(np.int64),
                      tokens=np.array([t for b in flat for t in b], np.int32))


def test_context_ages():
    ages = context_ages(VOCAB["context"] + ["age:18-29", "admission_type:EMERGENCY"])
    assert np.isnan(ages[[0, 1, 3, 6]]).all() and ages[2] == 45.0 and ages[4] == 90.0 and ages[5] == 24.0


def test_featurizer_by_hand():
    """V = 6 tokens, C = 5 context ids; recent = bags starting >= 24 - 12 = 12 h after admission."""
    fz = Featurizer.from_vocab(VOCAB, prediction_hours=24.0, recent_hours=12.0)
    fs = hand_set()
    fz.fit(fs)
    assert fz.age_fill == (45.0 + 90.0) / 2  # admissions 0 and 1 have an age token, admission 2 only <other>
    x = fz.matrix(fs)
    v, c = 6, 5
    assert x.shape == (3, 2 * v + c + len(DENSE)) == (3, fz.n_columns)
    expected = np.zeros(x.shape)
    # admission 0: bags {a,b} at -48 h, {b} at 3 h, {b,c} at 20 h, {c,e} at 23 h
    expected[0, [1, 2, 3, 5]] = np.log1p([1, 3, 2, 1])  # window: a once, b in 3 bags, c in 2, e once
    expected[0, [v + 2, v + 3, v + 5]] = np.log1p([1, 2, 1])  # recent (20 h, 23 h): b once, c twice, e once
    expected[0, [2 * v + 2, 2 * v + 3]] = 1.0  # context age:40-49, gender:F
    expected[0, 2 * v + c:] = [45.0, np.log1p(9), np.log1p(4), np.log1p(2)]
    # admission 1: no bags, context age:90+
    expected[1, 2 * v + 4] = 1.0
    expected[1, 2 * v + c:] = [90.0, 0.0, 0.0, 0.0]
    # admission 2: {d} at 23 h, context age:<other> (age filled with the training mean) and gender:F
    expected[2, [4, v + 4]] = np.log1p(1)
    expected[2, [2 * v + 1, 2 * v + 3]] = 1.0
    expected[2, 2 * v + c:] = [67.5, np.log1p(1), np.log1p(1), np.log1p(1)]
    np.testing.assert_allclose(x.dense(np.arange(x.shape[1])), expected)
    np.testing.assert_allclose(x.to_csr().toarray(), expected)
    assert fz.column_names()[2 * v + c:] == list(DENSE) and fz.column_names()[v + 2] == "recent:2"


def test_featurizer_arrays_round_trip():
    fz = Featurizer.from_vocab(VOCAB, None, 24.0).fit(hand_set())
    assert fz.recent_from == 0.0  # the prediction time defaults to 24 h
    assert Featurizer.from_arrays(fz.to_arrays()) == fz


# ---------------------------------------------------------------------------- the predictors against scikit-learn


def _synthetic_rows(n: int, seed: int):
    """A FeatureSet of n admissions whose label depends on token 3's count and the age."""
    rng = np.random.default_rng(seed)
    bags, hours, ctx, events = [], [], [], []
    for _ in range(n):
        nb = int(rng.integers(0, 6))
        bags.append([sorted(set(rng.integers(1, 6, size=int(rng.integers(1, 4))).tolist())) for _ in range(nb)])
        hours.append(sorted(rng.uniform(-30, 24, size=nb).tolist()))
        ctx.append([int(rng.choice([1, 2, 4])), 3])
        events.append(int(rng.integers(0, 40)))
    c3 = np.array([sum(3 in b for b in adm) for adm in bags])
    age = np.array([{1: 60.0, 2: 45.0, 4: 90.0}[c[0]] for c in ctx])
    p = 1 / (1 + np.exp(-(-2.0 + 0.8 * c3 + 0.03 * (age - 60))))
    y = (rng.uniform(size=n) < p).astype(np.float32)
    bag_off = np.cumsum([0] + [len(b) for b in bags])
    flat = [b for adm in bags for b in adm]
    tok_off = np.cumsum([0] + [len(b) for b in flat])
    return FeatureSet(keys=np.array([f"k{i}" for i in range(n)]), label=y, n_events=np.array(events, np.int32),
                      context=np.array(ctx, np.int32), bag_offsets=bag_off.astype(np.int64),
                      bag_hours=np.array([h for adm in hours for h in adm], np.float32),
                      token_offsets=tok_off.astype(np.int64), tokens=np.array([t for b in flat for t in b], np.int32))


@pytest.fixture(scope="module")
def toy():
    fz = Featurizer.from_vocab(VOCAB, 24.0, 24.0)
    tr, va = _synthetic_rows(600, 0), _synthetic_rows(300, 1)
    fz.fit(tr)
    return fz, tr, va, fz.matrix(tr), fz.matrix(va)


@pytest.mark.slow
def test_logreg_chooses_c_on_validation_and_matches_sklearn(toy):
    from sklearn.linear_model import LogisticRegression

    from pipeline.tasks.mortality.baselines.fit import _standardized

    fz, tr, va, xtr, xva = toy
    pred, info = fit_logreg(fz, xtr, tr.label, xva, va.label, BaselineConfig(**FAST))
    vals = [s["val_nll"] for s in info["search"]]
    assert info["val_nll"] == min(vals) and info["C"] == info["search"][int(np.argmin(vals))]["C"]
    est = LogisticRegression(C=info["C"], solver="lbfgs", max_iter=2000).fit(
        _standardized(xtr, pred.columns, pred.center, pred.scale), tr.label)
    ref = est.decision_function(_standardized(xva, pred.columns, pred.center, pred.scale))
    np.testing.assert_allclose(pred.logits(xva), ref, rtol=1e-6, atol=1e-6)  # folding the scaling in is exact
    assert math.isclose(nll(va.label, ref), info["val_nll"], rel_tol=1e-6)


@pytest.mark.slow
def test_gbm_keeps_the_best_round_on_validation_and_matches_sklearn(toy):
    from sklearn.ensemble import HistGradientBoostingClassifier

    fz, tr, va, xtr, xva = toy
    pred, info = fit_gbm(fz, xtr, tr.label, xva, va.label, BaselineConfig(**FAST))
    cols = pred.columns
    est = HistGradientBoostingClassifier(learning_rate=0.05, max_iter=60, max_leaf_nodes=7, min_samples_leaf=20,
                                         l2_regularization=1.0, early_stopping=True, n_iter_no_change=10,
                                         scoring="loss", random_state=0)
    est.fit(xtr.dense(cols), tr.label, X_val=xva.dense(cols), y_val=va.label)
    staged = list(est.staged_decision_function(xva.dense(cols)))
    losses = [nll(va.label, z) for z in staged]
    assert info["rounds"] == int(np.argmin(losses)) + 1 < est.n_iter_  # cut back to the best round
    np.testing.assert_allclose(pred.logits(xva), staged[info["rounds"] - 1], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(tree_predictor(est, cols).logits(xva), est.decision_function(xva.dense(cols)),
                               rtol=1e-9, atol=1e-9)
    assert math.isclose(info["val_nll"], min(losses), rel_tol=1e-9)


def test_one_class_training_data_is_refused(toy):
    fz, tr, va, xtr, xva = toy
    with pytest.raises(BaselineFitError, match="the train split needs admissions of both labels"):
        fit_logreg(fz, xtr, np.zeros_like(tr.label), xva, va.label, BaselineConfig(**FAST))


def test_a_baseline_declares_what_scoring_needs(toy):
    """models.predict.RiskModel: a point model (K = 1) that scores a FeatureSet itself, without the value
    channel; predict asks it directly, so scoring one never builds a torch batch."""
    from pipeline.tasks.mortality import predict
    from pipeline.tasks.mortality.baselines.predictors import LinearPredictor

    fz, _, va, _, _ = toy
    pred = LinearPredictor(np.array([0, 1]), np.zeros(2), np.ones(2), np.array([0.5, -0.25]), -1.0)
    model = BaselineModel(BaselineKind.LOGREG, fz, pred)
    assert isinstance(model, predict.RiskModel)
    assert (model.components, model.value_channel, model.gaussian_logits, model.scores_features) == (1, False, False,
                                                                                                     True)
    np.testing.assert_array_equal(predict.feature_logits(model, va, 3, 64), model.feature_logits(va, 3))


@pytest.mark.parametrize("kind", list(BaselineKind))
@pytest.mark.slow
def test_model_file_round_trip_without_pickle(toy, kind, tmp_path):
    fz, tr, va, xtr, xva = toy
    fit = fit_logreg if kind == BaselineKind.LOGREG else fit_gbm
    pred, info = fit(fz, xtr, tr.label, xva, va.label, BaselineConfig(**FAST))
    model = BaselineModel(kind, fz, pred, {"refer_threshold": 1e-9, "model_config": {"x": 1}})
    path = model.save(tmp_path / formats.BASELINE_FILE)
    with np.load(path, allow_pickle=False) as z:  # numbers and one JSON string: nothing to unpickle
        assert all(z[k].dtype != object for k in z.files)
    back = BaselineModel.load(path)
    np.testing.assert_array_equal(back.logits(va), model.logits(va))
    logits = back.feature_logits(va, 3)
    assert logits.shape == (3, 1, len(va)) and (logits == logits[0]).all()  # a point model: one draw, repeated
    loaded, info = formats.load_model(path)
    assert info.model_kind == kind.value and info.model_format == "baseline" and info.score_samples == 1
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / formats.BASELINE_FILE).write_bytes(b"not an npz")
    with pytest.raises(BaselineFileError, match="not a baseline model file"):
        BaselineModel.load(tmp_path / "bad" / formats.BASELINE_FILE)


def test_formats_by_file_name(tmp_path):
    assert formats.format_of("x/best.pt") is formats.ModelFormat.TORCH
    assert formats.format_of("x/baseline.npz") is formats.ModelFormat.BASELINE
    with pytest.raises(CheckpointError, match="not a model file"):
        formats.format_of("x/model.pkl")
    assert formats.model_file(tmp_path) is None
    (tmp_path / "baseline.npz").write_bytes(b"")
    assert formats.model_file(tmp_path) == tmp_path / "baseline.npz"


def test_config_is_checked():
    with pytest.raises(ConfigError, match="gbm_leaves"):
        BaselineConfig(gbm_leaves=(1,))
    assert BaselineConfig(gbm_leaves=[7, 15]).to_dict()["gbm_leaves"] == [7, 15]


# ---------------------------------------------------------------------------- a baseline run like any run


@pytest.fixture(scope="module")
def synth_dir(synth_features):
    return synth_features[1].out_dir


@pytest.fixture(scope="module")
def baseline_runs(synth_dir, tracking_store, tmp_path_factory):
    from pipeline.workflows.baselines_run import train_baseline

    out = tmp_path_factory.mktemp("baseline_runs")
    return {k.value: train_baseline(synth_dir, k, BaselineConfig(**FAST), out_dir=out / k.value,
                                    experiment="baseline-tests", run_name=k.value) for k in BaselineKind}


@pytest.fixture(scope="module")
def rank1_run(synth_dir, tmp_path_factory, tracking_store):
    return trained_run(tmp_path_factory, synth_dir)


@pytest.mark.parametrize("kind", list(BaselineKind))
def test_baseline_run_is_logged_and_evaluated_as_a_point_model(baseline_runs, synth_dir, kind, tmp_path):
    from mlflow.tracking import MlflowClient

    from pipeline.workflows.evaluate import EvalConfig, evaluate_run

    r = baseline_runs[kind.value]
    run = MlflowClient(store.tracking_uri()).get_run(r.run_id)
    assert run.data.params["model_kind"] == kind.value and run.data.tags["model_format"] == "baseline"
    assert "best_val_nll" in run.data.metrics and run.info.status == "FINISHED"
    assert run.data.tags[store.RELEASE_TAG] == "mimic-iii" and run.data.tags[store.SPLIT_MODE_TAG]  # runs.record's tags
    info = json.loads((r.out_dir / store.MODEL_INFO).read_text())
    assert sum(info["val_reliability"]["counts"]) == info["val_metrics"]["n"]  # score's cohort report draws it
    result = evaluate_run(r.run_id, "test", EvalConfig(n_bootstrap=20, threads=1), out_dir=tmp_path)
    rep = result.report
    assert (rep["samples"], rep["components"]) == (1, 1) and abs(rep["mean_mutual_information"]) < 1e-12
    assert rep["model_kind"] == kind.value and rep["true_risk"] is not None  # synthetic: the true-risk reference
    val = evaluate_run(r.run_id, "val", EvalConfig(n_bootstrap=0, threads=1, log_to_run=False), out_dir=tmp_path / "v")
    val_file = synth_dir / "val.parquet"
    assert val.report["n"] == pq.read_metadata(val_file).num_rows  # evaluate takes the whole split
    # best_val_nll is the selection half's (the calibration half is kept apart): the same NLL from the scores
    from pipeline.data.features import calibration_mask
    from pipeline.serving import score as sc

    scores = pd.read_parquet(sc.score(f"runs:/{r.run_id}/model", tmp_path / "val.parquet", data=val_file,
                                      cfg=sc.ScoreConfig(threads=1)).out)
    both = pd.read_parquet(val_file, columns=["key", "label"]).merge(scores, on="key")
    sel = both[~calibration_mask(both["key"], 0.5)]
    p = sel["risk_mean"].to_numpy()
    assert math.isclose(nll(sel["label"].to_numpy(), np.log(p) - np.log1p(-p)), r.val_nll, rel_tol=1e-5)


def test_compare_takes_baseline_runs(baseline_runs, tmp_path):
    from pipeline.reports.compare import compare
    from pipeline.workflows.evaluate import EvalConfig, evaluate_run

    ids = [r.run_id for r in baseline_runs.values()]
    for rid in ids:
        for split in ("val", "test"):
            evaluate_run(rid, split, EvalConfig(n_bootstrap=0, threads=1), out_dir=tmp_path / rid / split)
    summary, _ = compare(run_ids=ids)
    assert {r["model"] for r in summary} == {"logreg", "gbm", "true risk"}
    assert all(r["seeds"] == 1 for r in summary if r["model"] != "true risk")


def test_score_and_pyfunc_give_the_risk_table_of_a_torch_run(baseline_runs, rank1_run, synth_dir, tmp_path):
    import mlflow
    from pipeline.serving import score as sc

    src = synth_dir / "test.parquet"
    cfg = sc.ScoreConfig(samples=None, batch_size=64, threads=1)
    torch_scores = pd.read_parquet(sc.score(rank1_run, tmp_path / "rank1.parquet", data=src, cfg=cfg).out)
    frame = pq.read_table(src).to_pandas()
    for kind, r in baseline_runs.items():
        s = sc.score(f"runs:/{r.run_id}/model", tmp_path / f"{kind}.parquet", data=src, cfg=cfg)
        scores = pd.read_parquet(s.out)
        assert list(scores.columns) == list(RISK_COLUMNS) and scores.dtypes.equals(torch_scores.dtypes)
        assert scores["key"].tolist() == torch_scores["key"].tolist() and s.components == 1
        assert (scores["risk_sd"] == 0).all() and (scores["mutual_info"] == 0).all() and not scores["has_spread"].any()
        # a point model's refer rule ranks by what it has: auto is the Venn-Abers interval's decision uncertainty
        # (its legacy refer measure stays the predictive entropy)
        from pipeline.bayes.referral.policy import Predictive
        from pipeline.tasks.mortality.risk import policy_of

        info = load_run(f"runs:/{r.run_id}/model").info
        policy = policy_of(info)
        assert info.refer_measure == "entropy" and policy.ordering.value in ("va_decision", "risk")
        cols = policy.apply(Predictive(scores["risk_mean"].to_numpy()))
        np.testing.assert_array_equal(scores["refer"], cols.refer)
        np.testing.assert_allclose(scores["risk_calibrated"], cols.risk_calibrated, rtol=1e-12)
        assert s.referred == scores["refer"].sum() and s.high_risk == scores["high_risk"].sum()
        assert (scores["risk_p05"] == scores["risk_mean"]).all() and (scores["risk_p95"] == scores["risk_mean"]).all()
        model = BaselineModel.load(r.model_file)
        z = model.logits(load_split(src)).astype(np.float32)
        np.testing.assert_allclose(scores["risk_mean"], 1 / (1 + np.exp(-z.astype(np.float64))), rtol=1e-6)
        out = mlflow.pyfunc.load_model(f"runs:/{r.run_id}/model").predict(frame)
        pd.testing.assert_frame_equal(out.reset_index(drop=True), scores, check_exact=False, rtol=1e-6)


def _error(predict, frame) -> str:
    with pytest.raises(Exception) as info:
        predict(frame)
    return str(info.value)


@pytest.mark.parametrize("breakage", ["out_of_vocabulary", "missing_column", "null_key", "lengths"])
def test_pyfunc_errors_on_bad_input_are_the_torch_models(baseline_runs, rank1_run, synth_dir, breakage):
    import mlflow

    frame = pq.read_table(synth_dir / "test.parquet").to_pandas().head(4)
    if breakage == "out_of_vocabulary":
        frame.at[1, "bags"], frame.at[1, "bag_hours"] = [[1, 10**6]], [0.0]
    elif breakage == "missing_column":
        frame = frame.drop(columns="context")
    elif breakage == "null_key":
        frame.at[2, "key"] = None
    else:  # one more bag start than bags
        frame.at[3, "bag_hours"] = [*frame.at[3, "bag_hours"], 99.0]
    want = _error(mlflow.pyfunc.load_model(f"runs:/{rank1_run}/model").predict, frame)
    for r in baseline_runs.values():
        assert _error(mlflow.pyfunc.load_model(f"runs:/{r.run_id}/model").predict, frame) == want


def test_cli_trains_a_baseline_and_refuses_lstm_settings(synth_dir, tmp_path):
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}", "PYTHONPATH": str(ROOT)}
    base = [sys.executable, str(ROOT / "cli.py"), "train", "--data", str(synth_dir), "--model", "logreg"]
    bad = subprocess.run([*base, "--hidden", "32", "--max-steps", "10"], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=300)
    assert (bad.returncode == 2
            and "logreg is a classical baseline: --max-steps, --lstm-hidden do not apply" in bad.stderr)
    assert "Traceback" not in bad.stderr
    ok = subprocess.run([*base, "--threads", "1", "--no-tracking", "--out", str(tmp_path / "lr")], cwd=tmp_path,
                        env=env, capture_output=True, text=True, timeout=600)
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert "logreg: C=" in ok.stdout and "run_id: none (tracking off)" in ok.stdout
    assert (tmp_path / "lr" / "baseline.npz").exists() and (tmp_path / "lr" / "model_info.json").exists()


def test_grid_runs_baselines_once_per_split():
    from pipeline.workflows.grid import GridConfig, grid_jobs

    grid = grid_jobs(GridConfig(seeds=(0, 1, 2), variants=("deterministic", "gbm"), split_modes=("random", "era")))
    assert sorted(grid) == sorted([("deterministic", m, s) for m in ("random", "era") for s in (0, 1, 2)]
                                  + [("gbm", "random", 0), ("gbm", "era", 0)])


@pytest.fixture(scope="module")
def census(synth_dir) -> pd.DataFrame:
    """Two test admissions, the second with its events removed."""
    frame = pq.read_table(synth_dir / "test.parquet", columns=INPUT).to_pandas().head(2)
    frame.at[1, "bags"], frame.at[1, "bag_hours"], frame.at[1, "n_events"] = [], [], 0
    return frame.reset_index(drop=True)


@pytest.mark.slow
def test_mlflow_models_serve_answers_for_a_baseline(baseline_runs, census, tmp_path):
    """`mlflow models serve` of the gbm run answers what the in-process pyfunc answers."""
    import urllib.request

    import mlflow

    uri = f"runs:/{baseline_runs['gbm'].run_id}/model"
    expected = mlflow.pyfunc.load_model(uri).predict(census, params=PARAMS)
    with mlflow_serve(uri, tmp_path) as port:
        req = urllib.request.Request(f"http://127.0.0.1:{port}/invocations",
                                     data=json.dumps(records(census, [24.0, 5.5])).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            answer = json.loads(r.read(), parse_constant=strict)
    out = pd.DataFrame(answer["predictions"])
    assert list(out.columns) == list(RISK_COLUMNS) and out["key"].tolist() == census["key"].tolist()
    np.testing.assert_allclose(out["risk_mean"], expected["risk_mean"], rtol=1e-6)
    assert out["no_events"].tolist() == [False, True] and out["before_prediction_time"].tolist() == [False, True]


@pytest.mark.slow
def test_spark_udf_scores_with_a_baseline(baseline_runs, census, tmp_path, monkeypatch):
    pytest.importorskip("pyspark", reason="pyspark is the `spark` extra: pip install -e '.[spark]'")
    from pyspark.sql import SparkSession

    import mlflow

    uri = f"runs:/{baseline_runs['logreg'].run_id}/model"
    expected = mlflow.pyfunc.load_model(uri).predict(census, params=PARAMS)
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    monkeypatch.setenv("SPARK_LOCAL_IP", "127.0.0.1")
    spark = (SparkSession.builder.master("local[1]").appName("baseline-udf")
             .config("spark.ui.enabled", "false").config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.sql.shuffle.partitions", "1").config("spark.local.dir", str(tmp_path)).getOrCreate())
    try:
        path = tmp_path / "census.parquet"
        census.to_parquet(path)
        sdf = spark.read.parquet(str(path)).coalesce(1)
        udf = mlflow.pyfunc.spark_udf(spark, uri, env_manager="local", params=PARAMS)
        scored = sdf.withColumn("risk", udf(*[sdf[c] for c in INPUT])).select("risk.*").toPandas()
    finally:
        spark.stop()
    assert list(scored.columns) == list(RISK_COLUMNS) and scored["key"].tolist() == census["key"].tolist()
    np.testing.assert_allclose(scored["risk_mean"], expected["risk_mean"], rtol=1e-6)
