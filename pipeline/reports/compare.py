"""Comparison of evaluated runs across seeds: one row per run, mean ± sd per variant, Markdown and CSV.

``collect`` reads every evaluated run (the ``eval/<split>/metrics.json`` artifacts that
``workflows.evaluate`` logs) of an experiment or a list of run ids into one row per run.
``summarize`` groups the rows by feature set (its content, ``reports.feature_sets``: never a folder's
name; each section labelled by its release and source), feature split mode
(``random``, or ``era``: MIMIC-III's carevue-era train, metavision-era test; MIMIC-IV's by
``anchor_year_group``, the latest in test) and model variant
(``tasks.mortality.variants``) and gives mean ± sd over seeds of NLL, AUC-PR and ECE on val and test, the
test NLL gap to the true risk, and a true-risk reference row per feature set and split mode:
runs on other admissions are never pooled, and a true risk is never set beside a run of other data
(the Markdown table has a section per feature set). ``write_tables`` writes Markdown and CSV atomically. The grid
that trains and evaluates every variant is ``pipeline.workflows.grid``. Vision runs (tag ``run_kind``) have
their own tables (``compare_vision``); the rows here are the mortality runs'.
"""

from __future__ import annotations

import logging
import math
import tempfile
from pathlib import Path

from pipeline.core import fileio
from pipeline.core.errors import PipelineError
from pipeline.core.tables import cell, markdown_table, mean_sd
from pipeline.reports import feature_sets
from pipeline.runs import store
from pipeline.runs.load import RunRecord, evaluation, find_runs, runs_of
from pipeline.tasks.mortality import KEY as MORTALITY
from pipeline.tasks.mortality.variants import VARIANTS, canon, model_defaults, variant_label

log = logging.getLogger(__name__)

SPLITS = ("val", "test")  # evaluated splits in the table
TABLE_METRICS = ("nll", "auc_pr", "ece")  # metrics in the table
GAP = "test_nll_gap"  # model NLL - true-risk NLL (the true-risk row's own is 0)
# uncertainty against the true risk (evaluate's uncertainty_vs_truth): the run's refer measure's referral gain
# and Spearman with the error on test, and the predictive entropy's gain (a point model's only uncertainty)
UNCERTAINTY = ("test_referral_gain", "test_spearman", "test_referral_gain_entropy")
# the run's policy on test (evaluate's calibrated and selective sections): the calibrated risk's ECE, and the
# selective metrics of the refer flag's ordering (Brier loss: AUGRC, AURC, risk at 90% coverage, coverage at the
# evaluation's target risk; the 0/1 loss of the decision: AUGRC)
SELECTIVE = ("test_ece_calibrated", "test_augrc", "test_aurc", "test_risk_at_0.9", "test_coverage_at_risk",
             "test_augrc_zero_one")
PARTIAL_NA = ("test_ece_floor", *UNCERTAINTY, *SELECTIVE)  # n/a unless every run of the row has it (older
    # evaluations lack it)
TRUE_RISK = "true risk"  # model label of the Bayes-optimal reference row


class CompareError(PipelineError, ValueError):
    """No evaluated runs, or a run that cannot be read."""


def setting_defaults() -> dict[str, str]:
    """``model.<field>`` and ``train.<field>`` defaults of MortalityConfig and TrainConfig, as text: a
    setting a run does not record (it predates the setting) had this value: the default it had then for a
    training setting whose default changed (``train_config.FORMER_DEFAULTS``: e.g. no calibration half)."""
    from dataclasses import MISSING, fields
    from enum import Enum

    from pipeline.tasks.mortality.train_config import FORMER_DEFAULTS, TrainConfig

    out = model_defaults()
    for f in fields(TrainConfig):
        if f.default is not MISSING:
            out[f"train.{f.name}"] = str(f.default.value if isinstance(f.default, Enum) else f.default)
    out.update({f"train.{k}": str(v) for k, v in FORMER_DEFAULTS.items()})
    return out


def _reports(run_id: str, tmp: Path) -> dict[str, dict]:
    """The run's evaluation reports by split (``runs.load.evaluation``), the splits it was evaluated on."""
    return {split: rep for split in SPLITS if (rep := evaluation(run_id, split, tmp)) is not None}


def fetch_runs(experiment: str | None = None, run_ids: list[str] | None = None,
               default_experiment: str = store.DEFAULT_EXPERIMENT) -> list[RunRecord]:
    """The runs named by ``run_ids``, else the finished runs of ``experiment`` (``runs.load.find_runs``)."""
    return find_runs(experiment, run_ids, default_experiment, error=CompareError)


def collect(experiment: str | None = None, run_ids: list[str] | None = None, runs: list | None = None) -> list[dict]:
    """One row per evaluated mortality run: model, split_mode, seed and ``<split>_<metric>`` values (vision
    runs are left to ``compare_vision``). ``runs``: runs already listed (``fetch_runs``)."""
    runs = fetch_runs(experiment, run_ids) if runs is None else runs
    rows, defaults = [], setting_defaults()
    with tempfile.TemporaryDirectory(prefix="compare-") as tmp:
        for run in runs_of(runs, MORTALITY):
            reports = _reports(run.run_id, Path(tmp))
            if not reports:
                continue
            rows.append(_row(run, reports, defaults, Path(tmp)))
    if not rows:
        raise CompareError("no evaluated runs (evaluate the runs on val and test first)")
    return rows

# run params that do not define a variant: seeds make the spread, the rest are logistics
_NOT_SETTINGS = {"train.seed", "train.progress", "train.threads", "train.log_every", "train.eval_every",
                 "train.eval_batch_size", "model.token_vocab", "n_train", "n_val", "world_size",
                 "laplace.batch_size", "laplace.max_bags", "laplace.max_tokens", "baseline.seed", "baseline.threads"}
SETTING_PREFIXES = ("model.", "train.", "laplace.", "baseline.")  # run params that set a variant (baseline.:
    # the classical ones)


def settings_of(params: dict, reports: dict[str, dict]) -> dict[str, str]:
    """What defines a run's variant beyond its model label: the model and training params (seed and
    logistics excluded) and the samples of each evaluation (the features are its section: ``feature_sets``)."""
    out = {k: str(v) for k, v in params.items()
           if (k.startswith(SETTING_PREFIXES) or k == "distinct_per_step") and k not in _NOT_SETTINGS}
    out.update({f"eval.{split}.samples": str(rep.get("samples")) for split, rep in reports.items()})
    return out


def _row(run: RunRecord, reports: dict[str, dict], defaults: dict[str, str], tmp: Path) -> dict:
    section, trained, left_out = feature_sets.of_run(run, reports, tmp)
    reports = {split: rep for split, rep in reports.items() if split not in left_out}
    first = next(iter(reports.values()))
    params = run.params
    model_config = {k.removeprefix("model."): v for k, v in params.items() if k.startswith("model.")}
    label = first.get("model_label") or variant_label(first.get("model_kind"),
                                                       model_config or {"prior": first.get("prior")}, defaults)
    row = {"run_id": run.run_id, "model": label,
           "split_mode": first.get("split_mode") or run.tags.get("split_mode", "unknown"),
           "features": section.key, "features_label": section.label, "identified_by": section.how.value,
           "seed": int(params.get("train.seed", params.get("baseline.seed", -1))),
           "start_time": run.start_time,
           "settings": settings_of(params, reports)}
    if trained.key != section.key:  # evaluated on other features than it trained on: a row of its own, said so
        row["model"] = f"{label} [trained on {trained.key}]"
    for split, rep in reports.items():
        ref = rep.get("true_risk") or {}
        for m in (*TABLE_METRICS, "ece_floor"):
            row[f"{split}_{m}"] = rep.get(m)
            row[f"{split}_true_{m}"] = ref.get(m)
        for m in TABLE_METRICS:
            row[f"{split}_{m}_gap"] = rep.get(f"{m}_gap")
        measures = (rep.get("uncertainty_vs_truth") or {}).get("measures") or {}
        own = measures.get(rep.get("refer_measure") or "mi") or {}
        row[f"{split}_referral_gain"], row[f"{split}_spearman"] = own.get("referral_gain"), own.get("spearman")
        row[f"{split}_referral_gain_entropy"] = (measures.get("entropy") or {}).get("referral_gain")
        row[f"{split}_ece_calibrated"] = (rep.get("calibrated") or {}).get("ece")
        sel = rep.get("selective") or {}
        brier, zero_one = sel.get("brier") or {}, sel.get("zero_one") or {}
        for m in ("augrc", "aurc", "risk_at_0.9", "coverage_at_risk"):
            row[f"{split}_{m}"] = brier.get(m)
        row[f"{split}_augrc_zero_one"] = zero_one.get("augrc")
    return row


def summary_columns() -> list[str]:
    """Metric columns of the summary: ``<split>_<metric>``, ``test_nll_gap``, ``test_ece_floor`` and the
    uncertainty columns (``UNCERTAINTY``)."""
    return [f"{s}_{m}" for s in SPLITS for m in TABLE_METRICS] + [GAP, "test_ece_floor", *UNCERTAINTY, *SELECTIVE]


def label_variants(rows: list[dict], defaults: dict[str, str] | None = None) -> list[dict]:
    """Rows whose settings differ within one (split_mode, model) become separate variants, labelled
    by the differing settings (``rank1-gaussian [model.lstm_hidden=256]``); a setting a run does not
    record counts as its default (``setting_defaults``: older runs predate it). Within a variant, a
    seed evaluated by several runs counts once (the latest run), never twice."""
    defaults = setting_defaults() if defaults is None else defaults
    by_model: dict[tuple[str, str, str], list[dict]] = {}
    for r in rows:
        by_model.setdefault((r.get("features", "unknown"), r["split_mode"], r["model"]), []).append(r)
    out = []
    for (_, mode, model), g in by_model.items():
        keys = sorted({k for r in g for k in r.get("settings", {}) if k != "features"})  # a group has one feature set

        def value(r: dict, k: str) -> str:
            return canon(r.get("settings", {}).get(k, defaults.get(k, "None")))

        differ = [k for k in keys if len({value(r, k) for r in g}) > 1]
        latest: dict[tuple, dict] = {}
        for n, r in enumerate(sorted(g, key=lambda r: r.get("start_time", 0))):
            tag = tuple((k, value(r, k)) for k in differ)
            seed = r["seed"] if r["seed"] >= 0 else f"unknown-{n}"  # runs without a recorded seed never merge
            if (tag, seed) in latest:
                log.warning("%s (%s): seed %s evaluated by more than one run; the latest (%s) is used",
                            model, mode, seed, r["run_id"])
            latest[(tag, seed)] = r
        for (tag, _), r in latest.items():
            label = f"{model} [{', '.join(f'{k}={v}' for k, v in tag)}]" if tag else model
            out.append({**r, "model": label})
    return out


def summarize(rows: list[dict]) -> list[dict]:
    """Mean and sd over seeds per (feature set, split_mode, model variant), plus a true-risk row per
    feature set and split mode."""
    order = {v: i for i, v in enumerate(VARIANTS)}
    groups: dict[tuple[str, str, str], list[dict]] = {}
    for r in label_variants(rows):
        groups.setdefault((r["split_mode"], r.get("features", "unknown"), r["model"]), []).append(r)
    out = []
    for mode, feats in sorted({k[:2] for k in groups}):
        models = sorted((m for md, fs, m in groups if (md, fs) == (mode, feats)),
                        key=lambda m: (order.get(m.split(" [")[0], len(order)), m))
        for model in models:
            g = groups[(mode, feats, model)]
            rec = {"split_mode": mode, "features": feats, "model": model, "seeds": len(g), **_section_of(g)}
            for col in summary_columns():
                rec[f"{col}_mean"], rec[f"{col}_sd"], n = mean_sd([r.get(col) for r in g])
                if col in PARTIAL_NA and 0 < n < len(g):  # runs evaluated before it existed: not the same runs
                    rec[f"{col}_mean"] = rec[f"{col}_sd"] = math.nan
            out.append(rec)
        runs = [r for (md, fs, _), g in groups.items() if (md, fs) == (mode, feats) for r in g]
        truth = {"split_mode": mode, "features": feats, "model": TRUE_RISK, "seeds": 0, f"{GAP}_mean": 0.0,
                 f"{GAP}_sd": math.nan, **_section_of(runs)}  # the reference's gap to itself
        own = [c for c in summary_columns() if c != GAP]
        for col in own:  # val_nll -> val_true_nll, ...
            truth[f"{col}_mean"], truth[f"{col}_sd"], _ = mean_sd([r.get(col.replace("_", "_true_", 1))
                                                                    for r in runs])
        if any(math.isfinite(truth[f"{c}_mean"]) for c in own):
            out.append(truth)
    return out


def _section_of(rows: list[dict]) -> dict:
    """The feature set's words of a group of rows (one feature set): its label and how its runs were told (the
    least direct way any of them was: ``feature_sets.Identified``)."""
    first = rows[0] if rows else {}
    out = {k: first[k] for k in ("features_label",) if k in first}
    hows = [r["identified_by"] for r in rows if "identified_by" in r]
    if hows:
        out["identified_by"] = max(hows, key=feature_sets.HOW_ORDER.index)
    return out


def to_markdown(summary: list[dict]) -> str:
    """Markdown table (mean ± sd over seeds; a single seed shows the value alone): a section per feature set,
    headed by its release, source and identity where the runs record them."""
    cols = summary_columns()
    head = ["split", "model", "seeds"] + [c.replace("_", " ", 1).replace("_", "-") for c in cols]
    sections: dict[str, list[dict]] = {}
    for r in summary:
        sections.setdefault(r.get("features", "unknown"), []).append(r)
    parts = []
    for rows in sections.values():
        named = rows[0].get("features_label")
        table = [[r["split_mode"], r["model"], str(r["seeds"] or "")]
                 + [cell(r[f"{c}_mean"], r[f"{c}_sd"]) for c in cols] for r in rows]
        parts.append((f"## Feature set: {named}\n\n" if named else "") + markdown_table(head, table))
    several = len(sections) > 1  # runs on other admissions: each its own section
    note = ("\nsplit: `random` = 80/10/10 by patient; `era` = the older stays in train/val, the newer in test "
            "(distribution shift; MIMIC-III: carevue-era train/val, metavision-era test; MIMIC-IV: by "
            "anchor_year_group, the latest in test). NLL in nats; ECE with 15 equal-width bins; test nll-gap = model "
            "NLL - true-risk NLL on the same admissions; test ece-floor = the mean test ECE of a perfectly calibrated "
            "predictor making the same predictions (labels drawn from them): a test ECE near its floor is "
            "within chance at this test size. test referral-gain / spearman: of the run's refer measure against "
            "the error KL(true || predicted) (1: refers the worst-predicted first; 0: no better than random); "
            "referral-gain-entropy: the predictive entropy's. test ece-calibrated: the ECE of the run's calibrated "
            "risk. test augrc, aurc, risk-at-0.9, coverage-at-risk: selective prediction by the refer flag's "
            "ordering with the Brier loss (AUGRC: the average risk of an undetected failure, Traub et al. 2024; "
            "coverage at the evaluation's target risk); augrc-zero-one: with the 0/1 loss of the decision at the "
            "run's threshold."
            + (" Feature sets: runs are grouped by the content of the features they were evaluated on (a digest of "
               "the files and the source), never by a folder's name; each set has its own rows and true-risk "
               "reference (runs on other admissions are not pooled)." if several else "") + "\n")
    said = "".join(f"\n{line}\n" for line in feature_sets.notes(summary))
    return "\n\n".join(parts) + "\n" + note + said


def to_csv(summary: list[dict]) -> str:
    """CSV with separate mean and sd columns (empty cells for n/a)."""
    import csv
    import io as _io

    cols = ["split_mode", "features", "features_label", "model", "seeds"]
    cols += [f"{c}_{s}" for c in summary_columns() for s in ("mean", "sd")]
    buf = _io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(cols)
    for r in summary:
        r = {"features": "unknown", "features_label": "", **r}
        w.writerow([("" if isinstance(r[c], float) and not math.isfinite(r[c]) else
                     (f"{r[c]:.6g}" if isinstance(r[c], float) else r[c])) for c in cols])
    return buf.getvalue()


def write_tables(summary: list[dict], out_dir: Path | str) -> tuple[Path, Path]:
    """``compare.md`` and ``compare.csv`` in ``out_dir`` (atomic writes)."""
    out = Path(out_dir)
    return (fileio.write_text(out / "compare.md", to_markdown(summary)),
            fileio.write_text(out / "compare.csv", to_csv(summary)))


def compare(experiment: str | None = None, run_ids: list[str] | None = None,
            out_dir: Path | str | None = None) -> tuple[list[dict], list[Path]]:
    """Collect, summarize and (with ``out_dir``) write the tables; returns (summary, files)."""
    summary = summarize(collect(experiment, run_ids))
    files = list(write_tables(summary, out_dir)) if out_dir is not None else []
    return summary, files
