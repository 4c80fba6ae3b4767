"""Training of the mortality models: the loop, periodic validation, checkpoints, resume, the run's artifacts.

Recipe (Dusenberry et al. 2020, MIMIC-III): loss = NLL + min(1, step / anneal_steps) · KL / N_train
+ l2 · model.l2_penalty(); Adam (lr 3e-4); global-norm clipping 7.3. A step sees
``batch_size`` rows in total: ``batch_size // K`` distinct admissions tiled K times by the model
(K = model.components; 16 x 4 = 64 for rank-1, 64 distinct admissions for K = 1 models), as the
paper keeps the tiled batch constant. NLL ``average`` = mean over the K member blocks of the
per-member BCE; ``mixture`` = -log mean_k p_k(y). Validation every ``eval_every`` steps scores
the mixture NLL over S·K draws (``eval_samples``, per-member sampling, a fixed evaluation seed
so draws are common across evaluations); the best one is kept in ``best.pt`` (best by that NLL, or with
``checkpoint_metric = loss`` by NLL + (KL + the L2 inside it) / N_val, records-research's metric).

Determinism and resume: the batch of step s is a pure function of (seed, s) (``TrainSampler``),
evaluation runs under ``torch.random.fork_rng`` so it never moves the training stream, and
``last.pt`` (model, optimizer, step, best-so-far, every rank's RNG states, configs) is written
atomically at every evaluation and at the end. ``resume=True`` continues from it and ends with
the same weights and metrics as an uninterrupted run (bit for bit on the same machine and
thread count). One caveat: a run stopped by ``max_steps`` at a step that is not a multiple of
``eval_every`` was validated there, which the uninterrupted run skips, so its best checkpoint
may differ; the final weights and final validation NLL do not.

Distributed training under ``torchrun``: ``engine.distributed``. The run's files and MLflow
record: ``runs.checkpoint``, ``runs.store`` (artifact names), ``runs.tracking``.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from pipeline.bayes import metrics
from pipeline.core import fileio
from pipeline.core.configs import config_dict
from pipeline.core.devices import model_device, resolve_device, to_device
from pipeline.core.errors import PipelineError
from pipeline.core.progress import Progress
from pipeline.data import batches, features
from pipeline.engine import predict
from pipeline.engine.checkpoints import BEST, CHECKPOINT_FORMAT, LAST, read_checkpoint, save_checkpoint
from pipeline.engine.distributed import Dist, all_mean, broadcast, from_rank0, init_distributed, wrap
from pipeline.engine.objective import Objective, kl_weight, regularizer
from pipeline.engine.rng import EVAL_STREAM, TRAIN_STREAM, rng_state, set_rng_state, stream_seed
from pipeline.runs import record, store
from pipeline.runs.tracking import make_tracker, run_id_line
from pipeline.runs.truth import features_true_risk
from pipeline.tasks.mortality import build_model, model_config
from pipeline.tasks.mortality.augment import OovAugment
from pipeline.tasks.mortality.config import saved_config
from pipeline.tasks.mortality.inputs import TrainError
from pipeline.tasks.mortality.inputs import check_fresh as _check_fresh
from pipeline.tasks.mortality.inputs import load_inputs as _load_inputs
from pipeline.tasks.mortality.inputs import vocab_sizes as _vocab_sizes
from pipeline.tasks.mortality.train_config import FORMER_DEFAULTS, CheckpointMetric, TrainConfig

log = logging.getLogger(__name__)


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

    def summary(self) -> str:
        """What ``cli.py train`` prints: steps, the best checkpoint and its refer threshold, the run id."""
        return (f"steps={self.steps} best_step={self.best_step} best_val_nll={self.best_val_nll:.6f} refer_threshold="
                f"{self.refer_threshold:.6g} refer_measure={self.refer_measure} checkpoint={self.best_checkpoint}\n"
                + run_id_line(self.run_id))


class TrainingDiverged(PipelineError, RuntimeError):
    """A non-finite loss or gradient; the message names the step and the last good checkpoint."""


def validate(model: nn.Module, val: features.FeatureSet, cfg: TrainConfig, samples: int) -> np.ndarray:
    """Validation logits (S, K, N) with the fixed evaluation seed (training RNG untouched)."""
    device = model_device(model)
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(stream_seed(cfg.seed, EVAL_STREAM))
        return predict.feature_logits(model, val, samples, cfg.eval_batch_size, cfg.max_bags, cfg.max_tokens)


def progress_status(stats, w: float, anneal_steps: int) -> str:
    """The progress line's loss: the NLL, and the loss labelled with the KL weight while it ramps up
    (the loss then grows with the weight: not a divergence). A model without a KL term (deterministic:
    ``stats[2]``, the step's KL, is 0) has no weight to show."""
    loss, nll = stats[0].item(), stats[1].item()
    if w < 1.0 and stats[2].item() != 0.0:
        return f"nll {nll:.4f}, loss {loss:.4f} at KL weight {w:.3g} (ramping up to 1 by step {anneal_steps})"
    return f"nll {nll:.4f}, loss {loss:.4f}"


def train(features_dir: Path | str, model_kind: str, cfg: TrainConfig | None = None, *,
          out_dir: Path | str | None = None, resume: bool = False, tracking: bool = True,
          experiment: str | None = None, run_name: str | None = None,
          artifact_location: str | None = None, device: str | None = None) -> TrainResult:
    """Train ``model_kind`` on ``features_dir`` (train/val Parquet, vocab.json, manifest.json).

    Checkpoints go to ``out_dir`` (default ``runs/train/<MLflow run id>``, untracked
    ``runs/train/<kind>-s<seed>``); an existing ``last.pt`` there is an error unless ``resume``.
    With ``tracking`` the run is logged to MLflow (``experiment``/``run_name``; a resumed run
    continues its MLflow run). Raises ``TrainingDiverged`` on a non-finite loss or gradient. ``device``:
    the torch device (``pipeline.core.devices.resolve_device``: None is cuda when available, else cpu).
    """
    cfg = cfg or TrainConfig()
    fdir = Path(features_dir)
    if resume and out_dir is None:
        raise TrainError(f"resume needs the output directory (out_dir) that holds {LAST}")
    d = init_distributed()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    mcfg = model_config(cfg.model, _vocab_sizes(fdir))
    vocab_sizes, train_fs, val_fs = _load_inputs(fdir, values=mcfg.value_channel)
    torch.manual_seed(cfg.seed)
    model = build_model(model_kind, mcfg).to(resolve_device(device))
    k = model.components
    distinct = cfg.batch_size // k
    if distinct < d.world or distinct % d.world:
        raise TrainError(f"batch_size {cfg.batch_size} / K={k} = {distinct} distinct admissions per step "
                         f"does not split over {d.world} processes")
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    sampler = batches.TrainSampler(len(train_fs), distinct, cfg.seed)
    state = {"step": 0, "best_val_nll": math.inf, "best_score": math.inf, "best_step": 0, "run_id": None,
             "val_nll": math.nan}
    if resume:
        state = _resume(Path(out_dir) / LAST, model, optimizer, model_kind, mcfg, cfg, d)
    else:
        _check_fresh(out_dir)
        torch.manual_seed(stream_seed(cfg.seed, TRAIN_STREAM, d.rank))

    tracker = make_tracker(tracking and d.main, experiment=experiment, run_name=run_name,
                           run_id=state["run_id"], artifact_location=artifact_location)
    base = {"format": CHECKPOINT_FORMAT, "model_kind": model_kind, "model_config": config_dict(mcfg),
            "train_config": cfg.to_dict(), "vocab_sizes": vocab_sizes}
    with tracker:  # the run ends FAILED on any exception, else FINISHED
        try:
            if out_dir is None:  # a tracked run gets its own directory, named by its run id
                out_dir = Path("runs") / "train" / broadcast(tracker.run_id or f"{model_kind}-s{cfg.seed}", d)
                _check_fresh(out_dir)
            out = Path(out_dir)
            if d.main:
                record.copy_inputs(fdir, out)
            if state["step"] == 0:
                train_params = {k: v for k, v in cfg.to_dict().items() if k != "model"}  # model: logged below
                tracker.log_params({"model_kind": model_kind, "model": config_dict(mcfg), "train": train_params,
                                    "n_train": len(train_fs), "n_val": len(val_fs), "world_size": d.world,
                                    "distinct_per_step": distinct, "features": fdir.name})
                record.tag_features(tracker, fdir)  # evaluate finds the features, compare groups by split mode
            else:
                tracker.set_tag("resumed_from_step", str(state["step"]))
            ddp = wrap(Objective(model, cfg.nll, len(train_fs), cfg.l2, cfg.train_samples, cfg.l2_in_kl,
                                 cfg.l2_biases), d)
            augment = OovAugment(fileio.read_json(fdir / store.VOCAB)["tokens"], cfg.source_oov_rate,
                                 cfg.token_oov_rate, cfg.seed)
            last = cfg.step_budget(len(train_fs), distinct)  # max_steps, or the epoch budget's end
            state = _loop(ddp, model, optimizer, sampler, train_fs, val_fs, cfg, d, tracker, base, state, out, augment,
                          last)
            if d.world > 1:
                import torch.distributed as dist

                dist.barrier()
            result = _finish(model, val_fs, cfg, d, tracker, base, state, out, fdir)
        finally:
            if d.owned:
                import torch.distributed as dist

                dist.destroy_process_group()
    return result


def _resume(path: Path, model, optimizer, kind: str, mcfg, cfg: TrainConfig, d: Dist) -> dict:
    ckpt = read_checkpoint(path)
    saved_model = config_dict(saved_config(ckpt["model_config"]))  # settings added since then: defaults
    if ckpt["model_kind"] != kind or saved_model != config_dict(mcfg):
        raise TrainError(f"{path}: checkpoint is a {ckpt['model_kind']} model with other settings; "
                         "resume with the same model settings")
    free = ("max_steps", "patience", "max_epochs", "progress", "threads")  # the budget and output may change on resume
    # settings added since then: their defaults, or the former default of one that changed since
    saved = {**TrainConfig().to_dict(), **FORMER_DEFAULTS, **ckpt["train_config"]}
    saved = {k: v for k, v in saved.items() if k not in free}
    now = {k: v for k, v in cfg.to_dict().items() if k not in free}
    if saved != now:
        diff = sorted(k for k in now if saved.get(k) != now[k])
        raise TrainError(f"{path}: training settings differ from the checkpoint's ({diff}); only the budget "
                         "(max_steps, patience, max_epochs) may change")
    if ckpt["step"] >= cfg.max_steps:
        raise TrainError(f"{path}: already at step {ckpt['step']} >= max_steps {cfg.max_steps}")
    model.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    rngs = ckpt["rng"]
    if len(rngs) == d.world:
        set_rng_state(rngs[d.rank])
    else:
        log.warning("%s was written by %d process(es), resuming with %d: weight draws are reseeded",
                    path, len(rngs), d.world)
        torch.manual_seed(stream_seed(cfg.seed + ckpt["step"], TRAIN_STREAM, d.rank))
    state = {k: ckpt[k] for k in ("step", "best_val_nll", "best_step", "run_id", "val_nll")}
    return {**state, "best_score": ckpt.get("best_score", ckpt["best_val_nll"])}  # older last.pt: scored by NLL


def _gather_rng(d: Dist) -> list:
    mine = rng_state()
    if d.world <= 1:
        return [mine]
    import torch.distributed as dist

    out: list = [None] * d.world
    dist.all_gather_object(out, mine)
    return out


def train_step(objective: nn.Module, optimizer, params: list, batch: dict, kl_w: float, clip: float,
               d: Dist | None = None) -> torch.Tensor:
    """One update; returns [loss, nll, kl, grad_norm] (mean over ranks).

    The optimizer does not step when any of them is non-finite (the caller decides what to do).
    """
    parts = objective(batch, kl_w)
    parts["loss"].backward()
    norm = nn.utils.clip_grad_norm_(params, clip if clip > 0 else math.inf)
    stats = all_mean(torch.stack([parts["loss"].detach(), parts["nll"], parts["kl"], norm.detach()]), d or Dist())
    if torch.isfinite(stats).all():
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return stats


def _loop(ddp, model, optimizer, sampler, train_fs, val_fs, cfg: TrainConfig, d: Dist, tracker, base: dict,
          state: dict, out: Path, augment: OovAugment | None = None, last: int | None = None) -> dict:
    """Steps up to ``last`` (default ``cfg.max_steps``), validating every ``eval_every`` and at the end;
    with ``cfg.patience``, stops once that many validations in a row found no better best checkpoint."""
    last = cfg.max_steps if last is None else last
    params = [p for p in model.parameters() if p.requires_grad]
    bar = Progress("train", last, state["step"], enabled=cfg.progress and d.main)
    last_good = (out / LAST, state["step"]) if state["step"] else None
    ddp.train()
    try:
        for step in range(state["step"] + 1, last + 1):
            batch = batches.collate(train_fs, sampler.indices(step - 1, d.rank, d.world), cfg.max_bags, cfg.max_tokens)
            if augment is not None:
                batch = augment(batch, step, d.rank)  # unseen items simulated (training.augment); off by default
            batch = to_device(batch, model_device(model))
            w = kl_weight(step, cfg.anneal_steps)
            stats = train_step(ddp, optimizer, params, batch, w, cfg.clip, d)
            if not torch.isfinite(stats).all():
                raise TrainingDiverged(
                    f"non-finite training loss or gradient at step {step} (loss={stats[0].item()}, "
                    f"grad_norm={stats[3].item()}); weights not updated; {_last_good(last_good)}")
            if step % cfg.log_every == 0:
                tracker.log_metrics({"train_loss": stats[0].item(), "train_nll": stats[1].item(),
                                     "train_kl": stats[2].item(), "kl_weight": w, "grad_norm": stats[3].item()}, step)
            bar.update(step, progress_status(stats, w, cfg.anneal_steps))
            if step % cfg.eval_every == 0 or step == last:
                try:
                    state = _checkpoint(model, optimizer, val_fs, cfg, d, tracker, base, {**state, "step": step}, out)
                except TrainingDiverged as exc:
                    raise TrainingDiverged(f"{exc}; {_last_good(last_good)}") from None
                last_good = (out / LAST, step)
                if cfg.patience is not None and _stalled(state, step, cfg, d):
                    log.info("early stopping at step %d: no better validation for %d validations (best step %d)",
                             step, cfg.patience, state["best_step"])
                    tracker.set_tag("stopped_early_at_step", str(step))
                    break
                ddp.train()
    finally:
        bar.close()
    return state


def _stalled(state: dict, step: int, cfg: TrainConfig, d: Dist) -> bool:
    """Whether ``cfg.patience`` validation intervals have passed since the best checkpoint (rank 0's, on every rank)."""
    best = from_rank0(float(state["best_step"]), d)
    return step - best >= cfg.patience * cfg.eval_every


def _last_good(last_good: tuple[Path, int] | None) -> str:
    if last_good is None:
        return "no checkpoint had been written yet"
    return f"the last good checkpoint is {last_good[0]} (step {last_good[1]})"


def _checkpoint(model, optimizer, val_fs, cfg: TrainConfig, d: Dist, tracker, base: dict, state: dict,
                out: Path) -> dict:
    """Validate on rank 0, keep best.pt, write last.pt (all ranks' RNG states gathered).

    Non-finite validation logits stop every rank with ``TrainingDiverged`` before last.pt is touched.
    """
    rngs = _gather_rng(d)
    step = state["step"]
    val_nll = math.nan
    if d.main:
        logits = validate(model, val_fs, cfg, cfg.eval_samples)  # (S, K, N)
        val_nll = metrics.mixture_nll(logits, val_fs.label) if np.isfinite(logits).all() else math.inf
    val_nll = from_rank0(val_nll, d)
    if not math.isfinite(val_nll):
        raise TrainingDiverged(f"non-finite validation logits at step {step}")
    if not d.main:
        return state
    score = val_score(model, cfg, val_nll, len(val_fs))
    loss = {"val_loss": score} if cfg.checkpoint_metric is CheckpointMetric.LOSS else {}
    tracker.log_metrics({"val_nll": val_nll, **loss}, step)
    state = {**state, "val_nll": val_nll}
    if score < state["best_score"]:
        state.update(best_val_nll=val_nll, best_score=score, best_step=step)
        save_checkpoint(out / BEST, {**base, "model": model.state_dict(), "step": step, "val_nll": val_nll,
                                          "refer_threshold": None})
    save_checkpoint(out / LAST, {**base, **state, "run_id": tracker.run_id, "model": model.state_dict(),
                                      "optimizer": optimizer.state_dict(), "rng": rngs})
    return state


def val_score(model, cfg: TrainConfig, val_nll: float, n_val: int) -> float:
    """What the best checkpoint minimises (``cfg.checkpoint_metric``): the validation NLL, or
    records-research's validation loss NLL + (KL + the L2 inside it) / N_val."""
    if cfg.checkpoint_metric is CheckpointMetric.NLL:
        return val_nll
    with torch.no_grad():
        return val_nll + float(regularizer(model, cfg.l2, cfg.l2_in_kl, cfg.l2_biases)) / n_val


def _finish(model, val_fs, cfg: TrainConfig, d: Dist, tracker, base: dict, state: dict, out: Path,
            fdir: Path) -> TrainResult:
    """Refer threshold and final metrics from best.pt on validation; artifacts and pyfunc (rank 0)."""
    result = TrainResult(run_id=tracker.run_id, best_val_nll=state["best_val_nll"], best_step=state["best_step"],
                         final_val_nll=state["val_nll"], steps=state["step"], refer_threshold=None, out_dir=out,
                         last_checkpoint=out / LAST, best_checkpoint=out / BEST)
    if not d.main:
        return result
    best = read_checkpoint(out / BEST)
    final_state = {k: v.clone() for k, v in model.state_dict().items()}
    model.load_state_dict(best["model"])
    logits = validate(model, val_fs, cfg, cfg.score_samples)  # (S, K, N)
    model.load_state_dict(final_state)
    val = record.validation_summary(logits, val_fs.label, cfg.refer_fraction,
                                    true_risk=features_true_risk(fdir, val_fs), model_kind=base["model_kind"])
    threshold = val.refer_threshold
    save_checkpoint(out / BEST, {**best, **val.checkpoint_entries()})
    info = {"model_kind": base["model_kind"], "model_config": base["model_config"],
            "train_config": base["train_config"], "vocab_sizes": base["vocab_sizes"], "best_step": state["best_step"]}
    fileio.write_json(out / store.TRAIN_CONFIG, {"model_kind": base["model_kind"], **base["train_config"],
                                              "model": base["model_config"]})
    record.record_run(tracker, out, fdir, info=info, validation=val, checkpoint=out / BEST,
                      score_samples=cfg.score_samples, step=state["step"], artifacts=(out / store.TRAIN_CONFIG,))
    result.refer_threshold, result.refer_measure = threshold, val.refer_measure.value
    result.best_metrics = dict(val.metrics)
    return result
