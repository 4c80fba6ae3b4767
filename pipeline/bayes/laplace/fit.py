"""``fit_laplace``: subnetwork linearized Laplace on a trained deterministic model, post hoc.

Steps (Daxberger et al. 2021, section 4): select the subnetwork (``selection``); accumulate its
GGN over the training admissions (``curvature``); choose the full network's prior precision λ by the
marginal likelihood (``marglik``; default) or the validation NLL over a grid, or take the one given, with λ_S = λ·S/D
for the subnetwork (paper, appendix C); factor GGN_S + λ_S I (``posterior``). The CLI calls it thinly; it never trains.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field

import torch
from torch import Tensor, nn

from pipeline.bayes.laplace.config import HessianKind, LaplaceConfig, PriorMethod
from pipeline.bayes.laplace.curvature import accumulate_ggn
from pipeline.bayes.laplace.errors import LaplaceError
from pipeline.bayes.laplace.jacobian import iter_jacobians
from pipeline.bayes.laplace.marglik import SEARCH_LOG10, MarglikChoice, optimize_marglik
from pipeline.bayes.laplace.model import LinearizedLaplaceModel, wrap
from pipeline.bayes.laplace.params import ParamVector, Substitution, check_deterministic, frozen
from pipeline.bayes.laplace.posterior import Posterior, subnet_prior_precision
from pipeline.bayes.laplace.predictive import probit_nll
from pipeline.bayes.laplace.selection import select_subnet

log = logging.getLogger(__name__)

Batches = Callable[[], Iterable[dict]]  # a fresh iterator of batch dicts (with "label") per call


@dataclass
class LaplaceReport:
    """What ``fit_laplace`` did, JSON-able through ``to_dict``."""

    n_params: int  # D, weights of the MAP model
    subnet_size: int  # S, weights with a posterior (D for hessian diag)
    selection: str | None  # the subnetwork rule (None for hessian diag)
    hessian: str  # full | diag
    prior_precision: float  # λ of the full network
    subnet_prior_precision: float  # λ_S = λ·S/D
    prior_source: str  # "given", "marglik" (the marginal likelihood) or "grid" (validation NLL on the grid)
    grid: list[dict] = field(default_factory=list)  # [{"prior_precision": λ, "val_nll": mean NLL or None}]
    at_grid_edge: bool = False  # the chosen λ is at the end of the searched range (grid widened once already)
    warning: str | None = None  # what a choice at the range's end means (printed by the CLI)
    log_marglik: float | None = None  # marglik: log Z at the chosen λ_S (up to constants free of λ)
    effective_params: float | None = None  # marglik: γ = Σ e_i / (e_i + λ_S), the well-determined weights
    n_train: int = 0  # training admissions available
    n_train_used: int = 0  # training admissions in the GGN (max_train subsample)
    ggn_scale: float = 1.0  # N/M applied to the subsample's GGN
    n_val: int = 0  # validation admissions
    val_nll_map: float | None = None  # mean validation NLL of the MAP model
    val_nll: float | None = None  # mean validation NLL of the probit predictive at the chosen λ
    per_tensor: dict = field(default_factory=dict)  # selected weights per parameter tensor
    unused_weights: int = 0  # weights with zero GGN diagonal (wasserstein; skipped when skip_unused)
    posterior_bytes: int = 0  # memory of the stored factor
    seconds: dict = field(default_factory=dict)  # wall time per stage

    def to_dict(self) -> dict:
        return asdict(self)


def fit_laplace_batches(model: nn.Module, train_batches: Batches, val_batches: Batches | None, cfg: LaplaceConfig,
                        *, n_train: int, n_train_used: int) -> tuple[LinearizedLaplaceModel, LaplaceReport]:
    """``fit_laplace`` on any deterministic model of the family: batches are dicts the model takes,
    with ``label`` (0/1 for one logit, class ids for (B, C) logits). The GGN of the ``n_train_used``
    admissions that ``train_batches`` yields is scaled by n_train / n_train_used."""
    check_deterministic(model)
    if cfg.prior_precision is None and cfg.prior_method is PriorMethod.VAL_NLL and val_batches is None:
        raise LaplaceError("prior precision by val-nll needs validation admissions; use marglik or give a value")
    t_start = time.perf_counter()
    seconds: dict[str, float] = {}
    scale = n_train / n_train_used
    with frozen(model):
        layout = ParamVector.of(model)
        d = layout.size
        t = time.perf_counter()
        if cfg.hessian == HessianKind.DIAG:
            indices, mask = torch.arange(d), None
        else:
            mask = select_subnet(model, layout, cfg, train_batches, scale)
            indices = mask.indices
        seconds["select"] = time.perf_counter() - t
        sub = Substitution.of(layout, None if cfg.hessian == HessianKind.DIAG else indices)
        s = sub.size
        t = time.perf_counter()
        ggn, seen = accumulate_ggn(model, train_batches(), sub, cfg.hessian, cfg.torch_dtype, scale)
        seconds["ggn"] = time.perf_counter() - t
        if seen != n_train_used:
            raise LaplaceError(f"the training batches held {seen} admissions, expected {n_train_used}")
        ratio = s / d  # λ_S = λ·S/D
        t = time.perf_counter()
        marglik: MarglikChoice | None = None
        val_nll = map_nll = None
        n_val = 0
        if cfg.prior_precision is not None:
            lam, source, table, edge = float(cfg.prior_precision), "given", [], False
        elif cfg.prior_method is PriorMethod.MARGLIK:
            marglik = optimize_marglik(ggn, layout.vector(model)[indices])  # θ_MAP,S
            lam, source, table, edge = marglik.prior_precision / ratio, "marglik", [], marglik.at_edge
        else:
            lam, table, edge, val_nll, map_nll, n_val = _grid_search(model, sub, ggn, ratio, val_batches, cfg)
            source = "grid"
        seconds["prior_search"] = time.perf_counter() - t
        t = time.perf_counter()
        posterior = Posterior.from_ggn(ggn, subnet_prior_precision(lam, s, d))
        del ggn
        seconds["factorize"] = time.perf_counter() - t
        if source != "grid" and val_batches is not None:
            t = time.perf_counter()
            nlls, map_nll, n_val = _grid_nll(model, sub, None, [posterior], val_batches)
            val_nll = nlls[0]
            seconds["validation"] = time.perf_counter() - t
    laplace = wrap(model, indices, posterior, prior_precision=lam,
                   selection=None if mask is None else cfg.selection, hessian=cfg.hessian, predictive=cfg.predictive)
    seconds["total"] = time.perf_counter() - t_start
    warning = edge_warning(lam, table, marglik) if edge else None
    if warning:
        log.warning("%s", warning)
    report = LaplaceReport(
        n_params=d, subnet_size=s, selection=None if mask is None else cfg.selection.value, hessian=cfg.hessian.value,
        prior_precision=lam, subnet_prior_precision=posterior.prior_precision, prior_source=source, grid=table,
        at_grid_edge=edge, warning=warning,
        log_marglik=None if marglik is None else marglik.log_marglik,
        effective_params=None if marglik is None else marglik.effective_params, n_train=n_train,
        n_train_used=n_train_used, ggn_scale=scale, n_val=n_val,
        val_nll_map=map_nll, val_nll=val_nll, per_tensor={} if mask is None else mask.per_tensor,
        unused_weights=0 if mask is None else mask.unused, posterior_bytes=posterior.nbytes(), seconds=seconds)
    return laplace, report


WIDEN_DECADES = 4.0  # a val-nll choice at the grid's end searches this many decades further, once


def _grid_search(model: nn.Module, sub: Substitution, ggn: Tensor, ratio: float, val_batches: Batches,
                 cfg: LaplaceConfig) -> tuple[float, list[dict], bool, float, float, int]:
    """λ minimising the validation NLL on ``cfg.grid()``, widened by WIDEN_DECADES once when the best is at
    an end: (λ, the grid table, still at an end, its NLL, the MAP's NLL, N_val)."""
    for widen in (0.0, WIDEN_DECADES):
        grid = cfg.grid(widen)
        nlls, map_nll, n_val = _grid_nll(model, sub, ggn, [lam * ratio for lam in grid], val_batches)
        finite = [k for k, v in enumerate(nlls) if math.isfinite(v)]
        if not finite:
            raise LaplaceError(f"no prior precision on the grid 1e{math.log10(grid[0]):g}..1e{math.log10(grid[-1]):g} "
                               "gives a positive-definite posterior with a finite validation NLL")
        best = min(finite, key=lambda k: nlls[k])
        edge = len(grid) > 1 and best in (0, len(grid) - 1)
        if not edge:
            break
    table = [{"prior_precision": g, "val_nll": v if math.isfinite(v) else None} for g, v in zip(grid, nlls)]
    return grid[best], table, edge, nlls[best], map_nll, n_val


def edge_warning(lam: float, table: list[dict], marglik: MarglikChoice | None) -> str:
    """What a prior precision at the end of its search range means for the risks."""
    high = lam >= (table[-1]["prior_precision"] if table else 10 ** SEARCH_LOG10[1] / 10)
    how = "the marginal likelihood" if marglik is not None else "the validation NLL"
    if high:
        return (f"prior precision {lam:.3g} is the largest searched ({how} still improves beyond it): the posterior is "
                "~the MAP model; its risks equal the parent's and its spread is ~0")
    return (f"prior precision {lam:.3g} is the smallest searched ({how} still improves below it): the posterior is "
            "as wide as the curvature allows; its spread is set by the GGN alone")


def _grid_nll(model: nn.Module, sub: Substitution, ggn: Tensor | None, candidates: list, val_batches: Batches
              ) -> tuple[list[float], float, int]:
    """Mean validation NLL of the probit predictive for each candidate, that of the MAP model, and N_val.

    Candidates are λ_S values (a posterior is factored from ``ggn`` for each; a singular one scores
    inf) or ready ``Posterior`` objects. λ values over a dense GGN: the validation Jacobians
    (N_val·C x S) are kept and the posteriors factored one at a time; otherwise the posteriors are
    ready (diagonal ones: D numbers each) and scored while the batches stream.
    """
    def factor(c) -> Posterior | None:
        if isinstance(c, Posterior):
            return c
        try:
            return Posterior.from_ggn(ggn, c)
        except LaplaceError:
            return None

    keep = ggn is not None and ggn.dim() == 2
    ready = [] if keep else [factor(c) for c in candidates]
    dense = keep or any(p is not None and not p.diagonal for p in ready)  # J per whole batch: BLAS-3 solves
    sums = [0.0] * len(candidates)
    map_sum, n_val = 0.0, 0
    kept: list[tuple[Tensor, Tensor, Tensor]] = []
    for batch in val_batches():
        for mu, jac, y in _groups(model, batch, sub, whole=dense):  # (B[, C]), (B[, C], S), (B,)
            n_val += mu.shape[0]
            map_sum += float(probit_nll(mu.double(), torch.zeros_like(mu, dtype=torch.float64), y).sum())
            if keep:
                kept.append((mu, jac, y))
                continue
            for k, post in enumerate(ready):
                sums[k] += math.inf if post is None else float(probit_nll(mu.double(), post.variance(jac).double(),
                                                                          y).sum())
    if keep:
        mu = torch.cat([m for m, _, _ in kept]).double()
        jac = torch.cat([j for _, j, _ in kept])
        y = torch.cat([y for _, _, y in kept])
        del kept
        for k, c in enumerate(candidates):
            post = factor(c)
            sums[k] = math.inf if post is None else float(probit_nll(mu, post.variance(jac).double(), y).sum())
            del post
    if n_val == 0:
        raise LaplaceError("no validation admissions")
    return [v / n_val for v in sums], map_sum / n_val, n_val


def _groups(model: nn.Module, batch: dict, sub: Substitution, whole: bool) -> Iterator[tuple[Tensor, Tensor, Tensor]]:
    """(μ, J, labels) per Jacobian group of a batch, or for the whole batch."""
    start = 0
    for mu, jac in iter_jacobians(model, batch, sub, whole=whole):
        yield mu, jac, batch["label"][start:start + mu.shape[0]]
        start += mu.shape[0]
