"""The image task: classifiers over images, a categorical likelihood (logits (S·K, B, C)).

``TASK`` is what the registry (``pipeline.tasks.base``) hands the engine and ``runs``: how a checkpoint of
kind ``vision`` rebuilds its network and what it records. ``plan`` assembles the published recipe
(``tasks.vision.train``) as a ``TrainingPlan`` for the engine's loop: the step's distinct images (an epoch's
permutation, cut in order), their crops and flips (a generator of the run's seed, on the CPU, so every
device sees the same images), the learning-rate schedule set per step on two SGD parameter groups (the
fast weights at their multiplier), and validation of NLL, accuracy and ECE with a fixed seed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pipeline.bayes.metrics import multiclass as mm
from pipeline.core.errors import ConfigError
from pipeline.data.images.data import Splits
from pipeline.tasks.base import Validated, method_label
from pipeline.tasks.vision import KEY
from pipeline.tasks.vision.config import Dataset, VisionTrainConfig

VAL_METRICS = ("nll", "accuracy", "ece")  # what a validation logs and keeps in the history


class VisionTask:
    """The image task for the registry (``pipeline.tasks.base.TASKS["vision"]``)."""

    key = KEY
    likelihood = "categorical"  # logits (S·K, B, classes)
    words = "an image classifier"
    serves = False  # images are evaluated (`vision evaluate`), not served
    info_aliases = {"steps": "step"}  # vision checkpoints call their step count steps

    def build_model(self, model_kind: str | None, model_config: dict):  # noqa: ARG002 (the config names the method)
        from pipeline.tasks.vision.model_config import VisionConfig
        from pipeline.tasks.vision.net import build_vision_model

        return build_vision_model(VisionConfig(**model_config))

    def model_from_checkpoint(self, ckpt: dict):
        model = self.build_model(None, ckpt["model_config"])
        model.load_state_dict(ckpt["model"])
        return model.eval()

    def info_fields(self, ckpt: dict) -> dict:
        """An image model's checkpoint (kind ``vision``): its method as ``model_kind``, ``score_samples`` its
        ``eval_samples``, no refer threshold, no caps."""
        tc = ckpt["train_config"]
        val = ckpt.get("val_metrics")
        return dict(run_kind=self.key, model_kind=ckpt["model_config"]["method"], model_config=ckpt["model_config"],
                    train_config=tc, step=ckpt.get("steps"), val_nll=(val or {}).get("nll"), refer_threshold=None,
                    refer_measure=None, score_samples=tc.get("eval_samples", 1), max_bags=None, max_tokens=None,
                    model_format="torch", val_metrics=val)

    def load_file(self, path: Path):  # noqa: ARG002 (image models live in torch checkpoints only)
        return None

    def label(self, model_kind: str, model_config: dict) -> str:
        return method_label(model_kind, model_config)

    def scorer(self, run, **settings):
        """A ``tasks.vision.scorer.VisionScorer`` (``settings``: samples, batch_size)."""
        from pipeline.tasks.vision.scorer import VisionScorer

        return VisionScorer(run, **settings)

    def finish(self, model, data, settings):
        from pipeline.tasks.vision.finish import finish

        return finish(model, data, settings, self.likelihood)

    def laplace_data(self, run, data_dir, cfg):
        from pipeline.tasks.vision.finish import laplace_data

        return laplace_data(run, data_dir, cfg)


TASK = VisionTask()


@dataclass
class VisionPlan:
    """The published image recipe as ``pipeline.tasks.base.TrainingPlan`` (see the module docstring)."""

    model: object  # VisionNet / VisionDeepEnsemble (on its device)
    objective: object  # bayes.objective.Objective over it
    optimizer: object  # SGD (Nesterov) over the slow and fast parameter groups
    cfg: VisionTrainConfig  # the settings (resolved per dataset and method)
    data: Splits  # train / val / test images
    distinct: int  # distinct images per step (batch_size // K)
    steps_per_epoch: int  # distinct-image batches per epoch
    last_step: int  # round(epochs · steps_per_epoch)
    eval_every: int  # validate every this many steps (0: at the end)
    anneal_steps: float  # kl_anneal_epochs · steps_per_epoch
    generator: object  # torch.Generator of the crops and flips
    do_augment: bool  # crops and flips on (CIFAR) or off (digits)
    keep_best: bool = False  # the last step's model is the run's model (published)
    patience: int | None = None  # no early stopping (published)
    ceiling: str = "epochs"  # the setting last_step comes from
    max_seconds: float | None = None  # no wall-clock ceiling
    label: str = "vision train"  # the progress line's name
    history: list = field(default_factory=list)  # logged training and validation points
    val_note: str = ""  # the latest validation, on the progress line

    @property
    def task(self) -> VisionTask:
        return TASK

    @property
    def clip(self) -> float:
        return self.cfg.clip

    def batch(self, step: int, rank: int, world: int) -> dict:  # noqa: ARG002 (one process)
        import torch

        from pipeline.tasks.vision.train import augment, batch_indices

        train = self.data.train
        idx = batch_indices(len(train), self.distinct, self.steps_per_epoch, step - 1, self.cfg.seed)
        images = torch.from_numpy(train.floats(idx))  # (B, C, H, W) in [0, 1]
        if self.do_augment:
            images = augment(images, self.generator)  # on the CPU: the same crops and flips on every device
        if self.cfg.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)  # kept by the move to the device
        return {"images": images, "label": torch.from_numpy(train.labels[idx])}  # (B,) class ids

    def step_context(self, device):
        from pipeline.tasks.vision.train import step_autocast

        return step_autocast(device, self.cfg.precision)

    def before_step(self, step: int) -> dict:
        from pipeline.tasks.vision.train import learning_rate

        lr = learning_rate(step - 1, self.steps_per_epoch, self.cfg, self.distinct)
        for group in self.optimizer.param_groups:
            group["lr"] = lr * group["lr_multiplier"]
        return {"lr": lr}

    def validate(self, draws) -> Validated:
        val = self.data.val
        from pipeline.tasks.vision.evaluate import image_batches

        logits = draws(image_batches(val, self.cfg.eval_batch_size), self.cfg.eval_samples, self.cfg.seed)
        m = mm.evaluate_predictions(logits, val.labels, components=self.model.components)  # logits (S, K, N, C)
        step = self._step
        self.val_note = f"val accuracy {m['accuracy']:.4f} at epoch {step / self.steps_per_epoch:.3g}"
        self.history.append({"step": step, **{f"val_{k}": m[k] for k in VAL_METRICS}})
        self.val_metrics = m
        return Validated(score=m["nll"], nll=m["nll"], metrics={k: m[k] for k in VAL_METRICS if k != "nll"},
                         note=self.val_note)

    def status(self, step: int, stats: dict) -> str:
        from pipeline.tasks.vision.train import progress_status

        self._step = step
        return progress_status(step, self.steps_per_epoch, self.cfg.epochs, stats, self.val_note)

    def train_metrics(self, step: int, stats: dict) -> dict:
        last = {k: stats[k] for k in ("loss", "nll", "kl", "kl_weight", "lr", "grad_norm")}
        self.final_train, self._step = last, step
        if step % self.cfg.log_every and step != self.last_step:
            return {}
        self.history.append({"step": step, **last})
        return {f"train_{k}": v for k, v in last.items()}

    def extra_state(self) -> dict:
        return {"augment_generator": self.generator.get_state()}

    def load_extra_state(self, state: dict) -> None:
        self.generator.set_state(state["augment_generator"])

    # ------------------------------------------------------------------------ its run (``tasks.vision.finish``)

    @property
    def progress(self) -> bool:
        return self.cfg.progress

    @property
    def method(self) -> str:
        return self.model.cfg.method.value

    def entries(self) -> dict:
        return {"model_kind": self.method, "model_config": self.model.cfg.to_dict(),
                "train_config": self.cfg.to_dict()}

    def run_spec(self):
        from pipeline.tasks.vision.finish import run_spec

        return run_spec(self)

    def seed_stream(self, rank: int, step: int) -> None:
        """A fresh run's stream is the one its model was built from (``plan``: ``torch.manual_seed(cfg.seed)``)."""
        if step:
            import torch

            from pipeline.core.seeds import TRAIN_STREAM, stream_seed

            torch.manual_seed(stream_seed(self.cfg.seed + step, TRAIN_STREAM, rank))

    def check_resume(self, ckpt: dict, path: Path) -> None:
        from pipeline.tasks.vision.finish import check_resume

        check_resume(self, ckpt, path)

    def finish_settings(self):
        from pipeline.tasks.base import FinishSettings

        return FinishSettings(samples=self.cfg.eval_samples, batch_size=self.cfg.eval_batch_size, seed=self.cfg.seed,
                              draws_seed=self.cfg.seed, model_kind=self.method)

    def record(self, state) -> tuple[dict, dict]:
        entries = self.entries()
        return {"run_kind": KEY, "model_kind": self.method, "model_label": TASK.label(self.method,
                                                                                      entries["model_config"]),
                "model_config": entries["model_config"], "train_config": entries["train_config"], "steps": state.step,
                "train_seconds": state.seconds, "final_train": getattr(self, "final_train", {})}, {}


def plan(cfg: VisionTrainConfig, data: Splits, device) -> VisionPlan:
    """The recipe of a run of ``cfg`` on ``data``: the model built (``torch.manual_seed(cfg.seed)`` first) with
    the training set's channel statistics, on ``device``."""
    import torch

    from pipeline.bayes.objective import Objective
    from pipeline.tasks.vision.net import build_vision_model
    from pipeline.tasks.vision.train import check_bn_rows, check_data, parameter_groups

    mcfg = cfg.model_config()
    train_set = data.train
    check_data(train_set, mcfg)
    torch.manual_seed(cfg.seed)
    model = build_vision_model(mcfg)
    model.set_normalization(*train_set.channel_stats())
    model.to(device)
    if cfg.channels_last:
        model.to(memory_format=torch.channels_last)  # the convolutions' weights; the images follow (batch)
    k = model.components
    distinct = cfg.batch_size // k
    if distinct < 1 or distinct > len(train_set):
        raise ConfigError(f"batch_size {cfg.batch_size} / K={k} = {distinct} distinct images per step; need 1.."
                          f"{len(train_set)}")
    check_bn_rows(model, distinct, cfg.train_samples)
    steps_per_epoch = len(train_set) // distinct
    total = max(1, round(cfg.epochs * steps_per_epoch))
    optimizer = torch.optim.SGD(parameter_groups(model, cfg.fast_weight_lr_multiplier), lr=cfg.base_lr,
                                momentum=cfg.momentum, nesterov=True)
    return VisionPlan(model=model, objective=Objective(model, cfg.nll, len(train_set), cfg.l2, cfg.train_samples,
                                                                 likelihood=TASK.likelihood),
                      optimizer=optimizer, cfg=cfg, data=data, distinct=distinct, steps_per_epoch=steps_per_epoch,
                      last_step=total, anneal_steps=cfg.kl_anneal_epochs * steps_per_epoch,
                      eval_every=round(cfg.eval_every_epochs * steps_per_epoch) if cfg.eval_every_epochs > 0 else 0,
                      generator=torch.Generator().manual_seed(cfg.seed),
                      do_augment=cfg.augment if cfg.augment is not None else cfg.dataset is not Dataset.DIGITS)
