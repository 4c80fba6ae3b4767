"""A mortality training run: the task's plan through the engine's loop, then the run written.

``train`` is what ``cli.py train`` (and the benchmark grid) call: the mortality task's recipe
(``tasks.mortality.task.plan``: the inputs, the model, Adam, the batches, validation) runs through the one
loop (``engine.loop.run_loop``: steps, periodic validation, ``best.pt`` / ``last.pt``, resume, early
stopping, DDP under ``torchrun``); then, on rank 0, the refer measure and threshold come from ``best.pt``'s
validation predictions at ``score_samples`` draws, and the run is written (``runs.record.write_run``:
``model_info.json``, the features' copies, tags, metrics, artifacts, the pyfunc).

Determinism and resume: the loop's (``pipeline.engine.loop``). ``resume=True`` continues a run from
its ``last.pt`` with the same model and training settings (only the budget, ``max_steps`` / ``patience``
/ ``max_epochs``, and the output settings may change) and its MLflow run.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch

from pipeline.bayes.referral.config import ReferralConfig
from pipeline.core import fileio
from pipeline.core.configs import config_dict, invalid
from pipeline.core.devices import resolve_device
from pipeline.core.errors import TrainError, naming, resumable
from pipeline.core.seeds import EVAL_STREAM, TRAIN_STREAM, stream_seed
from pipeline.data import features
from pipeline.engine import predict
from pipeline.engine.checkpoints import BEST, CHECKPOINT_FORMAT, LAST, check_fresh, read_checkpoint, save_checkpoint
from pipeline.engine.distributed import Dist, broadcast, init_distributed
from pipeline.engine.loop import LoopState, TrainingDiverged, announcements, resume_state, run_loop
from pipeline.runs import record, store
from pipeline.runs.tracking import make_tracker, run_id_line
from pipeline.runs.truth import features_true_risk
from pipeline.tasks.base import TASK_KEY
from pipeline.tasks.mortality.config import saved_config
from pipeline.tasks.mortality.task import plan as mortality_plan
from pipeline.tasks.mortality.train_config import FORMER_DEFAULTS, TrainConfig

log = logging.getLogger(__name__)

__all__ = ["TrainResult", "TrainingDiverged", "train", "validate"]


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

    def summary(self) -> str:
        """What ``cli.py train`` prints: the loop's announcements (early stopping, an unfinished KL anneal), steps,
        the best checkpoint and its refer threshold, the policy (how the risk is recalibrated, the decision
        threshold, the refer rule's promise), the run id."""
        lines = [*self.notes,
                 f"steps={self.steps} best_step={self.best_step} best_val_nll={self.best_val_nll:.6f} "
                 f"uncertainty_measure={self.refer_measure} uncertainty_cut={self.refer_threshold:.6g} "
                 f"checkpoint={self.best_checkpoint}"]
        lines += policy_lines(self.policy)
        return "\n".join(lines) + "\n" + run_id_line(self.run_id)


def policy_lines(policy) -> list[str]:
    """How a run turns its risks into decisions, in a few lines (none without a policy: calibration_share 0)."""
    if policy is None:
        return ["no calibration: the run kept no validation admissions apart (calibration_share 0), or a validation "
                "half holds no death or no survivor (too few validation admissions for a decision threshold and a "
                "refer rule); it scores with no promise"]
    return policy.lines()


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
    """Train ``model_kind`` on ``features_dir`` (train/val Parquet, vocab.json, manifest.json).

    Checkpoints go to ``out_dir`` (default ``runs/train/<MLflow run id>``, untracked
    ``runs/train/<kind>-s<seed>``); an existing ``last.pt`` there is an error unless ``resume``.
    With ``tracking`` the run is logged to MLflow (``experiment``/``run_name``; a resumed run
    continues its MLflow run). Raises ``TrainingDiverged`` on a non-finite loss or gradient. ``device``:
    the torch device (``pipeline.core.devices.resolve_device``: None is cuda when available, else cpu).
    ``referral``: how the run turns risks into decisions (``bayes.referral.policy.ReferralConfig``: fitted at the
    end on the validation halves, ``TrainConfig.calibration_share``).
    """
    cfg = cfg or TrainConfig()
    fdir = Path(features_dir)
    if resume and out_dir is None:
        raise naming(TrainError(f"`resume` needs the output directory (`out_dir`) that holds {LAST}"), "resume",
                     "out_dir")
    d = init_distributed()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    p = mortality_plan(fdir, model_kind, cfg, resolve_device(device), d.world)
    mcfg, vocab_sizes = config_dict(p.model_config), p.vocab_sizes
    state = LoopState()
    if resume:
        state = _resume(Path(out_dir) / LAST, p, model_kind, mcfg, cfg, d)
    else:
        check_fresh(out_dir)
        torch.manual_seed(stream_seed(cfg.seed, TRAIN_STREAM, d.rank))

    tracker = make_tracker(tracking and d.main, experiment=experiment, run_name=run_name,
                           run_id=state.run_id, artifact_location=artifact_location)
    base = {"format": CHECKPOINT_FORMAT, TASK_KEY: "mortality", "model_kind": model_kind, "model_config": mcfg,
            "train_config": cfg.to_dict(), "vocab_sizes": vocab_sizes}
    with tracker:  # the run ends KILLED on Ctrl-C, FAILED on any other exception, else FINISHED
        try:
            if out_dir is None:  # a tracked run gets its own directory, named by its run id
                out_dir = Path("runs") / "train" / broadcast(tracker.run_id or f"{model_kind}-s{cfg.seed}", d)
                check_fresh(out_dir)
            out = Path(out_dir)
            if d.main:
                record.copy_inputs(fdir, out)
            if state.step == 0:
                train_params = {k: v for k, v in cfg.to_dict().items() if k != "model"}  # model: logged below
                tracker.log_params({"model_kind": model_kind, "model": mcfg, "train": train_params,
                                    "referral": (referral or ReferralConfig()).to_dict(), "n_train": len(p.train_fs),
                                    "n_val": len(p.val_fs), "world_size": d.world,
                                    "distinct_per_step": p.sampler.size, "features": record.features_id(fdir)})
                record.tag_features(tracker, fdir)  # evaluate finds the features, compare groups by split mode
            else:
                tracker.set_tag("resumed_from_step", str(state.step))
            try:
                state = run_loop(p, d=d, tracker=tracker, base=base, state=state, out=out, progress=cfg.progress)
            except KeyboardInterrupt as exc:  # the command line says how to go on from last.pt
                if (out / LAST).exists():
                    resumable(exc, f"its last checkpoint is {out / LAST}: the same command with `resume` and "
                                   f"`out_dir` {out} continues it", "resume", "out_dir")
                raise
            if d.world > 1:
                import torch.distributed as dist

                dist.barrier()
            result = _finish(p, d, tracker, base, state, out, fdir, referral or ReferralConfig())
            result.notes = announcements(p, state)
        finally:
            if d.owned:
                import torch.distributed as dist

                dist.destroy_process_group()
    return result


def _resume(path: Path, p, kind: str, mcfg: dict, cfg: TrainConfig, d: Dist) -> LoopState:
    """The loop state of ``last.pt`` restored into the plan, after checking the model and training settings
    are the checkpoint's (only the budget and output settings may change)."""
    ckpt = read_checkpoint(path)
    saved_model = config_dict(saved_config(ckpt["model_config"]))  # settings added since then: defaults
    if ckpt["model_kind"] != kind or saved_model != mcfg:
        raise TrainError(f"{path}: checkpoint is a {ckpt['model_kind']} model with other settings; "
                         "resume with the same model settings")
    free = ("max_steps", "patience", "max_epochs", "progress", "threads")  # the budget and output may change on resume
    # settings added since then: their defaults, or the former default of one that changed since
    saved = {**TrainConfig().to_dict(), **FORMER_DEFAULTS, **ckpt["train_config"]}
    saved = {k: v for k, v in saved.items() if k not in free}
    now = {k: v for k, v in cfg.to_dict().items() if k not in free}
    if saved != now:
        diff = sorted(k for k in now if saved.get(k) != now[k])
        raise invalid(cfg, f"{path}: training settings differ from the checkpoint's ({', '.join(diff)}); only the "
                           "budget (max_steps, patience, max_epochs) may change", "max_steps", "patience",
                      "max_epochs", *diff, error=TrainError)
    if ckpt["step"] >= cfg.max_steps:
        raise invalid(cfg, f"{path}: already at step {ckpt['step']} >= max_steps {cfg.max_steps}", "max_steps",
                      error=TrainError)
    return resume_state(ckpt, p, d, lambda step: torch.manual_seed(stream_seed(cfg.seed + step, TRAIN_STREAM,
                                                                                d.rank)))


def _finish(p, d: Dist, tracker, base: dict, state: LoopState, out: Path, fdir: Path,
            referral: ReferralConfig) -> TrainResult:
    """Refer threshold and final metrics from best.pt on the validation's selection half; the policy from both
    halves (recalibration, decision threshold, refer rule); artifacts and pyfunc (rank 0)."""
    result = TrainResult(run_id=tracker.run_id, best_val_nll=state.best_val_nll, best_step=state.best_step,
                         final_val_nll=state.val_nll, steps=state.step, refer_threshold=None, out_dir=out,
                         last_checkpoint=out / LAST, best_checkpoint=out / BEST)
    if not d.main:
        return result
    model, cfg, val_fs = p.model, p.cfg, p.val_fs
    best = read_checkpoint(out / BEST)
    final_state = {k: v.clone() for k, v in model.state_dict().items()}
    model.load_state_dict(best["model"])
    logits = validate(model, val_fs, cfg, cfg.score_samples)  # (S, K, N)
    policy = record.fit_run_policy(model, val_fs, p.cal_fs, samples=cfg.score_samples,
                                   batch_size=cfg.eval_batch_size, max_bags=cfg.max_bags, max_tokens=cfg.max_tokens,
                                   seed=cfg.seed, context_vocab=fileio.read_json(fdir / store.VOCAB)["context"],
                                   config=replace(referral, fraction=cfg.refer_fraction))
    model.load_state_dict(final_state)
    val = record.validation_summary(logits, val_fs.label, cfg.refer_fraction,
                                    true_risk=features_true_risk(fdir, val_fs), model_kind=base["model_kind"])
    save_checkpoint(out / BEST, {**best, **val.checkpoint_entries(), "policy": policy and policy.to_dict()})
    info = {"model_kind": base["model_kind"], "model_config": base["model_config"],
            "train_config": base["train_config"], "vocab_sizes": base["vocab_sizes"], "best_step": state.best_step,
            "policy": policy and policy.to_dict(arrays=False)}
    fileio.write_json(out / store.TRAIN_CONFIG, {"model_kind": base["model_kind"], **base["train_config"],
                                                 "model": base["model_config"]})
    record.write_run(tracker, out, fdir=fdir, info=info, validation=val, checkpoint=out / BEST,
                     score_samples=cfg.score_samples, step=state.step, artifacts=(out / store.TRAIN_CONFIG,))
    result.refer_threshold, result.refer_measure = val.refer_threshold, val.refer_measure.value
    result.best_metrics, result.policy = dict(val.metrics), policy
    return result
