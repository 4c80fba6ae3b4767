"""The shift check of a mortality cohort (tasks.mortality.shift, issue 43 item 1): the feature matrix, the reference
a run keeps, a cohort gathered chunk by chunk and checked, and what it says when it cannot check."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from helpers.features import write_features

from pipeline.bayes.referral.config import ReferralConfig
from pipeline.bayes.referral.policy import Predictive, fit_policy
from pipeline.bayes.shift import ShiftReference, Verdict
from pipeline.core import fileio
from pipeline.data import features
from pipeline.tasks.mortality import shift


@pytest.fixture(scope="module")
def feats(tmp_path_factory) -> Path:
    return write_features(tmp_path_factory.mktemp("shift") / "f", n_train=8, n_val=300, n_test=200, seed=3)


def _policy(n: int = 300, seed: int = 0):
    """A policy fitted on two synthetic halves of ``n`` admissions (draws of a posterior model)."""
    rng = np.random.default_rng(seed)

    def half(k):
        z = rng.normal(-1.5, 1.2, n)
        y = (rng.random(n) < 1 / (1 + np.exp(-z))).astype(float)
        d = 1 / (1 + np.exp(-(z + 0.5 * rng.normal(size=(20, n)))))
        return Predictive(d.mean(axis=0), draws=d), y

    (s, ys), (c, yc) = half(0), half(1)
    return fit_policy(s, ys, c, yc, ReferralConfig(alpha=0.3), seed=seed), c


def test_the_matrix_counts_each_tokens_bags_as_the_baselines_window_block_does(feats):
    """An independent count: the classical baselines' Featurizer (its window block, its context one-hot)."""
    from pipeline.tasks.mortality.baselines.featurize import Featurizer

    vocab = fileio.read_json(feats / "vocab.json")
    fs = features.load_split(feats / "val.parquet")
    v, c = len(vocab["tokens"]), len(vocab["context"])
    x = shift.feature_matrix(fs, v, c)
    ref = Featurizer.from_vocab(vocab, None, 24.0).fit(fs).matrix(fs).to_csr().toarray()
    assert x.shape == (len(fs), v + c + 2) and len(shift.columns_of(vocab)) == x.shape[1]
    np.testing.assert_allclose(x[:, :v].toarray(), ref[:, :v])  # log1p(bags holding the token)
    np.testing.assert_allclose(x[:, v:v + c].toarray(), ref[:, 2 * v:2 * v + c])  # the context one-hot
    np.testing.assert_allclose(x[:, -2].toarray().ravel(), np.log1p(fs.n_events))
    np.testing.assert_allclose(x[:, -1].toarray().ravel(), np.log1p(fs.n_bags))
    assert x[:, 0].nnz == 0 and x[:, v].nnz == 0  # padding ids never counted


def test_a_large_cohort_is_sampled_uniformly_with_its_rows_aligned():
    from scipy import sparse

    sample = shift.CohortSample(max_rows=500, seed=1)
    seen = 0
    for n in (300, 0, 400, 250):
        ids = np.arange(seen, seen + n, dtype=np.float64)
        sample.add(n, {"risk": ids}, sparse.csr_matrix(ids[:, None] + 1.0))
        seen += n
    assert sample.total == 950 and sample.measures["risk"].shape == (500,)
    np.testing.assert_array_equal(sample.matrix.toarray().ravel() - 1.0, sample.measures["risk"])
    assert np.all(np.diff(sample.measures["risk"]) > 0)  # stream order kept, each row once
    small = shift.CohortSample(max_rows=500)
    small.add(3, {"risk": np.array([0.1, 0.2, 0.3])})
    assert small.total == 3 and small.measures["risk"].tolist() == [0.1, 0.2, 0.3]


def test_a_run_keeps_measures_and_a_feature_sample_no_key(feats, tmp_path):
    policy, _ = _policy()
    vocab = fileio.read_json(feats / "vocab.json")
    cal = features.load_split(feats / "val.parquet")
    ref = shift.reference_of(policy, cal, vocab)
    assert sorted(ref.measures) == sorted(shift.MEASURES) and ref.columns == shift.columns_of(vocab)
    assert ref.features.shape[0] == len(cal) and ref.n == len(cal)
    back = ShiftReference.load(ref.save(tmp_path / "ref.npz"))
    assert np.array_equal(back.features.toarray(), ref.features.toarray()) and back.columns == ref.columns
    with np.load(tmp_path / "ref.npz", allow_pickle=False) as z:  # what the file holds: numbers and the meta
        assert all(z[k].dtype.kind in "fiu" for k in z.files if k != "meta")
        meta = str(z["meta"])
    strings = [meta, *ref.columns]
    assert not [s for s in strings for k in cal.keys if k in s]  # no pseudonym
    assert not [s for s in strings if re.search(r"\d{4}-\d{2}-\d{2}", s)]  # no date
    assert shift.reference_of(None, cal, vocab) is None


def _sample(measures: dict, matrix=None) -> shift.CohortSample:
    s = shift.CohortSample()
    n = next(iter(measures.values())).shape[0]
    s.add(n, measures, matrix)
    return s


def test_a_shifted_cohort_is_named_by_its_strongest_measure_and_points_to_recertify(feats):
    policy, cal = _policy()
    ref = shift.outputs_reference(policy)
    cal_risk = policy.kept["calibration"]["measures"]
    same = {k: np.asarray(cal_risk[k]) for k in shift.MEASURES}
    higher = {**same, "mi": same["mi"] * 3.0 + 0.01}
    report = shift.check_cohort(ref, policy, _sample(higher))
    assert report.shifted and report.report.strongest == "mi"
    assert report.sentence().startswith("these 300 admissions differ from the calibration admissions (p < 0.001; "
                                        "the posterior's mutual information, higher here: AUROC")
    assert report.sentence().endswith("the promise assumes they do not; see `recertify`")
    assert report.to_dict()["verdict"] == "shifted" and report.to_dict()["measures"]["mi"]["differs"]
    calm = shift.check_cohort(ref, policy, _sample(same))
    assert calm.report.verdict is Verdict.NOT_DETECTED and "do not differ detectably" in calm.sentence()


def test_what_the_check_says_when_it_cannot_check():
    policy, _ = _policy()
    few = {k: np.full(10, 0.1) for k in shift.MEASURES}
    small = shift.check_cohort(shift.outputs_reference(policy), policy, _sample(few))
    assert small.report.verdict is Verdict.TOO_SMALL
    assert re.fullmatch(r"10 admissions are too few to compare with the calibration admissions: the check needs at "
                        r"least \d+, and about [\d,]+ to detect an AUROC of 0.6 with 80% power", small.sentence())
    older = shift.check_cohort(None, policy, _sample(few))  # a run whose file predates the reference
    assert older.sentence().endswith("(on the model's outputs alone: this run keeps no feature reference (trained "
                                     "before the check))") and not older.features
    none = shift.check_cohort(None, None, _sample(few))
    assert none.report is None and none.sentence().startswith("no shift check: this run has no policy, so no "
                                                              "calibration")
    assert none.to_dict()["verdict"] is None and none.admissions == 10


def test_the_posterior_measures_are_left_out_at_other_draws_and_another_vocabulary_is_refused(feats):
    from pipeline.tasks.mortality.shift import ShiftError

    policy, _ = _policy()
    vocab = fileio.read_json(feats / "vocab.json")
    fs = features.load_split(feats / "val.parquet")
    ref = shift.reference_of(policy, fs, vocab)
    m = policy.kept["calibration"]["measures"]
    x = shift.feature_matrix(fs, len(vocab["tokens"]), len(vocab["context"]))
    out = shift.check_cohort(ref, policy, _sample({k: np.asarray(m[k]) for k in shift.MEASURES}, x),
                             shift.columns_of(vocab), posterior=False)
    assert sorted(out.report.measures) == ["features", "risk"] and out.features
    assert "the posterior's measures left out" in out.sentence()
    other = {**vocab, "tokens": vocab["tokens"][:-1] + ["lab:new"]}
    with pytest.raises(ShiftError, match="column .* is 'token:lab:new'.*not the run's vocabulary"):
        shift.check_cohort(ref, policy, _sample({"risk": np.asarray(m["risk"])}, x), shift.columns_of(other))


# ---------------------------------------------------------------------------- a trained run (slow: promise_run)


@pytest.mark.usefixtures("tracking_store")
def test_a_trained_run_keeps_its_reference_and_score_and_evaluate_check_against_it(promise_run, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from helpers.features import FEATURE_SCHEMA

    from pipeline.runs import store
    from pipeline.runs.load import load_run
    from pipeline.serving.score import ScoreConfig, score_files
    from pipeline.workflows.evaluate import EvalConfig, evaluate_run

    run_id, feats = promise_run
    assert "shift_reference.npz" in {a.path for a in store.client().list_artifacts(run_id)}
    rm = load_run(run_id, tmp_path / "m")  # from the pyfunc's artifacts
    ref = rm.shift_reference
    assert ref is not None and ref.columns == shift.columns_of(rm.vocab)
    cal = rm.info.policy["calibration"]
    assert ref.n == cal["n"] and sorted(ref.measures) == sorted(shift.MEASURES)
    cfg = ScoreConfig(threads=1)
    few = tmp_path / "few.parquet"
    pq.write_table(pa.Table.from_pandas(pq.read_table(feats / "test.parquet").to_pandas().head(10),
                                        schema=FEATURE_SCHEMA, preserve_index=False), few)
    small = score_files(rm, [few], tmp_path / "s.parquet", cfg).shift
    assert small.report.verdict is Verdict.TOO_SMALL and small.sentence().startswith(
        "10 admissions are too few to compare with the calibration admissions: the check needs at least ")
    other = score_files(rm, [feats / "test.parquet"], tmp_path / "s.parquet", ScoreConfig(threads=1, samples=2))
    assert "the posterior's measures left out" in other.shift.sentence()
    assert sorted(other.shift.report.measures) == ["features", "risk"]
    rm.shift_reference = None  # a run trained before the reference existed
    older = score_files(rm, [feats / "test.parquet"], tmp_path / "s.parquet", cfg).shift
    assert not older.features and "on the model's outputs alone" in older.sentence()
    assert sorted(older.report.measures) == sorted(shift.MEASURES)
    ev = evaluate_run(run_id, "test", EvalConfig(n_bootstrap=0, threads=1, log_to_run=False), out_dir=tmp_path / "e")
    assert ev.report["shift"]["admissions"] == 600 and ev.report["shift"]["features"]
    assert f"shift check: {ev.report['shift']['sentence']}" in ev.summary()
