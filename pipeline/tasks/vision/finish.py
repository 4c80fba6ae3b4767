"""What a vision run records after training or after a Laplace fit (``Task.finish``), and what subnetwork Laplace
fits an image run on (``Task.laplace_data``).

``finish`` predicts the validation images with the engine's predictor (the run's ``eval_samples`` draws per
component, a generator seeded with the run's seed: the numbers of the loop's last validation of the same model)
and records their NLL of the mixture, accuracy, top-label ECE, Brier and count (``bayes.metrics.multiclass``):
the checkpoint's ``val_metrics``, ``model_info.json``'s, ``best_val_<metric>``; nobody is referred from an image
benchmark (no refer threshold, no policy). ``laplace_data`` rebuilds the MAP run's split (its dataset and seed,
``train.run_splits``): the GGN over its training images (a ``max_train`` subsample, in order), the prior
precision on its validation images.
"""

from __future__ import annotations

import numpy as np

from pipeline.tasks.base import Finished, FinishSettings, LaplaceData, RunSpec, method_label

KEPT = ("nll", "accuracy", "ece", "n")  # the validation metrics a checkpoint keeps
RECORDED = ("nll", "accuracy", "ece", "brier", "n")  # ... model_info.json records


def finish(model, data, s: FinishSettings, likelihood: str) -> Finished:
    """See the module docstring; ``data``: the validation ImageSet, or a training plan (its ``data.val``);
    ``likelihood``: the task's."""
    from pipeline.bayes.metrics import multiclass as mm
    from pipeline.engine.predict import draws_of
    from pipeline.tasks.vision.evaluate import image_batches

    val = data.data.val if hasattr(data, "data") else data
    logits = draws_of(model, likelihood)(image_batches(val, s.batch_size), s.samples, s.draws_seed)  # (S, K, N, C)
    m = mm.evaluate_predictions(logits, val.labels, components=model.components)
    recorded = {k: m[k] for k in RECORDED}
    return Finished(checkpoint={"val_metrics": {k: m[k] for k in KEPT}},
                    info={"score_samples": s.samples, "val_metrics": recorded},
                    metrics={f"best_val_{k}": v for k, v in recorded.items() if k != "n"}, val_nll=m["nll"],
                    val_metrics=m, score_samples=s.samples)


def laplace_data(run, data_dir, cfg) -> LaplaceData:
    """What Laplace fits the image MAP run ``run`` on (see the module docstring); ``data_dir``: the CIFAR directory
    instead of the recorded one."""
    import torch

    from pipeline.bayes.laplace.errors import LaplaceError
    from pipeline.core.devices import model_device, to_device
    from pipeline.tasks.vision.train import run_splits

    if not run.train_config:
        raise LaplaceError(f"{run.uri}: the vision run records no training settings (dataset, seed)")
    tc = dict(run.train_config)
    splits = run_splits(tc, data_dir)
    train, val = splits.train, splits.val
    n = len(train)
    keep = np.arange(n)
    if cfg.max_train is not None and cfg.max_train < n:
        keep = np.sort(np.random.default_rng(cfg.seed).choice(n, cfg.max_train, replace=False))

    device = model_device(run.model)  # the MAP model's (--device)

    def chunks(images, order: np.ndarray):
        for start in range(0, len(order), cfg.batch_size):
            idx = order[start:start + cfg.batch_size]
            yield to_device({"images": torch.from_numpy(images.floats(idx)),  # (B, C, H, W) in [0, 1]
                             "label": torch.from_numpy(images.labels[idx])}, device)  # (B,) class ids

    val_batches = (lambda: chunks(val, np.arange(len(val)))) if len(val) else None
    return LaplaceData(train=lambda: chunks(train, keep), val=val_batches, n_train=n, n_used=len(keep),
                       n_val=len(val), data=val, changes={}, train_config=tc,
                       params={"train": {k: v for k, v in tc.items() if k != "model"},
                               "map_model": tc.get("model") or {}, "n_train": n, "n_val": len(val)},
                       tags={"dataset": str(tc.get("dataset"))}, experiment="vision")


# ---------------------------------------------------------------------------- a training plan's run


def run_spec(plan) -> RunSpec:
    """How an image training run is filed (``runs/vision/<run id>``, untracked ``<label>-s<seed>``) and tracked:
    experiment ``vision`` (``runs.store.VISION_EXPERIMENT``), run name ``<label>-<dataset>-s<seed>``, its settings as
    params, its dataset and label as tags."""
    cfg, mcfg = plan.cfg, plan.model.cfg.to_dict()
    label = method_label(plan.method, mcfg)
    params = {"model_kind": plan.method, "train": {k: v for k, v in cfg.to_dict().items() if k != "model"},
              "model": mcfg, "n_train": len(plan.data.train), "n_val": len(plan.data.val),
              "distinct_per_step": plan.distinct, "steps": plan.last_step}
    return RunSpec(folder="vision", untracked=f"{label}-s{cfg.seed}", experiment="vision",
                   run_name=f"{label}-{cfg.dataset.value}-s{cfg.seed}", params=params,
                   tags={"dataset": cfg.dataset.value, "model_label": label})


RESUME_FREE = ("progress", "threads", "device", "data_dir", "log_every")  # may change when a run resumes


def check_resume(plan, ckpt: dict, path) -> None:
    """Refuse a ``last.pt`` of another model or other training settings (the schedule follows ``epochs``, so no
    budget may change: only ``RESUME_FREE``), or one already at the last step."""
    from pipeline.core.configs import invalid
    from pipeline.core.errors import TrainError

    if ckpt.get("model_config") != plan.model.cfg.to_dict():
        raise TrainError(f"{path}: checkpoint is a {(ckpt.get('model_config') or {}).get('method')} model with other "
                         "settings; resume with the same model settings")
    saved = {k: v for k, v in (ckpt.get("train_config") or {}).items() if k not in RESUME_FREE}
    now = {k: v for k, v in plan.cfg.to_dict().items() if k not in RESUME_FREE}
    if saved != now:
        diff = sorted(k for k in {*saved, *now} if saved.get(k) != now.get(k))
        raise invalid(plan.cfg, f"{path}: training settings differ from the checkpoint's ({', '.join(diff)}); resume "
                                "with the same settings (the schedule follows epochs)", *diff, error=TrainError)
    if ckpt["step"] >= plan.last_step:
        raise invalid(plan.cfg, f"{path}: already at step {ckpt['step']}, the last of {plan.last_step} (epochs)",
                      "epochs", error=TrainError)
