"""What a mortality run's validation records: the refer measure and its threshold, the validation figures and
the policy, from the validation predictions.

``validation_summary`` chooses the refer measure (by the true risk where the source is synthetic,
``choose_refer_measure``; else the benchmark's choice for the model kind), its threshold and the validation
metrics and reliability diagram (``Validation``: its part of ``model_info.json`` and of the checkpoint);
``fit_run_policy`` fits the run's ``Policy`` (recalibration, decision threshold, refer rule) on the validation
halves. The mortality task's ``finish`` calls them after training and after a Laplace fit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pipeline.bayes import metrics
from pipeline.tasks.mortality import risk

VAL_METRICS = (*metrics.METRICS, "n", "positives")  # model_info.json's val_metrics
LOGGED = (*metrics.METRICS, "mean_mutual_information")  # logged as best_val_<name>

# The refer measure of a run whose validation has no true risk (real data), by model kind: the measure
# with the highest referral gain against the truth on the synthetic benchmark's validation
# (docs/experiments/2026-12-02-uncertainty-vs-truth.md). A point model (no spread for any admission)
# always refers by entropy, its only uncertainty.
BENCHMARK_REFER_MEASURE = {"rank1": metrics.Measure.ENTROPY, "laplace": metrics.Measure.ENTROPY}
FALLBACK_REFER_MEASURE = metrics.Measure.ENTROPY  # other kinds


class ReferSource:
    """Why a run refers by its measure (``refer_measure_source`` of model_info.json)."""

    TRUTH = "validation truth"  # highest referral gain against the synthetic source's true risk on validation
    BENCHMARK = "synthetic benchmark"  # no truth here: the choice made on the synthetic benchmark
        # (BENCHMARK_REFER_MEASURE)
    POINT = "point model"  # no admission has a spread: entropy is the only uncertainty


@dataclass
class Validation:
    """The validation summary stored with a model."""

    refer_threshold: float  # the refer measure's value above which an admission is referred
    refer_fraction: float  # the share of validation admissions the threshold refers
    metrics: dict  # VAL_METRICS of the predictive on validation
    reliability: dict  # the reliability diagram: counts, mean_p, observed (15 bins; empty bins None)
    scalars: dict  # best_val_<metric> for MLflow (LOGGED) and refer_threshold
    refer_measure: metrics.Measure = metrics.Measure.MUTUAL_INFORMATION  # what `refer` ranks by
    refer_measure_source: str = ReferSource.BENCHMARK  # why (ReferSource)
    vs_truth: dict | None = None  # each measure's Spearman and referral gain against the truth on validation

    def info(self) -> dict:
        """Its part of ``model_info.json`` (and of a torch run's best.pt: ``checkpoint_entries``)."""
        gains = None if self.vs_truth is None else {
            m: {k: v[k] for k in ("spearman", "referral_gain")} for m, v in self.vs_truth["measures"].items()}
        return {"refer_threshold": self.refer_threshold, "refer_fraction": self.refer_fraction,
                "refer_measure": self.refer_measure.value, "refer_measure_source": self.refer_measure_source,
                "val_uncertainty_vs_truth": gains, "val_metrics": self.metrics, "val_reliability": self.reliability}

    def checkpoint_entries(self) -> dict:
        """What a checkpoint stores with the model for ``score`` and the pyfunc: threshold and measure."""
        return {"refer_threshold": self.refer_threshold, "refer_measure": self.refer_measure.value}


def choose_refer_measure(summary: metrics.Summary, true_risk=None, model_kind: str | None = None
                         ) -> tuple[metrics.Measure, str, dict | None]:
    """(measure, ReferSource, uncertainty_vs_truth or None) for a run's validation predictions."""
    vs = None if true_risk is None else metrics.uncertainty_vs_truth(summary, true_risk)
    if not summary.spread.any():
        return metrics.Measure.ENTROPY, ReferSource.POINT, vs
    if vs is not None and vs["best"] is not None:
        return metrics.Measure(vs["best"]), ReferSource.TRUTH, vs
    return BENCHMARK_REFER_MEASURE.get(model_kind or "", FALLBACK_REFER_MEASURE), ReferSource.BENCHMARK, vs


def validation_summary(logits, labels, refer_fraction: float, *, summary: metrics.Summary | None = None,
                       true_risk=None, model_kind: str | None = None) -> Validation:
    """Refer measure, threshold and metrics from validation logits (S, K, N) or (S, N) and labels (N,).

    ``summary``: the per-admission predictive (default: of the draws; a Gaussian-logit model's comes
    from ``predict.feature_predictions``); ``true_risk``: the validation admissions' true risk on a
    synthetic source, by which the refer measure is chosen (``choose_refer_measure``); ``model_kind``
    picks the benchmark's choice without it.
    """
    summary = summary if summary is not None else metrics.Summary.from_draws(logits)
    measure, source, vs = choose_refer_measure(summary, true_risk, model_kind)
    threshold = risk.refer_threshold(summary.measure(measure), refer_fraction)
    report = metrics.evaluate_predictions(logits, labels, n_bootstrap=0)
    report["mean_mutual_information"] = float(summary.mutual_info.mean())  # a Gaussian model's,
        # not its repeated logits'
    reliability = {k.removeprefix("reliability_"): [None if v is None or math.isnan(v) else v for v in report[k]]
                   for k in ("reliability_counts", "reliability_mean_p", "reliability_observed")}
    scalars = {f"best_val_{k}": report[k] for k in LOGGED if k in report}
    if vs is not None:
        scalars.update({f"best_val_referral_gain_{m}": v["referral_gain"] for m, v in vs["measures"].items()
                        if v["referral_gain"] is not None})
    return Validation(refer_threshold=threshold, refer_fraction=refer_fraction,
                      metrics={k: report[k] for k in VAL_METRICS}, reliability=reliability,
                      scalars={**scalars, "refer_threshold": threshold}, refer_measure=measure,
                      refer_measure_source=source, vs_truth=vs)



def fit_run_policy(model, selection, calibration, *, samples: int, batch_size: int, max_bags: int | None,
                   max_tokens: int | None, seed: int, context_vocab: list[str], config=None, words=None):
    """A run's ``Policy`` (``bayes.referral.policy``: its recalibration map, decision threshold and refer rule)
    from the validation halves ``selection`` and ``calibration`` (FeatureSets): both predicted as scoring
    predicts (``score_samples`` draws, the evaluation stream's seed), with each admission's context groups;
    ``words``: the run's task (``data.task.TaskWords``; None: in-hospital mortality), whose outcome its sentences
    count. None when the run kept no calibration half (``calibration_share`` 0), when it holds no positive or no
    negative, or when the selection half does (a toy world's few validation admissions): the threshold rule then has
    no sensitivity to reach, unless the decision threshold is fixed (``config.decision_threshold``); ``no_policy``
    says which."""
    from pipeline.bayes.referral.policy import GROUP_FAMILIES, ReferralConfig, fit_policy
    from pipeline.core.seeds import EVAL_STREAM, stream_seed
    from pipeline.data.features import context_groups
    from pipeline.tasks.mortality import predict

    if no_policy(selection, calibration, config) is not None:
        return None
    halves = []
    for fs in (selection, calibration):
        gen = predict.seeded_generator(stream_seed(seed, EVAL_STREAM))
        pred = predict.feature_predictions(model, fs, samples, batch_size, max_bags, max_tokens, gen)
        groups = {f: context_groups(fs, context_vocab, f) for f in GROUP_FAMILIES}
        halves.append(risk.predictive(pred, groups))
    return fit_policy(halves[0], selection.label, halves[1], calibration.label, config or ReferralConfig(), seed,
                      risk.outcome_words(words))


def no_policy(selection, calibration, config=None, share: float | None = None, words=None) -> str | None:
    """Why the validation halves ``selection`` and ``calibration`` fit no policy, in words naming the condition that
    held and the option as typed (``share``: the run's ``calibration_share``; ``words``: its task's, None:
    in-hospital mortality); None when they can fit one (``fit_run_policy``)."""
    from pipeline.data.task import MORTALITY

    w = words or MORTALITY
    n, m = (0 if calibration is None else len(calibration)), len(selection)
    shared = "" if share is None else f", --calibration-share {share:g}"
    if not n:
        if not share:
            return ("the run kept no validation admissions apart for calibration (--calibration-share "
                    f"{0 if share is None else share:g})")
        return (f"none of the {_admissions(m)} fell in the calibration half (--calibration-share {share:g} keeps "
                "each apart by a hash of its pseudonym); a recalibration map and a refer rule need both outcomes")
    fixed = config is not None and config.decision_threshold is not None

    def lacks(labels) -> str | None:
        present = {int(v) for v in np.asarray(labels).tolist()}
        return None if len(present) > 1 else f"no {w.event}" if 1 not in present else f"only {w.events}"

    cal, sel = lacks(calibration.label), None if fixed or not m else lacks(selection.label)
    need_cal = "a recalibration map and a refer rule need both outcomes"
    need_sel = "the decision threshold's sensitivity rule needs both outcomes (--decision-threshold fixes one)"
    if not m and not fixed:
        return (f"none of the {_admissions(n)} fell in the selection half, which chooses the decision threshold "
                f"(all were kept apart for calibration{shared}); {need_sel}")
    cal_half = f"the {_admissions(n)} kept apart for calibration (the calibration half{shared})"
    sel_half = f"the {_admissions(m)} that choose{'s' if m == 1 else ''} the decision threshold (the selection half)"
    if cal is not None and cal == sel:
        return (f"the {_admissions(n + m)} held {cal}, in both halves ({n:,} kept apart for calibration{shared}; "
                f"{m:,} that choose the decision threshold); {need_cal}, and {need_sel}")
    said = [f"{half} held {missing}; {need}" for half, missing, need in ((cal_half, cal, need_cal),
                                                                       (sel_half, sel, need_sel)) if missing]
    return "; and ".join(said) or None


def _admissions(k: int) -> str:
    return f"{k:,} validation admission{'' if k == 1 else 's'}"


def older_no_policy(share: float | None) -> str:
    """Why a run that recorded no reason has no policy, from its ``calibration_share`` (None: not recorded, a run
    trained before risks were recalibrated)."""
    if share is None:
        return "this run was trained before risks were recalibrated"
    if not share:
        return "the run kept no validation admissions apart for calibration (--calibration-share 0)"
    return (f"a validation half of the run (--calibration-share {share:g}) held a single outcome (the run, trained "
            "before the reason was recorded, does not say which half)")


def said_no_policy(info) -> str:
    """Why the run of ``info`` (``runs.info.ModelInfo``) has no policy: the reason it recorded at training
    (``no_policy``), else what its settings tell."""
    if getattr(info, "no_policy", None):
        return str(info.no_policy)
    tc = getattr(info, "train_config", None) or {}
    return older_no_policy(float(tc["calibration_share"]) if tc.get("calibration_share") is not None else None)
