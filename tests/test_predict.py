"""pipeline.engine.predict: (S, K, N) logits with per-member draws, risk table, refer threshold."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from helpers.features import N_CONTEXT, N_TOKENS, write_features

from pipeline.bayes import metrics
from pipeline.bayes.layers import Sampling, set_sampling
from pipeline.data import batches, features
from pipeline.engine import predict
from pipeline.tasks.mortality import MortalityConfig, build_model, risk
from pipeline.tasks.mortality import predict as mpredict

TINY = {"embedding_dim": 6, "lstm_hidden": 6, "dense_units": 6, "components": 3}


@pytest.fixture(scope="module")
def val(tmp_path_factory):
    out = write_features(tmp_path_factory.mktemp("feats"), n_train=8, n_val=21, n_test=4)
    return features.load_split(out / "val.parquet")


def _model(kind: str, seed: int = 0):
    torch.manual_seed(seed)
    return build_model(kind, MortalityConfig(N_TOKENS, N_CONTEXT, **TINY))


@pytest.mark.parametrize("kind, k", [("deterministic", 1), ("bayes-emb", 1), ("rank1", 3), ("batchensemble", 3),
                                     ("deep-ensemble", 3)])
def test_predict_logits_shape_and_state_restored(val, kind, k):
    model = _model(kind)
    model.train()
    logits = predict.predict_logits(model, batches.iter_batches(val, 8), samples=4)
    assert logits.shape == (4, k, len(val)) and np.isfinite(logits).all()
    assert model.training  # evaluation mode is undone afterwards
    layers = [m for m in model.modules() if hasattr(m, "sampling")]
    assert all(m.sampling == Sampling.PER_EXAMPLE for m in layers)


def test_predict_logits_one_draw_per_member_block(val):
    """Per-member sampling: every draw is one weight set for the whole batch.

    With one batch holding the same admission twice, both copies get the same logits in every
    draw up to float rounding (the batched products may round rows at different positions
    differently); per-example sampling gives them different noise, far beyond that tolerance.
    """
    torch.manual_seed(0)
    model = build_model("rank1", MortalityConfig(N_TOKENS, N_CONTEXT, init_stddev=0.1, **TINY))
    batch = batches.collate(val, [0, 0, 5])
    logits = predict.predict_logits(model, [batch], samples=5)  # (5, 3, 3)
    np.testing.assert_allclose(logits[:, :, 0], logits[:, :, 1], rtol=0, atol=1e-6)
    assert np.unique(logits[:, :, 0]).size == 15  # 15 distinct draws
    model.eval()
    with torch.no_grad():  # per-example draws (the training mode): the copies differ
        per_example = model(batch, samples=5).numpy()  # (S·K, B)
    assert np.abs(per_example[:, 0] - per_example[:, 1]).max() > 1e-3


@pytest.mark.parametrize("kind", ["deterministic", "deep-ensemble"])
def test_deterministic_logits_do_not_depend_on_batching(val, kind):
    model = _model(kind)
    a = predict.predict_logits(model, batches.iter_batches(val, 5), samples=2)
    b = predict.predict_logits(model, batches.iter_batches(val, 64), samples=2)
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert np.array_equal(a[0], a[1])  # no weight noise: samples repeat


@pytest.mark.parametrize("kind", ["deterministic", "deep-ensemble"])
def test_feature_logits_in_row_order(val, kind):
    """Length-sorted batches, logits put back in the FeatureSet's row order."""
    model = _model(kind)
    assert not np.array_equal(batches.length_order(val), np.arange(len(val)))  # the fixture needs reordering
    a = mpredict.feature_logits(model, val, samples=2, batch_size=4)
    b = predict.predict_logits(model, batches.iter_batches(val, 4), samples=2)  # file order
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_feature_logits_rank1_rows_follow_their_admission(val):
    """A rank-1 model's draws differ by batch, but row n is still admission n: scoring one admission
    at a time with the same draws for every row (samples, no noise: the posterior means) agrees."""
    model = _model("rank1")
    set_sampling(model, use_mean=True)
    a = mpredict.feature_logits(model, val, samples=1, batch_size=5)  # (1, K, N)
    one = [predict.predict_logits(model, [batches.collate(val, [i])], samples=1)[..., 0] for i in range(len(val))]
    np.testing.assert_allclose(a, np.stack(one, axis=-1), rtol=1e-4, atol=1e-5)


def test_risk_table_columns_and_values():
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 2, size=(5, 4, 6))  # (S, K, N)
    n_bags = np.array([3, 0, 1, 0, 2, 5])
    table = risk.risk_table(logits, [f"k{i}" for i in range(6)], refer_threshold=0.05,
                               n_events=n_bags * 10, n_bags=n_bags)
    assert list(table.columns) == list(risk.RISK_COLUMNS)
    p = 1 / (1 + np.exp(-logits.reshape(20, 6)))
    np.testing.assert_allclose(table["risk_mean"], p.mean(0), rtol=1e-12)
    np.testing.assert_allclose(table["risk_sd"], p.std(0), rtol=1e-9)
    np.testing.assert_allclose(table["risk_p05"], np.percentile(p, 5, axis=0), rtol=1e-12)
    np.testing.assert_allclose(table["risk_p95"], np.percentile(p, 95, axis=0), rtol=1e-12)
    np.testing.assert_allclose(table["mutual_info"], metrics.mutual_information(logits), rtol=1e-12)
    assert table["refer"].tolist() == (table["mutual_info"] > 0.05).tolist()
    assert table["no_events"].tolist() == [False, True, False, True, False, False]
    assert table["n_events"].tolist() == (n_bags * 10).tolist()
    assert (table["risk_p05"] <= table["risk_mean"]).all() and (table["risk_mean"] <= table["risk_p95"]).all()


def test_risk_table_passes_the_window_columns_through():
    logits = np.zeros((2, 1, 3))
    table = risk.risk_table(logits, ["a", "b", "c"], 0.1, observed_hours=[24.0, 5.5, 0.0],
                               before_prediction_time=[False, True, True])
    assert table["observed_hours"].tolist() == [24.0, 5.5, 0.0]
    assert table["before_prediction_time"].tolist() == [False, True, True]
    unknown = risk.risk_table(logits, ["a", "b", "c"], 0.1)  # features that do not record the window
    assert (unknown["observed_hours"] == -1.0).all() and not unknown["before_prediction_time"].any()
    noisy = risk.risk_table(logits, ["a", "b", "c"], 0.1, observed_hours=np.float32([23.9, np.nan, 1 / 3]))
    assert noisy["observed_hours"].tolist() == [23.9, -1.0, 0.333]  # float32 noise rounded off; nan -> -1


def test_risk_table_key_mismatch():
    with pytest.raises(ValueError, match="2 keys for 3 admissions"):
        risk.risk_table(np.zeros((2, 3)), ["a", "b"], 0.1)


@pytest.mark.parametrize("fraction", [0.05, 0.1, 0.25, 0.5])
def test_refer_threshold_refers_the_fraction(fraction):
    mi = np.random.default_rng(1).gamma(2.0, 0.01, size=1000)
    thr = risk.refer_threshold(mi, fraction)
    assert (mi > thr).mean() == pytest.approx(fraction, abs=0.002)


def test_refer_threshold_ties_and_bounds():
    assert not (np.zeros(50) > risk.refer_threshold(np.zeros(50), 0.1)).any()  # deterministic: nobody
    noise = np.random.default_rng(0).uniform(0, 1e-15, 50)  # rounding noise of identical draws
    assert risk.refer_threshold(noise, 0.1) == risk.MI_FLOOR and not (noise > risk.MI_FLOOR).any()
    mi = np.arange(10.0)
    assert not (mi > risk.refer_threshold(mi, 0.0)).any()
    for bad in (-0.1, 1.0):
        with pytest.raises(ValueError, match="refer fraction"):
            risk.refer_threshold(mi, bad)


def test_score_features_zero_bag_rows(val):
    model = _model("rank1")
    table = risk.score_features(model, val, samples=3, refer=0.0, batch_size=4)
    assert len(table) == len(val) and list(table["key"]) == list(val.keys)
    assert table["no_events"].tolist() == (val.n_bags == 0).tolist() and table["no_events"].any()
    assert table[["risk_mean", "risk_sd", "mutual_info"]].notna().all().all()
    assert (table["risk_sd"] > 0).all()  # rank-1 draws differ
    assert table["refer"].tolist() == (table["mutual_info"] > 0.0).tolist()


@pytest.mark.parametrize("kind", ["rank1", "bayes-full", "bayes-emb"])
def test_a_call_draws_from_its_own_generator_only(val, kind):
    """The draws follow the call's generator: the global stream neither feeds nor moves them, and the
    same seed gives the numbers of ``torch.manual_seed`` + the global generator."""
    model = _model(kind)
    model.eval()
    a = mpredict.feature_logits(model, val, samples=3, batch_size=8, generator=predict.seeded_generator(11))
    torch.manual_seed(999)
    state = torch.get_rng_state()
    b = mpredict.feature_logits(model, val, samples=3, batch_size=8, generator=predict.seeded_generator(11))
    assert torch.equal(state, torch.get_rng_state())  # the global generator was not used
    np.testing.assert_array_equal(a, b)
    torch.manual_seed(11)
    np.testing.assert_array_equal(a, mpredict.feature_logits(model, val, samples=3, batch_size=8))
    assert not np.array_equal(a, mpredict.feature_logits(model, val, samples=3, batch_size=8,
                                                        generator=predict.seeded_generator(12)))


@pytest.mark.slow
def test_concurrent_calls_on_one_model_give_the_answers_of_calls_alone(val):
    """The served model: request threads share one model in evaluation mode. Each call passes its
    sampling mode and generator, nothing is saved and restored on the model, so overlapping calls
    (other seeds, other samples, the training mode's per-example draws) neither fail nor change
    each other's answers."""
    from concurrent.futures import ThreadPoolExecutor

    model = _model("rank1")
    model.eval().requires_grad_(False)
    jobs = [(seed, samples) for seed in range(6) for samples in (2, 5)] * 3

    def call(job):
        seed, samples = job
        return risk.score_features(model, val, samples, 0.01, 4, generator=predict.seeded_generator(seed))

    alone = {job: call(job) for job in set(jobs)}

    def per_example_forward(_):  # a caller using the layers' own (training) mode at the same time
        with torch.no_grad():
            return model(batches.collate(val, np.arange(5)), samples=2).shape

    torch.set_num_threads(1)
    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(call, job) for job in jobs] + [pool.submit(per_example_forward, i) for i in range(8)]
        answers = [f.result() for f in futures[:len(jobs)]]
    for job, table in zip(jobs, answers):
        pd.testing.assert_frame_equal(table, alone[job])
    assert all(m.sampling == Sampling.PER_EXAMPLE for m in model.modules() if hasattr(m, "sampling"))


@pytest.mark.parametrize("measure", ["mi", "sd", "entropy", "band"])
def test_risk_table_refers_by_the_runs_measure(measure):
    rng = np.random.default_rng(7)
    logits = rng.normal(0, 1, (20, 50)) + rng.normal(-2, 1, 50)  # (D, N)
    summary = metrics.Summary.from_draws(logits)
    u = summary.measure(measure)
    thr = risk.refer_threshold(u, 0.2)
    table = risk.risk_table(summary, [f"k{i}" for i in range(50)], thr, refer_measure=measure)
    assert table["refer"].equals(pd.Series(u > thr, name="refer")) and table["refer"].sum() == 10
    assert np.array_equal(table["entropy"], summary.entropy) and table["has_spread"].all()
    same = risk.risk_table(logits, [f"k{i}" for i in range(50)], thr, refer_measure=measure)
    pd.testing.assert_frame_equal(table, same)  # logits or their Summary: one table


# ---------------------------------------------------------------------------- RiskModel: declared, not probed


@pytest.mark.parametrize("kind, k", [("deterministic", 1), ("bayes-emb", 1), ("rank1", 3), ("batchensemble", 3),
                                     ("deep-ensemble", 3)])
def test_each_mortality_model_declares_what_scoring_needs(kind, k):
    model = _model(kind)
    assert isinstance(model, mpredict.RiskModel)
    assert (model.components, model.value_channel, model.gaussian_logits, model.scores_features) == (k, False, False,
                                                                                                     False)
    assert build_model(kind, MortalityConfig(N_TOKENS, N_CONTEXT, **TINY, value_channel=True)).value_channel


def test_the_laplace_model_declares_its_gaussian_logit_and_its_map_models_channel(val):
    """Probit: scored by its moments (a Gaussian logit per admission); Monte Carlo: by draws on batches."""
    from pipeline.bayes.laplace import LaplaceConfig, Predictive
    from pipeline.tasks.mortality.laplace import fit_laplace

    cfg = LaplaceConfig(subnet_size=10, prior_precision=1.0, batch_size=8)
    laplace, _ = fit_laplace(_model("deterministic"), val, val, cfg)
    assert isinstance(laplace, mpredict.RiskModel)
    assert (laplace.components, laplace.value_channel, laplace.gaussian_logits, laplace.scores_features) == (
        1, False, True, False)
    pred = mpredict.feature_predictions(laplace, val, 2, 8)
    assert pred.summary.spread.any()  # the Gaussian's spread, from predict_moments
    laplace.predictive = Predictive.MC
    assert not laplace.gaussian_logits
    assert mpredict.feature_logits(laplace, val, 2, 8).shape == (2, 1, len(val))


def test_a_model_that_declares_nothing_is_no_risk_model(val):
    net = torch.nn.Linear(2, 1)
    assert not isinstance(net, mpredict.RiskModel)
    with pytest.raises(AttributeError, match="scores_features"):
        mpredict.feature_logits(net, val, 1, 8)
