"""The mortality task: in-hospital death from bagged event sequences, a Bernoulli likelihood per admission.

``TASK`` is what the registry (``pipeline.tasks.base``) hands the engine and ``runs``: how a checkpoint
rebuilds a network (``build_model``), what it records (``info_fields``), and the classical baselines'
own model file (``load_file``). ``plan`` assembles a training run's recipe (Dusenberry et al. 2020,
MIMIC-III) for the engine's loop:

- a step sees ``batch_size`` rows: ``batch_size // K`` distinct admissions (``TrainSampler``: a pure
  function of (seed, step)) tiled K times by the model (16 x 4 = 64 for rank-1, 64 distinct admissions
  for K = 1), with the training-only OOV augmentation (``augment``) where it is on;
- loss = NLL + min(1, step / anneal_steps) · KL / N_train + l2 · penalty (``bayes.objective``; the anneal
  in epochs of distinct admissions with ``anneal_epochs``), Adam at a constant learning rate after a linear
  warm-up over ``warmup_epochs`` (none by default), global-norm clipping;
- on a CUDA device the splits are resident there (``pipeline.data.resident``): each step's batch, and each
  validation batch, is gathered on the device, the same tensors ``batches.collate`` builds on the CPU;
- validation every ``eval_every`` steps scores the mixture NLL over S·K draws (``eval_samples``,
  per-member sampling, the evaluation stream's seed: draws common across validations); the best one is
  kept (by that NLL, or with ``checkpoint_metric = loss`` by NLL + (KL + the L2 inside it) / N_val,
  records-research's metric).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.bayes import metrics
from pipeline.core import fileio
from pipeline.core.configs import config_dict, invalid
from pipeline.core.contracts import BASELINE_FILE, TRAIN_CONFIG_FILE, VOCAB_FILE
from pipeline.core.errors import TrainError
from pipeline.core.seeds import EVAL_STREAM, TRAIN_STREAM, stream_seed
from pipeline.data import batches, features
from pipeline.tasks.base import Validated, method_label
from pipeline.tasks.mortality import KEY
from pipeline.tasks.mortality.inputs import split_validation  # noqa: F401  (its home; imported from here too)
from pipeline.tasks.mortality.train_config import CheckpointMetric, TrainConfig


class MortalityTask:
    """The mortality task for the registry (``pipeline.tasks.base.TASKS["mortality"]``)."""

    key = KEY
    likelihood = "bernoulli"  # one logit per admission: (S·K, B)
    words = "a mortality model of admissions' features"
    serves = True  # features in, the risk table out: the pyfunc, score and serve
    info_aliases: dict = {}

    def build_model(self, model_kind: str | None, model_config: dict):
        """An untrained network of a recorded kind and settings (settings added since: their defaults)."""
        from pipeline.tasks.mortality.config import saved_config
        from pipeline.tasks.mortality.network import build_model

        return build_model(model_kind, saved_config(model_config))

    def model_from_checkpoint(self, ckpt: dict):
        model = self.build_model(ckpt["model_kind"], ckpt["model_config"])
        model.load_state_dict(ckpt["model"])
        return model.eval()

    def info_fields(self, ckpt: dict) -> dict:
        """A mortality model's best.pt (the deterministic, Bayesian and ensemble LSTMs)."""
        tc = ckpt["train_config"]
        return dict(run_kind=self.key, model_kind=ckpt["model_kind"], model_config=ckpt["model_config"],
                    train_config=tc, step=ckpt.get("step"), val_nll=ckpt.get("val_nll"),
                    refer_threshold=ckpt.get("refer_threshold"), refer_measure=ckpt.get("refer_measure"),
                    score_samples=tc["score_samples"], max_bags=tc["max_bags"], max_tokens=tc["max_tokens"],
                    model_format="torch", policy=ckpt.get("policy"), task_words=ckpt.get("task_words"),
                    no_policy=ckpt.get("no_policy"))

    def load_file(self, path: Path):
        """A classical baseline's ``baseline.npz`` (``meta``: its recorded settings): a point model, one draw."""
        if Path(path).name != BASELINE_FILE:
            return None
        from pipeline.tasks.mortality.baselines.model import BaselineModel

        model = BaselineModel.load(path)
        return model, baseline_info_fields(model.kind.value, model.meta)


    def label(self, model_kind: str, model_config: dict) -> str:
        return method_label(model_kind, model_config)

    def scorer(self, run, **settings):
        """A ``tasks.mortality.scorer.MortalityScorer`` (``settings``: samples, batch_size, policy)."""
        from pipeline.tasks.mortality.scorer import MortalityScorer

        return MortalityScorer(run, **settings)

    def finish(self, model, data, settings):
        from pipeline.tasks.mortality.finish import finish

        return finish(model, data, settings)

    def laplace_data(self, run, data_dir, cfg):
        from pipeline.tasks.mortality.finish import laplace_data

        return laplace_data(run, data_dir, cfg)


TASK = MortalityTask()


def baseline_info_fields(kind: str, meta: dict) -> dict:
    """A classical baseline's info fields (``meta``: its recorded settings): a point model, one draw."""
    from pipeline.tasks.mortality.validation import older_no_policy

    return dict(run_kind=TASK.key, model_kind=kind, model_config=meta.get("model_config") or {},
                train_config=meta.get("train_config") or {}, step=meta.get("rounds"), val_nll=meta.get("val_nll"),
                refer_threshold=meta.get("refer_threshold"), refer_measure=meta.get("refer_measure"),
                score_samples=1, max_bags=None, max_tokens=None, model_format="baseline", policy=meta.get("policy"),
                task_words=meta.get("task_words"), no_policy=meta.get("no_policy") or (
                    None if meta.get("policy") or "calibration_share" not in meta else
                    older_no_policy(float(meta["calibration_share"]))))


# ---------------------------------------------------------------------------- the training plan


def progress_status(stats: dict, anneal_steps: int) -> str:
    """The progress line's loss: the NLL, and the loss labelled with the KL weight while it ramps up
    (the loss then grows with the weight: not a divergence). A model without a KL term (deterministic:
    the step's KL is 0) has no weight to show."""
    loss, nll, w = stats["loss"], stats["nll"], stats["kl_weight"]
    if w < 1.0 and stats["kl"] != 0.0:
        return f"nll {nll:.4f}, loss {loss:.4f} at KL weight {w:.3g} (ramping up to 1 by step {anneal_steps})"
    return f"nll {nll:.4f}, loss {loss:.4f}"


def validation_logits(draws, val: features.FeatureSet, cfg: TrainConfig, samples: int, resident=None) -> np.ndarray:
    """Validation logits (S, K, N) in the FeatureSet's row order: batches of admissions of similar length
    (``batches.length_order``), the draws from the evaluation stream's seed (``draws``: the engine's
    predictor, ``TrainingPlan.validate``); ``resident``: ``val`` resident on the device
    (``resident.ResidentFeatures``), the same batches gathered there."""
    order = batches.length_order(val, cfg.max_bags)  # (N,)
    size = cfg.eval_batch_size
    parts = (batches.iter_batches(val, size, cfg.max_bags, cfg.max_tokens, order) if resident is None
             else (resident.gather(order[s:s + size]) for s in range(0, len(val), size)))
    logits = draws(parts, samples, stream_seed(cfg.seed, EVAL_STREAM))
    out = np.empty_like(logits)
    out[:, :, order] = logits  # batch order -> row order
    return out


@dataclass
class MortalityPlan:
    """The mortality recipe as ``pipeline.tasks.base.TrainingPlan`` (see the module docstring)."""

    model: object  # the network (on its device)
    objective: object  # bayes.objective.Objective over it
    optimizer: object  # Adam over its parameters
    cfg: TrainConfig  # the training settings
    train_fs: features.FeatureSet  # the training split
    val_fs: features.FeatureSet  # the validation split's selection half (early stopping, the refer measure)
    sampler: batches.TrainSampler  # the admissions of every step
    augment: object | None  # augment.OovAugment (training-only OOV simulation), None when off
    last_step: int  # the budget: max_steps, or the epoch budget's end
    ceiling: str  # the setting last_step comes from: max_epochs | max_steps
    model_config: object  # the network's MortalityConfig (vocabulary sizes from the features)
    vocab_sizes: dict  # {"tokens": n, "context": n} of the features' vocabulary
    model_kind: str  # what is trained (ModelKind value)
    features_dir: Path  # the features it trains on
    cal_fs: features.FeatureSet | None = None  # the validation split's calibration half, kept apart from training
    anneal_steps: int = 0  # the KL weight's ramp in steps (anneal_steps, or anneal_epochs' steps)
    warmup_steps: int = 0  # the learning rate's linear warm-up in steps (warmup_epochs'; 0: none)
    train_res: object | None = None  # resident.ResidentFeatures of train_fs on the device (None: collate on the CPU)
    val_res: object | None = None  # ... of val_fs
    patience_validations: int | None = None  # early stopping's patience in validations (patience, or
        # patience_epochs' validations where more; None: none)
    keep_best: bool = True  # best.pt is the best validation's model
    label: str = "train"  # the progress line's name
    world: int = 1  # the processes training together (DDP)
    referral: object | None = None  # bayes.referral.config.ReferralConfig: how the run turns risks into decisions

    @property
    def task(self) -> MortalityTask:
        return TASK

    @property
    def eval_every(self) -> int:
        return self.cfg.eval_every

    @property
    def progress(self) -> bool:
        return self.cfg.progress

    @property
    def patience(self) -> int | None:
        return self.patience_validations

    @property
    def ceiling_words(self) -> str:
        """The ceiling that ends training, as the run's settings name it (``engine.loop.ceiling_note``)."""
        if self.ceiling == "max_epochs":
            before = f" (before max_steps {self.cfg.max_steps})" if self.cfg.max_steps else ""
            return f"max_epochs {self.cfg.max_epochs:g}{before}"
        return f"max_steps {self.cfg.max_steps}"

    @property
    def max_seconds(self) -> float | None:
        return None if self.cfg.max_minutes is None else 60.0 * self.cfg.max_minutes

    @property
    def clip(self) -> float:
        return self.cfg.clip

    def batch(self, step: int, rank: int, world: int) -> dict:
        idx = self.sampler.indices(step - 1, rank, world)
        out = (batches.collate(self.train_fs, idx, self.cfg.max_bags, self.cfg.max_tokens) if self.train_res is None
               else self.train_res.gather(idx))
        if self.augment is not None:
            out = self.augment(out, step, rank)  # unseen items simulated (augment); off by default
        return out

    def step_context(self, device):  # noqa: ARG002 (fp32 on every device)
        import contextlib

        return contextlib.nullcontext()

    def before_step(self, step: int) -> dict:
        """The learning rate of ``step``: linear from lr / warmup_steps up to lr over the warm-up, then lr."""
        if not self.warmup_steps:
            return {}
        lr = self.cfg.lr * min(1.0, step / self.warmup_steps)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return {"lr": lr}

    def validate(self, draws) -> Validated:
        logits = validation_logits(draws, self.val_fs, self.cfg, self.cfg.eval_samples, self.val_res)  # (S, K, N)
        nll = metrics.mixture_nll(logits, self.val_fs.label) if np.isfinite(logits).all() else math.inf
        score = val_score(self.model, self.cfg, nll, len(self.val_fs)) if math.isfinite(nll) else nll
        loss = {"loss": score} if self.cfg.checkpoint_metric is CheckpointMetric.LOSS else {}
        return Validated(score=score, nll=nll, metrics=loss)

    def status(self, step: int, stats: dict) -> str:  # noqa: ARG002
        return progress_status(stats, self.anneal_steps)

    def train_metrics(self, step: int, stats: dict) -> dict:
        if step % self.cfg.log_every:
            return {}
        return {"train_loss": stats["loss"], "train_nll": stats["nll"], "train_kl": stats["kl"],
                "kl_weight": stats["kl_weight"], "grad_norm": stats["grad_norm"],
                **({"lr": stats["lr"]} if "lr" in stats else {})}

    def extra_state(self) -> dict:
        return {}  # the batches are a pure function of (seed, step); the augmentation draws per (seed, step) too

    def load_extra_state(self, state: dict) -> None:
        pass

    # ------------------------------------------------------------------------ its run (``tasks.mortality.finish``)

    def entries(self) -> dict:
        return {"model_kind": self.model_kind, "model_config": config_dict(self.model_config),
                "train_config": self.cfg.to_dict(), "vocab_sizes": self.vocab_sizes}

    def run_spec(self):
        from pipeline.tasks.mortality.finish import run_spec

        return run_spec(self)

    def seed_stream(self, rank: int, step: int) -> None:
        import torch

        torch.manual_seed(stream_seed(self.cfg.seed + step, TRAIN_STREAM, rank))

    def check_resume(self, ckpt: dict, path: Path) -> None:
        from pipeline.tasks.mortality.finish import check_resume

        check_resume(self, ckpt, path)

    def finish_settings(self):
        from pipeline.tasks.mortality.finish import finish_settings

        return finish_settings(self)

    def finish_data(self):
        from pipeline.data.task import describe
        from pipeline.tasks.mortality.finish import MortalityData

        context = fileio.read_json(self.features_dir / VOCAB_FILE)["context"]
        return MortalityData(self.features_dir, self.val_fs, self.cal_fs, context, self.cfg.max_bags,
                             self.cfg.max_tokens, describe(self.features_dir, missing_ok=True),
                             self.cfg.calibration_share)

    def record(self, state) -> tuple[dict, dict]:
        entries = self.entries()
        files = {TRAIN_CONFIG_FILE: {"model_kind": self.model_kind, **entries["train_config"],
                                     "model": entries["model_config"]}}
        return {**entries, "best_step": state.best_step}, files


def val_score(model, cfg: TrainConfig, val_nll: float, n_val: int) -> float:
    """What the best checkpoint minimises (``cfg.checkpoint_metric``): the validation NLL, or
    records-research's validation loss NLL + (KL + the L2 inside it) / N_val."""
    if cfg.checkpoint_metric is CheckpointMetric.NLL:
        return val_nll
    import torch

    from pipeline.bayes.objective import regularizer

    with torch.no_grad():
        return val_nll + float(regularizer(model, cfg.l2, cfg.l2_in_kl, cfg.l2_biases)) / n_val


def plan(features_dir: Path | str, model_kind: str, cfg: TrainConfig, device, world: int = 1,
         resident: bool | None = None) -> MortalityPlan:
    """The recipe of a run of ``model_kind`` on ``features_dir``: inputs read and checked, the model built
    (``torch.manual_seed(cfg.seed)`` first, so its initial weights follow the seed) on ``device``; the splits
    resident on the device (``resident``; None: on a CUDA device) or batched on the CPU."""
    import torch

    from pipeline.bayes.objective import Objective
    from pipeline.data.resident import ResidentFeatures
    from pipeline.tasks.mortality.augment import OovAugment
    from pipeline.tasks.mortality.config import model_config
    from pipeline.tasks.mortality.inputs import load_inputs, vocab_sizes
    from pipeline.tasks.mortality.network import build_model

    fdir = Path(features_dir)
    mcfg = model_config(cfg.model, vocab_sizes(fdir))
    sizes, train_fs, val_all = load_inputs(fdir, values=mcfg.value_channel)
    val_fs, cal_fs = split_validation(val_all, cfg.calibration_share)
    torch.manual_seed(cfg.seed)
    model = build_model(model_kind, mcfg).to(device)
    k = model.components
    distinct = cfg.batch_size // k
    if distinct < world or distinct % world:
        raise invalid(cfg, f"batch_size {cfg.batch_size} / K={k} = {distinct} distinct admissions per step "
                           f"does not split over {world} processes", "batch_size", error=TrainError)
    cuda = torch.device(device).type == "cuda"
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, **({"fused": True} if cuda else {}))  # one kernel
    objective = Objective(model, cfg.nll, len(train_fs), cfg.l2, cfg.train_samples, cfg.l2_in_kl, cfg.l2_biases,
                          likelihood=TASK.likelihood)
    augment = OovAugment(fileio.read_json(fdir / VOCAB_FILE)["tokens"], cfg.source_oov_rate, cfg.token_oov_rate,
                         cfg.seed)
    if resident is None:
        resident = cuda
    res = {}
    if resident:
        res = {"train_res": ResidentFeatures.of(train_fs, device, cfg.max_bags, cfg.max_tokens),
               "val_res": ResidentFeatures.of(val_fs, device, cfg.max_bags, cfg.max_tokens)}
    n = len(train_fs)
    ceiling, last = cfg.ceiling(n, distinct)
    return MortalityPlan(model=model, objective=objective, optimizer=optimizer, cfg=cfg, train_fs=train_fs,
                         val_fs=val_fs, sampler=batches.TrainSampler(n, distinct, cfg.seed),
                         augment=augment, last_step=last, ceiling=ceiling, model_config=mcfg,
                         patience_validations=cfg.patience_validations(n, distinct),
                         vocab_sizes=sizes, model_kind=str(getattr(model_kind, "value", model_kind)), features_dir=fdir,
                         world=world, anneal_steps=cfg.anneal_steps_for(n, distinct),
                         warmup_steps=cfg.epoch_steps(cfg.warmup_epochs, n, distinct), cal_fs=cal_fs, **res)
