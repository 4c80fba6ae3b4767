"""The shift check (bayes.shift): the rank test against scipy and scikit-learn, the false-alarm rate of every test
on null data at its level, power on shifted data, Holm against a direct step-down, the verdict, "too small", and the
reference's round trips."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import sparse
from scipy.stats import mannwhitneyu
from sklearn.metrics import roc_auc_score

from pipeline.bayes.shift import (
    MIN_COHORT,
    ShiftReference,
    Verdict,
    check_shift,
    domain_test,
    fit_domain,
    holm,
    make_reference,
    min_size,
    mmd_test,
    size_for,
    smallest_p,
    u_test,
)


def _samples(kind: str, rng, n: int, m: int, shift: float = 0.0):
    if kind == "continuous":
        return rng.normal(shift, 1, n), rng.normal(0, 1, m)
    if kind == "ties":
        return np.round(rng.normal(shift, 1, n)), np.round(rng.normal(0, 1, m))
    # mostly zeros, as decision uncertainty
    def zeros(k, s):
        return np.where(rng.random(k) < 0.8, 0.0, rng.random(k) + s)
    return zeros(n, shift), zeros(m, 0.0)


@pytest.mark.parametrize("kind", ["continuous", "ties", "zeros"])
@pytest.mark.parametrize("n", [20, 300])
def test_u_test_matches_scipy_and_sklearn(kind, n):
    rng = np.random.default_rng(n)
    x, y = _samples(kind, rng, n, 700, shift=0.2)
    t = u_test(x, y)
    ref = mannwhitneyu(x, y, alternative="two-sided", method="asymptotic", use_continuity=True)
    auc = roc_auc_score(np.r_[np.ones(n), np.zeros(700)], np.r_[x, y])
    assert t.p_value == pytest.approx(ref.pvalue, rel=1e-9, abs=1e-14)
    assert t.auroc == pytest.approx(auc, abs=1e-12) == pytest.approx(ref.statistic / (n * 700), abs=1e-12)


def test_a_constant_measure_has_nothing_to_test():
    t = u_test(np.zeros(50), np.zeros(200))
    assert (t.auroc, t.p_value) == (0.5, 1.0)
    with pytest.raises(ValueError, match=r"measure of the cohort\[2\] = nan"):
        u_test([0.1, 0.2, np.nan], [0.3])


@pytest.mark.parametrize("kind", ["continuous", "ties", "zeros"])
def test_the_rank_test_false_alarms_at_most_its_level_on_null_data(kind):
    rng = np.random.default_rng(7)
    level, reps = 0.05, 600
    for n in (MIN_COHORT, 50, 500):
        hits = sum(u_test(*_samples(kind, rng, n, 1000)).p_value <= level for _ in range(reps))
        assert hits / reps <= level + 2 * np.sqrt(level * (1 - level) / reps), (kind, n, hits)


def test_the_domain_classifier_false_alarms_at_most_its_level_on_null_data():
    """200 null cohorts at level 0.1 (the former sum / sqrt(2) combination of the folds' z false-alarmed in 8.5-9.5% of
    null cohorts at level 0.05: ``domain``'s docstring)."""
    rng = np.random.default_rng(3)
    level, reps = 0.1, 200
    hits = sum(domain_test(rng.normal(size=(400, 10)), rng.normal(size=(200, 10)), seed=i).p_value <= level
               for i in range(reps))
    assert hits / reps <= level + 2 * np.sqrt(level * (1 - level) / reps), hits


def test_the_domain_classifier_sees_a_mean_shift_and_its_weights_the_density_ratio():
    rng = np.random.default_rng(4)
    ref, coh = rng.normal(size=(1000, 5)), rng.normal(size=(500, 5))
    coh[:, 0] += 0.5
    t = domain_test(ref, coh)
    assert t.p_value < 1e-6 and t.auroc > 0.6 and (t.n, t.m) == (500, 1000)
    model = fit_domain(ref, coh)
    x = rng.normal(size=(2000, 5))
    true_log_ratio = 0.5 * x[:, 0] - 0.125  # N(0.5, 1) against N(0, 1) in column 0
    assert np.corrcoef(model.log_ratio(x), true_log_ratio)[0, 1] > 0.95
    again = type(model).from_dict(json.loads(json.dumps(model.to_dict())))
    np.testing.assert_allclose(again.weights(x), model.weights(x))
    with pytest.raises(ValueError, match="3 columns, the domain classifier was fitted on 5"):
        model.log_ratio(x[:, :3])


def test_the_mmd_test_is_a_valid_permutation_test_and_sees_a_scale_change():
    rng = np.random.default_rng(5)
    level, reps = 0.1, 100
    hits = sum(mmd_test(rng.normal(size=(300, 8)), rng.normal(size=(100, 8)), seed=i, permutations=99).p_value
               <= level for i in range(reps))
    assert hits / reps <= level + 2 * np.sqrt(level * (1 - level) / reps), hits
    scaled = mmd_test(rng.normal(size=(500, 8)), 1.5 * rng.normal(size=(300, 8)))
    assert scaled.p_value <= 0.01 and scaled.auroc > 0.6  # the held-out witness separates them
    null_auroc = [mmd_test(rng.normal(size=(300, 8)), rng.normal(size=(300, 8)), seed=i, permutations=9).auroc
                  for i in range(40)]
    assert abs(np.mean(null_auroc) - 0.5) < 0.02
    coh = sparse.random(200, 30, density=0.1, random_state=1, format="csr")
    assert 0.0 < mmd_test(sparse.random(300, 30, density=0.1, random_state=2), coh, permutations=20).p_value <= 1.0


def _direct_holm(p: np.ndarray, level: float) -> np.ndarray:
    """Holm's step-down as written: reject the i-th smallest while p_(i) <= level / (K - i)."""
    order = np.argsort(p)
    rejected = np.zeros(p.size, bool)
    for i, j in enumerate(order):
        if p[j] > level / (p.size - i):
            break
        rejected[j] = True
    return rejected


def test_holm_adjusted_p_values_reject_what_the_step_down_rejects():
    rng = np.random.default_rng(6)
    for _ in range(300):
        p = rng.random(rng.integers(1, 6)) ** 3
        for level in (0.01, 0.05, 0.1):
            np.testing.assert_array_equal(holm(p) <= level, _direct_holm(p, level))


def test_the_smallest_testable_cohort_and_the_size_for_a_power():
    m, level = 1000, 0.05 / 5
    n = min_size(m, level)
    assert n == MIN_COHORT and smallest_p(n, m) < level
    assert min_size(10, 1e-6) > MIN_COHORT and smallest_p(min_size(10, 1e-6) - 1, 10) >= 1e-6 > smallest_p(
        min_size(10, 1e-6), 10)
    # Noether's size: the Monte Carlo power there is about 80%
    rng = np.random.default_rng(8)
    size = size_for(0.6, m, 0.05)
    shift = np.sqrt(2) * 0.2533  # N(d, 1) against N(0, 1): AUROC Phi(d / sqrt 2) = 0.6
    power = np.mean([u_test(rng.normal(shift, 1, size), rng.normal(0, 1, m)).p_value <= 0.05 for _ in range(300)])
    assert abs(power - 0.8) < 0.08, (size, power)
    assert size_for(0.5, m, 0.05) is None and size_for(0.51, 50, 0.05) is None


def _reference(rng, n=1054, posterior=True):
    ms = {"risk": rng.beta(1, 20, n)}
    ms.update({"mi": rng.gamma(1, 0.01, n), "sd": rng.gamma(1, 0.02, n),
               "decision": np.where(rng.random(n) < 0.8, 0.0, rng.random(n))} if posterior else
              {"mi": np.zeros(n), "sd": np.zeros(n), "decision": np.zeros(n)})
    return make_reference(ms, rng.normal(size=(n, 12)), [f"c{i}" for i in range(12)])


def test_a_shifted_cohort_is_flagged_with_its_strongest_measure():
    rng = np.random.default_rng(9)
    ref = _reference(rng)
    n = 800
    coh = {"risk": rng.beta(1, 20, n), "mi": rng.gamma(1.6, 0.01, n), "sd": rng.gamma(1, 0.02, n),
           "decision": np.where(rng.random(n) < 0.8, 0.0, rng.random(n))}
    r = check_shift(ref, coh, rng.normal(size=(n, 12)), [f"c{i}" for i in range(12)])
    assert r.verdict is Verdict.SHIFTED and r.strongest == "mi" and r.measures["mi"].auroc > 0.6
    assert r.p_value == pytest.approx(min(1.0, 5 * r.measures["mi"].p_value))
    assert set(r.measures) == {"risk", "mi", "sd", "decision", "features"} and r.measures["features"].test == "mmd"
    s = r.sentence("; see `recertify`")
    assert s.startswith("these 800 admissions differ from the calibration admissions (p < 0.001; the posterior's "
                        "mutual information, higher here: AUROC 0.") and s.endswith("see `recertify`")
    d = json.loads(json.dumps(r.to_dict()))
    assert d["verdict"] == "shifted" and d["strongest"] == "mi" and d["sentence"] == r.sentence()


def test_same_population_cohorts_are_flagged_at_most_at_the_level():
    rng = np.random.default_rng(10)
    ref = _reference(rng)
    level, reps, hits = 0.1, 150, 0
    for i in range(reps):
        fresh = _reference(rng, 300)
        r = check_shift(ref, fresh.measures, fresh.features, level=level, seed=i)
        hits += r.verdict is Verdict.SHIFTED
    assert hits / reps <= level + 2 * np.sqrt(level * (1 - level) / reps), hits


def test_a_point_model_tests_the_risk_alone_and_a_small_cohort_says_the_size_it_needs():
    rng = np.random.default_rng(11)
    ref = _reference(rng, posterior=False)
    small = {"risk": rng.beta(1, 20, 12), "mi": np.zeros(12), "sd": np.zeros(12), "decision": np.zeros(12)}
    r = check_shift(ref, small)
    assert r.verdict is Verdict.TOO_SMALL and r.needed == MIN_COHORT and r.skipped == ["mi", "sd", "decision"]
    assert r.sentence().startswith("12 admissions are too few to compare with the calibration admissions: the check "
                                   "needs at least 20, and about ")
    big = check_shift(ref, {"risk": rng.beta(1, 20, 400)}, feature_test="none")
    assert set(big.measures) == {"risk"} and big.verdict is Verdict.NOT_DETECTED
    assert "do not differ detectably" in big.sentence()


def test_bad_cohorts_are_refused_naming_what_is_wrong():
    rng = np.random.default_rng(12)
    ref = _reference(rng)
    with pytest.raises(ValueError, match="no 'mi' measure"):
        check_shift(ref, {"risk": rng.random(50)})
    coh = {k: rng.random(50) for k in ("risk", "mi", "sd", "decision")}
    with pytest.raises(ValueError, match="column 3 is 'x'"):
        check_shift(ref, coh, rng.normal(size=(50, 12)), ["c0", "c1", "c2", "x"] + [f"c{i}" for i in range(4, 12)])
    with pytest.raises(ValueError, match="different lengths"):
        check_shift(ref, {**coh, "risk": rng.random(49)})


@pytest.mark.parametrize("kind", ["dense", "sparse", "none"])
def test_the_reference_round_trips_through_json_and_npz(tmp_path, kind):
    rng = np.random.default_rng(13)
    feats = {"dense": rng.normal(size=(3000, 4)), "sparse": sparse.random(3000, 40, density=0.05, random_state=0,
                                                                          format="csr"), "none": None}[kind]
    ref = make_reference({"risk": rng.random(3000), "mi": rng.random(3000)}, feats,
                         None if feats is None else [f"t{i}" for i in range(feats.shape[1])], max_rows=500)
    assert ref.n == 3000 and (feats is None or ref.features.shape[0] == 500)
    for again in (ShiftReference.from_dict(json.loads(json.dumps(ref.to_dict()))),
                  ShiftReference.load(ref.save(tmp_path / "shift_reference.npz"))):
        assert again.n == ref.n and again.columns == ref.columns and again.source == ref.source
        for k in ref.measures:
            np.testing.assert_array_equal(again.measures[k], ref.measures[k])
        if feats is not None:
            a = again.features.toarray() if sparse.issparse(again.features) else again.features
            b = ref.features.toarray() if sparse.issparse(ref.features) else ref.features
            np.testing.assert_array_equal(a, b)
    # shuffled: the file's order is not the admissions'
    assert not np.array_equal(ref.measures["risk"][:50], np.sort(ref.measures["risk"])[:50])
