"""Evaluation metrics for binary mortality predictions made of Monte Carlo / mixture draws.

Shapes: ``D`` weight draws, ``N`` admissions. A rank-1 model evaluated with ``S`` Monte Carlo
samples per mixture component and ``K`` components gives ``D = S*K`` draws. Flattened draws are
sample-major then member-major (docs/architecture.md): draw ``d = s*K + k``, so ``(D, N) <-> (S, K, N)``.
A *member* is one mixture component: its prediction is the mean probability over its S samples.

All logarithms are natural (NLL, entropies and mutual information are in nats). Only numpy is
imported; probabilities come from logits through log-sigmoid so that extreme logits never turn
into ``log(0)``.

Degenerate inputs: AUC-PR and AUC-ROC are ``nan`` when ``labels`` hold a single class (both are
undefined or trivial there; sklearn would return 1.0 for AUC-PR with all-positive labels).

Modules: ``draws`` (likelihoods, entropies, disagreement), ``ranking`` (AUC-PR, AUC-ROC, Brier),
``calibration`` (reliability, ECE, ECE floor, recalibration), ``summary`` (per-admission
summaries of draws or of a Gaussian logit; uncertainty against the true risk), ``report`` (bootstrap, referral,
``evaluate_predictions``), ``selective`` (AURC, AUGRC, risk at coverage, coverage at risk, retention
curves). Every public name is re-exported here: ``from pipeline import metrics``.
"""

from pipeline.bayes.metrics.calibration import (
    N_BINS,
    EceFloor,
    EceMode,
    Recalibration,
    Reliability,
    bin_index,
    ece,
    ece_floor,
    recalibration,
    reliability,
)
from pipeline.bayes.metrics.draws import (
    Disagreement,
    Uncertainty,
    as_components,
    as_draws,
    check_labels,
    check_probs,
    disagreement,
    draw_nll,
    expected_entropy,
    log_likelihood,
    log_sigmoid,
    member_nll,
    member_predictive,
    mixture_nll,
    mixture_nll_per_example,
    mutual_information,
    nll_from_probs,
    predictive,
    predictive_band,
    predictive_entropy,
    predictive_sd,
    sigmoid,
    uncertainty,
)
from pipeline.bayes.metrics.ranking import average_precision, brier, precision_recall_points, roc_auc
from pipeline.bayes.metrics.report import (
    METRICS,
    ReferralCurve,
    bootstrap_indices,
    bootstrap_replicates,
    evaluate_predictions,
    percentile_interval,
    referral_curve,
)
from pipeline.bayes.metrics.selective import (
    COVERAGES,
    RetentionCurve,
    SelectiveLoss,
    augrc,
    aurc,
    coverage_at_risk,
    kept_mean,
    retention_curve,
    selective_loss,
    selective_metrics,
    selective_risk,
)
from pipeline.bayes.metrics.summary import (
    GH_NODES,
    REFERRAL_FRACTIONS,
    Measure,
    Summary,
    average_ranks,
    best_measure,
    gauss_hermite,
    gaussian_sigmoid_moments,
    kept_error,
    kl_to_truth,
    referral_gain,
    spearman,
    uncertainty_vs_truth,
)

__all__ = [
    "Disagreement", "EceFloor", "EceMode", "METRICS", "N_BINS", "Recalibration", "ReferralCurve",
    "Reliability", "Uncertainty", "as_components", "as_draws", "average_precision", "bin_index",
    "bootstrap_indices", "bootstrap_replicates", "brier", "check_labels", "check_probs", "disagreement",
    "draw_nll", "ece", "ece_floor", "evaluate_predictions", "expected_entropy", "log_likelihood",
    "log_sigmoid", "member_nll", "member_predictive", "mixture_nll", "mixture_nll_per_example",
    "mutual_information", "nll_from_probs", "percentile_interval", "precision_recall_points", "predictive",
    "predictive_entropy", "predictive_sd", "recalibration", "referral_curve", "reliability", "roc_auc",
    "sigmoid", "uncertainty", "GH_NODES", "REFERRAL_FRACTIONS", "Measure", "Summary", "average_ranks",
    "best_measure", "gauss_hermite", "gaussian_sigmoid_moments", "kept_error", "kl_to_truth", "predictive_band",
    "referral_gain", "spearman", "uncertainty_vs_truth", "COVERAGES", "RetentionCurve", "SelectiveLoss", "augrc",
    "aurc", "coverage_at_risk", "kept_mean", "retention_curve", "selective_loss", "selective_metrics", "selective_risk",
]
