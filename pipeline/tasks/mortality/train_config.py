"""Training settings: ``TrainConfig`` (one comment per field; the CLI and MLproject derive from it),
named presets (``PRESETS``), and the likelihood choice. Imports no torch, so ``cli.py --help`` stays instant."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from pipeline.bayes.layers.options import NllMode
from pipeline.core.configs import check_at_least, check_choice, config_dict, invalid
from pipeline.core.contracts import DEFAULT_BATCH, DEFAULT_SAMPLES
from pipeline.core.errors import ConfigError


class CheckpointMetric(str, Enum):
    """What the best checkpoint minimises on validation."""

    NLL = "nll"  # the mixture NLL over the eval_samples x K draws
    LOSS = "loss"  # NLL + (KL + the L2 inside it) / N_val, unannealed (records-research's default metric)


class Preset(str, Enum):
    """Named presets (explicit settings override them)."""

    DEFAULT = "default"  # small: trains in minutes on 2 CPU cores
    PAPER = "paper"  # paper scale: LSTM 256, more steps
    RECORDS_RESEARCH = "records-research"  # the authors' MIMIC-III flag defaults (docs/experiments/2026-12-01-*)
    GPU = "gpu"  # large steps for a GPU: 1,024 rows, budgets in epochs (docs/experiments/2026-12-04-gpu-preset.md)


# sqrt(p / (1 - p)) for p = 1e-3: edward2's rank-1 "dropout rate" turned into the posterior stddev it starts at
RECORDS_RESEARCH_INIT_STDDEV = (1e-3 / (1 - 1e-3)) ** 0.5

PRESETS: dict[Preset, dict[str, Any]] = {
    Preset.DEFAULT: {},
    Preset.PAPER: {"max_steps": 20_000, "patience": None, "max_epochs": None, "eval_every": 1_000,
                   "anneal_steps": 5_000,
                   "model": {"lstm_hidden": 256, "embedding_dim": 32}},
    # Google-Health/records-research model-uncertainty/ (bayesian_rnn_flags.py defaults, bayesian_rnn_model.py,
    # bayesian_rnn_eager_main.py) with edward2's LSTMCellRank1 / DenseRank1 / rank1 utils; the value of each
    # and where it is read: docs/experiments/2026-12-01-records-research-preset.md
    Preset.RECORDS_RESEARCH: {
        "max_steps": 10_000, "patience": None, "max_epochs": None, "anneal_steps": 5_000,
        "lr": 3.0352e-4, "clip": 7.29199, "batch_size": 64,
        "l2": 1e-4, "l2_in_kl": True, "l2_biases": True, "checkpoint_metric": "loss", "eval_samples": 1,
        "nll": "average", "train_samples": 1, "source_oov_rate": 0.0, "token_oov_rate": 0.0,
        "model": {"lstm_hidden": 256, "lstm_layers": 1, "dense_units": 128, "components": 4, "prior": "gaussian",
                  "prior_mean": 1.0, "prior_stddev": 1.0, "factor_init": "random_sign", "random_sign_prob": 0.5,
                  "init_stddev": RECORDS_RESEARCH_INIT_STDDEV, "init_stddev_jitter": 0.1, "weight_init": "keras",
                  "factor_clip": 10.0, "bag_size_feature": False},
    },
    # 1,024 rows a step (rank-1: 256 distinct admissions x K = 4; the deterministic model 1,024), the learning
    # rate twice the square-root rule's for the 16x larger step (the report's candidate G2; G1, 1.2e-3, cost the
    # deterministic LSTM 0.0066 nats), warmed up over one epoch; the KL anneal and every budget in epochs of
    # distinct admissions, so they scale with the data; the rule it was adopted by:
    # docs/experiments/2026-12-04-gpu-preset.md
    Preset.GPU: {"batch_size": 1024, "lr": 2.4e-3, "warmup_epochs": 1.0, "anneal_epochs": 2.0, "eval_every": 20,
                 "patience": 8, "max_epochs": 40.0, "max_steps": 12_000},
}

# The preset a run on a CUDA device takes unless one is given (``cli.py train``): gpu, since its candidate G2 held
# the rule of docs/experiments/2026-12-04-gpu-preset.md (validation NLL within +0.003 nats of the defaults for
# both LSTMs, measured on the CPU).
CUDA_PRESET = Preset.GPU


# Settings whose default changed, with the value a saved train config that lacks them was trained with
# (OOV augmentation: off until 2026-12-01; docs/experiments/2026-12-01-learning-curves-ablations-shift.md).
# The fixed 4,000-step budget: until 2026-12-03 (docs/experiments/2026-12-03-early-stopping-defaults.md).
FORMER_DEFAULTS: dict[str, Any] = {"source_oov_rate": 0.0, "token_oov_rate": 0.0, "patience": None,
                                   "max_epochs": None, "calibration_share": 0.0}


@dataclass
class TrainConfig:
    """Training settings; ``model`` holds MortalityConfig overrides (vocab sizes come from vocab.json)."""

    seed: int = 0  # seeds initialisation, batch order and weight draws
    max_steps: int | None = None  # optimizer steps at most (a resumed run continues up to it; 0 or unset: no step
        # cap, the default since 2026-12-06: patience and max_epochs end training, a budget that follows the data)
    batch_size: int = 64  # rows per step after tiling: batch_size // K distinct admissions
    lr: float = 3e-4  # Adam learning rate
    clip: float = 7.3  # global gradient-norm clip (0 disables)
    nll: NllMode = NllMode.AVERAGE  # likelihood term: average | mixture
    anneal_steps: int = 1_000  # KL weight min(1, step / anneal_steps); 0 = full weight at once
    anneal_epochs: float | None = None  # the KL anneal in epochs of distinct admissions instead (it then scales with
        # the data: ceil(anneal_epochs x training admissions / distinct per step) steps; unset: anneal_steps)
    warmup_epochs: float = 0.0  # linear learning-rate warm-up over this many epochs of distinct admissions (0: none)
    l2: float = 1e-4  # factor of the model's L2 penalty (sum of its squared deterministic weights)
    l2_in_kl: bool = False  # put l2·penalty inside the KL term (divided by N_train,
        # annealed) instead of every step's loss
    l2_biases: bool = False  # the L2 penalty covers deterministic biases too (Keras bias_regularizer)
    checkpoint_metric: CheckpointMetric = CheckpointMetric.NLL  # best checkpoint by validation nll | loss
    train_samples: int = 1  # Monte Carlo samples per component in a training step
    eval_every: int = 250  # validate (and checkpoint) every this many steps, and at the end
    patience: int | None = 16  # early stopping: stop after this many validations without a better best checkpoint
        # (0 or unset: never; 16 since 2026-12-06, 8 before)
    patience_epochs: float | None = None  # early stopping waits at least this many epochs of distinct training
        # admissions too: patience is then the larger of the two, in validations (0 or unset: patience alone)
    max_epochs: float | None = 40.0  # step budget in epochs as well: at most ceil(max_epochs x training admissions
        # / distinct per step) steps (0 or unset: max_steps alone)
    max_minutes: float | None = None  # wall-clock ceiling on training, validations included: the run validates,
        # checkpoints and stops at the first step past it (a resumed run counts its earlier minutes; 0 or unset: none)
    eval_samples: int = 2  # samples per component in periodic validation (cheap)
    score_samples: int = DEFAULT_SAMPLES  # samples per component for the final validation, refer threshold and pyfunc
    eval_batch_size: int = DEFAULT_BATCH  # admissions per validation forward pass (the draws depend on the batches)
    refer_fraction: float = 0.1  # refer the most uncertain fraction of validation (sets the refer measure's threshold)
    calibration_share: float = 0.5  # share of validation kept apart (by admission) for the recalibration map and the
        # refer rule's guarantee; the rest chooses the checkpoint, the refer measure and the decision threshold
    max_bags: int | None = None  # keep only the most recent bags of an admission (unset: all)
    max_tokens: int | None = None  # keep at most this many tokens per bag (unset: all)
    source_oov_rate: float = 0.1  # training only: P(all of an admission's tokens of a source -> that source's OOV
        # token) (0: off)
    token_oov_rate: float = 0.1  # training only: P(a token -> its source's OOV token) (training.augment; 0: off)
    log_every: int = 10  # log loss, NLL and KL to MLflow every this many steps
    progress: bool = True  # progress (rank 0): a bar on a terminal, else a plain line every 5% of the steps
    threads: int | None = None  # torch intra-op threads (unset: torch's default; 1 is fastest on busy small CPUs)
    model: dict[str, Any] = field(default_factory=dict)  # MortalityConfig overrides, e.g. {"lstm_hidden": 64}

    def __post_init__(self) -> None:
        if self.patience == 0:  # 0 switches a budget rule off (the option's way to say "unset")
            self.patience = None
        if self.max_epochs == 0:
            self.max_epochs = None
        for name in ("max_steps", "patience_epochs", "max_minutes"):  # 0: unset, as for patience and max_epochs
            if getattr(self, name) == 0:
                setattr(self, name, None)
        check_choice(self, "nll", NllMode)
        check_choice(self, "checkpoint_metric", CheckpointMetric)
        check_at_least(self, 1, ("batch_size", "train_samples", "eval_every", "eval_samples",
                                 "score_samples", "eval_batch_size", "log_every", "threads"))
        if not self.lr > 0:
            raise invalid(self, f"lr must be > 0, got {self.lr}", "lr")
        for name in ("max_steps", "max_epochs", "patience_epochs", "max_minutes"):
            if getattr(self, name) is not None and not getattr(self, name) > 0:
                raise invalid(self, f"{name} must be >= 0 (0: off), got {getattr(self, name)}", name)
        if self.max_steps is None and self.max_epochs is None:
            raise invalid(self, "max_steps and max_epochs are both off: training needs one of them to end",
                          "max_steps", "max_epochs")
        for name in ("anneal_epochs", "warmup_epochs"):
            if getattr(self, name) is not None and not getattr(self, name) >= 0:
                raise invalid(self, f"{name} must be >= 0, got {getattr(self, name)}", name)
        check_at_least(self, 0, ("clip", "l2", "anneal_steps", "patience"))
        for name in ("source_oov_rate", "token_oov_rate", "refer_fraction", "calibration_share"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise invalid(self, f"{name} must lie in [0, 1), got {getattr(self, name)}", name)

    def step_budget(self, n_train: int, distinct: int) -> int:
        """The last step: ``max_steps``, or fewer where ``max_epochs`` of ``n_train`` admissions, ``distinct``
        per step, end sooner."""
        return self.ceiling(n_train, distinct)[1]

    def ceiling(self, n_train: int, distinct: int) -> tuple[str, int]:
        """(the setting that ends training, its last step): ``max_epochs``' steps of ``n_train`` admissions,
        ``distinct`` per step, or ``max_steps`` where that comes first (ties: ``max_steps``)."""
        epochs = None if self.max_epochs is None else max(1, math.ceil(self.max_epochs * n_train / max(distinct, 1)))
        if epochs is None or (self.max_steps is not None and self.max_steps <= epochs):
            return "max_steps", self.max_steps
        return "max_epochs", epochs

    def patience_validations(self, n_train: int, distinct: int) -> int | None:
        """Early stopping's patience in validations: ``patience``, or more where ``patience_epochs`` of ``n_train``
        admissions, ``distinct`` per step, span more validations (None: no early stopping)."""
        if self.patience is None:
            return None
        if self.patience_epochs is None:
            return self.patience
        steps = self.epoch_steps(self.patience_epochs, n_train, distinct)
        return max(self.patience, math.ceil(steps / self.eval_every))

    @staticmethod
    def epoch_steps(epochs: float, n_train: int, distinct: int) -> int:
        """Steps that see ``epochs`` epochs of ``n_train`` admissions, ``distinct`` per step (rounded up)."""
        return math.ceil(epochs * n_train / max(distinct, 1)) if epochs else 0

    def anneal_steps_for(self, n_train: int, distinct: int) -> int:
        """The KL anneal's steps: ``anneal_epochs``' on ``n_train`` admissions, ``distinct`` per step, where set;
        else ``anneal_steps``."""
        return self.anneal_steps if self.anneal_epochs is None else self.epoch_steps(self.anneal_epochs, n_train,
                                                                                      distinct)

    def to_dict(self) -> dict:
        """JSON-able settings (str enums as their values, the model overrides' too): what checkpoints hold."""
        return config_dict(self)

    @classmethod
    def from_preset(cls, preset: Preset | str = Preset.DEFAULT, **overrides) -> "TrainConfig":
        """Preset values, then ``overrides`` (``model`` overrides are merged, not replaced)."""
        if preset not in {p.value for p in Preset}:
            raise ConfigError(f"preset must be one of {[p.value for p in Preset]}, got {preset!r}")
        values = {k: (dict(v) if isinstance(v, dict) else v) for k, v in PRESETS[Preset(preset)].items()}
        model = {**values.pop("model", {}), **overrides.pop("model", {})}
        return cls(**{**values, **overrides, "model": model})

