"""The request guard in front of MLflow's scoring app: what a request to /invocations may be.

``RequestGuard`` (ASGI middleware) reads the body under a size limit (413), parses a JSON body
once (``table_of``: 400 for an empty body, invalid JSON, no dataframe_split / dataframe_records,
a malformed table; 413 past ``max_rows``), checks it with the pyfunc's own ``check_request`` (400,
one line naming the column and row), then either hands the parsed table straight to the model
(``direct``: the lighter path, answered as MLflow answers) or passes the request on to MLflow's app
(other content types too). Any error answer becomes one JSON line ``{"error_code", "message"}``,
never a stack trace or a row's contents; the log gets the detail (``where``: the exception's class
and frames, not its message). ``GuardedModel`` wraps MLflow's PyFuncModel so that an exception in
``predict`` reaches the guard (``Outcome``, through a context variable MLflow's worker thread
inherits) instead of MLflow's answer, which quotes the rows.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import json
import logging
import os
import time
import traceback
from dataclasses import dataclass

from pipeline.core.contracts import FEATURES, PYFUNC_OPTIONAL, Use

log = logging.getLogger(__name__)

# the pyfunc's input columns as a 4xx message names them: the required features[, the optional ones]
INPUT_COLUMNS = f"{', '.join(FEATURES.names(Use.REQUIRED))}[, {', '.join(PYFUNC_OPTIONAL)}]"
DRAIN_FACTOR = 4  # an oversized body is read (and dropped) up to this many times the limit before the 413
FORMATS = ("dataframe_split", "dataframe_records")  # MLflow's JSON input keys for a table (the others are refused)


class Rejected(Exception):
    """A request answered with an error status and a one-line message (``status``, ``message``)."""

    def __init__(self, status: int, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.status, self.message = status, " ".join(message.split())  # one line
        self.detail = detail  # for the request's log line only (where an exception was raised; never a row)


_ERROR_CODES = {400: "BAD_REQUEST", 413: "REQUEST_TOO_LARGE", 415: "UNSUPPORTED_MEDIA_TYPE", 500: "INTERNAL_ERROR",
                504: "TIMEOUT"}


# ---------------------------------------------------------------------------- the model


@dataclass
class Outcome:
    """What the model did with one request (set in MLflow's worker thread, read by the guard)."""

    error: BaseException | None = None


_OUTCOME: contextvars.ContextVar[Outcome | None] = contextvars.ContextVar("pipeline_serve_outcome", default=None)


class GuardedModel:
    """MLflow's PyFuncModel, whose ``predict`` records an exception on the request's ``Outcome``
    (the guard then answers one line; MLflow's own answer would quote the rows)."""

    def __init__(self, model) -> None:
        self._model = model
        self.metadata = model.metadata
        try:
            python_model = model.unwrap_python_model()
        except Exception:  # not a PythonModel flavor
            python_model = None
        self.check_request = getattr(python_model, "check_request", None)  # MortalityRiskModel.check_request
        self.python_model = python_model if self.check_request is not None else None  # for the direct path

    def predict(self, data, params=None):
        try:
            return self._model.predict(data, params=params)
        except BaseException as exc:
            outcome = _OUTCOME.get()
            if outcome is not None:
                outcome.error = exc
            raise

    def __getattr__(self, name):
        return getattr(self._model, name)


def table_of(body: bytes, max_rows: int):
    """(DataFrame, params) of a JSON request body in one of MLflow's input formats; ``Rejected``
    (400 / 413) naming what is wrong, never quoting the body."""
    import pandas as pd

    try:
        obj = json.loads(body)
    except UnicodeDecodeError:
        raise Rejected(400, "the body is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        where_ = f"at line {exc.lineno}, column {exc.colno}"
        raise Rejected(400, f"the body is not valid JSON ({exc.msg} {where_})") from None
    except RecursionError:  # e.g. 100,000 nested [: deeper than the parser's stack
        raise Rejected(400, "the body nests JSON arrays or objects too deeply to be a table (a features row is at "
                            "most 3 levels deep)") from None
    keys = [k for k in FORMATS if isinstance(obj, dict) and k in obj]
    if len(keys) != 1:
        raise Rejected(400, "the body must be a JSON object with exactly one of " + ", ".join(FORMATS)
                       + ' (e.g. {"dataframe_split": {"columns": [...], "data": [[...]]}})')
    params = obj.get("params")
    if params is not None and not isinstance(params, dict):
        raise Rejected(400, "params must be a JSON object (samples, batch_size, seed)")
    data, key = obj[keys[0]], keys[0]
    if key == "dataframe_split":
        table = isinstance(data, dict) and isinstance(data.get("columns"), list) and isinstance(data.get("data"), list)
        if not table:
            raise Rejected(400, 'dataframe_split must be an object {"columns": [names], "data": [[row values], ...]}')
        columns, rows = data["columns"], data["data"]
        if not all(isinstance(c, str) for c in columns) or len(set(columns)) != len(columns):
            raise Rejected(400, "dataframe_split columns must be distinct strings")
        _check_rows(len(rows), max_rows)
        bad = next((i for i, r in enumerate(rows) if not isinstance(r, list) or len(r) != len(columns)), None)
        if bad is not None:
            raise Rejected(400, f"dataframe_split data row {bad} must be a list of {len(columns)} values (one per "
                                "column)")
        frame = pd.DataFrame(rows, columns=columns)
    else:
        if not isinstance(data, list):
            raise Rejected(400, "dataframe_records must be a list of row objects [{column: value, ...}, ...]")
        _check_rows(len(data), max_rows)
        bad = next((i for i, r in enumerate(data) if not isinstance(r, dict)), None)
        if bad is not None:
            raise Rejected(400, f"dataframe_records row {bad} must be an object {{column: value}}")
        frame = pd.DataFrame.from_records(data)
    return frame, params


def _check_rows(n: int, max_rows: int) -> None:
    if n > max_rows:
        raise Rejected(413, f"the request holds {n} admissions; the limit is {max_rows} per request: send the census "
                            "in several requests")
    if n == 0:
        raise Rejected(400, "the request holds no admissions (0 rows)")


def where(exc: BaseException) -> str:
    """An exception's class chain and the frames that raised it (file:line function), without its
    message or any local value: what the server log may hold about a request's failure."""
    parts, seen = [], set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        frames = traceback.extract_tb(exc.__traceback__)[-4:]
        at = " < ".join(f"{os.path.basename(f.filename)}:{f.lineno} {f.name}" for f in reversed(frames))
        parts.append(f"{type(exc).__module__}.{type(exc).__qualname__} at {at or '?'}")
        exc = exc.__cause__ or exc.__context__
    return "; caused by ".join(parts)


class RequestGuard:
    """ASGI middleware in front of MLflow's scoring app (see the module docstring)."""

    def __init__(self, app, model: GuardedModel, cfg) -> None:  # cfg: a server.ServeConfig
        self.app, self.model, self.cfg = app, model, cfg
        self.ids = itertools.count(1)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if scope.get("path") != "/invocations":
            return await self._other(scope, receive, send)
        rid, t0, rows, detail = next(self.ids), time.perf_counter(), None, ""
        try:
            body = await self._body(scope, receive)
            if body is None:  # the client went away
                return
            table = await self._check(scope, body)
            rows = None if table is None else len(table[0])
            if table is not None and self.cfg.direct and self.model.python_model is not None:
                status = await self._direct(table, send, rid)
            else:
                status = await self._forward(scope, body, send, rid)
        except Rejected as rej:
            status, detail = rej.status, f": {rej.message}" + (f" ({rej.detail})" if rej.detail else "")
            await _answer(send, rej.status, rej.message)
        except Exception as exc:  # a bug of the guard: one line to the client, the detail in the log
            status, detail = 500, f": internal error: {where(exc)}"
            await _answer(send, 500, f"internal error while reading the request (request {rid}; see the server log)")
        # the request's one log line (docs/scoring.md): status, admissions, time, and what went wrong
        (log.error if status >= 500 else log.info)("request %d: %d, %s admissions, %.0f ms%s", rid, status,
                                                   "?" if rows is None else rows, 1e3 * (time.perf_counter() - t0),
                                                   detail)

    async def _other(self, scope, receive, send) -> None:
        """Any other path (/ping, /health, /version): MLflow's answer, and the request's one log line."""
        status = [0]

        async def watch(message):
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
            await send(message)

        await self.app(scope, receive, watch)
        log.info("request %s %s: %d", scope.get("method", "?"), scope.get("path", "?"), status[0])

    async def _body(self, scope, receive) -> bytes | None:
        """The request body; 413 past the limit. An oversized body is read on and dropped (up to
        ``DRAIN_FACTOR`` times the limit) so that a client that sends it whole before reading the
        answer gets the 413 instead of a broken connection."""
        limit = self.cfg.max_body_bytes
        length = _header(scope, b"content-length")
        declared = int(length) if length is not None and length.isdigit() else None
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            more = message.get("more_body", False)
            if size <= limit and (declared is None or declared <= limit):
                chunks.append(chunk)
            elif not more or size > DRAIN_FACTOR * limit:
                shown = f"{declared:,} bytes" if declared is not None else f"over {limit:,} bytes"
                raise Rejected(413, f"the request body is {shown}; the limit is {limit:,} "
                                    f"({self.cfg.max_body_mb:g} MB): send the census in several requests")
            if not more:
                return b"".join(chunks)

    async def _check(self, scope, body: bytes) -> tuple | None:
        """(frame, params) of a JSON request, or 400 / 413; None for other content types (MLflow reads
        them). With ``direct`` the model's ``predict`` checks the frame itself, else ``check_request``."""
        if not body.strip():
            raise Rejected(400, "empty request body: send a JSON object with dataframe_split or dataframe_records")
        ctype = (_header(scope, b"content-type") or "").split(";")[0].strip().lower()
        if ctype != "application/json":
            return None
        frame, params = await asyncio.to_thread(table_of, body, self.cfg.max_rows)
        if self.model.check_request is not None and not (self.cfg.direct and self.model.python_model is not None):
            from pipeline.runs.pyfunc import RequestError

            try:
                await asyncio.to_thread(self.model.check_request, frame, params)
            except RequestError as exc:  # one line naming the column and row, no value
                raise Rejected(400, str(exc)) from None
        return frame, params

    async def _direct(self, table: tuple, send, rid: int) -> int:
        """The lighter path of a checked JSON request: the python model's ``predict`` on the frame the
        guard parsed (no second parse, no schema pass), answered as MLflow answers (``predictions_to_json``)."""
        from mlflow.pyfunc.scoring_server import predictions_to_json

        from pipeline.runs.pyfunc import RequestError

        def run() -> bytes:
            import io

            out = io.StringIO()
            predictions_to_json(self.model.python_model.predict(None, *table), out)
            return out.getvalue().encode()

        try:
            body = await asyncio.wait_for(asyncio.to_thread(run), timeout=self.cfg.timeout_s)
        except RequestError as exc:
            raise Rejected(400, str(exc)) from None
        except (asyncio.TimeoutError, TimeoutError):
            raise Rejected(504, f"the request took longer than {self.cfg.timeout_s} s: send fewer admissions per "
                                "request") from None
        except Exception as exc:
            raise Rejected(500, f"internal error while scoring (request {rid}; see the server log)",
                           f"the model failed: {where(exc)}") from None
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
        return 200

    async def _forward(self, scope, body: bytes, send, rid: int) -> int:
        """Run MLflow's app on the body; an error answer is replaced by one line (the detail logged)."""
        outcome = Outcome()
        token = _OUTCOME.set(outcome)
        sent, start = [False], {}

        async def replay():
            if sent[0]:
                return {"type": "http.disconnect"}
            sent[0] = True
            return {"type": "http.request", "body": body, "more_body": False}

        chunks: list[bytes] = []

        async def capture(message):
            if message["type"] == "http.response.start":
                start.update(message)
                if message["status"] < 400:
                    await send(message)
            elif start.get("status", 500) < 400:
                await send(message)
            else:
                chunks.append(message.get("body", b""))

        try:
            await self.app(scope, replay, capture)
        finally:
            _OUTCOME.reset(token)
        status = int(start.get("status", 500))
        if status < 400:
            return status
        raise self._rejection(status, b"".join(chunks), outcome.error, rid)

    def _rejection(self, status: int, body: bytes, error: BaseException | None, rid: int) -> Rejected:
        """The one-line answer to MLflow's error answer ``body``; the detail goes to the log."""
        from pipeline.runs.pyfunc import RequestError

        if error is not None:
            if isinstance(error, RequestError):
                return Rejected(400, str(error), where(error))
            return Rejected(500, f"internal error while scoring (request {rid}; see the server log)",
                            f"the model failed: {where(error)}")
        try:
            code = json.loads(body).get("error_code", "?")
        except (ValueError, AttributeError, RecursionError):
            code = "?"
        said = (f"MLflow's scoring server answered {status} ({code}); "
                "its message is not logged: it can quote the request")
        if status == 415:
            return Rejected(415, "unsupported content type: send application/json (or text/csv, "
                                 "application/vnd.apache.parquet) in UTF-8", said)
        if status == 504:
            return Rejected(504, f"the request took longer than {self.cfg.timeout_s} s: send fewer admissions per "
                                 "request", said)
        if status < 500:
            return Rejected(status, f"the body could not be read as a table of the features columns ({INPUT_COLUMNS})",
                            said)
        return Rejected(500, f"internal error (request {rid}; see the server log)", said)


def _header(scope, name: bytes) -> str | None:
    for k, v in scope.get("headers") or ():
        if k.lower() == name:
            return v.decode("latin-1")
    return None


async def _answer(send, status: int, message: str) -> None:
    body = json.dumps({"error_code": _ERROR_CODES.get(status, "BAD_REQUEST"), "message": message}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
