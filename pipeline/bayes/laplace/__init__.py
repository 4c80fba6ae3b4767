"""Subnetwork linearized Laplace (Daxberger et al., ICML 2021) for the layer library's deterministic models.

A full-covariance Gaussian over S chosen weights of a trained (MAP) network, the others fixed,
with the linearized (GLM) predictive; definitions as laplace-torch's ``SubnetLaplace`` (see
docs/laplace.md). Modules: ``options`` (the choices, torch-free), ``config`` (settings), ``params``
(parameter vector, δ re-parametrisation), ``jacobian`` (per-logit reverse-mode Jacobians w.r.t. the
subnetwork only), ``curvature`` (GGN), ``selection`` (subnetwork rules), ``posterior`` (Cholesky factor,
λ_S), ``predictive`` (probit, MC), ``model`` (the fitted model and its checkpoint), ``fit``
(``fit_laplace``); a tracked Laplace run is ``pipeline.workflows.laplace_run``. Names load their module on first use
(``pipeline.core.lazy``), so the choices are read without torch.
"""

from pipeline.core.lazy import lazy

_HOMES = {
    **dict.fromkeys(
        ("DEFAULT_SUBNET_SIZE", "HessianKind", "Predictive", "Selection", "default_subnet_size"), "options"
    ),
    "LaplaceConfig": "config",
    "LaplaceError": "errors",
    **dict.fromkeys(("LaplaceReport", "fit_laplace_batches"), "fit"),
    **dict.fromkeys(("LAPLACE_FORMAT", "LinearizedLaplaceModel", "load_laplace", "save_laplace"), "model"),
    **dict.fromkeys(("ParamVector", "check_deterministic"), "params"),
    **dict.fromkeys(("Posterior", "subnet_prior_precision"), "posterior"),
    **dict.fromkeys(("SubnetMask", "select_subnet"), "selection"),
}
__all__ = sorted(_HOMES)
__getattr__, __dir__ = lazy(__name__, _HOMES)
