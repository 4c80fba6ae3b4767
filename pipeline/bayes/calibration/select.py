"""Fit a recalibration method by name, read one back, and choose the method by NLL on data apart from its fit.

Why cross-fitting: the NLL of a map on the admissions it was fitted on favours the most flexible map
(isotonic regression is the in-sample NLL-optimal non-decreasing map, so it would always win), so each
method must be scored on admissions it did not see. A further split of the calibration data would leave
each map fewer admissions to fit, on data that are already the scarcest the run has; K-fold cross-fitting
uses every admission for fitting (K - 1 times) and for scoring (once), and the chosen method is then refitted
on all of it. Folds are stratified by label (each fold holds its share of the deaths) and drawn from
``numpy.random.default_rng(seed)``, so the choice is reproducible. Where the caller holds a separate
selection set (``p_select``), each method is fitted on the fit data and scored there instead.

The out-of-fold NLL of a method is the mean over all admissions of -log of its held-out probability of the
observed outcome (nats); it is infinite when a fold's map gives a death the risk 0 or a survivor the risk 1
(isotonic regression can), and such a method is never chosen.

**The one-standard-error rule** (the default, ``rule="one_se"``): the chosen method is the simplest (the
earliest of ``Method``: none, temperature, Platt, isotonic, Venn-Abers) whose held-out NLL is within one
standard error of the lowest, the standard error of the per-admission difference between the two (paired
over the same admissions). A calibration half of a hundred admissions cannot tell a flexible map's small
held-out gain from luck, and a flexible map fitted on it can do worse on new admissions than no map at all
(``make main`` on 2026-12-04: Venn-Abers chosen by 0.0028 nats over temperature on 104 admissions, 16
deaths, then a test NLL of 0.2954 against the raw risk's 0.2419). ``rule="min"`` takes the lowest held-out
NLL (ties: the simpler method).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pipeline.bayes.calibration.maps import (
    CalibrationError,
    CalibrationMap,
    Identity,
    Isotonic,
    Method,
    Platt,
    Temperature,
    check_fit_data,
)
from pipeline.bayes.calibration.venn_abers import VennAbers
from pipeline.bayes.metrics import nll_from_probs

FOLDS = 5  # cross-fitting folds of the method selection

_FITTERS = {Method.TEMPERATURE: Temperature.fit, Method.PLATT: Platt.fit, Method.ISOTONIC: Isotonic.fit,
            Method.VENN_ABERS: VennAbers.fit}


def fit(method: Method | str, p, labels) -> CalibrationMap:
    """The ``method``'s map fitted on raw risks ``p`` (N,) and ``labels`` (N,)."""
    m = Method(method)
    if m is Method.NONE:
        check_fit_data(p, labels)
        return Identity()
    return _FITTERS[m](p, labels)


def from_dict(d: dict) -> CalibrationMap:
    """A map back from its ``to_dict()``."""
    try:
        m = Method(d["method"])
    except (KeyError, ValueError):
        raise CalibrationError(f"not a calibration map: method {d.get('method')!r}; known: "
                               f"{[e.value for e in Method]}") from None
    n_fit = int(d.get("n_fit", 0))
    if m is Method.NONE:
        return Identity()
    if m is Method.TEMPERATURE:
        return Temperature(float(d["temperature"]), n_fit)
    if m is Method.PLATT:
        return Platt(float(d["intercept"]), float(d["slope"]), n_fit)
    if m is Method.ISOTONIC:
        return Isotonic(np.asarray(d["x"], dtype=np.float64), np.asarray(d["y"], dtype=np.float64), n_fit)
    return VennAbers.from_dict(d)


@dataclass
class Selection:
    """The recalibration method chosen by NLL on held-out admissions, refitted on all the fit data."""

    chosen: Method  # the method chosen by ``rule`` (ties: the earlier in Method)
    nll: dict[str, float]  # held-out NLL per method, nats per admission (inf: a held-out risk of 0 or 1 was wrong)
    folds: int  # cross-fitting folds (0: scored on a separate selection set)
    n: int  # admissions the maps were fitted on
    deaths: int  # deaths among them
    calibrator: CalibrationMap = field(repr=False)  # the chosen method fitted on all n admissions
    rule: str = "one_se"  # one_se (the simplest within one standard error of the lowest) | min (the lowest)
    se: dict[str, float] = field(default_factory=dict)  # per method: the standard error of its held-out NLL minus
        # the lowest one's (paired per admission; 0 for the lowest itself; inf where either is infinite)

    def to_dict(self) -> dict:
        """JSON-able: the choice, the NLLs and their standard errors (inf -> None) and the fitted map."""
        def finite(v):
            return v if np.isfinite(v) else None

        return {"chosen": self.chosen.value, "nll": {k: finite(v) for k, v in self.nll.items()},
                "folds": self.folds, "n": self.n, "deaths": self.deaths, "calibrator": self.calibrator.to_dict(),
                "rule": self.rule, "se": {k: finite(v) for k, v in self.se.items()}}

    @classmethod
    def from_dict(cls, d: dict) -> Selection:
        nll = {k: (float("inf") if v is None else float(v)) for k, v in d["nll"].items()}
        se = {k: (float("inf") if v is None else float(v)) for k, v in (d.get("se") or {}).items()}
        return cls(Method(d["chosen"]), nll, int(d["folds"]), int(d["n"]), int(d["deaths"]), from_dict(d["calibrator"]),
                   d.get("rule", "min"), se)


def stratified_folds(labels, folds: int = FOLDS, seed: int = 0) -> np.ndarray:
    """Fold index (N,) in 0..folds-1: each class shuffled by ``default_rng(seed)`` and dealt round-robin."""
    y = np.asarray(labels)
    rng = np.random.default_rng(seed)
    out = np.empty(y.shape[0], dtype=np.int64)
    offset = 0
    for cls in (0, 1):
        idx = rng.permutation(np.flatnonzero(y == cls))
        out[idx] = (np.arange(idx.shape[0]) + offset) % folds
        offset += idx.shape[0]  # the next class continues the deal, so fold sizes differ by at most one
    return out


def _held_out_nll(method: Method, p: np.ndarray, y: np.ndarray, fold: np.ndarray, folds: int) -> np.ndarray:
    """(N,) each admission's NLL under the map fitted without its fold."""
    held = np.empty_like(p)
    for f in range(folds):
        test = fold == f
        held[test] = fit(method, p[~test], y[~test]).apply(p[test])
    with np.errstate(over="ignore"):
        return nll_from_probs(y, np.clip(held, 0.0, 1.0))


def _choose(losses: dict[Method, np.ndarray], order: list[Method], rule: str) -> tuple[Method, dict[str, float]]:
    """The method of ``rule`` from per-admission held-out losses, and each one's paired standard error."""
    mean = {m: float(v.mean()) for m, v in losses.items()}
    best = min(order, key=lambda m: (mean[m], order.index(m)))
    se = {}
    for m in order:
        d = losses[m] - losses[best]
        se[m.value] = float(d.std(ddof=1) / np.sqrt(d.shape[0])) if np.all(np.isfinite(d)) and d.shape[0] > 1 \
            else (0.0 if m is best else float("inf"))
    if rule == "min":
        return best, se
    return next(m for m in order if mean[m] <= mean[best] + se[m.value]), se


def select_method(p, labels, methods=tuple(Method), folds: int = FOLDS, seed: int = 0, p_select=None,
                  labels_select=None, rule: str = "one_se") -> Selection:
    """Choose among ``methods`` by held-out NLL (``rule``: see the module docstring) and refit the chosen one
    on all of (``p``, ``labels``).

    Held out by ``folds``-fold cross-fitting of (``p``, ``labels``), or, with ``p_select`` and
    ``labels_select``, on that separate set. Each training part of a fold must hold deaths and survivors:
    fewer deaths (or survivors) than ``folds`` is a ``CalibrationError`` naming both numbers.
    """
    q, y = check_fit_data(p, labels)
    chosen_from = [Method(m) for m in methods]
    if not chosen_from:
        raise CalibrationError("select_method: no methods to choose from")
    if rule not in ("one_se", "min"):
        raise CalibrationError(f"select_method: rule must be 'one_se' or 'min', got {rule!r}")
    losses: dict[Method, np.ndarray] = {}
    if p_select is not None:
        qs, ys = check_fit_data(p_select, labels_select, "the selection set")
        for m in chosen_from:
            with np.errstate(over="ignore"):
                losses[m] = nll_from_probs(ys, np.clip(fit(m, q, y).apply(qs), 0.0, 1.0))
        n_folds = 0
    else:
        n_folds = int(folds)
        fewest = int(min(y.sum(), y.shape[0] - y.sum()))
        if n_folds < 2 or fewest < n_folds:
            raise CalibrationError(f"select_method: {n_folds} folds need at least 2 folds and as many deaths and "
                                   f"survivors; the calibration data hold {int(y.sum())} deaths of {y.shape[0]}")
        fold = stratified_folds(y, n_folds, seed)
        for m in chosen_from:
            losses[m] = _held_out_nll(m, q, y, fold, n_folds)
    chosen, se = _choose(losses, chosen_from, rule)
    nll = {m.value: float(v.mean()) for m, v in losses.items()}
    return Selection(chosen, nll, n_folds, int(y.shape[0]), int(y.sum()), fit(chosen, q, y), rule, se)
