"""The one training loop of every task: steps, periodic validation, checkpoints, resume, early stopping.

A task hands the loop a ``TrainingPlan`` (``pipeline.tasks.base``): its model, objective, optimizer,
batches and validation. The loop owns the order of things, the same for every task:

    for step in 1..last:  plan.before_step (a schedule) -> the batch (on the CPU, then the device) ->
        loss = NLL + w(step)·KL / N_train + l2·penalty, w(step) = min(1, step / anneal_steps) ->
        backward -> global-norm clip -> the optimizer steps only when loss and gradient are finite
        (else ``TrainingDiverged``, naming the step and the last good checkpoint) -> log, progress ->
        every ``eval_every`` steps and at the last: validate on rank 0 (its draws from the evaluation
        stream: a generator per call, so the training stream never moves), keep ``best.pt`` (a plan that
        keeps the best) and write ``last.pt`` (model, optimizer, step, best-so-far, every rank's RNG state,
        the plan's own state), then stop once ``patience`` validations in a row found no better score.

What ended the run is ``LoopState.stopped_by`` (tagged ``stopped_by`` on the run): ``patience``, the plan's
``ceiling`` (the setting its last step comes from: ``max_epochs``, ``max_steps`` ...) or ``max_minutes`` (the
plan's ``max_seconds`` of wall time, validations included, counted across resumes: the loop validates and
checkpoints at the first step past it). ``announcements`` says so whenever a ceiling, not patience, ended it.

Determinism and resume: a plan's batch of step s is a pure function of (seed, s); ``last.pt`` is
written atomically at every validation, and ``resume_state`` restores it, so a resumed run ends with
the same weights and metrics as an uninterrupted one (bit for bit on the same machine and thread count).
One caveat: a run stopped by its budget at a step that is not a multiple of ``eval_every`` was validated
there, which the uninterrupted run skips, so its best checkpoint may differ; its final weights do not.

Distributed data parallel under ``torchrun``: ``engine.distributed`` (the objective is wrapped; rank 0
validates, tracks and writes). Writing the run (MLflow, the pyfunc) is not the loop's: ``pipeline.runs``.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
from torch import nn

from pipeline.bayes.objective import kl_weight
from pipeline.core.devices import model_device, to_device
from pipeline.core.errors import PipelineError
from pipeline.core.progress import Progress
from pipeline.engine import predict
from pipeline.engine.checkpoints import BEST, LAST, save_checkpoint
from pipeline.engine.distributed import Dist, all_mean, from_rank0, wrap
from pipeline.engine.rng import rng_state, set_rng_state
from pipeline.tasks.base import TrainingPlan, Validated

log = logging.getLogger(__name__)


class TrainingDiverged(PipelineError, FloatingPointError):
    """A non-finite loss, gradient or validation; the message names the step and the last good checkpoint."""


@dataclass
class LoopState:
    """Where a run stands: what ``last.pt`` records besides the weights, and what the loop returns."""

    step: int = 0  # steps completed
    best_score: float = math.inf  # the best validation score so far (what best.pt minimises)
    best_val_nll: float = math.inf  # the validation NLL at that validation
    best_step: int = 0  # the step of that validation
    val_nll: float = math.nan  # the last validation's NLL
    run_id: str | None = None  # the tracked run (resume continues it)
    stopped_early: bool = False  # patience ran out before the last step
    kl_seen: bool = False  # a step's KL term was above 0 (the model has a posterior that the anneal weighs)
    seconds: float = 0.0  # wall time of the training steps (validation and checkpoints excluded)
    wall_seconds: float = 0.0  # wall time of the whole loop up to the last checkpoint, validations included
    stopped_by: str = ""  # what ended the run: patience | the plan's ceiling | max_minutes ("": not ended)

    def entries(self) -> dict:
        """Its entries in ``last.pt``."""
        return asdict(self)

    @classmethod
    def of(cls, ckpt: dict) -> LoopState:
        """From a ``last.pt`` (entries it does not record: their defaults; an older one is scored by NLL)."""
        known = {f.name for f in fields(cls)}
        state = cls(**{k: v for k, v in ckpt.items() if k in known})
        if "best_score" not in ckpt:
            state.best_score = state.best_val_nll
        return state


def train_step(objective: nn.Module, optimizer, params: list, batch: dict, kl_w: float, clip: float,
               d: Dist | None = None, context=None) -> torch.Tensor:
    """One update; returns [loss, nll, kl, grad_norm] (mean over ranks). ``context``: what the forward pass
    runs under (a plan's autocast; None: nothing).

    The optimizer does not step when any of them is non-finite (the caller decides what to do).
    """
    with context if context is not None else contextlib.nullcontext():
        parts = objective(batch, kl_w)
    parts["loss"].backward()
    norm = nn.utils.clip_grad_norm_(params, clip if clip > 0 else math.inf)
    stats = all_mean(torch.stack([parts["loss"].detach(), parts["nll"], parts["kl"], norm.detach()]), d or Dist())
    if torch.isfinite(stats).all():
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return stats


def validate(plan: TrainingPlan) -> Validated:
    """The plan's validation, its Monte Carlo draws from the engine's predictor (``predict.predict_logits``, logits
    of the plan's task's likelihood: ``Task.likelihood``) with a generator per call seeded as the plan asks: the
    model is not modified and no global stream moves."""
    return plan.validate(predict.draws_of(plan.model, plan.task.likelihood))


def run_loop(plan: TrainingPlan, *, d: Dist | None = None, tracker=None, base: dict | None = None,
             state: LoopState | None = None, out: Path | None = None, progress: bool = True) -> LoopState:
    """Train ``plan`` from ``state`` (default: a fresh run) to ``plan.last_step`` (see the module docstring).

    ``base``: what every checkpoint records beside the weights (format, task, kinds, configs); ``out``: where
    ``best.pt`` / ``last.pt`` go (None: nowhere, a run nobody resumes); ``tracker``: ``runs.tracking``'s
    (``log_metrics``, ``set_tag``; None: nothing logged). Returns the state at the end; the model ends in
    evaluation mode with the last step's weights.
    """
    d = d or Dist()
    state = state or LoopState()
    base = base or {}
    model = plan.model
    device = model_device(model)
    objective = wrap(plan.objective, d)
    params = [p for p in model.parameters() if p.requires_grad]
    last = plan.last_step
    bar = Progress(plan.label, last, state.step, enabled=progress and d.main)
    last_good = (out / LAST, state.step) if (out is not None and state.step) else None
    objective.train()
    max_seconds = getattr(plan, "max_seconds", None)
    wall0, started = state.wall_seconds, time.perf_counter()
    try:
        for step in range(state.step + 1, last + 1):
            start = time.perf_counter()
            logged = plan.before_step(step)
            batch = to_device(plan.batch(step, d.rank, d.world), device)
            w = kl_weight(step, plan.anneal_steps)
            stats = train_step(objective, plan.optimizer, params, batch, w, plan.clip, d, plan.step_context(device))
            state.seconds += time.perf_counter() - start
            if not torch.isfinite(stats).all():
                raise TrainingDiverged(
                    f"non-finite training loss or gradient at step {step} (loss={stats[0].item()}, "
                    f"grad_norm={stats[3].item()}); weights not updated; {_last_good(last_good)}")
            numbers = {"loss": stats[0].item(), "nll": stats[1].item(), "kl": stats[2].item(), "kl_weight": w,
                       "grad_norm": stats[3].item(), **(logged or {})}
            state.kl_seen = state.kl_seen or numbers["kl"] > 0
            metrics = plan.train_metrics(step, numbers)  # what the plan logs of this step ({}: nothing)
            if tracker is not None and metrics:
                tracker.log_metrics(metrics, step)
            bar.update(step, plan.status(step, numbers))
            timed_out = max_seconds is not None and wall0 + time.perf_counter() - started >= max_seconds
            if (plan.eval_every and step % plan.eval_every == 0) or step == last or timed_out:
                state.step = step
                state.wall_seconds = wall0 + time.perf_counter() - started
                try:
                    state = _checkpoint(plan, d, tracker, base, state, out)
                except TrainingDiverged as exc:
                    raise TrainingDiverged(f"{exc}; {_last_good(last_good)}") from None
                last_good = (out / LAST, step) if out is not None else None
                if plan.patience is not None and _stalled(state, step, plan, d):
                    log.info("early stopping at step %d: no better validation for %d validations (best step %d)",
                             step, plan.patience, state.best_step)
                    state.stopped_early = True
                    state.stopped_by = "patience"
                    if tracker is not None:
                        tracker.set_tag("stopped_early_at_step", str(step))
                    break
                if timed_out:
                    log.info("wall-clock ceiling at step %d: %.1f minutes", step, state.wall_seconds / 60)
                    state.stopped_by = "max_minutes"
                    break
                objective.train()
        else:
            state.stopped_by = getattr(plan, "ceiling", "") or "last_step"
    finally:
        bar.close()
    if tracker is not None and state.stopped_by:
        tracker.set_tag("stopped_by", state.stopped_by)
        tracker.set_tag("steps_trained", str(state.step))
    model.eval()
    return state


def announcements(plan: TrainingPlan, state: LoopState) -> list[str]:
    """What a finished run should say (one line each, naming the settings as their fields): that it stopped
    early, and that its KL weight never reached 1 (training ended inside the anneal)."""
    notes = []
    if state.stopped_early:
        notes.append(f"early stopping: stopped at step {state.step} of {plan.last_step}, after {plan.patience} "
                     f"validations in a row (patience, every eval_every {plan.eval_every} steps) found no better one; "
                     f"the model is the best checkpoint, step {state.best_step}")
    ceiling = ceiling_note(plan, state)
    if ceiling:
        notes.append(ceiling)
    weight = kl_weight(state.step, plan.anneal_steps)
    if state.kl_seen and weight < 1:
        notes.append(f"KL anneal unfinished: training ended at step {state.step}, where the KL weight was "
                     f"{weight:.3g}, short of 1 at step {plan.anneal_steps} (anneal_steps): the posterior was fitted "
                     "under a partial KL penalty; lower anneal_steps or train longer (max_steps, max_epochs)")
    return notes


def ceiling_note(plan: TrainingPlan, state: LoopState) -> str:
    """One line when a ceiling, not early stopping, ended the run ("" otherwise): which setting (the plan's
    ``ceiling_words`` where it has them, e.g. "max_epochs 40 (before max_steps 200)"), at which step, and where
    the validation stood: still improving (the best at the last validation), or not improved for fewer validations
    than patience waits (early stopping had not decided), or patience off."""
    if not state.stopped_by or state.stopped_by == "patience":
        return ""
    what = {"max_minutes": f"the wall-clock ceiling (max_minutes; {state.wall_seconds / 60:.1f} minutes)"}.get(
        state.stopped_by, f"its ceiling {getattr(plan, 'ceiling_words', '') or state.stopped_by}")
    line = f"budget: training ended at step {state.step} by {what}"
    if plan.patience is None:
        return f"{line}; early stopping is off (patience), so a ceiling always ends it"
    since = state.step - state.best_step
    if plan.eval_every and since < plan.patience * plan.eval_every:
        stale = since // plan.eval_every  # validations since the best one, fewer than patience's
        longer = "(max_epochs, max_steps, max_minutes; resume continues this run)"
        if stale == 0:
            return (f"{line}, while the validation NLL was still improving (best at step {state.best_step}, "
                    f"0 of patience's {plan.patience} validations before the end): a longer budget may give a "
                    f"better model {longer}")
        return (f"{line}, before early stopping could decide: the validation NLL had not improved for "
                f"{stale} validation{'s' if stale > 1 else ''} (best at step {state.best_step}; patience waits "
                f"{plan.patience}); a longer budget would let it decide {longer}")
    return f"{line}; the best validation was step {state.best_step}"


def _stalled(state: LoopState, step: int, plan: TrainingPlan, d: Dist) -> bool:
    """Whether ``plan.patience`` validation intervals have passed since the best one (rank 0's, on every rank)."""
    best = from_rank0(float(state.best_step), d)
    return step - best >= plan.patience * plan.eval_every


def _last_good(last_good: tuple[Path, int] | None) -> str:
    if last_good is None:
        return "no checkpoint had been written yet"
    return f"the last good checkpoint is {last_good[0]} (step {last_good[1]})"


def _gather_rng(d: Dist) -> list:
    mine = rng_state()
    if d.world <= 1:
        return [mine]
    import torch.distributed as dist

    out: list = [None] * d.world
    dist.all_gather_object(out, mine)
    return out


def _checkpoint(plan: TrainingPlan, d: Dist, tracker, base: dict, state: LoopState, out: Path | None) -> LoopState:
    """Validate on rank 0, keep best.pt (a plan that keeps the best), write last.pt (every rank's RNG state).

    Non-finite validation stops every rank with ``TrainingDiverged`` before last.pt is touched.
    """
    rngs = _gather_rng(d)
    step = state.step
    val = validate(plan) if d.main else None
    val_nll = from_rank0(val.nll if val is not None else math.nan, d)
    if not math.isfinite(val_nll):
        raise TrainingDiverged(f"non-finite validation logits at step {step}")
    if not d.main:
        return state
    if tracker is not None:
        tracker.log_metrics({"val_nll": val.nll, **{f"val_{k}": v for k, v in val.metrics.items()}}, step)
    state.val_nll = val.nll
    model = plan.model
    if val.score < state.best_score:
        state.best_val_nll, state.best_score, state.best_step = val.nll, val.score, step
        if plan.keep_best and out is not None:
            save_checkpoint(out / BEST, {**base, "model": model.state_dict(), "step": step, "val_nll": val.nll,
                                         "refer_threshold": None})
    if out is not None:
        run_id = getattr(tracker, "run_id", None)
        save_checkpoint(out / LAST, {**base, **state.entries(), "run_id": run_id, "model": model.state_dict(),
                                     "optimizer": plan.optimizer.state_dict(), "rng": rngs,
                                     "plan": plan.extra_state()})
    return state


def resume_state(ckpt: dict, plan: TrainingPlan, d: Dist, reseed) -> LoopState:
    """Restore a ``last.pt`` payload into ``plan`` (weights, optimizer, the plan's own state, this rank's RNG
    state) and return its ``LoopState``. A checkpoint written by another number of processes cannot restore
    each rank's stream: ``reseed(step)`` then seeds this rank's (a warning says the draws differ)."""
    plan.model.load_state_dict(ckpt["model"])
    plan.optimizer.load_state_dict(ckpt["optimizer"])
    if ckpt.get("plan"):
        plan.load_extra_state(ckpt["plan"])
    rngs = ckpt["rng"]
    if len(rngs) == d.world:
        set_rng_state(rngs[d.rank])
    else:
        log.warning("the checkpoint was written by %d process(es), resuming with %d: weight draws are reseeded",
                    len(rngs), d.world)
        reseed(ckpt["step"])
    return LoopState.of(ckpt)
