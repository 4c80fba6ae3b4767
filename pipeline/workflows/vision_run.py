"""Tracked vision runs: train an image model into MLflow, evaluate a run on clean and corrupted images.

``train_run`` wraps ``train.train_vision`` in an MLflow run as the mortality runs are tracked
(``runs.tracking.RunTracker``: params redacted; experiment ``vision`` unless named): params
``train.*`` / ``model.*``, the tags ``run_kind`` = vision (the mortality loaders refuse the run),
``dataset`` and ``model_label``, the artifacts ``checkpoint/best.pt`` and ``model_info.json``.

``evaluate_run`` loads a vision run (an image model, or a Laplace run of one) with
``runs.vision.load_vision_run``, rebuilds its test split from the run's settings (the same split
for its seed), scores it clean and under each corruption at each severity with
``bayes.metrics.multiclass`` (NLL of the mixture over the S·K draws, accuracy, top-label ECE, Brier,
diversity, mutual information), writes ``metrics.json`` and ``severity.png`` (each metric against
the severity, a line per corruption and their mean) atomically, and logs them to the run under
``eval/test/`` with ``test_*`` metrics: what ``compare`` reads.
"""

from __future__ import annotations

import dataclasses
import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pipeline.core import fileio
from pipeline.core.configs import config_dict
from pipeline.core.progress import Progress
from pipeline.runs import store
from pipeline.runs.tracking import make_tracker
from pipeline.runs.vision import DATASET_TAG, LABEL_TAG, VISION_EXPERIMENT, VisionRun, load_vision_run, model_label
from pipeline.tasks.vision.config import VisionEvalConfig, VisionTrainConfig

log = logging.getLogger(__name__)

SPLIT = "test"  # the evaluated split (artifacts under eval/test/, metrics test_*)
PLOT = "severity.png"  # a run's metrics against corruption severity


@dataclass
class VisionRunResult:
    """What ``train_run`` produced."""

    run_id: str | None  # the MLflow run (None without tracking)
    label: str  # compare's row name (rank1-gaussian, deterministic ...)
    result: object  # train.VisionTrainResult (model, configs, steps, validation metrics)
    out_dir: Path  # best.pt and model_info.json


@dataclass
class VisionEvalResult:
    """What ``evaluate_run`` produced."""

    report: dict  # VisionReport.to_dict() and provenance (run id, label, dataset, samples, corruptions)
    json_path: Path  # metrics.json written
    plot: Path | None  # severity.png (None without corruptions)
    run_id: str | None  # the evaluated run (None for a checkpoint file)


def train_run(cfg: VisionTrainConfig, *, out_dir: Path | str | None = None, tracking: bool = True,
              experiment: str | None = None, run_name: str | None = None) -> VisionRunResult:
    """Train ``cfg``'s model as a tracked run (see the module docstring)."""
    from pipeline.tasks.vision.train import train_vision

    mcfg = cfg.model_config()
    label = model_label({"model_kind": mcfg.method.value, "model_config": mcfg.to_dict()})
    tracker = make_tracker(tracking, experiment=experiment or VISION_EXPERIMENT,
                           run_name=run_name or f"{label}-{cfg.dataset.value}-s{cfg.seed}")
    with tracker:  # the run ends FAILED on any exception, else FINISHED
        out = Path(out_dir) if out_dir else Path("runs") / "vision" / (tracker.run_id or f"{label}-s{cfg.seed}")
        for key, value in ((store.RUN_KIND_TAG, store.RunKind.VISION.value), (DATASET_TAG, cfg.dataset.value),
                           (LABEL_TAG, label)):
            tracker.set_tag(key, value)
        tracker.log_params({"model_kind": mcfg.method.value})
        result = train_vision(cfg, out_dir=out, tracker=tracker)
        info = {"run_kind": store.RunKind.VISION.value, "model_kind": mcfg.method.value, "model_label": label,
                "model_config": mcfg.to_dict(), "train_config": cfg.to_dict(), "steps": result.steps,
                "train_seconds": result.seconds, "score_samples": cfg.eval_samples,
                "val_metrics": {m: result.val_metrics[m] for m in ("nll", "accuracy", "ece", "n")},
                "final_train": result.final_train}
        fileio.write_json(out / store.MODEL_INFO, info)
        tracker.log_artifact(out / store.MODEL_INFO)
    return VisionRunResult(tracker.run_id, label, result, out)


def run_splits(settings: dict, data_dir: Path | str | None = None):
    """The train / val / test ImageSets a run's VisionTrainConfig (a dict, as recorded) names: its dataset and
    seed's split (``data_dir`` replaces the CIFAR directory)."""
    from pipeline.tasks.vision.train import load_splits

    settings = dict(settings)
    if data_dir is not None:
        settings["data_dir"] = str(data_dir)
    known = {f.name for f in dataclasses.fields(VisionTrainConfig)}
    return load_splits(VisionTrainConfig(**{k: v for k, v in settings.items() if k in known}))


def load_test_set(run: VisionRun, data_dir: Path | str | None = None):
    """The run's test ImageSet (``run_splits``)."""
    if not run.train_config:
        raise store.RunError(f"run {run.run_id}: its checkpoint records no training settings (dataset, seed)")
    return run_splits(run.train_config, data_dir).test


def evaluate_run(run: str | Path, cfg: VisionEvalConfig | None = None, *, data_dir: Path | str | None = None,
                 out_dir: Path | str | None = None) -> VisionEvalResult:
    """Evaluate the vision run (or checkpoint file) ``run``; see the module docstring. Writes into
    ``out_dir`` (default ``runs/eval/<run id>/test``) and, with ``cfg.log_to_run``, logs to the run."""
    import torch

    from pipeline.tasks.vision.evaluate import evaluate_vision
    from pipeline.tasks.vision.train import resolve_device

    cfg = cfg or VisionEvalConfig()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    device = resolve_device(cfg.device)
    with tempfile.TemporaryDirectory(prefix="vision-eval-") as tmp:
        vr = load_vision_run(run, tmp)
    test = load_test_set(vr, data_dir)
    samples = cfg.samples or int(vr.info.get("score_samples") or 1)
    model = vr.model.to(device)
    if cfg.cifar_c is None:
        with Progress("vision evaluate", 1 + len(cfg.corruptions) * len(cfg.severities), enabled=cfg.progress) as bar:
            report = evaluate_vision(model, test, samples, cfg.corruptions, cfg.severities, cfg.seed,
                                     cfg.corruption_seed, cfg.batch_size, progress=bar.update)
    else:
        report = _evaluate_cifar_c(model, test, samples, cfg)
    tc = vr.train_config
    out = Path(out_dir) if out_dir else Path("runs") / "eval" / (vr.run_id or "local") / SPLIT
    body = {"run_kind": store.RunKind.VISION.value, "run_id": vr.run_id, "model_label": vr.label,
            "model_kind": vr.info.get("model_kind"), "dataset": tc.get("dataset"), "test_set": test.name,
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


def _evaluate_cifar_c(model, test, samples: int, cfg: VisionEvalConfig):
    """A VisionReport whose corrupted sets come from a CIFAR-10-C directory (every file there, or those named)."""
    from pipeline.bayes.metrics import multiclass as mm
    from pipeline.data.images.data import VisionDataError, read_cifar_c
    from pipeline.tasks.vision.evaluate import VisionReport, predict_logits

    root = Path(cfg.cifar_c)
    names = list(cfg.corruptions) or sorted(p.stem for p in root.glob("*.npy") if p.stem != "labels")
    if not names:
        raise VisionDataError(f"{root}: no <corruption>.npy files (a CIFAR-10-C directory)")

    def score(x, labels) -> dict:
        logits = predict_logits(model, x, samples, cfg.batch_size, cfg.seed)  # (S, K, N, C)
        return mm.evaluate_predictions(logits, labels, components=model.components)

    report = VisionReport(clean=score(test.floats(), test.labels), samples=samples)
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


def _log_to_run(vr: VisionRun, body: dict, files: list[Path]) -> None:
    from pipeline.runs.tracking import RunTracker

    tracker = RunTracker(run_id=vr.run_id, reopen=False)  # a finished run: its status stays
    tracker.log_metrics(run_metrics(body), int(vr.info.get("step") or 0))
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
