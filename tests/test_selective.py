"""pipeline.bayes.metrics.selective: AURC, AUGRC, risk at coverage, coverage at risk and retention curves computed
by hand on a constructed case, the AUGRC identity of the 0/1 loss, tie handling and the bootstrap weights."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pipeline.bayes import metrics
from pipeline.bayes.metrics import selective

# Five admissions; u is the measure (kept first: lowest), p the risk, y the outcome. B and C tie on u.
#        A     B     C     D     E
U = np.array([0.1, 0.2, 0.2, 0.5, 0.9])
P = np.array([0.1, 0.3, 0.2, 0.6, 0.5])
Y = np.array([0, 1, 0, 0, 1])


def test_brier_metrics_by_hand():
    # Brier losses (p - y)^2: A 0.01, B 0.49, C 0.04, D 0.36, E 0.25. Kept in order A, {B, C}, D, E; the tied
    # run {B, C} counts at its mean 0.265 per admission. L(k), the loss of the k kept first:
    # L(1) = 0.01, L(2) = 0.275, L(3) = 0.54, L(4) = 0.90, L(5) = 1.15.
    e = metrics.selective_loss(Y, P)
    assert np.allclose(e, [0.01, 0.49, 0.04, 0.36, 0.25])
    # AURC = mean of L(k)/k = (0.01 + 0.1375 + 0.18 + 0.225 + 0.23) / 5 = 0.1565
    assert metrics.aurc(e, U) == pytest.approx(0.1565, abs=1e-12)
    # AUGRC = (1/N^2) sum over runs of w (S_before + S_after) / 2, runs (w, S): (1, 0.01), (2, 0.54), (1, 0.90),
    # (1, 1.15): (0.005 + 0.55 + 0.72 + 1.025) / 25 = 2.3 / 25 = 0.092
    assert metrics.augrc(e, U) == pytest.approx(0.092, abs=1e-12)
    # risk at 80%: L(4)/4 = 0.225; at 90%: L(4.5) = 0.90 + 0.5 * 0.25 = 1.025, / 4.5 = 0.2277...
    assert metrics.selective_risk(e, U, 0.8) == pytest.approx(0.225, abs=1e-12)
    assert metrics.selective_risk(e, U, 0.9) == pytest.approx(1.025 / 4.5, abs=1e-12)
    # coverage at risk 0.2: L(k)/k <= 0.2 for k = 1, 2, 3 (0.18), not 4 (0.225): 3/5
    assert metrics.coverage_at_risk(e, U, 0.2) == pytest.approx(0.6)
    assert metrics.coverage_at_risk(e, U, 0.005) == 0.0


def test_zero_one_metrics_by_hand_and_the_augrc_identity():
    # decisions at t = 0.5 (risk >= t: death): A 0 ok, B 0 wrong, C 0 ok, D 1 wrong, E 1 ok -> losses 0 1 0 1 0
    e = metrics.selective_loss(Y, P, "zero_one", threshold=0.5)
    assert list(e) == [0, 1, 0, 1, 0]
    # L(k): 0, 0.5, 1, 2, 2; AURC = (0 + 0.25 + 1/3 + 0.5 + 0.4) / 5 = 0.29666...
    assert metrics.aurc(e, U) == pytest.approx((0.25 + 1 / 3 + 0.5 + 0.4) / 5, abs=1e-12)
    # AUGRC = (1 (0 + 0)/2 + 2 (0 + 1)/2 + 1 (1 + 2)/2 + 1 (2 + 2)/2) / 25 = 4.5 / 25 = 0.18; the identity:
    # pi = 0.4, AUROC_f (correct A, C, E more confident than wrong B, D; C-B tie half) = 3.5 / 6:
    # 0.5 pi^2 + pi (1 - pi) (1 - AUROC_f) = 0.08 + 0.24 * 2.5 / 6 = 0.18
    assert metrics.augrc(e, U) == pytest.approx(0.18, abs=1e-12)
    with pytest.raises(ValueError, match="needs the decision threshold"):
        metrics.selective_loss(Y, P, "zero_one")


def test_augrc_identity_on_random_data_with_ties():
    rng = np.random.default_rng(0)
    n = 400
    u = np.round(rng.random(n), 1)  # ten values: many ties
    e = (rng.random(n) < 0.1 + 0.5 * u).astype(float)
    pi = e.mean()
    correct, wrong = -u[e == 0], -u[e == 1]  # confidence = -u
    auroc = ((correct[:, None] > wrong[None, :]).mean() + 0.5 * (correct[:, None] == wrong[None, :]).mean())
    assert metrics.augrc(e, u) == pytest.approx(0.5 * pi**2 + pi * (1 - pi) * (1 - auroc), abs=1e-12)


def test_ties_do_not_depend_on_the_input_order():
    e = metrics.selective_loss(Y, P)
    perm = np.array([2, 4, 0, 1, 3])
    out = metrics.selective_metrics(Y, P, U, n_bootstrap=50, target_risk=0.2)
    shuffled = metrics.selective_metrics(Y[perm], P[perm], U[perm], n_bootstrap=0, target_risk=0.2)
    for key in ("aurc", "augrc", "risk_at_0.8", "risk_at_0.9", "coverage_at_risk"):
        assert out[key] == pytest.approx(shuffled[key], abs=1e-15)
    assert metrics.aurc(e, U) == out["aurc"]
    assert json.loads(json.dumps(out)) == out and out["loss"] == "brier" and out["n"] == 5


def test_a_resample_is_its_duplicated_admissions():
    rng = np.random.default_rng(3)
    n = 60
    u, p = rng.random(n), rng.random(n)
    y = (rng.random(n) < p).astype(float)
    e = (p - y) ** 2
    idx = rng.integers(0, n, size=(4, n))
    runs = selective._runs(u)
    reps = selective._curve_metrics(*selective._knots(runs, e, selective._weights(idx, n)), n, (0.8,), 0.1)
    for b in range(4):
        i = idx[b]
        assert reps["aurc"][b] == pytest.approx(metrics.aurc(e[i], u[i]), abs=1e-12)
        assert reps["augrc"][b] == pytest.approx(metrics.augrc(e[i], u[i]), abs=1e-12)
        assert reps["risk_at_0.8"][b] == pytest.approx(metrics.selective_risk(e[i], u[i], 0.8), abs=1e-12)
        assert reps["coverage_at_risk"][b] == pytest.approx(metrics.coverage_at_risk(e[i], u[i], 0.1), abs=1e-12)


def test_intervals_cover_the_point_and_follow_the_seed():
    rng = np.random.default_rng(4)
    n = 300
    p = rng.beta(1, 6, n)
    y = (rng.random(n) < p).astype(float)
    u = p + 0.05 * rng.random(n)
    out = metrics.selective_metrics(y, p, u, loss="zero_one", threshold=0.2, n_bootstrap=300, seed=1)
    for key in ("aurc", "augrc", "risk_at_0.8", "risk_at_0.9"):
        lo, hi = out[f"{key}_ci"]
        assert lo < out[key] < hi
    again = metrics.selective_metrics(y, p, u, loss="zero_one", threshold=0.2, n_bootstrap=300, seed=1)
    assert again == out
    assert "coverage_at_risk" not in out and "coverage_at_risk_ci" not in out  # no target risk stated


def test_retention_curve_by_hand():
    # refer round(f * 5) of the highest u: f = 0.2 refers E, f = 0.4 E and D, f = 0.6 E, D and half of the
    # tied run {B, C} (each kept with weight 1/2).
    curve = metrics.retention_curve(Y, P, U, fractions=(0.0, 0.2, 0.4, 0.6), n_bootstrap=0)
    assert list(curve.n_kept) == [5, 4, 3, 2]
    # AUC-PR, the kept ranked by risk: all: D .6 (survivor), E .5 (death), B .3 (death), C, A: AP = (1/2 + 2/3) / 2;
    # f 0.2: D .6 (survivor), B .3 (death), C, A: AP = 1/2; f 0.4: B first: 1; f 0.6: B (weight 1/2) first: 1
    assert np.allclose(curve.auc_pr, [(0.5 + 2 / 3) / 2, 0.5, 1.0, 1.0])
    nll = -np.log(np.array([0.9, 0.3, 0.8, 0.4, 0.5]))  # -log p(y): A .9, B .3, C .8, D .4, E .5
    assert np.allclose(curve.nll, [nll.mean(), nll[:4].mean(), nll[:3].mean(),
                                   (nll[0] + 0.5 * nll[1] + 0.5 * nll[2]) / 2])
    assert np.isnan(curve.nll_ci).all()
    with_ci = metrics.retention_curve(Y, P, U, fractions=(0.0, 0.2), n_bootstrap=200)
    assert np.all(with_ci.nll_ci[:, 0] <= with_ci.nll) and np.all(with_ci.nll <= with_ci.nll_ci[:, 1])
    d = json.loads(json.dumps(with_ci.to_dict()))
    assert d["n_kept"] == [5, 4] and len(d["auc_pr_ci"]) == 2


def test_retention_curve_refers_the_tied_run_in_expectation():
    y = np.array([1, 0, 0, 1])
    p = np.array([0.4, 0.3, 0.2, 0.1])
    u = np.array([1.0, 1.0, 1.0, 0.0])  # three tied: referring one of them keeps each with weight 2/3
    nll = -np.log(np.array([0.4, 0.7, 0.8, 0.1]))
    curve = metrics.retention_curve(y, p, u, fractions=(0.25,), n_bootstrap=0)
    assert curve.nll[0] == pytest.approx((nll[3] + (2 / 3) * nll[:3].sum()) / 3)


def test_kept_mean_is_the_retention_nll_for_the_nll_and_ties_pro_rata():
    nll = -np.log(np.array([0.9, 0.3, 0.8, 0.4, 0.5]))
    fractions = (0.0, 0.2, 0.4, 0.6)
    curve = metrics.retention_curve(Y, P, U, fractions=fractions, n_bootstrap=0)
    np.testing.assert_allclose(metrics.kept_mean(nll, U, fractions), curve.nll)
    y = np.array([1.0, 2.0, 3.0, 10.0])
    u = np.array([1.0, 1.0, 1.0, 0.0])  # refer one of three tied: each kept with weight 2/3
    assert metrics.kept_mean(y, u, (0.25,))[0] == pytest.approx((10.0 + (2 / 3) * 6.0) / 3)


@pytest.mark.parametrize("bad", [
    dict(measure=np.array([0.1, np.nan, 0.2, 0.3, 0.4])),
    dict(measure=np.array([0.1, 0.2])),
])
def test_bad_measures_are_refused(bad):
    with pytest.raises(ValueError, match="measure"):
        metrics.selective_metrics(Y, P, bad["measure"], n_bootstrap=0)
