"""pipeline.bayes.calibration: the recalibration maps, Venn-Abers against MAPIE and a brute-force definition, the
selection by held-out NLL, and the JSON round trip."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.calibration import _sigmoid_calibration
from sklearn.isotonic import IsotonicRegression

from pipeline.bayes import calibration as cal
from pipeline.bayes.calibration import CalibrationError, Method

FITTED = [m for m in Method]


def _world(n: int, seed: int, scale: float = 1.0):
    """Raw risks p of a model whose logit is off by ``scale`` (true logit = scale * logit p), and outcomes."""
    rng = np.random.default_rng(seed)
    z = rng.normal(-2.0, 1.3, n)
    p = 1.0 / (1.0 + np.exp(-z))
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-scale * z))).astype(int)
    return p, y


@pytest.mark.parametrize("method", FITTED)
def test_every_map_is_monotone_in_range_shape_preserving_and_round_trips(method):
    p, y = _world(400, 0, 1.5)
    m = cal.fit(method, p, y)
    grid = np.linspace(0.0, 1.0, 501)
    out = m.apply(grid)
    assert np.all((out >= 0.0) & (out <= 1.0))
    assert np.all(np.diff(out) >= -1e-12), "a recalibration map must be non-decreasing"
    draws = np.random.default_rng(1).beta(1, 5, (7, 3, 11))  # (S, K, N) draws of a risk
    mapped = m.apply(draws)
    assert mapped.shape == draws.shape
    assert np.array_equal(mapped[2, 1], m.apply(draws[2, 1]))
    back = cal.from_dict(json.loads(json.dumps(m.to_dict())))
    assert type(back) is type(m) and back.method is Method(method)
    assert np.array_equal(back.apply(draws), mapped)


def test_temperature_recovers_the_scale_of_the_logit():
    p, y = _world(40_000, 2, scale=0.5)  # true logit = z / 2: the model is overconfident by T = 2
    t = cal.Temperature.fit(p, y)
    assert abs(t.temperature - 2.0) < 0.1
    z = cal.logit(p[:5])
    assert np.allclose(t.apply(p[:5]), 1.0 / (1.0 + np.exp(-z / t.temperature)))


def test_platt_matches_scikit_learns_sigmoid_calibration():
    p, y = _world(600, 3, 1.7)
    m = cal.Platt.fit(p, y)
    a, b = _sigmoid_calibration(cal.logit(p), y)  # P = 1 / (1 + exp(a F + b)): slope -a, intercept -b
    assert abs(m.slope + a) < 1e-5 and abs(m.intercept + b) < 1e-5


def test_platt_keeps_the_map_non_decreasing_for_an_anti_informative_model():
    p, y = _world(500, 4)
    m = cal.Platt.fit(1.0 - p, y)  # risks ranked backwards: the free slope would be negative
    assert m.slope == 0.0
    assert np.allclose(m.apply(np.array([0.01, 0.5, 0.99])), m.apply(np.array([0.5])))


def test_isotonic_is_scikit_learns_fit_between_and_beyond_its_knots():
    p, y = _world(500, 5, 1.4)
    m = cal.Isotonic.fit(p, y)
    iso = IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip").fit(p, y)
    new = np.random.default_rng(6).random(300)
    assert np.allclose(m.apply(new), iso.predict(new), rtol=0, atol=1e-12)


class _Identity(ClassifierMixin, BaseEstimator):
    """A fitted classifier whose probability of death is its one feature (MAPIE's prefit estimator)."""

    def fit(self, X, y):
        self.classes_ = np.array([0, 1])
        self.n_features_in_ = 1
        return self

    def predict_proba(self, X):
        x = np.asarray(X, dtype=np.float64)[:, 0]
        return np.column_stack([1.0 - x, x])


@pytest.mark.parametrize("seed,n", [(0, 60), (7, 400)])
def test_venn_abers_matches_mapie_away_from_ties(seed, n):
    from mapie.calibration import VennAbersCalibrator

    p, y = _world(n, seed, 1.3)
    va = cal.VennAbers.fit(p, y)
    test = np.random.default_rng(seed + 1).uniform(p.min(), p.max(), 200)  # MAPIE 1.6.0's p1 above the top
    assert not np.isin(test, p).any()  # score differs from the definition (next test), so its gaps are inside
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # MAPIE divides 0 by 0 in its convex minorant
        oracle = VennAbersCalibrator(estimator=_Identity().fit(p[:, None], y), cv="prefit").fit(p[:, None], y)
        merged, p0p1 = oracle.predict_proba(test[:, None], p0_p1_output=True)
    p0, p1 = va.interval(test)
    assert np.allclose(p0, p0p1[:, 0], rtol=0, atol=1e-12) and np.allclose(p1, p0p1[:, 1], rtol=0, atol=1e-12)
    assert np.allclose(va.apply(test), merged[:, 1], rtol=0, atol=1e-12)


def _brute_force_va(scores, labels, s):
    """p0, p1 by definition: isotonic regression (tied scores pooled) of the labels plus (s, 0) or (s, 1), at s."""
    out = []
    for label in (0, 1):
        iso = IsotonicRegression().fit(np.append(scores, s), np.append(labels, label))
        out.append(float(iso.predict([s])[0]))
    return out


def test_venn_abers_is_the_definition_at_ties_and_in_gaps():
    scores = np.array([0.1, 0.1, 0.2, 0.2, 0.2, 0.35, 0.5, 0.5, 0.7, 0.9])
    labels = np.array([0, 1, 0, 0, 1, 0, 1, 0, 1, 1])
    va = cal.VennAbers.fit(scores, labels)
    points = np.array([0.0, 0.1, 0.15, 0.2, 0.3, 0.35, 0.5, 0.6, 0.7, 0.9, 0.95])  # ties, gaps and both ends
    p0, p1 = va.interval(points)
    for i, s in enumerate(points):
        b0, b1 = _brute_force_va(scores, labels, s)
        assert abs(p0[i] - b0) < 1e-12 and abs(p1[i] - b1) < 1e-12, s
    assert np.all(p0 <= p1)
    merged = va.apply(np.linspace(0, 1, 201))
    assert np.all(np.diff(merged) >= -1e-12) and np.all((merged > 0) & (merged < 1))
    assert np.allclose(va.width(points), p1 - p0)


@pytest.mark.parametrize("method", [Method.TEMPERATURE, Method.PLATT, Method.ISOTONIC, Method.VENN_ABERS])
@pytest.mark.parametrize("threshold", [0.05, 0.2, 0.5])
def test_raw_threshold_is_where_the_calibrated_risk_reaches_the_threshold(method, threshold):
    p, y = _world(500, 8, 1.6)
    m = cal.fit(method, p, y)
    raw = m.raw_threshold(threshold)
    assert 0.0 < raw < 1.0
    assert m.apply(np.array([raw]))[0] >= threshold
    assert m.apply(np.array([np.nextafter(raw, 0.0)]))[0] < threshold
    if method is Method.TEMPERATURE:  # closed form: sigmoid(T logit(t))
        assert abs(raw - 1.0 / (1.0 + np.exp(-m.temperature * np.log(threshold / (1 - threshold))))) < 1e-12


@pytest.mark.parametrize("method", [Method.TEMPERATURE, Method.PLATT])
def test_affine_maps_carry_a_gaussian_logit(method):
    p, y = _world(500, 9, 0.7)
    m = cal.fit(method, p, y)
    mu, var = np.array([-2.0, 0.3]), np.array([0.5, 2.0])
    cmu, cvar = m.gaussian(mu, var)
    f = mu + np.sqrt(var) * np.random.default_rng(0).standard_normal((1000, 2))  # logit draws
    g = cmu + np.sqrt(cvar) / np.sqrt(var) * (f - mu)  # the same draws mapped through the affine calibrated logit
    assert np.allclose(m.apply_logit(f), 1.0 / (1.0 + np.exp(-g)))


def test_selection_picks_a_rescaling_when_the_model_is_off_and_scores_every_method_held_out():
    p, y = _world(2000, 10, scale=0.5)  # overconfident by 2x
    sel = cal.select_method(p, y, seed=0)
    assert set(sel.nll) == {m.value for m in Method} and sel.folds == cal.FOLDS
    assert sel.chosen in (Method.TEMPERATURE, Method.PLATT)
    assert sel.nll[sel.chosen.value] < sel.nll["none"] - 0.005
    assert sel.nll["isotonic"] > min(sel.nll.values())  # flexible maps pay for it out of fold
    in_sample = {m: cal.fit(m, p, y).apply(p) for m in (Method.PLATT, Method.ISOTONIC)}
    with np.errstate(divide="ignore"):  # np.where takes log(0) of survivors at risk 0, then drops it
        nll = {m: -np.mean(np.where(y == 1, np.log(q), np.log1p(-q))) for m, q in in_sample.items()}
    assert nll[Method.ISOTONIC] < nll[Method.PLATT], "in sample isotonic would win: why the selection holds out"
    again = cal.select_method(p, y, seed=0)
    assert again.nll == sel.nll
    back = cal.Selection.from_dict(json.loads(json.dumps(sel.to_dict())))
    assert back.chosen is sel.chosen and np.array_equal(back.calibrator.apply(p[:9]), sel.calibrator.apply(p[:9]))


def test_selection_keeps_the_identity_for_a_calibrated_model_and_can_score_a_separate_set():
    p, y = _world(4000, 11, scale=1.0)
    sel = cal.select_method(p[:2000], y[:2000], p_select=p[2000:], labels_select=y[2000:])
    assert sel.folds == 0 and sel.n == 2000
    assert sel.nll[sel.chosen.value] <= sel.nll["none"]
    assert sel.nll["none"] - sel.nll[sel.chosen.value] < 0.002  # nothing to gain on a calibrated model


@pytest.mark.parametrize("labels,message", [
    (np.zeros(20), "needs deaths and survivors"),
    (np.r_[np.ones(3), np.zeros(17)], "5 folds need at least 2 folds and as many deaths"),
])
def test_selection_errors_name_the_problem(labels, message):
    p = np.linspace(0.05, 0.6, 20)
    with pytest.raises(CalibrationError, match=message):
        cal.select_method(p, labels)


def test_from_dict_rejects_an_unknown_method():
    with pytest.raises(CalibrationError, match="not a calibration map: method 'beta'"):
        cal.from_dict({"method": "beta"})
