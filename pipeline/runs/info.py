"""What a loaded model is and how it is scored: the info ``runs.formats.load_model`` returns with a model.

``ModelFormat`` (the kind of model file) is defined here and read by ``formats`` and ``store``; what a run's
model takes and predicts is its task, named by its key in the one registry (``pipeline.tasks.base.TASKS``).

One typed ``ModelInfo`` per model file, with the same fields for every kind of model, built from what the
file recorded: a task's checkpoint by its task (``Task.info_fields``), a Laplace checkpoint here
(``laplace``). Evaluation, ``score``, the pyfunc and the vision commands read ``info.refer_threshold``,
``info.max_bags`` ... alike; ``to_dict`` is its JSON form (with the other names its task gives a field:
an image model's ``steps``, the name vision checkpoints use for ``step``). A checkpoint arrives here as a dict.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import Enum

from pipeline.tasks.base import DEFAULT_TASK, load_task


class ModelFormat(str, Enum):
    """The kind of model file a run holds."""

    TORCH = "torch"  # best.pt: a torch checkpoint (mortality, Laplace and image models)
    BASELINE = "baseline"  # baseline.npz: the classical baselines (numpy arrays)


@dataclass
class ModelInfo:
    """The record of a loaded model (one per model file)."""

    run_kind: str  # its task's key (pipeline.tasks.base.TASKS): mortality | vision
    model_kind: str  # deterministic, rank1 ... | laplace | logreg, gbm | an image model's method
    model_config: dict  # the model's settings (a Laplace model: its settings without the parameter layout)
    train_config: dict  # the training settings recorded with the model
    step: int | None  # training step the model is from (a boosted baseline: its rounds; None: not recorded)
    val_nll: float | None  # validation NLL recorded with the model
    refer_threshold: float | None  # threshold of the refer measure (None: an image model refers nobody)
    refer_measure: str | None  # what refer ranks by (metrics.Measure value; None: recorded before it existed)
    score_samples: int | None  # draws per component the refer threshold was chosen with
    max_bags: int | None  # cap on the bags scored per admission (None: no cap)
    max_tokens: int | None  # cap on the tokens scored per bag (None: no cap)
    model_format: str  # ModelFormat value: torch (best.pt) | baseline (baseline.npz)
    model_label: str | None = None  # a Laplace model's row name in compare (laplace-<selection>-<S>)
    map_kind: str | None = None  # a Laplace model's MAP model kind
    val_metrics: dict | None = None  # an image model's validation metrics (nll, accuracy, ece, n)
    policy: dict | None = None  # the run's recalibration, decision threshold and refer rule
        # (bayes.referral.policy.Policy.to_dict; None: trained before it, or no calibration half)
    task_words: dict | None = None  # what the run predicts, in words (data.task.TaskWords.to_json of its features';
        # None: recorded before them, in-hospital mortality)
    no_policy: str | None = None  # why the run has no policy, in words (None: it has one, or did not record why)

    def to_dict(self) -> dict:
        """Every field, and the other names its task gives a field (``Task.info_aliases``: an image model's
        ``steps`` = ``step``)."""
        out = asdict(self)
        for alias, name in load_task(self.run_kind).info_aliases.items():
            out[alias] = out[name]
        return out

    @classmethod
    def of_model(cls, model_kind: str, **fields) -> ModelInfo:
        """The info of a model built in the process (a benchmark's, a test's): ``fields`` given, the rest None
        (a mortality model of a torch checkpoint)."""
        base = dict(run_kind=DEFAULT_TASK, model_kind=model_kind, model_config={}, train_config={},
                    step=None, val_nll=None, refer_threshold=None, refer_measure=None, score_samples=None,
                    max_bags=None, max_tokens=None, model_format=ModelFormat.TORCH.value)
        return cls(**{**base, **fields})

    @classmethod
    def laplace(cls, ckpt: dict, label: str) -> ModelInfo:
        """A Laplace run's best.pt (a mortality or an image MAP model: its task, ``checkpoint_task``), ``label`` its
        model's."""
        from pipeline.tasks.base import checkpoint_task

        tc = ckpt.get("train_config") or {}
        settings = {k: v for k, v in ckpt["laplace"].items() if not k.startswith("param_")}
        return cls(run_kind=checkpoint_task(ckpt), model_kind="laplace", model_config=settings,
                   train_config=tc, step=ckpt.get("step"), val_nll=ckpt.get("val_nll"),
                   refer_threshold=ckpt.get("refer_threshold"), refer_measure=ckpt.get("refer_measure"),
                   score_samples=tc.get("score_samples"), max_bags=tc.get("max_bags"), max_tokens=tc.get("max_tokens"),
                   model_format=ModelFormat.TORCH.value, model_label=label, map_kind=ckpt.get("map_kind"),
                   policy=ckpt.get("policy"), task_words=ckpt.get("task_words"), no_policy=ckpt.get("no_policy"))
