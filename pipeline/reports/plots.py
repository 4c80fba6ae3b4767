"""Plots written as PNG files (matplotlib Agg canvas, imported lazily): the one plot style of the project.

``figure`` and ``save`` are what every plot uses, the evaluation's here and the studies' in experiments/: a
figure on its own Agg canvas at 100 dpi (no pyplot global state), written atomically
(``pipeline.core.fileio.atomic_path``: temporary file in the target folder, then ``os.replace``).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from pipeline.bayes.metrics import EceMode, ReferralCurve, Reliability, check_labels, precision_recall_points
from pipeline.core import fileio


def figure(width: float = 5.0, height: float = 4.0):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def save(fig, path: str | os.PathLike) -> Path:
    """Write ``fig`` as PNG to ``path`` atomically (``fileio.atomic_path``); return the path."""
    with fileio.atomic_path(path) as tmp:
        with open(tmp, "wb") as fh:
            fig.savefig(fh, format="png")
    return Path(path)


def plot_reliability(rel: Reliability, path: str | os.PathLike, title: str = "Reliability diagram",
                     outcome: tuple[str, str] = ("death", "death rate")) -> Path:
    """Observed rate per bin against the diagonal, with bin counts underneath (``outcome``: the outcome and its
    observed rate, in words)."""
    fig = figure(5.0, 5.5)
    top, bottom = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    left, width = rel.edges[:-1], np.diff(rel.edges)  # (n_bins,)
    filled = rel.counts > 0
    top.bar(left[filled], rel.observed[filled], width=width[filled], align="edge", edgecolor="k", alpha=0.7,
            label="observed")
    top.plot(rel.mean_score[filled], rel.mean_score[filled], "o", color="C3", ms=3, label="mean predicted")
    top.plot([0, 1], [0, 1], "k--", lw=1, label="perfect calibration")
    top.set(xlim=(0, 1), ylim=(0, 1), title=title)
    top.set_ylabel(f"observed {outcome[1]}" if rel.mode is EceMode.POSITIVE else "accuracy")
    top.legend(loc="upper left", fontsize=8)
    bottom.bar(left, rel.counts, width=width, align="edge", edgecolor="k", color="C7")
    bottom.set_xlabel(f"predicted probability of {outcome[0]}" if rel.mode is EceMode.POSITIVE else "confidence")
    bottom.set_ylabel("admissions")
    fig.tight_layout()
    return save(fig, path)


def plot_pr_curve(
    labels, p, path: str | os.PathLike, true_risk=None, title: str = "Precision-recall"
) -> Path:
    """Step precision-recall curve of ``p`` (and of ``true_risk`` when given) with the base rate."""
    y = check_labels(labels)
    fig = figure()
    ax = fig.subplots()
    curves = [("model", p)] + ([("true risk", true_risk)] if true_risk is not None else [])
    for name, scores in curves:
        recall, precision = precision_recall_points(y, scores)
        ax.step(recall, precision, where="pre", label=name)  # (R_{n-1}, R_n] at P_n, as average precision sums
    ax.axhline(y.mean(), color="k", ls=":", lw=1, label=f"base rate {y.mean():.3f}")
    ax.set(xlim=(0, 1), ylim=(0, 1.02), xlabel="recall", ylabel="precision", title=title)
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    return save(fig, path)


def referral_title(curve: ReferralCurve, split: str | None = None) -> str:
    """"Referring the most uncertain admissions (val), ranked by mutual information"."""
    where = f" ({split})" if split else ""
    measure = {"mi": "mutual information", "sd": "the spread of the risk", "entropy": "predictive entropy",
               "band": "the width of the 5-95% band"}.get(curve.measure.value, curve.measure.value)
    return f"Referring the most uncertain admissions{where}, ranked by {measure}"


def plot_referral(curve: ReferralCurve, path: str | os.PathLike, title: str | None = None) -> Path:
    """AUC-PR and NLL on the admissions kept against the fraction referred (``title``: default
    ``referral_title(curve)``)."""
    fig = figure(5.0, 5.5)
    top, bottom = fig.subplots(2, 1, sharex=True)
    top.plot(curve.fractions, curve.auc_pr, "o-")
    top.set(ylabel="AUC-PR (kept)", title=title or referral_title(curve))
    top.title.set_fontsize(9)
    bottom.plot(curve.fractions, curve.nll, "o-", color="C1")
    bottom.set(xlabel="fraction referred", ylabel="NLL (kept, nats)")
    fig.tight_layout()
    return save(fig, path)


SEVERITY_METRICS = {"nll": "NLL (nats)", "accuracy": "accuracy", "ece": "ECE (top-label)"}  # panels of plot_severity


def plot_severity(series: dict, path: str | os.PathLike, title: str = "Metrics against corruption severity") -> Path:
    """One panel per metric (NLL, accuracy, ECE) against the setting: clean, then severities 1..5.

    ``series`` = {line label: {setting ("clean", "1".."5"): {metric: value or (mean, sd)}}}: a line per
    method (a comparison, with ±sd bars over seeds) or per corruption (one run). Settings a line lacks
    are left out of it.
    """
    settings = ["clean"] + sorted({s for rows in series.values() for s in rows if s != "clean"}, key=int)
    x = {s: (0 if s == "clean" else int(s)) for s in settings}
    fig = figure(4.0 * len(SEVERITY_METRICS), 3.8)
    axes = fig.subplots(1, len(SEVERITY_METRICS))
    for ax, (metric, label) in zip(axes, SEVERITY_METRICS.items()):
        for name, rows in series.items():
            points = [(x[s], rows[s][metric]) for s in settings if s in rows and metric in rows[s]]
            if not points:
                continue
            xs = [p[0] for p in points]
            means = [v[0] if isinstance(v, (tuple, list)) else v for _, v in points]
            sds = [v[1] if isinstance(v, (tuple, list)) else 0.0 for _, v in points]
            ax.errorbar(xs, means, yerr=sds if any(sds) else None, marker="o", ms=3, capsize=2, label=name)
        ax.set_xticks([x[s] for s in settings], ["clean" if s == "clean" else s for s in settings])
        ax.set(xlabel="corruption severity", ylabel=label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return save(fig, path)


def plot_retention(retention: dict, path: str | os.PathLike, truth: dict | None = None,
                   title: str = "Retention") -> Path:
    """AUC-PR and NLL of the kept admissions (with their bootstrap intervals) against the share referred and,
    with ``truth``, the kept admissions' mean KL(true || predicted) (``evaluate_policy``'s JSON sections)."""
    import numpy as np

    panels = 3 if truth else 2
    fig = figure(5.0, 2.6 * panels)
    axes = fig.subplots(panels, 1, sharex=True)
    f = np.asarray(retention["fractions"], dtype=float)
    for ax, key, label, color in ((axes[0], "auc_pr", "AUC-PR (kept)", "C0"), (axes[1], "nll", "NLL (kept, nats)",
                                                                                 "C1")):
        y = np.array([np.nan if v is None else v for v in retention[key]], dtype=float)
        ax.plot(f, y, "o-", color=color, ms=3)
        ci = np.array([[np.nan if v is None else v for v in pair] for pair in retention.get(f"{key}_ci") or []],
                      dtype=float)
        if ci.size and np.isfinite(ci).any():
            ax.fill_between(f, ci[:, 0], ci[:, 1], color=color, alpha=0.2, lw=0)
        ax.set(ylabel=label)
        ax.grid(alpha=0.3)
    if truth:
        axes[2].plot(truth["fractions"], truth["kl"], "o-", color="C2", ms=3)
        axes[2].set(ylabel="KL(true || risk), kept")
        axes[2].grid(alpha=0.3)
    axes[0].set_title(title, fontsize=9)
    axes[-1].set(xlabel="share referred")
    fig.tight_layout()
    return save(fig, path)
