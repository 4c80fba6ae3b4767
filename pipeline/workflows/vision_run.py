"""Vision runs: train an image model (tracked or not), evaluate a run on clean and corrupted images.

``train_vision`` runs the image task's plan (``tasks.vision.task.plan``: the published recipe) through the
engine's one loop (``engine.loop.run_loop``) and keeps the last step's model (``best.pt`` when ``out_dir``
is given); ``train_run`` trains it as a run through the one training workflow of every task
(``workflows.train.train_plan``: tracked as the mortality runs are, ``last.pt`` at every validation, resumed
with ``resume``; experiment ``vision`` unless named): params ``train.*`` / ``model.*``, the tags ``run_kind`` =
vision (the mortality loaders refuse the run), ``dataset`` and ``model_label``, the artifacts
``checkpoint/best.pt`` and ``model_info.json`` (``tasks.vision.finish``: the validation metrics).

``evaluate_vision_run`` loads a vision run (an image model, or a Laplace run of one) with ``runs.load.load_run``,
rebuilds its test split from the run's settings (the same split for its seed), scores it clean and under
each corruption at each severity (``tasks.vision.evaluate``, the draws from the engine's predictor) with
``bayes.metrics.multiclass`` (NLL of the mixture over the S·K draws, accuracy, top-label ECE, Brier,
diversity, mutual information), writes ``metrics.json`` and ``severity.png`` (each metric against
the severity, a line per corruption and their mean) atomically, and logs them to the run under
``eval/test/`` with ``test_*`` metrics: what ``compare`` reads.
"""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.core import fileio
from pipeline.core.configs import config_dict
from pipeline.core.progress import Progress
from pipeline.engine.checkpoints import BEST, CHECKPOINT_FORMAT, save_checkpoint
from pipeline.runs import store
from pipeline.runs.load import Run, load_run
from pipeline.runs.store import LABEL_TAG
from pipeline.tasks.base import TASK_KEY
from pipeline.tasks.vision import KEY
from pipeline.tasks.vision.config import VisionEvalConfig, VisionTrainConfig

log = logging.getLogger(__name__)

SPLIT = "test"  # the evaluated split (artifacts under eval/test/, metrics test_*)
PLOT = "severity.png"  # a run's metrics against corruption severity


@dataclass
class VisionRunResult:
    """What ``train_run`` produced."""

    run_id: str | None  # the MLflow run (None without tracking)
    label: str  # compare's row name (rank1-gaussian, deterministic ...)
    result: VisionTrainResult  # model, configs, steps, validation metrics
    out_dir: Path  # best.pt and model_info.json


@dataclass
class VisionEvalResult:
    """What ``evaluate_vision_run`` produced."""

    report: dict  # VisionReport.to_dict() and provenance (run id, label, dataset, samples, corruptions)
    json_path: Path  # metrics.json written
    plot: Path | None  # severity.png (None without corruptions)
    run_id: str | None  # the evaluated run (None for a checkpoint file)


@dataclass
class VisionTrainResult:
    """What a training run produced."""

    model: object  # trained model (evaluation mode)
    config: VisionTrainConfig  # the settings trained with
    model_config: object  # the model's resolved VisionConfig
    steps: int  # optimizer steps taken
    steps_per_epoch: int  # distinct-image batches per epoch
    seconds: float  # wall-clock time of the training steps (validation excluded)
    final_train: dict  # loss, nll, kl, kl_weight, lr, grad_norm of the last step
    val_metrics: dict  # metrics.multiclass.evaluate_predictions on the validation set at the end
    history: list[dict] = field(default_factory=list)  # logged training and validation points
    checkpoint: Path | None = None  # best.pt when out_dir was given


def train_vision(cfg: VisionTrainConfig | None = None, *, out_dir: Path | str | None = None, tracker=None,
                 splits=None) -> VisionTrainResult:
    """Train the model of ``cfg`` through the engine's loop and validate it at the end (and every
    ``eval_every_epochs``), no run written (``train_run`` writes one).

    ``splits`` replaces the data ``cfg`` names (tests, benchmarks that load once). With ``out_dir`` the model is
    saved to ``out_dir/best.pt`` (atomically, as every run's model) with its configs and validation metrics.
    ``tracker``: ``runs.tracking``'s (params, metrics); None logs nothing. Raises
    ``engine.loop.TrainingDiverged`` (a ``FloatingPointError``) on a non-finite loss or gradient.
    """
    from pipeline.engine.loop import run_loop

    p = vision_plan(cfg or VisionTrainConfig(), splits)
    if tracker is not None:
        tracker.log_params({k: v for k, v in p.run_spec().params.items() if k != "model_kind"})
    state = run_loop(p, tracker=tracker, progress=p.cfg.progress)
    result = _result(p, state, p.val_metrics)
    if out_dir is not None:
        result.checkpoint = save_vision_checkpoint(Path(out_dir) / BEST, result)
    return result


def vision_plan(cfg: VisionTrainConfig, splits=None):
    """The image task's plan of ``cfg`` (``tasks.vision.task.plan``) on its device, its threads set; ``splits``
    replaces the data ``cfg`` names."""
    import torch

    from pipeline.core.devices import resolve_device
    from pipeline.tasks.vision.task import plan
    from pipeline.tasks.vision.train import load_splits

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    device = resolve_device(cfg.device)
    return plan(cfg, splits if splits is not None else load_splits(cfg), device)


def _result(p, state, val_metrics: dict) -> VisionTrainResult:
    return VisionTrainResult(model=p.model, config=p.cfg, model_config=p.model.cfg, steps=state.step,
                             steps_per_epoch=p.steps_per_epoch, seconds=state.seconds,
                             final_train=getattr(p, "final_train", {}), val_metrics=val_metrics, history=p.history)


def image_logits(model, images, samples: int = 1, batch_size: int = 32, seed: int = 0):
    """Logits (S, K, N, C) of images (N, C, H, W) in [0, 1] (an array or an ImageSet): the engine's predictor
    (per-member draws, BatchNorm running statistics, a generator seeded with ``seed`` for this call)."""
    from pipeline.engine.predict import draws_of
    from pipeline.tasks.vision.evaluate import image_batches
    from pipeline.tasks.vision.task import TASK

    return draws_of(model, TASK.likelihood)(image_batches(images, batch_size), samples, seed)


def evaluate_model(model, test, samples: int = 1, **kwargs):
    """``tasks.vision.evaluate.evaluate_vision`` of a model (its draws from the engine's predictor)."""
    from pipeline.engine.predict import draws_of
    from pipeline.tasks.vision.evaluate import evaluate_vision
    from pipeline.tasks.vision.task import TASK

    return evaluate_vision(draws_of(model, TASK.likelihood), test, samples, model.components, **kwargs)


def save_vision_checkpoint(path: Path | str, result: VisionTrainResult) -> Path:
    """The model, its configs and validation metrics as a checkpoint of the image task (its key ``task``; written
    atomically, tensors on the CPU); ``runs.formats.load_model`` reads it."""
    state = {k: v.detach().cpu() for k, v in result.model.state_dict().items()}
    mcfg = result.model_config
    payload = {"format": CHECKPOINT_FORMAT, TASK_KEY: KEY, "model_kind": mcfg.method.value,
               "model_config": mcfg.to_dict(), "train_config": result.config.to_dict(), "model": state,
               "step": result.steps, "steps": result.steps,
               "val_metrics": {m: result.val_metrics[m] for m in ("nll", "accuracy", "ece", "n")}}
    return save_checkpoint(path, payload)


def train_run(cfg: VisionTrainConfig, *, out_dir: Path | str | None = None, tracking: bool = True,
              experiment: str | None = None, run_name: str | None = None, resume: bool = False,
              splits=None) -> VisionRunResult:
    """Train ``cfg``'s model as a tracked run (see the module docstring): the image task's plan through the one
    training workflow (``workflows.train.train_plan``), so an interrupted run resumes from its ``last.pt``
    (``resume``, the same ``out_dir`` and settings). ``splits`` replaces the data ``cfg`` names."""
    from pipeline.workflows.train import train_plan

    p = vision_plan(cfg, splits)
    t = train_plan(p, out_dir=out_dir, resume=resume, tracking=tracking, experiment=experiment, run_name=run_name)
    result = _result(p, t.state, t.finished.val_metrics)
    result.checkpoint = t.out_dir / BEST
    return VisionRunResult(t.run_id, p.run_spec().tags[LABEL_TAG], result, t.out_dir)


def run_splits(settings: dict, data_dir: Path | str | None = None):
    """The train / val / test ImageSets a run's VisionTrainConfig (a dict, as recorded) names
    (``tasks.vision.train.run_splits``)."""
    from pipeline.tasks.vision.train import run_splits as splits_of

    return splits_of(settings, data_dir)


def load_test_set(run: Run, data_dir: Path | str | None = None):
    """The run's test ImageSet (``run_splits``)."""
    if not run.train_config:
        raise store.RunError(f"run {run.run_id}: its checkpoint records no training settings (dataset, seed)")
    return run_splits(run.train_config, data_dir).test


def evaluate_vision_run(run: str | Path, cfg: VisionEvalConfig | None = None, *, data_dir: Path | str | None = None,
                 out_dir: Path | str | None = None) -> VisionEvalResult:
    """Evaluate the vision run (or checkpoint file) ``run``; see the module docstring. Writes into
    ``out_dir`` (default ``runs/eval/<run id>/test``) and, with ``cfg.log_to_run``, logs to the run."""
    import torch

    from pipeline.core.devices import resolve_device

    cfg = cfg or VisionEvalConfig()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    device = resolve_device(cfg.device)
    with tempfile.TemporaryDirectory(prefix="vision-eval-") as tmp:
        vr = load_run(run, tmp, kind=KEY)
    test = load_test_set(vr, data_dir)
    model = vr.model = vr.model.to(device)
    scorer = vr.scorer(samples=cfg.samples, batch_size=cfg.batch_size)  # the run's (Task.scorer)
    samples = scorer.samples
    if cfg.cifar_c is None:
        with Progress("vision evaluate", 1 + len(cfg.corruptions) * len(cfg.severities), enabled=cfg.progress) as bar:
            report = scorer.evaluate(test, cfg.corruptions, cfg.severities, cfg.seed, cfg.corruption_seed,
                                     progress=bar.update)
    else:
        report = _evaluate_cifar_c(scorer, test, cfg)
    tc = vr.train_config
    out = Path(out_dir) if out_dir else Path("runs") / "eval" / (vr.run_id or "local") / SPLIT
    body = {"run_kind": KEY, "run_id": vr.run_id, "model_label": vr.label,
            "model_kind": vr.info.model_kind, "dataset": tc.get("dataset"), "test_set": test.name,
            "split": SPLIT, "corruption_source": "generated" if cfg.cifar_c is None else "cifar-c",
            "eval_config": config_dict(cfg) | {"samples": samples, "device": str(device)},
            **report.to_dict()}
    body["eval_config"].pop("cifar_c", None)  # a local path: where the files were is not a result
    json_path = fileio.write_json(out / store.METRICS, body)
    plot = None
    if report.corrupted:
        from pipeline.reports.plots import plot_severity

        series = {c: {"clean": report.clean, **{str(s): m for s, m in per.items()}}
                  for c, per in report.corrupted.items()}
        series["mean over corruptions"] = {"clean": report.clean,
                                           **{str(s): m for s, m in report.by_severity().items()}}
        plot = plot_severity(series, out / PLOT, title=f"{vr.label} on {test.name}, {samples}x{model.components} "
                                                          "draws")
    if cfg.log_to_run and vr.run_id:
        _log_to_run(vr, body, [json_path, *([plot] if plot else [])])
    return VisionEvalResult(body, json_path, plot, vr.run_id)


def _evaluate_cifar_c(scorer, test, cfg: VisionEvalConfig):
    """A VisionReport whose corrupted sets come from a CIFAR-10-C directory (every file there, or those named)."""
    from pipeline.bayes.metrics import multiclass as mm
    from pipeline.data.images.data import VisionDataError, read_cifar_c
    from pipeline.tasks.vision.evaluate import VisionReport

    root = Path(cfg.cifar_c)
    names = list(cfg.corruptions) or sorted(p.stem for p in root.glob("*.npy") if p.stem != "labels")
    if not names:
        raise VisionDataError(f"{root}: no <corruption>.npy files (a CIFAR-10-C directory)")

    def score(x, labels) -> dict:
        logits = scorer.logits(x, cfg.seed)  # (S, K, N, C)
        return mm.evaluate_predictions(logits, labels, components=scorer.model.components)

    report = VisionReport(clean=score(test.floats(), test.labels), samples=scorer.samples)
    for name in names:
        report.corrupted[name] = {}
        for s in cfg.severities:
            part = read_cifar_c(root, name, s, test.num_classes)
            if part.images.shape[1:] != test.images.shape[1:]:
                raise VisionDataError(f"{root / (name + '.npy')}: images {part.images.shape[1:]} differ from the test "
                                      f"set's {test.images.shape[1:]}")
            report.corrupted[name][s] = score(part.floats(), part.labels)
    return report


def run_metrics(body: dict) -> dict[str, float]:
    """Flat MLflow metrics of an evaluation: ``test_<m>`` clean, ``test_s<k>_<m>`` per severity (mean over
    the corruptions)."""
    clean = body["clean"]
    out = {f"{SPLIT}_{m}": clean[m] for m in ("nll", "accuracy", "ece", "brier", "mean_mutual_information",
                                              "disagreement") if clean.get(m) is not None}
    for s, row in body.get("by_severity", {}).items():
        out.update({f"{SPLIT}_s{s}_{m}": v for m, v in row.items()})
    return out


def _log_to_run(vr: Run, body: dict, files: list[Path]) -> None:
    from pipeline.runs.tracking import RunTracker

    tracker = RunTracker(run_id=vr.run_id, reopen=False)  # a finished run: its status stays
    tracker.log_metrics(run_metrics(body), int(vr.info.step or 0))
    for f in files:
        tracker.log_artifact(f, store.eval_artifacts(SPLIT))
    tracker.set_tag(f"eval_{SPLIT}_samples", str(body["samples"]))


def format_report(body: dict) -> str:
    """A small text table: clean, then each severity (mean over the corruptions): NLL, accuracy, ECE."""
    lines = [f"{body['model_label']} on {body['test_set']}: n={body['clean']['n']} draws={body['samples']}x"
             f"{body['clean']['components']} corruptions={','.join(body['corrupted']) or 'none'}",
             f"{'setting':12s} {'nll':>8s} {'accuracy':>9s} {'ece':>7s}"]
    rows = [("clean", body["clean"])] + [(f"severity {s}", r) for s, r in body.get("by_severity", {}).items()]
    for name, r in rows:
        lines.append(f"{name:12s} {r['nll']:8.4f} {r['accuracy']:9.4f} {r['ece']:7.4f}")
    mi, dis = body["clean"].get("mean_mutual_information"), body["clean"].get("disagreement")
    lines.append("clean: mean MI " + ("n/a" if mi is None else f"{mi:.4f}") + " nats, member disagreement "
                 + ("n/a" if dis is None else f"{dis:.4f}"))
    return "\n".join(lines)
