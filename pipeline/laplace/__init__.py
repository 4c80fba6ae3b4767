"""Subnetwork linearized Laplace (Daxberger et al., ICML 2021) for the layer library's deterministic models.

A full-covariance Gaussian over S chosen weights of a trained (MAP) network, the others fixed,
with the linearized (GLM) predictive; definitions as laplace-torch's ``SubnetLaplace`` (see
docs/laplace.md). Modules: ``config`` (settings), ``params`` (parameter vector, δ re-parametrisation),
``jacobian`` (per-logit reverse-mode Jacobians w.r.t. the subnetwork only), ``curvature`` (GGN),
``selection`` (subnetwork rules), ``posterior`` (Cholesky factor, λ_S), ``predictive`` (probit, MC),
``model`` (the fitted model and its checkpoint), ``fit`` (``fit_laplace``).
"""

from .config import HessianKind, LaplaceConfig, Predictive, Selection
from .errors import LaplaceError
from .fit import LaplaceReport, fit_laplace, fit_laplace_batches
from .model import LAPLACE_FORMAT, LinearizedLaplaceModel, load_laplace, save_laplace
from .params import ParamVector, check_deterministic
from .posterior import Posterior, subnet_prior_precision
from .selection import SubnetMask, select_subnet

__all__ = [
    "LAPLACE_FORMAT", "HessianKind", "LaplaceConfig", "LaplaceError", "LaplaceReport", "LinearizedLaplaceModel",
    "ParamVector", "Posterior", "Predictive", "Selection", "SubnetMask", "check_deterministic", "fit_laplace",
    "fit_laplace_batches", "load_laplace", "save_laplace", "select_subnet", "subnet_prior_precision",
]
