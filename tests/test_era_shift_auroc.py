"""experiments/era_shift_auroc.py: the AUROC of an output for a new era's admissions against the old era's."""

from __future__ import annotations

import numpy as np
import pytest

from experiments import era_shift_auroc as es


def _pairwise_auroc(ref: np.ndarray, target: np.ndarray) -> float:
    """Mann-Whitney written out: P(target > reference) + half P(tie), over every pair."""
    d = target[:, None] - ref[None, :]  # (T, R)
    return float((d > 0).mean() + 0.5 * (d == 0).mean())


@pytest.mark.parametrize("shift", [0.0, 0.3, 1.0, -0.5])
def test_auroc_is_the_mann_whitney_probability(shift):
    rng = np.random.default_rng(0)
    ref = np.round(rng.normal(0, 1, 300), 1)  # rounded: ties across the splits
    target = np.round(rng.normal(shift, 1, 200), 1)
    assert es.shift_auroc(ref, target) == pytest.approx(_pairwise_auroc(ref, target), abs=1e-12)


def test_a_constant_measure_does_not_separate_and_a_zero_spread_model_has_zero_sd_and_mi():
    assert es.shift_auroc(np.zeros(50), np.zeros(30)) == 0.5
    x = np.tile(np.linspace(-3, 1, 40), (6, 1))  # (D, N): identical draws, no weight uncertainty
    m = es.measures_of(x)
    assert np.all(m["sd"] == 0) and np.all(m["mutual_info"] == 0)
    assert m["risk"] == pytest.approx(1 / (1 + np.exp(-x[0])))


def test_interval_brackets_the_mean_over_seeds_and_a_real_shift_is_resolved():
    rng = np.random.default_rng(1)
    per_seed = [(rng.normal(0, 1, 400), rng.normal(0.5, 1, 300)) for _ in range(3)]
    idx = es.resamples(400, 300, 200, seed=2)
    assert idx[0].shape == (200, 400) and idx[1].shape == (200, 300)
    r = es.auroc_with_interval(per_seed, idx)
    assert r["auroc"] == pytest.approx(np.mean([_pairwise_auroc(a, b) for a, b in per_seed]))
    lo, hi = r["ci"]
    assert 0.5 < lo <= r["auroc"] <= hi < 1.0  # a half-sd shift: AUROC about 0.64, resolved from 0.5
