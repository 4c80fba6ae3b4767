"""How a mortality run scores: ``MortalityScorer``, the one object ``score``, ``evaluate``, the pyfunc and ``serve``
call (``Task.scorer``, ``pipeline.tasks.base.Scorer``).

It holds the run's model and what its scoring reads, resolved once: the Monte Carlo samples (the request's, else
the model's ``score_samples``: ``engine.predict.score_samples``), the refer threshold and measure, the run's
``Policy`` (recalibration, decision threshold, refer rule; or one re-derived by the caller; its sentences in the
words of the run's task, ``words``), the context
vocabulary a per-group rule reads its groups from, the caps on bags and tokens, the prediction window and
lookback of the extraction. ``table(fs, generator)`` is the risk table of a FeatureSet
(``risk.score_features``), ``predictions`` its draws (``predict.feature_predictions``); a request (a features
DataFrame and its params: ``request``) is read, checked and scored by ``check_request`` / ``predict_request``.
"""

from __future__ import annotations

import logging

from pipeline.core.contracts import DEFAULT_BATCH
from pipeline.tasks.mortality import predict, risk
from pipeline.tasks.mortality.request import read_request, request_settings

log = logging.getLogger(__name__)

RUN_POLICY = "run"  # ``policy``'s default: the run's own policy (``risk.policy_of``)


class MortalityScorer:
    """A mortality run's model and its scoring settings (see the module docstring)."""

    def __init__(self, run, *, samples: int | None = None, batch_size: int = DEFAULT_BATCH,
                 policy: object = RUN_POLICY) -> None:
        """``run``: a ``runs.load.Run`` (model, info, vocabulary, manifest, model_info.json); ``samples``: draws per
        component (None: the model's ``score_samples``); ``policy``: the ``Policy`` to apply (``RUN_POLICY``: the
        run's own; None: none, the legacy refer flag)."""
        self.model, self.info = run.model, run.info
        self.samples = predict.score_samples(samples, run.info)
        self.batch_size = int(batch_size)
        self.refer_threshold = run.info.refer_threshold
        self.refer_measure = risk.refer_measure_of(run.info)
        self.words = run.words  # what the run predicts, in words (data.task.TaskWords)
        self.policy = risk.policy_of(run.info, words=self.words) if policy is RUN_POLICY else policy
        vocab = run.vocab or {}
        self.context_vocab = vocab.get("context")
        sizes = (getattr(run, "model_info", None) or {}).get("vocab_sizes")
        self.vocab_sizes = sizes or ({"tokens": len(vocab["tokens"]), "context": len(vocab["context"])} if vocab
                                     else None)
        config = (run.manifest or {}).get("config") or {}
        self.window_hours = config.get("prediction_hours")  # the prediction time T, hours after admission (None)
        self.lookback_days = config.get("lookback_days")  # the extraction's lookback (None: not recorded)

    @property
    def value_channel(self) -> bool:
        """The model reads (and needs) the features' ``bag_values``."""
        return bool(self.model.value_channel)

    def generator(self, seed: int):
        """The draws' stream of a scoring call: a CPU generator seeded with ``seed`` (the predictor follows it onto
        the model's device; ``engine.predict.seeded_generator``)."""
        return predict.seeded_generator(seed)

    def predictions(self, fs, generator=None) -> predict.Predictions:
        """The draws and per-admission summary of a FeatureSet (``predict.feature_predictions``)."""
        return predict.feature_predictions(self.model, fs, self.samples, self.batch_size, self.info.max_bags,
                                           self.info.max_tokens, generator)

    def groups(self, fs) -> dict:
        """family -> (N,) groups of ``fs``'s admissions for a per-group refer rule ({} for any other)."""
        return risk.policy_groups(self.policy, fs, self.context_vocab)

    def table(self, fs, generator=None):
        """The risk table of a FeatureSet (``contracts.RISK``; ``risk.score_features``), its draws from
        ``generator`` (None: torch's global stream)."""
        return self.scored(fs, generator)[0]

    def scored(self, fs, generator=None):
        """(the risk table, the policy's measures of its admissions: ``risk.scored_features``) of a FeatureSet."""
        return risk.scored_features(self.model, fs, self.samples, self.refer_threshold, self.batch_size,
                                    self.info.max_bags, self.info.max_tokens, generator, self.refer_measure,
                                    self.policy, self.context_vocab)

    # ------------------------------------------------------------------------ requests (the pyfunc, serve)

    def prepare_requests(self) -> None:
        if self.window_hours is None:
            log.warning("the model was logged without its extraction settings: before_prediction_time cannot be "
                        "derived from an input's observed_hours and stays False")

    def request(self, frame, params: dict | None = None):
        """(FeatureSet, RequestSettings) of a request DataFrame and its params; ``RequestError`` when bad."""
        settings = request_settings(params, self.info)
        fs = read_request(frame, self.vocab_sizes, self.window_hours, self.value_channel, self.lookback_days)
        return fs, settings

    def check_request(self, frame, params: dict | None = None) -> None:
        self.request(frame, params)

    def predict_request(self, frame, params: dict | None = None):
        """The risk table (one row per input row, in order) of a request, its draws from a generator of its own
        ``seed`` on the model's device: the same request gives the same answer whatever else runs."""
        from pipeline.core.devices import model_device

        fs, settings = self.request(frame, params)
        scorer = self if settings.samples == self.samples and settings.batch_size == self.batch_size else \
            self._with(settings.samples, settings.batch_size)
        return scorer.table(fs, predict.seeded_generator(settings.seed, model_device(self.model)))

    def _with(self, samples: int, batch_size: int) -> MortalityScorer:
        """A copy scoring ``samples`` draws per component in batches of ``batch_size``."""
        out = object.__new__(MortalityScorer)
        out.__dict__.update(self.__dict__, samples=samples, batch_size=batch_size)
        return out
