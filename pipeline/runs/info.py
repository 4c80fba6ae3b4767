"""What a loaded model is and how it is scored: the info ``runs.formats.load_model`` returns with a model.

``RunKind`` (what a run's model takes and predicts) and ``ModelFormat`` (the kind of model file) are
defined here and read by ``formats`` and ``store``.

One ``ModelInfo`` per model file, built from what the file recorded by one constructor per kind of
model (``mortality``, ``vision``, ``laplace``, ``baseline``), and read as a dict (``to_dict``): every
kind has the same keys, so evaluation, ``score``, the pyfunc and the vision commands read
``info["refer_threshold"]``, ``info.get("max_bags")`` ... alike. An image model's dict also carries
``steps`` (the name vision checkpoints and their readers use for ``step``). Torch-free: a torch
checkpoint arrives here as the dict ``checkpoint.read_checkpoint`` read.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import Enum


class RunKind(str, Enum):
    """What a run's model takes and predicts."""

    MORTALITY = "mortality"  # a mortality model: admissions' features in, risk of death out
    VISION = "vision"  # an image classifier (pipeline.tasks.vision; a Laplace run of one too)


class ModelFormat(str, Enum):
    """The kind of model file a run holds."""

    TORCH = "torch"  # best.pt: a torch checkpoint (mortality, Laplace and image models)
    BASELINE = "baseline"  # baseline.npz: the classical baselines (numpy arrays)


@dataclass
class ModelInfo:
    """The record of a loaded model (one per model file)."""

    run_kind: str  # RunKind value: mortality | vision
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

    def to_dict(self) -> dict:
        """Every field, and ``steps`` (= ``step``) for an image model."""
        out = asdict(self)
        if self.run_kind == RunKind.VISION.value:
            out["steps"] = self.step
        return out

    @classmethod
    def mortality(cls, ckpt: dict) -> ModelInfo:
        """A mortality model's best.pt (the deterministic, Bayesian and ensemble LSTMs)."""
        tc = ckpt["train_config"]
        return cls(run_kind=RunKind.MORTALITY.value, model_kind=ckpt["model_kind"], model_config=ckpt["model_config"],
                   train_config=tc, step=ckpt.get("step"), val_nll=ckpt.get("val_nll"),
                   refer_threshold=ckpt.get("refer_threshold"), refer_measure=ckpt.get("refer_measure"),
                   score_samples=tc["score_samples"], max_bags=tc["max_bags"], max_tokens=tc["max_tokens"],
                   model_format=ModelFormat.TORCH.value)

    @classmethod
    def vision(cls, ckpt: dict) -> ModelInfo:
        """An image model's checkpoint (kind ``vision``): its method as ``model_kind``, ``score_samples`` its
        ``eval_samples``, no refer threshold, no caps."""
        tc = ckpt["train_config"]
        val = ckpt.get("val_metrics")
        return cls(run_kind=RunKind.VISION.value, model_kind=ckpt["model_config"]["method"],
                   model_config=ckpt["model_config"],
                   train_config=tc, step=ckpt.get("steps"), val_nll=(val or {}).get("nll"), refer_threshold=None,
                   refer_measure=None, score_samples=tc.get("eval_samples", 1), max_bags=None, max_tokens=None,
                   model_format=ModelFormat.TORCH.value, val_metrics=val)

    @classmethod
    def laplace(cls, ckpt: dict, label: str) -> ModelInfo:
        """A Laplace run's best.pt (kind ``laplace``; a mortality or an image MAP model), ``label`` its model's."""
        tc = ckpt.get("train_config") or {}
        settings = {k: v for k, v in ckpt["laplace"].items() if not k.startswith("param_")}
        return cls(run_kind=ckpt.get("run_kind", RunKind.MORTALITY.value), model_kind="laplace", model_config=settings,
                   train_config=tc, step=ckpt.get("step"), val_nll=ckpt.get("val_nll"),
                   refer_threshold=ckpt.get("refer_threshold"), refer_measure=ckpt.get("refer_measure"),
                   score_samples=tc.get("score_samples"), max_bags=tc.get("max_bags"), max_tokens=tc.get("max_tokens"),
                   model_format=ModelFormat.TORCH.value, model_label=label, map_kind=ckpt.get("map_kind"))

    @classmethod
    def baseline(cls, kind: str, meta: dict) -> ModelInfo:
        """A classical baseline's baseline.npz (``meta``: its recorded settings): a point model, one draw."""
        return cls(run_kind=RunKind.MORTALITY.value, model_kind=kind, model_config=meta.get("model_config") or {},
                   train_config=meta.get("train_config") or {}, step=meta.get("rounds"), val_nll=meta.get("val_nll"),
                   refer_threshold=meta.get("refer_threshold"), refer_measure=meta.get("refer_measure"),
                   score_samples=1, max_bags=None, max_tokens=None, model_format=ModelFormat.BASELINE.value)
