"""How a vision run scores: ``VisionScorer`` (``Task.scorer``, ``pipeline.tasks.base.Scorer``), what ``vision
evaluate`` calls.

It holds the run's image model and the draws per component (the evaluation's ``samples``, else the run's
``eval_samples``: ``ModelInfo.score_samples``) and batch size; ``draws`` is the engine's Monte Carlo predictor
over the model (``engine.predict.draws_of``: logits (S, K, N, C), categorical), ``logits`` its draws of a set
of images and ``evaluate`` the clean and corrupted report (``tasks.vision.evaluate.evaluate_vision``). An image
model is not served: the request path refuses every request with one line.
"""

from __future__ import annotations

from pipeline.tasks.base import RequestError


class VisionScorer:
    """A vision run's model and its scoring settings (see the module docstring)."""

    def __init__(self, run, *, samples: int | None = None, batch_size: int = 32) -> None:
        self.model, self.info, self.likelihood = run.model, run.info, run.task.likelihood
        self.samples = int(samples or run.info.score_samples or 1)
        self.batch_size = int(batch_size)

    @property
    def draws(self):
        """``draws(batches, samples, seed)`` -> logits (S, K, N, C): the engine's predictor over the model."""
        from pipeline.engine.predict import draws_of

        return draws_of(self.model, self.likelihood)

    def logits(self, images, seed: int = 0):
        """Logits (S, K, N, C) of images (an array (N, C, H, W) in [0, 1] or an ImageSet), ``samples`` draws."""
        from pipeline.tasks.vision.evaluate import image_batches

        return self.draws(image_batches(images, self.batch_size), self.samples, seed)

    def evaluate(self, test, corruptions=(), severities=(1, 2, 3, 4, 5), seed: int = 0, corruption_seed: int = 0,
                 progress=None):
        """``tasks.vision.evaluate.evaluate_vision`` of the model on ``test``: clean, then each corruption at each
        severity."""
        from pipeline.tasks.vision.evaluate import evaluate_vision

        return evaluate_vision(self.draws, test, self.samples, self.model.components, corruptions, severities,
                               seed, corruption_seed, self.batch_size, progress=progress)

    # ------------------------------------------------------------------------ requests: none

    def prepare_requests(self) -> None:
        raise RequestError("an image classifier is not served: evaluate it with `vision evaluate`")

    def check_request(self, frame, params: dict | None = None) -> None:  # noqa: ARG002
        self.prepare_requests()

    def predict_request(self, frame, params: dict | None = None):  # noqa: ARG002
        self.prepare_requests()
