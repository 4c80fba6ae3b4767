"""One training workflow for every task: a task's plan through the engine's loop, then the run written.

``train_plan`` runs any task's ``TrainingPlan`` (``pipeline.tasks.base``): the one loop (``engine.loop.run_loop``:
steps, periodic validation, ``best.pt`` / ``last.pt``, resume, early stopping, DDP under ``torchrun``), the run
tracked (``runs.tracking``; its params and tags from the plan's ``run_spec``, the tag ``run_kind`` its task's key);
then, on rank 0, the task finishes the model (``Task.finish``: validation figures, a policy, the checkpoint's
and ``model_info.json``'s entries; a plan that keeps its best validation is finished on ``best.pt``'s weights)
and the run is written (``runs.record.write_run``: ``model_info.json``, the features' copies, tags, metrics,
artifacts, the pyfunc of a task that serves). ``train`` is the mortality task's entry (``cli.py train``, the
benchmark grid), ``workflows.vision_run.train_run`` the image task's: both resume alike.

Determinism and resume: the loop's (``pipeline.engine.loop``). ``resume=True`` continues a run from its
``last.pt`` with the same model and training settings (the plan's ``check_resume``: for a mortality run only
the budget, ``max_steps`` / ``patience`` / ``max_epochs``, and the output settings may change) and its MLflow
run.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from pipeline.bayes.referral.config import ReferralConfig
from pipeline.core import fileio
from pipeline.core.devices import resolve_device
from pipeline.core.errors import TrainError, naming, resumable
from pipeline.core.seeds import EVAL_STREAM, stream_seed
from pipeline.data import features
from pipeline.engine.checkpoints import BEST, CHECKPOINT_FORMAT, LAST, check_fresh, read_checkpoint, save_checkpoint
from pipeline.engine.distributed import Dist, broadcast, init_distributed
from pipeline.engine.loop import LoopState, TrainingDiverged, announcements, resume_state, run_loop
from pipeline.runs import record, store
from pipeline.runs.tracking import make_tracker, run_id_line
from pipeline.tasks.base import TASK_KEY, Finished, TrainingPlan
from pipeline.tasks.mortality import predict
from pipeline.tasks.mortality.finish import policy_lines
from pipeline.tasks.mortality.task import plan as mortality_plan
from pipeline.tasks.mortality.train_config import TrainConfig

log = logging.getLogger(__name__)

__all__ = ["TrainResult", "TrainedRun", "TrainingDiverged", "policy_lines", "train", "train_plan", "validate"]


@dataclass
class TrainedRun:
    """What ``train_plan`` produced."""

    run_id: str | None  # MLflow run id (None without tracking, and on ranks > 0)
    state: LoopState  # where the loop ended (steps, best step and NLL, the last validation, wall time)
    out_dir: Path  # the run's files: best.pt, last.pt, model_info.json ...
    finished: Finished | None  # what the task made of the model (``Task.finish``; None on ranks > 0)
    notes: list[str] = field(default_factory=list)  # what the run should know (engine.loop.announcements)


def train_plan(plan: TrainingPlan, *, d: Dist | None = None, out_dir: Path | str | None = None, resume: bool = False,
               tracking: bool = True, experiment: str | None = None, run_name: str | None = None,
               artifact_location: str | None = None) -> TrainedRun:
    """Train ``plan`` as a run (see the module docstring). Its files go to ``out_dir`` (default
    ``runs/<folder>/<MLflow run id>``, untracked ``runs/<folder>/<the plan's name>``: ``RunSpec``); an existing
    ``last.pt`` there is an error unless ``resume``. With ``tracking`` the run is logged to MLflow (``experiment`` /
    ``run_name``, else the plan's; a resumed run continues its MLflow run). ``d``: the processes training together
    (None: one). Raises ``TrainingDiverged`` on a non-finite loss or gradient."""
    d = d or Dist()
    if resume and out_dir is None:
        raise naming(TrainError(f"`resume` needs the output directory (`out_dir`) that holds {LAST}"), "resume",
                     "out_dir")
    base = {"format": CHECKPOINT_FORMAT, TASK_KEY: plan.task.key, **plan.entries()}
    spec = plan.run_spec()
    state = LoopState()
    if resume:
        path = Path(out_dir) / LAST
        ckpt = read_checkpoint(path)
        plan.check_resume(ckpt, path)
        state = resume_state(ckpt, plan, d, lambda step: plan.seed_stream(d.rank, step))
    else:
        check_fresh(out_dir)
        plan.seed_stream(d.rank, 0)
    tracker = make_tracker(tracking and d.main, experiment=experiment or spec.experiment,
                           run_name=run_name or spec.run_name, run_id=state.run_id,
                           artifact_location=artifact_location)
    with tracker:  # the run ends KILLED on Ctrl-C, FAILED on any other exception, else FINISHED
        try:
            if out_dir is None:  # a tracked run gets its own directory, named by its run id
                out_dir = Path("runs") / spec.folder / broadcast(tracker.run_id or spec.untracked, d)
                check_fresh(out_dir)
            out = Path(out_dir)
            fdir = spec.features_dir
            if d.main:
                out.mkdir(parents=True, exist_ok=True)
                if fdir is not None:
                    record.copy_inputs(fdir, out)
            if state.step == 0:
                tracker.log_params({**spec.params, **({"features": record.features_id(fdir)} if fdir else {})})
                for key, value in {store.RUN_KIND_TAG: plan.task.key, **spec.tags}.items():
                    tracker.set_tag(key, value)
                if fdir is not None:
                    record.tag_features(tracker, fdir)  # evaluate finds the features, compare groups by split mode
            else:
                tracker.set_tag("resumed_from_step", str(state.step))
            try:
                state = run_loop(plan, d=d, tracker=tracker, base=base, state=state, out=out, progress=plan.progress)
            except KeyboardInterrupt as exc:  # the command line says how to go on from last.pt
                if (out / LAST).exists():
                    resumable(exc, f"its last checkpoint is {out / LAST}: the same command with `resume` and "
                                   f"`out_dir` {out} continues it", "resume", "out_dir")
                raise
            if d.world > 1:
                import torch.distributed as dist

                dist.barrier()
            finished = _finish(plan, tracker, base, state, out, fdir) if d.main else None
            notes = announcements(plan, state)
        finally:
            if d.owned:
                import torch.distributed as dist

                dist.destroy_process_group()
    return TrainedRun(tracker.run_id, state, out, finished, notes)


def _finish(plan: TrainingPlan, tracker, base: dict, state: LoopState, out: Path, fdir: Path | None) -> Finished:
    """The task finishes the model (on best.pt's weights where the plan keeps its best validation; the last step's
    otherwise), its entries go into best.pt, and the run is written."""
    model = plan.model
    best = read_checkpoint(out / BEST) if plan.keep_best else None
    if best is not None:
        final_state = {k: v.clone() for k, v in model.state_dict().items()}
        model.load_state_dict(best["model"])
    fin = plan.task.finish(model, plan, plan.finish_settings())
    if best is not None:
        model.load_state_dict(final_state)
        payload = {**best, **fin.checkpoint}
    else:  # the last step's model is the run's
        payload = {**base, "model": {k: v.detach().cpu() for k, v in model.state_dict().items()},
                   "step": state.step, **fin.checkpoint}
        payload.update({alias: payload[name] for alias, name in plan.task.info_aliases.items()})
    save_checkpoint(out / BEST, payload)
    info, files = plan.record(state)
    for name, content in files.items():
        fileio.write_json(out / name, content)
    extra = record.write_artifacts(out, fin.artifacts)  # the task's own files (a mortality run's shift reference)
    record.write_run(tracker, out, fdir=fdir, info={**info, **fin.info}, checkpoint=out / BEST,
                     score_samples=fin.score_samples, metrics=fin.metrics, step=state.step,
                     artifacts=(*(out / name for name in files), *extra),
                     pyfunc=fdir is not None and plan.task.serves)
    return fin


# ---------------------------------------------------------------------------- the mortality task's entry


@dataclass
class TrainResult:
    """What a training run produced."""

    run_id: str | None  # MLflow run id (None without tracking, and on ranks > 0)
    best_val_nll: float  # periodic validation NLL of the best checkpoint (eval_samples draws per component)
    best_step: int  # step of the best checkpoint
    final_val_nll: float  # validation NLL of the last step
    steps: int  # steps completed
    refer_threshold: float | None  # threshold of the refer measure stored with the model (rank 0)
    out_dir: Path  # checkpoint directory
    last_checkpoint: Path  # last.pt
    best_checkpoint: Path  # best.pt (with the refer threshold)
    best_metrics: dict = field(default_factory=dict)  # validation metrics of best.pt at score_samples
    refer_measure: str | None = None  # what refer ranks by (metrics.Measure value; rank 0)
    policy: object | None = None  # bayes.referral.policy.Policy: recalibration, decision threshold, refer rule
    notes: list[str] = field(default_factory=list)  # what the run should know (engine.loop.announcements)
    stopped_by: str = ""  # what ended training: patience | max_epochs | max_steps | max_minutes (engine.loop)
    no_policy: str | None = None  # why the run has no policy, in words (tasks.mortality.validation.no_policy)

    def summary(self) -> str:
        """What ``cli.py train`` prints: the loop's announcements (early stopping, an unfinished KL anneal), steps,
        the best checkpoint and its refer threshold, the policy (how the risk is recalibrated, the decision
        threshold, the refer rule's promise), the run id."""
        lines = [*self.notes,
                 f"steps={self.steps} best_step={self.best_step} best_val_nll={self.best_val_nll:.6f} "
                 f"uncertainty_measure={self.refer_measure} uncertainty_cut={self.refer_threshold:.6g} "
                 f"checkpoint={self.best_checkpoint}"]
        lines += policy_lines(self.policy, self.no_policy)
        return "\n".join(lines) + "\n" + run_id_line(self.run_id)


def validate(model, val: features.FeatureSet, cfg: TrainConfig, samples: int) -> np.ndarray:
    """Validation logits (S, K, N) in row order, the draws from the evaluation stream's seed (a generator of the
    call: the training stream is untouched), as the loop's validation draws them."""
    gen = predict.seeded_generator(stream_seed(cfg.seed, EVAL_STREAM))
    return predict.feature_logits(model, val, samples, cfg.eval_batch_size, cfg.max_bags, cfg.max_tokens, gen)


def train(features_dir: Path | str, model_kind: str, cfg: TrainConfig | None = None, *,
          out_dir: Path | str | None = None, resume: bool = False, tracking: bool = True,
          experiment: str | None = None, run_name: str | None = None,
          artifact_location: str | None = None, device: str | None = None,
          referral: ReferralConfig | None = None) -> TrainResult:
    """Train ``model_kind`` on ``features_dir`` (train/val Parquet, vocab.json, manifest.json): the mortality task's
    plan (``tasks.mortality.task.plan``) through ``train_plan``.

    Checkpoints go to ``out_dir`` (default ``runs/train/<MLflow run id>``, untracked
    ``runs/train/<kind>-s<seed>``); an existing ``last.pt`` there is an error unless ``resume``.
    With ``tracking`` the run is logged to MLflow (``experiment``/``run_name``; a resumed run
    continues its MLflow run). Raises ``TrainingDiverged`` on a non-finite loss or gradient. ``device``:
    the torch device (``pipeline.core.devices.resolve_device``: None is cuda when available, else cpu).
    ``referral``: how the run turns risks into decisions (``bayes.referral.policy.ReferralConfig``: fitted at the
    end on the validation halves, ``TrainConfig.calibration_share``).
    """
    cfg = cfg or TrainConfig()
    if resume and out_dir is None:
        raise naming(TrainError(f"`resume` needs the output directory (`out_dir`) that holds {LAST}"), "resume",
                     "out_dir")
    d = init_distributed()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    p = mortality_plan(Path(features_dir), model_kind, cfg, resolve_device(device), d.world)
    p.referral = referral or ReferralConfig()
    t = train_plan(p, d=d, out_dir=out_dir, resume=resume, tracking=tracking, experiment=experiment,
                   run_name=run_name, artifact_location=artifact_location)
    s, fin = t.state, t.finished
    result = TrainResult(run_id=t.run_id, best_val_nll=s.best_val_nll, best_step=s.best_step, final_val_nll=s.val_nll,
                         steps=s.step, refer_threshold=None, out_dir=t.out_dir, last_checkpoint=t.out_dir / LAST,
                         best_checkpoint=t.out_dir / BEST, notes=t.notes, stopped_by=s.stopped_by)
    if fin is not None:
        result.refer_threshold, result.refer_measure = fin.refer_threshold, fin.refer_measure
        result.best_metrics, result.policy = dict(fin.val_metrics), fin.policy
        result.no_policy = fin.info.get("no_policy")
    return result
