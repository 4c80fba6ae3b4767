"""A run read back, the one way for every kind: ``load_run`` (the model and what the run recorded),
``find_runs`` (which runs an experiment or a list of ids names) and ``evaluation`` (an evaluation's report).

``load_run`` takes a run id or ``runs:/<id>/...`` URI (the tracking store ``store.tracking_uri()``),
another MLflow model URI (``models:/name/1``: downloaded), a local MLflow model directory or a model file
(an untracked run's ``best.pt``), and returns a typed ``Run``: the model in evaluation mode on ``device``
(``formats.load_model``, whatever its task or format), its ``ModelInfo``, and, where the run holds them,
the training vocabulary and features manifest, the features directory, the tags and params and
``model_info.json``; ``Run.scorer`` asks the run's task how it scores (``Task.scorer``), ``Run.words`` what it
predicts, in words. ``kind`` (a task's key)
refuses a run of another task with one line before anything is downloaded.
mlflow is imported inside the functions.
"""

from __future__ import annotations

import logging
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.core import fileio
from pipeline.core.errors import naming
from pipeline.engine.checkpoints import BEST
from pipeline.runs import store
from pipeline.runs.formats import FILES, load_model, model_file
from pipeline.runs.info import ModelInfo
from pipeline.runs.store import RunError
from pipeline.tasks.base import DEFAULT_TASK, load_task

log = logging.getLogger(__name__)

RUN_URI = re.compile(r"^(?:runs:/)?([0-9a-f]{32})(?:/.*)?$")  # a run id, or runs:/<id>/anything


@dataclass
class Run:
    """A trained model with what its run recorded."""

    model: object  # torch module in eval mode, or a classical baseline (formats.ModelFormat)
    info: ModelInfo  # kind, configs, refer threshold, score_samples, caps ... (formats.load_model)
    run_id: str | None  # MLflow run id (None for a local model directory or a model file)
    vocab: dict | None = None  # the training vocab.json (a mortality run's: tokens, context, bins, text_items)
    manifest: dict | None = None  # the training features' manifest.json (redacted copy), when logged
    features_dir: Path | None = None  # features directory the run was trained on (tag FEATURES_DIR_TAG)
    tags: dict = field(default_factory=dict)  # the run's MLflow tags
    params: dict = field(default_factory=dict)  # the run's MLflow params
    model_info: dict = field(default_factory=dict)  # the run's model_info.json (validation metrics, reliability)
    uri: str | None = None  # what named it (a run id, a model URI or file: load_run's argument)
    shift_reference: object | None = None  # bayes.shift.ShiftReference the run keeps (store.SHIFT_REFERENCE; None:
        # a run trained before the shift check, or without a calibration half)

    @property
    def kind(self) -> str:
        """The key of the run's task (``pipeline.tasks.base.TASKS``)."""
        return self.info.run_kind

    @property
    def task(self):
        """The run's task (``pipeline.tasks.base.Task``), from the registry by its key."""
        return load_task(self.kind)

    @property
    def words(self):
        """What the run predicts, in words (``data.task.TaskWords``): recorded with its model at training
        (``task_words``), else its features' manifest's (logged with the run), else in-hospital mortality's."""
        from pipeline.data.task import of_manifest, of_record

        recorded = of_record(self.info.task_words) or of_record(self.model_info.get("task_words"))
        return recorded or of_manifest(self.manifest or {})

    def scorer(self, **settings):
        """How the run scores (``Task.scorer``: the one object ``score``, ``evaluate``, the pyfunc and ``serve``
        call), with its task's scoring ``settings``."""
        return self.task.scorer(self, **settings)

    def resolve_features(self, data: Path | str | None) -> Path:
        """The features directory to use (``resolve_features``): ``data`` or the run's, its vocabulary the run's."""
        return resolve_features(self, data)

    @property
    def train_config(self) -> dict:
        """The training settings the model recorded (a Laplace run: its MAP run's, as it records them)."""
        return self.info.train_config or {}

    @property
    def label(self) -> str:
        """compare's row name of a vision or Laplace run."""
        return self.tags.get(store.LABEL_TAG) or self.model_info.get("model_label") or model_label(self.info)


def model_label(info: ModelInfo) -> str:
    """compare's row name: the label the model records (a Laplace model's), else its task's for its kind and
    settings (``Task.label``: the method, ``rank1-<prior>`` for rank-1)."""
    if info.model_label:
        return str(info.model_label)
    return load_task(info.run_kind).label(info.model_kind, info.model_config or {})


def parse_model_uri(uri: str) -> tuple[str | None, Path | None]:
    """(run id, None) for ``runs:/<id>/model`` or a bare id; (None, dir) for a local model directory or a model
    file; (None, None) for any other MLflow URI (``models:/name/1``...), which ``load_run`` downloads."""
    text = str(uri).strip()
    m = re.match(r"^runs:/([0-9a-f]{32})(?:/.*)?$", text)
    if m:
        return m.group(1), None
    if store.RUN_ID.match(text):
        return text, None
    if text.startswith("runs:/"):
        given = text.removeprefix("runs:/").split("/")[0]
        raise RunError(f"{text}: {given!r} is not a run id (32 hexadecimal digits, as `train` prints it after "
                       "run_id:); a runs:/ URI is runs:/<run id>/model")
    path = Path(text)
    if path.is_file() or model_file(path / "artifacts") is not None:
        return None, path
    if re.match(r"^[a-z][a-z0-9+.-]*:/", text) and not text.startswith("runs:/"):  # models:/, s3://, file:/...
        return None, None
    raise RunError(f"{text!r} is neither a run id, a runs:/<id>/model URI, an MLflow model URI, a local MLflow "
                   "model directory nor a model file")


def kind_of_run(uri: str) -> str:
    """The task key of the run a model URI names (a run id or ``runs:/<id>/...``; a model file: its model's);
    the default task for other URIs and local model directories (only its models are logged as MLflow models)."""
    if Path(str(uri).strip()).is_file():
        return load_model(uri)[1].run_kind
    m = RUN_URI.match(str(uri).strip())
    if not m:
        return DEFAULT_TASK
    try:
        run = store.client().get_run(m.group(1))
    except Exception as exc:  # mlflow raises MlflowException for unknown ids
        raise store.run_not_found(m.group(1), exc) from None
    return store.run_kind(run.data.tags)


def load_run(uri: str | Path, workdir: Path | str | None = None, device=None, kind: str | None = None) -> Run:
    """The model and records of a run id / ``runs:/<id>/...`` URI / MLflow model URI / local model directory /
    model file (see the module docstring); a torch model on ``device`` (None: the CPU)."""
    run = _load_run(uri, workdir, device, kind)
    run.uri = str(uri)
    return run


def read_shift_reference(folder: Path):
    """The ``bayes.shift.ShiftReference`` a run keeps in ``folder`` (its model files' folder), or None."""
    path = Path(folder) / store.SHIFT_REFERENCE
    if not path.exists():
        return None
    from pipeline.bayes.shift import ShiftReference

    try:
        return ShiftReference.load(path)
    except (ValueError, OSError, KeyError) as exc:
        raise RunError(f"{path}: not a readable shift reference ({exc})") from None


def _load_run(uri: str | Path, workdir: Path | str | None, device, kind: str | None) -> Run:
    import mlflow

    run_id, local = parse_model_uri(str(uri))
    if run_id is None and local is None:  # another MLflow model URI (registry, remote store): download it
        store.client()  # the store must exist: a reading command makes none
        try:
            local = Path(mlflow.artifacts.download_artifacts(artifact_uri=str(uri), dst_path=str(
                workdir or tempfile.mkdtemp(prefix="model-")), tracking_uri=store.tracking_uri()))
        except Exception as exc:
            raise RunError(f"cannot download the model {uri}: {exc}") from None
        if model_file(local / "artifacts") is None:
            raise RunError(f"{uri} is not a model logged by training (no artifacts/{' or '.join(FILES.values())})")
    if local is not None and local.is_file():  # a model file: an untracked run's
        model, info = load_model(local, device)
        _check_kind(info, kind, str(local))
        return Run(model, info, None, shift_reference=read_shift_reference(local.parent))
    if local is not None:
        model, info = load_model(model_file(local / "artifacts"), device)
        _check_kind(info, kind, str(local))
        extraction = local / "artifacts" / store.EXTRACTION  # settings for a census extraction (pyfunc.log_model)
        manifest = fileio.read_json(extraction) if extraction.exists() else None
        return Run(model, info, None, fileio.read_json(local / "artifacts" / store.VOCAB), manifest,
                   model_info=_read_optional(local / "artifacts" / store.MODEL_INFO),
                   shift_reference=read_shift_reference(local / "artifacts"))
    try:
        c = store.client()
        run = c.get_run(run_id)
    except Exception as exc:  # mlflow raises MlflowException for unknown ids; StoreMissing: no store
        raise store.run_not_found(run_id, exc) from None
    tags, params = dict(run.data.tags), dict(run.data.params)
    if kind is not None:
        store.require_kind(run_id, tags, kind)
    dst = Path(workdir or tempfile.mkdtemp(prefix="run-"))
    if not load_task(store.run_kind(tags)).serves:  # no pyfunc (an image model): its checkpoint and model_info.json
        model, info = load_model(_download_checkpoint(c, run_id, dst), device)
        _check_kind(info, kind, f"run {run_id}")
        return Run(model, info, run_id, tags=tags, params=params, model_info=_download_optional(
            c, run_id, store.MODEL_INFO, dst))
    try:  # a mortality model: the logged pyfunc's files (model file, vocabulary, model_info.json)
        with store.bound():  # MLflow finds the logged model with a client of its own URI
            model_dir = Path(mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=store.MODEL_FILES,
                                                                 dst_path=str(dst), tracking_uri=store.tracking_uri()))
    except Exception as exc:
        raise RunError(f"run {run_id} has no logged model ({store.MODEL_FILES}): {exc}") from None
    path = model_file(model_dir)
    if path is None:
        raise RunError(f"run {run_id} has no model file in {store.MODEL_FILES} ({' or '.join(FILES.values())})")
    model, info = load_model(path, device)
    _check_kind(info, kind, f"run {run_id}")
    manifest = _download_optional(c, run_id, f"{store.FEATURES_ARTIFACTS}/{store.MANIFEST}", dst) or None
    fdir = Path(tags[store.FEATURES_DIR_TAG]) if tags.get(store.FEATURES_DIR_TAG) else None
    return Run(model, info, run_id, fileio.read_json(model_dir / store.VOCAB), manifest, fdir, tags, params,
               _read_optional(model_dir / store.MODEL_INFO), shift_reference=read_shift_reference(model_dir))


def _check_kind(info: ModelInfo, kind: str | None, what: str) -> None:
    if kind is not None and info.run_kind != kind:
        raise RunError(f"{what} holds a {info.run_kind} model ({info.model_kind}), not a {kind} model")


def _download_checkpoint(c, run_id: str, dst: Path) -> Path:
    """A run's ``checkpoint/best.pt`` (or an older vision run's ``checkpoint/model.pt``), downloaded."""
    try:
        folder = Path(c.download_artifacts(run_id, store.CHECKPOINT_ARTIFACTS, str(dst)))
    except Exception as exc:
        raise RunError(f"run {run_id} has no {store.CHECKPOINT_ARTIFACTS}/ artifacts: {exc}") from None
    file = next((folder / n for n in (BEST, store.OLD_MODEL_FILE) if (folder / n).exists()), None)
    if file is None:
        raise RunError(f"run {run_id}: no {BEST} (or an older run's {store.OLD_MODEL_FILE}) under "
                       f"{store.CHECKPOINT_ARTIFACTS}/")
    return file


def _read_optional(path: Path) -> dict:
    return fileio.read_json(path) if path.exists() else {}


def _download_optional(c, run_id: str, artifact: str, dst: Path) -> dict:
    """A JSON artifact of a run ({} when the run has none: older runs, features without a manifest)."""
    try:
        return fileio.read_json(c.download_artifacts(run_id, artifact, str(dst)))
    except Exception:  # noqa: BLE001 - MlflowException and store errors alike
        log.info("run %s has no %s artifact", run_id, artifact)
        return {}


def resolve_features(run: Run, data: Path | str | None) -> Path:
    """The features directory to use: ``data`` or the run's; its vocab.json must be the run's."""
    if data is None and run.features_dir is None:
        raise naming(RunError(f"run {run.run_id} does not record its features directory; give the features directory "
                              "(`data`)"), "data")
    fdir = Path(data) if data is not None else run.features_dir
    vocab_file = fileio.features_folder(fdir, RunError) / store.VOCAB
    if not vocab_file.exists():
        raise RunError(f"{vocab_file}: not found; is {fdir} a features directory written by the extraction?")
    if fileio.read_json(vocab_file) != run.vocab:
        raise RunError(f"{vocab_file}: differs from the vocabulary run {run.run_id} was trained with; "
                       "these features belong to another extraction")
    return fdir


# ---------------------------------------------------------------------------- runs and their evaluations


@dataclass
class RunRecord:
    """A run as the tracking store lists it (no artifacts downloaded)."""

    run_id: str  # MLflow run id
    tags: dict  # its tags
    params: dict  # its params
    start_time: int  # ms since the epoch (0 when unknown)
    experiment_id: str  # its experiment

    @property
    def kind(self) -> str:
        """The key of the run's task (``store.run_kind``)."""
        return store.run_kind(self.tags)


def runs_of(runs: list[RunRecord], task: str) -> list[RunRecord]:
    """The runs of the task ``task`` (its key) among ``runs``, in their order."""
    return [r for r in runs if r.kind == task]


def find_runs(experiment: str | None = None, run_ids: list[str] | None = None,
              default_experiment: str = store.DEFAULT_EXPERIMENT, error: type[Exception] = RunError
              ) -> list[RunRecord]:
    """The runs named by ``run_ids``, else the finished runs of ``experiment`` (``default_experiment`` when
    None); an unknown id or experiment raises ``error`` naming the store."""
    c = store.client()
    if run_ids:
        runs = []
        for r in run_ids:
            try:
                runs.append(c.get_run(r))
            except Exception as exc:  # noqa: BLE001 - MlflowException and store errors alike
                raise error(f"run {r} not found in {store.tracking_uri()} ({type(exc).__name__})") from None
    else:
        name = experiment or default_experiment
        exp = c.get_experiment_by_name(name)
        if exp is None:
            raise error(f"experiment {name!r} not found in {store.tracking_uri()}")
        runs = c.search_runs([exp.experiment_id], "attributes.status = 'FINISHED'", max_results=10_000)
    return [RunRecord(r.info.run_id, dict(r.data.tags), dict(r.data.params), int(r.info.start_time or 0),
                      r.info.experiment_id) for r in runs]


def evaluation(run_id: str, split: str, workdir: Path | str | None = None) -> dict | None:
    """The report of the run's evaluation of ``split`` (``eval/<split>/metrics.json``), or None when the run was
    not evaluated on it."""
    dst = Path(workdir or tempfile.mkdtemp(prefix="eval-"))
    try:
        path = store.client().download_artifacts(run_id, f"{store.eval_artifacts(split)}/{store.METRICS}",
                                                 str(dst / run_id))
    except Exception:  # noqa: BLE001 - not evaluated on this split
        return None
    return fileio.read_json(path)
