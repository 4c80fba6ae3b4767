"""A run being written to MLflow (mlflow is imported lazily, inside the functions).

The store is ``store.tracking_uri()``. Parameters pass through ``redact.redact_params`` first: secret-looking keys are
dropped to ``***``, DSN passwords are redacted and calendar dates masked, so no secret, DSN
password or date reaches the tracking store. Tags are redacted alike, except that the path tags
(``store.PATH_TAGS``: the features directory, read back to find the features) keep their dates. Only rank 0 of a
distributed run tracks; the other ranks get a ``NullTracker``.

A tracker is a context manager: the run it opened ends KILLED when the block is interrupted (Ctrl-C:
``KeyboardInterrupt``), FAILED when it raises anything else (the exception goes on) and FINISHED when it does
not::

    with make_tracker(tracking, experiment="x") as tracker:
        tracker.log_params(...)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Self

from pipeline.core.redact import redact_params, redact_value
from pipeline.runs import store


class NullTracker:
    """Tracker that records nothing (ranks > 0, ``--no-tracking``)."""

    run_id: str | None = None
    owns_status: bool = True  # leaving a with block ends the run (False: a finished run given more records)

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

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        """End the run KILLED when interrupted (``KeyboardInterrupt``), FAILED on any other exception, else
        FINISHED; never swallows the exception. A tracker that does not own its run's status (``owns_status``)
        ends nothing."""
        if self.owns_status:
            self.end(end_status(exc_type))
        return False


class RunTracker(NullTracker):
    """One MLflow run: new, resumed by ``run_id``, or the one ``mlflow run`` started (MLFLOW_RUN_ID)."""

    def __init__(self, experiment: str | None = None, run_name: str | None = None, run_id: str | None = None,
                 artifact_location: str | None = None, reopen: bool = True) -> None:
        """A new run, or ``run_id``'s (``reopen``: marked RUNNING again until ``end``; without it, a
        finished run receives more records, e.g. an evaluation, and keeps its status: leaving a ``with``
        block then ends nothing)."""
        self.client = store.client(create=True)
        run_id = run_id or os.environ.get("MLFLOW_RUN_ID")
        self.owns_status = bool(reopen or not run_id)
        if run_id:
            self.run_id = self.client.get_run(run_id).info.run_id
            if reopen:
                self.client.update_run(self.run_id, status="RUNNING")
        else:
            exp = store.experiment_id(experiment or store.DEFAULT_EXPERIMENT, artifact_location)
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
        self.client.set_tag(self.run_id, key, redact_value(str(value), dates=key not in store.PATH_TAGS))

    def log_pyfunc(self, **kwargs) -> None:
        """Log the trained model as an MLflow pyfunc named ``model`` (see ``pipeline.runs.pyfunc``)."""
        import mlflow
        from pipeline.runs import pyfunc

        with store.bound(), mlflow.start_run(run_id=self.run_id):
            pyfunc.log_model(**kwargs)
        self.client.update_run(self.run_id, status="RUNNING")  # start_run's exit ended the run

    def end(self, status: str = "FINISHED") -> None:
        self.client.set_terminated(self.run_id, status=status)


def end_status(exc_type) -> str:
    """MLflow's status of a run whose block ended with ``exc_type`` (None: no exception)."""
    if exc_type is None:
        return "FINISHED"
    return "KILLED" if issubclass(exc_type, KeyboardInterrupt) else "FAILED"


def make_tracker(enabled: bool, **kwargs) -> NullTracker:
    """A ``RunTracker`` when ``enabled`` else a ``NullTracker``."""
    return RunTracker(**kwargs) if enabled else NullTracker()


def run_id_line(run_id: str | None) -> str:
    """The line a command ends with: ``run_id: <id>``, or that tracking was off."""
    return f"run_id: {run_id}" if run_id else "run_id: none (tracking off)"
