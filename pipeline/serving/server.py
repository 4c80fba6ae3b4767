"""The served model: MLflow's scoring server for a run's pyfunc, on 127.0.0.1, behind a request guard.

``serve`` loads the model (``runs:/<id>/model``, a run id, an MLflow model URI or a model
directory) with ``mlflow.pyfunc.load_model`` and runs MLflow's own FastAPI scoring app
(``mlflow.pyfunc.scoring_server.init``: /ping, /health, /version, /invocations, every input
format MLflow reads) under uvicorn in this process, so nothing has to be on PATH. In front of
/invocations sits ``guard.RequestGuard`` (size limits: 413; bad requests: 400 with one line; no
stack trace or row contents in an answer or the log; a JSON request checked once and handed to
the model directly).

Requests run in worker threads, concurrently, on one loaded model: the pyfunc passes its
sampling mode and its own generator with every call (``pipeline.engine.predict``), so a request's
answer is the same whatever else the server is doing. ``workers`` > 1 runs that many processes
(uvicorn), each with its own copy of the model; ``threads`` is torch's intra-op threads per
request (1: concurrent requests share the cores without oversubscribing them).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass

from pipeline.core.configs import check_at_least, invalid
from pipeline.core.progress import UserFormatter

log = logging.getLogger(__name__)

HOST = "127.0.0.1"  # loopback only: the served model answers local clients (a proxy in front for others)
CONFIG_ENV = "PIPELINE_SERVE_CONFIG"  # the ServeConfig of uvicorn's worker processes (workers > 1), as JSON


@dataclass
class ServeConfig:
    """Settings of one served model."""

    model: str  # runs:/<id>/model, a run id, an MLflow model URI or a local model directory
    port: int = 5000  # TCP port on 127.0.0.1
    workers: int = 1  # server processes, each with its own copy of the model (docs/scoring.md: what was measured)
    threads: int | None = 1  # Torch intra-op threads per request (requests run side by side, each in its own
        # thread)
    max_rows: int = 2048  # admissions per request; more is a 413 (split the census into requests)
    max_body_mb: float = 16.0  # request body size limit in MB; larger is a 413 before the body is read
    timeout_s: int = 60  # MLflow's per-request time limit (a 504 beyond it)
    device: str | None = None  # torch device of the model: cpu, cuda, cuda:N (unset: cuda when available, else cpu)
    direct: bool = True  # JSON requests: the guard's parsed table straight to the model (off: through MLflow's app)

    def __post_init__(self) -> None:
        check_at_least(self, 1, ("port", "workers", "max_rows", "timeout_s", "threads"))
        if not self.max_body_mb > 0:
            raise invalid(self, f"max_body_mb must be > 0, got {self.max_body_mb}", "max_body_mb")

    @property
    def max_body_bytes(self) -> int:
        return int(self.max_body_mb * 1e6)


def model_uri(uri: str) -> str:
    """The MLflow URI of a run id / ``runs:/<id>/model`` / model URI / local model directory."""
    from pipeline.runs.load import parse_model_uri

    run_id, local = parse_model_uri(uri)
    return f"runs:/{run_id}/model" if run_id else str(local) if local else str(uri).strip()


def load(uri: str):
    """MLflow's PyFuncModel of ``uri`` (read from the tracking store of ``store.tracking_uri``); a run id the store
    does not hold, or a run of another kind, is refused first with ``runs.load``'s one line."""
    import mlflow
    from pipeline.runs.load import kind_of_run, parse_model_uri
    from pipeline.runs.store import RunError, client, tracking_uri
    from pipeline.tasks.base import load_task

    if parse_model_uri(uri) == (None, None):  # models:/...: the store must exist (run ids: kind_of_run says so)
        client()
    kind = kind_of_run(uri)  # an unknown run id: the line that says which store was asked
    if not load_task(kind).serves:  # its runs log no pyfunc
        raise RunError(f"{uri} holds a {kind} model; `serve` serves mortality models (features in, risk out)")
    mlflow.set_tracking_uri(tracking_uri())
    target = model_uri(uri)  # a malformed URI: runs.load's own line
    try:
        return mlflow.pyfunc.load_model(target)
    except Exception as exc:
        raise RunError(f"cannot load the model {uri}: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}") from None


# ---------------------------------------------------------------------------- the server


def build_app(cfg: ServeConfig):
    """MLflow's scoring app for ``cfg.model`` behind the request guard (the model loaded here)."""
    from mlflow.environment_variables import MLFLOW_SCORING_SERVER_REQUEST_TIMEOUT
    from mlflow.pyfunc import scoring_server

    from pipeline.serving.guard import GuardedModel, RequestGuard

    if cfg.threads:
        import torch

        torch.set_num_threads(cfg.threads)
    os.environ[MLFLOW_SCORING_SERVER_REQUEST_TIMEOUT.name] = str(cfg.timeout_s)
    from pipeline.core.devices import resolve_device

    device = resolve_device(cfg.device)  # a device not here fails before the model loads
    loaded = load(cfg.model)
    unwrap = getattr(loaded, "unwrap_python_model", None)
    on_device = getattr(unwrap(), "to_device", None) if unwrap is not None else None
    if on_device is not None:  # a mortality model (pipeline.runs.pyfunc): onto --device
        on_device(device)
    model = GuardedModel(loaded)
    return RequestGuard(scoring_server.init(model), model, cfg)


def create_app():
    """uvicorn's app factory in a worker process (``workers`` > 1): the config comes from ``CONFIG_ENV``."""
    _log_setup()
    return build_app(ServeConfig(**json.loads(os.environ[CONFIG_ENV])))


def _log_setup() -> None:
    """The guard's INFO lines (one per request, no row contents) to stderr, in every process, whatever
    level the rest of the logging has (its own handler; not passed on to the root's)."""
    guard_log = logging.getLogger("pipeline.serving.guard")
    if not any(getattr(h, "serve_log", False) for h in guard_log.handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(UserFormatter())  # info: ... (no logger name)
        handler.serve_log = True
        guard_log.addHandler(handler)
        guard_log.propagate = False
    guard_log.setLevel(logging.INFO)


def check_port(cfg: ServeConfig) -> None:
    """A config error naming ``port`` when another process listens on it (before the model is loaded, and so
    before anything announces a server)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: TIME_WAIT is no obstacle
        try:
            sock.bind((HOST, cfg.port))
        except OSError as exc:
            raise invalid(cfg, f"port {cfg.port} on {HOST} is taken ({exc.strerror or exc}): another server listens "
                               "there; stop it or choose another port", "port") from None


def serve(cfg: ServeConfig, log_level: str = "info", on_ready=None) -> None:
    """Serve ``cfg.model`` on http://127.0.0.1:``cfg.port`` until interrupted (SIGINT / SIGTERM).
    A taken port is refused first (``check_port``); ``on_ready()`` is called once the model has loaded, before
    the server starts."""
    import uvicorn

    _log_setup()
    check_port(cfg)
    if cfg.workers == 1:
        app = build_app(cfg)  # a model that does not load fails here, before the port is taken
        if on_ready is not None:
            on_ready()
        uvicorn.run(app, host=HOST, port=cfg.port, log_level=log_level, timeout_graceful_shutdown=5,
                    access_log=False)  # the guard logs each request's one line
        return
    import sys

    path = list(sys.path)
    load(cfg.model)  # fail once, here, rather than in every worker
    # loading put the model's copy of the pipeline sources first on sys.path (its code_paths); the
    # workers inherit sys.path and must import this pipeline, the one that serves
    sys.path[:] = path
    if on_ready is not None:
        on_ready()
    os.environ[CONFIG_ENV] = json.dumps(asdict(cfg))
    uvicorn.run("pipeline.serving.server:create_app", factory=True, host=HOST, port=cfg.port, workers=cfg.workers,
                log_level=log_level, timeout_graceful_shutdown=5, access_log=False)
