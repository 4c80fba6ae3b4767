"""MLflow tracking of training runs (mlflow is imported lazily, inside the functions).

The tracking URI comes from ``MLFLOW_TRACKING_URI`` (default ``sqlite:///mlflow.db`` in the
working directory). Parameters pass through ``redact_params`` first: secret-looking keys are
dropped to ``***``, DSN passwords are redacted and calendar dates masked, so no secret, DSN
password or date reaches the tracking store. Only rank 0 of a distributed run tracks; the
other ranks get a ``NullTracker``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Mapping

from pipeline.dsn import REDACTED, redact_dsn
from pipeline.privacy import DATE

DEFAULT_EXPERIMENT = "mimic-mortality"  # experiment used when none is given
SECRET_PARTS = {"password", "passwd", "pwd", "secret", "secrets", "token", "credential", "credentials",
                "apikey", "auth", "key", "dsn"}  # key fragments (split on . _ -) that mark a secret
_KV_PASSWORD = re.compile(r"(?i)((?:ssl)?password\s*[=:]\s*)\S+")


def tracking_uri() -> str:
    """``MLFLOW_TRACKING_URI`` or ``sqlite:///<cwd>/mlflow.db``."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path.cwd() / 'mlflow.db'}"


def is_secret_key(key: str) -> bool:
    """True when any fragment of ``key`` (split on ``.``, ``_``, ``-``) names a secret."""
    parts = [p for p in re.split(r"[._\-\s]+", key.lower()) if p]
    return any(p in SECRET_PARTS for p in parts) or "apikey" in key.lower().replace("_", "")


def redact_value(value: str) -> str:
    """Redact DSN / key=value passwords and mask calendar dates in one string."""
    text = redact_dsn(value) if "://" in value else value
    text = _KV_PASSWORD.sub(lambda m: m.group(1) + REDACTED, text)
    return DATE.sub("<date>", text)


def redact_params(params: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Flatten nested mappings to ``a.b`` keys and redact them for logging."""
    out: dict[str, str] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(redact_params(value, f"{name}."))
        elif is_secret_key(str(key)):
            out[name] = REDACTED
        else:
            text = getattr(value, "value", value)  # str enums -> their value
            out[name] = redact_value(str(text))[:6000]
    return out


def redact_json(obj: Any) -> Any:
    """``obj`` with every string value passed through ``redact_value`` (keys kept)."""
    if isinstance(obj, dict):
        return {k: (REDACTED if is_secret_key(str(k)) and isinstance(v, str) else redact_json(v)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [redact_json(v) for v in obj]
    return redact_value(obj) if isinstance(obj, str) else obj


def experiment_id(name: str, artifact_location: str | None = None) -> str:
    """Id of experiment ``name``, created (with ``artifact_location``) when missing."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri())
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        return exp.experiment_id
    return client.create_experiment(name, artifact_location=artifact_location)


class NullTracker:
    """Tracker that records nothing (ranks > 0, ``--no-tracking``)."""

    run_id: str | None = None

    def log_params(self, params: Mapping[str, Any]) -> None:
        pass

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        pass

    def log_artifact(self, path: Path | str, artifact_path: str | None = None) -> None:
        pass

    def set_tag(self, key: str, value: str) -> None:
        pass

    def log_pyfunc(self, **kwargs) -> None:
        pass

    def end(self, status: str = "FINISHED") -> None:
        pass


class RunTracker(NullTracker):
    """One MLflow run: new, resumed by ``run_id``, or the one ``mlflow run`` started (MLFLOW_RUN_ID)."""

    def __init__(self, experiment: str | None = None, run_name: str | None = None, run_id: str | None = None,
                 artifact_location: str | None = None) -> None:
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri())
        run_id = run_id or os.environ.get("MLFLOW_RUN_ID")
        if run_id:
            self.run_id = self.client.get_run(run_id).info.run_id
            self.client.update_run(self.run_id, status="RUNNING")
        else:
            exp = experiment_id(experiment or DEFAULT_EXPERIMENT, artifact_location)
            self.run_id = self.client.create_run(exp, run_name=run_name).info.run_id

    def log_params(self, params: Mapping[str, Any]) -> None:
        """Log redacted params; a key already logged with the same value is skipped."""
        from mlflow.entities import Param

        logged = self.client.get_run(self.run_id).data.params
        todo = {k: v for k, v in redact_params(params).items() if logged.get(k) != v}
        items = list(todo.items())
        for i in range(0, len(items), 100):
            self.client.log_batch(self.run_id, params=[Param(k, v) for k, v in items[i : i + 100]])

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        import time

        from mlflow.entities import Metric

        ts = int(time.time() * 1000)
        rows = [Metric(k, float(v), ts, int(step)) for k, v in metrics.items() if v is not None]
        if rows:
            self.client.log_batch(self.run_id, metrics=rows)

    def log_artifact(self, path: Path | str, artifact_path: str | None = None) -> None:
        self.client.log_artifact(self.run_id, str(path), artifact_path)

    def set_tag(self, key: str, value: str) -> None:
        self.client.set_tag(self.run_id, key, redact_value(str(value)))

    def log_pyfunc(self, **kwargs) -> None:
        """Log the trained model as an MLflow pyfunc named ``model`` (see ``pipeline.pyfunc``)."""
        import mlflow

        from pipeline import pyfunc

        previous = mlflow.get_tracking_uri()
        mlflow.set_tracking_uri(tracking_uri())
        try:
            with mlflow.start_run(run_id=self.run_id):
                pyfunc.log_model(**kwargs)
        finally:
            mlflow.set_tracking_uri(previous)
        self.client.update_run(self.run_id, status="RUNNING")  # start_run's exit ended the run

    def end(self, status: str = "FINISHED") -> None:
        self.client.set_terminated(self.run_id, status=status)


def make_tracker(enabled: bool, **kwargs) -> NullTracker:
    """A ``RunTracker`` when ``enabled`` else a ``NullTracker``."""
    return RunTracker(**kwargs) if enabled else NullTracker()
