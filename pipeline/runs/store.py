"""The tracking store and what a run holds in it: the one MLflow client, artifact names, model URIs.

The tracking URI is ``MLFLOW_TRACKING_URI`` (default ``sqlite:///<cwd>/mlflow.db``). Every
MLflow client of the library comes from ``client()``, which initialises a SQLite store once per
process under an exclusive file lock (``<db>.init.lock``): two commands started at once on a
fresh store would otherwise both run MLflow's table creation and one would die half-way. A run is named by its id,
``runs:/<id>/model``, another MLflow model URI (``models:/name/version``: downloaded), or a
local MLflow model directory; ``load_run_model`` turns any of them into a ``RunModel`` (the
model in eval mode, its info, the training vocabulary, the run's manifest, tags and params).
mlflow is imported inside the functions.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.core import fileio
from pipeline.core.errors import PipelineError
from pipeline.runs.formats import FILES, load_model, model_file
from pipeline.runs.info import RunKind

log = logging.getLogger(__name__)

DEFAULT_EXPERIMENT = "mimic-mortality"  # experiment used when none is given
RUN_ID = re.compile(r"^[0-9a-f]{32}$")

# ---------------------------------------------------------------------------- artifact layout of a run
MODEL_ARTIFACT = "model"  # the logged pyfunc (MLflow model) inside the run
MODEL_FILES = f"{MODEL_ARTIFACT}/artifacts"  # the pyfunc's files: the model file (formats.FILES), VOCAB, MODEL_INFO,
    # EXTRACTION
VOCAB = "vocab.json"  # the training vocabulary (tokens, context, bins, text items)
MANIFEST = "manifest.json"  # the training features' manifest (redacted copy)
MODEL_INFO = "model_info.json"  # kind, configs, refer threshold, validation metrics
TRAIN_CONFIG = "train_config.json"  # the training settings
EXTRACTION = "extraction.json"  # the features' extraction settings (``score --source`` re-extracts with them)
FEATURES_ARTIFACTS = "features"  # the run's copy of VOCAB and MANIFEST
CHECKPOINT_ARTIFACTS = "checkpoint"  # the run's copy of its model file (best.pt or baseline.npz)
METRICS = "metrics.json"  # an evaluation report


def eval_artifacts(split: str) -> str:
    """Artifact folder of a split's evaluation (``eval/<split>``: METRICS and the plots)."""
    return f"eval/{split}"


# tags
FEATURES_DIR_TAG = "features_dir"  # absolute path of the features directory the run was trained on
SPLIT_MODE_TAG = "split_mode"  # random | era (compare groups by it)
RELEASE_TAG = "release"  # mimic-iii | mimic-iv: the MIMIC release of the training features
# tags that hold a local path, read back to find files: their dates are not masked (a path such as
# /data/2024-01-05/features is the operator's, not a record's, and masked it would name no directory)
PATH_TAGS = frozenset({FEATURES_DIR_TAG})


class RunError(PipelineError, ValueError):
    """A run or model that cannot be found or read, or features that do not belong to it."""


# ---------------------------------------------------------------------------- kinds of run
# Which kind of model a run holds (formats.RunKind; formats loads each): mortality runs (features of
# admissions in, risk out) record no tag; image models record RUN_KIND_TAG = "vision" (their Laplace
# runs too). Each kind's loaders refuse the other's runs here, before downloading a model.


RUN_KIND_TAG = "run_kind"  # RunKind of the run (absent: mortality, every run before image models)
_KIND_WORDS = {RunKind.MORTALITY: "a mortality model of admissions' features",
               RunKind.VISION: "an image classifier"}


def run_kind(tags: dict) -> RunKind:
    """The kind a run's tags record (mortality when they record none)."""
    value = (tags or {}).get(RUN_KIND_TAG) or RunKind.MORTALITY.value
    try:
        return RunKind(value)
    except ValueError:
        raise RunError(f"tag {RUN_KIND_TAG}={value!r} is not a kind of run ({[k.value for k in RunKind]})") from None


def require_kind(run_id: str | None, tags: dict, expected: RunKind) -> None:
    """Raise a one-line ``RunError`` unless the run's tags say it holds a model of kind ``expected``."""
    found = run_kind(tags)
    if found is not expected:
        raise RunError(f"run {run_id} is a {found.value} run ({_KIND_WORDS[found]}); this reads {expected.value} runs "
                       f"({_KIND_WORDS[expected]})")


def kind_of_run(uri: str) -> RunKind:
    """The kind of the run a model URI names (a run id or ``runs:/<id>/...``); mortality for other URIs
    and local model directories (only mortality models are logged as MLflow models)."""
    m = re.match(r"^(?:runs:/)?([0-9a-f]{32})(?:/.*)?$", str(uri).strip())
    if not m:
        return RunKind.MORTALITY
    try:
        run = client().get_run(m.group(1))
    except Exception as exc:  # mlflow raises MlflowException for unknown ids
        raise run_not_found(m.group(1), exc) from None
    return run_kind(run.data.tags)


def tracking_uri() -> str:
    """``MLFLOW_TRACKING_URI`` or ``sqlite:///<cwd>/mlflow.db``."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path.cwd() / 'mlflow.db'}"


def run_not_found(run_id: str, exc: BaseException) -> "RunError":
    """The error for an unknown run id, saying which store was asked and, when that store is the
    default one (``./mlflow.db``, which follows the working directory), how to reach another."""
    hint = ""
    if not os.environ.get("MLFLOW_TRACKING_URI"):
        hint = (f" (MLFLOW_TRACKING_URI is unset, so the store is mlflow.db in the working directory {Path.cwd()}: "
                "run the command from the directory the run was trained in, or set MLFLOW_TRACKING_URI to its store)")
    first = (str(exc).strip().splitlines() or [""])[0]
    return RunError(f"run {run_id} not found in the tracking store {tracking_uri()}{hint}: {first}")


_READY: set[str] = set()  # tracking URIs whose store this process has initialised


def client():
    """The MLflow client of the tracking store (the only place one is made); the store initialised
    once, safely (``init_store``)."""
    from mlflow.tracking import MlflowClient

    uri = tracking_uri()
    init_store(uri)
    return MlflowClient(uri)


def init_store(uri: str) -> None:
    """Create (or migrate) a SQLite tracking store's tables once, whoever comes first: the processes
    take an exclusive lock on ``<db>.init.lock`` in turn, and the first one in creates the tables
    while the others wait, then find them. MLflow's table-creation log lines are kept quiet."""
    if uri in _READY or not uri.startswith("sqlite:///"):
        return
    import fcntl

    from mlflow.tracking import MlflowClient

    db = Path(uri.removeprefix("sqlite:///").split("?")[0])
    db.parent.mkdir(parents=True, exist_ok=True)
    quiet = [logging.getLogger(n) for n in ("mlflow.store.db.utils", "alembic", "alembic.runtime.migration")]
    levels = [q.level for q in quiet]
    with open(db.with_name(db.name + ".init.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            for q in quiet:
                q.setLevel(logging.WARNING)
            MlflowClient(uri).search_experiments(max_results=1)  # builds the store: tables created or checked
        finally:
            for q, level in zip(quiet, levels):
                q.setLevel(level)
            fcntl.flock(lock, fcntl.LOCK_UN)
    _READY.add(uri)


def experiment_id(name: str, artifact_location: str | None = None) -> str:
    """Id of experiment ``name``, created (with ``artifact_location``) when missing."""
    c = client()
    exp = c.get_experiment_by_name(name)
    if exp is not None:
        return exp.experiment_id
    return c.create_experiment(name, artifact_location=artifact_location)


def runs_tagged(tag: str, values: list[str]) -> list[str]:
    """Ids of the finished runs of every experiment whose ``tag`` is one of ``values``, oldest first."""
    c = client()
    experiments = [e.experiment_id for e in c.search_experiments(max_results=50_000)]
    runs = []
    for value in values if experiments else []:
        quoted = "'" + value.replace("'", "\\'") + "'"
        runs += c.search_runs(experiments, f"tags.{tag} = {quoted} AND attributes.status = 'FINISHED'",
                              max_results=50_000)
    return [r.info.run_id for r in sorted(runs, key=lambda r: r.info.start_time or 0)]


# ---------------------------------------------------------------------------- loading a run


@dataclass
class RunModel:
    """A trained model with what its run recorded."""

    model: object  # torch module in eval mode, or a baselines.BaselineModel (formats.ModelFormat)
    info: dict  # formats.load_model info: model_kind, model_format, refer_threshold, score_samples, max_bags...
    vocab: dict  # the training vocab.json (tokens, context, bins, text_items)
    run_id: str | None  # MLflow run id (None for a local model directory)
    manifest: dict | None = None  # the training features' manifest.json (redacted copy), when logged
    features_dir: Path | None = None  # features directory the run was trained on (tag FEATURES_DIR_TAG)
    tags: dict = field(default_factory=dict)  # the run's MLflow tags
    params: dict = field(default_factory=dict)  # the run's MLflow params
    model_info: dict = field(default_factory=dict)  # the model's model_info.json (validation metrics, reliability)


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
    if model_file(path / "artifacts") is not None:
        return None, path
    if re.match(r"^[a-z][a-z0-9+.-]*:/", text) and not text.startswith("runs:/"):  # models:/, s3://, file:/...
        return None, None
    raise RunError(f"{text!r} is neither a run id, a runs:/<id>/model URI, an MLflow model URI nor a local "
                   "MLflow model directory")


def load_run_model(uri: str, workdir: Path | str | None = None, device=None) -> RunModel:
    """Model, info and vocabulary of a run id / ``runs:/<id>/model`` URI / model URI / local model directory;
    a torch model on ``device`` (None: the CPU)."""
    import mlflow

    run_id, local = parse_model_uri(uri)
    if local is None:
        init_store(tracking_uri())
    if run_id is None and local is None:  # another MLflow model URI (registry, remote store): download it
        try:
            local = Path(mlflow.artifacts.download_artifacts(artifact_uri=str(uri), dst_path=str(
                workdir or tempfile.mkdtemp(prefix="model-")), tracking_uri=tracking_uri()))
        except Exception as exc:
            raise RunError(f"cannot download the model {uri}: {exc}") from None
        if model_file(local / "artifacts") is None:
            raise RunError(f"{uri} is not a model logged by training (no artifacts/{' or '.join(FILES.values())})")
    if local is not None:
        model, info = load_model(model_file(local / "artifacts"), device)
        extraction = local / "artifacts" / EXTRACTION  # settings for a census extraction (pyfunc.log_model)
        manifest = fileio.read_json(extraction) if extraction.exists() else None
        return RunModel(model, info, fileio.read_json(local / "artifacts" / VOCAB), None, manifest,
                        model_info=_model_info(local / "artifacts"))
    c = client()
    try:
        run = c.get_run(run_id)
    except Exception as exc:  # mlflow raises MlflowException for unknown ids
        raise run_not_found(run_id, exc) from None
    require_kind(run_id, run.data.tags, RunKind.MORTALITY)
    dst = Path(workdir or tempfile.mkdtemp(prefix="run-"))
    try:
        model_dir = Path(mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=MODEL_FILES,
                                                             dst_path=str(dst), tracking_uri=tracking_uri()))
    except Exception as exc:
        raise RunError(f"run {run_id} has no logged model ({MODEL_FILES}): {exc}") from None
    path = model_file(model_dir)
    if path is None:
        raise RunError(f"run {run_id} has no model file in {MODEL_FILES} ({' or '.join(FILES.values())})")
    model, info = load_model(path, device)
    manifest = None
    try:
        path = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=f"{FEATURES_ARTIFACTS}/{MANIFEST}",
                                                   dst_path=str(dst), tracking_uri=tracking_uri())
        manifest = fileio.read_json(path)
    except Exception:  # older runs / features without a manifest
        log.info("run %s has no %s/%s artifact", run_id, FEATURES_ARTIFACTS, MANIFEST)
    tags = dict(run.data.tags)
    fdir = Path(tags[FEATURES_DIR_TAG]) if tags.get(FEATURES_DIR_TAG) else None
    return RunModel(model, info, fileio.read_json(model_dir / VOCAB), run_id, manifest, fdir, tags,
                    dict(run.data.params), _model_info(model_dir))


def _model_info(model_files: Path) -> dict:
    path = model_files / MODEL_INFO
    return fileio.read_json(path) if path.exists() else {}


def resolve_features(run: RunModel, data: Path | str | None) -> Path:
    """The features directory to use: ``data`` or the run's; its vocab.json must be the run's."""
    if data is None and run.features_dir is None:
        raise RunError(f"run {run.run_id} does not record its features directory; give the features directory (data)")
    fdir = Path(data) if data is not None else run.features_dir
    vocab_file = fdir / VOCAB
    if not vocab_file.exists():
        raise RunError(f"{vocab_file}: not found; is {fdir} a features directory written by the extraction?")
    if fileio.read_json(vocab_file) != run.vocab:
        raise RunError(f"{vocab_file}: differs from the vocabulary run {run.run_id} was trained with; "
                       "these features belong to another extraction")
    return fdir


def split_mode(manifest: dict | None) -> str:
    """``random`` / ``era`` from a features manifest (``unknown`` when absent)."""
    return str(((manifest or {}).get("config") or {}).get("split") or "unknown")


def features_split_mode(features_dir: Path | str) -> str:
    """``split_mode`` of a features directory's manifest.json (``unknown`` without one)."""
    manifest = Path(features_dir) / MANIFEST
    return split_mode(fileio.read_json(manifest) if manifest.exists() else None)


def features_dir_release(features_dir: Path | str) -> str:
    """The MIMIC release of a features directory's manifest.json as a tag value
    (``data.mimic.sources.tables.release_of``:
    MIMIC-III when it records none; ``unknown`` without a manifest)."""
    from pipeline.data.mimic.sources.tables import release_of

    manifest = Path(features_dir) / MANIFEST
    return release_of(fileio.read_json(manifest)).value if manifest.exists() else "unknown"
