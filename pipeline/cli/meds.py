"""``cli.py extract --source MEDS_DIR`` (docs/meds.md): a MEDS dataset as the source of ``extract``. Its settings are
``ExtractConfig``'s options, read as a ``MedsConfig`` (``meds_config``: the fields both have; an option that means
nothing for MEDS is refused naming it), its task ``--labels`` or ``--task`` (neither: the shipped ACES config that
fits ``metadata/dataset.json``, said on the console), and what it prints (``report``)."""

from __future__ import annotations

from pathlib import Path

import typer

from pipeline.core.configs import invalid
from pipeline.data.meds.config import MedsConfig, MedsSplit
from pipeline.data.mimic.extraction.config import ExtractConfig, SplitMode

# ExtractConfig's fields that a MEDS extraction reads, under the same names (MedsConfig's)
SHARED = ("lookback_days", "hourly_hours", "n_bins", "min_patients", "max_text_values", "text_max_len", "split",
          "split_seed", "train_fraction", "val_fraction", "memory_limit", "threads", "values")


def meds_config(values: dict) -> MedsConfig:
    """The ``MedsConfig`` of ``extract``'s settings (``values``: the fields of ``ExtractConfig`` the user set). An
    option MEDS has no use for (``--prediction-hours``: the labels give the prediction times) is refused, and so is
    ``--split era``; ``--split random`` splits by subject hash instead of ``metadata/subject_splits.parquet``."""
    for name in values:
        if name not in SHARED:
            raise invalid(ExtractConfig, f"{name} does not apply to a MEDS source (the task's labels give the "
                                         "prediction times; docs/meds.md)", name)
    kw = dict(values)
    if "split" in kw:
        if SplitMode(getattr(kw["split"], "value", kw["split"])) is not SplitMode.random:
            raise invalid(ExtractConfig, "split era does not apply to a MEDS source: its splits are "
                                         "metadata/subject_splits.parquet's, or split random by subject hash", "split")
        kw["split"] = MedsSplit.random
    return MedsConfig(**kw)


def report(result, shown_task: bool = True) -> None:
    """What ``extract`` prints for a MEDS source: where the features went, the task (the shipped config named, when
    it was chosen for the dataset), each split's labels, the cohort and vocabulary as JSON."""
    import json

    m = result.manifest
    typer.echo(f"features written to {result.out_dir} (link file: {result.link_file}); release {m['release']}")
    task = m.get("task") or {}
    if shown_task and task.get("shipped"):
        typer.echo(f"task: the shipped ACES config {Path(task['task']).name}, chosen for this dataset by "
                   "metadata/dataset.json (give --task or --labels for another task)")
    elif "meds_dev" in task:
        d = task["meds_dev"]
        whose = f"the predicates {d['predicates']}" if d["predicates_given"] else f"the {d['dataset']} predicates"
        typer.echo(f"task: MEDS-DEV {d['version']} task {d['task']} ({task['task']}), with {whose}")
    elif "task" in task:
        typer.echo(f"task: the ACES config {task['task']}")
    elif "labels" in task:
        typer.echo(f"task: the label files in {task['labels']} ({task['files']} file(s))")
    if task.get("outcome"):
        typer.echo(f"  outcome: {task['outcome']} ({task['outcomes']}), predicted {task['prediction_time']} "
                   "(--outcome names it otherwise)")
    for name, s in sorted(m["splits"].items(), key=lambda kv: ("train", "val", "test").index(kv[0])):
        typer.echo(f"  {name:6s} labels={s['admissions']:6d} subjects={s['patients']:6d} positives={s['positives']:5d} "
                   f"label_rate={s['label_rate']}")
    quarantined = m["tables"]["labels"]["quarantined"] + m["tables"]["data"]["quarantined"]
    if quarantined:
        typer.echo(f"  quarantined: {m['tables']['labels']['quarantined']} label rows, "
                   f"{m['tables']['data']['quarantined']} data rows (quarantine/)")
    typer.echo(json.dumps({"cohort": m["cohort"], "vocab": m["vocab"]}))
