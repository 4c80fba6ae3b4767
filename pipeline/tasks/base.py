"""What a task is, and the registry that finds one by its key.

A task is what varies between the mortality risk and the image benchmarks: its networks and how a
checkpoint rebuilds one, its training recipe (``TrainingPlan``: the batches, the optimizer and its
schedule, the validation), and its likelihood. Everything else (the training loop, the Monte Carlo
predictor, subnetwork Laplace, writing and reading runs) is written once, against these protocols.

The engine and ``runs`` know tasks only through this module: a checkpoint records its task's key
(``task`` in the payload; older payloads by their ``kind``), and ``load_task(key)`` imports the module
``TASKS[key]`` names, so a fresh process (the MLflow pyfunc's) finds the task of any model by its key
alone, and no package below the tasks ever imports a concrete one. Torch-free.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from pipeline.core.errors import PipelineError

TASKS = {  # task key -> the module that defines it (its TASK attribute)
    "mortality": "pipeline.tasks.mortality.task",
    "vision": "pipeline.tasks.vision.task",
}
TASK_KEY = "task"  # the checkpoint payload's entry naming its task


class TaskError(PipelineError, ValueError):
    """An unknown task key, or a checkpoint no task recognises."""


@runtime_checkable
class Task(Protocol):
    """A task: the model family the engine trains and predicts with, and how its checkpoints rebuild it."""

    key: str  # the registry key (TASKS), recorded in every checkpoint and run of the task
    likelihood: str  # "bernoulli": one logit per example (S·K, B); "categorical": logits (S·K, B, C)

    def build_model(self, model_kind: str | None, model_config: dict) -> Any:
        """An untrained network of the recorded kind and settings (a checkpoint's weights come next)."""

    def model_from_checkpoint(self, ckpt: dict) -> Any:
        """The trained network of a checkpoint payload of this task, in evaluation mode on the CPU."""

    def info_fields(self, ckpt: dict) -> dict:
        """The fields of ``runs.info.ModelInfo`` a checkpoint of this task records (run_kind, model_kind,
        model_config, train_config, step, val_nll, refer_threshold, refer_measure, score_samples, max_bags,
        max_tokens; val_metrics where it has them)."""

    def load_file(self, path: Path) -> tuple[Any, dict] | None:
        """(model, info fields) of a model file of a format of this task's own (not a torch checkpoint), or
        None when ``path`` is not one (the mortality task's ``baseline.npz``)."""


@dataclass
class Validated:
    """What a training plan's validation reports to the loop."""

    score: float  # what the best checkpoint minimises (the validation NLL, or a task's own score)
    nll: float  # the validation NLL (logged as val_nll)
    metrics: dict = field(default_factory=dict)  # logged as val_<name>
    note: str = ""  # shown on the progress line until the next validation


@runtime_checkable
class TrainingPlan(Protocol):
    """A task's training recipe, as the engine's loop (``pipeline.engine.loop.run_loop``) runs it.

    Steps are 1-based. The plan owns its model, optimizer and objective (a ``pipeline.bayes.objective``
    ``Objective``: NLL + annealed KL / N_train + L2); the loop owns the order of things: the batch, the
    step, the clipping, the divergence guard, the periodic validation, the checkpoints, resume and early
    stopping."""

    model: Any  # the network being trained (on its device)
    objective: Any  # nn.Module: batch, kl weight -> {"loss", "nll", "kl"}
    optimizer: Any  # torch.optim.Optimizer over the model's trainable parameters
    last_step: int  # the step training ends at (unless it stops early)
    eval_every: int  # validate every this many steps (0: at the last step only)
    patience: int | None  # stop once this many validations in a row found no better score (None: never)
    ceiling: str  # the setting ``last_step`` comes from, as the run's settings name it (max_epochs, max_steps ...)
    max_seconds: float | None  # wall-clock ceiling: validate, checkpoint, stop at the first step past it (None: none)
    anneal_steps: int  # the KL weight ramps to 1 over this many steps
    clip: float  # global gradient-norm clip (0: none)
    keep_best: bool  # keep the best validation's weights as best.pt (False: the last step's model is the one)
    label: str  # the progress line's name

    def batch(self, step: int, rank: int, world: int) -> dict:
        """The training batch of ``step`` for process ``rank`` of ``world`` (tensors on the CPU)."""

    def step_context(self, device):
        """What the training forward pass runs under on ``device`` (an autocast for bf16; else a null context)."""

    def before_step(self, step: int) -> dict:
        """Set per-step state (a learning-rate schedule); returns what to log with the step (e.g. lr)."""

    def validate(self, draws) -> Validated:
        """Validation of the model as it is now, on rank 0. ``draws(batches, samples, seed)`` is the engine's
        Monte Carlo predictor: logits (S, K, N[, C]) of the batch dicts in their order, the weights drawn
        from a generator seeded with ``seed`` (the training stream never moves)."""

    def train_metrics(self, step: int, stats: dict) -> dict:
        """What to log of a training step (stats: loss, nll, kl, kl_weight, grad_norm and what
        ``before_step`` returned); {} logs nothing."""

    def status(self, step: int, stats: dict) -> str:
        """The progress line after ``step`` (stats: loss, nll, kl, kl_weight, grad_norm, ...)."""

    def extra_state(self) -> dict:
        """Whatever else a resumable checkpoint must hold (an augmentation generator's state)."""

    def load_extra_state(self, state: dict) -> None:
        """Restore ``extra_state()``."""


def load_task(key: str | None) -> Task:
    """The task registered under ``key`` (None: mortality, every checkpoint before tasks had keys)."""
    key = key or "mortality"
    module = TASKS.get(key)
    if module is None:
        raise TaskError(f"unknown task {key!r}; tasks: {sorted(TASKS)}")
    return importlib.import_module(module).TASK


def task_of_checkpoint(ckpt: dict) -> Task:
    """The task of a checkpoint payload: its ``task`` entry, else its ``kind`` (``vision`` checkpoints named their
    task so), else mortality (a mortality model's checkpoint, written before tasks had keys)."""
    key = ckpt.get(TASK_KEY) or ("vision" if ckpt.get("kind") == "vision" else None)
    return load_task(key)


def tasks() -> Iterator[Task]:
    """Every registered task (a model file is offered to each one's ``load_file``)."""
    for key in TASKS:
        yield load_task(key)
