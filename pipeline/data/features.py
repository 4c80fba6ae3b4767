"""Features files -> validated flat arrays (``FeatureSet``), by the contract ``contracts.FEATURES``.

A split is held as flat numpy arrays with offsets (no Python object per bag), so a few
hundred thousand admissions stay small in memory. ``load_split`` reads a whole file,
``iter_parquet`` streams one by row chunks (scoring), ``from_pandas`` reads a DataFrame (the
pyfunc). Every reader names the file, column and row of the first bad value; ``data.consistency`` refuses a
row that contradicts itself (what `score` and `serve` ask of features not written by the extraction).
Batches for the models are made from a FeatureSet by ``pipeline.data.batches``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa

from pipeline.core.contracts import FEATURES, Use, accepts, arrow_type
from pipeline.core.errors import PipelineError

REQUIRED = FEATURES.names(Use.REQUIRED)  # columns every use needs
(LABEL,) = FEATURES.names(Use.LABEL)  # required for training and validation, optional for scoring
WINDOW = FEATURES.names(Use.WINDOW)  # optional (features of FEATURE_VERSION 2): observed_hours, before_prediction_time
(VALUES,) = FEATURES.names(Use.VALUES)  # optional (FEATURE_VERSION 3): bag_values, the value channel
OPTIONAL = (LABEL, *WINDOW, VALUES)  # read where present


class FeatureError(PipelineError, ValueError):
    """Bad feature input; the message names the file, column and row."""


@dataclass
class FeatureSet:
    """One split in flat arrays. N admissions, M bags, Z token occurrences."""

    keys: np.ndarray  # (N,) str pseudonyms
    label: np.ndarray  # (N,) float32 0/1; nan where the input has no label
    n_events: np.ndarray  # (N,) int32 events used before the prediction time
    context: np.ndarray  # (N, C) int32 context ids, 0-padded
    bag_offsets: np.ndarray  # (N+1,) int64: bags of admission i are bag_offsets[i]:bag_offsets[i+1]
    bag_hours: np.ndarray  # (M,) float32 bag start hours
    token_offsets: np.ndarray  # (M+1,) int64: tokens of bag j are token_offsets[j]:token_offsets[j+1]
    tokens: np.ndarray  # (Z,) int32 token ids
    source: str = "<memory>"  # file name used in error messages
    values: np.ndarray | None = None  # (Z,) float32 value channel beside each token (None: the input has none)
    observed_hours: np.ndarray | None = None  # (N,) float32 hours of the window the data covers; nan: not recorded
    before_prediction_time: np.ndarray | None = None  # (N,) bool: the data ends before T (partial window)

    def __len__(self) -> int:
        return int(self.keys.shape[0])

    @property
    def n_bags(self) -> np.ndarray:
        """Bags per admission, (N,)."""
        return np.diff(self.bag_offsets)

    @property
    def has_labels(self) -> bool:
        return bool(len(self)) and not np.isnan(self.label).any()

    def check_vocab(self, n_tokens: int, n_context: int) -> None:
        """Raise naming the first row whose ids fall outside the vocabulary."""
        for name, ids, size, owner in (
            ("bags", self.tokens, n_tokens, self._token_row),
            ("context", self.context.ravel(), n_context, lambda j: j // max(self.context.shape[1], 1)),
        ):
            bad = np.flatnonzero((ids < 0) | (ids >= size))
            if bad.size:
                j = int(bad[0])
                raise FeatureError(
                    f"{self.source}: column {name!r} row {owner(j)}: id {int(ids[j])} outside the vocabulary "
                    f"[0, {size}) ({bad.size} bad ids); were these features extracted with this vocab.json?"
                )

    def _token_row(self, z: int) -> int:
        bag = int(np.searchsorted(self.token_offsets, z, side="right")) - 1
        return int(np.searchsorted(self.bag_offsets, bag, side="right")) - 1

    def require_values(self) -> None:
        """Raise unless the input has the value channel (``bag_values``) that a model with one reads."""
        if self.values is None:
            raise FeatureError(f"{self.source}: column {VALUES!r} is missing, and the model has a value channel "
                               "(trained with --value-channel); extract the features again with --values")

    def require_labels(self) -> None:
        if not len(self):
            raise FeatureError(f"{self.source}: no admissions")
        bad = np.flatnonzero(np.isnan(self.label))
        if bad.size:
            raise FeatureError(f"{self.source}: column 'label' row {int(bad[0])} is missing ({bad.size} rows)")


# ---------------------------------------------------------------------------- loading


def _list_parts(col, name: str, source: str) -> tuple[np.ndarray, pa.Array]:
    """(offsets rebased to 0, flattened child) of a list column; raise on nulls."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if not pa.types.is_list(arr.type) and not pa.types.is_large_list(arr.type):
        raise FeatureError(f"{source}: column {name!r} must be a list, got {arr.type}")
    if arr.null_count:
        row = int(np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False))[0])
        raise FeatureError(f"{source}: column {name!r} row {row} is null")
    offsets = arr.offsets.to_numpy().astype(np.int64)
    return offsets - offsets[0], arr.flatten()


def _ints(arr: pa.Array, name: str, source: str) -> np.ndarray:
    if arr.null_count:
        raise FeatureError(f"{source}: column {name!r} holds a null id")
    if not pa.types.is_integer(arr.type):
        raise FeatureError(f"{source}: column {name!r} must hold integers, got {arr.type}")
    return arr.to_numpy(zero_copy_only=False).astype(np.int32)


def from_arrow(table: pa.Table | pa.RecordBatch, source: str = "<memory>", row0: int = 0) -> FeatureSet:
    """Validate and flatten a features table (the extract schema; ``label`` optional).

    ``row0`` is added to row numbers in error messages (for chunks of a larger file).
    """
    names = set(table.schema.names)
    missing = [c for c in REQUIRED if c not in names]
    if missing:
        raise FeatureError(f"{source}: missing column(s) {missing}; expected the features written by the extraction")
    n = table.num_rows
    try:
        ctx_off, ctx_vals = _list_parts(table.column("context"), "context", source)
        bag_off, bag_lists = _list_parts(table.column("bags"), "bags", source)
        hour_off, hours = _list_parts(table.column("bag_hours"), "bag_hours", source)
    except FeatureError as exc:
        raise FeatureError(_shift_row(str(exc), row0)) from None
    if bag_lists.null_count:
        j = _first_null(bag_lists)
        row = int(np.searchsorted(bag_off, j, side="right")) - 1
        raise FeatureError(f"{source}: column 'bags' row {row + row0} holds a null bag")
    tok_off, toks = _list_parts(bag_lists, "bags", source)
    if not np.array_equal(bag_off, hour_off):
        row = int(np.flatnonzero(np.diff(bag_off) != np.diff(hour_off))[0])
        raise FeatureError(f"{source}: row {row + row0}: 'bags' and 'bag_hours' have different lengths")
    hours_np = hours.to_numpy(zero_copy_only=False).astype(np.float32)
    if hours.null_count or not np.isfinite(hours_np).all():
        j = int(np.flatnonzero(~np.isfinite(hours_np) | hours.is_null().to_numpy(zero_copy_only=False))[0])
        row = int(np.searchsorted(bag_off, j, side="right")) - 1
        raise FeatureError(f"{source}: column 'bag_hours' row {row + row0} is not a finite number")
    ctx_len = np.diff(ctx_off)
    width = int(ctx_len.max()) if n else 0
    context = np.zeros((n, width), dtype=np.int32)  # (N, C) 0-padded
    rows = np.repeat(np.arange(n), ctx_len)
    context[rows, ranks(ctx_len)] = _ints(ctx_vals, "context", source)
    key_col = table.column("key")
    if key_col.null_count:
        raise FeatureError(f"{source}: column 'key' row {_first_null(key_col) + row0} is null")
    keys = key_col.to_numpy(zero_copy_only=False).astype(str)
    events = table.column("n_events")
    if events.null_count:
        raise FeatureError(f"{source}: column 'n_events' row {_first_null(events) + row0} is null")
    label = _labels(table, source, row0) if LABEL in names else np.full(n, np.nan, dtype=np.float32)
    observed = _observed(table, source, row0) if WINDOW[0] in names else None
    before = None
    if WINDOW[1] in names:
        col = table.column(WINDOW[1])
        if col.null_count:
            raise FeatureError(f"{source}: column {WINDOW[1]!r} row {_first_null(col) + row0} is null")
        if not pa.types.is_boolean(col.type):
            raise FeatureError(f"{source}: column {WINDOW[1]!r} must hold booleans, got {col.type}")
        before = col.to_numpy(zero_copy_only=False).astype(bool)
    values = _values(table, bag_off, tok_off, source, row0) if VALUES in names else None
    return FeatureSet(
        keys=keys,
        label=label,
        n_events=events.to_numpy(zero_copy_only=False).astype(np.int32),
        context=context,
        bag_offsets=bag_off,
        bag_hours=hours_np,
        token_offsets=tok_off,
        tokens=_ints(toks, "bags", source),
        source=source,
        observed_hours=observed,
        before_prediction_time=before,
        values=values,
    )


def _values(table, bag_off: np.ndarray, tok_off: np.ndarray, source: str, row0: int) -> np.ndarray:
    """``bag_values`` flattened to (Z,) float32, checked to mirror ``bags`` list for list and to be finite."""
    try:
        off, lists = _list_parts(table.column(VALUES), VALUES, source)
    except FeatureError as exc:
        raise FeatureError(_shift_row(str(exc), row0)) from None
    if not np.array_equal(off, bag_off):
        row = int(np.flatnonzero(np.diff(off) != np.diff(bag_off))[0])
        raise FeatureError(f"{source}: row {row + row0}: 'bags' and {VALUES!r} have different lengths")
    if lists.null_count:
        row = int(np.searchsorted(bag_off, _first_null(lists), side="right")) - 1
        raise FeatureError(f"{source}: column {VALUES!r} row {row + row0} holds a null list")
    voff, vals = _list_parts(lists, VALUES, source)
    if not np.array_equal(voff, tok_off):
        bag = int(np.flatnonzero(np.diff(voff) != np.diff(tok_off))[0])
        row = int(np.searchsorted(bag_off, bag, side="right")) - 1
        raise FeatureError(f"{source}: row {row + row0}: a bag of 'bags' and its list in {VALUES!r} have different "
                           "lengths")
    if not (pa.types.is_floating(vals.type) or pa.types.is_integer(vals.type) or pa.types.is_null(vals.type)):
        raise FeatureError(f"{source}: column {VALUES!r} must hold numbers, got {vals.type}")
    v = vals.to_numpy(zero_copy_only=False).astype(np.float32)  # nulls -> nan
    bad = np.flatnonzero(~np.isfinite(v))
    if bad.size:
        bag = int(np.searchsorted(tok_off, int(bad[0]), side="right")) - 1
        row = int(np.searchsorted(bag_off, bag, side="right")) - 1
        raise FeatureError(f"{source}: column {VALUES!r} row {row + row0} holds a value that is not a finite number")
    return v


def _observed(table, source: str, row0: int) -> np.ndarray:
    """``observed_hours`` as float32 (null -> nan); a negative or infinite value names its row."""
    col = table.column(WINDOW[0])
    if not (pa.types.is_floating(col.type) or pa.types.is_integer(col.type)):
        raise FeatureError(f"{source}: column {WINDOW[0]!r} must hold numbers, got {col.type}")
    h = col.to_numpy(zero_copy_only=False).astype(np.float32)  # nulls -> nan
    bad = np.flatnonzero(np.isinf(h) | (h < 0))
    if bad.size:
        raise FeatureError(f"{source}: column {WINDOW[0]!r} row {int(bad[0]) + row0} = {h[bad[0]]}: hours must be "
                           "finite and >= 0")
    return h


def _labels(table, source: str, row0: int) -> np.ndarray:
    col = table.column(LABEL)
    y = col.to_numpy(zero_copy_only=False).astype(np.float32)  # nulls -> nan
    bad = np.flatnonzero(~np.isnan(y) & (y != 0) & (y != 1))
    if bad.size:
        raise FeatureError(f"{source}: column 'label' row {int(bad[0]) + row0} = {y[bad[0]]}: labels must be 0 or 1")
    return y


def _first_null(col) -> int:
    return int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])


def _shift_row(msg: str, row0: int) -> str:
    if not row0:
        return msg
    head, sep, tail = msg.partition(" row ")
    num, _, rest = tail.partition(" ")
    return f"{head}{sep}{int(num) + row0} {rest}" if sep and num.isdigit() else msg


def check_file(path: Path | str, values: bool = False) -> None:
    """Raise ``FeatureError`` naming the file and column unless ``path`` is a readable features file
    whose required columns (and, with ``values``, ``bag_values``) have their contract types (before
    any row is read)."""
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise FeatureError(f"{path}: not a readable Parquet file ({exc})") from None
    missing = [c for c in REQUIRED if c not in schema.names]
    if missing:
        raise FeatureError(f"{path}: missing column(s) {missing}; expected the features written by the extraction")
    if values and VALUES not in schema.names:
        raise FeatureError(f"{path}: column {VALUES!r} is missing, and the model has a value channel "
                           "(trained with --value-channel); extract the features again with --values")
    for name in (*REQUIRED, VALUES) if values else REQUIRED:
        typ, want = schema.field(name).type, FEATURES.column(name).type
        if not accepts(want, typ):
            raise FeatureError(f"{path}: column {name!r} has type {typ}, expected {want}")


def _columns(names, values: bool) -> list[str]:
    """The columns a reader takes of a file with columns ``names``: the required ones and the optional
    ones present; ``bag_values`` only for ``values`` (a model with a value channel), so that a model
    without one neither holds nor checks it."""
    return [c for c in (*REQUIRED, *OPTIONAL) if c in names and (values or c != VALUES)]


def load_split(path: Path | str, require_labels: bool = True, values: bool = False) -> FeatureSet:
    """Read one split Parquet file (e.g. ``FEATURES/train.parquet``) into a FeatureSet (with its
    value channel, where the file has one, for ``values``)."""
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.exists():
        raise FeatureError(f"{path}: features file not found (run the extraction first)")
    fs = from_arrow(pq.read_table(path, columns=_columns(pq.read_schema(path).names, values)), source=str(path))
    if require_labels:
        fs.require_labels()
    return fs


def from_pandas(frame, source: str = "<dataframe>") -> FeatureSet:
    """FeatureSet from a pandas DataFrame with the features columns (lists as lists/arrays)."""
    missing = [c for c in REQUIRED if c not in frame.columns]
    if missing:
        raise FeatureError(f"{source}: missing column(s) {missing}")
    # pandas holds labels as floats (NaN where absent); every other column takes its contract type
    types = {c: (pa.float32() if c == LABEL else arrow_type(FEATURES.column(c).type)) for c in (*REQUIRED, *OPTIONAL)}
    arrays, names = [], []
    for name, typ in types.items():
        if name not in frame.columns:
            continue
        values = frame[name].tolist()
        depth = FEATURES.column(name).type.count("list<") if name != LABEL else 0
        spec = FEATURES.column(name).type if name != LABEL else "float32"
        try:
            arrays.append(_converted(values, typ, depth))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError):
            raise FeatureError(f"{source}: column {name!r} row {_unconvertible(values, typ, depth)} is not a "
                               f"{spec}") from None  # Arrow's message quotes the value: not repeated
        names.append(name)
    return from_arrow(pa.table(arrays, names=names), source=source)


def _leaf(typ):
    while pa.types.is_list(typ) or pa.types.is_large_list(typ):
        typ = typ.value_type
    return typ


def _converted(values: list, typ, depth: int) -> pa.Array:
    """``values`` as an Arrow array of ``typ``. Numbers convert safely (an id 1.5 or a NaN where an
    integer belongs is refused, not truncated; whole numbers may come as floats, hours as integers);
    a boolean is not a number; strings and booleans take their type as they are."""
    if depth:
        values = [_nested_list(v, depth) for v in values]
    leaf = _leaf(typ)
    if not (pa.types.is_integer(leaf) or pa.types.is_floating(leaf)):
        return pa.array(values, type=typ)
    inferred = pa.array(values)
    if pa.types.is_boolean(_leaf(inferred.type)) or pa.types.is_string(_leaf(inferred.type)):
        raise TypeError("not a number")
    return inferred.cast(typ, safe=True)


def _nested_list(value, depth: int):
    """``value`` (lists, tuples or numpy arrays, ``depth`` levels deep) as nested Python lists; None
    stays None; a string, a mapping or a scalar where a list belongs is a TypeError."""
    if value is None:
        return None
    if isinstance(value, (str, bytes, dict)) or not hasattr(value, "__iter__"):
        raise TypeError("not a list")
    return [_nested_list(v, depth - 1) for v in value] if depth > 1 else list(value)


def _unconvertible(values: list, typ, depth: int) -> int:
    """Index of the first value that is not a ``depth``-deep list Arrow converts to ``typ`` (-1: none)."""
    for i, v in enumerate(values):
        try:
            _converted([v], typ, depth)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError):
            return i
    return -1


def iter_parquet(path: Path | str, chunk_rows: int = 4096, values: bool = False) -> Iterator[FeatureSet]:
    """Stream a features file by chunks of ``chunk_rows`` admissions (bounded memory; the value
    channel, where present, for ``values``)."""
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(path)
    cols = _columns(pf.schema_arrow.names, values)
    row0 = 0
    for rb in pf.iter_batches(batch_size=chunk_rows, columns=cols):
        yield from_arrow(rb, source=str(path), row0=row0)
        row0 += rb.num_rows


def ranks(counts: np.ndarray) -> np.ndarray:
    """0..c-1 for every count c, concatenated: [2, 0, 3] -> [0, 1, 0, 1, 2]."""
    total = int(counts.sum())
    starts = np.repeat(np.cumsum(counts) - counts, counts)
    return np.arange(total) - starts


def subset(fs: FeatureSet, rows) -> FeatureSet:
    """The admissions ``rows`` (indices, in that order) of ``fs`` as a FeatureSet of their own."""
    rows = np.asarray(rows, dtype=np.int64)
    nb = fs.n_bags[rows]  # (n,) bags of each kept admission
    bags = np.repeat(fs.bag_offsets[rows], nb) + ranks(nb)  # (m,) the kept bags, in order
    nt = (fs.token_offsets[bags + 1] - fs.token_offsets[bags])  # (m,) tokens of each kept bag
    toks = np.repeat(fs.token_offsets[bags], nt) + ranks(nt)  # (z,) the kept token occurrences
    pick = (lambda a: None if a is None else a[rows])  # noqa: E731
    return FeatureSet(keys=fs.keys[rows], label=fs.label[rows], n_events=fs.n_events[rows],
                      context=fs.context[rows], bag_offsets=np.concatenate([[0], np.cumsum(nb)]).astype(np.int64),
                      bag_hours=fs.bag_hours[bags], token_offsets=np.concatenate([[0], np.cumsum(nt)]).astype(np.int64),
                      tokens=fs.tokens[toks], source=fs.source, values=None if fs.values is None else fs.values[toks],
                      observed_hours=pick(fs.observed_hours), before_prediction_time=pick(fs.before_prediction_time))


def calibration_mask(keys, share: float) -> np.ndarray:
    """(N,) bool: the admissions whose pseudonym falls in the calibration share (a fixed hash of the key, so the
    same admission is always on the same side, whatever else the split holds)."""
    import hashlib

    u = np.array([int.from_bytes(hashlib.sha256(str(k).encode()).digest()[:8], "big") / 2.0 ** 64 for k in keys])
    return u < float(share)


def context_groups(fs: FeatureSet, context_vocab: list[str], family: str) -> np.ndarray:
    """(N,) each admission's value of a context ``family`` (``age``, ``gender``: the vocabulary's
    ``family:value`` tokens), ``<none>`` where it has none."""
    values = np.array([t.split(":", 1)[1] if t.startswith(family + ":") else "" for t in context_vocab] + [""])
    ids = np.where((fs.context >= 0) & (fs.context < len(context_vocab)), fs.context, len(context_vocab))  # (N, C)
    names = values[ids]  # (N, C): the family's value, "" for other tokens and padding
    first = np.argmax(names != "", axis=1)
    out = names[np.arange(len(fs)), first]
    return np.where(out == "", "<none>", out)
