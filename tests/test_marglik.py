"""pipeline.bayes.laplace.marglik: the prior precision by the Laplace marginal likelihood."""

from __future__ import annotations

import math

import pytest
import torch

from pipeline.bayes.laplace.marglik import eigenvalues, log_marglik, optimize_marglik


def _problem(s: int = 30, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(s, 3 * s, generator=g, dtype=torch.float64)
    ggn = a @ a.t() / 10  # PSD, eigenvalues over ~2 decades
    theta = torch.randn(s, generator=g, dtype=torch.float64) * 0.3
    return ggn, theta


def test_log_marglik_equals_the_laplace_evidence_formula():
    ggn, theta = _problem()
    e = eigenvalues(ggn)
    for lam in (1e-3, 0.7, 42.0):
        direct = 0.5 * len(theta) * math.log(lam) - 0.5 * lam * float(theta @ theta) - 0.5 * float(
            torch.linalg.slogdet(ggn + lam * torch.eye(len(theta), dtype=torch.float64))[1])
        assert log_marglik(e, float(theta @ theta), lam) == pytest.approx(direct, rel=1e-10)


@pytest.mark.parametrize("diagonal", [False, True], ids=["full", "diag"])
def test_optimum_is_the_maximum_and_mackays_fixed_point(diagonal):
    ggn, theta = _problem(seed=1)
    if diagonal:
        ggn = ggn.diagonal().clone()
    choice = optimize_marglik(ggn, theta)
    assert not choice.at_edge
    lam, e, tsq = choice.prior_precision, eigenvalues(ggn), float(theta @ theta)
    for f in (0.9, 0.99, 1.01, 1.1):  # a local maximum ...
        assert log_marglik(e, tsq, lam * f) < choice.log_marglik
    assert choice.effective_params == pytest.approx(lam * tsq, rel=1e-6)  # ... where γ = λ‖θ‖² (MacKay)
    assert 0 < choice.effective_params < len(theta)


def test_weights_the_data_leaves_undetermined_push_to_the_edge():
    """MAP weights at the prior's mean: the evidence rises with λ without bound (the MAP model), said as an edge."""
    choice = optimize_marglik(torch.eye(5, dtype=torch.float64), torch.zeros(5, dtype=torch.float64))
    assert choice.at_edge and choice.prior_precision == pytest.approx(1e8)
