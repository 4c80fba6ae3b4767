"""A request to a mortality run's pyfunc: a features table in, a validated FeatureSet and the request's params out.

``read_request`` reads a request DataFrame (the features columns of ``contracts.FEATURES``) and its params by
``request_settings``, for the mortality scorer (``tasks.mortality.scorer``) that the MLflow pyfunc
(``pipeline.runs.pyfunc``) and ``serve`` call: a bad request raises ``RequestError`` (``tasks.base``), one line
naming the column and the row (its index in the request), never a value of a row. ``observed_hours`` is
optional: null / NaN (or the column absent) means not recorded, the row is scored and comes back with
observed_hours -1 and before_prediction_time false (as features of version 1); a negative or infinite value
is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from pipeline.core.contracts import DEFAULT_BATCH, FEATURES, PYFUNC_OPTIONAL, Use
from pipeline.tasks.base import RequestError

INPUT_REQUIRED = FEATURES.names(Use.REQUIRED)  # the columns a request must hold


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
