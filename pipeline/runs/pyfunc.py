"""The trained model as an MLflow pyfunc: features DataFrame in, risk table out.

``log_model`` stores the best checkpoint, ``vocab.json``, ``model_info.json`` and, when the
features' ``manifest.json`` sits next to ``vocab.json``, ``extraction.json`` (the extraction settings
only: no counts, no identifiers; ``score --source`` re-extracts a census with them) as
artifacts, a copy of the ``pipeline`` package's sources as ``code_paths`` (so the model loads
where the repository is absent) and a signature: input = the features table columns,
output = ``pipeline.engine.risk.RISK_COLUMNS``, params = ``samples``, ``batch_size`` and ``seed``.
The model is logged from code (``pyfunc_code.py``, MLflow's models-from-code): loading it runs
that file, no pickled object.

    mlflow.pyfunc.load_model("runs:/<run_id>/model").predict(features_df, params={"samples": 50})

A request is read by ``read_request`` and its params by ``request_settings``, both reusable by any
pyfunc that returns the risk table: a bad request raises ``RequestError``, one line naming the
column and the row (its index in the request), never a value of a row. ``observed_hours`` is
optional: null / NaN (or the column absent) means not recorded, the row is scored and comes back
with observed_hours -1 and before_prediction_time false (as features of version 1); a negative
or infinite value is refused. Each call draws its weights from its own generator seeded with
``seed`` (default 0): the same request gives the same answer whatever else the process runs.

This module imports mlflow at import time; the CLI never imports it at startup.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlflow.pyfunc
import numpy as np
import pandas as pd

from pipeline.core.contracts import DEFAULT_BATCH, FEATURES, PYFUNC_OPTIONAL, Use
from pipeline.core.errors import PipelineError
from pipeline.runs.store import EXTRACTION, MANIFEST, MODEL_ARTIFACT

log = logging.getLogger(__name__)

INPUT_REQUIRED = FEATURES.names(Use.REQUIRED)  # the columns a request must hold
# Other columns of the features table that a request may carry and the model ignores (a features
# file passed whole): in the signature as optional columns of any type, so MLflow neither warns
# about them nor casts them.
INPUT_IGNORED = tuple(c for c in FEATURES.names() if c not in (*INPUT_REQUIRED, *PYFUNC_OPTIONAL))
MODEL_CODE = Path(__file__).with_name("pyfunc_code.py")  # the models-from-code file (set_model)


class RequestError(PipelineError, ValueError):
    """A request the model cannot score: one line for the client naming the column and row (the
    row's index in the request), never a value of a row."""


@dataclass(frozen=True)
class RequestSettings:
    """The params of one request, resolved."""

    samples: int  # Monte Carlo samples per component (default: the model's score_samples)
    batch_size: int  # admissions per forward pass
    seed: int  # seed of this request's own weight draws


def request_settings(params: dict | None, info: dict) -> RequestSettings:
    """``samples`` / ``batch_size`` / ``seed`` of a request's params (defaults: the model's
    score_samples, ``DEFAULT_BATCH``, 0); a bad value is a ``RequestError``."""
    from pipeline.engine import predict

    params = dict(params or {})
    unknown = sorted(set(params) - {"samples", "batch_size", "seed"})
    if unknown:
        raise RequestError(f"unknown params {unknown}; known: samples, batch_size, seed")
    values = {}
    for name, low in (("samples", 1), ("batch_size", 1), ("seed", 0)):
        v = params.get(name)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or int(v) < low:
            raise RequestError(f"param {name!r} must be a whole number >= {low}")
        values[name] = int(v)
    return RequestSettings(predict.score_samples(values.get("samples"), info), values.get("batch_size", DEFAULT_BATCH),
                           values.get("seed", 0))


def read_request(frame, vocab_sizes: dict, window_hours: float | None, needs_values: bool = False,
                 lookback_days: float | None = None):
    """The validated ``FeatureSet`` of a request DataFrame (the features columns; ``observed_hours``
    optional, ``before_prediction_time`` derived from it and the model's window ``window_hours``;
    ``bag_values`` read only when ``needs_values``, a model with a value channel, which requires it).
    ``bag_hours`` must lie in the extraction's window (``bag_window``, ``check_bags``) and no row may contradict
    itself (``data.consistency.check_rows``: the checks beside the features table's contract)."""
    from pipeline.data import features
    from pipeline.data.consistency import check_rows

    if not isinstance(frame, pd.DataFrame):
        raise RequestError("the input must be a table of the features columns (over HTTP: a JSON object with "
                           "dataframe_split or dataframe_records)")
    if len(frame) == 0:
        raise RequestError("the request holds no admissions (0 rows)")
    missing = [c for c in INPUT_REQUIRED if c not in frame.columns]
    if missing:
        raise RequestError(f"missing column(s) {missing}; required: {list(INPUT_REQUIRED)}, optional: "
                           f"{list(PYFUNC_OPTIONAL)}")
    if needs_values and "bag_values" not in frame.columns:
        raise RequestError("missing column 'bag_values': this model has a value channel (the features' bag_values, "
                           "written by extract --values)")
    observed = _observed_hours(frame) if "observed_hours" in frame.columns else None
    events = _whole_numbers(frame["n_events"], "n_events")
    cols = [*INPUT_REQUIRED] + (["bag_values"] if needs_values else [])  # a model without the channel ignores it
    try:
        fs = features.from_pandas(frame[cols].assign(n_events=events), source="request")
    except features.FeatureError as exc:
        raise RequestError(str(exc).removeprefix("request: ")) from None
    for name, ids, size, row_of in (("bags", fs.tokens, vocab_sizes["tokens"], fs._token_row),
                                    ("context", fs.context.ravel(), vocab_sizes["context"],
                                     lambda j: j // max(fs.context.shape[1], 1))):
        bad = np.flatnonzero((ids < 0) | (ids >= size))
        if bad.size:
            raise RequestError(f"column {name!r} row {row_of(int(bad[0]))}: a token id outside the model's "
                               f"vocabulary [0, {size}) ({bad.size} such ids); were these features extracted "
                               "with the model's vocab.json?")
    check_bags(fs, *bag_window(window_hours, lookback_days))
    if observed is not None:
        fs.observed_hours = observed
        if window_hours is not None:
            fs.before_prediction_time = observed < float(window_hours)  # nan (not recorded) -> False
    try:
        check_rows(fs, window_hours)
    except features.FeatureError as exc:
        raise RequestError(str(exc).removeprefix("request: ")) from None
    return fs


MAX_ABS_HOURS = 24 * 365 * 200  # bag starts beyond ±200 years are no admission's (when the window is unknown)


def bag_window(window_hours: float | None, lookback_days: float | None) -> tuple[float, float]:
    """[low, high) of a bag's start, hours after ADMITTIME: before the prediction time T and no older
    than the lookback (a daily bag's start may lie up to 24 h before T - lookback); ±MAX_ABS_HOURS
    where the model's extraction settings are unknown."""
    high = float(window_hours) if window_hours is not None else MAX_ABS_HOURS
    low = high - 24.0 * float(lookback_days) - 24.0 if window_hours is not None and lookback_days is not None \
        else -MAX_ABS_HOURS
    return low, high


def check_bags(fs, low: float, high: float) -> None:
    """``RequestError`` naming the first row whose bags start outside [low, high) hours (or at no
    finite hour)."""
    hours = fs.bag_hours.astype(np.float64)
    bad = np.flatnonzero(~np.isfinite(hours) | (hours < low) | (hours >= high))
    if bad.size:
        row = int(np.searchsorted(fs.bag_offsets, bad[0], side="right") - 1)
        raise RequestError(f"column 'bag_hours' row {row}: a bag starts outside the model's window [{low:g}, "
                           f"{high:g}) hours after admission ({bad.size} such bags)")


def _whole_numbers(col: pd.Series, name: str) -> np.ndarray:
    """int64 values of a column of whole numbers >= 0 (no null, no NaN, no fraction)."""
    values = pd.to_numeric(col, errors="coerce")  # text -> NaN
    x = values.to_numpy(dtype=np.float64, na_value=np.nan)
    bad = ~np.isfinite(x) | (x < 0) | (x != np.round(x))
    if col.map(lambda v: isinstance(v, (bool, np.bool_))).any():
        bad |= col.map(lambda v: isinstance(v, (bool, np.bool_))).to_numpy()
    if bad.any():
        raise RequestError(f"column {name!r} row {int(np.flatnonzero(bad)[0])} must be a whole number >= 0 "
                           f"({int(bad.sum())} such rows)")
    return x.astype(np.int64)


def _observed_hours(frame: pd.DataFrame) -> np.ndarray:
    """float32 ``observed_hours``: null / NaN -> NaN (not recorded); not a number, negative or infinite -> error."""
    col = frame["observed_hours"]
    text = col.map(lambda v: isinstance(v, (str, bytes, bool, np.bool_, list, dict, tuple)))
    values = pd.to_numeric(col.where(~text, np.nan), errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    bad = text.to_numpy() | np.isinf(values) | (values < 0)
    if bad.any():
        raise RequestError(f"column 'observed_hours' row {int(np.flatnonzero(bad)[0])} must be a number of hours "
                           f">= 0, or null when not recorded ({int(bad.sum())} such rows)")
    return values.astype(np.float32)


class MortalityRiskModel(mlflow.pyfunc.PythonModel):
    """Loads the checkpoint once; ``predict`` returns the risk table of a features DataFrame.

    The loaded model is only read by ``predict`` (evaluation mode, no gradients, sampling mode
    and generator passed per call), so one instance serves concurrent requests."""

    def load_context(self, context) -> None:
        from pipeline.core import fileio
        from pipeline.runs.formats import load_model

        self.model, self.info = load_model(context.artifacts["checkpoint"])  # best.pt or baseline.npz (formats)
        if hasattr(self.model, "requires_grad_"):  # a torch model: inference only; no global autograd switch
            self.model.eval().requires_grad_(False)  # (the host process may train)
        self.vocab_sizes = fileio.read_json(context.artifacts["model_info"])["vocab_sizes"]
        from pipeline.engine import risk

        self.policy = risk.policy_of(self.info)  # the run's calibration and refer rule (None: a run without one)
        self.context_vocab = fileio.read_json(context.artifacts["vocab"])["context"] if self.policy else None
        extraction = fileio.read_json(context.artifacts["extraction"]) if "extraction" in context.artifacts else {}
        self.window_hours = (extraction.get("config") or {}).get("prediction_hours")  # None: not logged
        self.lookback_days = (extraction.get("config") or {}).get("lookback_days")
        if self.window_hours is None:
            log.warning("the model was logged without its extraction settings: before_prediction_time cannot be "
                        "derived from an input's observed_hours and stays False")

    def to_device(self, device) -> None:
        """Move a torch model to ``device`` (``serve --device``); a classical baseline stays as it is."""
        if hasattr(self.model, "to"):
            self.model = self.model.to(device)

    def check_request(self, model_input, params: dict | None = None) -> None:
        """Raise ``RequestError`` (one line) unless ``predict`` can score this request (the server's
        guard asks before MLflow parses a request)."""
        request_settings(params, self.info)
        read_request(model_input, self.vocab_sizes, self.window_hours, self.model.value_channel,
                     self.lookback_days)

    def predict(self, context, model_input: pd.DataFrame, params: dict[str, Any] | None = None) -> pd.DataFrame:
        """Risk table (one row per input row, same order) of a pandas features DataFrame."""
        from pipeline.core.devices import model_device
        from pipeline.engine import predict, risk

        settings = request_settings(params, self.info)
        fs = read_request(model_input, self.vocab_sizes, self.window_hours, self.model.value_channel,
                          self.lookback_days)
        return risk.score_features(self.model, fs, settings.samples, self.info.refer_threshold,
                                   settings.batch_size, self.info.max_bags, self.info.max_tokens,
                                   predict.seeded_generator(settings.seed, model_device(self.model)),
                                   risk.refer_measure_of(self.info), self.policy, self.context_vocab)


def signature(default_samples: int):
    """Input = the features columns a model reads (``contracts.FEATURES``; the others optional and
    ignored), output = the risk table (``contracts.RISK``), params = samples / batch_size / seed."""
    from mlflow.models import ModelSignature
    from mlflow.types.schema import AnyType, ColSpec, ParamSchema, ParamSpec, Schema

    from pipeline.core.contracts import RISK, mlflow_type

    # List columns are AnyType: read_request checks them (MLflow's own check of a list column refuses
    # whole numbers in a float list, and its message quotes the rows).
    inputs = Schema([ColSpec(AnyType() if "list<" in FEATURES.column(c).type else mlflow_type(FEATURES.column(c).type),
                             c, required=c not in PYFUNC_OPTIONAL) for c in (*INPUT_REQUIRED, *PYFUNC_OPTIONAL)]
                    + [ColSpec(AnyType(), c, required=False) for c in INPUT_IGNORED])
    outputs = Schema([ColSpec(mlflow_type(c.type), c.name) for c in RISK.columns])
    params = ParamSchema([
        ParamSpec("samples", "long", int(default_samples)),
        ParamSpec("batch_size", "long", DEFAULT_BATCH),
        ParamSpec("seed", "long", 0),
    ])
    return ModelSignature(inputs=inputs, outputs=outputs, params=params)


def requirements() -> list[str]:
    """Pinned pip requirements of the loaded model (no inference subprocess)."""
    from importlib.metadata import version

    pins = [f"{name}=={version(name).split('+')[0]}" for name in ("torch", "numpy", "pandas", "pyarrow", "mlflow")]
    return pins


def code_copy(dest: Path) -> Path:
    """Copy the ``pipeline`` package's ``.py`` files (no caches) to ``dest/pipeline``."""
    src = Path(__file__).resolve().parents[1]  # pipeline/runs/pyfunc.py -> pipeline/
    out = dest / "pipeline"
    shutil.copytree(src, out, ignore=lambda d, names: [n for n in names if n == "__pycache__" or
                                                       (Path(d, n).is_file() and not n.endswith(".py"))])
    return out


def log_model(checkpoint: Path | str, vocab: Path | str, model_info: Path | str, default_samples: int):
    """Log the pyfunc into the active MLflow run under ``MODEL_ARTIFACT``; returns ModelInfo."""
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        # MLflow's advice to add an input example: the signature is explicit and an input example
        # would copy admissions into the model directory.
        warnings.simplefilter("ignore", UserWarning)
        code = code_copy(Path(tmp))
        artifacts = {"checkpoint": str(checkpoint), "vocab": str(vocab), "model_info": str(model_info)}
        manifest = Path(vocab).parent / MANIFEST
        if manifest.exists():
            from pipeline.core import fileio
            from pipeline.data.mimic.sources.tables import LEGACY, release_of

            saved = fileio.read_json(manifest)
            kept = {k: saved[k] for k in ("feature_version", "config") if k in saved}
            if release_of(saved) is not LEGACY:  # a model recording no release is MIMIC-III's
                kept["release"] = saved["release"]
            fileio.write_json(Path(tmp) / EXTRACTION, kept)
            artifacts["extraction"] = str(Path(tmp) / EXTRACTION)
        return mlflow.pyfunc.log_model(
            name=MODEL_ARTIFACT,
            python_model=str(MODEL_CODE),
            artifacts=artifacts,
            code_paths=[str(code)],
            signature=signature(default_samples),
            pip_requirements=requirements(),
        )
