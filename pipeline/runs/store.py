"""The tracking store and what a run holds in it: the one MLflow client, artifact names, model URIs.

The tracking URI is ``MLFLOW_TRACKING_URI``; unset, the ``mlflow.db`` of the working directory or of the nearest
folder above it that has one (a command run from a subfolder of the project finds the project's store; its runs'
artifacts are where the store recorded them, ``mlruns/`` beside it), else a new ``mlflow.db`` at the root of this
checkout when the working directory lies inside it (never in a subfolder), else in the working directory. A store
other than the working directory's, or a new one, is announced once (a warning line on stderr) so nobody looks for
runs in the wrong place. Only a command that starts runs makes a store (``client(create=True)``: ``train``,
``laplace``, ``vision train``, ``benchmark-models``); a command that reads runs (``evaluate``, ``score``, ``compare``,
``serve``) refuses a store that does not exist (``StoreMissing``) instead of making an empty one. Every
MLflow client of the library comes from ``client()``, which initialises a SQLite store once per
process under an exclusive file lock (``<db>.init.lock``): two commands started at once on a
fresh store would otherwise both run MLflow's table creation and one would die half-way. MLflow's own code makes
clients of its process-wide URI (a run's logged model is found through one): ``bound()`` sets it to this store
while MLflow works. A run is named by its id,
``runs:/<id>/model``, another MLflow model URI (``models:/name/version``: downloaded), or a
local MLflow model directory; ``runs.load.load_run`` turns any of them into a ``Run``.
mlflow is imported inside the functions.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from pathlib import Path

from pipeline.core import fileio
from pipeline.core.contracts import MANIFEST_FILE, SHIFT_REFERENCE_FILE, TRAIN_CONFIG_FILE, VOCAB_FILE
from pipeline.core.errors import PipelineError
from pipeline.tasks.base import DEFAULT_TASK, TASKS, load_task

log = logging.getLogger(__name__)

DEFAULT_EXPERIMENT = "mimic-mortality"  # experiment used when none is given
RUN_ID = re.compile(r"^[0-9a-f]{32}$")

# ---------------------------------------------------------------------------- artifact layout of a run
MODEL_ARTIFACT = "model"  # the logged pyfunc (MLflow model) inside the run
MODEL_FILES = f"{MODEL_ARTIFACT}/artifacts"  # the pyfunc's files: the model file (formats.FILES), VOCAB, MODEL_INFO,
    # EXTRACTION
VOCAB = VOCAB_FILE  # the training vocabulary (tokens, context, bins, text items)
MANIFEST = MANIFEST_FILE  # the training features' manifest (redacted copy)
MODEL_INFO = "model_info.json"  # kind, configs, refer threshold, validation metrics
TRAIN_CONFIG = TRAIN_CONFIG_FILE  # the training settings
EXTRACTION = "extraction.json"  # the features' extraction settings (``score --source`` re-extracts with them)
FEATURES_ARTIFACTS = "features"  # the run's copy of VOCAB and MANIFEST
CHECKPOINT_ARTIFACTS = "checkpoint"  # the run's copy of its model file (best.pt or baseline.npz)
METRICS = "metrics.json"  # an evaluation report
SHIFT_REFERENCE = SHIFT_REFERENCE_FILE  # the shift check's reference, beside model_info.json and in MODEL_FILES


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
# Which kind of model a run holds: the key of its task (``pipeline.tasks.base.TASKS``, the one registry; formats
# loads each), tagged RUN_KIND_TAG (a Laplace run: its MAP run's task); a run without the tag is a mortality run
# (every run before image models). Each command's loaders refuse another task's runs here, before downloading
# a model.


RUN_KIND_TAG = "run_kind"  # the key of the run's task (absent: DEFAULT_TASK, mortality)
DATASET_TAG = "dataset"  # a vision run's digits | cifar10 | cifar100 (compare groups vision runs by it)
LABEL_TAG = "model_label"  # compare's row name of a Laplace or vision run (laplace-last-layer-650, rank1-gaussian ...)
VISION_EXPERIMENT = "vision"  # MLflow experiment of vision runs (and their Laplace runs) when none is given
LAPLACE_EXPERIMENT = "laplace"  # MLflow experiment of a mortality run's Laplace runs when none is given
OLD_MODEL_FILE = "model.pt"  # an image model's checkpoint in vision runs written before it was best.pt


def run_kind(tags: dict) -> str:
    """The key of the task a run's tags record (``DEFAULT_TASK`` when they record none)."""
    value = (tags or {}).get(RUN_KIND_TAG) or DEFAULT_TASK
    if value not in TASKS:
        raise RunError(f"tag {RUN_KIND_TAG}={value!r} is not a kind of run ({sorted(TASKS)})")
    return value


def require_kind(run_id: str | None, tags: dict, expected: str) -> None:
    """Raise a one-line ``RunError`` unless the run's tags say it holds a model of the task ``expected`` (a key),
    saying what each one is in its task's words (``Task.words``)."""
    found = run_kind(tags)
    if found != expected:
        raise RunError(f"run {run_id} is a {found} run ({load_task(found).words}); this reads {expected} runs "
                       f"({load_task(expected).words})")


STORE_FILE = "mlflow.db"  # the default store's file


def default_store() -> Path:
    """The store used when ``MLFLOW_TRACKING_URI`` is unset: the working directory's ``mlflow.db`` or the nearest
    one above it, else a new one at the checkout's root or the working directory (``fileio.project_file``)."""
    return fileio.project_file(STORE_FILE)


def tracking_uri() -> str:
    """``MLFLOW_TRACKING_URI`` or ``sqlite:///<default_store()>``."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{default_store()}"


class StoreMissing(RunError):
    """A command that reads runs found no tracking store (it makes none)."""


def store_file(uri: str) -> Path | None:
    """The file of a SQLite tracking URI (None for other stores)."""
    return Path(uri.removeprefix("sqlite:///").split("?")[0]) if uri.startswith("sqlite:///") else None


def missing_store(uri: str) -> str | None:
    """Why the SQLite store ``uri`` cannot be read (its file does not exist), or None when it can."""
    db = store_file(uri)
    if db is None or db.is_file():
        return None
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return (f"the tracking store {uri} (MLFLOW_TRACKING_URI) does not exist: set MLFLOW_TRACKING_URI to the "
                "store the runs were written to")
    return (f"no tracking store: no {STORE_FILE} in the working directory {Path.cwd()} or any folder above it "
            "(MLFLOW_TRACKING_URI is unset): run the command inside the project where `train` made its mlflow.db, "
            "or set MLFLOW_TRACKING_URI to that store")


def require_store(uri: str) -> None:
    """Raise ``StoreMissing`` when the SQLite store ``uri`` does not exist (a reading command makes none)."""
    why = missing_store(uri)
    if why:
        raise StoreMissing(why)


def run_not_found(run_id: str, exc: BaseException) -> "RunError":
    """The error for an unknown run id, saying which store was asked and, when that store is the
    default one (``./mlflow.db``, which follows the working directory), how to reach another."""
    missing = missing_store(tracking_uri())
    if missing:
        return RunError(f"run {run_id} not found: {missing}")
    hint = ""
    if not os.environ.get("MLFLOW_TRACKING_URI"):
        db = default_store()
        where = (f"mlflow.db in the working directory {Path.cwd()}" if db.parent == Path.cwd() else
                 f"the nearest mlflow.db above the working directory, {db}")
        hint = (f" (MLFLOW_TRACKING_URI is unset, so the store is {where}: run the command from the directory the "
                "run was trained in, or set MLFLOW_TRACKING_URI to its store)")
    first = (str(exc).strip().splitlines() or [""])[0]
    return RunError(f"run {run_id} not found in the tracking store {tracking_uri()}{hint}: {first}")


_READY: set[str] = set()  # tracking URIs whose store this process has initialised


def client(create: bool = False):
    """The MLflow client of the tracking store (the only place one is made); the store initialised
    once, safely (``init_store``). ``create``: a SQLite store that does not exist is made (a command that starts
    runs); else it is refused (``StoreMissing``)."""
    from mlflow.tracking import MlflowClient

    uri = tracking_uri()
    if not create:
        require_store(uri)
    announce(uri)
    init_store(uri)
    return MlflowClient(uri)


@contextlib.contextmanager
def bound():
    """MLflow's process-wide tracking URI set to ``tracking_uri()`` inside the block and put back after, with
    ``MLFLOW_TRACKING_URI`` as it was: MLflow makes clients of its own default URI (``./mlflow.db`` of the working
    directory) while it finds a run's logged model, and from a subfolder those would make and read an empty store."""
    import mlflow

    previous, env = mlflow.get_tracking_uri(), os.environ.get("MLFLOW_TRACKING_URI")
    mlflow.set_tracking_uri(tracking_uri())
    try:
        yield
    finally:
        mlflow.set_tracking_uri(previous)  # which also sets MLFLOW_TRACKING_URI: put back what it was, so
        if env is None:  # the next command of this process finds the store this one used
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = env


_ANNOUNCED: set[str] = set()  # stores this process has said


def announce(uri: str) -> None:
    """Say once (WARNING, stderr) where the default store is when it is not the working directory's own, or is
    new (``MLFLOW_TRACKING_URI`` unset): a command run from another folder says where its runs go."""
    if uri in _ANNOUNCED or os.environ.get("MLFLOW_TRACKING_URI"):
        return
    _ANNOUNCED.add(uri)
    db = default_store()
    if not db.exists():
        log.warning("tracking store: %s, new (no mlflow.db in the working directory or above it; run the commands "
                    "from one folder, or set MLFLOW_TRACKING_URI, to keep the runs in one store)", db)
    elif db.parent != Path.cwd():
        log.warning("tracking store: %s (the nearest mlflow.db above the working directory; MLFLOW_TRACKING_URI "
                    "chooses another)", db)


def init_store(uri: str) -> None:
    """Create (or migrate) a SQLite tracking store's tables once, whoever comes first: the processes
    take an exclusive lock on ``<db>.init.lock`` in turn, and the first one in creates the tables
    while the others wait, then find them. MLflow's table-creation log lines are kept quiet."""
    if uri in _READY or not uri.startswith("sqlite:///"):
        return
    import fcntl

    from mlflow.tracking import MlflowClient

    db = store_file(uri)
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
    """Id of experiment ``name``, created (with ``artifact_location``) when missing (and the store with it)."""
    c = client(create=True)
    exp = c.get_experiment_by_name(name)
    if exp is not None:
        return exp.experiment_id
    db = default_store()
    if artifact_location is None and not os.environ.get("MLFLOW_TRACKING_URI") and db.parent != Path.cwd():
        artifact_location = (db.parent / "mlruns" / name).as_uri()  # beside the store found, not here
    return c.create_experiment(name, artifact_location=artifact_location)


def experiment_exists(name: str) -> bool:
    """Whether the tracking store holds experiment ``name``."""
    return client().get_experiment_by_name(name) is not None


def runs_tagged(tag: str, values: list[str]) -> list[str]:
    """Ids of the finished runs of every experiment whose ``tag`` is one of ``values``, oldest first."""
    if not values:
        return []
    c = client()
    experiments = [e.experiment_id for e in c.search_experiments(max_results=50_000)]
    runs = []
    for value in values if experiments else []:
        quoted = "'" + value.replace("'", "\\'") + "'"
        runs += c.search_runs(experiments, f"tags.{tag} = {quoted} AND attributes.status = 'FINISHED'",
                              max_results=50_000)
    return [r.info.run_id for r in sorted(runs, key=lambda r: r.info.start_time or 0)]


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
