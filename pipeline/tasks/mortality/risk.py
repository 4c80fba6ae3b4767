"""The risk table: a model's predictions of a FeatureSet -> one row per admission (``contracts.RISK``).

``risk_table`` turns the per-admission summary of the draws (or of a Gaussian logit) into the published
columns; with the run's ``Policy`` (``bayes.referral.policy``: its recalibration map, decision threshold and
refer rule) the calibrated risk, the Venn-Abers interval, the high-risk decision, decision uncertainty and the
rule's refer flag; without one (a run trained before it) the legacy flag: the refer measure above its
validation threshold. ``score_features`` is the whole path for a FeatureSet (the engine's predictor, then the
table): what ``score``, ``serve`` and the pyfunc call.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from pipeline.bayes import metrics
from pipeline.core.contracts import DEFAULT_BATCH, RISK
from pipeline.tasks.mortality.predict import Predictions, RiskModel, feature_predictions

MI_FLOOR = 1e-9  # nats; MI below this is rounding noise of identical draws (e.g. a deterministic model)
RISK_COLUMNS = RISK.names()  # the risk table's columns (contracts.RISK)


def refer_threshold(mutual_info, fraction: float) -> float:
    """Threshold of an uncertainty measure that refers about the ``fraction`` most uncertain admissions.

    ``mutual_info``: the values of the run's refer measure (the mutual information by default; any
    ``metrics.Measure``). Admissions strictly above the (1 - fraction) quantile are referred, so ties at
    the threshold are never referred. The threshold is at least ``MI_FLOOR``: a model whose
    draws agree (deterministic: MI = 0 up to rounding) refers nobody by MI.
    """
    mi = np.asarray(mutual_info, dtype=np.float64)
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"refer fraction must lie in [0, 1), got {fraction}")
    if mi.size == 0:
        raise ValueError("refer_threshold: no admissions")
    q = mi.max() if fraction == 0.0 else np.quantile(mi, 1.0 - fraction)
    return float(max(q, MI_FLOOR))


def risk_table(predictions, keys, refer_threshold: float | None, n_events=None, n_bags=None, observed_hours=None,
               before_prediction_time=None, refer_measure: metrics.Measure | str = metrics.Measure.MUTUAL_INFORMATION,
               policy_columns=None) -> pd.DataFrame:
    """Per-admission risk summary from (S, K, N) (or (D, N)) logits or a ``metrics.Summary``.

    Columns (``contracts.RISK`` states each one's meaning): ``key``; ``risk_mean`` (predictive probability of the
    outcome), ``risk_sd``, ``risk_p05``/``risk_p95`` (5th/95th percentile of p under the posterior),
    ``mutual_info`` (nats), ``entropy`` (predictive entropy, nats), ``has_spread`` (the weight posterior moves
    the admission's logit; False: the zeros of risk_sd, mutual_info and the band mean no posterior reaches it,
    not certainty); with ``policy_columns`` (``Policy.apply``'s) the calibrated risk, its Venn-Abers interval,
    ``high_risk``, ``decision_uncertainty`` and the rule's ``refer``; without (a run that has no policy) NaN,
    False and ``refer`` = the ``refer_measure`` > ``refer_threshold``; ``n_events`` (passthrough, -1 when not
    given), ``no_events`` (the admission had zero bags: the model saw only its context), ``observed_hours``
    (passthrough, to 0.001 h; -1 when the features do not record it) and ``before_prediction_time``
    (passthrough, False when not recorded: the risk rests on a partial window).
    """
    summary = predictions if isinstance(predictions, metrics.Summary) else metrics.Summary.from_draws(predictions)
    n = len(summary)
    keys = np.asarray(keys).astype(str)
    if keys.shape != (n,):
        raise ValueError(f"risk_table: {keys.shape[0]} keys for {n} admissions")
    events = np.full(n, -1, dtype=np.int64) if n_events is None else np.asarray(n_events, dtype=np.int64)
    if n_bags is not None:
        empty = np.asarray(n_bags) == 0
    elif n_events is not None:
        empty = events == 0
    else:
        empty = np.zeros(n, dtype=bool)
    observed = np.full(n, np.nan) if observed_hours is None else np.asarray(observed_hours, dtype=np.float64)
    observed = np.where(np.isnan(observed), -1.0, np.round(observed, 3))  # float32 storage noise off; -1: unknown
    before = (np.zeros(n, dtype=bool) if before_prediction_time is None
              else np.asarray(before_prediction_time, dtype=bool))
    c = policy_columns
    nan = np.full(n, np.nan)
    legacy = (summary.measure(refer_measure) > float(refer_threshold) if refer_threshold is not None
              else np.zeros(n, dtype=bool))
    return pd.DataFrame(
        {
            "key": keys,
            "risk_mean": summary.mean,
            "risk_sd": summary.sd,
            "risk_p05": summary.p05,
            "risk_p95": summary.p95,
            "mutual_info": summary.mutual_info,
            "entropy": summary.entropy,
            "has_spread": summary.spread.astype(bool),
            "risk_calibrated": nan if c is None else np.asarray(c.risk_calibrated, dtype=np.float64),
            "risk_va_low": nan if c is None else np.asarray(c.va_low, dtype=np.float64),
            "risk_va_high": nan if c is None else np.asarray(c.va_high, dtype=np.float64),
            "high_risk": np.zeros(n, dtype=bool) if c is None else np.asarray(c.high_risk, dtype=bool),
            "decision_uncertainty": nan if c is None else np.asarray(c.decision_uncertainty, dtype=np.float64),
            "refer": legacy if c is None else np.asarray(c.refer, dtype=bool),
            "n_events": events,
            "no_events": empty.astype(bool),
            "observed_hours": observed,
            "before_prediction_time": before,
        },
        columns=list(RISK_COLUMNS),
    )


def predictive(pred: Predictions, groups: dict | None = None):
    """The policy's view of ``pred`` (``bayes.referral.policy.Predictive``): the risk, the probability draws
    of the posterior or its Gaussian logit, the context groups."""
    from pipeline.bayes.referral.policy import Predictive

    if pred.mu is not None:
        return Predictive(pred.summary.mean, mu=pred.mu, var=pred.var, groups=groups or {})
    draws = metrics.sigmoid(metrics.as_draws(pred.logits))  # (S, K, N) -> (D, N) probabilities
    return Predictive(pred.summary.mean, draws=draws, groups=groups or {})


def score_features(model: RiskModel, fs, samples: int, refer: float | None, batch_size: int = DEFAULT_BATCH,
                   max_bags: int | None = None, max_tokens: int | None = None, generator=None,
                   refer_measure: metrics.Measure | str = metrics.Measure.MUTUAL_INFORMATION, policy=None,
                   context_vocab: list[str] | None = None, resident: bool | None = None) -> pd.DataFrame:
    """Risk table of a FeatureSet (batched; memory bounded by ``batch_size``·S·K; weight draws from
    ``generator``, None: torch's global generator). ``policy``: the run's ``Policy`` (its columns; a per-group
    rule reads each admission's group from its context tokens, ``context_vocab``); without one, ``refer`` is the
    threshold of ``refer_measure``. ``resident``: the batches gathered on the model's device (None: on a CUDA
    device; ``predict.feature_batches``), the same batches."""
    return scored_features(model, fs, samples, refer, batch_size, max_bags, max_tokens, generator, refer_measure,
                           policy, context_vocab, resident)[0]


def scored_features(model: RiskModel, fs, samples: int, refer: float | None, batch_size: int = DEFAULT_BATCH,
                    max_bags: int | None = None, max_tokens: int | None = None, generator=None,
                    refer_measure: metrics.Measure | str = metrics.Measure.MUTUAL_INFORMATION, policy=None,
                    context_vocab: list[str] | None = None, resident: bool | None = None
                    ) -> tuple[pd.DataFrame, dict]:
    """(``score_features``' table, the policy's measures of the admissions: ``Policy.measures``, every ordering's,
    {} without a policy): what the shift check compares (``tasks.mortality.shift``)."""
    pred = feature_predictions(model, fs, samples, batch_size, max_bags, max_tokens, generator, resident)
    if pred.summary is None:
        return RISK.arrow_schema().empty_table().to_pandas(), {}
    cols = None if policy is None else policy.apply(predictive(pred, policy_groups(policy, fs, context_vocab)))
    table = risk_table(pred.summary, fs.keys, refer, n_events=fs.n_events, n_bags=fs.n_bags,
                       observed_hours=fs.observed_hours, before_prediction_time=fs.before_prediction_time,
                       refer_measure=refer_measure, policy_columns=cols)
    return table, ({} if cols is None else cols.measures)


def refer_measure_of(info) -> metrics.Measure:
    """The run's refer measure (``refer_measure`` of its ``runs.info.ModelInfo``; runs recorded before it existed
    referred by MI)."""
    return metrics.Measure(getattr(info, "refer_measure", None) or metrics.Measure.MUTUAL_INFORMATION.value)


def outcome_words(words=None):
    """The outcome a policy's sentences count (``bayes.referral.text.Outcome``) of a task's words
    (``data.task.TaskWords``; None: in-hospital mortality's, "death", "deaths", "survivors")."""
    from pipeline.bayes.referral.text import DEATHS, Outcome

    return DEATHS if words is None else Outcome(words.event, words.events, words.others)


def policy_of(info, strict: bool = True, words=None, **changes):
    """The run's ``bayes.referral.policy.Policy`` (``ModelInfo.policy``; None: a run made before calibration, or
    without a calibration half), its refer rule re-derived under ``changes`` (alpha, delta, risk, ordering,
    group) when given; ``strict``: settings its calibration half cannot certify raise, naming them. ``words``: the
    run's task (``data.task.TaskWords``), for a policy recorded before its own words."""
    d = getattr(info, "policy", None)
    if not d:
        return None
    from pipeline.bayes.referral.policy import Policy

    policy = Policy.from_dict(d, outcome_words(words))
    changes = {k: v for k, v in changes.items() if v is not None}
    return policy.rederive(strict=strict, **changes) if changes else policy


def policy_groups(policy, fs, context_vocab: list[str] | None) -> dict:
    """family -> (N,) groups of ``fs``'s admissions, for a per-group refer rule ({} for any other)."""
    family = None if policy is None else policy.config.group
    if family is None:
        return {}
    if context_vocab is None:
        raise ValueError(f"the refer rule is per {family}: the context vocabulary is needed to read the groups")
    from pipeline.data.features import context_groups

    return {family: context_groups(fs, context_vocab, family)}
