"""Evaluation of a trained run on its validation or test split (MLflow in, metrics out).

``evaluate_run`` loads the run's best checkpoint from MLflow, draws S samples per mixture
component (S·K weight draws, each applied to a whole batch at once by
``predict.predict_logits``), computes every metric with ``metrics.evaluate_predictions``
(mixture NLL over the S·K draws, AUC-PR, AUC-ROC, ECE, Brier, member metrics,
disagreement, entropies, bootstrap intervals) and, on synthetic data, the same metrics for
the true risk. Results go to a JSON file, to the run (metrics ``<split>_<name>``, tag
``eval_<split>_samples``, artifacts under ``eval/<split>/``) and to a printed table.

A run is found by id or model URI through ``runs.load.load_run``. torch and mlflow are
imported inside the functions.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.bayes import metrics
from pipeline.core import fileio
from pipeline.core.contracts import DEFAULT_BATCH, MIN_DEATHS
from pipeline.core.devices import resolve_device
from pipeline.runs import store
from pipeline.runs.identity import features_identity, label, source_of
from pipeline.runs.load import Run, load_run, resolve_features
from pipeline.runs.store import split_mode
from pipeline.tasks.mortality import KEY as MORTALITY
from pipeline.tasks.mortality.truth import find_truth, load_true_risk
from pipeline.workflows.evaluate_config import EvalConfig, Split  # noqa: F401  (their home; imported from here too)

log = logging.getLogger(__name__)

LOGGED = (*metrics.METRICS, "accuracy", "disagreement", "disagreement_normalized",
          "mean_predictive_entropy", "mean_mutual_information", "ece_floor", "ece_p_value", "calibration_slope",
          "calibration_intercept")  # scalars logged per split
TRUTH_LOGGED = metrics.METRICS  # true-risk scalars (and model gaps) logged
PLOTS = ("reliability.png", "pr_curve.png", "referral.png", "retention.png")  # artifacts written per split


@dataclass
class EvalResult:
    """What ``evaluate_run`` produced."""

    report: dict  # metrics.evaluate_predictions(...) plus referral curve and provenance
    logits: np.ndarray  # (S, K, N) logits of every draw
    labels: np.ndarray  # (N,) 0/1
    true_risk: np.ndarray | None  # (N,) true risk (synthetic data) or None
    json_path: Path | None  # JSON written
    artifacts: list[Path]  # PNG files written

    def summary(self) -> str:
        """What ``cli.py evaluate`` prints per split: the metric table (``format_table``), then the files."""
        return (format_table(self.report) + f"\nmetrics: {self.json_path}\nplots: "
                + ", ".join(str(p) for p in self.artifacts))


# ---------------------------------------------------------------------------- sampling and metrics


def sample_logits(model, fs, samples: int, batch_size: int = DEFAULT_BATCH, seed: int = 0, max_bags: int | None = None,
                  max_tokens: int | None = None) -> np.ndarray:
    """Logits (S, K, N) of a FeatureSet: S·K weight draws per batch, each over the whole batch.

    The draws come from a generator seeded with ``seed`` (``predict.seeded_generator``: the numbers of
    ``torch.manual_seed(seed)``); torch's global stream is untouched.
    """
    from pipeline.tasks.mortality import predict

    return predict.feature_logits(model, fs, samples, batch_size, max_bags, max_tokens,
                                  predict.seeded_generator(seed))  # (S, K, N)


def report_of(logits, labels, true_risk=None, n_bootstrap: int = 1000, seed: int = 0, *,
              summary: metrics.Summary | None = None,
              measure: metrics.Measure | str = metrics.Measure.MUTUAL_INFORMATION) -> dict:
    """``metrics.evaluate_predictions`` plus the referral curve by ``measure`` (the run's refer measure)
    and, with ``true_risk``, ``uncertainty_vs_truth`` (JSON-able). ``summary``: the per-admission
    predictive (default: of the draws; a Gaussian-logit model's from ``predict.feature_predictions``),
    whose mutual information and entropy the report's means are."""
    summary = summary if summary is not None else metrics.Summary.from_draws(logits)
    report = metrics.evaluate_predictions(logits, labels, true_risk=true_risk, n_bootstrap=n_bootstrap, seed=seed)
    report["mean_mutual_information"] = float(summary.mutual_info.mean())
    report["mean_risk_sd"] = float(summary.sd.mean())
    report["has_spread"] = int(summary.spread.sum())  # admissions the weight posterior reaches
    report["refer_measure"] = metrics.Measure(measure).value
    report["referral"] = referral_of(logits, labels, summary, measure).to_dict()
    if true_risk is not None:
        report["uncertainty_vs_truth"] = metrics.uncertainty_vs_truth(summary, true_risk)
    return report


def referral_of(logits, labels, summary: metrics.Summary, measure) -> metrics.ReferralCurve:
    """The referral curve (labels' NLL and AUC-PR of the kept) ranking by ``measure``'s values in ``summary``."""
    return metrics.referral_curve(logits, labels, measure=measure, scores=summary.measure(measure))


def write_plots(logits, labels, true_risk, out_dir: Path, split: str, summary: metrics.Summary | None = None,
                measure: metrics.Measure | str = metrics.Measure.MUTUAL_INFORMATION, words=None) -> list[Path]:
    """Reliability diagram, PR curve (with the true risk when known) and referral curve as PNG (``words``: the run's
    task, ``data.task.TaskWords``; None: in-hospital mortality)."""
    from pipeline.reports import plots

    p = metrics.predictive(logits)  # (N,)
    rel = metrics.reliability(labels, p)
    curve = referral_of(logits, labels, summary if summary is not None else metrics.Summary.from_draws(logits),
                        measure)
    return [
        plots.plot_reliability(rel, out_dir / PLOTS[0], title=f"Reliability ({split})",
                               **({} if words is None else {"outcome": (words.event, words.rate)})),
        plots.plot_pr_curve(labels, p, out_dir / PLOTS[1], true_risk=true_risk, title=f"Precision-recall ({split})"),
        plots.plot_referral(curve, out_dir / PLOTS[2], title=plots.referral_title(curve, split)),
    ]


def mlflow_metrics(report: dict, split: str) -> dict[str, float]:
    """Flat ``<split>_<name>`` metrics (true risk: ``<split>_true_<m>``, gaps ``<split>_<m>_gap``)."""
    out = {f"{split}_{k}": report[k] for k in LOGGED if report.get(k) is not None}
    ref = report.get("true_risk")
    if ref:
        out.update({f"{split}_true_{k}": ref[k] for k in TRUTH_LOGGED if ref.get(k) is not None})
        out.update({f"{split}_{k}_gap": report[f"{k}_gap"] for k in TRUTH_LOGGED
                    if report.get(f"{k}_gap") is not None})
    for m, v in ((report.get("uncertainty_vs_truth") or {}).get("measures") or {}).items():
        out.update({f"{split}_{k}_{m}": v[k] for k in ("referral_gain", "spearman") if v.get(k) is not None})
    if (report.get("shift") or {}).get("p_value") is not None:  # the split against the calibration half
        out[f"{split}_shift_p_value"] = report["shift"]["p_value"]
    return out


def _log_to_run(run: Run, report: dict, split: str, files: list[Path]) -> None:
    """Metrics, tags and artifacts of one evaluation; ``files`` = [the report JSON, *plots]."""
    from pipeline.runs.tracking import RunTracker

    tracker = RunTracker(run_id=run.run_id, reopen=False)  # a finished run: its status stays
    # at the run's last training step: the periodic ``val_nll`` curve then ends with this evaluation
    step = int(run.tags.get("steps_trained") or run.train_config.get("max_steps") or run.info.step or 0)
    tracker.log_metrics(mlflow_metrics(report, split), step)
    with tempfile.TemporaryDirectory(prefix="eval-log-") as tmp:
        report_file, *plots = files
        if report_file.name != store.METRICS:  # a json_path of another name: `compare` reads eval/<split>/metrics.json
            report_file = Path(shutil.copyfile(report_file, Path(tmp) / store.METRICS))
        for f in (report_file, *plots):
            tracker.log_artifact(f, store.eval_artifacts(split))
    tracker.set_tag(store.SPLIT_MODE_TAG, report["split_mode"])
    tracker.set_tag(f"eval_{split}_samples", str(report["samples"]))


# ---------------------------------------------------------------------------- the command


def evaluate_run(run: str, split: Split | str = Split.TEST, cfg: EvalConfig | None = None, *,
                 data: Path | str | None = None, truth: Path | str | None = None,
                 json_path: Path | str | None = None, out_dir: Path | str | None = None,
                 device: str | None = None) -> EvalResult:
    """Evaluate run ``run`` (id or ``runs:/<id>/model``) on ``split`` of its features (or ``data``), its model on
    ``device`` (``pipeline.core.devices.resolve_device``: None is cuda when available, else cpu).

    Writes ``json_path`` (default ``<out_dir>/metrics.json``; ``out_dir`` defaults to
    ``runs/eval/<run id>/<split>``) and the PNG plots into ``out_dir``; logs to the run when
    ``cfg.log_to_run`` (the report always as ``eval/<split>/metrics.json``, whatever ``json_path``). Raises a
    ``PipelineError`` on bad input.
    """
    import torch

    from pipeline.core.redact import redact_value
    from pipeline.data import features

    cfg = cfg or EvalConfig()
    split = Split(split)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    with tempfile.TemporaryDirectory(prefix="eval-") as tmp:
        rm = load_run(run, tmp, resolve_device(device), kind=MORTALITY)
    fdir = resolve_features(rm, data)
    fs = features.load_split(fdir / f"{split.value}.parquet", values=rm.model.value_channel)
    fs.check_vocab(len(rm.vocab["tokens"]), len(rm.vocab["context"]))
    truth_file = find_truth(fdir, truth)
    true_risk = load_true_risk(truth_file, fdir / "_private" / "link.csv", fs.keys) if truth_file else None
    scorer = rm.scorer(samples=cfg.samples, batch_size=cfg.batch_size)  # the run's (Task.scorer)
    samples = scorer.samples
    pred = scorer.predictions(fs, scorer.generator(cfg.seed))
    logits, measure = pred.logits, scorer.refer_measure  # (S, K, N)
    report = report_of(logits, fs.label, true_risk, cfg.n_bootstrap, cfg.seed, summary=pred.summary, measure=measure)
    report.update(decisions(scorer, rm, pred, fs, true_risk, cfg, split))
    report["shift"] = shift_section(scorer, rm, pred, fs, cfg.seed)
    manifest = fileio.read_json(fdir / store.MANIFEST) if (fdir / store.MANIFEST).exists() else rm.manifest
    report.update(identical_draws=bool(samples > 1 and (logits == logits[:1]).all()))  # a deterministic model
    identity = features_identity(manifest)  # what compare groups by: the features' content, not their folder
    report.update(task=rm.words.to_json())  # what the run predicts, in words (the lines' counts say its outcome)
    report.update(split=split.value, split_mode=split_mode(manifest), model_kind=rm.info.model_kind,
                  model_label=rm.info.model_label,
                  prior=(rm.info.model_config or {}).get("prior"), run_id=rm.run_id,
                  features=redact_value(fdir.resolve().name), features_id=identity,
                  features_label=label((manifest or {}).get("release"), source_of(manifest), identity),
                  truth=truth_file is not None)
    out = Path(out_dir) if out_dir else Path("runs") / "eval" / (rm.run_id or "local") / split.value
    jp = Path(json_path) if json_path else out / store.METRICS
    fileio.write_json(jp, report)
    files = write_plots(logits, fs.label, true_risk, out, split.value, pred.summary, measure, rm.words)
    files.append(plot_retention(report, out / PLOTS[3], split.value))
    if cfg.log_to_run and rm.run_id:
        _log_to_run(rm, report, split.value, [jp, *files])
    return EvalResult(report, logits, fs.label, true_risk, jp, files)


def decisions(scorer, rm: Run, pred, fs, true_risk, cfg: EvalConfig, split: Split) -> dict:
    """The run's policy on this split (``evaluate_policy.policy_section``; ``scorer``: the run's, which holds the
    policy); a run without one: its selective metrics by its refer measure on the raw risk (``legacy_section``)."""
    from pipeline.data.features import calibration_mask
    from pipeline.workflows.evaluate_policy import legacy_section, policy_section

    policy = scorer.policy
    if policy is None:
        return legacy_section(pred.summary, fs.label, true_risk, scorer.refer_measure, cfg)
    share = float(rm.train_config.get("calibration_share") or 0.0)
    in_cal = int(calibration_mask(fs.keys, share).sum()) if share and split is Split.VAL else 0
    return policy_section(policy, pred, fs.label, true_risk, scorer.groups(fs), cfg, in_cal)


def shift_section(scorer, rm: Run, pred, fs, seed: int) -> dict:
    """The split against the run's calibration half (``tasks.mortality.shift``; the val split holds that half
    itself): the shift check's JSON, ``shift``."""
    from pipeline.tasks.mortality import risk, shift

    check, policy, measures = shift.checker(rm, scorer, seed), scorer.policy, {}
    if policy is not None:
        view = risk.predictive(pred, scorer.groups(fs))
        cal = policy.calibrator.apply(view.mean)
        measures = policy.measures(view, cal, policy.threshold.flag(cal))
    check.add(fs, measures)
    return check.result().to_dict()


def plot_retention(report: dict, path: Path, split: str) -> Path:
    """retention.png: AUC-PR and NLL of the kept (with bootstrap bands) and, on synthetic data, their KL from the
    truth, against the share referred by the refer flag's ordering."""
    from pipeline.reports import plots

    return plots.plot_retention(report["retention"], path, report.get("retention_truth"),
                                title=f"Retention by {report['retention']['ordering']} ({split}, "
                                      f"{report['selective']['risk']} risk)")


DEBIASED = "ece_debiased"  # the ECE row's point: the debiased ECE of its interval (metrics.report.debiased_interval)


def format_table(report: dict) -> str:
    """A small text table: metric, model (95% CI), true risk and gap when known."""
    ref = report.get("true_risk") or {}
    cal = report.get("calibrated") or {}
    head = (f"{'metric':8s} {'model':>9s} {'95% CI':>19s}" + (f" {'calibrated':>10s}" if cal else "")
            + (f" {'true risk':>10s} {'gap':>9s}" if ref else ""))
    few = report["positives"] < MIN_DEATHS  # intervals and calibration cannot be judged
    words = words_of(report)
    lines = [f"{report['split']}: n={report['n']} positives={report['positives']} draws={draws_label(report)}", head]
    if (report.get("shift") or {}).get("sentence"):
        lines.insert(1, f"shift check: {report['shift']['sentence']}")
    if few:
        lines.insert(1, f"caution: {report['positives']} {words.events} in this split (fewer than {MIN_DEATHS}): the "
                        "95% intervals, the ECE and the calibration slope cannot be judged")
    for m in metrics.METRICS:
        lo, hi = report.get(f"{m}_ci") or (None, None)
        ci = "not judged" if few and lo is not None else f"[{_num(lo)}, {_num(hi)}]" if lo is not None else ""
        k, m = (DEBIASED, "ece-deb") if m == "ece" and DEBIASED in report else (m, m)  # the ECE's interval's point
        row = f"{m:8s} {_num(report[k]):>9s} {ci:>19s}" + (f" {_num(cal.get(k)):>10s}" if cal else "")
        if ref:
            row += f" {_num(ref.get(k)):>10s} {_num(report.get(f'{k}_gap')):>9s}"
        lines.append(row)
    if DEBIASED in report:
        lines.append(f"ece-deb: the ECE debiased (2 x measured - the bootstrap's mean) with its basic bootstrap "
                     f"interval; the ECE as measured ({report.get('n_bins', 15)} bins) is {_num(report['ece'])}, "
                     "biased upward at this size")
    if report.get("ece_floor") is not None:
        lines.append(f"ece of a calibrated predictor with these predictions: mean {_num(report['ece_floor'])}, "
                     f"95th percentile {_num(report.get('ece_floor_p95'))}; P(>= observed) = "
                     f"{_num(report.get('ece_p_value'))}")
    if report.get("calibration_slope") is not None and few:
        lines.append(f"calibration slope not judged ({report['positives']} {words.events}; {MIN_DEATHS} or more "
                     "needed)")
    elif report.get("calibration_slope") is not None:
        slope = report["calibration_slope"]
        lines.append(f"calibration slope {_num(slope)} ({slope_note(slope, words.events)}), "
                     f"intercept {_num(report.get('calibration_intercept'))} (> 0: risks too low, < 0: too high)")
    lines.append(f"members: nll=[{', '.join(_num(v) for v in report['member_nll'])}] "
                 f"disagreement/(1-acc)={_num(report.get('disagreement_normalized'))} "
                 f"mean MI={_num(report.get('mean_mutual_information'))}")
    from pipeline.workflows.evaluate_policy import format_lines

    lines += format_lines(report)
    vs = report.get("uncertainty_vs_truth")
    if vs:
        cells = ", ".join(f"{m} {_num(_unsigned_zero(v['referral_gain']))} ({_num(v['spearman'])})"
                          for m, v in vs["measures"].items())
        lines.append(f"uncertainty vs the error KL(true || predicted): referral gain (Spearman) {cells}; "
                     f"refer measure {report.get('refer_measure')}")
    return "\n".join(lines)


def draws_label(report: dict) -> str:
    """``SxK`` weight draws; ``1`` when they were all the same (a model that draws no weights)."""
    if report.get("identical_draws"):
        return f"1 (a deterministic model: its {report['samples']} samples are one draw)"
    return f"{report['samples']}x{report['components']}"


def words_of(report: dict):
    """What the evaluated run predicts (``data.task.TaskWords``): the report's ``task``, else in-hospital mortality
    (a report written before it was recorded)."""
    from pipeline.data.task import MORTALITY, of_record

    return of_record(report.get("task")) or MORTALITY


def slope_note(slope: float, events: str = "deaths") -> str:
    """What a calibration slope (logistic fit of the outcome on the logit of the risk) says (``events``: the outcome,
    plural)."""
    if slope != slope:
        return "not estimable"
    if slope < 0:
        return f"negative: higher predicted risks went with fewer {events}, the ranking is reversed"
    if slope < 0.9:
        return "< 1: risks spread too far from the base rate (overconfident)"
    if slope > 1.1:
        return "> 1: risks too close to the base rate (underconfident)"
    return "near 1: the spread of the risks fits"


def _unsigned_zero(v):
    """A gain that rounds to zero prints as 0.0000, not -0.0000 (a constant measure's is 0 up to rounding)."""
    return None if v is None else round(v, 4) + 0.0


def _num(v) -> str:
    return "n/a" if v is None else f"{v:.4f}"
