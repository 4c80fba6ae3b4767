"""MEDS-DEV by name (issue 44; docs/meds.md): ``extract --task meds-dev:<task>`` resolves the task config and the
dataset's predicates from the installed ``meds-dev`` package (``MEDS_DEV.TASKS``, ``MEDS_DEV.DATASETS``, as its own
``meds-dev-task`` does), for the dataset that ``metadata/dataset.json`` names, or a predicates file given; es-aces
then runs the config with those predicates (``TaskExtractorConfig.load(config, predicates)``). A result is packaged
as ``meds-dev-pack-result`` writes it (``pack_result``: MEDS-DEV's ``Result``, its names checked as that command
checks them), so that ``meds-dev-validate-result`` accepts it.

meds-dev 0.0.14 pins ``meds`` 0.3.3, es-aces 0.6.1 and meds-evaluation 0.0.3 (which pins pyarrow 17), against this
project's meds 0.4.1, es-aces 0.7.3 and pyarrow 25: it is installed without its dependencies (``make setup``:
``pip install --no-deps``, pyproject's ``[tool.mimic-rank1] no-deps``); only its task and dataset files and its
``Result`` are used, which need omegaconf (es-aces brings it) and ``validators``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from pipeline.core import fileio
from pipeline.core.errors import naming
from pipeline.data.meds.layout import MedsError
from pipeline.data.task import TaskWords, from_aces, plural, read_yaml, words_of_name

PREFIX = "meds-dev:"  # extract --task meds-dev:<task name>
INSTALL = "pip install --no-deps meds-dev==0.0.14 validators==0.36.0 (make setup does)"
MAX_RESULT_KB = 1.5  # meds-dev-validate-result's limit on a result file (MEDS_DEV.results.__main__.MAX_SIZE_KB)
# MEDS-DEV's tasks in their own words (their descriptions): (outcome, outcomes); a task not listed: its name's
CASE = "case of {0}", "cases of {0}"  # an abnormal lab value's outcome
WORDS = {
    "mortality/in_icu/first_24h": ("death in the ICU", "deaths in the ICU"),
    "readmission/general_hospital/30d": ("hospital readmission within 30 days", "hospital readmissions within 30 days"),
    "abnormal_lab/blood_chemistry/elevated_creatinine/first_24h": tuple(c.format("elevated creatinine") for c in CASE),
    "abnormal_lab/blood_chemistry/hyponatremia/first_24h": tuple(c.format("hyponatremia") for c in CASE),
    "abnormal_lab/blood_chemistry/metabolic_acidosis/first_24h": tuple(c.format("metabolic acidosis") for c in CASE),
    "abnormal_lab/cbc/anemia/first_24h": tuple(c.format("anemia") for c in CASE),
    "abnormal_lab/cbc/thrombocytopenia/first_24h": tuple(c.format("thrombocytopenia") for c in CASE),
    "abnormal_lab/cbc/leukocytosis/first_24h": tuple(c.format("leukocytosis") for c in CASE),
    "abnormal_lab/vital/hypotension/first_24h": tuple(c.format("hypotension") for c in CASE),
}


@dataclass(frozen=True)
class MedsDevTask:
    name: str  # MEDS-DEV's task name ("mortality/in_icu/first_24h")
    dataset: str  # the dataset's name (dataset.json's dataset_name)
    config: Path  # the task's ACES config in the installed package
    predicates: Path  # the dataset's predicates (the package's, or the file given)
    version: str  # meds-dev's version
    given: bool  # the predicates were given (--predicates), not the package's

    def record(self) -> dict:
        """What the features' manifest records of the task (beside its words)."""
        return {"meds_dev": {"task": self.name, "dataset": self.dataset, "version": self.version,
                             "predicates": str(self.predicates), "predicates_given": self.given,
                             "predicates_sha256": fileio.sha256_file(self.predicates)}}

    def words(self, source: str, outcome: tuple[str, str] | None = None) -> TaskWords:
        """The task's words: ``outcome`` (given), else ``WORDS``, else its name's; the prediction time from its
        config's windows."""
        whose = "the predicates given" if self.given else f"the {self.dataset} predicates"
        definition = f"MEDS-DEV {self.version} task {self.name} with {whose}"
        own = WORDS.get(self.name)
        if own is None:  # a task this module does not know: its name's second-last part ("anemia")
            parts = self.name.split("/")
            stem = words_of_name(parts[-2] if len(parts) > 1 else parts[0])
            own = (stem, plural(stem))
        return from_aces(self.config, read_yaml(self.config), source, definition, name=self.name,
                         outcome=outcome or own)


def is_medsdev(task) -> bool:
    return task is not None and str(task).startswith(PREFIX)


def _package():
    """(version, TASKS, DATASETS, MODELS) of the installed meds-dev."""
    try:
        import MEDS_DEV
        from MEDS_DEV import DATASETS, MODELS, TASKS
    except ImportError as exc:
        raise MedsError(f"a MEDS-DEV task needs the meds-dev package ({INSTALL}): {exc}") from None
    return MEDS_DEV.__version__, TASKS, DATASETS, MODELS


def resolve(task: str, dataset: str | None, predicates: str | Path | None = None, where: str = "") -> MedsDevTask:
    """``task`` (``meds-dev:<name>``) for the dataset named ``dataset`` (``where``: the file that names it), with
    the package's predicates for it or the file ``predicates``: one line naming what is wrong (an unknown task or
    dataset, with the known ones; a dataset without predicates for the task; a predicate the task needs that they
    do not define)."""
    name = str(task)[len(PREFIX):].strip().strip("/")
    version, tasks, datasets, _ = _package()
    if name not in tasks:
        raise MedsError(f"task {PREFIX}{name}: not a MEDS-DEV {version} task (known: {', '.join(sorted(tasks))})")
    config = Path(str(tasks[name]["criteria_fp"]))
    if predicates is not None:
        path, given = Path(predicates), True
        if not path.is_file():
            raise naming(MedsError(f"`predicates` {path}: no such file"), "predicates")
    else:
        given = False
        if dataset not in datasets:
            raise naming(MedsError(f"{where or 'dataset.json'} names the dataset {dataset!r}, not a MEDS-DEV {version} "
                                   f"dataset (known: {', '.join(sorted(datasets))}); give its predicates (`predicates` "
                                   "FILE)"), "predicates")
        meta = tasks[name].get("metadata")
        supported = getattr(meta, "supported_datasets", None)
        if supported is not None and dataset not in supported:
            raise naming(MedsError(f"MEDS-DEV {version} task {name} has no predicates for the dataset {dataset!r} "
                                   f"(it supports {', '.join(supported) or 'none'}); give its predicates "
                                   "(`predicates` FILE)"), "predicates")
        if datasets[dataset].get("predicates") is None:
            raise naming(MedsError(f"MEDS-DEV {version} dataset {dataset} has no predicates file; give its "
                                   "predicates (`predicates` FILE)"), "predicates")
        path = Path(str(datasets[dataset]["predicates"]))
    missing = sorted(needed(config) - defined(path))
    if missing:
        whose = f"{path}" if given else f"MEDS-DEV {version} dataset {dataset}'s predicates ({path.name})"
        raise MedsError(f"{whose}: no predicate {', '.join(missing)}, which task {name} leaves to the dataset "
                        "(no predicates for this task)")
    return MedsDevTask(name, str(dataset), config, path, version, given)


def needed(config: Path) -> set[str]:
    """The predicates a task config leaves to the dataset (``???``: MEDS-DEV's placeholder, in any of its values)."""
    doc = read_yaml(config) or {}

    def open_(v) -> bool:
        return v == "???" or (isinstance(v, dict) and any(open_(x) for x in v.values()))

    return {k for k, v in (doc.get("predicates") or {}).items() if open_(v)}


def defined(path: Path) -> set[str]:
    """The predicates (and demographics) a predicates file defines."""
    doc = read_yaml(path)
    if doc is None:
        raise MedsError(f"predicates {path}: not a readable YAML mapping")
    return {k for key in ("predicates", "patient_demographics") for k, v in (doc.get(key) or {}).items()
            if v is not None and v != "???"}


def check_names(dataset: str, task: str, model: str) -> str:
    """meds-dev's version, once ``dataset``, ``task`` and ``model`` are names MEDS-DEV knows (as its ``Result``
    checks a result of its own version); else one line listing the known ones."""
    version, tasks, datasets, models = _package()
    for what, value, known in (("dataset", dataset, datasets), ("task", task, tasks), ("model", model, models)):
        if value not in known:
            extra = (" (MEDS-DEV packages results of the models it lists: add the model to MEDS-DEV's models/ "
                     "first)") if what == "model" else ""
            raise MedsError(f"{what} {value!r}: not a MEDS-DEV {version} {what} (known: "
                            f"{', '.join(sorted(known))}){extra}")
    return version


def pack_result(evaluation: str | Path, dataset: str, task: str, model: str, out: str | Path) -> Path:
    """``out``: the MEDS-DEV result of the meds-evaluation output ``evaluation`` (a JSON file), as
    ``meds-dev-pack-result`` writes it: ``MEDS_DEV.results.Result`` (dataset, task, model, the evaluation file's
    modification time in UTC, the evaluation, meds-dev's version) as JSON, written atomically; checked as
    ``meds-dev-validate-result`` checks it (readable back, at most 1.5 KB)."""
    check_names(dataset, task, model)
    from MEDS_DEV.results import Result

    evaluation = Path(evaluation)
    try:
        result = json.loads(evaluation.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise MedsError(f"{evaluation}: not a readable meds-evaluation output ({exc})") from None
    stamp = datetime.fromtimestamp(evaluation.stat().st_mtime, tz=timezone.utc)
    try:
        packed = Result(dataset=dataset, task=task, model=model, timestamp=stamp, result=result)
    except (TypeError, ValueError) as exc:
        raise MedsError(f"{evaluation}: MEDS-DEV refuses the result ({' '.join(str(exc).split())[:300]})") from None
    fields = {"dataset": packed.dataset, "task": packed.task, "model": packed.model,
              "timestamp": packed.timestamp.isoformat(), "result": packed.result, "version": packed.version}
    text = json.dumps(fields)  # Result.to_json's text: dataclasses.asdict order, default separators
    if len(text.encode("utf-8")) / 1024 > MAX_RESULT_KB:
        raise MedsError(f"the MEDS-DEV result of {evaluation} is {len(text.encode()) / 1024:.2f} KB, over the "
                        f"{MAX_RESULT_KB} KB meds-dev-validate-result accepts")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fileio.write_text(out, text)
    Result.from_json(out)  # what meds-dev-validate-result reads
    return out


__all__ = ["PREFIX", "MedsDevTask", "check_names", "is_medsdev", "pack_result", "resolve"]
