"""Evaluation of a trained run on its validation or test split (MLflow in, metrics out).

``evaluate_run`` loads the run's best checkpoint from MLflow, draws S samples per mixture
component (S·K weight draws, each applied to a whole batch at once by
``predict.predict_logits``), computes every metric with ``metrics.evaluate_predictions``
(mixture NLL over the S·K draws, AUC-PR, AUC-ROC, ECE, Brier, member metrics,
disagreement, entropies, bootstrap intervals) and, on synthetic data, the same metrics for
the true risk. Results go to a JSON file, to the run (metrics ``<split>_<name>``, tag
``eval_<split>_samples``, artifacts under ``eval/<split>/``) and to a printed table.

A run is found by id or MLflow model URI (``runs:/<id>/model``); ``load_run_model`` is shared
with ``pipeline.score``. torch and mlflow are imported inside the functions.
"""

from __future__ import annotations

import logging
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

import numpy as np

from pipeline import io, metrics

log = logging.getLogger(__name__)

RUN_ID = re.compile(r"^[0-9a-f]{32}$")
LOGGED = ("nll", "auc_pr", "auc_roc", "ece", "brier", "accuracy", "disagreement", "disagreement_normalized",
          "mean_predictive_entropy", "mean_mutual_information", "ece_floor", "ece_p_value", "calibration_slope",
          "calibration_intercept")  # scalars logged per split
TRUTH_LOGGED = ("nll", "auc_pr", "auc_roc", "ece", "brier")  # true-risk scalars (and model gaps) logged
PLOTS = ("reliability.png", "pr_curve.png", "referral.png")  # artifacts written per split


class Split(str, Enum):
    """Feature split evaluated."""

    VAL = "val"
    TEST = "test"


class EvalError(ValueError):
    """Bad evaluation input (unknown run, features that do not belong to the run, missing truth)."""


@dataclass
class EvalConfig:
    """Settings of one evaluation."""

    samples: int = 25  # Monte Carlo samples per mixture component (S); S·K draws in total
    batch_size: int = 128  # admissions per forward pass (memory grows with batch_size·S·K; 128: ~0.5 GB peak at 25x4 draws)
    n_bootstrap: int = 1000  # bootstrap resamples for the 95% intervals (0: none)
    seed: int = 0  # torch seed of the weight draws and numpy seed of the bootstrap
    threads: int | None = None  # torch intra-op threads (None: torch's default)
    log_to_run: bool = True  # log metrics, tag and artifacts to the MLflow run

    def __post_init__(self) -> None:
        for name in ("samples", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"EvalConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.n_bootstrap < 0:
            raise ValueError(f"EvalConfig.n_bootstrap must be >= 0, got {self.n_bootstrap}")


@dataclass
class RunModel:
    """A trained model with what its run recorded."""

    model: object  # torch module in eval mode
    info: dict  # train.load_model info: model_kind, refer_threshold, score_samples, max_bags, max_tokens...
    vocab: dict  # the training vocab.json (tokens, context, bins, text_items)
    run_id: str | None  # MLflow run id (None for a local model directory)
    manifest: dict | None = None  # the training features' manifest.json (redacted copy), when logged
    features_dir: Path | None = None  # features directory the run was trained on (tag ``features_dir``)
    tags: dict = field(default_factory=dict)  # the run's MLflow tags
    params: dict = field(default_factory=dict)  # the run's MLflow params


@dataclass
class EvalResult:
    """What ``evaluate_run`` produced."""

    report: dict  # metrics.evaluate_predictions(...) plus referral curve and provenance
    logits: np.ndarray  # (S, K, N) logits of every draw
    labels: np.ndarray  # (N,) 0/1
    true_risk: np.ndarray | None  # (N,) true risk (synthetic data) or None
    json_path: Path | None  # JSON written
    artifacts: list[Path]  # PNG files written


# ---------------------------------------------------------------------------- loading a run


def _client():
    from mlflow.tracking import MlflowClient

    from pipeline.tracking import tracking_uri

    return MlflowClient(tracking_uri())


def parse_model_uri(uri: str) -> tuple[str | None, Path | None]:
    """(run id, None) for ``runs:/<id>/model`` or a bare id; (None, dir) for a local model directory;
    (None, None) for any other MLflow URI (``models:/name/1``...), which ``load_run_model`` downloads."""
    text = str(uri).strip()
    m = re.match(r"^runs:/([0-9a-f]{32})(?:/model/?)?$", text)
    if m:
        return m.group(1), None
    if RUN_ID.match(text):
        return text, None
    path = Path(text)
    if (path / "artifacts" / "best.pt").exists():
        return None, path
    if re.match(r"^[a-z][a-z0-9+.-]*:/", text) and not text.startswith("runs:/"):  # models:/, s3://, file:/...
        return None, None
    raise EvalError(f"{text!r} is neither a run id, a runs:/<id>/model URI, an MLflow model URI nor a local "
                    "MLflow model directory")


def load_run_model(uri: str, workdir: Path | str | None = None) -> RunModel:
    """Model, info and vocabulary of a run id / ``runs:/<id>/model`` URI / local model directory."""
    import mlflow

    from pipeline.tracking import tracking_uri
    from pipeline.train import load_model

    run_id, local = parse_model_uri(uri)
    if run_id is None and local is None:  # another MLflow model URI (registry, remote store): download it
        try:
            local = Path(mlflow.artifacts.download_artifacts(artifact_uri=str(uri), dst_path=str(
                workdir or tempfile.mkdtemp(prefix="model-")), tracking_uri=tracking_uri()))
        except Exception as exc:
            raise EvalError(f"cannot download the model {uri}: {exc}") from None
        if not (local / "artifacts" / "best.pt").exists():
            raise EvalError(f"{uri} is not a model logged by `cli.py train` (no artifacts/best.pt)")
    if local is not None:
        model, info = load_model(local / "artifacts" / "best.pt")
        extraction = local / "artifacts" / "extraction.json"  # settings for `score --source` (pyfunc.log_model)
        manifest = io.read_json(extraction) if extraction.exists() else None
        return RunModel(model, info, io.read_json(local / "artifacts" / "vocab.json"), None, manifest)
    client = _client()
    try:
        run = client.get_run(run_id)
    except Exception as exc:  # mlflow raises MlflowException for unknown ids
        raise EvalError(f"run {run_id} not found in the tracking store {tracking_uri()}: {exc}") from None
    dst = Path(workdir or tempfile.mkdtemp(prefix="eval-"))
    try:
        model_dir = Path(mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path="model/artifacts",
                                                             dst_path=str(dst), tracking_uri=tracking_uri()))
    except Exception as exc:
        raise EvalError(f"run {run_id} has no logged model (model/artifacts): {exc}") from None
    model, info = load_model(model_dir / "best.pt")
    manifest = None
    try:
        path = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path="features/manifest.json",
                                                   dst_path=str(dst), tracking_uri=tracking_uri())
        manifest = io.read_json(path)
    except Exception:  # older runs / features without a manifest
        log.info("run %s has no features/manifest.json artifact", run_id)
    tags = dict(run.data.tags)
    fdir = Path(tags["features_dir"]) if tags.get("features_dir") else None
    return RunModel(model, info, io.read_json(model_dir / "vocab.json"), run_id, manifest, fdir, tags,
                    dict(run.data.params))


def resolve_features(run: RunModel, data: Path | str | None) -> Path:
    """The features directory to evaluate on: ``data`` or the run's; its vocab.json must be the run's."""
    if data is None and run.features_dir is None:
        raise EvalError(f"run {run.run_id} does not record its features directory; pass --data FEATURES_DIR")
    fdir = Path(data) if data is not None else run.features_dir
    vocab_file = fdir / "vocab.json"
    if not vocab_file.exists():
        raise EvalError(f"{vocab_file}: not found; is {fdir} a features directory written by `cli.py extract`?")
    if io.read_json(vocab_file) != run.vocab:
        raise EvalError(f"{vocab_file}: differs from the vocabulary run {run.run_id} was trained with; "
                        "these features belong to another extraction")
    return fdir


def split_mode(manifest: dict | None) -> str:
    """``random`` / ``era`` from a features manifest (``unknown`` when absent)."""
    return str(((manifest or {}).get("config") or {}).get("split") or "unknown")


# ---------------------------------------------------------------------------- true risk


def find_truth(features_dir: Path, truth: Path | str | None = None) -> Path | None:
    """``truth`` or ``<source dir>/_truth/truth.csv.gz`` of the features' CSV source, when it exists."""
    if truth is not None:
        if not Path(truth).exists():
            raise EvalError(f"{truth}: truth file not found")
        return Path(truth)
    manifest_file = features_dir / "manifest.json"
    if not manifest_file.exists():
        return None
    location = str((io.read_json(manifest_file).get("source") or {}).get("location") or "")
    if not location.startswith("csv:"):
        return None
    cand = Path(location.removeprefix("csv:")) / "_truth" / "truth.csv.gz"
    return cand if cand.exists() else None


def load_true_risk(truth_file: Path, link_file: Path, keys) -> np.ndarray:
    """TRUE_RISK per key, shape (N,), joined through the features' link file (key -> HADM_ID)."""
    import pandas as pd

    from pipeline.deid import read_link_file

    link = read_link_file(link_file)
    truth = pd.read_csv(truth_file)
    truth.columns = [c.lower() for c in truth.columns]
    for col in ("hadm_id", "true_risk"):
        if col not in truth.columns:
            raise EvalError(f"{truth_file}: missing column {col.upper()} (have {list(truth.columns)})")
    risk = link.merge(truth[["hadm_id", "true_risk"]], on="hadm_id", how="left").set_index("key")["true_risk"]
    out = risk.reindex(np.asarray(keys).astype(str)).to_numpy(dtype=np.float64)
    missing = np.flatnonzero(np.isnan(out))
    if missing.size:
        raise EvalError(f"{truth_file}: no TRUE_RISK for {missing.size} admission(s) (first: features row "
                        f"{int(missing[0])}); is it the truth of the source these features came from?")
    return out


# ---------------------------------------------------------------------------- sampling and metrics


def sample_logits(model, fs, samples: int, batch_size: int = 128, seed: int = 0, max_bags: int | None = None,
                  max_tokens: int | None = None) -> np.ndarray:
    """Logits (S, K, N) of a FeatureSet: S·K weight draws per batch, each over the whole batch.

    The torch RNG is seeded with ``seed`` inside ``fork_rng`` (the caller's stream is untouched).
    """
    import torch

    from pipeline import predict

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return predict.feature_logits(model, fs, samples, batch_size, max_bags, max_tokens)  # (S, K, N)


def report_of(logits, labels, true_risk=None, n_bootstrap: int = 1000, seed: int = 0) -> dict:
    """``metrics.evaluate_predictions`` plus the MI referral curve (JSON-able)."""
    report = metrics.evaluate_predictions(logits, labels, true_risk=true_risk, n_bootstrap=n_bootstrap, seed=seed)
    report["referral"] = metrics.referral_curve(logits, labels).to_dict()
    return report


def write_plots(logits, labels, true_risk, out_dir: Path, split: str) -> list[Path]:
    """Reliability diagram, PR curve (with the true risk when known) and referral curve as PNG."""
    from pipeline import plots

    p = metrics.predictive(logits)  # (N,)
    rel = metrics.reliability(labels, p)
    return [
        plots.plot_reliability(rel, out_dir / PLOTS[0], title=f"Reliability ({split})"),
        plots.plot_pr_curve(labels, p, out_dir / PLOTS[1], true_risk=true_risk, title=f"Precision-recall ({split})"),
        plots.plot_referral(metrics.referral_curve(logits, labels), out_dir / PLOTS[2],
                            title=f"Uncertainty referral ({split})"),
    ]


def mlflow_metrics(report: dict, split: str) -> dict[str, float]:
    """Flat ``<split>_<name>`` metrics (true risk: ``<split>_true_<m>``, gaps ``<split>_<m>_gap``)."""
    out = {f"{split}_{k}": report[k] for k in LOGGED if report.get(k) is not None}
    ref = report.get("true_risk")
    if ref:
        out.update({f"{split}_true_{k}": ref[k] for k in TRUTH_LOGGED if ref.get(k) is not None})
        out.update({f"{split}_{k}_gap": report[f"{k}_gap"] for k in TRUTH_LOGGED
                    if report.get(f"{k}_gap") is not None})
    return out


def _log_to_run(run: RunModel, report: dict, split: str, files: list[Path]) -> None:
    """Metrics, tags and artifacts of one evaluation; ``files`` = [the report JSON, *plots]."""
    import time

    from mlflow.entities import Metric

    client = _client()
    # at the run's last training step: the periodic ``val_nll`` curve then ends with this evaluation
    step = int((run.info.get("train_config") or {}).get("max_steps") or run.info.get("step") or 0)
    ts = int(time.time() * 1000)
    rows = [Metric(k, float(v), ts, step) for k, v in mlflow_metrics(report, split).items()]
    client.log_batch(run.run_id, metrics=rows)
    with tempfile.TemporaryDirectory(prefix="eval-log-") as tmp:
        report_file, *plots = files
        if report_file.name != "metrics.json":  # --json PATH: `compare` reads eval/<split>/metrics.json
            report_file = Path(shutil.copyfile(report_file, Path(tmp) / "metrics.json"))
        for f in (report_file, *plots):
            client.log_artifact(run.run_id, str(f), f"eval/{split}")
    client.set_tag(run.run_id, "split_mode", report["split_mode"])
    client.set_tag(run.run_id, f"eval_{split}_samples", str(report["samples"]))


# ---------------------------------------------------------------------------- the command


def evaluate_run(run: str, split: Split | str = Split.TEST, cfg: EvalConfig | None = None, *,
                 data: Path | str | None = None, truth: Path | str | None = None,
                 json_path: Path | str | None = None, out_dir: Path | str | None = None) -> EvalResult:
    """Evaluate run ``run`` (id or ``runs:/<id>/model``) on ``split`` of its features (or ``data``).

    Writes ``json_path`` (default ``<out_dir>/metrics.json``; ``out_dir`` defaults to
    ``runs/eval/<run id>/<split>``) and the PNG plots into ``out_dir``; logs to the run when
    ``cfg.log_to_run`` (the report always as ``eval/<split>/metrics.json``, whatever ``json_path``). Raises ``EvalError`` / ``FeatureError`` on bad input.
    """
    import torch

    from pipeline import data as data_mod
    from pipeline.tracking import redact_value

    cfg = cfg or EvalConfig()
    split = Split(split)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    with tempfile.TemporaryDirectory(prefix="eval-") as tmp:
        rm = load_run_model(run, tmp)
    fdir = resolve_features(rm, data)
    fs = data_mod.load_split(fdir / f"{split.value}.parquet")
    fs.check_vocab(len(rm.vocab["tokens"]), len(rm.vocab["context"]))
    truth_file = find_truth(fdir, truth)
    true_risk = load_true_risk(truth_file, fdir / "_private" / "link.csv", fs.keys) if truth_file else None
    logits = sample_logits(rm.model, fs, cfg.samples, cfg.batch_size, cfg.seed, rm.info.get("max_bags"),
                           rm.info.get("max_tokens"))  # (S, K, N)
    report = report_of(logits, fs.label, true_risk, cfg.n_bootstrap, cfg.seed)
    manifest = io.read_json(fdir / "manifest.json") if (fdir / "manifest.json").exists() else rm.manifest
    report.update(split=split.value, split_mode=split_mode(manifest), model_kind=rm.info.get("model_kind"),
                  prior=(rm.info.get("model_config") or {}).get("prior"), run_id=rm.run_id,
                  features=redact_value(fdir.resolve().name), truth=truth_file is not None)
    out = Path(out_dir) if out_dir else Path("runs") / "eval" / (rm.run_id or "local") / split.value
    jp = Path(json_path) if json_path else out / "metrics.json"
    io.write_json(jp, report)
    files = write_plots(logits, fs.label, true_risk, out, split.value)
    if cfg.log_to_run and rm.run_id:
        _log_to_run(rm, report, split.value, [jp, *files])
    return EvalResult(report, logits, fs.label, true_risk, jp, files)


def format_table(report: dict) -> str:
    """A small text table: metric, model (95% CI), true risk and gap when known."""
    ref = report.get("true_risk") or {}
    head = f"{'metric':8s} {'model':>9s} {'95% CI':>19s}" + (f" {'true risk':>10s} {'gap':>9s}" if ref else "")
    lines = [f"{report['split']}: n={report['n']} positives={report['positives']} draws={report['samples']}x"
             f"{report['components']}", head]
    for m in metrics.METRICS:
        lo, hi = report.get(f"{m}_ci") or (None, None)
        ci = f"[{_num(lo)}, {_num(hi)}]" if lo is not None else ""
        row = f"{m:8s} {_num(report[m]):>9s} {ci:>19s}"
        if ref:
            row += f" {_num(ref.get(m)):>10s} {_num(report.get(f'{m}_gap')):>9s}"
        lines.append(row)
    if report.get("ece_floor") is not None:
        lines.append(f"ece of a calibrated predictor with these predictions: mean {_num(report['ece_floor'])}, "
                     f"95th percentile {_num(report.get('ece_floor_p95'))}; P(>= observed) = "
                     f"{_num(report.get('ece_p_value'))}")
    if report.get("calibration_slope") is not None:
        lines.append(f"calibration slope {_num(report['calibration_slope'])} (> 1: too close to the base rate), "
                     f"intercept {_num(report.get('calibration_intercept'))} (> 0: risks too low)")
    lines.append(f"members: nll=[{', '.join(_num(v) for v in report['member_nll'])}] "
                 f"disagreement/(1-acc)={_num(report.get('disagreement_normalized'))} "
                 f"mean MI={_num(report.get('mean_mutual_information'))}")
    return "\n".join(lines)


def _num(v) -> str:
    return "n/a" if v is None else f"{v:.4f}"
