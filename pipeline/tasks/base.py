"""What a task is, and the registry that finds one by its key.

A task is what varies between the mortality risk and the image benchmarks: its networks and how a
checkpoint rebuilds one, its training recipe (``TrainingPlan``: the batches, the optimizer and its
schedule, the validation, how its run is filed), its likelihood, what its run records after training
(``Task.finish`` -> ``Finished``), what subnetwork Laplace fits on (``Task.laplace_data`` -> ``LaplaceData``)
and how a run of it scores (``Task.scorer`` -> a ``Scorer``). Everything else (the training loop and the
training workflow, the Monte Carlo predictor, subnetwork Laplace, writing and reading runs) is written once,
against these protocols (docs/architecture.md, "Adding a task").

``TASKS`` is the one registry of tasks. The engine and ``runs`` know tasks only through this module: a
checkpoint records its task's key (``task`` in the payload; older payloads in ``FORMER_KEYS``), a run tags it
(``run_kind``), and ``load_task(key)`` imports the module ``TASKS[key]`` names, so a fresh process (the MLflow
pyfunc's) finds the task of any model by its key alone, and no package below the tasks ever imports a
concrete one. Torch-free.
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
TASK_KEY = "task"  # the checkpoint payload's entry naming its task (the one key; older payloads: FORMER_KEYS)
DEFAULT_TASK = "mortality"  # the task of a checkpoint or run that names none (every one before tasks had keys)
FORMER_KEYS = ("map_family", "run_kind", "kind")  # where older payloads named their task (a Laplace payload its
    # MAP network's task as map_family or run_kind; an image model's as kind, which a Laplace payload sets to
    # "laplace", no task)


class TaskError(PipelineError, ValueError):
    """An unknown task key, or a checkpoint no task recognises."""


class RequestError(PipelineError, ValueError):
    """A request the model cannot score: one line for the client naming the column and row (the
    row's index in the request), never a value of a row."""


@runtime_checkable
class Scorer(Protocol):
    """How a run of a task scores (``Task.scorer(run)``): the one object that ``score``, ``evaluate``, the MLflow
    pyfunc and ``serve`` call, holding the run's model and what its scoring reads (samples, thresholds, policy).
    A task's scorer offers more for its own commands (the mortality risk table of a FeatureSet); the pyfunc and
    ``serve`` need only the request path below."""

    def prepare_requests(self) -> None:
        """Called once before the scorer answers requests (the pyfunc's load): says what a request cannot
        have (a warning), raises what makes requests impossible."""

    def check_request(self, frame, params: dict | None = None) -> None:
        """Raise ``RequestError`` (one line) unless ``predict_request`` can score this request."""

    def predict_request(self, frame, params: dict | None = None):
        """The output table of a request (one row per input row, in order)."""


@runtime_checkable
class Task(Protocol):
    """A task: the model family the engine trains and predicts with, and how its checkpoints rebuild it."""

    key: str  # the registry key (TASKS), recorded in every checkpoint and run of the task
    likelihood: str  # "bernoulli": one logit per example (S·K, B); "categorical": logits (S·K, B, C)
    words: str  # what a model of the task is, in words ("an image classifier"): messages that refuse a run
    info_aliases: dict  # other names of ``runs.info.ModelInfo`` fields in its JSON form ({"steps": "step"})
    serves: bool  # its runs are logged as the MLflow pyfunc that scores requests (``score``, ``serve``)

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

    def label(self, model_kind: str, model_config: dict) -> str:
        """``compare``'s row name of a model of the task (``rank1-<prior>`` for rank-1, else its method)."""

    def scorer(self, run, **settings) -> Scorer:
        """How the run ``run`` (a ``runs.load.Run``: model, info, vocabulary, manifest) scores, with the task's
        scoring ``settings`` (the mortality task's: samples, batch_size, policy)."""

    def finish(self, model, data, settings: FinishSettings) -> Finished:
        """What a trained model's run records beside it (its validation figures, its policy, its checkpoint's
        and ``model_info.json``'s entries, what the command prints): after training (``data``: the plan) and
        after a Laplace fit (``data``: ``LaplaceData.data``)."""

    def laplace_data(self, run, data_dir, cfg) -> LaplaceData:
        """What subnetwork Laplace on the MAP run ``run`` (a ``runs.load.Run``) fits on: its training batches
        (the GGN), its validation batches (the prior precision), what ``finish`` reads, and what the Laplace
        run records besides (``data_dir``: the training data instead of the recorded; ``cfg``: the
        ``LaplaceConfig``)."""


@dataclass
class Validated:
    """What a training plan's validation reports to the loop."""

    score: float  # what the best checkpoint minimises (the validation NLL, or a task's own score)
    nll: float  # the validation NLL (logged as val_nll)
    metrics: dict = field(default_factory=dict)  # logged as val_<name>
    note: str = ""  # shown on the progress line until the next validation


@dataclass
class RunSpec:
    """How a training run of a plan is filed and tracked (``TrainingPlan.run_spec``)."""

    folder: str  # runs/<folder>/<run id> holds its files when no output directory is given
    untracked: str  # that folder's name for an untracked run (<kind>-s<seed>)
    experiment: str | None  # the MLflow experiment when none is given (None: the default one)
    run_name: str | None  # the MLflow run name when none is given
    params: dict  # logged when the run starts (not again on resume)
    tags: dict  # set when the run starts
    features_dir: Path | None = None  # the features it trains on: copied, tagged, and its pyfunc logged (None: none)


@dataclass
class FinishSettings:
    """How a trained model is finished (``Task.finish``): what every task's validation figures read."""

    samples: int  # draws per component of the validation predictive (the run's score_samples)
    batch_size: int  # examples per forward pass
    seed: int  # the run's seed (a task's policy fit)
    draws_seed: int  # the seed of the validation predictive's weight draws
    model_kind: str  # what was trained (rank1, deterministic ... | laplace): a task may choose by it
    refer_fraction: float | None = None  # the share of validation examples the refer threshold refers
    referral: Any = None  # how risks become decisions (``bayes.referral.config.ReferralConfig``; None: defaults)


@dataclass
class Finished:
    """What ``Task.finish`` made of a trained model: what its run records and says beside the model."""

    checkpoint: dict  # entries added to the model's checkpoint (refer threshold and measure, policy, val_metrics)
    info: dict  # model_info.json's entries (the validation figures, the policy's summary, score_samples)
    metrics: dict  # logged at the run's last step (best_val_<metric>, refer_threshold)
    val_nll: float  # the validation NLL of the finished model
    val_metrics: dict  # the validation metrics
    lines: list[str] = field(default_factory=list)  # what the command prints about it (the policy's sentences)
    refer_threshold: float | None = None  # the refer measure's threshold (None: the task refers nobody)
    refer_measure: str | None = None  # what refer ranks by (``metrics.Measure`` value)
    policy: Any = None  # the run's ``bayes.referral.policy.Policy`` (None: none)
    score_samples: int | None = None  # the draws its scoring defaults to (None: the task's own rule)
    artifacts: dict = field(default_factory=dict)  # file name -> a function writing it at the path it is given (a
        # mortality run's shift reference): written beside model_info.json, logged, and carried by the pyfunc


@dataclass
class LaplaceData:
    """What subnetwork Laplace fits on, from a MAP run's task (``Task.laplace_data``)."""

    train: Any  # () -> iterator of training batch dicts (the GGN)
    val: Any  # () -> iterator of validation batch dicts (the prior precision), or None
    n_train: int  # the training examples (the GGN is scaled to them)
    n_used: int  # of which the fit uses (``LaplaceConfig.max_train``)
    n_val: int  # the validation examples
    data: Any  # what the task's ``finish`` reads (its validation data)
    changes: dict  # ``LaplaceConfig`` fields the MAP run fixes (its caps, its L2)
    train_config: dict  # the Laplace run's training settings (score_samples added by the workflow)
    params: dict  # logged params besides the Laplace settings
    tags: dict  # tags besides the label and the parent
    experiment: str | None  # the MLflow experiment when none is given (None: the default Laplace one)
    refer_fraction: float | None = None  # the MAP run's refer fraction (a task that refers)
    features_dir: Path | None = None  # the MAP run's features (copied, tagged, its pyfunc logged; None: none)
    files: dict = field(default_factory=dict)  # JSON files written beside model_info.json (name -> content)
    entries: dict = field(default_factory=dict)  # what the Laplace checkpoint and model_info.json record besides


@runtime_checkable
class TrainingPlan(Protocol):
    """A task's training recipe, as the engine's loop (``pipeline.engine.loop.run_loop``) runs it.

    Steps are 1-based. The plan owns its model, optimizer and objective (a ``pipeline.bayes.objective``
    ``Objective``: NLL + annealed KL / N_train + L2); the loop owns the order of things: the batch, the
    step, the clipping, the divergence guard, the periodic validation, the checkpoints, resume and early
    stopping."""

    task: Task  # the task whose recipe it is (its key goes into every checkpoint, its likelihood to the predictor)
    model: Any  # the network being trained (on its device)
    objective: Any  # nn.Module: batch, kl weight -> {"loss", "nll", "kl"} (``Objective`` of the task's likelihood)
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
    progress: bool  # show progress on stderr

    def entries(self) -> dict:
        """What every checkpoint of the run records beside the weights (its task's key and the format are the
        workflow's): the model's kind and settings, the training settings, what rebuilding the network needs."""

    def run_spec(self) -> RunSpec:
        """How its run is filed and tracked: its folder, experiment, run name, params and tags."""

    def seed_stream(self, rank: int, step: int) -> None:
        """Seed rank ``rank``'s training stream: a fresh run (``step`` 0), or a resumed one whose checkpoint,
        written by another number of processes, cannot restore it."""

    def check_resume(self, ckpt: dict, path: Path) -> None:
        """Raise (one line naming the settings) unless the ``last.pt`` payload ``ckpt`` was written by this
        plan's model and training settings (only the budget and the output settings may change)."""

    def finish_settings(self) -> FinishSettings:
        """How the trained model is finished (``Task.finish``, with the plan as its data)."""

    def record(self, state) -> tuple[dict, dict]:
        """(model_info.json's entries of the model and its training, JSON files written beside it) at the end of
        a run whose loop ended in ``state`` (``engine.loop.LoopState``)."""

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
    """The task registered under ``key`` (None: ``DEFAULT_TASK``, every checkpoint before tasks had keys)."""
    key = key or DEFAULT_TASK
    module = TASKS.get(key)
    if module is None:
        raise TaskError(f"unknown task {key!r}; tasks: {sorted(TASKS)}")
    return importlib.import_module(module).TASK


def checkpoint_task(ckpt: dict) -> str:
    """The key of a checkpoint payload's task: its ``task`` entry, else the first of ``FORMER_KEYS`` that names a
    registered task, else ``DEFAULT_TASK`` (a mortality model's checkpoint, written before tasks had keys)."""
    if ckpt.get(TASK_KEY):
        return str(ckpt[TASK_KEY])
    return next((str(ckpt[k]) for k in FORMER_KEYS if ckpt.get(k) in TASKS), DEFAULT_TASK)


def task_of_checkpoint(ckpt: dict) -> Task:
    """The task of a checkpoint payload (``checkpoint_task``)."""
    return load_task(checkpoint_task(ckpt))


def method_label(model_kind: str, model_config: dict) -> str:
    """The row name ``compare`` gives a model of the layer family: its method (the config's ``method``, else its kind),
    ``rank1-<prior>`` for rank-1 (``Task.label`` of both tasks)."""
    method = str(model_config.get("method") or model_kind)
    return f"rank1-{model_config.get('prior', 'gaussian')}" if method == "rank1" else method


def tasks() -> Iterator[Task]:
    """Every registered task (a model file is offered to each one's ``load_file``)."""
    for key in TASKS:
        yield load_task(key)
